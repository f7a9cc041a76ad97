//! One listening socket shared by the sessions of every peer on an address.
use super::SessionHandle;
use crate::bgp::socket::{self, Password};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// Accepts BGP connections on one address and hands each to the session of its peer.
#[derive(Debug)]
pub struct Listener {
    listener: Arc<tokio::net::TcpListener>,
    peers: Arc<Mutex<HashMap<IpAddr, SessionHandle>>>,
    task: JoinHandle<()>,
}

impl Listener {
    /// Binds (e.g. `0.0.0.0:179` or `[::]:179`) and starts accepting; call within a tokio runtime.
    pub fn bind(addr: SocketAddr) -> std::io::Result<Listener> {
        let listener = Arc::new(socket::listen(addr)?);
        let peers: Arc<Mutex<HashMap<IpAddr, SessionHandle>>> = Arc::default();
        let (l, p) = (listener.clone(), peers.clone());
        let task = tokio::spawn(async move {
            let mut backoff = ferrolb_runtime::accept::AcceptBackoff::default();
            loop {
                let (stream, from) = ferrolb_runtime::accept::accept(&*l, &mut backoff, "BGP").await;
                let ip = match from.ip() {
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
                    v4 => v4,
                };
                let handle = p.lock().unwrap_or_else(|e| e.into_inner()).get(&ip).cloned();
                match handle {
                    Some(h) => h.accept(stream).await,
                    None => tracing::debug!(%from, "refused BGP connection from unknown peer"),
                }
            }
        });
        Ok(Listener { listener, peers, task })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Routes connections from the handle's peer to it, installing its MD5 key first.
    pub fn add_peer(&self, handle: &SessionHandle, password: Option<&Password>) -> std::io::Result<()> {
        if password.is_some() {
            socket::set_tcp_md5(&*self.listener, handle.peer(), password)?;
        }
        self.peers.lock().unwrap_or_else(|e| e.into_inner()).insert(handle.peer(), handle.clone());
        Ok(())
    }

    /// Stops routing connections from `peer` and removes its MD5 key.
    pub fn remove_peer(&self, peer: IpAddr) -> std::io::Result<()> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner()).remove(&peer);
        socket::set_tcp_md5(&*self.listener, peer, None)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}
