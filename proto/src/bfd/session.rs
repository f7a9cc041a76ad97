//! One BFD session in asynchronous mode: the state machine of RFC 5880 §6.8, sans-IO.
//!
//! Drive it with [`Session::handle`] (a received packet, an expired timer, an
//! administrative command, new timers) and drain [`Session::poll_transmit`] (packets to
//! send now), [`Session::poll_timeout`] (when to call `handle(now, Input::Timeout)`) and
//! [`Session::poll_event`] (state changes with their diagnostic). Randomness for the
//! transmit jitter comes from the seed given to [`Session::new`].
//!
//! Demand mode, the Echo function and authentication are not implemented: we never set
//! D, always advertise Required Min Echo RX 0, and the codec discards packets with A.
use super::packet::{ControlPacket, Diagnostic, State};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// While not Up, bfd.DesiredMinTxInterval is at least one second (RFC 5880 §6.8.3).
pub const SLOW_TX: Duration = Duration::from_secs(1);

/// Timer parameters of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timers {
    /// bfd.DesiredMinTxInterval once Up.
    pub desired_min_tx: Duration,
    /// bfd.RequiredMinRxInterval.
    pub required_min_rx: Duration,
    /// bfd.DetectMult.
    pub detect_mult: u8,
}

impl Default for Timers {
    /// BFDProfile's defaults: 300 ms both ways, multiplier 3.
    fn default() -> Self {
        Timers {
            desired_min_tx: Duration::from_millis(300),
            required_min_rx: Duration::from_millis(300),
            detect_mult: 3,
        }
    }
}

/// Configuration of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionConfig {
    /// Timer parameters.
    pub timers: Timers,
    /// Passive role (RFC 5880 §6.1): send nothing until the remote system is heard.
    pub passive: bool,
}

/// An input to [`Session::handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// A Control packet demultiplexed to this session (decoded, so already past the
    /// session-independent checks of §6.8.6).
    Packet(ControlPacket),
    /// The instant of [`Session::poll_timeout`] has come.
    Timeout,
    /// Hold the session AdminDown (§6.8.16), telling the remote system.
    AdminDown,
    /// Leave AdminDown.
    AdminUp,
    /// New timer parameters; a Poll Sequence verifies them while Up (§6.8.3).
    SetTimers(Timers),
}

/// What the session reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// bfd.SessionState changed; `diag` is bfd.LocalDiag after the change.
    StateChanged { from: State, to: State, diag: Diagnostic },
}

/// Counters, for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Packets handed out by `poll_transmit`.
    pub sent: u64,
    /// Packets the session accepted.
    pub received: u64,
    /// Packets discarded by the session's checks of §6.8.6.
    pub discarded: u64,
    /// Poll Sequences completed.
    pub polls_completed: u64,
}

/// One BFD session (RFC 5880 §6.8.1 state variables, named after the RFC).
#[derive(Debug, Clone)]
pub struct Session {
    config: SessionConfig,
    /// bfd.SessionState
    session_state: State,
    /// bfd.RemoteSessionState
    remote_session_state: State,
    /// bfd.LocalDiscr
    local_discr: u32,
    /// bfd.RemoteDiscr
    remote_discr: u32,
    /// bfd.LocalDiag
    local_diag: Diagnostic,
    /// bfd.DesiredMinTxInterval as advertised now, µs (≥ 1 s while not Up).
    desired_min_tx: u32,
    /// bfd.RequiredMinRxInterval as advertised now, µs.
    required_min_rx: u32,
    /// bfd.RemoteMinRxInterval, µs.
    remote_min_rx: u32,
    /// bfd.DetectMult
    detect_mult: u8,
    /// Desired Min TX Interval of the last packet received, µs.
    remote_desired_min_tx: u32,
    /// Detect Mult of the last packet received (0: none yet).
    remote_detect_mult: u8,
    /// DesiredMinTxInterval the transmit interval is computed from: an increase while Up
    /// waits for the Poll Sequence to end (§6.8.3).
    tx_in_use: u32,
    /// RequiredMinRxInterval the Detection Time is computed from: a reduction while Up
    /// waits for the Poll Sequence to end (§6.8.3).
    rx_in_use: u32,
    /// A Poll Sequence is in progress (§6.5).
    poll_active: bool,
    /// Parameters changed again during a Poll Sequence: poll once more after it ends.
    poll_again: bool,
    next_tx: Option<Instant>,
    detect_deadline: Option<Instant>,
    rng: u64,
    transmit: VecDeque<ControlPacket>,
    events: VecDeque<Event>,
    stats: Stats,
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

fn duration(us: u32) -> Duration {
    Duration::from_micros(u64::from(us))
}

impl Session {
    /// A session in state Down. `local_discr` must be non-zero and unique among the
    /// sessions of the system (§6.8.1); `seed` feeds the transmit jitter.
    pub fn new(now: Instant, config: SessionConfig, local_discr: u32, seed: u64) -> Self {
        let desired = micros(config.timers.desired_min_tx.max(SLOW_TX));
        let required = micros(config.timers.required_min_rx);
        let mut s = Session {
            config,
            session_state: State::Down,
            remote_session_state: State::Down,
            local_discr,
            remote_discr: 0,
            local_diag: Diagnostic::None,
            desired_min_tx: desired,
            required_min_rx: required,
            // §6.8.1: initialised to 1 so the first packets can go out.
            remote_min_rx: 1,
            detect_mult: config.timers.detect_mult.max(1),
            remote_desired_min_tx: 0,
            remote_detect_mult: 0,
            tx_in_use: desired,
            rx_in_use: required,
            poll_active: false,
            poll_again: false,
            next_tx: None,
            detect_deadline: None,
            rng: seed ^ 0x9e37_79b9_7f4a_7c15,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        };
        if s.may_transmit() {
            // The first packet goes out at once; the jitter spreads the ones after it.
            s.next_tx = Some(now);
        }
        s
    }

    /// Processes one input at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Packet(p) => self.receive(now, &p),
            Input::Timeout => self.timeout(now),
            Input::AdminDown => {
                if self.session_state != State::AdminDown {
                    self.local_diag = Diagnostic::AdministrativelyDown;
                    self.set_state(now, State::AdminDown);
                    self.detect_deadline = None;
                    self.end_poll(false);
                }
            }
            Input::AdminUp => {
                if self.session_state == State::AdminDown {
                    self.set_state(now, State::Down);
                }
            }
            Input::SetTimers(t) => {
                self.config.timers = t;
                self.detect_mult = t.detect_mult.max(1);
                self.update_intervals(now);
            }
        }
    }

    /// The next packet to send now, if any.
    pub fn poll_transmit(&mut self) -> Option<ControlPacket> {
        let p = self.transmit.pop_front()?;
        self.stats.sent += 1;
        Some(p)
    }

    /// When to call `handle(now, Input::Timeout)` next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.next_tx, self.detect_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next state change, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// bfd.SessionState.
    pub fn state(&self) -> State {
        self.session_state
    }

    /// bfd.RemoteSessionState.
    pub fn remote_state(&self) -> State {
        self.remote_session_state
    }

    /// bfd.LocalDiag.
    pub fn local_diag(&self) -> Diagnostic {
        self.local_diag
    }

    /// bfd.LocalDiscr.
    pub fn local_discr(&self) -> u32 {
        self.local_discr
    }

    /// bfd.RemoteDiscr (0 while the remote system is unknown).
    pub fn remote_discr(&self) -> u32 {
        self.remote_discr
    }

    /// Whether a Poll Sequence is in progress.
    pub fn poll_active(&self) -> bool {
        self.poll_active
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The configuration (with the latest timers).
    pub fn config(&self) -> SessionConfig {
        self.config
    }

    /// The interval between periodic packets before jitter (§6.8.2, §6.8.7); None when
    /// the remote system asked for none (RemoteMinRxInterval 0).
    pub fn tx_interval(&self) -> Option<Duration> {
        (self.remote_min_rx != 0).then(|| duration(self.tx_in_use.max(self.remote_min_rx)))
    }

    /// The Detection Time (§6.8.4): the remote DetectMult times the agreed interval;
    /// None before the remote system is heard.
    pub fn detection_time(&self) -> Option<Duration> {
        (self.remote_detect_mult != 0).then(|| {
            duration(self.rx_in_use.max(self.remote_desired_min_tx)) * u32::from(self.remote_detect_mult)
        })
    }

    /// §6.8.6, reception of a BFD Control packet.
    fn receive(&mut self, now: Instant, p: &ControlPacket) {
        if p.your_discr != 0 && p.your_discr != self.local_discr {
            self.stats.discarded += 1;
            return;
        }
        if p.your_discr == 0 && !matches!(self.session_state, State::Down | State::AdminDown) {
            self.stats.discarded += 1;
            return;
        }
        self.stats.received += 1;
        let was_silent = !self.may_transmit();
        self.remote_discr = p.my_discr;
        self.remote_session_state = p.state;
        self.remote_min_rx = p.required_min_rx;
        self.remote_desired_min_tx = p.desired_min_tx;
        self.remote_detect_mult = p.detect_mult;
        if p.final_ && self.poll_active {
            self.end_poll(true);
        }
        if self.session_state == State::AdminDown {
            return;
        }
        if let Some(t) = self.detection_time() {
            self.detect_deadline = Some(now + t);
        }
        let next = match (self.session_state, p.state) {
            (State::Down | State::Init | State::Up, State::AdminDown) => {
                (self.session_state != State::Down).then_some(State::Down)
            }
            (State::Down, State::Down) => Some(State::Init),
            (State::Down, State::Init) => Some(State::Up),
            (State::Init, State::Init | State::Up) => Some(State::Up),
            (State::Up, State::Down) => Some(State::Down),
            _ => None,
        };
        let mut sent = false;
        if let Some(next) = next {
            self.local_diag = match next {
                State::Down => Diagnostic::NeighborSignaledSessionDown,
                State::Up => Diagnostic::None,
                _ => self.local_diag,
            };
            sent = self.set_state(now, next);
        }
        if p.poll {
            // §6.8.7: answer with Final at once, never with P and F together.
            self.transmit.push_back(self.packet(true));
            sent = true;
        }
        if !sent && was_silent && self.may_transmit() {
            // A passive system starts sending once it has heard the remote one.
            self.send_now(now);
        } else {
            self.rearm_tx(now);
        }
    }

    fn timeout(&mut self, now: Instant) {
        if self.detect_deadline.is_some_and(|d| d <= now) {
            // §6.8.4 / §6.8.1: no packet within the Detection Time.
            self.detect_deadline = None;
            if matches!(self.session_state, State::Init | State::Up) {
                self.local_diag = Diagnostic::ControlDetectionTimeExpired;
                self.set_state(now, State::Down);
            }
            self.remote_discr = 0;
            self.remote_session_state = State::Down;
            self.remote_min_rx = 1;
            self.remote_desired_min_tx = 0;
            self.remote_detect_mult = 0;
            self.end_poll(false);
            self.rearm_tx(now);
        }
        if self.next_tx.is_some_and(|t| t <= now) {
            if self.may_transmit() {
                self.send_now(now);
            } else {
                self.next_tx = None;
            }
        }
    }

    /// Changes bfd.SessionState, reports it, and sends a packet at once so the remote
    /// system sees the change without waiting for the (slow) periodic timer. Returns
    /// whether a packet was sent.
    fn set_state(&mut self, now: Instant, to: State) -> bool {
        let from = self.session_state;
        if from == to {
            return false;
        }
        self.session_state = to;
        self.events.push_back(Event::StateChanged { from, to, diag: self.local_diag });
        if from == State::Up || to == State::Up {
            // Leaving or reaching Up moves DesiredMinTxInterval to or from 1 s (§6.8.3).
            self.update_intervals(now);
        }
        if self.may_transmit() {
            self.send_now(now);
            true
        } else {
            false
        }
    }

    /// Recomputes the advertised intervals from the config and the state, starting a
    /// Poll Sequence while Up when they change (§6.8.3).
    fn update_intervals(&mut self, now: Instant) {
        let up = self.session_state == State::Up;
        let t = self.config.timers;
        let desired = micros(if up { t.desired_min_tx } else { t.desired_min_tx.max(SLOW_TX) });
        let required = micros(t.required_min_rx);
        if desired == self.desired_min_tx && required == self.required_min_rx {
            return;
        }
        self.desired_min_tx = desired;
        self.required_min_rx = required;
        if up {
            // Faster sending and slower-tolerating detection are safe at once; the
            // opposite waits until the remote system has acknowledged (§6.8.3).
            self.tx_in_use = self.tx_in_use.min(desired);
            self.rx_in_use = self.rx_in_use.max(required);
            if self.poll_active {
                self.poll_again = true;
            } else {
                self.poll_active = true;
            }
        } else {
            self.tx_in_use = desired;
            self.rx_in_use = required;
        }
        self.rearm_tx(now);
    }

    /// Ends the Poll Sequence; with `acknowledged`, the new values take full effect.
    fn end_poll(&mut self, acknowledged: bool) {
        if !self.poll_active {
            return;
        }
        self.poll_active = false;
        self.tx_in_use = self.desired_min_tx;
        self.rx_in_use = self.required_min_rx;
        if acknowledged {
            self.stats.polls_completed += 1;
            if std::mem::take(&mut self.poll_again) {
                self.poll_active = true;
            }
        } else {
            self.poll_again = false;
        }
    }

    /// §6.8.7: a Passive system is silent until it knows the remote system, and nobody
    /// sends periodically to a system that asked for RemoteMinRxInterval 0.
    fn may_transmit(&self) -> bool {
        !(self.config.passive && self.remote_discr == 0) && self.remote_min_rx != 0
    }

    fn send_now(&mut self, now: Instant) {
        self.transmit.push_back(self.packet(false));
        self.next_tx = self.jittered_interval().map(|iv| now + iv);
    }

    /// Brings the periodic timer forward when the interval got shorter.
    fn rearm_tx(&mut self, now: Instant) {
        if !self.may_transmit() {
            self.next_tx = None;
            return;
        }
        let Some(iv) = self.jittered_interval() else {
            self.next_tx = None;
            return;
        };
        let candidate = now + iv;
        if self.next_tx.is_none_or(|t| t > candidate) {
            self.next_tx = Some(candidate);
        }
    }

    /// §6.8.7: the interval less 0–25 % (10–25 % with DetectMult 1).
    fn jittered_interval(&mut self) -> Option<Duration> {
        let iv = self.tx_interval()?;
        let max_pct = if self.detect_mult == 1 { 90 } else { 100 };
        let pct = 75 + self.next_random() % (max_pct - 75 + 1);
        Some(iv * pct / 100)
    }

    /// splitmix64: enough for jitter, no dependency, reproducible from the seed.
    fn next_random(&mut self) -> u32 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 32) as u32
    }

    /// §6.8.7: the contents of a transmitted Control packet.
    fn packet(&self, final_: bool) -> ControlPacket {
        ControlPacket {
            diag: self.local_diag,
            state: self.session_state,
            poll: self.poll_active && !final_,
            final_,
            control_plane_independent: false,
            demand: false,
            detect_mult: self.detect_mult,
            my_discr: self.local_discr,
            your_discr: self.remote_discr,
            desired_min_tx: self.desired_min_tx,
            required_min_rx: self.required_min_rx,
            required_min_echo_rx: 0,
        }
    }
}
