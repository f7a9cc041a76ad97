//! Two sessions driven against each other in memory with simulated time (the shape of
//! quinn-proto's `tests/util.rs` `Pair`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::packet::{ControlPacket, Diagnostic, State};
use super::session::{Event, Input, Session, SessionConfig, Timers};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const MS: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}

/// A packet seen on the wire: when it was sent, by whom.
#[derive(Debug, Clone, Copy)]
struct Wire {
    at: Duration,
    from: Side,
    packet: ControlPacket,
}

struct Pair {
    start: Instant,
    now: Instant,
    a: Option<Session>,
    b: Option<Session>,
    latency: Duration,
    link_up: bool,
    in_flight: VecDeque<(Instant, Side, ControlPacket)>,
    wire: Vec<Wire>,
    events: Vec<(Duration, Side, Event)>,
}

fn session(start: Instant, cfg: SessionConfig, discr: u32) -> Session {
    Session::new(start, cfg, discr, u64::from(discr))
}

impl Pair {
    fn new(a: SessionConfig, b: SessionConfig) -> Self {
        let start = Instant::now();
        Pair {
            start,
            now: start,
            a: Some(session(start, a, 0x0a0a_0001)),
            b: Some(session(start, b, 0x0b0b_0002)),
            latency: MS,
            link_up: true,
            in_flight: VecDeque::new(),
            wire: Vec::new(),
            events: Vec::new(),
        }
    }

    fn default() -> Self {
        Self::new(SessionConfig::default(), SessionConfig::default())
    }

    fn a(&mut self) -> &mut Session {
        self.a.as_mut().unwrap()
    }

    fn b(&mut self) -> &mut Session {
        self.b.as_mut().unwrap()
    }

    fn side(&mut self, s: Side) -> Option<&mut Session> {
        match s {
            Side::A => self.a.as_mut(),
            Side::B => self.b.as_mut(),
        }
    }

    fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    fn handle(&mut self, s: Side, input: Input) {
        let now = self.now;
        if let Some(sess) = self.side(s) {
            sess.handle(now, input);
        }
        self.drain();
    }

    /// Moves transmitted packets onto the link and events into the log.
    fn drain(&mut self) {
        let at = self.elapsed();
        for s in [Side::A, Side::B] {
            let (now, latency, link_up) = (self.now, self.latency, self.link_up);
            let Some(sess) = self.side(s) else { continue };
            let mut out = Vec::new();
            while let Some(p) = sess.poll_transmit() {
                out.push(p);
            }
            let mut evs = Vec::new();
            while let Some(e) = sess.poll_event() {
                evs.push(e);
            }
            for p in out {
                self.wire.push(Wire { at, from: s, packet: p });
                if link_up {
                    self.in_flight.push_back((now + latency, s, p));
                }
            }
            self.events.extend(evs.into_iter().map(|e| (at, s, e)));
        }
    }

    /// Advances to the next thing that happens, not beyond `limit`; false when idle.
    fn step(&mut self, limit: Instant) -> bool {
        self.drain();
        let next = [
            self.a.as_ref().and_then(Session::poll_timeout),
            self.b.as_ref().and_then(Session::poll_timeout),
            self.in_flight.iter().map(|f| f.0).min(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next.filter(|n| *n <= limit) else {
            self.now = limit;
            return false;
        };
        self.now = self.now.max(next);
        let now = self.now;
        let due: Vec<_> = self.in_flight.iter().filter(|f| f.0 <= now).copied().collect();
        self.in_flight.retain(|f| f.0 > now);
        for (_, from, p) in due {
            let to = if from == Side::A { Side::B } else { Side::A };
            if let Some(s) = self.side(to) {
                s.handle(now, Input::Packet(p));
            }
        }
        for s in [Side::A, Side::B] {
            if let Some(sess) = self.side(s)
                && sess.poll_timeout().is_some_and(|t| t <= now)
            {
                sess.handle(now, Input::Timeout);
            }
        }
        self.drain();
        true
    }

    fn run_for(&mut self, d: Duration) {
        let limit = self.now + d;
        while self.step(limit) {}
    }

    /// Runs until `pred` holds; returns the simulated time it took.
    fn run_until(&mut self, limit: Duration, pred: impl Fn(&Pair) -> bool) -> Duration {
        let from = self.now;
        let deadline = self.now + limit;
        while !pred(self) {
            assert!(self.step(deadline) || pred(self), "condition not met within {limit:?}");
        }
        self.now - from
    }

    fn states(&self) -> (State, State) {
        (self.a.as_ref().unwrap().state(), self.b.as_ref().unwrap().state())
    }

    fn both_up(&self) -> bool {
        self.states() == (State::Up, State::Up)
    }

    fn transitions(&self, s: Side) -> Vec<(State, State)> {
        self.events
            .iter()
            .filter(|e| e.1 == s)
            .map(|(_, _, Event::StateChanged { from, to, .. })| (*from, *to))
            .collect()
    }

    /// Settled: both Up and no Poll Sequence left.
    fn settled(&self) -> bool {
        self.both_up() && !self.a.as_ref().unwrap().poll_active() && !self.b.as_ref().unwrap().poll_active()
    }
}

fn timers(tx_ms: u64, rx_ms: u64, mult: u8) -> Timers {
    Timers {
        desired_min_tx: Duration::from_millis(tx_ms),
        required_min_rx: Duration::from_millis(rx_ms),
        detect_mult: mult,
    }
}

#[test]
fn three_way_handshake_brings_both_up_then_timers_go_fast() {
    let mut p = Pair::default();
    let took = p.run_until(Duration::from_secs(5), Pair::both_up);
    // Immediate sends on every state change: Down, Init, Up in three one-way delays.
    assert!(took <= 3 * MS, "took {took:?}");
    for s in [Side::A, Side::B] {
        assert_eq!(p.transitions(s), vec![(State::Down, State::Init), (State::Init, State::Up)]);
    }
    // The first packets of each side carry Your Discriminator 0 and 1 s (§6.8.3).
    let first = p.wire.iter().find(|w| w.from == Side::A).unwrap().packet;
    assert_eq!((first.state, first.your_discr, first.desired_min_tx), (State::Down, 0, 1_000_000));
    // Reaching Up, each side polls to switch from 1 s to 300 ms.
    p.run_until(Duration::from_secs(5), Pair::settled);
    for s in [p.a.as_ref().unwrap(), p.b.as_ref().unwrap()] {
        assert_eq!(s.tx_interval(), Some(300 * MS));
        assert_eq!(s.detection_time(), Some(900 * MS));
        assert_eq!(s.stats().polls_completed, 1);
    }
    assert!(p.wire.iter().any(|w| w.from == Side::A && w.packet.poll));
    assert!(p.wire.iter().any(|w| w.from == Side::B && w.packet.final_));
    assert!(p.wire.iter().all(|w| !(w.packet.poll && w.packet.final_)), "P and F together");
    let a = p.a().local_discr();
    assert!(
        p.wire
            .iter()
            .filter(|w| w.from == Side::B && w.packet.state == State::Up)
            .all(|w| w.packet.your_discr == a)
    );
}

#[test]
fn periodic_packets_are_jittered_between_75_and_100_percent() {
    let mut p = Pair::default();
    p.run_until(Duration::from_secs(5), Pair::settled);
    let from = p.elapsed();
    p.run_for(Duration::from_secs(30));
    let times: Vec<Duration> =
        p.wire.iter().filter(|w| w.from == Side::A && w.at > from).map(|w| w.at).collect();
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() > 90, "{} packets", gaps.len());
    assert!(gaps.iter().all(|g| *g >= 225 * MS && *g <= 300 * MS), "{gaps:?}");
    assert!(
        gaps.iter().any(|g| *g < 260 * MS) && gaps.iter().any(|g| *g > 270 * MS),
        "not jittered: {gaps:?}"
    );

    // With DetectMult 1 the interval must not exceed 90 %.
    let one = SessionConfig { timers: timers(300, 300, 1), passive: false };
    let mut p = Pair::new(one, one);
    p.run_until(Duration::from_secs(5), Pair::settled);
    let from = p.elapsed();
    p.run_for(Duration::from_secs(10));
    let times: Vec<Duration> =
        p.wire.iter().filter(|w| w.from == Side::B && w.at > from).map(|w| w.at).collect();
    assert!(times.windows(2).all(|w| w[1] - w[0] <= 270 * MS && w[1] - w[0] >= 225 * MS));
}

#[test]
fn loss_is_detected_within_detect_mult_times_interval() {
    let mut p = Pair::default();
    p.run_until(Duration::from_secs(5), Pair::settled);
    p.run_for(Duration::from_secs(2));
    p.link_up = false;
    p.in_flight.clear();
    let cut = p.elapsed();
    let took = p.run_until(Duration::from_secs(5), |p| p.states() == (State::Down, State::Down));
    // The last packet arrived at most one interval before the cut; detection is 900 ms
    // after it.
    assert!(took > 900 * MS - 300 * MS && took <= 900 * MS, "detected after {took:?}");
    for s in [Side::A, Side::B] {
        let (at, _, ev) = *p.events.iter().rev().find(|e| e.1 == s).unwrap();
        assert!(at > cut);
        assert_eq!(
            ev,
            Event::StateChanged {
                from: State::Up,
                to: State::Down,
                diag: Diagnostic::ControlDetectionTimeExpired
            }
        );
    }
    // Down with the slow rate again, and the remote is forgotten after a further
    // Detection Time.
    assert_eq!(p.a().tx_interval(), Some(Duration::from_secs(1)));
    p.run_for(Duration::from_secs(4));
    assert_eq!(p.a().remote_discr(), 0);
    // The link comes back: the sessions come back up.
    p.link_up = true;
    p.run_until(Duration::from_secs(5), Pair::settled);
    assert_eq!(p.a().local_diag(), Diagnostic::None);
}

#[test]
fn timer_change_is_verified_by_poll_and_final() {
    let mut p = Pair::default();
    p.run_until(Duration::from_secs(5), Pair::settled);
    let polls_before = p.a().stats().polls_completed;
    // A slows down to 1 s: it may not send slower until B has acknowledged (§6.8.3).
    p.handle(Side::A, Input::SetTimers(timers(1000, 1000, 3)));
    assert!(p.a().poll_active());
    assert_eq!(p.a().tx_interval(), Some(300 * MS));
    // The next packet from A carries P with the new values; B answers with F at once.
    let mark = p.wire.len();
    p.run_until(Duration::from_secs(2), |p| !p.a.as_ref().unwrap().poll_active());
    let poll = p.wire[mark..].iter().find(|w| w.from == Side::A).unwrap();
    assert!(
        poll.packet.poll
            && poll.packet.desired_min_tx == 1_000_000
            && poll.packet.required_min_rx == 1_000_000
    );
    let fin = p.wire[mark..].iter().find(|w| w.from == Side::B && w.packet.final_).unwrap();
    assert_eq!(fin.at, poll.at + MS, "Final is sent at once");
    assert_eq!(p.a().stats().polls_completed, polls_before + 1);
    assert_eq!(p.a().tx_interval(), Some(Duration::from_secs(1)));
    // B sends no faster than A now requires, and expects A's packets 3 s apart.
    assert_eq!(p.b().tx_interval(), Some(Duration::from_secs(1)));
    assert_eq!(p.b().detection_time(), Some(Duration::from_secs(3)));
    // The session survives the change, then a speed-up to 50 ms on both sides.
    p.run_for(Duration::from_secs(10));
    assert!(p.both_up());
    p.handle(Side::A, Input::SetTimers(timers(50, 50, 3)));
    // A's lower RequiredMinRxInterval counts for its Detection Time only once B has
    // acknowledged it: until then B may still send at the old, slower rate (§6.8.3).
    assert_eq!(p.a().detection_time(), Some(Duration::from_secs(3)));
    p.handle(Side::B, Input::SetTimers(timers(50, 50, 3)));
    p.run_until(Duration::from_secs(5), Pair::settled);
    assert_eq!(p.a().tx_interval(), Some(50 * MS));
    assert_eq!(p.b().detection_time(), Some(150 * MS));
    p.run_for(Duration::from_secs(5));
    assert!(p.both_up());
    assert_eq!(p.transitions(Side::A).len(), 2, "no flap: {:?}", p.transitions(Side::A));
}

#[test]
fn admin_down_is_signalled_and_held_until_admin_up() {
    let mut p = Pair::default();
    p.run_until(Duration::from_secs(5), Pair::settled);
    p.handle(Side::A, Input::AdminDown);
    assert_eq!(p.a().state(), State::AdminDown);
    p.run_until(Duration::from_secs(1), |p| p.states().1 == State::Down);
    let ev = *p.events.iter().rev().find(|e| e.1 == Side::B).unwrap();
    assert_eq!(
        ev.2,
        Event::StateChanged {
            from: State::Up,
            to: State::Down,
            diag: Diagnostic::NeighborSignaledSessionDown
        }
    );
    assert_eq!(p.b().remote_state(), State::AdminDown);
    // Held down: A keeps signalling AdminDown, B stays Down.
    p.run_for(Duration::from_secs(10));
    assert_eq!(p.states(), (State::AdminDown, State::Down));
    let last = p.wire.iter().rev().find(|w| w.from == Side::A).unwrap().packet;
    assert_eq!((last.state, last.diag), (State::AdminDown, Diagnostic::AdministrativelyDown));
    p.handle(Side::A, Input::AdminUp);
    p.run_until(Duration::from_secs(5), Pair::both_up);
}

#[test]
fn passive_side_waits_for_the_active_one() {
    let passive = SessionConfig { passive: true, ..Default::default() };
    let mut p = Pair::new(SessionConfig::default(), passive);
    // The active side is not there yet.
    let a = p.a.take();
    p.run_for(Duration::from_secs(5));
    assert!(p.wire.is_empty(), "passive side sent {:?}", p.wire);
    assert_eq!(p.b().poll_timeout(), None);
    p.a = a;
    p.run_until(Duration::from_secs(5), Pair::settled);
    assert_eq!(p.wire[0].from, Side::A, "first packet from the active side");

    // Two passive sides never start.
    let mut p = Pair::new(passive, passive);
    p.run_for(Duration::from_secs(10));
    assert!(p.wire.is_empty());
    assert_eq!(p.states(), (State::Down, State::Down));
}

#[test]
fn packets_for_another_session_or_without_discriminator_when_up_are_discarded() {
    let mut p = Pair::default();
    p.run_until(Duration::from_secs(5), Pair::settled);
    let now = p.now;
    let b = p.b().local_discr();
    let base = ControlPacket {
        diag: Diagnostic::None,
        state: State::Down,
        poll: false,
        final_: false,
        control_plane_independent: false,
        demand: false,
        detect_mult: 3,
        my_discr: 99,
        your_discr: b.wrapping_add(1),
        desired_min_tx: 1_000_000,
        required_min_rx: 1_000_000,
        required_min_echo_rx: 0,
    };
    p.b().handle(now, Input::Packet(base));
    p.b().handle(now, Input::Packet(ControlPacket { your_discr: 0, ..base }));
    assert_eq!(p.b().state(), State::Up);
    assert_eq!(p.b().stats().discarded, 2);
    // The real peer's Down is not ignored.
    p.b().handle(now, Input::Packet(ControlPacket { your_discr: b, ..base }));
    assert_eq!(p.b().state(), State::Down);
    assert_eq!(p.b().local_diag(), Diagnostic::NeighborSignaledSessionDown);
}
