//! A TCP listener inside a namespace and its accept loop, shared by the lab's servers.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::Error;
use crate::netns::Netns;

/// Accepts connections on `bind` inside a namespace and hands each (blocking) to a
/// handler; stops accepting when dropped.
pub(super) struct Serving {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Serving")
    }
}

impl Serving {
    /// Listens on `bind` inside `ns` (the address need not be configured yet, like a VIP
    /// before takeover) with `backlog`, calling `on_accept` for every connection.
    pub(super) fn start(
        ns: &Netns,
        bind: SocketAddr,
        backlog: i32,
        mut on_accept: impl FnMut(TcpStream) + Send + 'static,
    ) -> Result<Self, Error> {
        let listener = ns.run(move || -> std::io::Result<TcpListener> {
            let s = Socket::new(Domain::for_address(bind), Type::STREAM, Some(Protocol::TCP))?;
            s.set_reuse_address(true)?;
            if bind.is_ipv4() {
                s.set_freebind_v4(true)?;
            } else {
                s.set_freebind_v6(true)?;
            }
            s.bind(&bind.into())?;
            s.listen(backlog)?;
            let l: TcpListener = s.into();
            l.set_nonblocking(true)?;
            Ok(l)
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        on_accept(s);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Ok(Serving { stop, handle: Some(handle) })
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
