//! Two FSMs driven against each other in memory with simulated time (quinn-proto's
//! `Pair` shape). Every message goes through our encoder and decoder.
use crate::bgp::error::subcode;
use crate::bgp::fsm::*;
use crate::bgp::*;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

struct Side {
    fsm: Fsm,
    /// My connection id → the peer's id for the same TCP connection.
    links: HashMap<ConnId, ConnId>,
    sent: Vec<(Instant, ConnId, Message)>,
    ups: Vec<Negotiated>,
    downs: Vec<DownReason>,
    connects: Vec<Instant>,
}

impl Side {
    fn new(cfg: PeerConfig) -> Self {
        Self {
            fsm: Fsm::new(cfg),
            links: HashMap::new(),
            sent: Vec::new(),
            ups: Vec::new(),
            downs: Vec::new(),
            connects: Vec::new(),
        }
    }

    fn notifications(&self) -> Vec<Notification> {
        self.sent
            .iter()
            .filter_map(|(_, _, m)| if let Message::Notification(n) = m { Some(n.clone()) } else { None })
            .collect()
    }

    fn keepalives_since(&self, t: Instant) -> usize {
        self.sent.iter().filter(|(at, _, m)| *at > t && *m == Message::Keepalive).count()
    }
}

struct Pair {
    sides: [Side; 2],
    now: Instant,
    next_id: u64,
    queue: VecDeque<(usize, Input)>,
    /// When false, connects fail and nothing is delivered.
    network_up: bool,
    /// Drop messages sent by this side (simulates a dead peer with an open connection).
    blackhole: Option<usize>,
}

const A: usize = 0;
const B: usize = 1;

fn config(asn: u32, peer: u32, id: [u8; 4]) -> PeerConfig {
    PeerConfig::new(asn, peer, Ipv4Addr::from(id))
}

impl Pair {
    fn new(a: PeerConfig, b: PeerConfig) -> Self {
        Self {
            sides: [Side::new(a), Side::new(b)],
            now: Instant::now(),
            next_id: 1,
            queue: VecDeque::new(),
            network_up: true,
            blackhole: None,
        }
    }

    /// Default pair: A (AS 65001, id .1) actively connects to passive B (AS 65002, id .2).
    fn active_passive() -> Self {
        let a = config(65001, 65002, [192, 0, 2, 1]);
        let mut b = config(65002, 65001, [192, 0, 2, 2]);
        b.passive = true;
        b.hold_time = 30;
        Self::new(a, b)
    }

    fn start(&mut self) {
        self.queue.push_back((A, Input::ManualStart));
        self.queue.push_back((B, Input::ManualStart));
        self.drive();
    }

    fn state(&self, s: usize) -> State {
        self.sides[s].fsm.state()
    }

    /// Delivers inputs, then carries out each side's transmits and events, until nothing
    /// is left to do.
    fn drive(&mut self) {
        loop {
            if let Some((s, input)) = self.queue.pop_front() {
                self.sides[s].fsm.handle(self.now, input);
            }
            let mut progressed = false;
            for s in [A, B] {
                while let Some(t) = self.sides[s].fsm.poll_transmit() {
                    progressed = true;
                    self.transmit(s, t);
                }
                while let Some(ev) = self.sides[s].fsm.poll_event() {
                    progressed = true;
                    self.event(s, ev);
                }
            }
            if !progressed && self.queue.is_empty() {
                break;
            }
        }
    }

    fn transmit(&mut self, s: usize, t: Transmit) {
        let o = 1 - s;
        let Transmit { conn: id, message: msg } = t;
        self.sides[s].sent.push((self.now, id, msg.clone()));
        let Some(peer_id) = self.sides[s].links.get(&id).copied() else {
            return;
        };
        if self.blackhole == Some(s) || !self.network_up {
            return;
        }
        let wire = msg.to_bytes(&EncodeContext::default());
        let decoded =
            Message::decode(&mut wire.clone(), &DecodeContext::default()).expect("own encoding decodes");
        assert_eq!(decoded, msg);
        self.queue.push_back((o, Input::Message(peer_id, decoded)));
    }

    fn event(&mut self, s: usize, ev: Event) {
        let o = 1 - s;
        match ev {
            Event::Connect => {
                self.sides[s].connects.push(self.now);
                if self.network_up {
                    let (mine, theirs) = (ConnId(self.next_id), ConnId(self.next_id + 1));
                    self.next_id += 2;
                    self.sides[s].links.insert(mine, theirs);
                    self.sides[o].links.insert(theirs, mine);
                    self.queue.push_back((s, Input::TcpCrAcked(mine)));
                    self.queue.push_back((o, Input::TcpConnectionConfirmed(theirs)));
                } else {
                    self.queue.push_back((s, Input::TcpConnectionFails(ConnId(0))));
                }
            }
            Event::Close(id) => {
                if let Some(peer_id) = self.sides[s].links.remove(&id) {
                    self.sides[o].links.remove(&peer_id);
                    self.queue.push_back((o, Input::TcpConnectionFails(peer_id)));
                }
            }
            Event::StateChanged { .. } => {}
            Event::SessionUp(n) => self.sides[s].ups.push(n),
            Event::SessionDown(r) => self.sides[s].downs.push(r),
        }
    }

    /// Advances simulated time, firing timers in deadline order.
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let next = [A, B]
                .into_iter()
                .filter_map(|s| self.sides[s].fsm.poll_timeout().map(|at| (at, s)))
                .filter(|(at, _)| *at <= end)
                .min_by_key(|(at, _)| *at);
            let Some((at, s)) = next else { break };
            self.now = at.max(self.now);
            self.queue.push_back((s, Input::Timeout));
            self.drive();
        }
        self.now = end;
    }
}

#[test]
fn session_comes_up_and_negotiates() {
    let mut p = Pair::active_passive();
    p.start();
    assert_eq!(p.state(A), State::Established);
    assert_eq!(p.state(B), State::Established);
    let n = &p.sides[A].ups[0];
    assert_eq!(n.hold_time, 30, "min of 90 and 30");
    assert_eq!(n.keepalive_time, 10, "a third of the hold time");
    assert_eq!(n.peer_as, 65002);
    assert!(n.four_octet_as && n.route_refresh);
    assert_eq!(n.families, vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST]);
    assert_eq!(p.sides[B].ups[0].peer_id, Ipv4Addr::new(192, 0, 2, 1));
    assert!(p.sides[B].connects.is_empty(), "passive side never connects");
}

#[test]
fn families_are_the_intersection() {
    let mut a = config(65001, 65002, [192, 0, 2, 1]);
    a.families = vec![Family::IPV6_UNICAST];
    let mut b = config(65002, 65001, [192, 0, 2, 2]);
    b.passive = true;
    let mut p = Pair::new(a, b);
    p.start();
    assert_eq!(p.sides[B].ups[0].families, vec![Family::IPV6_UNICAST]);
}

/// RFC 8950: IPv4 over an IPv6 next hop only when both sides offer it.
#[test]
fn extended_next_hop_takes_both_sides() {
    for (a_offers, b_offers) in [(true, true), (true, false), (false, true), (false, false)] {
        let mut a = config(65001, 65002, [192, 0, 2, 1]);
        a.extended_next_hop = a_offers;
        let mut b = config(65002, 65001, [192, 0, 2, 2]);
        b.extended_next_hop = b_offers;
        b.passive = true;
        let mut p = Pair::new(a, b);
        p.start();
        let both = a_offers && b_offers;
        assert_eq!(p.sides[A].ups[0].ipv4_over_ipv6, both, "A, offers {a_offers}/{b_offers}");
        assert_eq!(p.sides[B].ups[0].ipv4_over_ipv6, both, "B, offers {a_offers}/{b_offers}");
    }
}

#[test]
fn keepalives_keep_the_session_up() {
    let mut p = Pair::active_passive();
    p.start();
    let t0 = p.now;
    p.advance(Duration::from_secs(600));
    assert_eq!(p.state(A), State::Established);
    assert_eq!(p.state(B), State::Established);
    // One KEEPALIVE every 10 s for 600 s.
    let n = p.sides[A].keepalives_since(t0);
    assert!((59..=61).contains(&n), "{n} keepalives");
    assert!(p.sides[A].downs.is_empty());
}

#[test]
fn configured_keepalive_is_used_but_capped_at_a_third() {
    let mut a = config(65001, 65002, [192, 0, 2, 1]);
    a.keepalive_time = Some(5);
    let mut b = config(65002, 65001, [192, 0, 2, 2]);
    b.passive = true;
    b.keepalive_time = Some(100);
    let mut p = Pair::new(a, b);
    p.start();
    assert_eq!(p.sides[A].ups[0].keepalive_time, 5);
    assert_eq!(p.sides[B].ups[0].keepalive_time, 30);
}

#[test]
fn hold_timer_expiry_sends_code_4_and_reconnects_with_backoff() {
    let mut p = Pair::active_passive();
    p.start();
    p.blackhole = Some(B);
    p.advance(Duration::from_secs(30));
    let n = p.sides[A].notifications();
    assert_eq!(n.last().map(|n| (n.code, n.subcode)), Some((4, 0)));
    assert_eq!(p.sides[A].downs, vec![DownReason::HoldTimerExpired]);
    assert_eq!(p.state(A), State::Idle);
    // B got the NOTIFICATION too and went down.
    assert!(matches!(p.sides[B].downs.first(), Some(DownReason::NotificationReceived(n)) if n.code == 4));
    p.blackhole = None;
    let connects = p.sides[A].connects.len();
    p.advance(Duration::from_millis(4900));
    assert_eq!(p.sides[A].connects.len(), connects, "no reconnect before the 5 s backoff");
    p.advance(Duration::from_millis(200));
    assert_eq!(p.state(A), State::Established);
    assert_eq!(p.sides[A].ups.len(), 2);
}

#[test]
fn zero_hold_time_means_no_keepalives() {
    // Both sides run BFD, which is what makes hold time 0 acceptable.
    let mut a = config(65001, 65002, [192, 0, 2, 1]);
    a.hold_time = 0;
    a.allow_zero_hold_time = true;
    let mut b = config(65002, 65001, [192, 0, 2, 2]);
    b.passive = true;
    b.allow_zero_hold_time = true;
    let mut p = Pair::new(a, b);
    p.start();
    assert_eq!(p.sides[B].ups[0].hold_time, 0);
    let t0 = p.now;
    p.advance(Duration::from_secs(3600));
    assert_eq!(p.state(A), State::Established);
    assert_eq!(p.state(B), State::Established);
    assert_eq!(p.sides[A].keepalives_since(t0) + p.sides[B].keepalives_since(t0), 0);
}

#[test]
fn hold_time_of_two_seconds_is_rejected() {
    let a = config(65001, 65002, [192, 0, 2, 1]);
    let mut b = config(65002, 65001, [192, 0, 2, 2]);
    b.passive = true;
    b.hold_time = 2;
    let mut p = Pair::new(a, b);
    p.start();
    let n = p.sides[A].notifications();
    assert_eq!((n[0].code, n[0].subcode), (2, subcode::UNACCEPTABLE_HOLD_TIME));
    assert_ne!(p.state(A), State::Established);
}

/// NOTIFICATION OPEN Message Error (2) / Unacceptable Hold Time (6), no data.
const UNACCEPTABLE_HOLD_TIME_WIRE: [u8; 21] = [
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 21, 3,
    2, 6,
];

#[test]
fn zero_hold_time_from_the_peer_is_refused_without_bfd() {
    // B proposes 0; A, without BFD, must not run a session nobody watches.
    let a = config(65001, 65002, [192, 0, 2, 1]);
    let mut b = config(65002, 65001, [192, 0, 2, 2]);
    b.passive = true;
    b.hold_time = 0;
    b.allow_zero_hold_time = true;
    let mut p = Pair::new(a, b);
    p.start();
    let n = p.sides[A].notifications();
    assert_eq!(n.len(), 1, "{n:?}");
    let mut wire = bytes::BytesMut::new();
    Message::Notification(n[0].clone()).encode(&mut wire, &EncodeContext::default());
    assert_eq!(&wire[..], &UNACCEPTABLE_HOLD_TIME_WIRE[..]);
    // Neither side came up, and A keeps refusing on every retry.
    p.advance(Duration::from_secs(60));
    assert!(p.sides[A].ups.is_empty() && p.sides[B].ups.is_empty());
    assert!(p.sides[A].notifications().len() > 1, "A reconnected and refused again");
    assert!(
        p.sides[A]
            .notifications()
            .iter()
            .all(|n| (n.code, n.subcode) == (2, subcode::UNACCEPTABLE_HOLD_TIME))
    );
}

#[test]
fn zero_hold_time_is_accepted_with_bfd() {
    let mut a = config(65001, 65002, [192, 0, 2, 1]);
    a.allow_zero_hold_time = true;
    let mut b = config(65002, 65001, [192, 0, 2, 2]);
    b.passive = true;
    b.hold_time = 0;
    b.allow_zero_hold_time = true;
    let mut p = Pair::new(a, b);
    p.start();
    assert_eq!(p.state(A), State::Established);
    assert_eq!(p.sides[A].ups[0].hold_time, 0);
    assert!(p.sides[A].notifications().is_empty());
}

#[test]
fn our_own_zero_hold_time_needs_bfd_too() {
    // Validation never lets this config through; the FSM still refuses it.
    let mut a = config(65001, 65002, [192, 0, 2, 1]);
    a.hold_time = 0;
    let mut b = config(65002, 65001, [192, 0, 2, 2]);
    b.passive = true;
    let mut p = Pair::new(a, b);
    p.start();
    let n = p.sides[A].notifications();
    assert_eq!((n[0].code, n[0].subcode), (2, subcode::UNACCEPTABLE_HOLD_TIME));
    assert!(p.sides[A].ups.is_empty());
}

#[test]
fn wrong_peer_as_is_rejected() {
    let a = config(65001, 65099, [192, 0, 2, 1]);
    let mut b = config(65002, 65001, [192, 0, 2, 2]);
    b.passive = true;
    let mut p = Pair::new(a, b);
    p.start();
    let n = p.sides[A].notifications();
    assert_eq!((n[0].code, n[0].subcode, &n[0].data[..]), (2, subcode::BAD_PEER_AS, &[0xfd, 0xea][..]));
    assert!(p.sides[A].ups.is_empty());
}

#[test]
fn a_dynamic_peer_as_accepts_the_side_it_names_and_refuses_the_other() {
    // (our AS, the router's AS, what we expect, session up)
    for (ours, theirs, want, up) in [
        (65001, 65002, PeerAs::External, true),
        (65001, 65001, PeerAs::External, false),
        (65001, 65001, PeerAs::Internal, true),
        (65001, 65002, PeerAs::Internal, false),
    ] {
        let mut a = config(ours, 0, [192, 0, 2, 1]);
        a.peer_as = want;
        let mut b = config(theirs, ours, [192, 0, 2, 2]);
        b.passive = true;
        let mut p = Pair::new(a, b);
        p.start();
        let case = format!("{want} against AS {theirs}");
        if up {
            assert_eq!(p.state(A), State::Established, "{case}");
            assert_eq!(p.sides[A].ups[0].peer_as, theirs, "{case}: the AS learned from the OPEN");
        } else {
            let n = p.sides[A].notifications();
            assert_eq!((n[0].code, n[0].subcode), (2, subcode::BAD_PEER_AS), "{case}");
            assert!(p.sides[A].ups.is_empty(), "{case}");
        }
    }
    let mut c = config(65001, 0, [192, 0, 2, 1]);
    c.peer_as = PeerAs::Internal;
    assert!(!c.is_ebgp());
    c.peer_as = PeerAs::External;
    assert!(c.is_ebgp());
}

#[test]
fn collision_keeps_the_connection_of_the_higher_identifier() {
    // Both sides connect at once; B has the higher identifier, so B's connection stays.
    let a = config(65001, 65002, [192, 0, 2, 1]);
    let b = config(65002, 65001, [192, 0, 2, 2]);
    let mut p = Pair::new(a, b);
    p.start();
    assert_eq!(p.sides[A].connects.len(), 1);
    assert_eq!(p.sides[B].connects.len(), 1);
    assert_eq!(p.state(A), State::Established);
    assert_eq!(p.state(B), State::Established);
    assert_eq!(p.sides[A].ups.len(), 1);
    assert_eq!(p.sides[B].ups.len(), 1);
    let a_conn = p.sides[A].ups[0].conn;
    let b_conn = p.sides[B].ups[0].conn;
    assert_eq!(p.sides[A].links.get(&a_conn), Some(&b_conn));
    assert_eq!(p.sides[A].links.len(), 1, "the other connection is closed");
    // The losing connection is closed with Cease/7 (by one or both sides), never the survivor.
    let cease = |s: usize, keep: ConnId| {
        p.sides[s]
            .sent
            .iter()
            .filter(|(_, _, m)| matches!(m, Message::Notification(n) if n.code == 6 && n.subcode == subcode::CEASE_CONNECTION_COLLISION))
            .map(|(_, c, _)| *c == keep)
            .collect::<Vec<bool>>()
    };
    let (ca, cb) = (cease(A, a_conn), cease(B, b_conn));
    assert!(!ca.is_empty() || !cb.is_empty(), "a Cease/7 was sent");
    assert!(ca.iter().chain(cb.iter()).all(|on_survivor| !on_survivor), "survivor never ceased");
    assert_eq!(p.sides[B].links.len(), 1);
    p.advance(Duration::from_secs(300));
    assert_eq!(p.state(A), State::Established);
    assert!(p.sides[A].downs.is_empty());
}

#[test]
fn notification_from_peer_goes_idle_then_reconnects_after_backoff() {
    let mut p = Pair::active_passive();
    p.start();
    // B is shut down administratively and restarted at once.
    p.queue.push_back((B, Input::ManualStop { subcode: subcode::CEASE_ADMIN_SHUTDOWN }));
    p.queue.push_back((B, Input::ManualStart));
    p.drive();
    assert_eq!(p.state(A), State::Idle);
    assert!(
        matches!(&p.sides[A].downs[0], DownReason::NotificationReceived(n) if n.code == 6 && n.subcode == 2)
    );
    let down_at = p.now;
    p.advance(Duration::from_secs(10));
    assert_eq!(p.state(A), State::Established);
    assert_eq!(p.sides[A].connects.last().map(|t| t.duration_since(down_at)), Some(Duration::from_secs(5)));
}

#[test]
fn reconnect_backoff_doubles_and_is_capped() {
    let mut p = Pair::active_passive();
    p.network_up = false;
    p.start();
    p.advance(Duration::from_secs(1000));
    let c = &p.sides[A].connects;
    let gaps: Vec<u64> = c.windows(2).map(|w| w[1].duration_since(w[0]).as_secs()).collect();
    assert_eq!(gaps.get(..7), Some(&[5, 10, 20, 40, 80, 120, 120][..]), "gaps {gaps:?}");
    // Once the network is back the session comes up within the capped delay.
    p.network_up = true;
    p.advance(Duration::from_secs(121));
    assert_eq!(p.state(A), State::Established);
}

#[test]
fn stable_session_resets_backoff() {
    let mut p = Pair::active_passive();
    p.network_up = false;
    p.start();
    p.advance(Duration::from_secs(200)); // several failures: backoff grows
    p.network_up = true;
    p.advance(Duration::from_secs(130));
    assert_eq!(p.state(A), State::Established);
    p.advance(Duration::from_secs(120)); // longer than stable_time (60 s)
    p.queue.push_back((B, Input::ManualStop { subcode: subcode::CEASE_ADMIN_RESET }));
    p.queue.push_back((B, Input::ManualStart));
    p.drive();
    let down_at = p.now;
    p.advance(Duration::from_secs(6));
    assert_eq!(p.state(A), State::Established, "reconnected after the base delay");
    assert_eq!(p.sides[A].connects.last().map(|t| t.duration_since(down_at)), Some(Duration::from_secs(5)));
}

#[test]
fn graceful_restart_r_bit_only_on_first_open() {
    let mut a = config(65001, 65002, [192, 0, 2, 1]);
    a.graceful_restart =
        Some(GracefulRestartConfig { restart_time: 120, restarting: true, forwarding_preserved: true });
    let mut b = config(65002, 65001, [192, 0, 2, 2]);
    b.passive = true;
    let mut p = Pair::new(a, b);
    p.start();
    let gr = p.sides[B].ups[0].peer_graceful_restart.clone().expect("GR advertised");
    assert!(gr.restarting);
    assert_eq!(gr.restart_time, 120);
    assert!(gr.families.iter().all(|f| f.forwarding_preserved));
    assert_eq!(gr.families.len(), 2);
    p.queue.push_back((B, Input::ManualStop { subcode: subcode::CEASE_ADMIN_RESET }));
    p.queue.push_back((B, Input::ManualStart));
    p.drive();
    p.advance(Duration::from_secs(10));
    let gr = p.sides[B].ups[1].peer_graceful_restart.clone().expect("GR advertised");
    assert!(!gr.restarting, "R-bit cleared after the first session");
}

#[test]
fn manual_stop_sends_cease_and_stays_idle() {
    let mut p = Pair::active_passive();
    p.start();
    p.queue.push_back((A, Input::ManualStop { subcode: subcode::CEASE_ADMIN_SHUTDOWN }));
    p.drive();
    assert_eq!(p.sides[A].notifications().last().map(|n| (n.code, n.subcode)), Some((6, 2)));
    let connects = p.sides[A].connects.len();
    p.advance(Duration::from_secs(600));
    assert_eq!(p.state(A), State::Idle);
    assert_eq!(p.sides[A].connects.len(), connects, "no automatic restart after ManualStop");
}

#[test]
fn unexpected_update_in_opensent_is_an_fsm_error() {
    let mut fsm = Fsm::new(config(65001, 65002, [192, 0, 2, 1]));
    let now = Instant::now();
    fsm.handle(now, Input::ManualStart);
    fsm.handle(now, Input::TcpCrAcked(ConnId(7)));
    assert_eq!(fsm.state(), State::OpenSent);
    fsm.handle(now, Input::Message(ConnId(7), Message::Update(Update::default())));
    let sent: Vec<Transmit> = std::iter::from_fn(|| fsm.poll_transmit()).collect();
    assert!(
        sent.iter().any(|t| matches!(&t.message, Message::Notification(n) if n.code == 5 && n.subcode == 1))
    );
    assert_eq!(fsm.state(), State::Idle);
}

#[test]
fn decode_error_sends_its_notification() {
    let mut p = Pair::active_passive();
    p.start();
    let conn = p.sides[A].ups[0].conn;
    let err = Message::decode(&mut bytes::Bytes::from_static(&[0; 19]), &DecodeContext::default())
        .expect_err("bad marker");
    p.queue.push_back((A, Input::MessageError(conn, err)));
    p.drive();
    assert_eq!(p.sides[A].notifications().last().map(|n| (n.code, n.subcode)), Some((1, 1)));
    assert_eq!(p.state(A), State::Idle);
}

#[test]
fn inbound_connection_while_established_is_ceased_and_session_kept() {
    let mut p = Pair::active_passive();
    p.start();
    let up = p.sides[B].ups[0].conn;
    // A second connection arrives at B (e.g. A restarted its connect by mistake).
    p.queue.push_back((B, Input::TcpConnectionConfirmed(ConnId(999))));
    p.drive();
    assert_eq!(p.state(B), State::Established);
    let last = p.sides[B].sent.iter().rev().find(|(_, c, _)| *c == ConnId(999)).map(|(_, _, m)| m.clone());
    assert_eq!(last, Some(Message::Notification(Notification::cease(subcode::CEASE_CONNECTION_COLLISION))));
    assert_eq!(p.sides[B].fsm.negotiated().map(|n| n.conn), Some(up));
}
