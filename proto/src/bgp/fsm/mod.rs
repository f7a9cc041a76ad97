//! The BGP finite state machine of RFC 4271 §8 as a plain struct: no sockets, no
//! tokio, no clock. Drive it with [`Fsm::handle`] (an [`Input`] at an instant) and
//! drain [`Fsm::poll_transmit`] (messages to write), [`Fsm::poll_event`] (connections
//! to open or close, state changes, session up/down) and [`Fsm::poll_timeout`] (when to
//! call `handle(now, Input::Timeout)`), the shape of [`bfd::Session`](crate::bfd::Session).
//!
//! Connections are named by [`ConnId`]s the driver picks. The FSM tracks at most two
//! connections at once so it can resolve connection collisions (RFC 4271 §6.8).
mod config;
mod events;
mod open;
mod timers;

pub use config::{GracefulRestartConfig, PeerAs, PeerConfig};
pub use events::{ConnId, DownReason, Event, Input, Negotiated, State, Transmit};

use super::error::{DecodeError, ErrorAction, code, subcode};
use super::message::{Message, Notification, Open};
use bytes::Bytes;
use open::{check_open, negotiate};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use timers::{Timer, Timers};

/// Hold time used while waiting for the peer's OPEN (RFC 4271 §8.2.2, "4 minutes").
pub const OPEN_HOLD_TIME: Duration = Duration::from_secs(240);

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
    timers: Timers,
    transmit: VecDeque<Transmit>,
    events: VecDeque<Event>,
}

impl Fsm {
    /// A stopped FSM in Idle; send [`Input::ManualStart`] to start it.
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
            timers: Timers::default(),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
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

    /// The next message to write, if any.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmit.pop_front()
    }

    /// When to call `handle(now, Input::Timeout)` next; `None` while no timer runs.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// The next connection to open or close, state change or session up/down, if any.
    /// Messages from [`Fsm::poll_transmit`] go out before the connection they are on closes.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The reconnect delay after the current number of consecutive failures.
    pub fn backoff(&self) -> Duration {
        let base = self.config.connect_retry;
        let factor = 1u32.checked_shl(self.failures.min(16)).unwrap_or(u32::MAX);
        base.checked_mul(factor).unwrap_or(self.config.connect_retry_max).min(self.config.connect_retry_max)
    }

    /// Feeds one input at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::ManualStart => self.manual_start(now),
            Input::ManualStop { subcode } => self.manual_stop(subcode),
            Input::Timeout => self.timeout(now),
            Input::TcpCrAcked(id) => self.connection_up(now, id, Direction::Outbound),
            Input::TcpConnectionConfirmed(id) => self.connection_up(now, id, Direction::Inbound),
            Input::TcpConnectionFails(id) => self.connection_failed(now, id),
            Input::Message(id, msg) => self.message(now, id, msg),
            Input::MessageError(id, err) => self.message_error(now, id, err),
        }
    }

    /// Fires every timer due at `now`, earliest first; a timer that an earlier one
    /// stopped or re-armed does not fire.
    fn timeout(&mut self, now: Instant) {
        for (at, t) in self.timers.due(now) {
            if !self.timers.take(t, at) {
                continue;
            }
            match t {
                Timer::ConnectRetry => self.connect_retry_expired(now),
                Timer::Hold => self.hold_timer_expired(now),
                Timer::Keepalive => self.keepalive_timer_expired(now),
            }
        }
    }

    fn set_state(&mut self, to: State, reason: impl Into<String>) {
        if self.state != to {
            let from = self.state;
            self.state = to;
            self.events.push_back(Event::StateChanged { from, to, reason: reason.into() });
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
            self.events.push_back(Event::Connect);
            self.timers.arm(Timer::ConnectRetry, now + self.config.connect_retry);
            self.set_state(State::Connect, reason);
        }
    }

    fn manual_stop(&mut self, sub: u8) {
        let n = Notification::cease(sub);
        if matches!(self.state, State::OpenSent | State::OpenConfirm | State::Established) {
            self.send_primary(Message::Notification(n.clone()));
        }
        if let Some(c) = self.secondary.take() {
            self.close(c.id);
        }
        let was_up = self.state == State::Established;
        self.drop_primary();
        self.timers.cancel_all();
        self.started = false;
        self.failures = 0;
        if was_up {
            self.events.push_back(Event::SessionDown(DownReason::ManualStop(n.clone())));
        }
        self.negotiated = None;
        self.established_at = None;
        self.set_state(State::Idle, format!("manual stop, sent {n}"));
    }

    /// Event 10.
    fn hold_timer_expired(&mut self, now: Instant) {
        if self.primary.is_some()
            && matches!(self.state, State::OpenSent | State::OpenConfirm | State::Established)
        {
            let n = Notification { code: code::HOLD_TIMER_EXPIRED, subcode: 0, data: Bytes::new() };
            self.send_primary(Message::Notification(n));
            self.fail(now, DownReason::HoldTimerExpired);
        }
    }

    /// Event 11.
    fn keepalive_timer_expired(&mut self, now: Instant) {
        if matches!(self.state, State::OpenConfirm | State::Established) {
            self.send_primary(Message::Keepalive);
            self.arm_keepalive(now);
        }
    }

    /// Event 9.
    fn connect_retry_expired(&mut self, now: Instant) {
        match self.state {
            State::Idle if self.started => self.start(now, "reconnect delay over"),
            State::Connect => {
                // RFC 4271 §8.2.2 Connect state, event 9: drop the attempt and retry.
                self.events.push_back(Event::Connect);
                self.timers.arm(Timer::ConnectRetry, now + self.backoff());
            }
            State::Active if !self.config.passive => {
                self.events.push_back(Event::Connect);
                self.timers.arm(Timer::ConnectRetry, now + self.backoff());
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
                self.timers.cancel(Timer::ConnectRetry);
                let open = self.our_open();
                self.send(id, Message::Open(open));
                self.timers.arm(Timer::Hold, now + OPEN_HOLD_TIME);
                let how = if dir == Direction::Outbound { "connected to peer" } else { "peer connected" };
                self.set_state(State::OpenSent, format!("{how}, OPEN sent"));
            }
            State::OpenSent | State::OpenConfirm if self.secondary.is_none() => {
                // Possible collision: run both until an OPEN tells us the peer's identifier.
                let open = self.our_open();
                self.send(id, Message::Open(open));
                self.secondary = Some(conn);
            }
            State::Established => {
                // RFC 4271 §6.8: a collision with an Established session closes the new one.
                let n = Notification::cease(subcode::CEASE_CONNECTION_COLLISION);
                self.send(id, Message::Notification(n));
                self.close(id);
            }
            _ => self.close(id),
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
                self.timers.arm(Timer::ConnectRetry, now + self.backoff());
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
                self.send(c.id, Message::Notification(Notification::from(&err)));
                self.close(c.id);
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

    fn open_received(&mut self, now: Instant, open: Open) {
        if let Err((n, why)) = check_open(&self.config, &open) {
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
        let conn = self.primary.as_ref().map(|c| c.id).unwrap_or(ConnId(0));
        let neg = negotiate(&self.config, &open, conn);
        if let Some(p) = self.primary.as_mut() {
            p.open = Some(open);
        }
        self.send_primary(Message::Keepalive);
        let hold = neg.hold_time;
        self.negotiated = Some(neg);
        if hold == 0 {
            self.timers.cancel(Timer::Hold);
            self.timers.cancel(Timer::Keepalive);
        } else {
            self.arm_hold(now);
            self.arm_keepalive(now);
        }
        self.set_state(State::OpenConfirm, "OPEN received, KEEPALIVE sent");
    }

    fn secondary_message(&mut self, now: Instant, msg: Message) {
        match msg {
            Message::Open(open) => {
                if check_open(&self.config, &open).is_err() {
                    if let Some(c) = self.secondary.take() {
                        self.close(c.id);
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
                    self.close(c.id);
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
            self.send(secondary.id, Message::Notification(n));
            self.close(secondary.id);
            false
        } else {
            // The secondary wins: it becomes the primary.
            self.send(primary.id, Message::Notification(n));
            self.close(primary.id);
            self.secondary = None;
            let sec_open = secondary.open.clone();
            self.primary = Some(Conn { open: None, ..secondary });
            self.negotiated = None;
            // Our OPEN already went out on it; we are in OpenSent there unless its OPEN arrived.
            self.set_state(State::OpenSent, "connection collision: kept the other connection");
            self.timers.arm(Timer::Hold, now + OPEN_HOLD_TIME);
            self.timers.cancel(Timer::Keepalive);
            if let Some(o) = sec_open {
                self.accept_open(now, o);
            }
            on_primary
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
            self.events.push_back(Event::SessionUp(n));
        }
    }

    /// Any error: close, go Idle, reconnect after the backoff delay.
    fn fail(&mut self, now: Instant, reason: DownReason) {
        if let Some(c) = self.secondary.take() {
            self.close(c.id);
        }
        self.drop_primary();
        self.timers.cancel_all();
        if self.state == State::Established {
            if self
                .established_at
                .is_some_and(|t| now.saturating_duration_since(t) >= self.config.stable_time)
            {
                self.failures = 0;
            }
            self.events.push_back(Event::SessionDown(reason.clone()));
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
            self.timers.arm(Timer::ConnectRetry, now + delay);
        }
        self.set_state(State::Idle, format!("{reason}; retry in {}s", delay.as_secs()));
    }

    fn drop_primary(&mut self) {
        if let Some(c) = self.primary.take() {
            self.close(c.id);
        }
    }

    fn close(&mut self, conn: ConnId) {
        self.events.push_back(Event::Close(conn));
    }

    fn send(&mut self, conn: ConnId, message: Message) {
        self.transmit.push_back(Transmit { conn, message });
    }

    fn send_primary(&mut self, msg: Message) {
        if let Some(id) = self.primary.as_ref().map(|c| c.id) {
            self.send(id, msg);
        }
    }

    fn arm_hold(&mut self, now: Instant) {
        if let Some(n) = &self.negotiated
            && n.hold_time > 0
        {
            let d = Duration::from_secs(u64::from(n.hold_time));
            self.timers.arm(Timer::Hold, now + d);
        }
    }

    fn arm_keepalive(&mut self, now: Instant) {
        if let Some(n) = &self.negotiated
            && n.keepalive_time > 0
        {
            let d = Duration::from_secs(u64::from(n.keepalive_time));
            self.timers.arm(Timer::Keepalive, now + d);
        }
    }

    /// The OPEN we send: multiprotocol per family, route refresh, 4-octet AS, and GR.
    pub fn our_open(&self) -> Open {
        open::our_open(&self.config)
    }
}
