//! Library pieces run inside a lab node: a thread enters the node's network namespace
//! and runs a current-thread tokio runtime there, so every socket the pieces open
//! (rtnetlink, AF_PACKET, raw ICMPv6, UDP) lives in that namespace. Stopping the
//! runtime drops every task and socket at once, as a crash would.

use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::Error;
use crate::netns::{self, Netns};

/// A runtime running inside a namespace; stopped when dropped.
#[derive(Debug)]
pub struct NsRuntime {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl NsRuntime {
    /// Runs `setup` inside `ns` on a fresh runtime and returns what it returns; the
    /// tasks it spawned keep running until [`NsRuntime::stop`].
    pub fn start<T, F>(ns: &Netns, setup: F) -> Result<(T, NsRuntime), Error>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let path = ns.path();
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = netns::enter(&path).and_then(|()| {
                tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Error::from)
            });
            let rt = match rt {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                let _ = tx.send(Ok(setup()));
                let _ = stop_rx.await;
            });
            // Dropping the runtime cancels every task and closes every socket.
        });
        let mut runtime = NsRuntime { stop: Some(stop_tx), thread: Some(thread) };
        match rx.recv() {
            Ok(Ok(value)) => Ok((value, runtime)),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                runtime.halt();
                Err(Error::Thread(format!("the runtime in {} died during setup", ns.name())))
            }
        }
    }

    /// Stops the runtime abruptly (no goodbye on any protocol).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for NsRuntime {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Runs a future to completion on a throwaway runtime (for async handle methods).
pub fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, Error> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(f))
}
