//! Make before break when a member joins (sans-IO; the caller owns the clock).
//!
//! A member that comes back (a restarted speaker, a rebooted node) elects itself owner
//! of its addresses from its first view and announces them at once. The node that owned
//! them meanwhile would stop answering the moment it sees the member live, which can
//! come before the member's first announcement: for a moment nobody answers a client
//! resolving the address. So a member that joins while this node elects counts as a
//! candidate only once it has been live for a grace period; until then this node keeps
//! its addresses and both answer (as in the handover on shutdown), then it lets go.
//!
//! A member that leaves again before it counts changes no election here, but clients
//! may have followed its announcement: [`JoinGrace::left_early`] says so, and the caller
//! announces what it owns again.
//!
//! The first view counts whole (this node owns nothing yet, there is nothing to hand
//! over), and so does the first after a view that could not be elected from; so do the
//! members that show up within the grace after it: a starting node learns the members
//! one gossip round after another, and they were there before it.
//!
//! This node itself joins again when its peers declared it down (a partition, or a pause
//! longer than SWIM's suspicion: a node starved of CPU) and it renewed its identity
//! ([`JoinGrace::renewed`]): they count it as a joiner from then on, so it does too.
//! Meanwhile they own what it owned; were it to keep electing itself, two nodes would
//! take the new flows of its active-active buckets until their grace passed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Delays members that join into the set owners are elected from.
#[derive(Debug, Clone, Default)]
pub struct JoinGrace {
    /// Members of the last view counted as candidates; None before the first view.
    counted: Option<BTreeSet<String>>,
    /// When the first view came.
    since: Option<Instant>,
    /// Members live but not counted yet, since when they are live.
    joining: BTreeMap<String, Instant>,
    /// A joining member left before it counted (cleared by [`JoinGrace::left_early`]).
    left: bool,
    /// This node, joining again since its identity was renewed, until it counts: never
    /// counted at once, not even in a first view or while starting.
    renewed: Option<(String, Instant)>,
}

impl JoinGrace {
    /// The candidates at `now` among the `live` members (SWIM's live set) of a view that
    /// may be elected from: those already counted, and joiners live for `grace` or
    /// longer.
    ///
    /// A member whose heartbeats stopped (SWIM still has it live) stays among them: it
    /// never left, it kept answering for its addresses. The caller leaves it out of the
    /// elections a heartbeat suspicion is for, and when its beats resume it is a
    /// candidate there again at once, and this node lets go of what it took over.
    /// (Counted as a joiner, a false suspicion cost a whole grace of two nodes answering
    /// for the same addresses instead of milliseconds.)
    pub fn candidates(&mut self, now: Instant, live: BTreeSet<String>, grace: Duration) -> BTreeSet<String> {
        let renewed = self.renewed.clone().filter(|(me, _)| live.contains(me));
        let Some(counted) = self.counted.as_mut() else {
            let mut first = live;
            if let Some((me, at)) = renewed {
                first.remove(&me);
                self.joining.insert(me, at);
            }
            self.counted = Some(first.clone());
            self.since = Some(now);
            return first;
        };
        let starting = self.since.is_some_and(|t| now.saturating_duration_since(t) < grace);
        counted.retain(|m| live.contains(m));
        let before = self.joining.len();
        self.joining.retain(|m, _| live.contains(m));
        self.left |= self.joining.len() < before;
        for m in &live {
            if !counted.contains(m) {
                let since = *self.joining.entry(m.clone()).or_insert(now);
                let me_again = renewed.as_ref().is_some_and(|(me, _)| me == m);
                if (starting && !me_again) || now.saturating_duration_since(since) >= grace {
                    self.joining.remove(m);
                    counted.insert(m.clone());
                    if me_again {
                        self.renewed = None;
                    }
                }
            }
        }
        counted.clone()
    }

    /// Whether `member` counted in the last view (not while it is joining).
    pub fn counts(&self, member: &str) -> bool {
        self.counted.as_ref().is_some_and(|c| c.contains(member))
    }

    /// This node (`me`) renewed its identity at `now`, told it was down by `told_by`.
    /// Returns whether it stands back.
    ///
    /// Told by a member this node counts, its peers declared it down and took what it
    /// owned: they count it again once its join grace passes, and so does it, or it would
    /// take the new flows of its active-active buckets beside their new owners until
    /// then. Told by a member it does not count (one it had declared down itself, or one
    /// that only just came back: a partition healing renews every side), or by nobody
    /// known, nothing changes: were every side to stand back, nobody would serve.
    pub fn renewed(&mut self, now: Instant, me: &str, told_by: Option<&str>) -> bool {
        if !told_by.is_some_and(|by| self.counts(by)) {
            return false;
        }
        if let Some(counted) = self.counted.as_mut() {
            counted.remove(me);
        }
        self.joining.insert(me.to_owned(), now);
        self.renewed = Some((me.to_owned(), now));
        true
    }

    /// Whether a joining member left before it counted, since the last call.
    pub fn left_early(&mut self) -> bool {
        std::mem::take(&mut self.left)
    }

    /// When the earliest joiner becomes a candidate (None: nobody is joining). Every
    /// node learns of a joiner within milliseconds of the others, so waking then keeps
    /// their elections together: an owner switches its heartbeats to a joiner that is
    /// now a successor while the former successor already counts it too, rather than
    /// hearing silence and taking over.
    pub fn poll_timeout(&self, grace: Duration) -> Option<Instant> {
        self.joining.values().min().map(|t| *t + grace)
    }

    /// The view may not be elected from: the next one counts whole (but this node, if it
    /// is still joining again after a renewal).
    pub fn reset(&mut self) {
        self.counted = None;
        self.since = None;
        self.joining.clear();
        self.left = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::names;

    const GRACE: Duration = Duration::from_secs(1);

    #[test]
    fn the_first_view_counts_whole_and_a_joiner_only_after_the_grace() {
        let t0 = Instant::now();
        let mut g = JoinGrace::default();
        assert_eq!(g.candidates(t0, names(&["a", "b"]), GRACE), names(&["a", "b"]));
        assert_eq!(g.poll_timeout(GRACE), None);
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(g.candidates(t1, names(&["a", "b", "c"]), GRACE), names(&["a", "b"]));
        assert_eq!(g.poll_timeout(GRACE), Some(t1 + GRACE));
        let almost = t1 + GRACE - Duration::from_millis(1);
        assert_eq!(g.candidates(almost, names(&["a", "b", "c"]), GRACE), names(&["a", "b"]));
        assert_eq!(g.candidates(t1 + GRACE, names(&["a", "b", "c"]), GRACE), names(&["a", "b", "c"]));
        assert_eq!(g.poll_timeout(GRACE), None);
        assert!(!g.left_early());
    }

    #[test]
    fn a_member_that_leaves_goes_at_once_and_waits_again_when_it_returns() {
        let t0 = Instant::now();
        let mut g = JoinGrace::default();
        g.candidates(t0, names(&["a", "b", "c"]), GRACE);
        // Leaving is never delayed: its addresses must move now.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(g.candidates(t1, names(&["a", "b"]), GRACE), names(&["a", "b"]));
        assert!(!g.left_early(), "a counted member leaving changes the election itself");
        let t2 = t1 + Duration::from_millis(100);
        assert_eq!(g.candidates(t2, names(&["a", "b", "c"]), GRACE), names(&["a", "b"]));
        // Gone again before the grace passed: the caller re-announces, and the
        // member's clock starts over on return.
        let t3 = t2 + Duration::from_millis(500);
        assert_eq!(g.candidates(t3, names(&["a", "b"]), GRACE), names(&["a", "b"]));
        assert!(g.left_early());
        assert!(!g.left_early(), "said once");
        let t4 = t3 + Duration::from_millis(100);
        assert_eq!(g.candidates(t4, names(&["a", "b", "c"]), GRACE), names(&["a", "b"]));
        assert_eq!(g.candidates(t2 + GRACE, names(&["a", "b", "c"]), GRACE), names(&["a", "b"]));
        assert_eq!(g.candidates(t4 + GRACE, names(&["a", "b", "c"]), GRACE), names(&["a", "b", "c"]));
    }

    #[test]
    fn a_renewed_node_counts_itself_only_after_the_grace_even_across_a_reset() {
        let t0 = Instant::now();
        let mut g = JoinGrace::default();
        g.candidates(t0, names(&["a", "b", "me"]), GRACE);
        assert!(g.counts("a") && g.counts("me") && !g.counts("c"));
        let t1 = t0 + Duration::from_secs(5);
        assert!(g.renewed(t1, "me", Some("a")), "told by a member it counts");
        assert!(!g.counts("me"));
        assert_eq!(g.candidates(t1, names(&["a", "b", "me"]), GRACE), names(&["a", "b"]));
        assert_eq!(g.poll_timeout(GRACE), Some(t1 + GRACE));
        // A view that cannot be elected from, then a first one again: still not at once.
        g.reset();
        let t2 = t1 + Duration::from_millis(300);
        assert_eq!(g.candidates(t2, names(&["a", "b", "me"]), GRACE), names(&["a", "b"]));
        let t3 = t2 + Duration::from_millis(100);
        assert_eq!(
            g.candidates(t3, names(&["a", "b", "me"]), GRACE),
            names(&["a", "b"]),
            "not while starting"
        );
        assert_eq!(g.candidates(t1 + GRACE, names(&["a", "b", "me"]), GRACE), names(&["a", "b", "me"]));
        // Counted again: the next first view counts it whole, as any other.
        g.reset();
        let t4 = t1 + Duration::from_secs(10);
        assert_eq!(g.candidates(t4, names(&["a", "b", "me"]), GRACE), names(&["a", "b", "me"]));
    }

    #[test]
    fn a_renewal_told_by_a_member_this_node_does_not_count_changes_nothing() {
        let t0 = Instant::now();
        let mut g = JoinGrace::default();
        g.candidates(t0, names(&["a", "me"]), GRACE);
        // A partition healed: "b" comes back and tells this node it is down.
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(g.candidates(t1, names(&["a", "b", "me"]), GRACE), names(&["a", "me"]));
        assert!(!g.renewed(t1, "me", Some("b")), "b is joining: not counted");
        assert!(!g.renewed(t1, "me", Some("gone")), "a member not in the view");
        assert!(!g.renewed(t1, "me", None), "a teller that could not be read");
        assert!(g.counts("me"));
        assert_eq!(g.candidates(t1, names(&["a", "b", "me"]), GRACE), names(&["a", "me"]));
        assert_eq!(g.poll_timeout(GRACE), Some(t1 + GRACE), "only b is joining");
        assert_eq!(g.candidates(t1 + GRACE, names(&["a", "b", "me"]), GRACE), names(&["a", "b", "me"]));
        // Before the first view nobody counts: a renewal while starting changes nothing.
        let mut fresh = JoinGrace::default();
        assert!(!fresh.renewed(t1, "me", Some("a")));
        assert_eq!(fresh.candidates(t1, names(&["a", "me"]), GRACE), names(&["a", "me"]));
    }

    #[test]
    fn members_learnt_while_starting_count_at_once() {
        let t0 = Instant::now();
        let mut g = JoinGrace::default();
        assert_eq!(g.candidates(t0, names(&["a"]), GRACE), names(&["a"]));
        let t1 = t0 + Duration::from_millis(30);
        assert_eq!(g.candidates(t1, names(&["a", "b", "c"]), GRACE), names(&["a", "b", "c"]));
        assert_eq!(g.candidates(t0 + GRACE, names(&["a", "b", "c", "d"]), GRACE), names(&["a", "b", "c"]));
    }

    #[test]
    fn after_a_reset_the_next_view_counts_whole() {
        let t0 = Instant::now();
        let mut g = JoinGrace::default();
        g.candidates(t0, names(&["a"]), GRACE);
        let t1 = t0 + GRACE;
        assert_eq!(g.candidates(t1, names(&["a", "b"]), GRACE), names(&["a"]));
        g.reset();
        assert_eq!(g.candidates(t1, names(&["a", "b"]), GRACE), names(&["a", "b"]));
    }

    #[test]
    fn a_member_counts_while_swim_has_it_live_and_waits_the_grace_once_it_left() {
        let t0 = Instant::now();
        let mut g = JoinGrace::default();
        g.candidates(t0, names(&["a", "b"]), GRACE);
        // b's heartbeats stop (SWIM still has it live): it stays counted; the caller
        // leaves it out of the elections a suspicion is for.
        let t1 = t0 + Duration::from_secs(5);
        assert_eq!(g.candidates(t1, names(&["a", "b"]), GRACE), names(&["a", "b"]));
        assert_eq!(g.poll_timeout(GRACE), None, "nobody is joining");
        assert!(!g.left_early());
        // Dropped by SWIM: it left; on its return it waits the grace.
        assert_eq!(g.candidates(t1, names(&["a"]), GRACE), names(&["a"]));
        let t2 = t1 + Duration::from_secs(2);
        assert_eq!(g.candidates(t2, names(&["a", "b"]), GRACE), names(&["a"]));
        assert_eq!(g.candidates(t2 + GRACE, names(&["a", "b"]), GRACE), names(&["a", "b"]));
    }
}
