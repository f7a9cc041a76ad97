use super::*;

const MS: Duration = Duration::from_millis(1);
/// 10 ms beats, 5 missed: round figures for the timelines below.
const CFG: HeartbeatConfig = HeartbeatConfig {
    interval: Duration::from_millis(10),
    misses: 5,
    hold: Duration::from_secs(3),
    max_silence: Duration::from_millis(500),
};

use crate::membership::names;

/// A node driven tick by tick on a fake clock: `at(ms)` is `ms` after the start.
struct Node {
    hb: Heartbeats,
    t0: Instant,
    now: Instant,
}

impl Node {
    fn new() -> Self {
        let t0 = Instant::now();
        let mut hb = Heartbeats::new(CFG);
        hb.handle(t0, Input::Timeout);
        Node { hb, t0, now: t0 }
    }

    fn at(&mut self, ms: u64) -> Instant {
        self.now = self.t0 + MS * u32::try_from(ms).unwrap_or(u32::MAX);
        self.now
    }

    /// Ticks on time from now to `until_ms`, hearing `beats` from `beater` at each tick.
    fn run(&mut self, until_ms: u64, beater: Option<&str>) {
        while let Some(due) = self.hb.poll_timeout() {
            if due > self.t0 + MS * u32::try_from(until_ms).unwrap_or(u32::MAX) {
                break;
            }
            self.now = due;
            if let Some(b) = beater {
                self.hb.handle(due, Input::Beat(b));
            }
            self.hb.handle(due, Input::Timeout);
        }
    }

    /// Events since the last call, but for `Watching` (see `a_member_is_watched_from_its_first_beat`).
    fn events(&mut self) -> Vec<Event> {
        std::iter::from_fn(|| self.hb.poll_event()).filter(|e| !matches!(e, Event::Watching(_))).collect()
    }
}

/// The successor claims after `misses` intervals of silence, not before: 40 ms of
/// silence is nothing, 50 ms is a suspicion, and the suspect leaves the election.
#[test]
fn a_successor_suspects_its_owner_after_missed_beats() {
    let mut n = Node::new();
    n.run(200, Some("owner"));
    assert!(n.events().is_empty());
    let last_beat = n.now;
    n.run(200 + 40, None);
    assert!(n.events().is_empty(), "4 missed beats are not yet a failure");
    assert!(n.hb.suspected().is_empty());
    n.run(200 + 50, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
    assert_eq!(n.hb.suspected(), names(&["owner"]));
    assert_eq!(n.now.duration_since(last_beat), 50 * MS);
}

/// A member is watched from its first beat, and said so once.
#[test]
fn a_member_is_watched_from_its_first_beat() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    let all: Vec<Event> = std::iter::from_fn(|| n.hb.poll_event()).collect();
    assert_eq!(all, vec![Event::Watching("owner".into())]);
    assert_eq!(n.hb.watched().collect::<Vec<_>>(), ["owner"]);
}

/// A member that never beat is never suspected: a starting owner, or one running a
/// release without heartbeats, is SWIM's to judge.
#[test]
fn nothing_is_watched_before_it_beats() {
    let mut n = Node::new();
    n.hb.handle(n.now, Input::Live(names(&["me", "owner"])));
    n.run(1000, None);
    assert!(n.events().is_empty());
    assert_eq!(n.hb.watched().count(), 0);
}

/// A starved node does not cause a failover: when its own tick comes late (it got no
/// CPU), the beats it missed may be queued behind it, so it judges nobody until its
/// ticks have come on time for `misses` intervals again.
#[test]
fn a_starved_node_suspects_nobody() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    // No CPU for 300 ms: the next tick runs at 400 ms instead of 110 ms. The owner's
    // beats of that time were not read (say they were lost): still no suspicion.
    let late = n.at(400);
    n.hb.handle(late, Input::Timeout);
    assert!(n.events().is_empty(), "a late tick judges nobody");
    assert_eq!(n.hb.late_ticks(), 1);
    // On time again, the owner still silent: it is suspected once this node has been
    // healthy for the silence period.
    n.run(440, None);
    assert!(n.events().is_empty());
    n.run(460, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
}

/// Beats that come again clear the suspicion at once: the owner keeps its addresses.
#[test]
fn beats_resuming_clear_a_suspicion() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    n.run(200, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
    let now = n.now;
    n.hb.handle(now, Input::Beat("owner"));
    assert_eq!(n.events(), vec![Event::Cleared { name: "owner".into(), why: Cleared::BeatsResumed }]);
    assert!(n.hb.suspected().is_empty());
    n.run(300, Some("owner"));
    assert!(n.events().is_empty());
}

/// A suspicion SWIM does not confirm within `hold` ends, and the member is not watched
/// until it beats again: two nodes never both claim for longer than that.
#[test]
fn an_unconfirmed_suspicion_expires_and_disarms() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    n.run(200, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
    n.run(150 + 3000 - 10, None);
    assert!(n.events().is_empty());
    n.run(150 + 3000 + 10, None);
    assert_eq!(n.events(), vec![Event::Cleared { name: "owner".into(), why: Cleared::Expired }]);
    n.run(10_000, None);
    assert!(n.events().is_empty(), "not watched again until it beats");
    n.run(10_100, Some("owner"));
    n.run(10_200, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
}

/// When SWIM drops a member (it confirmed the death, or the member left), the watch ends
/// without an event: the member is out of the live set anyway.
#[test]
fn swim_taking_over_ends_the_watch() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    n.run(200, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
    let now = n.now;
    n.hb.handle(now, Input::Live(names(&["me"])));
    assert!(n.hb.suspected().is_empty());
    assert!(n.events().is_empty());
}

/// An owner beats its targets once per tick, the first time at once.
#[test]
fn an_owner_beats_its_targets_every_interval() {
    let mut n = Node::new();
    let t = n.now;
    n.hb.handle(t, Input::Targets(names(&["a", "b"])));
    assert_eq!(n.hb.poll_transmit(), Some(&names(&["a", "b"])));
    assert_eq!(n.hb.poll_transmit(), None);
    let mut beats = 0;
    while let Some(due) = n.hb.poll_timeout() {
        if due > t + 100 * MS {
            break;
        }
        n.hb.handle(due, Input::Timeout);
        beats += usize::from(n.hb.poll_transmit().is_some());
    }
    assert_eq!(beats, 10);
    n.hb.handle(n.hb.poll_timeout().unwrap_or(t), Input::Targets(BTreeSet::new()));
    let due = n.hb.poll_timeout().unwrap_or(t);
    n.hb.handle(due, Input::Timeout);
    assert_eq!(n.hb.poll_transmit(), None, "an owner of nothing beats nobody");
}

/// Heartbeats off (interval 0): nothing is watched, beaten or suspected.
#[test]
fn off_means_swim_alone() {
    let cfg = HeartbeatConfig { interval: Duration::ZERO, ..CFG };
    assert!(!cfg.enabled());
    let mut hb = Heartbeats::new(cfg);
    let t = Instant::now();
    hb.handle(t, Input::Beat("owner"));
    hb.handle(t, Input::Targets(names(&["a"])));
    hb.handle(t + Duration::from_secs(1), Input::Timeout);
    assert_eq!(hb.poll_timeout(), None);
    assert_eq!(hb.poll_transmit(), None);
    assert_eq!(hb.poll_event(), None);
}

/// The payload round-trips; anything else is refused, never a panic.
#[test]
fn messages_round_trip() {
    for m in [
        Message::Beat("node1"),
        Message::SlowBeat("node1"),
        Message::TookOver("node-2.example"),
        Message::Release("n3"),
    ] {
        assert_eq!(Message::decode(&m.encode()), Some(m));
    }
    assert_eq!(Message::SlowBeat("n3").encode(), b"\x03n3", "a kind of its own: old nodes ignore it");
    for bad in [&b""[..], b"\x00", b"\x04node1", b"\x00\xff\xfe"] {
        assert_eq!(Message::decode(bad), None, "{bad:?}");
    }
}

/// A node that leaves an owner's targets is told so at once and on the next ticks,
/// [`RELEASE_SENDS`] times in all; one that comes back before is not.
#[test]
fn an_owner_releases_a_node_that_leaves_its_targets() {
    let mut n = Node::new();
    let t = n.now;
    n.hb.handle(t, Input::Targets(names(&["a", "b", "c"])));
    assert!(n.hb.poll_release().is_empty());
    n.hb.handle(t, Input::Targets(names(&["b"])));
    assert_eq!(n.hb.poll_release(), ["a", "c"], "at once");
    assert!(n.hb.poll_release().is_empty(), "once per tick");
    let mut sends = 1;
    while let Some(due) = n.hb.poll_timeout().filter(|d| *d <= t + 100 * MS) {
        n.hb.handle(due, Input::Timeout);
        sends += usize::from(n.hb.poll_release() == ["a", "c"]);
    }
    assert_eq!(sends, usize::from(RELEASE_SENDS));
    assert_eq!(n.hb.poll_transmit(), Some(&names(&["b"])), "the remaining target is still beaten");
    n.hb.handle(n.now, Input::Targets(BTreeSet::new()));
    n.hb.handle(n.now, Input::Targets(names(&["b"])));
    assert!(n.hb.poll_release().is_empty(), "a node back among the targets is not released");
}

/// A member that says it no longer beats this node is not suspected for its silence,
/// and is watched again from its next beat.
#[test]
fn a_released_member_is_not_suspected() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    let now = n.now;
    n.hb.handle(now, Input::Released("owner"));
    assert_eq!(n.events(), vec![Event::Released("owner".into())]);
    assert_eq!(n.hb.watched().count(), 0);
    n.run(1000, None);
    assert!(n.events().is_empty(), "silence after a release is no death");
    n.run(1100, Some("owner"));
    n.run(1200, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
    // A release that comes after the suspicion (a late one) ends it.
    let now = n.now;
    n.hb.handle(now, Input::Released("owner"));
    assert_eq!(n.events(), vec![Event::Cleared { name: "owner".into(), why: Cleared::Released }]);
    assert!(n.hb.suspected().is_empty());
    // From a member never watched it is nothing.
    n.hb.handle(now, Input::Released("stranger"));
    assert!(n.events().is_empty());
}

/// Hears `owner` beating every `gap_ms` from `from_ms` to `until_ms`, ticking on time.
fn beats_every(n: &mut Node, gap_ms: u64, from_ms: u64, until_ms: u64) {
    let mut at = from_ms;
    while at <= until_ms {
        n.run(at, None);
        let t = n.at(at);
        n.hb.handle(t, Input::Beat("owner"));
        at += gap_ms;
    }
}

/// On a quiet network (a beat every interval) the configured silence rules: the
/// allowance never grows past it.
#[test]
fn regular_beats_keep_the_configured_silence() {
    let mut n = Node::new();
    n.run(10_000, Some("owner"));
    assert_eq!(n.hb.allowance(n.now, "owner"), Some(CFG.silence()));
}

/// A member whose beats come irregularly (its beat thread starved on a loaded node) is
/// given twice its longest gap: a 40 ms gap, below the 50 ms silence, makes 80 ms.
#[test]
fn irregular_beats_stretch_the_silence() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    beats_every(&mut n, 40, 140, 300);
    let last = n.now;
    assert_eq!(n.hb.allowance(last, "owner").map(|d| d.as_millis()), Some(80));
    n.run(300 + 70, None);
    assert!(n.events().is_empty(), "70 ms of silence is within 80 ms");
    n.run(300 + 80, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
}

/// A false suspicion (beats resume after 60 ms) teaches the detector: the same gap
/// again is no suspicion.
#[test]
fn a_false_suspicion_makes_the_next_one_unlikely() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    n.run(160, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
    let t = n.at(160);
    n.hb.handle(t, Input::Beat("owner"));
    assert_eq!(n.events(), vec![Event::Cleared { name: "owner".into(), why: Cleared::BeatsResumed }]);
    n.run(300, Some("owner"));
    n.run(300 + 60, None);
    assert!(n.events().is_empty());
    let t = n.at(360);
    n.hb.handle(t, Input::Beat("owner"));
    assert!(n.events().is_empty());
}

/// The stretch is capped at `max_silence`, and fades: the peak gap halves every
/// [`PEAK_HALF_LIFE`], so a quiet minute brings the configured silence back.
#[test]
fn the_stretch_is_capped_and_fades() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    // A 400 ms gap (the owner's beat thread starved that long): 800 ms, capped at 500.
    n.run(500, None);
    let t = n.at(500);
    n.hb.handle(t, Input::Beat("owner"));
    let half = u64::try_from(PEAK_HALF_LIFE.as_millis()).unwrap_or(u64::MAX);
    n.run(600, Some("owner"));
    assert_eq!(n.hb.allowance(n.now, "owner"), Some(CFG.max_silence));
    // Two half-lives: 400 ms counts as 100 ms, times two.
    n.run(500 + 2 * half, Some("owner"));
    let a = n.hb.allowance(n.now, "owner").unwrap_or_default().as_millis();
    assert!((198..=202).contains(&a), "{a} ms");
    n.run(500 + 10 * half, Some("owner"));
    assert_eq!(n.hb.allowance(n.now, "owner"), Some(CFG.silence()));
}

/// A gap longer than `max_silence` is an outage (a cut link that came back), not jitter:
/// the next failure is detected after the configured silence again.
#[test]
fn an_outage_teaches_nothing() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    n.run(2100, None);
    let t = n.at(2100);
    n.hb.handle(t, Input::Beat("owner"));
    n.run(2200, Some("owner"));
    assert_eq!(n.hb.allowance(n.now, "owner"), Some(CFG.silence()));
}

/// A node hearing the owner until 100 ms, then without CPU until 400 ms, when it reads
/// the beats queued meanwhile and then runs its tick.
fn starved_from_100_to_400_ms() -> Node {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    let t = n.at(400);
    n.hb.handle(t, Input::Beat("owner"));
    n.hb.handle(t, Input::Timeout);
    n
}

/// Beats read after this node was starved (its tick overdue by an interval: they waited
/// in its socket) say nothing of the sender: they do not stretch its silence.
#[test]
fn beats_read_late_by_a_starved_node_do_not_stretch() {
    let mut n = starved_from_100_to_400_ms();
    assert_eq!(n.hb.late_ticks(), 1);
    // Recovered (max_silence after the late tick), the configured silence: the late
    // beats taught nothing (`a_node_just_starved_allows_twice_the_silence`: before).
    n.run(1000, Some("owner"));
    assert_eq!(n.hb.allowance(n.now, "owner"), Some(CFG.silence()));
    assert!(n.events().is_empty());
}

/// A node just starved judges with twice the silence for `max_silence`: its first
/// on-time ticks are the least reliable judge (the sender's next beat may still wait
/// in a deferred softirq); then the configured silence rules again.
#[test]
fn a_node_just_starved_allows_twice_the_silence() {
    let mut n = starved_from_100_to_400_ms();
    assert_eq!(n.hb.allowance(n.now, "owner"), Some(CFG.silence() * 2));
    n.run(490, None);
    assert!(n.events().is_empty(), "90 ms of silence, under twice the 50 ms");
    n.run(510, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);
    // Recovered (max_silence after the late tick): `beats_read_late_by_a_starved_node_do_not_stretch`.
}

/// The changes of the suspected set are counted, so the driver builds the set only when
/// it moved; SWIM dropping a suspect counts too.
#[test]
fn suspicion_changes_are_counted() {
    let mut n = Node::new();
    n.run(100, Some("owner"));
    assert_eq!(n.hb.suspicions_changed(), 0);
    n.run(200, None);
    assert_eq!(n.hb.suspicions_changed(), 1);
    n.run(300, None);
    assert_eq!(n.hb.suspicions_changed(), 1, "nothing moved");
    let now = n.now;
    n.hb.handle(now, Input::Live(names(&["me"])));
    assert_eq!(n.hb.suspicions_changed(), 2);
    assert!(n.hb.suspected().is_empty());
}

/// A host whose tasks wait for a CPU 80 % of the time (PSI) stretches the silence four
/// times: 190 ms of silence is nothing, 200 ms is a suspicion; once the pressure is gone
/// the configured silence rules again.
#[test]
fn a_host_under_pressure_allows_more_silence() {
    let mut n = Node::new();
    n.run(200, Some("owner"));
    let t = n.now;
    n.hb.handle(t, Input::Pressure(800));
    assert_eq!(n.hb.stretch(), 4);
    assert_eq!(n.hb.allowance(t, "owner"), Some(4 * CFG.silence()));
    n.run(200 + 190, None);
    assert!(n.events().is_empty(), "190 ms of silence on a host under pressure");
    n.run(200 + 200, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())]);

    let mut n = Node::new();
    n.run(200, Some("owner"));
    let t = n.now;
    n.hb.handle(t, Input::Pressure(500));
    n.hb.handle(t, Input::Pressure(0));
    assert_eq!(n.hb.allowance(t, "owner"), Some(CFG.silence()));
    n.run(200 + 50, None);
    assert_eq!(
        n.events(),
        vec![Event::Suspected("owner".into())],
        "a quiet host fails over as fast as before"
    );
}

/// Full pressure stretches at most five times, and never past `max_silence`.
#[test]
fn the_stretch_is_bounded_by_the_largest_silence() {
    for (max_silence, want) in [(CFG.max_silence, 5 * CFG.silence()), (200 * MS, 200 * MS)] {
        let t0 = Instant::now();
        let mut hb = Heartbeats::new(HeartbeatConfig { max_silence, ..CFG });
        hb.handle(t0, Input::Beat("owner"));
        hb.handle(t0, Input::Pressure(1000));
        assert_eq!(hb.allowance(t0, "owner"), Some(want));
    }
}

/// The lab's false suspicion, replayed with the shipped defaults: a minute of beats with
/// gaps of up to 10 ms (cores saturated), then one beat delayed 24 ms in a deferred
/// softirq. On a host the kernel reports as busy that is no suspicion; on one reported
/// quiet it still is (nothing else tells them apart).
#[test]
fn a_delivery_stall_on_a_busy_host_is_no_suspicion() {
    for (pressure, suspected) in [(0, true), (400, false)] {
        let cfg = HeartbeatConfig::default();
        let t0 = Instant::now();
        let mut hb = Heartbeats::new(cfg);
        hb.handle(t0, Input::Pressure(pressure));
        let mut now = t0;
        let mut last_beat = t0;
        let mut i = 0u32;
        // 60 s of beats 5 or 10 ms apart (every second tick, and every seventh), the
        // node's own ticks on time.
        while now < t0 + Duration::from_secs(60) {
            now += cfg.interval;
            i += 1;
            if i.is_multiple_of(2) || i.is_multiple_of(7) {
                hb.handle(now, Input::Beat("owner"));
                last_beat = now;
            }
            hb.handle(now, Input::Timeout);
        }
        while hb.poll_event().is_some() {}
        // Silence until 24 ms after the last beat, ticks on time.
        let stall_end = last_beat + Duration::from_millis(24);
        while let Some(due) = hb.poll_timeout().filter(|d| *d < stall_end) {
            hb.handle(due, Input::Timeout);
        }
        let events: Vec<Event> = std::iter::from_fn(|| hb.poll_event()).collect();
        assert_eq!(
            events.contains(&Event::Suspected("owner".into())),
            suspected,
            "pressure {pressure} ‰: {events:?}, allowance {:?}",
            hb.allowance(stall_end, "owner")
        );
    }
}

#[test]
fn an_owner_beats_at_most_max_targets_members_those_of_the_most_addresses() {
    let lists: Vec<Vec<String>> = (0..1000).map(|i| vec![format!("node{:03}", i % 300)]).collect();
    let chosen = targets(&lists);
    assert_eq!(chosen.len(), MAX_TARGETS);
    // node000..node099 succeed 4 addresses each, the others 3: the first are chosen.
    let expected: BTreeSet<String> = (0..MAX_TARGETS).map(|i| format!("node{i:03}")).collect();
    assert_eq!(chosen, expected);
    let few: Vec<Vec<String>> = vec![vec!["a".into()], vec!["b".into(), "a".into()]];
    assert_eq!(targets(&few), BTreeSet::from(["a".to_owned(), "b".to_owned()]));
}

/// An owner that says its beats may come late (its beat thread at normal priority) is
/// allowed `max_silence` from its first beat on, with no false suspicion to learn it
/// from, and is suspected past it as any other; a regular owner beside it keeps the
/// configured silence.
#[test]
fn an_owner_that_beats_slowly_is_allowed_the_largest_silence_from_its_first_beat() {
    let mut n = Node::new();
    n.hb.handle(n.now, Input::SlowBeat("slow"));
    assert_eq!(n.hb.allowance(n.now, "slow"), Some(CFG.max_silence), "from its first beat");
    while let Some(due) = n.hb.poll_timeout().filter(|d| *d <= n.t0 + 100 * MS) {
        n.now = due;
        n.hb.handle(due, Input::SlowBeat("slow"));
        n.hb.handle(due, Input::Beat("owner"));
        n.hb.handle(due, Input::Timeout);
    }
    assert_eq!(n.hb.allowance(n.now, "owner"), Some(CFG.silence()));
    let last = n.now;
    n.run(100 + 60, None);
    assert_eq!(n.events(), vec![Event::Suspected("owner".into())], "the regular owner after the silence");
    n.run(100 + 490, None);
    assert!(n.events().is_empty(), "490 ms of silence is within the slow owner's 500 ms");
    n.run(100 + 510, None);
    assert_eq!(n.events(), vec![Event::Suspected("slow".into())]);
    assert!(n.now.duration_since(last) >= CFG.max_silence);
}
