//! tokio driver for one BGP peer: owns the TCP connections, the clock and the timers,
//! feeds the sans-IO [`Fsm`] and sends what the [`RibOut`] computes.
//!
//! Received routes are counted and dropped: the speaker only announces.
use super::attributes::PathAttributes;
use super::error::subcode;
use super::fsm::{ConnId, Event, Fsm, Negotiated, Output, PeerConfig, State, Timer};
use super::message::{DecodeContext, EncodeContext, Message, frame_len};
use super::rib_out::{ExportConfig, RibOut};
use super::socket::{self, ConnectOptions, Password};
use bytes::BytesMut;
use ipnet::IpNet;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The routes to announce to a peer; share one `Arc` among routes with equal attributes.
pub type Routes = BTreeMap<IpNet, Arc<PathAttributes>>;

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
    pub advertised: Arc<BTreeSet<IpNet>>,
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
            advertised: Arc::default(),
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

enum ConnEvent {
    Connected(u64, TcpStream),
    ConnectFailed(u64, String),
    Frame(ConnId, bytes::Bytes),
    Closed(ConnId, String),
}

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

struct Conn {
    writer: OwnedWriteHalf,
    reader: JoinHandle<()>,
    local: Option<SocketAddr>,
}

struct Driver {
    config: SessionConfig,
    fsm: Fsm,
    rib: RibOut,
    cmd_rx: mpsc::Receiver<Command>,
    routes_rx: watch::Receiver<Arc<Routes>>,
    status_tx: watch::Sender<SessionStatus>,
    status: SessionStatus,
    ev_tx: mpsc::Sender<ConnEvent>,
    ev_rx: mpsc::Receiver<ConnEvent>,
    conns: HashMap<ConnId, Conn>,
    next_id: u64,
    connecting: Option<(u64, JoinHandle<()>)>,
    timers: HashMap<Timer, Instant>,
    decode_ctx: DecodeContext,
    encode_ctx: EncodeContext,
}

impl Driver {
    fn new(
        config: SessionConfig,
        cmd_rx: mpsc::Receiver<Command>,
        routes_rx: watch::Receiver<Arc<Routes>>,
        status_tx: watch::Sender<SessionStatus>,
    ) -> Self {
        let (ev_tx, ev_rx) = mpsc::channel(64);
        Self {
            fsm: Fsm::new(config.peer.clone()),
            rib: RibOut::new(config.export.clone()),
            config,
            cmd_rx,
            routes_rx,
            status_tx,
            status: SessionStatus::default(),
            ev_tx,
            ev_rx,
            conns: HashMap::new(),
            next_id: 1,
            connecting: None,
            timers: HashMap::new(),
            decode_ctx: DecodeContext::default(),
            encode_ctx: EncodeContext::default(),
        }
    }

    async fn run(mut self) {
        self.handle(Event::ManualStart).await;
        loop {
            let deadline = self.timers.values().min().copied();
            tokio::select! {
                cmd = self.cmd_rx.recv() => match cmd {
                    Some(Command::Accept(stream)) => self.accept(stream).await,
                    Some(Command::BfdUp(up)) => self.bfd(up).await,
                    Some(Command::Shutdown(sub)) => {
                        self.handle(Event::ManualStop { subcode: sub }).await;
                        break;
                    }
                    // Every handle dropped: stop as a de-configured peer (RFC 4486).
                    None => {
                        self.handle(Event::ManualStop { subcode: subcode::CEASE_PEER_DECONFIGURED }).await;
                        break;
                    }
                },
                Ok(()) = self.routes_rx.changed() => self.sync_routes().await,
                Some(ev) = self.ev_rx.recv() => self.conn_event(ev).await,
                () = sleep_until(deadline) => self.fire_timers().await,
            }
        }
        if let Some((_, h)) = self.connecting.take() {
            h.abort();
        }
        for (_, c) in self.conns.drain() {
            c.reader.abort();
        }
    }

    /// BFD went down (hold the session in Idle) or came back up (start it again).
    ///
    /// The sans-IO FSM needs nothing new: BFD Down is a ManualStop with Cease subcode
    /// "BFD Down" (it sends the NOTIFICATION if a session exists, closes every
    /// connection, cancels the timers and stays in Idle, refusing inbound connections);
    /// BFD Up is a ManualStart.
    async fn bfd(&mut self, up: bool) {
        if up != self.status.bfd_held_down {
            return;
        }
        self.status.bfd_held_down = !up;
        if up {
            tracing::info!("BFD up: starting the BGP session again");
            self.handle(Event::ManualStart).await;
        } else {
            self.status.bfd_resets += 1;
            tracing::warn!(state = ?self.fsm.state(), "BFD down: resetting the BGP session now (Cease, BFD down) and holding it down until BFD is up");
            if let Some((_, h)) = self.connecting.take() {
                h.abort();
            }
            self.handle(Event::ManualStop { subcode: CEASE_BFD_DOWN }).await;
        }
        self.publish();
    }

    async fn fire_timers(&mut self) {
        let now = Instant::now();
        let due: Vec<Timer> = self.timers.iter().filter(|(_, d)| **d <= now).map(|(t, _)| *t).collect();
        for t in due {
            self.timers.remove(&t);
            let ev = match t {
                Timer::ConnectRetry => Event::ConnectRetryTimerExpires,
                Timer::Hold => Event::HoldTimerExpires,
                Timer::Keepalive => Event::KeepaliveTimerExpires,
            };
            self.handle(ev).await;
        }
    }

    async fn accept(&mut self, stream: TcpStream) {
        let id = self.register(stream);
        self.handle(Event::TcpConnectionConfirmed(id)).await;
    }

    fn register(&mut self, stream: TcpStream) -> ConnId {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        let local = stream.local_addr().ok();
        let _ = stream.set_nodelay(true);
        let (mut rd, writer) = stream.into_split();
        let tx = self.ev_tx.clone();
        let reader = tokio::spawn(async move {
            let mut buf = BytesMut::with_capacity(8192);
            loop {
                // Frame on the header's length; decoding waits for the negotiated context.
                loop {
                    match frame_len(&buf) {
                        Ok(Some(n)) if buf.len() >= n => {
                            let frame = buf.split_to(n).freeze();
                            if tx.send(ConnEvent::Frame(id, frame)).await.is_err() {
                                return;
                            }
                        }
                        Ok(_) => break,
                        Err(_) => {
                            // Let the decoder produce the matching NOTIFICATION.
                            let frame = buf.split().freeze();
                            let _ = tx.send(ConnEvent::Frame(id, frame)).await;
                            return;
                        }
                    }
                }
                match rd.read_buf(&mut buf).await {
                    Ok(0) => {
                        let _ = tx.send(ConnEvent::Closed(id, "closed by peer".into())).await;
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let _ = tx.send(ConnEvent::Closed(id, e.to_string())).await;
                        return;
                    }
                }
            }
        });
        self.conns.insert(id, Conn { writer, reader, local });
        id
    }

    async fn conn_event(&mut self, ev: ConnEvent) {
        match ev {
            ConnEvent::Connected(attempt, stream) => {
                if self.connecting.as_ref().is_some_and(|(a, _)| *a == attempt) {
                    self.connecting = None;
                    let id = self.register(stream);
                    self.handle(Event::TcpCrAcked(id)).await;
                }
            }
            ConnEvent::ConnectFailed(attempt, why) => {
                if self.connecting.as_ref().is_some_and(|(a, _)| *a == attempt) {
                    self.connecting = None;
                    tracing::debug!(reason = %why, "connect failed");
                    self.handle(Event::TcpConnectionFails(ConnId(0))).await;
                }
            }
            ConnEvent::Frame(id, frame) => {
                if !self.conns.contains_key(&id) {
                    return;
                }
                let mut b = frame;
                match Message::decode(&mut b, &self.decode_ctx) {
                    Ok(msg) => {
                        if let Message::Update(u) = &msg {
                            self.status.updates_received += 1;
                            self.status.prefixes_received += u.announced().count() as u64;
                            if !u.errors.is_empty() {
                                let errors: Vec<String> = u.errors.iter().map(ToString::to_string).collect();
                                tracing::debug!(
                                    treat_as_withdraw = u.treat_as_withdraw,
                                    ?errors,
                                    "malformed attributes handled per RFC 7606"
                                );
                            }
                            self.publish();
                        }
                        if let Message::RouteRefresh(rr) = &msg
                            && self.fsm.state() == State::Established
                        {
                            self.rib.refresh(rr.family);
                            self.sync_routes().await;
                        }
                        self.handle(Event::Message(id, msg)).await;
                    }
                    Err(e) => self.handle(Event::MessageError(id, e)).await,
                }
            }
            ConnEvent::Closed(id, why) => {
                if self.conns.contains_key(&id) {
                    tracing::debug!(reason = %why, "connection closed");
                    self.handle(Event::TcpConnectionFails(id)).await;
                }
            }
        }
    }

    /// Feeds the FSM and carries out everything it asks for.
    async fn handle(&mut self, ev: Event) {
        self.fsm.handle(Instant::now().into_std(), ev);
        while let Some(out) = self.fsm.poll_output() {
            match out {
                Output::Connect => self.start_connect(),
                Output::Send(id, msg) => {
                    self.send(id, &msg).await;
                }
                Output::Close(id) => {
                    if let Some(mut c) = self.conns.remove(&id) {
                        c.reader.abort();
                        let _ = c.writer.shutdown().await;
                    }
                }
                Output::ArmTimer(t, at) => {
                    self.timers.insert(t, Instant::from_std(at));
                }
                Output::CancelTimer(t) => {
                    self.timers.remove(&t);
                }
                Output::StateChanged { from, to, reason } => {
                    tracing::info!(?from, ?to, %reason, "BGP session state changed");
                    self.status.state = to;
                    // Established goes out with its negotiated parameters from SessionUp,
                    // which the FSM emits right after: published here, a watcher could see
                    // Established with `negotiated: None`.
                    if to != State::Established {
                        self.publish();
                    }
                }
                Output::SessionUp(n) => {
                    self.decode_ctx = DecodeContext { four_octet_as: n.four_octet_as };
                    self.encode_ctx = EncodeContext { four_octet_as: n.four_octet_as };
                    let local = self.conns.get(&n.conn).and_then(|c| c.local);
                    self.rib.set_export(self.export_for(local));
                    self.rib.session_up(&n);
                    self.status.established_count += 1;
                    self.status.negotiated = Some(n);
                    self.publish();
                    self.sync_routes().await;
                }
                Output::SessionDown(reason) => {
                    self.rib.session_down();
                    self.decode_ctx = DecodeContext::default();
                    self.encode_ctx = EncodeContext::default();
                    self.status.negotiated = None;
                    self.status.prefixes_advertised = 0;
                    self.status.last_down_reason = Some(reason.to_string());
                    self.publish();
                }
            }
        }
    }

    /// Export settings with next hops defaulting to the connection's local address.
    fn export_for(&self, local: Option<SocketAddr>) -> ExportConfig {
        let mut e = self.config.export.clone();
        match local.map(|a| a.ip()) {
            Some(IpAddr::V4(a)) if e.next_hop_v4.is_none() => e.next_hop_v4 = Some(a),
            Some(IpAddr::V6(a)) => {
                if let Some(v4) = a.to_ipv4_mapped() {
                    e.next_hop_v4 = e.next_hop_v4.or(Some(v4));
                } else {
                    e.next_hop_v6 = e.next_hop_v6.or(Some(a));
                }
            }
            _ => {}
        }
        e
    }

    async fn sync_routes(&mut self) {
        if self.fsm.state() != State::Established {
            return;
        }
        let routes = self.routes_rx.borrow_and_update().clone();
        let updates = self.rib.sync(&routes);
        let Some(id) = self.fsm.negotiated().map(|n| n.conn) else {
            return;
        };
        let mut written = true;
        for u in updates {
            self.status.prefixes_announced += u.announced().count() as u64;
            self.status.prefixes_withdrawn += u.withdrawn_prefixes().count() as u64;
            written &= self.send(id, &Message::Update(u)).await;
        }
        self.status.prefixes_advertised = self.rib.advertised();
        // Published only now that every UPDATE of this sync is on the wire: a reader
        // of `advertised` (pod readiness gates) may rely on the peer having been sent it.
        let advertised: BTreeSet<IpNet> =
            if written { self.rib.advertised_prefixes().copied().collect() } else { BTreeSet::new() };
        if *self.status.advertised != advertised {
            self.status.advertised = Arc::new(advertised);
        }
        self.publish();
    }

    /// Writes `msg`; false when it could not be written (the FSM then learns of a
    /// connection failure).
    async fn send(&mut self, id: ConnId, msg: &Message) -> bool {
        // A peer that stops reading must not wedge the task (and its hold timer):
        // give up on a write after the hold time.
        let hold = self.fsm.negotiated().map_or(240, |n| u64::from(n.hold_time));
        let limit = std::time::Duration::from_secs(hold.max(10));
        let Some(conn) = self.conns.get_mut(&id) else {
            return false;
        };
        let mut buf = BytesMut::with_capacity(128);
        msg.encode(&mut buf, &self.encode_ctx);
        let err = match tokio::time::timeout(limit, conn.writer.write_all(&buf)).await {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("write blocked for longer than the hold time".to_string()),
        };
        if let Some(e) = err {
            tracing::debug!(error = %e, "write failed");
            // The FSM learns of it as a connection failure.
            let _ = self.ev_tx.try_send(ConnEvent::Closed(id, e));
            return false;
        }
        if matches!(msg, Message::Update(_)) {
            self.status.updates_sent += 1;
        }
        true
    }

    fn start_connect(&mut self) {
        if let Some((_, h)) = self.connecting.take() {
            h.abort();
        }
        let attempt = self.next_id;
        self.next_id += 1;
        let opts = ConnectOptions {
            peer: self.config.peer_addr,
            local_addr: self.config.local_addr,
            local_port: self.config.local_port,
            ttl: self.config.ttl(),
            min_ttl: self.config.min_ttl(),
            password: self.config.password.clone(),
        };
        let tx = self.ev_tx.clone();
        let h = tokio::spawn(async move {
            let ev = match socket::connect(&opts).await {
                Ok(s) => ConnEvent::Connected(attempt, s),
                Err(e) => ConnEvent::ConnectFailed(attempt, e.to_string()),
            };
            let _ = tx.send(ev).await;
        });
        self.connecting = Some((attempt, h));
    }

    fn publish(&mut self) {
        self.status.state = self.fsm.state();
        if self.status.state != State::Established && !self.status.advertised.is_empty() {
            self.status.advertised = Arc::default();
        }
        self.status_tx.send_replace(self.status.clone());
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

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
            let mut backoff = crate::accept::AcceptBackoff::default();
            loop {
                let (stream, from) = crate::accept::accept(&*l, &mut backoff, "BGP").await;
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
