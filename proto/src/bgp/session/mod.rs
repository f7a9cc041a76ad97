//! tokio driver for one BGP peer: [`spawn`] starts a task that owns the TCP
//! connections and the clock and feeds the sans-IO [`machine::Machine`] (the
//! [`Fsm`](crate::bgp::fsm::Fsm) and the [`RibOut`](crate::bgp::rib_out::RibOut)): every
//! message it writes, UPDATEs included, comes from the machine's `poll_transmit`. The
//! [`SessionHandle`] controls it. A [`Listener`] hands inbound connections to the session of their peer.
//!
//! Received routes are counted and dropped: the speaker only announces.
mod driver;
mod listener;
pub mod machine;

pub use listener::Listener;

use super::attributes::PathAttributes;
use super::fsm::{Negotiated, PeerConfig, State};
use super::rib_out::ExportConfig;
use super::socket::{self, Password};
use driver::Driver;
use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

/// The routes to announce to a peer; share one `Arc` among routes with equal attributes.
///
/// A persistent map: a copy costs a pointer and shares every node, and two versions of one
/// map differ in a walk of the nodes that changed ([`imbl::OrdMap::diff`]). Keep the map
/// handed to [`SessionHandle::set_desired`] and change it for the next one: the session
/// then looks at the routes that changed only, not every route.
pub type Routes = imbl::OrdMap<IpNet, Arc<PathAttributes>>;

/// A set of prefixes, persistent like [`Routes`]: [`SessionStatus::advertised`] is copied
/// for a pointer, and two versions compare by the nodes that differ.
pub type Prefixes = imbl::OrdSet<IpNet>;

/// Everything needed to run a session with one peer.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// FSM parameters (ASes, router id, timers, families, passive, graceful restart).
    pub peer: PeerConfig,
    /// Peer address and port (179 normally).
    pub peer_addr: SocketAddr,
    /// Source address for outgoing connections.
    pub local_addr: Option<IpAddr>,
    /// Source port for outgoing connections.
    pub local_port: Option<u16>,
    /// eBGP multihop: TTL 255 instead of 1 (iBGP keeps the system default).
    pub ebgp_multihop: bool,
    /// GTSM (RFC 5082): send with TTL 255 and have the kernel drop the peer's packets
    /// that arrive with less, on connections we open and those we accept alike.
    pub ttl_security: bool,
    /// TCP MD5 key (RFC 2385).
    pub password: Option<Password>,
    /// Next hops and export rewrites; empty next hops default to the connection's local address.
    pub export: ExportConfig,
}

impl SessionConfig {
    /// A config for `peer_addr` with defaults elsewhere; export settings follow the peer config.
    pub fn new(peer: PeerConfig, peer_addr: SocketAddr) -> Self {
        let export = ExportConfig {
            local_as: peer.local_as,
            ebgp: peer.is_ebgp(),
            next_hop_v4: None,
            next_hop_v6: None,
            next_hop_v6_link_local: None,
        };
        Self {
            peer,
            peer_addr,
            local_addr: None,
            local_port: None,
            ebgp_multihop: false,
            ttl_security: false,
            password: None,
            export,
        }
    }

    fn ttl(&self) -> Option<u32> {
        match (self.ttl_security, self.peer.is_ebgp(), self.ebgp_multihop) {
            (true, _, _) => Some(u32::from(socket::GTSM_TTL)),
            (false, true, false) => Some(1),
            (false, true, true) => Some(255),
            (false, false, _) => None,
        }
    }

    /// RFC 5082 §3: a directly connected peer's packets arrive with TTL 255.
    fn min_ttl(&self) -> Option<u8> {
        self.ttl_security.then_some(socket::GTSM_TTL)
    }
}

/// A snapshot of a session's state and counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStatus {
    /// FSM state.
    pub state: State,
    /// Negotiated parameters while Established.
    pub negotiated: Option<Negotiated>,
    /// Times the session reached Established.
    pub established_count: u64,
    /// Why the session last went down.
    pub last_down_reason: Option<String>,
    /// UPDATE messages sent.
    pub updates_sent: u64,
    /// Prefixes announced (counted per UPDATE).
    pub prefixes_announced: u64,
    /// Prefixes withdrawn.
    pub prefixes_withdrawn: u64,
    /// Prefixes currently advertised to the peer.
    pub prefixes_advertised: usize,
    /// The prefixes whose UPDATE has been written to the Established connection and
    /// not withdrawn since: what the peer really holds from us. Empty whenever the
    /// session is not Established (the peer dropped our routes with it) and after a
    /// failed write (the connection is going down).
    pub advertised: Prefixes,
    /// UPDATE messages received (their routes are dropped).
    pub updates_received: u64,
    /// Prefixes received in those UPDATEs.
    pub prefixes_received: u64,
    /// Held down by [`SessionHandle::set_bfd_up`]`(false)`: no connecting, no accepting.
    pub bfd_held_down: bool,
    /// Times BFD reset the session (`set_bfd_up(false)` while not held down).
    pub bfd_resets: u64,
}

impl Default for SessionStatus {
    fn default() -> Self {
        Self {
            state: State::Idle,
            negotiated: None,
            established_count: 0,
            last_down_reason: None,
            updates_sent: 0,
            prefixes_announced: 0,
            prefixes_withdrawn: 0,
            prefixes_advertised: 0,
            advertised: Prefixes::new(),
            updates_received: 0,
            prefixes_received: 0,
            bfd_held_down: false,
            bfd_resets: 0,
        }
    }
}

impl SessionStatus {
    /// True while Established.
    pub fn is_up(&self) -> bool {
        self.state == State::Established
    }
}

enum Command {
    Accept(TcpStream),
    Shutdown(u8),
    BfdUp(bool),
}

/// Cease subcode "BFD Down" (RFC 9384), sent when BFD tears an Established session down.
pub const CEASE_BFD_DOWN: u8 = 10;

/// Controls a running session task.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    cmd: mpsc::Sender<Command>,
    routes: Arc<watch::Sender<Arc<Routes>>>,
    status: watch::Receiver<SessionStatus>,
    peer: IpAddr,
    /// TTL and minimum TTL for connections accepted from the peer.
    ttl: Option<u32>,
    min_ttl: Option<u8>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Accept(_) => f.write_str("Accept"),
            Command::Shutdown(s) => write!(f, "Shutdown({s})"),
            Command::BfdUp(up) => write!(f, "BfdUp({up})"),
        }
    }
}

impl SessionHandle {
    /// Replaces the routes to announce; the session converges to the latest set.
    pub fn set_desired(&self, routes: Routes) {
        self.routes.send_replace(Arc::new(routes));
    }

    /// Current state and counters.
    pub fn status(&self) -> SessionStatus {
        self.status.borrow().clone()
    }

    /// A receiver that sees every status change (for tests and metrics).
    pub fn watch_status(&self) -> watch::Receiver<SessionStatus> {
        self.status.clone()
    }

    /// The peer address this session serves.
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    /// Hands an inbound connection from the peer to the session (used by [`Listener`]),
    /// first giving it the peer's TTL and GTSM minimum TTL. The listener is shared by
    /// peers with and without GTSM, so the minimum TTL goes on each connection as soon
    /// as it is known to be this peer's, not on the listener.
    pub async fn accept(&self, stream: TcpStream) {
        if let Err(e) = socket::set_stream_ttl(&stream, self.peer, self.ttl, self.min_ttl) {
            // Too far away for GTSM, or the options could not be set (then a GTSM
            // connection would take packets from afar): either way, not this session's.
            tracing::warn!(peer = %self.peer, error = %e, "refused BGP connection");
            return;
        }
        let _ = self.cmd.send(Command::Accept(stream)).await;
    }

    /// Tells the session whether BFD sees the path to the peer (RFC 5882 §4.3).
    ///
    /// `false` resets the connection at once (Cease / BFD Down, RFC 9384, then close;
    /// no waiting for the hold timer) and keeps the session in Idle, neither connecting
    /// nor accepting, until `true`, which starts it again like a ManualStart. Repeating
    /// the current value does nothing. A session starts with BFD considered up.
    pub async fn set_bfd_up(&self, up: bool) {
        let _ = self.cmd.send(Command::BfdUp(up)).await;
    }

    /// Sends Cease with `cease_subcode` (e.g. 2, administrative shutdown) and stops the task.
    pub async fn shutdown(&self, cease_subcode: u8) {
        let _ = self.cmd.send(Command::Shutdown(cease_subcode)).await;
        let mut rx = self.status.clone();
        // The task ends by dropping its status sender.
        while rx.changed().await.is_ok() {}
    }
}

/// Starts the session task (it connects at once unless passive); call within a tokio runtime.
///
/// The task stops on [`SessionHandle::shutdown`] or when every handle is dropped
/// (a [`Listener`] holds one until [`Listener::remove_peer`]).
pub fn spawn(config: SessionConfig) -> SessionHandle {
    let (cmd_tx, cmd_rx) = mpsc::channel(16);
    let (routes_tx, routes_rx) = watch::channel(Arc::new(Routes::new()));
    let (status_tx, status_rx) = watch::channel(SessionStatus::default());
    let peer = config.peer_addr.ip();
    let (ttl, min_ttl) = (config.ttl(), config.min_ttl());
    let driver = Driver::new(config, cmd_rx, routes_rx, status_tx);
    let span = tracing::info_span!("bgp", peer = %peer);
    tokio::spawn(tracing::Instrument::instrument(driver.run(), span));
    SessionHandle { cmd: cmd_tx, routes: Arc::new(routes_tx), status: status_rx, peer, ttl, min_ttl }
}
