//! The BGP finite state machine of RFC 4271 §8 as a plain struct: no sockets, no
//! tokio, no clock. Drive it with [`Fsm::handle`] and drain [`Fsm::poll_output`].
//!
//! Connections are named by [`ConnId`]s the driver picks. The FSM tracks at most two
//! connections at once so it can resolve connection collisions (RFC 4271 §6.8).
use super::capability::{Capability, GrFamily, GracefulRestart};
use super::error::{DecodeError, ErrorAction, code, subcode};
use super::message::{Message, Notification, Open};
use super::nlri::Family;
use bytes::Bytes;
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Hold time used while waiting for the peer's OPEN (RFC 4271 §8.2.2, "4 minutes").
pub const OPEN_HOLD_TIME: Duration = Duration::from_secs(240);

/// Graceful restart as the restarting speaker (RFC 4724).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GracefulRestartConfig {
    /// Seconds the peer should keep our routes after the session drops (at most 4095).
    pub restart_time: u16,
    /// Set the R-bit in the next OPEN: this process has just restarted.
    pub restarting: bool,
    /// Set the F-bit: forwarding state survived the restart.
    pub forwarding_preserved: bool,
}

/// Per-peer session parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// Our AS.
    pub local_as: u32,
    /// The AS the peer must announce in its OPEN.
    pub peer_as: u32,
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// Proposed hold time in seconds (0, or at least 3; 0 only with `allow_zero_hold_time`).
    pub hold_time: u16,
    /// Accept a negotiated hold time of 0 (no keepalives, no hold timer): only when
    /// something else, BFD, notices a dead peer. Otherwise an OPEN that would make it 0
    /// is refused with Unacceptable Hold Time.
    pub allow_zero_hold_time: bool,
    /// Keepalive interval in seconds; `None` means a third of the negotiated hold time.
    pub keepalive_time: Option<u16>,
    /// First reconnect delay (ConnectRetryTime); doubled after each failure.
    pub connect_retry: Duration,
    /// Upper bound of the reconnect delay.
    pub connect_retry_max: Duration,
    /// A session up this long resets the reconnect backoff.
    pub stable_time: Duration,
    /// Never connect; wait for the peer (RFC 4271 §8.1.1 PassiveTcpEstablishment).
    pub passive: bool,
    /// Families to offer with the multiprotocol capability.
    pub families: Vec<Family>,
    /// Graceful restart capability to advertise, if any.
    pub graceful_restart: Option<GracefulRestartConfig>,
}

impl PeerConfig {
    /// Defaults from API.md: hold 90 s, keepalive hold/3, retry 5 s doubling to 120 s, both families.
    pub fn new(local_as: u32, peer_as: u32, router_id: Ipv4Addr) -> Self {
        Self {
            local_as,
            peer_as,
            router_id,
            hold_time: 90,
            allow_zero_hold_time: false,
            keepalive_time: None,
            connect_retry: Duration::from_secs(5),
            connect_retry_max: Duration::from_secs(120),
            stable_time: Duration::from_secs(60),
            passive: false,
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
            graceful_restart: None,
        }
    }

    /// True when the peer is in another AS.
    pub fn is_ebgp(&self) -> bool {
        self.local_as != self.peer_as
    }
}

/// Identifies one TCP connection; chosen by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// FSM states (RFC 4271 §8.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Refusing connections; waiting for a start (or the reconnect delay).
    Idle,
    /// Waiting for our outgoing TCP connection.
    Connect,
    /// Waiting for the peer to connect to us.
    Active,
    /// OPEN sent, waiting for the peer's.
    OpenSent,
    /// OPENs exchanged, waiting for KEEPALIVE.
    OpenConfirm,
    /// Session up.
    Established,
}

/// Timers the driver runs for the FSM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Timer {
    /// ConnectRetryTimer, also used for the reconnect backoff in Idle.
    ConnectRetry,
    /// HoldTimer.
    Hold,
    /// KeepaliveTimer.
    Keepalive,
}

/// Inputs (RFC 4271 §8.1 event names where they exist).
// Messages dominate; boxing them would allocate per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Event 1: start the session.
    ManualStart,
    /// Event 2: stop the session, sending Cease with this subcode (RFC 4486).
    ManualStop {
        /// Cease subcode, e.g. 2 (administrative shutdown).
        subcode: u8,
    },
    /// Event 9.
    ConnectRetryTimerExpires,
    /// Event 10.
    HoldTimerExpires,
    /// Event 11.
    KeepaliveTimerExpires,
    /// Event 16: our outgoing connection is up.
    TcpCrAcked(ConnId),
    /// Event 17: the peer connected to us.
    TcpConnectionConfirmed(ConnId),
    /// Event 18: a connection failed or closed.
    TcpConnectionFails(ConnId),
    /// Events 19, 25, 26, 27: a message arrived.
    Message(ConnId, Message),
    /// Events 21, 22, 28: a message could not be decoded.
    MessageError(ConnId, DecodeError),
}

/// What the peer and we agreed on when the session came up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The peer's AS.
    pub peer_as: u32,
    /// The peer's BGP identifier.
    pub peer_id: Ipv4Addr,
    /// Negotiated hold time in seconds (0: no keepalives, no hold timer).
    pub hold_time: u16,
    /// Keepalive interval in seconds (0 when hold time is 0).
    pub keepalive_time: u16,
    /// Both sides support 4-octet AS numbers.
    pub four_octet_as: bool,
    /// Families both sides support.
    pub families: Vec<Family>,
    /// The peer supports ROUTE-REFRESH.
    pub route_refresh: bool,
    /// The peer's graceful restart capability.
    pub peer_graceful_restart: Option<GracefulRestart>,
    /// The connection the session runs on.
    pub conn: ConnId,
}

/// Why a session went down or a connection attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DownReason {
    /// Stopped on request.
    #[error("stopped locally ({0})")]
    ManualStop(Notification),
    /// No message from the peer within the hold time.
    #[error("hold timer expired")]
    HoldTimerExpired,
    /// The peer sent a NOTIFICATION.
    #[error("peer sent NOTIFICATION {0}")]
    NotificationReceived(Notification),
    /// We sent a NOTIFICATION because of the peer's message.
    #[error("sent NOTIFICATION {0}: {1}")]
    NotificationSent(Notification, &'static str),
    /// The TCP connection failed or closed.
    #[error("TCP connection failed or closed")]
    ConnectionFailed,
}

/// Commands for the driver.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Open an outgoing TCP connection (dropping any attempt in progress).
    Connect,
    /// Send a message on a connection.
    Send(ConnId, Message),
    /// Close a connection (after flushing what was sent).
    Close(ConnId),
    /// (Re)arm a timer to fire at the deadline.
    ArmTimer(Timer, Instant),
    /// Stop a timer.
    CancelTimer(Timer),
    /// The state changed; `reason` says why, for the one log line per change.
    StateChanged {
        /// Previous state.
        from: State,
        /// New state.
        to: State,
        /// Why.
        reason: String,
    },
    /// The session reached Established.
    SessionUp(Negotiated),
    /// The session left Established.
    SessionDown(DownReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Outbound,
    Inbound,
}

#[derive(Debug, Clone)]
struct Conn {
    id: ConnId,
    dir: Direction,
    open: Option<Open>,
}

/// One peer's BGP state machine.
#[derive(Debug)]
pub struct Fsm {
    config: PeerConfig,
    state: State,
    primary: Option<Conn>,
    /// A second connection during collision detection (RFC 4271 §6.8).
    secondary: Option<Conn>,
    /// False after ManualStop: no automatic restart.
    started: bool,
    failures: u32,
    established_at: Option<Instant>,
    negotiated: Option<Negotiated>,
    out: VecDeque<Output>,
}

impl Fsm {
    /// A stopped FSM in Idle; send [`Event::ManualStart`] to start it.
    pub fn new(config: PeerConfig) -> Self {
        Self {
            config,
            state: State::Idle,
            primary: None,
            secondary: None,
            started: false,
            failures: 0,
            established_at: None,
            negotiated: None,
            out: VecDeque::new(),
        }
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Negotiated parameters while Established.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        self.negotiated.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &PeerConfig {
        &self.config
    }

    /// Next command for the driver.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// The reconnect delay after the current number of consecutive failures.
    pub fn backoff(&self) -> Duration {
        let base = self.config.connect_retry;
        let factor = 1u32.checked_shl(self.failures.min(16)).unwrap_or(u32::MAX);
        base.checked_mul(factor).unwrap_or(self.config.connect_retry_max).min(self.config.connect_retry_max)
    }

    /// Feeds one event.
    pub fn handle(&mut self, now: Instant, event: Event) {
        match event {
            Event::ManualStart => self.manual_start(now),
            Event::ManualStop { subcode } => self.manual_stop(subcode),
            Event::ConnectRetryTimerExpires => self.connect_retry_expired(now),
            Event::HoldTimerExpires => {
                if self.primary.is_some()
                    && matches!(self.state, State::OpenSent | State::OpenConfirm | State::Established)
                {
                    let n = Notification { code: code::HOLD_TIMER_EXPIRED, subcode: 0, data: Bytes::new() };
                    self.send_primary(Message::Notification(n));
                    self.fail(now, DownReason::HoldTimerExpired);
                }
            }
            Event::KeepaliveTimerExpires => {
                if matches!(self.state, State::OpenConfirm | State::Established) {
                    self.send_primary(Message::Keepalive);
                    self.arm_keepalive(now);
                }
            }
            Event::TcpCrAcked(id) => self.connection_up(now, id, Direction::Outbound),
            Event::TcpConnectionConfirmed(id) => self.connection_up(now, id, Direction::Inbound),
            Event::TcpConnectionFails(id) => self.connection_failed(now, id),
            Event::Message(id, msg) => self.message(now, id, msg),
            Event::MessageError(id, err) => self.message_error(now, id, err),
        }
    }

    fn set_state(&mut self, to: State, reason: impl Into<String>) {
        if self.state != to {
            let from = self.state;
            self.state = to;
            self.out.push_back(Output::StateChanged { from, to, reason: reason.into() });
        }
    }

    fn manual_start(&mut self, now: Instant) {
        if self.started && self.state != State::Idle {
            return;
        }
        self.started = true;
        self.start(now, "manual start");
    }

    /// Idle → Connect/Active (RFC 4271 §8.2.2, Idle state, events 1/4).
    fn start(&mut self, now: Instant, reason: &str) {
        if self.config.passive {
            self.set_state(State::Active, format!("{reason}, passive"));
        } else {
            self.out.push_back(Output::Connect);
            self.out.push_back(Output::ArmTimer(Timer::ConnectRetry, now + self.config.connect_retry));
            self.set_state(State::Connect, reason);
        }
    }

    fn manual_stop(&mut self, sub: u8) {
        let n = Notification::cease(sub);
        if matches!(self.state, State::OpenSent | State::OpenConfirm | State::Established) {
            self.send_primary(Message::Notification(n.clone()));
        }
        if let Some(c) = self.secondary.take() {
            self.out.push_back(Output::Close(c.id));
        }
        let was_up = self.state == State::Established;
        self.drop_primary();
        self.cancel_all();
        self.started = false;
        self.failures = 0;
        if was_up {
            self.out.push_back(Output::SessionDown(DownReason::ManualStop(n.clone())));
        }
        self.negotiated = None;
        self.established_at = None;
        self.set_state(State::Idle, format!("manual stop, sent {n}"));
    }

    fn connect_retry_expired(&mut self, now: Instant) {
        match self.state {
            State::Idle if self.started => self.start(now, "reconnect delay over"),
            State::Connect => {
                // RFC 4271 §8.2.2 Connect state, event 9: drop the attempt and retry.
                self.out.push_back(Output::Connect);
                self.out.push_back(Output::ArmTimer(Timer::ConnectRetry, now + self.backoff()));
            }
            State::Active if !self.config.passive => {
                self.out.push_back(Output::Connect);
                self.out.push_back(Output::ArmTimer(Timer::ConnectRetry, now + self.backoff()));
                self.set_state(State::Connect, "connect retry timer expired");
            }
            _ => {}
        }
    }

    fn connection_up(&mut self, now: Instant, id: ConnId, dir: Direction) {
        let conn = Conn { id, dir, open: None };
        match self.state {
            State::Connect | State::Active => {
                self.primary = Some(conn);
                self.out.push_back(Output::CancelTimer(Timer::ConnectRetry));
                let open = self.our_open();
                self.out.push_back(Output::Send(id, Message::Open(open)));
                self.out.push_back(Output::ArmTimer(Timer::Hold, now + OPEN_HOLD_TIME));
                let how = if dir == Direction::Outbound { "connected to peer" } else { "peer connected" };
                self.set_state(State::OpenSent, format!("{how}, OPEN sent"));
            }
            State::OpenSent | State::OpenConfirm if self.secondary.is_none() => {
                // Possible collision: run both until an OPEN tells us the peer's identifier.
                let open = self.our_open();
                self.out.push_back(Output::Send(id, Message::Open(open)));
                self.secondary = Some(conn);
            }
            State::Established => {
                // RFC 4271 §6.8: a collision with an Established session closes the new one.
                let n = Notification::cease(subcode::CEASE_CONNECTION_COLLISION);
                self.out.push_back(Output::Send(id, Message::Notification(n)));
                self.out.push_back(Output::Close(id));
            }
            _ => self.out.push_back(Output::Close(id)),
        }
    }

    fn connection_failed(&mut self, now: Instant, id: ConnId) {
        if self.secondary.as_ref().is_some_and(|c| c.id == id) {
            self.secondary = None;
            return;
        }
        if self.primary.as_ref().is_none_or(|c| c.id != id) {
            if self.state == State::Connect {
                // Event 18 in Connect: the outgoing attempt failed (RFC 4271 §8.2.2).
                self.out.push_back(Output::ArmTimer(Timer::ConnectRetry, now + self.backoff()));
                self.failures = self.failures.saturating_add(1);
                self.set_state(State::Active, "connect failed");
            }
            return;
        }
        self.fail(now, DownReason::ConnectionFailed);
    }

    fn message(&mut self, now: Instant, id: ConnId, msg: Message) {
        let on_primary = self.primary.as_ref().is_some_and(|c| c.id == id);
        let on_secondary = self.secondary.as_ref().is_some_and(|c| c.id == id);
        if on_secondary {
            return self.secondary_message(now, msg);
        }
        if !on_primary {
            return;
        }
        match (self.state, msg) {
            (_, Message::Notification(n)) => self.fail(now, DownReason::NotificationReceived(n)),
            (State::OpenSent, Message::Open(open)) => self.open_received(now, open),
            (State::OpenConfirm, Message::Keepalive) => self.established(now),
            (State::Established, Message::Keepalive | Message::Update(_) | Message::RouteRefresh(_)) => {
                self.arm_hold(now);
            }
            (State::OpenConfirm, Message::Open(open)) if self.secondary.is_none() => {
                // Same connection sent OPEN twice: FSM error (RFC 6608).
                let _ = open;
                self.fsm_error(now, subcode::FSM_UNEXPECTED_IN_OPENCONFIRM);
            }
            (state, _) => {
                let sub = match state {
                    State::OpenSent => subcode::FSM_UNEXPECTED_IN_OPENSENT,
                    State::OpenConfirm => subcode::FSM_UNEXPECTED_IN_OPENCONFIRM,
                    _ => subcode::FSM_UNEXPECTED_IN_ESTABLISHED,
                };
                self.fsm_error(now, sub);
            }
        }
    }

    fn fsm_error(&mut self, now: Instant, sub: u8) {
        let n = Notification { code: code::FSM, subcode: sub, data: Bytes::new() };
        self.send_primary(Message::Notification(n.clone()));
        self.fail(now, DownReason::NotificationSent(n, "unexpected message"));
    }

    fn message_error(&mut self, now: Instant, id: ConnId, err: DecodeError) {
        if self.secondary.as_ref().is_some_and(|c| c.id == id) {
            if let Some(c) = self.secondary.take() {
                self.out.push_back(Output::Send(c.id, Message::Notification(Notification::from(&err))));
                self.out.push_back(Output::Close(c.id));
            }
            return;
        }
        if self.primary.as_ref().is_none_or(|c| c.id != id) {
            return;
        }
        if err.action != ErrorAction::SessionReset && self.state == State::Established {
            // RFC 7606: the session stays up; the driver already handled the prefixes.
            self.arm_hold(now);
            return;
        }
        let n = Notification::from(&err);
        self.send_primary(Message::Notification(n.clone()));
        self.fail(now, DownReason::NotificationSent(n, err.reason));
    }

    /// Checks the peer's OPEN (RFC 4271 §6.2); returns the NOTIFICATION to send if it is bad.
    fn check_open(&self, open: &Open) -> Result<(), (Notification, &'static str)> {
        let notif = |sub: u8, data: Bytes| Notification { code: code::OPEN_MESSAGE, subcode: sub, data };
        if open.asn() != self.config.peer_as {
            return Err((
                notif(subcode::BAD_PEER_AS, Bytes::copy_from_slice(&open.my_as.to_be_bytes())),
                "bad peer AS",
            ));
        }
        let id = open.bgp_id;
        if id.is_unspecified() || (!self.config.is_ebgp() && id == self.config.router_id) {
            return Err((notif(subcode::BAD_BGP_IDENTIFIER, Bytes::new()), "bad BGP identifier"));
        }
        // RFC 4271 §6.2: hold time 1 or 2 seconds MUST be rejected.
        if open.hold_time == 1 || open.hold_time == 2 {
            return Err((notif(subcode::UNACCEPTABLE_HOLD_TIME, Bytes::new()), "unacceptable hold time"));
        }
        // RFC 4271 §6.2 lets us reject on the hold time: 0 would leave a dead peer
        // unnoticed unless BFD watches the session.
        if self.config.hold_time.min(open.hold_time) == 0 && !self.config.allow_zero_hold_time {
            return Err((
                notif(subcode::UNACCEPTABLE_HOLD_TIME, Bytes::new()),
                "unacceptable hold time 0 (no keepalives) without BFD",
            ));
        }
        Ok(())
    }

    fn open_received(&mut self, now: Instant, open: Open) {
        if let Err((n, why)) = self.check_open(&open) {
            self.send_primary(Message::Notification(n.clone()));
            return self.fail(now, DownReason::NotificationSent(n, why));
        }
        if self.secondary.is_some() && self.resolve_collision(now, &open, true) {
            return;
        }
        self.accept_open(now, open);
    }

    /// OpenSent → OpenConfirm on the primary connection.
    fn accept_open(&mut self, now: Instant, open: Open) {
        let neg = self.negotiate(&open);
        if let Some(p) = self.primary.as_mut() {
            p.open = Some(open);
        }
        self.send_primary(Message::Keepalive);
        let hold = neg.hold_time;
        self.negotiated = Some(neg);
        if hold == 0 {
            self.out.push_back(Output::CancelTimer(Timer::Hold));
            self.out.push_back(Output::CancelTimer(Timer::Keepalive));
        } else {
            self.arm_hold(now);
            self.arm_keepalive(now);
        }
        self.set_state(State::OpenConfirm, "OPEN received, KEEPALIVE sent");
    }

    fn secondary_message(&mut self, now: Instant, msg: Message) {
        match msg {
            Message::Open(open) => {
                if self.check_open(&open).is_err() {
                    if let Some(c) = self.secondary.take() {
                        self.out.push_back(Output::Close(c.id));
                    }
                    return;
                }
                if let Some(s) = self.secondary.as_mut() {
                    s.open = Some(open.clone());
                }
                self.resolve_collision(now, &open, false);
            }
            Message::Notification(_) => {
                if let Some(c) = self.secondary.take() {
                    self.out.push_back(Output::Close(c.id));
                }
            }
            _ => {}
        }
    }

    /// RFC 4271 §6.8: keep the connection opened by the speaker with the higher BGP
    /// identifier. Returns true when the OPEN just received on the primary was consumed
    /// (its connection lost).
    fn resolve_collision(&mut self, now: Instant, open: &Open, on_primary: bool) -> bool {
        let (Some(primary), Some(secondary)) = (self.primary.clone(), self.secondary.clone()) else {
            return false;
        };
        let keep_dir = if u32::from(self.config.router_id) > u32::from(open.bgp_id) {
            Direction::Outbound
        } else {
            Direction::Inbound
        };
        let n = Notification::cease(subcode::CEASE_CONNECTION_COLLISION);
        if primary.dir == keep_dir || secondary.dir != keep_dir {
            // The primary wins: close the secondary.
            self.secondary = None;
            self.out.push_back(Output::Send(secondary.id, Message::Notification(n)));
            self.out.push_back(Output::Close(secondary.id));
            false
        } else {
            // The secondary wins: it becomes the primary.
            self.out.push_back(Output::Send(primary.id, Message::Notification(n)));
            self.out.push_back(Output::Close(primary.id));
            self.secondary = None;
            let sec_open = secondary.open.clone();
            self.primary = Some(Conn { open: None, ..secondary });
            self.negotiated = None;
            // Our OPEN already went out on it; we are in OpenSent there unless its OPEN arrived.
            self.set_state(State::OpenSent, "connection collision: kept the other connection");
            self.out.push_back(Output::ArmTimer(Timer::Hold, now + OPEN_HOLD_TIME));
            self.out.push_back(Output::CancelTimer(Timer::Keepalive));
            if let Some(o) = sec_open {
                self.accept_open(now, o);
            }
            on_primary
        }
    }

    fn negotiate(&self, open: &Open) -> Negotiated {
        let hold_time = self.config.hold_time.min(open.hold_time);
        let keepalive_time = if hold_time == 0 {
            0
        } else {
            // Never above a third of the hold time (RFC 4271 §10), never 0, whatever the config says.
            let cap = (hold_time / 3).max(1);
            self.config.keepalive_time.unwrap_or(cap).clamp(1, cap)
        };
        let theirs = open.families();
        let families = self.config.families.iter().filter(|f| theirs.contains(f)).copied().collect();
        Negotiated {
            peer_as: open.asn(),
            peer_id: open.bgp_id,
            hold_time,
            keepalive_time,
            four_octet_as: open.four_octet_as().is_some(),
            families,
            route_refresh: open.capabilities.contains(&Capability::RouteRefresh),
            peer_graceful_restart: open.capabilities.iter().find_map(|c| match c {
                Capability::GracefulRestart(g) => Some(g.clone()),
                _ => None,
            }),
            conn: self.primary.as_ref().map(|c| c.id).unwrap_or(ConnId(0)),
        }
    }

    fn established(&mut self, now: Instant) {
        self.established_at = Some(now);
        if let Some(gr) = self.config.graceful_restart.as_mut() {
            // RFC 4724 §3: the R-bit only marks the first session after a restart.
            gr.restarting = false;
        }
        if let Some(n) = self.negotiated.clone() {
            if n.hold_time != 0 {
                self.arm_hold(now);
            }
            let reason = format!("KEEPALIVE received, peer AS {} id {}", n.peer_as, n.peer_id);
            self.set_state(State::Established, reason);
            self.out.push_back(Output::SessionUp(n));
        }
    }

    /// Any error: close, go Idle, reconnect after the backoff delay.
    fn fail(&mut self, now: Instant, reason: DownReason) {
        if let Some(c) = self.secondary.take() {
            self.out.push_back(Output::Close(c.id));
        }
        self.drop_primary();
        self.cancel_all();
        if self.state == State::Established {
            if self
                .established_at
                .is_some_and(|t| now.saturating_duration_since(t) >= self.config.stable_time)
            {
                self.failures = 0;
            }
            self.out.push_back(Output::SessionDown(reason.clone()));
        }
        self.negotiated = None;
        self.established_at = None;
        if self.started && self.config.passive {
            // A passive speaker never connects, so there is nothing to back off: listen
            // again at once, or a peer reconnecting quickly would be refused.
            self.set_state(State::Idle, reason.to_string());
            return self.start(now, "automatic restart");
        }
        let delay = self.backoff();
        self.failures = self.failures.saturating_add(1);
        if self.started {
            self.out.push_back(Output::ArmTimer(Timer::ConnectRetry, now + delay));
        }
        self.set_state(State::Idle, format!("{reason}; retry in {}s", delay.as_secs()));
    }

    fn drop_primary(&mut self) {
        if let Some(c) = self.primary.take() {
            self.out.push_back(Output::Close(c.id));
        }
    }

    fn cancel_all(&mut self) {
        for t in [Timer::ConnectRetry, Timer::Hold, Timer::Keepalive] {
            self.out.push_back(Output::CancelTimer(t));
        }
    }

    fn send_primary(&mut self, msg: Message) {
        if let Some(c) = &self.primary {
            self.out.push_back(Output::Send(c.id, msg));
        }
    }

    fn arm_hold(&mut self, now: Instant) {
        if let Some(n) = &self.negotiated
            && n.hold_time > 0
        {
            self.out
                .push_back(Output::ArmTimer(Timer::Hold, now + Duration::from_secs(u64::from(n.hold_time))));
        }
    }

    fn arm_keepalive(&mut self, now: Instant) {
        if let Some(n) = &self.negotiated
            && n.keepalive_time > 0
        {
            let d = Duration::from_secs(u64::from(n.keepalive_time));
            self.out.push_back(Output::ArmTimer(Timer::Keepalive, now + d));
        }
    }

    /// The OPEN we send: multiprotocol per family, route refresh, 4-octet AS, and GR.
    pub fn our_open(&self) -> Open {
        let mut caps: Vec<Capability> =
            self.config.families.iter().map(|f| Capability::Multiprotocol(*f)).collect();
        caps.push(Capability::RouteRefresh);
        if let Some(gr) = &self.config.graceful_restart {
            caps.push(Capability::GracefulRestart(GracefulRestart {
                restarting: gr.restarting,
                restart_time: gr.restart_time.min(4095),
                families: self
                    .config
                    .families
                    .iter()
                    .map(|f| GrFamily { family: *f, forwarding_preserved: gr.forwarding_preserved })
                    .collect(),
            }));
        }
        Open::new(self.config.local_as, self.config.hold_time, self.config.router_id, caps)
    }
}
