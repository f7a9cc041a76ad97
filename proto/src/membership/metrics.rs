//! Membership metrics (`ferrolb_membership_*`): one registry entry per series, read
//! back by tests and the claim rule.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::auth::DropReason;
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabels {
    pub(super) reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KeyLabels {
    pub(super) key: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabels {
    pub(super) result: String,
}

/// `ferrolb_membership_dropped_packets` with a counter per reason made up front: the
/// reader thread counts a drop without building a label (no allocation, even under a
/// flood), and every reason is exported from the start.
#[derive(Clone, Debug)]
pub(super) struct Dropped {
    pub(super) family: Family<ReasonLabels, Counter>,
    by_reason: Vec<Counter>,
}

impl Default for Dropped {
    fn default() -> Self {
        let family = Family::<ReasonLabels, Counter>::default();
        let by_reason = DropReason::ALL
            .iter()
            .map(|r| family.get_or_create(&ReasonLabels { reason: r.as_str().into() }).clone())
            .collect();
        Dropped { family, by_reason }
    }
}

impl Dropped {
    fn of(&self, reason: DropReason) -> Option<&Counter> {
        DropReason::ALL.iter().position(|r| *r == reason).and_then(|i| self.by_reason.get(i))
    }
}

/// Membership metrics (`ferrolb_membership_*`).
#[derive(Clone, Debug, Default)]
pub struct MembershipMetrics {
    pub(super) size: Gauge,
    pub(super) dropped: Dropped,
    pub(super) blind: Gauge,
    pub(super) rotation_phase: Gauge,
    pub(super) key_changes: Family<ResultLabels, Counter>,
    pub(super) rotation_opened: Family<KeyLabels, Counter>,
    pub(super) heartbeat_sent: Counter,
    pub(super) heartbeat_received: Counter,
    pub(super) heartbeat_suspicions: Counter,
    pub(super) heartbeat_cleared: Family<ReasonLabels, Counter>,
    pub(super) heartbeat_late_ticks: Counter,
    pub(super) heartbeat_realtime: Gauge,
    pub(super) heartbeat_silence_multiplier: Gauge,
}

impl MembershipMetrics {
    /// Metrics registered in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = MembershipMetrics::default();
        registry.register("ferrolb_membership_members", "Live members, this node included", m.size.clone());
        registry.register(
            "ferrolb_membership_dropped_packets",
            "Membership datagrams dropped, by reason",
            m.dropped.family.clone(),
        );
        registry.register(
            "ferrolb_membership_blind",
            "1 while datagrams from other nodes arrive that this node cannot read (key, version, replays) and no other node is live: it claims no L2 address",
            m.blind.clone(),
        );
        registry.register(
            "ferrolb_membership_key_rotation_phase",
            "Membership key rotation: 0 one key; 1 a new key is accepted, datagrams still sealed with the old one; 2 sealed with the new key, the old one still accepted",
            m.rotation_phase.clone(),
        );
        registry.register(
            "ferrolb_membership_key_changes",
            "Membership key changes seen: applied (a rotation started), rejected (unusable key: the current one stays)",
            m.key_changes.clone(),
        );
        registry.register(
            "ferrolb_membership_rotation_datagrams",
            "Datagrams opened with a key other than the one this node seals with, during a rotation: next (the peer switched first), previous (the peer has not switched yet)",
            m.rotation_opened.clone(),
        );
        registry.register(
            "ferrolb_membership_heartbeats_sent",
            "L2 heartbeats sent to successors",
            m.heartbeat_sent.clone(),
        );
        registry.register(
            "ferrolb_membership_heartbeats_received",
            "L2 heartbeats received (authenticated)",
            m.heartbeat_received.clone(),
        );
        registry.register(
            "ferrolb_membership_heartbeat_suspicions",
            "Members suspected after missed heartbeats: this node took over the addresses it is successor of",
            m.heartbeat_suspicions.clone(),
        );
        registry.register(
            "ferrolb_membership_heartbeat_suspicions_cleared",
            "Heartbeat suspicions ended without SWIM: beats_resumed (the member lives: a false suspicion or a restart), expired (SWIM did not confirm within the hold)",
            m.heartbeat_cleared.clone(),
        );
        registry.register(
            "ferrolb_membership_heartbeat_late_ticks",
            "Heartbeat ticks that came an interval or more late: this node was starved of CPU and judged nobody",
            m.heartbeat_late_ticks.clone(),
        );
        registry.register(
            "ferrolb_membership_heartbeat_realtime",
            "1 when the heartbeat thread runs at real-time priority (SCHED_FIFO)",
            m.heartbeat_realtime.clone(),
        );
        registry.register(
            "ferrolb_membership_heartbeat_silence_multiplier",
            "What this host's CPU and memory pressure (PSI) multiplies the heartbeat silence by: 1 on a quiet host, up to 5",
            m.heartbeat_silence_multiplier.clone(),
        );
        m
    }

    /// Counts one datagram dropped for `reason` (allocation-free: the reader thread).
    pub fn drop_packet(&self, reason: DropReason) {
        if let Some(c) = self.dropped.of(reason) {
            c.inc();
        }
    }

    pub(super) fn heartbeat_cleared(&self, reason: &str) {
        self.heartbeat_cleared.get_or_create(&ReasonLabels { reason: reason.into() }).inc();
    }

    /// Members suspected after missed heartbeats, in all.
    pub fn heartbeat_suspicions(&self) -> u64 {
        self.heartbeat_suspicions.get()
    }

    /// Heartbeat ticks that came late (this node was starved).
    pub fn heartbeat_late_ticks(&self) -> u64 {
        self.heartbeat_late_ticks.get()
    }

    /// Counts a key change that could not be used (the current key stays).
    pub fn key_rejected(&self) {
        self.key_changes.get_or_create(&ResultLabels { result: "rejected".into() }).inc();
    }

    /// Key changes counted with `result` (`applied` or `rejected`).
    pub fn key_changes(&self, result: &str) -> u64 {
        self.key_changes.get_or_create(&ResultLabels { result: result.into() }).get()
    }

    /// The rotation phase (`ferrolb_membership_key_rotation_phase`).
    pub fn rotation_phase(&self) -> i64 {
        self.rotation_phase.get()
    }

    /// Datagrams dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped.of(reason).map_or(0, Counter::get)
    }

    /// Datagrams dropped that most likely came from a peer this node cannot read
    /// ([`DropReason::from_unreadable_peer`]), in all.
    pub fn unreadable(&self) -> u64 {
        DropReason::ALL.into_iter().filter(|r| r.from_unreadable_peer()).map(|r| self.dropped(r)).sum()
    }

    /// The unreadable datagrams by reason, for a log line ("3 unauthenticated, …").
    pub fn unreadable_summary(&self) -> String {
        DropReason::ALL
            .into_iter()
            .filter(|r| r.from_unreadable_peer())
            .map(|r| (r, self.dropped(r)))
            .filter(|(_, n)| *n > 0)
            .map(|(r, n)| format!("{n} {}", r.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Sets `ferrolb_membership_blind` (see [`claim`]).
    pub fn set_blind(&self, blind: bool) {
        self.blind.set(i64::from(blind));
    }

    /// True while `ferrolb_membership_blind` is 1.
    pub fn blind(&self) -> bool {
        self.blind.get() != 0
    }

    /// Current live-set size.
    pub fn size(&self) -> i64 {
        self.size.get()
    }
}
