//! The session task: owns the TCP connections and the clock, feeds the session
//! [`Machine`] (the FSM and the RIB-Out) and writes what it gives.
use super::machine::{self, Machine};
use super::{CEASE_BFD_DOWN, Command, Prefixes, Routes, SessionConfig, SessionStatus};
use crate::bgp::error::subcode;
use crate::bgp::fsm::{ConnId, Event, Input, State};
use crate::bgp::message::{DecodeContext, EncodeContext, Message, frame_len};
use crate::bgp::socket::{self, ConnectOptions};
use crate::time::sleep_until;
use bytes::BytesMut;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

enum ConnEvent {
    Connected(u64, TcpStream),
    ConnectFailed(u64, String),
    Frame(ConnId, bytes::Bytes),
    Closed(ConnId, String),
}

struct Conn {
    writer: OwnedWriteHalf,
    reader: JoinHandle<()>,
    /// Tells the reader that a write failed, and why: it hands on what the peer had
    /// already sent, then reports the connection closed.
    write_failed: Option<oneshot::Sender<String>>,
    local: Option<SocketAddr>,
}

pub(super) struct Driver {
    config: SessionConfig,
    machine: Machine,
    cmd_rx: mpsc::Receiver<Command>,
    routes_rx: watch::Receiver<Arc<Routes>>,
    status_tx: watch::Sender<SessionStatus>,
    status: SessionStatus,
    ev_tx: mpsc::Sender<ConnEvent>,
    ev_rx: mpsc::Receiver<ConnEvent>,
    conns: HashMap<ConnId, Conn>,
    next_id: u64,
    connecting: Option<(u64, JoinHandle<()>)>,
    decode_ctx: DecodeContext,
    encode_ctx: EncodeContext,
}

impl Driver {
    pub(super) fn new(
        config: SessionConfig,
        cmd_rx: mpsc::Receiver<Command>,
        routes_rx: watch::Receiver<Arc<Routes>>,
        status_tx: watch::Sender<SessionStatus>,
    ) -> Self {
        let (ev_tx, ev_rx) = mpsc::channel(64);
        Self {
            machine: Machine::new(config.peer.clone(), config.export.clone()),
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
            decode_ctx: DecodeContext::default(),
            encode_ctx: EncodeContext::default(),
        }
    }

    pub(super) async fn run(mut self) {
        self.handle(Input::ManualStart).await;
        loop {
            let deadline = self.machine.poll_timeout();
            tokio::select! {
                cmd = self.cmd_rx.recv() => match cmd {
                    Some(Command::Accept(stream)) => self.accept(stream).await,
                    Some(Command::BfdUp(up)) => self.bfd(up).await,
                    Some(Command::Shutdown(sub)) => {
                        self.handle(Input::ManualStop { subcode: sub }).await;
                        break;
                    }
                    // Every handle dropped: stop as a de-configured peer (RFC 4486).
                    None => {
                        self.handle(Input::ManualStop { subcode: subcode::CEASE_PEER_DECONFIGURED }).await;
                        break;
                    }
                },
                Ok(()) = self.routes_rx.changed() => {
                    let routes = self.routes_rx.borrow_and_update().clone();
                    self.feed(machine::Input::Routes(routes)).await;
                }
                Some(ev) = self.ev_rx.recv() => self.conn_event(ev).await,
                () = sleep_until(deadline) => self.handle(Input::Timeout).await,
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
            self.handle(Input::ManualStart).await;
        } else {
            self.status.bfd_resets += 1;
            tracing::warn!(state = ?self.machine.fsm().state(), "BFD down: resetting the BGP session now (Cease, BFD down) and holding it down until BFD is up");
            if let Some((_, h)) = self.connecting.take() {
                h.abort();
            }
            self.handle(Input::ManualStop { subcode: CEASE_BFD_DOWN }).await;
        }
        self.publish();
    }

    async fn accept(&mut self, stream: TcpStream) {
        let id = self.register(stream);
        self.handle(Input::TcpConnectionConfirmed(id)).await;
    }

    /// A connection's local address goes to the machine before its first FSM input.
    fn local(&mut self, id: ConnId) {
        if let Some(local) = self.conns.get(&id).and_then(|c| c.local) {
            self.machine.handle(Instant::now().into_std(), machine::Input::Local(id, local));
        }
    }

    fn register(&mut self, stream: TcpStream) -> ConnId {
        let id = ConnId(self.next_id);
        self.next_id += 1;
        let local = stream.local_addr().ok();
        let _ = stream.set_nodelay(true);
        let (rd, writer) = stream.into_split();
        let (write_failed, failed_rx) = oneshot::channel();
        let reader = tokio::spawn(read_frames(id, rd, failed_rx, self.ev_tx.clone()));
        self.conns.insert(id, Conn { writer, reader, write_failed: Some(write_failed), local });
        self.local(id);
        id
    }

    async fn conn_event(&mut self, ev: ConnEvent) {
        match ev {
            ConnEvent::Connected(attempt, stream) => {
                if self.connecting.as_ref().is_some_and(|(a, _)| *a == attempt) {
                    self.connecting = None;
                    let id = self.register(stream);
                    self.handle(Input::TcpCrAcked(id)).await;
                }
            }
            ConnEvent::ConnectFailed(attempt, why) => {
                if self.connecting.as_ref().is_some_and(|(a, _)| *a == attempt) {
                    self.connecting = None;
                    tracing::debug!(reason = %why, "connect failed");
                    self.handle(Input::TcpConnectionFails(ConnId(0))).await;
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
                        self.handle(Input::Message(id, msg)).await;
                    }
                    Err(e) => self.handle(Input::MessageError(id, e)).await,
                }
            }
            ConnEvent::Closed(id, why) => {
                if self.conns.contains_key(&id) {
                    tracing::debug!(reason = %why, "connection closed");
                    self.handle(Input::TcpConnectionFails(id)).await;
                }
            }
        }
    }

    /// Feeds the FSM.
    async fn handle(&mut self, input: Input) {
        self.feed(machine::Input::Fsm(input)).await;
    }

    /// Feeds the machine and carries out everything it asks for: first the messages,
    /// then the events (a connection closes after what was written on it).
    async fn feed(&mut self, input: machine::Input) {
        self.machine.handle(Instant::now().into_std(), input);
        let mut written = true;
        while let Some(t) = self.machine.poll_transmit() {
            if let Message::Update(u) = &t.message {
                self.status.prefixes_announced += u.announced().count() as u64;
                self.status.prefixes_withdrawn += u.withdrawn_prefixes().count() as u64;
            }
            written &= self.send(t.conn, &t.message).await;
        }
        while let Some(ev) = self.machine.poll_event() {
            match ev {
                Event::Connect => self.start_connect(),
                Event::Close(id) => {
                    if let Some(mut c) = self.conns.remove(&id) {
                        c.reader.abort();
                        let _ = c.writer.shutdown().await;
                    }
                }
                Event::StateChanged { from, to, reason } => {
                    tracing::info!(?from, ?to, %reason, "BGP session state changed");
                    self.status.state = to;
                    // Established goes out with its negotiated parameters from SessionUp,
                    // which the FSM emits right after: published here, a watcher could see
                    // Established with `negotiated: None`.
                    if to != State::Established {
                        self.publish();
                    }
                }
                Event::SessionUp(n) => {
                    self.decode_ctx = DecodeContext { four_octet_as: n.four_octet_as };
                    self.encode_ctx = EncodeContext { four_octet_as: n.four_octet_as };
                    self.status.established_count += 1;
                    self.status.negotiated = Some(n);
                    self.publish();
                }
                Event::SessionDown(reason) => {
                    self.decode_ctx = DecodeContext::default();
                    self.encode_ctx = EncodeContext::default();
                    self.status.negotiated = None;
                    self.status.prefixes_advertised = 0;
                    self.status.last_down_reason = Some(reason.to_string());
                    self.publish();
                }
            }
        }
        if self.machine.take_synced() {
            self.status.prefixes_advertised = self.machine.advertised();
            // Published only now that every UPDATE of this sync is on the wire: a reader
            // of `advertised` (pod readiness gates) may rely on the peer having been sent it.
            self.status.advertised =
                if written { self.machine.advertised_prefixes().clone() } else { Prefixes::new() };
            self.publish();
        }
    }

    /// Writes `msg`; false when it could not be written (the FSM then learns of a
    /// connection failure).
    async fn send(&mut self, id: ConnId, msg: &Message) -> bool {
        // A peer that stops reading must not wedge the task (and its hold timer):
        // give up on a write after the hold time.
        let hold = self.machine.fsm().negotiated().map_or(240, |n| u64::from(n.hold_time));
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
            // The FSM learns of it as a connection failure, from the reader: after what the
            // peer sent before it went (a reset peer's NOTIFICATION says why it left).
            if let Some(tell) = conn.write_failed.take() {
                let _ = tell.send(e);
            }
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
        self.status.state = self.machine.fsm().state();
        if self.status.state != State::Established && !self.status.advertised.is_empty() {
            self.status.advertised = Prefixes::new();
        }
        self.status_tx.send_replace(self.status.clone());
    }
}

/// A connection's reader: hands on each whole frame read, in order, then how the
/// connection ended. When a write fails (`write_failed`), what the peer sent before is
/// read without waiting and handed on first.
async fn read_frames(
    id: ConnId,
    mut rd: OwnedReadHalf,
    mut write_failed: oneshot::Receiver<String>,
    tx: mpsc::Sender<ConnEvent>,
) {
    let mut buf = BytesMut::with_capacity(8192);
    let mut closing = None;
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
        if let Some(why) = closing {
            let _ = tx.send(ConnEvent::Closed(id, why)).await;
            return;
        }
        tokio::select! {
            biased;
            read = rd.read_buf(&mut buf) => match read {
                Ok(0) => closing = Some("closed by peer".to_owned()),
                Ok(_) => {}
                Err(e) => closing = Some(e.to_string()),
            },
            why = &mut write_failed => {
                // The connection is going: what already arrived, then the write's error.
                let Ok(why) = why else { return };
                read_arrived(&rd, &mut buf);
                closing = Some(why);
            }
        }
    }
}

/// The most [`read_arrived`] takes: more than a socket's receive buffer holds.
const READ_ARRIVED_MAX: usize = 1 << 20;

/// Appends to `buf` what the socket holds already, without waiting. Straight from the
/// kernel: tokio reads only what its poll has reported, and a reset peer's last words may
/// have arrived since (the kernel keeps them readable after the reset).
fn read_arrived(rd: &OwnedReadHalf, buf: &mut BytesMut) {
    use std::io::Read;
    let sock = socket2::SockRef::from(rd.as_ref());
    let mut chunk = [0u8; 4096];
    // The socket is non-blocking (tokio's): WouldBlock, the end or an error stops it, or
    // a peer that keeps sending, after a bound.
    let mut left = READ_ARRIVED_MAX;
    while let Ok(n @ 1..) = (&*sock).read(&mut chunk) {
        buf.extend_from_slice(&chunk[..n]);
        left = left.saturating_sub(n);
        if left == 0 {
            break;
        }
    }
}
