//! The objects a report is computed from, as fetched (or built by a test).

use ferrolb_api::{BgpPeer, IpAddressPool, ServiceAnnouncement};
use k8s_openapi::api::core::v1::{Event, Node, Pod, Service};
use k8s_openapi::jiff::Timestamp;

/// Everything the reports read; each command fills only what it needs.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Services (every type; reports keep the LoadBalancer ones).
    pub services: Vec<Service>,
    /// What each speaker says it announces.
    pub announcements: Vec<ServiceAnnouncement>,
    /// IPAddressPools with the controller's status.
    pub pools: Vec<IpAddressPool>,
    /// BGPPeers.
    pub peers: Vec<BgpPeer>,
    /// Nodes (labels, for the peers' node selectors).
    pub nodes: Vec<Node>,
    /// Pods (readiness gates).
    pub pods: Vec<Pod>,
    /// core/v1 Events (the speakers' Announced / Withdrawn, the controller's).
    pub events: Vec<Event>,
}

/// When an Event last happened: the latest of its timestamps.
pub fn event_time(e: &Event) -> Option<Timestamp> {
    [
        e.series.as_ref().and_then(|s| s.last_observed_time.as_ref()).map(|t| t.0),
        e.event_time.as_ref().map(|t| t.0),
        e.last_timestamp.as_ref().map(|t| t.0),
        e.metadata.creation_timestamp.as_ref().map(|t| t.0),
    ]
    .into_iter()
    .flatten()
    .max()
}

/// Orders Events oldest first (time, then resourceVersion within one second).
pub fn event_order(e: &Event) -> (Option<Timestamp>, u64) {
    let rv = e.metadata.resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
    (event_time(e), rv)
}
