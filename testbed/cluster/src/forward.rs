//! Loopback TCP forwarders: the host reaches apiservers that live in lab namespaces
//! through `127.0.0.1:<port>`, never through a route into the lab.
//!
//! Each accepted connection is dialled from inside a target's namespace (a socket keeps
//! the namespace it was created in) to the first target that accepts, so a forwarder
//! over several apiservers keeps working while one of them is down.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ferrolb_lab::Error;
use ferrolb_lab::netns::Netns;

const DIAL_TIMEOUT: Duration = Duration::from_secs(2);

/// A listener on `127.0.0.1:<ephemeral>` forwarding to targets in namespaces; stops when dropped.
#[derive(Debug)]
pub struct Forwarder {
    addr: SocketAddr,
    targets: Vec<(Netns, SocketAddr)>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Listens on an ephemeral loopback port of the host namespace.
    pub fn start(targets: Vec<(Netns, SocketAddr)>) -> Result<Self, Error> {
        Self::start_on("127.0.0.1:0".parse().map_err(|_| Error::Parse("loopback".into()))?, targets)
    }

    /// Listens on `bind` of the calling thread's namespace.
    pub fn start_on(bind: SocketAddr, targets: Vec<(Netns, SocketAddr)>) -> Result<Self, Error> {
        let listener = TcpListener::bind(bind)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (targets.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("forward-{}", addr.port()))
            .spawn(move || accept_loop(&listener, &t, &s))?;
        Ok(Forwarder { addr, targets, stop, thread: Some(thread) })
    }

    /// The loopback address to connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The targets, for messages.
    pub fn target_desc(&self) -> String {
        self.targets.iter().map(|(ns, a)| format!("{a} in {}", ns.name())).collect::<Vec<_>>().join(", ")
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the blocking accept.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, targets: &[(Netns, SocketAddr)], stop: &AtomicBool) {
    for conn in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Ok(inbound) = conn else {
            // Out of descriptors or an aborted handshake: back off, never spin.
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let targets = targets.to_vec();
        std::thread::spawn(move || {
            if let Some(outbound) = dial(&targets) {
                splice(inbound, outbound);
            }
        });
    }
}

/// Connects, from inside each target's namespace in turn, to the first that accepts.
fn dial(targets: &[(Netns, SocketAddr)]) -> Option<TcpStream> {
    targets.iter().find_map(|(ns, addr)| {
        let addr = *addr;
        ns.run(move || TcpStream::connect_timeout(&addr, DIAL_TIMEOUT)).ok()?.ok()
    })
}

/// Copies both ways until either side closes.
fn splice(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else { return };
    let up = std::thread::spawn(move || copy(a, b2));
    copy(b, a2);
    let _ = up.join();
}

fn copy(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
