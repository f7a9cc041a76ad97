//! What one announced prefix carries: the attributes a BGPAdvertisement asks for, merged
//! over the addresses behind an aggregate, and the drain marking.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ferrolb_api::{BgpAdvertisementSpec, LinkBandwidth};
use ipnet::IpNet;

use crate::model::{EndpointCounts, TrafficPolicy};

/// Attributes of one announced prefix, as the advertisement(s) asked.
#[derive(Debug, Clone, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct RouteAttrs {
    /// RFC 1997 communities as 32-bit values.
    pub communities: BTreeSet<u32>,
    /// RFC 8092 large communities.
    pub large_communities: BTreeSet<(u32, u32, u32)>,
    /// LOCAL_PREF (set for iBGP peers only).
    pub local_pref: Option<u32>,
    /// Draining (make before break): sent with [`GRACEFUL_SHUTDOWN`] and, to iBGP
    /// peers, LOCAL_PREF 0, until it is withdrawn.
    pub draining: bool,
    /// The Link Bandwidth community's rate in bits/s (`linkBandwidth`).
    pub link_bandwidth: Option<u64>,
}

/// The RFC 8326 GRACEFUL_SHUTDOWN community, 65535:0.
pub const GRACEFUL_SHUTDOWN: u32 = 0xFFFF_0000;

impl RouteAttrs {
    /// Folds in the attributes of another address behind the same prefix.
    pub(super) fn merge(&mut self, other: &RouteAttrs) {
        self.communities.extend(other.communities.iter().copied());
        self.large_communities.extend(other.large_communities.iter().copied());
        self.local_pref = match (self.local_pref, other.local_pref) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        // A prefix drains only if every address behind it drains.
        self.draining &= other.draining;
        // An aggregate weighs as much as the addresses behind it.
        self.link_bandwidth = match (self.link_bandwidth, other.link_bandwidth) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
    }

    /// GRACEFUL_SHUTDOWN and, on iBGP, LOCAL_PREF 0 when draining. Idempotent.
    pub(super) fn mark_draining(&mut self, ibgp: bool) {
        if self.draining {
            self.communities.insert(GRACEFUL_SHUTDOWN);
            if ibgp {
                self.local_pref = Some(0);
            }
        }
    }
}

/// The attributes a BGPAdvertisement asks for a Service of `policy` with `mine` (this
/// node's endpoints of it).
pub(super) fn attrs_of(
    spec: &BgpAdvertisementSpec,
    policy: TrafficPolicy,
    mine: &EndpointCounts,
) -> RouteAttrs {
    let mut a = RouteAttrs { local_pref: spec.local_pref, ..RouteAttrs::default() };
    a.link_bandwidth = match spec.link_bandwidth() {
        Ok(Some(LinkBandwidth::Fixed(bits))) => Some(bits),
        // Under Cluster every node forwards to every endpoint: equal weights.
        Ok(Some(LinkBandwidth::Endpoints)) if policy == TrafficPolicy::Local => {
            Some(u64::from(mine.serving).saturating_mul(LinkBandwidth::PER_ENDPOINT))
        }
        _ => None,
    };
    // The validator rejected unparsable communities; skip rather than panic.
    for c in spec.communities.iter().filter_map(|c| c.parse::<ferrolb_api::Community>().ok()) {
        match c {
            ferrolb_api::Community::Standard(asn, v) => {
                a.communities.insert((u32::from(asn) << 16) | u32::from(v));
            }
            ferrolb_api::Community::Large(g, l1, l2) => {
                a.large_communities.insert((g, l1, l2));
            }
        }
    }
    a
}

/// The prefix announced for `ip`: the advertisement's aggregation length.
pub(super) fn prefix_of(ip: IpAddr, spec: &BgpAdvertisementSpec) -> IpNet {
    let len = if ip.is_ipv4() { spec.aggregation_length } else { spec.aggregation_length_v6 };
    u8::try_from(len)
        .ok()
        .and_then(|l| IpNet::new(ip, l).ok())
        .map(|n| n.trunc())
        .unwrap_or_else(|| IpNet::from(ip))
}
