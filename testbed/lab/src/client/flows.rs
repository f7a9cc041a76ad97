//! Many TCP connections at once, each from a chosen source port, held open: which
//! node answered each, and whether each still carries data after a change.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use super::serve::Serving;
use crate::Error;
use crate::netns::Netns;

/// A TCP server inside a namespace that sends its name on every connection, then echoes
/// what it reads until the peer closes. Stops accepting when dropped.
#[derive(Debug)]
pub struct EchoServer {
    _serving: Serving,
}

impl EchoServer {
    /// Serves on `bind` inside `ns` (the address need not be configured yet), greeting
    /// with `name` and a newline.
    pub fn start(ns: &Netns, bind: SocketAddr, name: &str) -> Result<Self, Error> {
        Self::serve(ns, bind, name, true)
    }

    /// Like [`EchoServer::start`], but what it reads is discarded, not echoed (a sink
    /// for throughput).
    pub fn sink(ns: &Netns, bind: SocketAddr, name: &str) -> Result<Self, Error> {
        Self::serve(ns, bind, name, false)
    }

    fn serve(ns: &Netns, bind: SocketAddr, name: &str, echo: bool) -> Result<Self, Error> {
        let greeting = format!("{name}\n");
        let serving = Serving::start(ns, bind, 1024, move |mut s| {
            let greeting = greeting.clone();
            std::thread::spawn(move || {
                if s.write_all(greeting.as_bytes()).is_err() {
                    return;
                }
                let mut buf = vec![0u8; if echo { 64 } else { 256 * 1024 }];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || (echo && s.write_all(&buf[..n]).is_err()) {
                        return;
                    }
                }
            });
        })?;
        Ok(EchoServer { _serving: serving })
    }
}

/// One connection to an [`EchoServer`].
#[derive(Debug)]
pub struct Flow {
    /// Its source port.
    pub port: u16,
    /// The name the server greeted with; None when the connection failed.
    pub node: Option<String>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    stream: Option<TcpStream>,
}

impl Flow {
    /// Sends one byte and reads its echo within `timeout`: the connection still works.
    pub fn echoes(&mut self, timeout: Duration) -> bool {
        let Some(s) = self.stream.as_mut() else { return false };
        let _ = s.set_read_timeout(Some(timeout));
        let mut b = [0u8; 1];
        s.write_all(b"x").is_ok() && s.read_exact(&mut b).is_ok() && b == *b"x"
    }
}

/// Opens one connection to `dst` from `source` per port of `ports`, inside `ns`, each
/// waiting at most `timeout` for its greeting; failures are recorded, not returned.
pub fn open(
    ns: &Netns,
    source: IpAddr,
    ports: std::ops::Range<u16>,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<Vec<Flow>, Error> {
    // Sockets are made inside the namespace; they stay there when used from elsewhere.
    let sockets = ns.run(move || -> Vec<(u16, std::io::Result<Socket>)> {
        ports
            .map(|port| {
                let s = (|| {
                    let s = Socket::new(Domain::for_address(dst), Type::STREAM, Some(Protocol::TCP))?;
                    s.set_reuse_address(true)?;
                    s.bind(&SocketAddr::new(source, port).into())?;
                    Ok(s)
                })();
                (port, s)
            })
            .collect()
    })?;
    let flows = std::thread::scope(|scope| {
        let workers: Vec<_> = sockets
            .into_iter()
            .map(|(port, s)| scope.spawn(move || connect(port, s, dst, timeout)))
            .collect();
        workers.into_iter().filter_map(|w| w.join().ok()).collect::<Vec<Flow>>()
    });
    Ok(flows)
}

fn connect(port: u16, s: std::io::Result<Socket>, dst: SocketAddr, timeout: Duration) -> Flow {
    let attempt = || -> std::io::Result<(String, TcpStream)> {
        let s = s?;
        s.connect_timeout(&dst.into(), timeout)?;
        let mut stream: TcpStream = s.into();
        stream.set_read_timeout(Some(timeout))?;
        let mut name = Vec::new();
        let mut b = [0u8; 1];
        while stream.read_exact(&mut b).is_ok() && b[0] != b'\n' && name.len() < 64 {
            name.push(b[0]);
        }
        if b[0] != b'\n' {
            return Err(std::io::Error::other("no greeting"));
        }
        Ok((String::from_utf8_lossy(&name).into_owned(), stream))
    };
    match attempt() {
        Ok((node, stream)) => Flow { port, node: Some(node), error: None, stream: Some(stream) },
        Err(e) => Flow { port, node: None, error: Some(e.to_string()), stream: None },
    }
}

/// How many flows each node answered ("failed" for those that did not connect).
pub fn split(flows: &[Flow]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for f in flows {
        *m.entry(f.node.clone().unwrap_or_else(|| "failed".into())).or_insert(0) += 1;
    }
    m
}
