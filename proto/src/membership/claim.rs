//! The claim: whether this node may elect L2 owners from its membership view, one
//! component for the speaker and bootstrap. [`Rule`] is the sans-IO rule
//! (`handle(now, Observation) -> Verdict`, then `poll_event()` for a change of
//! blindness); [`Claim`] feeds it from what membership shows and counts and reports
//! blindness (`ferrolb_membership_blind`, one log line per change, in the words of the
//! caller's configuration).
//!
//! A settled view holding only this node, although other nodes are listed, means that
//! the others are down — or that this node cannot hear them: another membership key,
//! another wire version, or its peers' traffic taken for replays. Claiming from such a
//! view puts two nodes on every address (in bootstrap: on the apiserver VIP). So:
//!
//! * a node that settled alone waits [`ALONE_WAIT`] before it claims: datagrams from
//!   peers it cannot read show up meanwhile;
//! * a node alone that never saw another member, while datagrams it cannot read keep
//!   arriving (one within [`UNREADABLE_MEMORY`]), is **blind**: it claims nothing, until
//!   it hears a peer or the datagrams stop (the peers are gone: its view is true);
//! * a node that once saw another member live has the cluster's key and version: a lone
//!   view later means the others died, and unreadable datagrams (an intruder, a node
//!   configured with another key or release) cannot silence it. Of two nodes that
//!   cannot read each other, the one that was there first keeps serving.
//!
//! Whether *some* peers are unreadable while others are live is not decided here: the
//! unreadable node is the one that is blind, and it claims nothing.

use std::time::{Duration, Instant};

use super::MembershipMetrics;

/// A node that settled alone although others are listed waits this long before
/// claiming, listening for datagrams it cannot read.
pub const ALONE_WAIT: Duration = Duration::from_secs(2);

/// How recent an unreadable datagram must be for a lone node to count as blind. Peers
/// announce themselves at least every second to nodes they do not see live, so a node
/// that cannot read them gets one well within it.
pub const UNREADABLE_MEMORY: Duration = Duration::from_secs(5);

/// What the membership task shows at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation {
    /// The view is settled (joined, or `join_timeout` passed with nobody answering).
    pub settled: bool,
    /// Other members live in the view.
    pub live_others: usize,
    /// Unreadable datagrams received so far, in all
    /// ([`super::MembershipMetrics::unreadable`]).
    pub unreadable: u64,
}

/// The gate's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not settled yet: claim nothing.
    Unsettled,
    /// Settled alone: claim nothing until the wait is over.
    Waiting,
    /// Alone, never joined, and datagrams it cannot read arrive: claim nothing.
    Blind,
    /// Elect from the view.
    Claim,
}

/// The claim rule of one node, kept for the life of its L2 announcements.
#[derive(Debug, Clone)]
pub struct Rule {
    others: usize,
    ever_joined: bool,
    alone_since: Option<Instant>,
    unreadable: u64,
    unreadable_at: Option<Instant>,
    blind: bool,
    change: Option<bool>,
}

impl Rule {
    /// A gate for a node that lists `others` other nodes.
    pub fn new(others: usize) -> Self {
        Rule {
            others,
            ever_joined: false,
            alone_since: None,
            unreadable: 0,
            unreadable_at: None,
            blind: false,
            change: None,
        }
    }

    /// The verdict at `now` for what membership shows.
    pub fn handle(&mut self, now: Instant, o: Observation) -> Verdict {
        if o.unreadable > self.unreadable {
            self.unreadable = o.unreadable;
            self.unreadable_at = Some(now);
        }
        self.ever_joined |= o.live_others > 0;
        let verdict = if !o.settled {
            Verdict::Unsettled
        } else if self.others == 0 || o.live_others > 0 || self.ever_joined {
            Verdict::Claim
        } else {
            let since = *self.alone_since.get_or_insert(now);
            if self.unreadable_at.is_some_and(|t| now.saturating_duration_since(t) < UNREADABLE_MEMORY) {
                Verdict::Blind
            } else if now.saturating_duration_since(since) < ALONE_WAIT {
                Verdict::Waiting
            } else {
                Verdict::Claim
            }
        };
        // Blindness ends only with another verdict on a settled view: an unsettled
        // moment (bootstrap rejoining) says nothing about it.
        if verdict != Verdict::Unsettled {
            let blind = verdict == Verdict::Blind;
            if blind != self.blind {
                self.blind = blind;
                self.change = Some(blind);
            }
        }
        verdict
    }

    /// Some(true) once when this node became blind, Some(false) once when it stopped.
    /// Call it after every [`Rule::handle`]: only the latest change is kept.
    pub fn poll_event(&mut self) -> Option<bool> {
        self.change.take()
    }

    /// True while blind.
    pub fn is_blind(&self) -> bool {
        self.blind
    }
}

/// How the log lines name the caller's things.
#[derive(Debug, Clone, Copy)]
pub struct Wording {
    /// What the others are called, e.g. "nodes" or "members".
    pub peers: &'static str,
    /// Where the membership key comes from, e.g. "--membership-key-file, or Secret
    /// ferrolb-membership".
    pub key: &'static str,
    /// What a blind node does, e.g. "not answering ARP/NDP for any address".
    pub blind: &'static str,
    /// What it does again once it is no longer blind.
    pub recovered: &'static str,
}

/// A change of blindness, already logged and exported; the note is for an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blindness {
    /// Blind now (else no longer).
    pub blind: bool,
    /// The log line's text.
    pub note: String,
}

/// The claim rule of one node with its reporting.
#[derive(Debug, Clone)]
pub struct Claim {
    rule: Rule,
    wording: Wording,
}

impl Claim {
    /// For a node that lists `others` other nodes.
    pub fn new(others: usize, wording: Wording) -> Self {
        Claim { rule: Rule::new(others), wording }
    }

    /// Whether this node may elect from a view (`settled`, `live_others` other members
    /// live) at `now`, and the change of blindness this made, if any.
    pub fn handle(
        &mut self,
        now: Instant,
        settled: bool,
        live_others: usize,
        metrics: &MembershipMetrics,
    ) -> (Verdict, Option<Blindness>) {
        let seen = Observation { settled, live_others, unreadable: metrics.unreadable() };
        let verdict = self.rule.handle(now, seen);
        let Some(blind) = self.rule.poll_event() else { return (verdict, None) };
        metrics.set_blind(blind);
        let w = self.wording;
        let note = if blind {
            let note = format!(
                "membership: datagrams from other {peers} arrive but none can be read ({}) and none of them is \
                 live: {}. Either the membership key differs between {peers} ({}) or they run a ferrolb release \
                 with another membership wire version; fix the key or finish the upgrade \
                 (ferrolb_membership_dropped_packets_total counts them by reason)",
                metrics.unreadable_summary(),
                w.blind,
                w.key,
                peers = w.peers,
            );
            tracing::error!("{note}");
            note
        } else {
            let note = format!(
                "membership: no longer blind (a peer is heard, or the unreadable datagrams stopped); {}",
                w.recovered
            );
            tracing::info!("{note}");
            note
        };
        (verdict, Some(Blindness { blind, note }))
    }
}

#[cfg(test)]
mod tests {
    use crate::membership::auth::DropReason;

    use super::*;

    fn obs(settled: bool, live_others: usize, unreadable: u64) -> Observation {
        Observation { settled, live_others, unreadable }
    }

    const MS: Duration = Duration::from_millis(1);

    /// The clock-skew bug of membership wire version 1, at the gate: every datagram
    /// from the peer was dropped (then as stale), the node settled alone and claimed
    /// everything after ALONE_WAIT. Datagrams it cannot read keep it from claiming, for
    /// as long as they keep coming, and a log line / metric / Event is due once.
    #[test]
    fn a_lone_node_that_cannot_read_its_peer_claims_nothing() {
        let t0 = Instant::now();
        let mut g = Rule::new(1);
        assert_eq!(g.handle(t0, obs(false, 0, 0)), Verdict::Unsettled);
        assert_eq!(g.handle(t0 + 1000 * MS, obs(true, 0, 0)), Verdict::Waiting);
        assert_eq!(g.poll_event(), None);
        let mut unreadable = 0;
        for step in 0..60u32 {
            // The peer announces itself every second; each datagram is dropped.
            unreadable += 1;
            let now = t0 + 1200 * MS + step * 1000 * MS;
            assert_eq!(g.handle(now, obs(true, 0, unreadable)), Verdict::Blind, "step {step}");
            assert_eq!(g.handle(now + 500 * MS, obs(true, 0, unreadable)), Verdict::Blind);
        }
        assert_eq!(g.poll_event(), Some(true));
        assert_eq!(g.poll_event(), None, "reported once");
        assert!(g.is_blind());
    }

    #[test]
    fn blindness_ends_when_a_peer_is_heard_or_the_datagrams_stop() {
        let t0 = Instant::now();
        let mut g = Rule::new(2);
        assert_eq!(g.handle(t0, obs(true, 0, 3)), Verdict::Blind);
        assert_eq!(g.handle(t0 + 4999 * MS, obs(true, 0, 3)), Verdict::Blind);
        assert_eq!(g.poll_event(), Some(true));
        // Nothing more for UNREADABLE_MEMORY: the peers are gone, the lone view is true.
        assert_eq!(g.handle(t0 + 5000 * MS, obs(true, 0, 3)), Verdict::Claim);
        assert_eq!(g.poll_event(), Some(false));
        // Back again, then a peer is heard (the key fixed): claim from the view.
        let t1 = t0 + 6000 * MS;
        assert_eq!(g.handle(t1, obs(true, 0, 4)), Verdict::Blind);
        assert_eq!(g.poll_event(), Some(true));
        assert_eq!(g.handle(t1 + MS, obs(true, 1, 9)), Verdict::Claim);
        assert_eq!(g.poll_event(), Some(false));
    }

    #[test]
    fn a_lone_node_waits_then_claims_when_nothing_arrives() {
        let t0 = Instant::now();
        let mut g = Rule::new(1);
        assert_eq!(g.handle(t0, obs(true, 0, 0)), Verdict::Waiting);
        assert_eq!(g.handle(t0 + ALONE_WAIT - MS, obs(true, 0, 0)), Verdict::Waiting);
        assert_eq!(g.handle(t0 + ALONE_WAIT, obs(true, 0, 0)), Verdict::Claim);
        assert_eq!(g.poll_event(), None);
        // The only node listed, or a node that joined: no wait.
        assert_eq!(Rule::new(0).handle(t0, obs(true, 0, 5)), Verdict::Claim);
        assert_eq!(Rule::new(3).handle(t0, obs(true, 2, 0)), Verdict::Claim);
    }

    /// A node that was a member keeps claiming alone (its peers died) whatever arrives:
    /// an intruder sending garbage, a node started with another key.
    #[test]
    fn a_node_that_joined_once_is_not_silenced() {
        let t0 = Instant::now();
        let mut g = Rule::new(1);
        assert_eq!(g.handle(t0, obs(true, 1, 0)), Verdict::Claim);
        assert_eq!(g.handle(t0 + MS, obs(true, 0, 50)), Verdict::Claim);
        assert_eq!(g.handle(t0 + 2 * MS, obs(false, 0, 60)), Verdict::Unsettled);
        assert_eq!(g.handle(t0 + 3 * MS, obs(true, 0, 70)), Verdict::Claim);
        assert_eq!(g.poll_event(), None);
    }

    /// Bootstrap rejoins on every health change: the gate outlives the instance, and
    /// an unsettled moment neither starts nor ends blindness.
    #[test]
    fn an_unsettled_moment_keeps_the_state() {
        let t0 = Instant::now();
        let mut g = Rule::new(1);
        assert_eq!(g.handle(t0, obs(true, 0, 1)), Verdict::Blind);
        assert_eq!(g.handle(t0 + MS, obs(false, 0, 2)), Verdict::Unsettled);
        assert!(g.is_blind());
        assert_eq!(g.handle(t0 + 2 * MS, obs(true, 0, 2)), Verdict::Blind);
        assert_eq!(g.poll_event(), Some(true));
    }

    /// A lone node that reads none of the datagrams it gets is blind, once: the metric is
    /// set and the note names the caller's key and what it does; a peer heard ends it.
    #[test]
    fn blindness_is_reported_once_each_way_in_the_callers_words() {
        let metrics = MembershipMetrics::default();
        let wording = Wording {
            peers: "members",
            key: "the-key-source",
            blind: "claiming nothing here",
            recovered: "electing again",
        };
        let mut claim = Claim::new(1, wording);
        let t0 = Instant::now();
        metrics.drop_packet(DropReason::Unauthenticated);
        let (verdict, blindness) = claim.handle(t0, true, 0, &metrics);
        assert_eq!(verdict, Verdict::Blind);
        let b = blindness.expect("became blind");
        assert!(
            b.blind && b.note.contains("the-key-source") && b.note.contains("claiming nothing here"),
            "{b:?}"
        );
        assert!(b.note.contains("1 unauthenticated") && b.note.contains("differs between members"), "{b:?}");
        assert!(metrics.blind());
        let t1 = t0 + Duration::from_millis(10);
        assert_eq!(claim.handle(t1, true, 0, &metrics), (Verdict::Blind, None), "said once");
        let (verdict, blindness) = claim.handle(t1, true, 1, &metrics);
        assert_eq!(verdict, Verdict::Claim);
        let b = blindness.expect("no longer blind");
        assert!(!b.blind && b.note.contains("electing again"), "{b:?}");
        assert!(!metrics.blind());
    }
}
