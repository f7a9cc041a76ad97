//! `plan(model, me, live_members) -> Announcements`: which addresses this node
//! announces, by which protocol, to which peers, with which attributes, and why not.
//!
//! Pure: no I/O, no clock. Every election decision lives here; announcers only converge.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ferrolb_api::{AddressRange, IpAddressPool, selectors_match};
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::election;
use crate::model::{ClusterModel, NodeInfo, ServiceInfo, ServiceKey, TrafficPolicy};

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
}

/// The RFC 8326 GRACEFUL_SHUTDOWN community, 65535:0.
pub const GRACEFUL_SHUTDOWN: u32 = 0xFFFF_0000;

impl RouteAttrs {
    fn merge(&mut self, other: &RouteAttrs) {
        self.communities.extend(other.communities.iter().copied());
        self.large_communities.extend(other.large_communities.iter().copied());
        self.local_pref = match (self.local_pref, other.local_pref) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        // A prefix drains only if every address behind it drains.
        self.draining &= other.draining;
    }
}

/// What this node should announce.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Announcements {
    /// Per BGPPeer this node peers with (present even with no routes): prefix → attributes.
    pub bgp: BTreeMap<String, BTreeMap<IpNet, RouteAttrs>>,
    /// Addresses this node owns for ARP/NDP → interfaces (empty: the default set).
    pub l2: BTreeMap<IpAddr, Vec<String>>,
    /// Every service address this node does not announce, with the reason.
    pub withdrawn: BTreeMap<IpAddr, String>,
    /// Addresses announced by BGP only as draining, with the reason.
    pub draining: BTreeMap<IpAddr, String>,
    /// The BGPPeers of `bgp` that are iBGP (myASN = peerASN).
    pub ibgp: BTreeSet<String>,
}

impl Announcements {
    /// Addresses announced by BGP to at least one peer.
    pub fn bgp_addresses(&self) -> BTreeSet<IpNet> {
        self.bgp.values().flat_map(|r| r.keys().copied()).collect()
    }

    /// Turns the `draining` flag into attributes: GRACEFUL_SHUTDOWN on every peer,
    /// LOCAL_PREF 0 on iBGP peers. Idempotent.
    fn mark_draining(&mut self) {
        for (peer, routes) in &mut self.bgp {
            for a in routes.values_mut().filter(|a| a.draining) {
                a.communities.insert(GRACEFUL_SHUTDOWN);
                if self.ibgp.contains(peer) {
                    a.local_pref = Some(0);
                }
            }
        }
    }

    /// Drains every BGP announcement (SIGTERM): routers move traffic away before the
    /// sessions close.
    pub fn drain_all(&mut self, reason: &str) {
        for routes in self.bgp.values_mut() {
            for a in routes.values_mut() {
                a.draining = true;
            }
        }
        for p in self.bgp_addresses() {
            self.draining.entry(p.addr()).or_insert_with(|| reason.to_owned());
        }
        self.mark_draining();
    }

    /// Withdraws the draining announcements of `expired` addresses (their drain
    /// outlived `--drain-max-delay`): every draining route whose prefix holds one.
    pub fn expire_drains(&mut self, expired: &BTreeSet<IpAddr>, max_delay: std::time::Duration) {
        if expired.is_empty() {
            return;
        }
        for routes in self.bgp.values_mut() {
            routes.retain(|p, a| !(a.draining && expired.iter().any(|ip| p.contains(ip))));
        }
        for ip in expired {
            if let Some(why) = self.draining.remove(ip) {
                self.withdrawn.insert(*ip, format!("{why}; drained for --drain-max-delay {max_delay:?}"));
            }
        }
    }
}

fn pool_selected(
    pool_name: &str,
    pool: &IpAddressPool,
    names: &[String],
    selectors: &[LabelSelector],
) -> bool {
    if names.is_empty() && selectors.is_empty() {
        return true;
    }
    let labels = pool.metadata.labels.clone().unwrap_or_default();
    names.iter().any(|n| n == pool_name) || (!selectors.is_empty() && selectors_match(selectors, &labels))
}

fn pool_contains(pool: &IpAddressPool, ip: IpAddr) -> bool {
    pool.spec.addresses.iter().filter_map(|a| AddressRange::parse(a).ok()).any(|r| r.contains(ip))
}

fn attrs_of(spec: &ferrolb_api::BgpAdvertisementSpec) -> RouteAttrs {
    let mut a = RouteAttrs { local_pref: spec.local_pref, ..RouteAttrs::default() };
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

fn prefix_of(ip: IpAddr, spec: &ferrolb_api::BgpAdvertisementSpec) -> IpNet {
    let len = if ip.is_ipv4() { spec.aggregation_length } else { spec.aggregation_length_v6 };
    u8::try_from(len)
        .ok()
        .and_then(|l| IpNet::new(ip, l).ok())
        .map(|n| n.trunc())
        .unwrap_or_else(|| IpNet::from(ip))
}

/// Why `node` may not announce at all, if it may not.
fn node_blocker(name: &str, node: Option<&NodeInfo>) -> Option<String> {
    match node {
        None => Some(format!("node {name} is not in the model (no Node object)")),
        Some(n) if n.excluded => Some(format!("node {name} carries {}", crate::model::EXCLUDE_LABEL)),
        Some(n) if n.network_unavailable => Some(format!("node {name} has NetworkUnavailable=True")),
        Some(_) => None,
    }
}

/// Computes this node's announcements. `live_members` are the nodes membership sees
/// alive; L2 owners are elected among them only.
pub fn plan(model: &ClusterModel, me: &str, live_members: &BTreeSet<String>) -> Announcements {
    let empty = BTreeMap::new();
    let my_node = model.nodes.get(me);
    let my_labels = my_node.map_or(&empty, |n| &n.labels);
    let mut out = Announcements::default();

    // Sessions: every BGPPeer whose nodeSelectors match this node.
    let my_peers: Vec<(&String, &ferrolb_api::BgpPeer)> =
        model.peers.iter().filter(|(_, p)| selectors_match(&p.spec.node_selectors, my_labels)).collect();
    for (name, p) in &my_peers {
        out.bgp.insert((*name).clone(), BTreeMap::new());
        if p.spec.my_asn == p.spec.peer_asn {
            out.ibgp.insert((*name).clone());
        }
    }
    let node_drain = my_node.and_then(|n| n.draining.clone());

    let blocker = node_blocker(me, my_node);
    let mut announced: BTreeSet<IpAddr> = BTreeSet::new();
    let mut reasons: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();

    for (key, svc) in &model.services {
        let serving = model.serving_nodes(key);
        for &ip in &svc.ingress {
            let pools: Vec<(&String, &IpAddressPool)> =
                model.pools.iter().filter(|(_, p)| pool_contains(p, ip)).collect();
            let mut why: Vec<String> = Vec::new();
            if pools.is_empty() {
                why.push(format!("{key}: {ip} is in no IPAddressPool"));
            }
            let mut any_ad = false;
            let mut done = false;
            if let Some(b) = &blocker {
                why.push(b.clone());
            } else {
                let ctx = Ctx { model, me, key, svc, ip, pools: &pools, serving: &serving };
                let (bgp_ads, bgp_done) = ctx.bgp(&my_peers, node_drain.as_deref(), &mut out, &mut why);
                let (l2_ads, l2_done) = ctx.l2(live_members, &mut out, &mut why);
                any_ad = bgp_ads || l2_ads;
                done = bgp_done || l2_done;
            }
            if done {
                announced.insert(ip);
            } else {
                if !pools.is_empty() && !any_ad && blocker.is_none() {
                    let names: Vec<&str> = pools.iter().map(|(n, _)| n.as_str()).collect();
                    why.push(format!(
                        "{key}: no BGPAdvertisement or L2Advertisement selects pool {} and this service",
                        names.join(", ")
                    ));
                }
                reasons.entry(ip).or_default().extend(why);
            }
        }
    }
    // An address also announced normally (another Service, another advertisement) is not draining.
    let normal: BTreeSet<IpNet> =
        out.bgp.values().flat_map(|r| r.iter().filter(|(_, a)| !a.draining).map(|(p, _)| *p)).collect();
    out.draining.retain(|ip, _| !normal.iter().any(|p| p.contains(ip)));
    out.mark_draining();
    for (ip, why) in reasons {
        if !announced.contains(&ip) {
            let mut why = why;
            why.dedup();
            out.withdrawn.insert(ip, why.join("; "));
        }
    }
    out
}

struct Ctx<'a> {
    model: &'a ClusterModel,
    me: &'a str,
    key: &'a ServiceKey,
    svc: &'a ServiceInfo,
    ip: IpAddr,
    pools: &'a [(&'a String, &'a IpAddressPool)],
    serving: &'a BTreeSet<String>,
}

impl Ctx<'_> {
    fn selects_pool(&self, names: &[String], selectors: &[LabelSelector]) -> bool {
        self.pools.iter().any(|(n, p)| pool_selected(n, p, names, selectors))
    }

    fn local_without_endpoint(&self, node: &str) -> bool {
        self.svc.traffic_policy == TrafficPolicy::Local && !self.serving.contains(node)
    }

    /// Returns (some advertisement applies, announced to at least one peer).
    fn bgp(
        &self,
        my_peers: &[(&String, &ferrolb_api::BgpPeer)],
        node_drain: Option<&str>,
        out: &mut Announcements,
        why: &mut Vec<String>,
    ) -> (bool, bool) {
        let (key, ip) = (self.key, self.ip);
        let mut any = false;
        let mut done = false;
        let my_labels = self.model.nodes.get(self.me).map(|n| n.labels.clone()).unwrap_or_default();
        for (ad_name, ad) in &self.model.bgp_advertisements {
            let s = &ad.spec;
            if !self.selects_pool(&s.ip_address_pools, &s.ip_address_pool_selectors)
                || !selectors_match(&s.service_selectors, &self.svc.labels)
            {
                continue;
            }
            any = true;
            if !selectors_match(&s.node_selectors, &my_labels) {
                why.push(format!("BGPAdvertisement {ad_name} does not select node {}", self.me));
                continue;
            }
            let mine = self.model.endpoints(key).get(self.me).copied().unwrap_or_default();
            // Local: the node's serving endpoints are all terminating: drain, do not withdraw yet.
            let endpoint_drain = self.svc.traffic_policy == TrafficPolicy::Local
                && mine.serving_terminating > 0
                && mine.serving <= mine.serving_terminating;
            if !endpoint_drain && self.local_without_endpoint(self.me) {
                why.push(format!(
                    "{key}: no serving endpoint on node {} (externalTrafficPolicy Local)",
                    self.me
                ));
                continue;
            }
            let drain_reason = node_drain.map(str::to_owned).or_else(|| {
                endpoint_drain
                    .then(|| format!("{key}: every serving endpoint on node {} is terminating", self.me))
            });
            let mut attrs = attrs_of(s);
            attrs.draining = drain_reason.is_some();
            let prefix = prefix_of(ip, s);
            let mut sent = false;
            for (peer_name, peer) in my_peers {
                if !s.peers.is_empty() && !s.peers.iter().any(|p| p == *peer_name) {
                    continue;
                }
                let family_ok = peer.spec.address_families.iter().any(|f| match f {
                    ferrolb_api::AddressFamily::Ipv4Unicast => ip.is_ipv4(),
                    ferrolb_api::AddressFamily::Ipv6Unicast => ip.is_ipv6(),
                });
                if !family_ok {
                    continue;
                }
                let mut a = attrs.clone();
                if peer.spec.my_asn != peer.spec.peer_asn {
                    a.local_pref = None;
                }
                let routes = out.bgp.entry((*peer_name).clone()).or_default();
                routes.entry(prefix).and_modify(|e| e.merge(&a)).or_insert(a);
                sent = true;
            }
            if sent {
                done = true;
                if let Some(r) = drain_reason {
                    out.draining.entry(ip).or_insert(r);
                }
            } else {
                why.push(format!(
                    "BGPAdvertisement {ad_name}: no BGPPeer of node {} is selected (peers, nodeSelectors or addressFamilies)",
                    self.me
                ));
            }
        }
        (any, done)
    }

    /// Returns (some advertisement applies, this node owns the address).
    fn l2(&self, live: &BTreeSet<String>, out: &mut Announcements, why: &mut Vec<String>) -> (bool, bool) {
        let (key, ip) = (self.key, self.ip);
        let mut any = false;
        let mut owned = false;
        for (ad_name, ad) in &self.model.l2_advertisements {
            let s = &ad.spec;
            if !self.selects_pool(&s.ip_address_pools, &s.ip_address_pool_selectors)
                || !selectors_match(&s.service_selectors, &self.svc.labels)
            {
                continue;
            }
            any = true;
            let candidates: Vec<&str> = self
                .model
                .nodes
                .iter()
                .filter(|(name, n)| {
                    selectors_match(&s.node_selectors, &n.labels)
                        && n.ready
                        && !n.excluded
                        && !n.network_unavailable
                        && !self.local_without_endpoint(name)
                        && live.contains(name.as_str())
                })
                .map(|(name, _)| name.as_str())
                .collect();
            match election::owner(ip, candidates) {
                Some(o) if o == self.me => {
                    let ifs = out.l2.entry(ip).or_default();
                    // An empty list means "every interface": it absorbs explicit ones.
                    if s.interfaces.is_empty() || (ifs.is_empty() && owned) {
                        ifs.clear();
                    } else {
                        for i in &s.interfaces {
                            if !ifs.contains(i) {
                                ifs.push(i.clone());
                            }
                        }
                    }
                    owned = true;
                }
                Some(o) => why.push(format!("{key}: L2Advertisement {ad_name}: {ip} is owned by node {o}")),
                None => why.push(format!(
                    "{key}: L2Advertisement {ad_name}: no eligible live node (Ready, selected, not excluded{})",
                    if self.svc.traffic_policy == TrafficPolicy::Local { ", with a serving endpoint" } else { "" }
                )),
            }
        }
        (any, owned)
    }
}

#[cfg(test)]
mod tests;
