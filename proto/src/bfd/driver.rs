//! tokio driver for single-hop BFD (RFC 5881): sockets, clock and timers around the
//! sans-IO [`Session`].
//!
//! * One [`Endpoint`] per local address owns the receive socket (UDP port 3784) and one
//!   transmit socket (a source port in 49152–65535, TTL / hop limit 255), shared by every
//!   session on that address. Its task demultiplexes packets by Your Discriminator, or by
//!   the source address while that is zero (RFC 5880 §6.3).
//! * GTSM (RFC 5881 §5): packets whose TTL / hop limit is not 255 are dropped, read per
//!   packet with `IP_RECVTTL` / `IPV6_RECVHOPLIMIT` (Linux applies `IP_MINTTL` to TCP only).
//!   BFDProfile's `minimumTtl` concerns multi-hop sessions and is not used here.
//! * One task per session owns its [`Session`]; its state is published on a
//!   `watch` channel ([`BfdHandle::state`]) so a BGP session can be torn down at once.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use ferrolb_proto::bfd::driver::{Bfd, BfdConfig};
//! use ferrolb_proto::bfd::SessionConfig;
//!
//! let bfd = Bfd::new(None);
//! let cfg = BfdConfig::new("192.0.2.11".parse().unwrap(), "192.0.2.1".parse().unwrap(), SessionConfig::default());
//! let handle = bfd.spawn(cfg)?;
//! let mut state = handle.state();
//! while state.changed().await.is_ok() {
//!     if !state.borrow().is_up() { /* tear the BGP session down */ }
//! }
//! # Ok(()) }
//! ```
use super::metrics::BfdMetrics;
use super::packet::{ControlPacket, Diagnostic, State};
use super::session::{Event, Input, Session, SessionConfig, Timers};
use bytes::BytesMut;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Destination port of single-hop Control packets (RFC 5881 §4).
pub const CONTROL_PORT: u16 = 3784;
/// Source ports of Control packets (RFC 5881 §4).
pub const SOURCE_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;
/// TTL / hop limit sent and required on receipt (RFC 5881 §5).
pub const TTL: u8 = 255;

/// What a session needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdConfig {
    /// Our address (the endpoint's socket binds it).
    pub local: IpAddr,
    /// The peer's address on the same link.
    pub peer: IpAddr,
    /// Timers and passive mode.
    pub session: SessionConfig,
    /// The link's interface index when both addresses are IPv6 link-local (unnumbered
    /// BGP); 0 otherwise.
    pub scope: u32,
}

impl BfdConfig {
    /// A config for one session.
    pub fn new(local: IpAddr, peer: IpAddr, session: SessionConfig) -> Self {
        BfdConfig { local, peer, session, scope: 0 }
    }

    /// The same, between link-local addresses on the link of interface index `scope`.
    pub fn on_link(mut self, scope: u32) -> Self {
        self.scope = scope;
        self
    }
}

/// `addr:port`, scoped to `scope` when it is an IPv6 link-local address.
fn scoped(addr: IpAddr, port: u16, scope: u32) -> SocketAddr {
    match addr {
        IpAddr::V6(a) if a.is_unicast_link_local() => SocketAddr::V6(SocketAddrV6::new(a, port, 0, scope)),
        a => SocketAddr::new(a, port),
    }
}

/// What a session's watchers see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BfdState {
    /// bfd.SessionState.
    pub state: State,
    /// bfd.LocalDiag: why it last changed.
    pub diag: Diagnostic,
    /// bfd.RemoteSessionState.
    pub remote_state: State,
    /// State changes so far.
    pub transitions: u64,
    /// Times the session left Up because the path failed: not counting the peer going
    /// AdminDown on purpose (RFC 5882 §3.2 says clients must not react to that) nor our
    /// own AdminDown. A `watch` receiver may skip intermediate values (Up → Down → Up
    /// shows as Up), so clients compare this counter to notice every failure:
    /// `if now.downs > seen.downs { tear the BGP session down }`.
    pub downs: u64,
}

impl BfdState {
    /// True while Up.
    pub fn is_up(&self) -> bool {
        self.state == State::Up
    }

    /// Down after having been Up, for a reason other than the peer going AdminDown on
    /// purpose (which RFC 5882 §3.2 says must not tear down the client protocol).
    pub fn is_failure(&self) -> bool {
        self.downs > 0 && self.state != State::Up && self.remote_state != State::AdminDown
    }
}

impl Default for BfdState {
    fn default() -> Self {
        BfdState {
            state: State::Down,
            diag: Diagnostic::None,
            remote_state: State::Down,
            transitions: 0,
            downs: 0,
        }
    }
}

#[derive(Debug)]
enum Command {
    AdminDown,
    AdminUp,
    SetTimers(Timers),
}

/// Controls one session task; the task stops when every clone is dropped (after
/// telling the peer AdminDown).
#[derive(Debug, Clone)]
pub struct BfdHandle {
    cmd: mpsc::Sender<Command>,
    state: watch::Receiver<BfdState>,
    peer: IpAddr,
    local_discr: u32,
}

impl BfdHandle {
    /// A receiver of every state change: the BGP announcer awaits `changed()` on it and
    /// tears its session down when the state leaves Up.
    pub fn state(&self) -> watch::Receiver<BfdState> {
        self.state.clone()
    }

    /// The current state.
    pub fn current(&self) -> BfdState {
        *self.state.borrow()
    }

    /// The peer address.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// bfd.LocalDiscr.
    pub fn local_discr(&self) -> u32 {
        self.local_discr
    }

    /// Holds the session AdminDown, telling the peer.
    pub async fn admin_down(&self) {
        let _ = self.cmd.send(Command::AdminDown).await;
    }

    /// Leaves AdminDown.
    pub async fn admin_up(&self) {
        let _ = self.cmd.send(Command::AdminUp).await;
    }

    /// New timers (a Poll Sequence verifies them while Up).
    pub async fn set_timers(&self, t: Timers) {
        let _ = self.cmd.send(Command::SetTimers(t)).await;
    }
}

/// The endpoints by local address and scope (the link's index for a link-local one).
type Endpoints = HashMap<(IpAddr, u32), Weak<Endpoint>>;

/// Starts sessions, sharing one [`Endpoint`] per local address.
#[derive(Debug, Clone)]
pub struct Bfd {
    endpoints: Arc<Mutex<Endpoints>>,
    metrics: Option<BfdMetrics>,
}

impl Bfd {
    /// A manager; `metrics` (if given) is updated by every session.
    pub fn new(metrics: Option<BfdMetrics>) -> Self {
        Bfd { endpoints: Arc::default(), metrics }
    }

    /// Starts a session (call within a tokio runtime). Fails when the sockets of
    /// `cfg.local` cannot be bound, or a session with `cfg.peer` exists there already.
    pub fn spawn(&self, cfg: BfdConfig) -> io::Result<BfdHandle> {
        let endpoint = {
            let mut map =
                self.endpoints.lock().map_err(|_| io::Error::other("BFD endpoint table poisoned"))?;
            let key = (cfg.local, cfg.scope);
            match map.get(&key).and_then(Weak::upgrade) {
                Some(e) => e,
                None => {
                    let e = Arc::new(Endpoint::bind_scoped(cfg.local, cfg.scope)?);
                    map.insert(key, Arc::downgrade(&e));
                    e
                }
            }
        };
        let local_discr = next_discriminator();
        let (pkt_tx, pkt_rx) = mpsc::channel(64);
        endpoint.register(cfg.peer, local_discr, pkt_tx)?;
        let (cmd_tx, cmd_rx) = mpsc::channel(8);
        let (state_tx, state_rx) = watch::channel(BfdState::default());
        let peer = cfg.peer;
        let task = SessionTask {
            session: Session::new(Instant::now().into_std(), cfg.session, local_discr, seed(local_discr)),
            peer: scoped(cfg.peer, CONTROL_PORT, cfg.scope),
            endpoint,
            packets: pkt_rx,
            commands: cmd_rx,
            state: state_tx,
            metrics: self.metrics.clone(),
        };
        let span = tracing::info_span!("bfd", peer = %peer, local = %cfg.local);
        tokio::spawn(tracing::Instrument::instrument(task.run(), span));
        Ok(BfdHandle { cmd: cmd_tx, state: state_rx, peer, local_discr })
    }
}

/// Discriminators are unique in the process and start at a clock-derived value, so a
/// restarted speaker does not reuse the previous run's (RFC 5880 §6.3).
fn next_discriminator() -> u32 {
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let next = NEXT.get_or_init(|| AtomicU32::new(clock_bits() as u32 | 1));
    loop {
        let d = next.fetch_add(1, Ordering::Relaxed);
        if d != 0 {
            return d;
        }
    }
}

fn clock_bits() -> u64 {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
}

fn seed(discr: u32) -> u64 {
    clock_bits() ^ u64::from(discr)
}

type Route = (mpsc::Sender<ControlPacket>, IpAddr);

/// The sockets of one local address, shared by its sessions.
#[derive(Debug)]
pub struct Endpoint {
    local: IpAddr,
    tx: UdpSocket,
    /// Your Discriminator → session; the peer address picks a session while it is 0.
    routes: Arc<Mutex<HashMap<u32, Route>>>,
    rx_task: tokio::task::JoinHandle<()>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.rx_task.abort();
    }
}

impl Endpoint {
    /// Binds `local`:3784 for receiving and a port of 49152–65535 for sending.
    pub fn bind(local: IpAddr) -> io::Result<Self> {
        Self::bind_scoped(local, 0)
    }

    /// [`Endpoint::bind`] on the link of interface index `scope` (for a link-local
    /// `local`).
    pub fn bind_scoped(local: IpAddr, scope: u32) -> io::Result<Self> {
        // No SO_REUSEADDR: a second BFD process on this address must fail loudly rather
        // than receive an arbitrary share of the packets.
        let rx = udp_socket(local)?;
        match local {
            IpAddr::V4(_) => nix::sys::socket::setsockopt(&rx, nix::sys::socket::sockopt::Ipv4RecvTtl, &true),
            IpAddr::V6(_) => {
                nix::sys::socket::setsockopt(&rx, nix::sys::socket::sockopt::Ipv6RecvHopLimit, &true)
            }
        }
        .map_err(io::Error::from)?;
        rx.bind(&scoped(local, CONTROL_PORT, scope).into())?;
        let rx = UdpSocket::from_std(rx.into())?;

        let tx = udp_socket(local)?;
        match local {
            IpAddr::V4(_) => tx.set_ttl_v4(u32::from(TTL))?,
            IpAddr::V6(_) => tx.set_unicast_hops_v6(u32::from(TTL))?,
        }
        bind_source_port(&tx, local, scope)?;
        let tx = UdpSocket::from_std(tx.into())?;

        let routes: Arc<Mutex<HashMap<u32, Route>>> = Arc::default();
        let rx_task = tokio::spawn(receive_loop(rx, Arc::downgrade(&routes)));
        Ok(Endpoint { local, tx, routes, rx_task })
    }

    /// The local address.
    pub fn local(&self) -> IpAddr {
        self.local
    }

    /// The source port of transmitted packets.
    pub fn source_port(&self) -> io::Result<u16> {
        Ok(self.tx.local_addr()?.port())
    }

    fn register(&self, peer: IpAddr, discr: u32, tx: mpsc::Sender<ControlPacket>) -> io::Result<()> {
        let mut routes = self.routes.lock().map_err(|_| io::Error::other("BFD route table poisoned"))?;
        routes.retain(|_, (s, _)| !s.is_closed());
        if routes.values().any(|(_, p)| *p == peer) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("a BFD session with {peer} from {} exists already", self.local),
            ));
        }
        routes.insert(discr, (tx, peer));
        Ok(())
    }

    fn unregister(&self, discr: u32) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.remove(&discr);
        }
    }

    async fn send(&self, packet: &ControlPacket, to: SocketAddr) -> io::Result<()> {
        let mut buf = BytesMut::new();
        packet.encode(&mut buf);
        self.tx.send_to(&buf, to).await.map(|_| ())
    }
}

fn udp_socket(local: IpAddr) -> io::Result<Socket> {
    let domain = if local.is_ipv4() { Domain::IPV4 } else { Domain::IPV6 };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    if local.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_nonblocking(true)?;
    Ok(s)
}

/// RFC 5881 §4: the source port is in 49152–65535; start at a random one and walk on.
fn bind_source_port(sock: &Socket, local: IpAddr, scope: u32) -> io::Result<()> {
    let span = u32::from(SOURCE_PORTS.end() - SOURCE_PORTS.start()) + 1;
    let first = (clock_bits() % u64::from(span)) as u32;
    let mut last = None;
    for i in 0..span {
        let port = *SOURCE_PORTS.start() + ((first + i) % span) as u16;
        match sock.bind(&scoped(local, port, scope).into()) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free BFD source port")))
}

/// One received datagram: source, TTL / hop limit (None when the kernel gave none).
fn recv_with_ttl(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<i32>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg};
    let mut cmsg = nix::cmsg_space!(libc::c_int, libc::c_int);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty())
        .map_err(io::Error::from)?;
    let mut ttl = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::Ipv4Ttl(t) | ControlMessageOwned::Ipv6HopLimit(t) => ttl = Some(t),
                _ => {}
            }
        }
    }
    let from = msg
        .address
        .and_then(|a| {
            a.as_sockaddr_in()
                .map(|s| SocketAddr::from((s.ip(), s.port())))
                .or_else(|| a.as_sockaddr_in6().map(|s| SocketAddr::from((s.ip(), s.port()))))
        })
        .ok_or_else(|| io::Error::other("datagram without a source address"))?;
    Ok((msg.bytes, from, ttl))
}

async fn receive_loop(sock: UdpSocket, routes: Weak<Mutex<HashMap<u32, Route>>>) {
    let mut buf = [0u8; 512];
    loop {
        let got = sock.async_io(Interest::READABLE, || recv_with_ttl(&sock, &mut buf)).await;
        let (n, from, ttl) = match got {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "BFD receive failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // RFC 5881 §5 (GTSM): only packets from the link itself.
        if ttl != Some(i32::from(TTL)) {
            tracing::debug!(%from, ?ttl, "BFD packet dropped: TTL is not 255");
            continue;
        }
        let Some(data) = buf.get(..n) else { continue };
        let packet = match ControlPacket::decode(&mut &data[..]) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(%from, error = %e, "BFD packet discarded");
                continue;
            }
        };
        let Some(routes) = routes.upgrade() else { return };
        let target = {
            let Ok(table) = routes.lock() else { return };
            // RFC 5880 §6.3: Your Discriminator selects the session; while it is zero,
            // the source address does (single hop: one session per peer and address).
            if packet.your_discr != 0 {
                table.get(&packet.your_discr).filter(|(_, p)| *p == from.ip()).map(|(s, _)| s.clone())
            } else {
                table.values().find(|(_, p)| *p == from.ip()).map(|(s, _)| s.clone())
            }
        };
        match target {
            // A full queue means the session task is behind: dropping is what a lossy
            // link would do, and BFD is built for that.
            Some(s) => {
                let _ = s.try_send(packet);
            }
            None => tracing::debug!(%from, your_discr = packet.your_discr, "BFD packet for no session"),
        }
    }
}

struct SessionTask {
    session: Session,
    peer: SocketAddr,
    endpoint: Arc<Endpoint>,
    packets: mpsc::Receiver<ControlPacket>,
    commands: mpsc::Receiver<Command>,
    state: watch::Sender<BfdState>,
    metrics: Option<BfdMetrics>,
}

impl SessionTask {
    async fn run(mut self) {
        let peer = self.peer.ip();
        if let Some(m) = &self.metrics {
            m.set_up(peer, false);
        }
        tracing::info!(state = %self.session.state(), local_discr = self.session.local_discr(), "BFD session started");
        self.flush().await;
        loop {
            let sleep = crate::time::sleep_until(self.session.poll_timeout());
            tokio::select! {
                p = self.packets.recv() => match p {
                    Some(p) => self.session.handle(Instant::now().into_std(), Input::Packet(p)),
                    None => break,
                },
                c = self.commands.recv() => match c {
                    Some(Command::AdminDown) => self.session.handle(Instant::now().into_std(), Input::AdminDown),
                    Some(Command::AdminUp) => self.session.handle(Instant::now().into_std(), Input::AdminUp),
                    Some(Command::SetTimers(t)) => self.session.handle(Instant::now().into_std(), Input::SetTimers(t)),
                    None => break,
                },
                () = sleep => self.session.handle(Instant::now().into_std(), Input::Timeout),
            }
            self.flush().await;
        }
        // Every handle is gone: tell the peer this was on purpose (§6.8.16).
        self.session.handle(Instant::now().into_std(), Input::AdminDown);
        self.flush().await;
        self.endpoint.unregister(self.session.local_discr());
        if let Some(m) = &self.metrics {
            m.remove(peer);
        }
    }

    async fn flush(&mut self) {
        while let Some(p) = self.session.poll_transmit() {
            if let Err(e) = self.endpoint.send(&p, self.peer).await {
                tracing::debug!(error = %e, "BFD send failed");
            }
        }
        while let Some(Event::StateChanged { from, to, diag }) = self.session.poll_event() {
            tracing::info!(%from, %to, %diag, "BFD session {to}");
            let remote_state = self.session.remote_state();
            self.state.send_modify(|s| {
                s.state = to;
                s.diag = diag;
                s.remote_state = remote_state;
                s.transitions += 1;
                if from == State::Up && to == State::Down && remote_state != State::AdminDown {
                    s.downs += 1;
                }
            });
            if let Some(m) = &self.metrics {
                m.transition(self.peer.ip(), from, to);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn failure_is_a_loss_of_up_not_a_peer_admin_down() {
        let up = BfdState { state: State::Up, transitions: 2, ..BfdState::default() };
        assert!(!up.is_failure() && !BfdState::default().is_failure());
        let lost =
            BfdState { state: State::Down, diag: Diagnostic::ControlDetectionTimeExpired, downs: 1, ..up };
        assert!(lost.is_failure());
        let admin = BfdState { remote_state: State::AdminDown, ..lost };
        assert!(!admin.is_failure());
    }
}
