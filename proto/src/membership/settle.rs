//! When a starting node's first view may be trusted (sans-IO; the caller owns the clock).
//!
//! A starting node announces itself to every seed at once, and the answers come one by
//! one: the first one makes it a member (SWIM's "active"), the others follow within
//! milliseconds. A view taken at the first answer holds only some of the live nodes,
//! and electing from it makes this node owner, for those milliseconds, of addresses
//! another node owns: both answer ARP, and a connection that crossed to this node is
//! reset when the client's next packets go back to the owner. So a joined node settles
//! only once its view stopped growing:
//!
//! * at once when every seed is in the view (nothing more can come);
//! * else when the view has not grown for [`QUIET`] (a seed that runs no speaker, or is
//!   down, never answers);
//! * and at the latest `join_timeout` after joining (a view that keeps growing).
//!
//! A node nobody answers settles alone after `join_timeout` from its start, as before:
//! the [`claim`](super::claim) decides whether that lone view is trusted.
//! Once settled, a node stays settled: later views are SWIM's ordinary changes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long a joined node's view must not grow before it settles, unless every seed
/// is in it. The answers to the start's announcements come within a few milliseconds
/// on a LAN; this leaves room for a loaded peer's.
pub const QUIET: Duration = Duration::from_millis(250);

/// Why a view settled: logged once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Every seed is live.
    AllSeeds,
    /// The view stopped growing for [`QUIET`].
    Quiet,
    /// `join_timeout` passed since joining, the view still growing.
    Bound,
    /// No seed answered within `join_timeout` of the start.
    Alone,
}

#[derive(Debug, Clone)]
enum State {
    /// Not a member yet: settles alone at the deadline.
    Starting {
        deadline: Instant,
    },
    /// A member: waits for the view to stop growing.
    Joined {
        joined: Instant,
        grew: Instant,
        seen: BTreeSet<String>,
    },
    Settled,
}

/// The settle rule of one membership instance.
#[derive(Debug, Clone)]
pub struct Settle {
    seeds: BTreeSet<String>,
    join_timeout: Duration,
    state: State,
}

impl Settle {
    /// A node started at `now` with these seeds (other nodes' names).
    pub fn new(now: Instant, seeds: BTreeSet<String>, join_timeout: Duration) -> Self {
        let state =
            if seeds.is_empty() { State::Settled } else { State::Starting { deadline: now + join_timeout } };
        Settle { seeds, join_timeout, state }
    }

    /// Whether the view may be elected from.
    pub fn settled(&self) -> bool {
        matches!(self.state, State::Settled)
    }

    /// When [`Settle::on_deadline`] must be called; None when nothing is timed.
    pub fn deadline(&self) -> Option<Instant> {
        match &self.state {
            State::Starting { deadline } => Some(*deadline),
            State::Joined { joined, grew, .. } => Some((*grew + QUIET).min(*joined + self.join_timeout)),
            State::Settled => None,
        }
    }

    /// This node became a member at `now` with the `live` view (other nodes).
    pub fn on_joined(&mut self, now: Instant, live: &BTreeSet<String>) -> Option<Reason> {
        if let State::Starting { .. } = self.state {
            self.state = State::Joined { joined: now, grew: now, seen: BTreeSet::new() };
        }
        self.on_view(now, live)
    }

    /// The view changed at `now`; `live` holds the other live nodes. Some when it
    /// settles now.
    pub fn on_view(&mut self, now: Instant, live: &BTreeSet<String>) -> Option<Reason> {
        let State::Joined { grew, seen, .. } = &mut self.state else { return None };
        if live.iter().any(|m| !seen.contains(m)) {
            *grew = now;
            seen.extend(live.iter().cloned());
        }
        if self.seeds.is_subset(live) {
            self.state = State::Settled;
            return Some(Reason::AllSeeds);
        }
        None
    }

    /// The deadline passed (call at or after [`Settle::deadline`]). Some when it
    /// settles now.
    pub fn on_deadline(&mut self, now: Instant) -> Option<Reason> {
        let reason = match &self.state {
            State::Starting { deadline } if now >= *deadline => Reason::Alone,
            State::Joined { joined, grew, .. } => {
                if now >= *joined + self.join_timeout {
                    Reason::Bound
                } else if now >= *grew + QUIET {
                    Reason::Quiet
                } else {
                    return None;
                }
            }
            _ => return None,
        };
        self.state = State::Settled;
        Some(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::names;

    const MS: Duration = Duration::from_millis(1);
    const JOIN: Duration = Duration::from_secs(1);

    /// The failed upgrade: node2 heard node3 first and node1, node4 10 ms later. It
    /// must not settle on the first answer, and settles once all seeds are in.
    #[test]
    fn a_first_answer_is_not_the_view() {
        let t0 = Instant::now();
        let mut s = Settle::new(t0, names(&["node1", "node3", "node4"]), JOIN);
        assert!(!s.settled());
        assert_eq!(s.on_joined(t0 + 5 * MS, &names(&["node3"])), None);
        assert!(!s.settled(), "one answer of three seeds");
        assert_eq!(s.on_deadline(t0 + 10 * MS), None);
        assert_eq!(s.on_view(t0 + 15 * MS, &names(&["node1", "node3"])), None);
        assert_eq!(s.on_view(t0 + 16 * MS, &names(&["node1", "node3", "node4"])), Some(Reason::AllSeeds));
        assert!(s.settled());
        assert_eq!(s.deadline(), None);
    }

    /// A seed that never answers (no speaker there, or down) delays settling by QUIET
    /// after the last growth, not more; each growth restarts the wait.
    #[test]
    fn a_silent_seed_costs_the_quiet_time() {
        let t0 = Instant::now();
        let mut s = Settle::new(t0, names(&["a", "b", "down"]), JOIN);
        s.on_joined(t0, &names(&["a"]));
        assert_eq!(s.deadline(), Some(t0 + QUIET));
        s.on_view(t0 + 100 * MS, &names(&["a", "b"]));
        assert_eq!(s.deadline(), Some(t0 + 100 * MS + QUIET), "growth restarts the wait");
        assert_eq!(s.on_deadline(t0 + QUIET), None, "not quiet long enough since b");
        // A shrinking or equal view is no growth.
        s.on_view(t0 + 200 * MS, &names(&["b"]));
        s.on_view(t0 + 210 * MS, &names(&["a", "b"]));
        assert_eq!(s.deadline(), Some(t0 + 100 * MS + QUIET));
        assert_eq!(s.on_deadline(t0 + 100 * MS + QUIET), Some(Reason::Quiet));
        assert!(s.settled());
    }

    /// A view that keeps growing settles join_timeout after joining at the latest.
    #[test]
    fn a_growing_view_settles_at_the_bound() {
        let t0 = Instant::now();
        let seeds: BTreeSet<String> = (0..20).map(|i| format!("n{i}")).collect();
        let mut s = Settle::new(t0, seeds, JOIN);
        s.on_joined(t0, &names(&["n0"]));
        let mut live = names(&["n0"]);
        for i in 1..8 {
            let t = t0 + i * 200 * MS;
            live.insert(format!("n{i}"));
            if t >= t0 + JOIN {
                assert_eq!(s.deadline(), Some(t0 + JOIN));
                assert_eq!(s.on_deadline(t0 + JOIN), Some(Reason::Bound));
                return;
            }
            assert_eq!(s.on_view(t, &live), None);
        }
        panic!("never reached the bound");
    }

    /// Nobody answers: alone at join_timeout from the start; no seeds: settled at once.
    #[test]
    fn alone_and_seedless() {
        let t0 = Instant::now();
        let mut s = Settle::new(t0, names(&["a"]), JOIN);
        assert_eq!(s.deadline(), Some(t0 + JOIN));
        assert_eq!(s.on_deadline(t0 + 999 * MS), None);
        assert_eq!(s.on_view(t0 + 500 * MS, &names(&[])), None, "a view before joining settles nothing");
        assert_eq!(s.on_deadline(t0 + JOIN), Some(Reason::Alone));
        assert!(s.settled());
        // Once settled, it stays so: a later join is an ordinary change.
        assert_eq!(s.on_joined(t0 + 2 * JOIN, &names(&["a"])), None);
        assert!(s.settled());

        let s = Settle::new(t0, BTreeSet::new(), JOIN);
        assert!(s.settled());
        assert_eq!(s.deadline(), None);
    }

    /// Every seed answering at once settles at once: no wait on a healthy cluster.
    #[test]
    fn all_seeds_at_once_settle_at_once() {
        let t0 = Instant::now();
        let mut s = Settle::new(t0, names(&["a", "b"]), JOIN);
        assert_eq!(s.on_joined(t0, &names(&["a", "b"])), Some(Reason::AllSeeds));
    }
}
