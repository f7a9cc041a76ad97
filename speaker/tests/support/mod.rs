//! Runs speaker library pieces inside a lab node: a thread enters the node's network
//! namespace and runs a current-thread tokio runtime there, so every socket the
//! pieces open (rtnetlink, AF_PACKET, raw ICMPv6, UDP) lives in that namespace.
//! Stopping the runtime drops every task and socket at once, as a crash would.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::thread::JoinHandle;

use ferrolb_testbed::netns::{self, Netns};
use tokio::sync::oneshot;

/// A runtime running inside a namespace; stopped when dropped.
pub struct NsRuntime {
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl NsRuntime {
    /// Runs `setup` inside `ns` on a fresh runtime and returns what it returns; the
    /// tasks it spawned keep running until [`NsRuntime::stop`].
    pub fn start<T, F>(ns: &Netns, setup: F) -> (T, NsRuntime)
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let path = ns.path();
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            netns::enter(&path).expect("enter the node namespace");
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async move {
                let _ = tx.send(setup());
                let _ = stop_rx.await;
            });
            // Dropping the runtime cancels every task and closes every socket.
        });
        let value = rx.recv().expect("setup ran");
        (value, NsRuntime { stop: Some(stop_tx), thread: Some(thread) })
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
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(f)
}
