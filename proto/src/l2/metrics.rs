//! The L2 announcer's metrics (`ferrolb_l2_*`).

use std::net::IpAddr;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AddressLabels {
    address: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolLabels {
    protocol: String,
}

/// Counters of the L2 announcer (`ferrolb_l2_*`).
#[derive(Clone, Debug, Default)]
pub struct L2Metrics {
    requests: Family<AddressLabels, Counter>,
    replies: Family<AddressLabels, Counter>,
    gratuitous: Family<AddressLabels, Counter>,
    malformed: Family<ProtocolLabels, Counter>,
    pub(super) owned: Gauge,
    conflicts: Family<ResultLabels, Counter>,
    yielded: Gauge,
}

impl L2Metrics {
    /// Metrics registered in `registry`.
    pub fn new(registry: &mut Registry) -> Self {
        let m = L2Metrics::default();
        registry.register(
            "ferrolb_l2_requests_received",
            "ARP requests and neighbor solicitations received for an owned address",
            m.requests.clone(),
        );
        registry.register(
            "ferrolb_l2_replies_sent",
            "ARP replies and solicited neighbor advertisements sent",
            m.replies.clone(),
        );
        registry.register(
            "ferrolb_l2_gratuitous_sent",
            "Gratuitous ARP requests and unsolicited neighbor advertisements sent",
            m.gratuitous.clone(),
        );
        registry.register(
            "ferrolb_l2_malformed_received",
            "ARP or NDP messages dropped as malformed",
            m.malformed.clone(),
        );
        registry.register("ferrolb_l2_owned_addresses", "Addresses this node answers for", m.owned.clone());
        registry.register(
            "ferrolb_l2_address_conflicts",
            "Another MAC answered for an owned address: won (this node keeps it and announces it again), yielded (this node stopped answering), foreign (the other kept answering after losing: not a ferrolb node)",
            m.conflicts.clone(),
        );
        registry.register(
            "ferrolb_l2_yielded_addresses",
            "Owned addresses this node does not answer for: another node outranks it there (an address conflict)",
            m.yielded.clone(),
        );
        m
    }

    /// Requests received for `addr` (reading creates no series).
    pub fn requests_received(&self, addr: IpAddr) -> u64 {
        self.requests.get(&label(addr)).map_or(0, |c| c.get())
    }

    /// Replies sent for `addr`.
    pub fn replies_sent(&self, addr: IpAddr) -> u64 {
        self.replies.get(&label(addr)).map_or(0, |c| c.get())
    }

    /// Gratuitous announcements sent for `addr`.
    pub fn gratuitous_sent(&self, addr: IpAddr) -> u64 {
        self.gratuitous.get(&label(addr)).map_or(0, |c| c.get())
    }

    /// Drops the series of an address no longer owned: a node that owned many addresses
    /// over time must not export them all forever.
    pub(super) fn forget(&self, addr: IpAddr) {
        let l = label(addr);
        self.requests.remove(&l);
        self.replies.remove(&l);
        self.gratuitous.remove(&l);
    }

    /// Malformed messages dropped, `protocol` "arp" or "ndp".
    pub fn malformed(&self, protocol: &str) -> u64 {
        self.malformed.get_or_create(&ProtocolLabels { protocol: protocol.into() }).get()
    }

    pub(super) fn count_request(&self, addr: IpAddr) {
        self.requests.get_or_create(&label(addr)).inc();
    }

    pub(super) fn count_reply(&self, addr: IpAddr) {
        self.replies.get_or_create(&label(addr)).inc();
    }

    pub(super) fn count_gratuitous(&self, addr: IpAddr) {
        self.gratuitous.get_or_create(&label(addr)).inc();
    }

    /// Address conflicts counted with `result` (`won`, `yielded`, `foreign`).
    pub fn conflicts(&self, result: &str) -> u64 {
        self.conflicts.get_or_create(&ResultLabels { result: result.into() }).get()
    }

    pub(super) fn count_conflict(&self, result: &str) {
        self.conflicts.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    pub(super) fn add_yielded(&self, delta: i64) {
        self.yielded.inc_by(delta);
    }

    pub(super) fn count_malformed(&self, protocol: &str) {
        self.malformed.get_or_create(&ProtocolLabels { protocol: protocol.into() }).inc();
    }
}

fn label(addr: IpAddr) -> AddressLabels {
    AddressLabels { address: addr.to_string() }
}
