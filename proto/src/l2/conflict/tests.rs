use std::net::Ipv4Addr;

use super::*;

const A: Mac = [2, 0, 0, 0, 0, 1];
const B: Mac = [2, 0, 0, 0, 0, 2];
const STEP: Duration = Duration::from_millis(5);

fn v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

fn owned(addrs: &[IpAddr]) -> Input {
    Input::Owned { owned: addrs.iter().copied().collect(), quiet: BTreeSet::new() }
}

/// Two owners of one address on a LAN, in simulated time: each probe of one is
/// answered by the other while the other answers (owns and has not yielded).
struct Lan {
    t: Instant,
    nodes: [(Mac, Conflicts, bool); 2],
    events: Vec<(usize, Event)>,
}

impl Lan {
    fn new(addr: IpAddr) -> Self {
        let t = Instant::now();
        let mut nodes = [(A, Conflicts::new(A), true), (B, Conflicts::new(B), true)];
        for (_, c, _) in &mut nodes {
            c.handle(t, owned(&[addr]));
        }
        Lan { t, nodes, events: Vec::new() }
    }

    fn answers(&self, i: usize, addr: IpAddr) -> bool {
        let (_, c, owns) = &self.nodes[i];
        *owns && !c.yielded(&addr)
    }

    /// Runs for `d`; returns the time during which both answered.
    fn run(&mut self, addr: IpAddr, d: Duration) -> Duration {
        let mut both = Duration::ZERO;
        let end = self.t + d;
        while self.t < end {
            self.t += STEP;
            for i in 0..2 {
                let now = self.t;
                self.nodes[i].1.handle(now, Input::Timeout);
                while let Some(a) = self.nodes[i].1.poll_transmit() {
                    let j = 1 - i;
                    if self.answers(j, a) {
                        let mac = self.nodes[j].0;
                        self.nodes[i].1.handle(now, Input::Seen { addr: a, mac });
                    }
                }
                while let Some(e) = self.nodes[i].1.poll_event() {
                    self.events.push((i, e));
                }
            }
            if self.answers(0, addr) && self.answers(1, addr) {
                both += STEP;
            }
        }
        both
    }
}

#[test]
fn two_owners_settle_on_the_higher_rank_and_the_loser_comes_back_when_the_winner_leaves() {
    for last in 1..=20 {
        let addr = v4(last);
        let winner = usize::from(rank(addr, B) > rank(addr, A));
        let mut lan = Lan::new(addr);
        let both = lan.run(addr, Duration::from_secs(5));
        // Probing starts FRESH after owning, then one probe, then a confirming probe.
        assert!(
            both <= FRESH + PROBE_CONFLICT + CONFIRM_GAP + STEP * 4,
            "{addr}: both answered for {both:?}"
        );
        assert!(lan.answers(winner, addr) && !lan.answers(1 - winner, addr), "{addr}");
        let conflicts: Vec<_> =
            lan.events.iter().filter(|(_, e)| matches!(e, Event::Conflict { .. })).cloned().collect();
        assert!(
            conflicts
                .contains(&(winner, Event::Conflict { addr, other: lan.nodes[1 - winner].0, won: true }))
        );
        assert!(
            conflicts
                .contains(&(1 - winner, Event::Conflict { addr, other: lan.nodes[winner].0, won: false }))
        );
        assert!(
            lan.events.iter().all(|(_, e)| !matches!(e, Event::Foreign { .. })),
            "a ferrolb loser yields"
        );

        // The winner stops owning it (membership healed and elected the other): the
        // loser answers again within RELEASE_AFTER and a probe, and says so.
        lan.nodes[winner].2 = false;
        lan.nodes[winner].1.handle(lan.t, owned(&[]));
        lan.events.clear();
        let t0 = lan.t;
        lan.run(addr, RELEASE_AFTER + PROBE_CONFLICT * 2);
        assert!(lan.answers(1 - winner, addr), "{addr}: the loser answers again after {:?}", lan.t - t0);
        assert!(
            lan.events
                .contains(&(1 - winner, Event::Resolved { addr, other: lan.nodes[winner].0, resumed: true }))
        );
    }
}

/// Membership healed and elected the owner that yielded: renewed, it answers at once and
/// neither probes nor yields for FRESH, so the other (now handing over) hears it and lets
/// go; if the other goes on answering past FRESH, the rule settles it again.
#[test]
fn a_renewed_owner_answers_at_once_and_the_rule_applies_again_after_fresh() {
    for last in 1..=20 {
        let addr = v4(last);
        let winner = usize::from(rank(addr, B) > rank(addr, A));
        let loser = 1 - winner;
        let mut lan = Lan::new(addr);
        lan.run(addr, Duration::from_secs(3));
        assert!(!lan.answers(loser, addr));
        lan.events.clear();
        lan.nodes[loser].1.handle(lan.t, Input::Renew);
        assert!(lan.answers(loser, addr), "{addr}: renewed, the loser answers at once");
        let other = lan.nodes[winner].0;
        assert_eq!(lan.nodes[loser].1.poll_event(), Some(Event::Renewed { addr, other, resumed: true }));
        // The winner does not hand over here: both answer until FRESH, then one.
        let both = lan.run(addr, Duration::from_secs(3));
        assert!(both >= FRESH - STEP * 2, "{addr}: yielded again after {both:?}, within FRESH");
        assert!(
            both <= FRESH + PROBE_CONFLICT + CONFIRM_GAP + STEP * 4,
            "{addr}: both answered for {both:?}"
        );
        assert!(lan.answers(winner, addr) && !lan.answers(loser, addr), "{addr}");
    }
}

#[test]
fn a_new_owner_does_not_probe_while_the_previous_one_hands_over() {
    let addr = v4(7);
    let t0 = Instant::now();
    let mut c = Conflicts::new(A);
    c.handle(t0, owned(&[addr]));
    let mut t = t0;
    while t < t0 + FRESH - STEP {
        c.handle(t, Input::Timeout);
        assert_eq!(c.poll_transmit(), None, "probed {:?} after owning", t - t0);
        t += STEP;
    }
    c.handle(t0 + FRESH, Input::Timeout);
    assert_eq!(c.poll_transmit(), Some(addr));
}

#[test]
fn one_answer_from_another_mac_is_no_conflict() {
    for last in 1..=20 {
        one_answer_is_no_conflict_for(v4(last));
    }
}

fn one_answer_is_no_conflict_for(addr: IpAddr) {
    let t0 = Instant::now();
    let mut c = Conflicts::new(A);
    c.handle(t0, owned(&[addr]));
    // The old owner answers once more, before its own replan took the address away.
    c.handle(t0, Input::Seen { addr, mac: B });
    let mut t = t0;
    while t < t0 + RELEASE_AFTER * 2 {
        t += STEP;
        c.handle(t, Input::Timeout);
        while c.poll_transmit().is_some() {} // nobody answers any more
        assert!(!c.yielded(&addr));
    }
    // A would win: it announces again at once, and the conflict ends when B is gone.
    let events: Vec<Event> = std::iter::from_fn(|| c.poll_event()).collect();
    if rank(addr, A) > rank(addr, B) {
        assert_eq!(
            events,
            [
                Event::Conflict { addr, other: B, won: true },
                Event::Resolved { addr, other: B, resumed: false }
            ]
        );
    } else {
        assert_eq!(events, [], "no conflict, and nothing resolved");
    }
}

#[test]
fn an_address_being_handed_over_is_not_judged() {
    let addr = v4(11);
    let t0 = Instant::now();
    let mut c = Conflicts::new(A);
    c.handle(t0, Input::Owned { owned: [addr].into(), quiet: [addr].into() });
    for i in 0..100 {
        let t = t0 + FRESH + STEP * i;
        c.handle(t, Input::Seen { addr, mac: B });
        c.handle(t, Input::Timeout);
        assert_eq!(c.poll_transmit(), None);
    }
    assert!(!c.yielded(&addr));
    assert_eq!(c.poll_event(), None);
}

#[test]
fn a_device_that_never_yields_is_reported_once() {
    // An address for which A outranks B, so A keeps it and B should yield.
    let addr = (1..=255).map(v4).find(|a| rank(*a, A) > rank(*a, B)).unwrap();
    let t0 = Instant::now();
    let mut c = Conflicts::new(A);
    c.handle(t0, owned(&[addr]));
    let mut t = t0 + FRESH;
    let mut events = Vec::new();
    while t < t0 + FRESH + FOREIGN_AFTER * 3 {
        c.handle(t, Input::Timeout);
        while let Some(a) = c.poll_transmit() {
            c.handle(t, Input::Seen { addr: a, mac: B }); // B answers every probe
        }
        events.extend(std::iter::from_fn(|| c.poll_event()));
        t += STEP;
    }
    assert_eq!(
        events,
        [
            Event::Conflict { addr, other: B, won: true },
            Event::Reclaim { addr, other: B },
            Event::Foreign { addr, other: B }
        ],
        "A keeps the address, announces it again once, and reports B once"
    );
    assert!(!c.yielded(&addr));
}

#[test]
fn probes_keep_to_the_budget_with_many_addresses() {
    let addrs: Vec<IpAddr> = (0..1000u32)
        .map(|i| IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + i)))
        .collect();
    let t0 = Instant::now();
    let mut c = Conflicts::new(A);
    c.handle(t0, owned(&addrs));
    let mut sent = 0u32;
    let mut t = t0 + FRESH;
    let mut wakes = 0;
    while t < t0 + FRESH + Duration::from_secs(10) {
        c.handle(t, Input::Timeout);
        sent += std::iter::from_fn(|| c.poll_transmit()).count() as u32;
        t = c.poll_timeout().unwrap().max(t + Duration::from_micros(1));
        wakes += 1;
    }
    assert!(sent <= MAX_PROBES * 10 + 1, "{sent} probes in 10 s");
    assert!(sent >= MAX_PROBES * 9, "the budget is used: {sent} probes in 10 s");
    assert!(wakes <= 2 * sent + 10, "poll_timeout wakes only for work: {wakes} wake-ups");
}

/// The new owner of an address sees the previous one announce it (the last steps of the
/// previous owner's own takeover burst) and answer while it hands over: it does not
/// yield, even to a higher rank, or nobody would answer once the previous owner lets go.
#[test]
fn a_fresh_owner_does_not_yield_to_the_owner_handing_over() {
    let addr = (1..=255).map(v4).find(|a| rank(*a, B) > rank(*a, A)).unwrap();
    let t0 = Instant::now();
    let mut c = Conflicts::new(A);
    c.handle(t0, owned(&[addr]));
    let mut t = t0;
    // B announces and answers every probe for a second, then lets go.
    while t < t0 + Duration::from_secs(1) {
        c.handle(t, Input::Seen { addr, mac: B });
        c.handle(t, Input::Timeout);
        while let Some(a) = c.poll_transmit() {
            c.handle(t, Input::Seen { addr: a, mac: B });
        }
        assert!(!c.yielded(&addr), "yielded {:?} after owning", t - t0);
        t += STEP;
    }
    while t < t0 + FRESH * 2 {
        c.handle(t, Input::Timeout);
        while c.poll_transmit().is_some() {}
        assert!(!c.yielded(&addr));
        t += STEP;
    }
    assert_eq!(c.poll_event(), None, "no conflict was confirmed");
}
