//! The L2 claim over a membership view, as the speaker and bootstrap both run it: the
//! [`ClaimGate`] fed from what membership shows and counts, and blindness exported
//! (`ferrolb_membership_blind`) and logged once per change, in the words of the caller's
//! configuration.

use std::time::Instant;

use super::MembershipMetrics;
use super::claim_gate::{ClaimGate, Observation, Verdict};

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

/// The claim gate of one node with its reporting.
#[derive(Debug, Clone)]
pub struct Claim {
    gate: ClaimGate,
    wording: Wording,
}

impl Claim {
    /// For a node that lists `others` other nodes.
    pub fn new(others: usize, wording: Wording) -> Self {
        Claim { gate: ClaimGate::new(others), wording }
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
        let verdict = self.gate.handle(now, seen);
        let Some(blind) = self.gate.poll_event() else { return (verdict, None) };
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
    use std::time::Duration;

    use super::*;
    use crate::membership::auth::DropReason;

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
