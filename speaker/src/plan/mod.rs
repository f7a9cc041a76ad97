//! `plan(model, me, live_members) -> Plan`: which addresses this node
//! announces, by which protocol, to which peers, with which attributes, and why not.
//!
//! Pure: no I/O, no clock. Every election decision lives here; announcers only converge.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_api::{AddressRange, IpAddressPool, selectors_match};
use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

pub mod diff;
mod incremental;
mod route;

pub use incremental::Planner;
pub use route::{GRACEFUL_SHUTDOWN, RouteAttrs};
use route::{attrs_of, prefix_of};

use crate::model::{
    Changes, ClusterModel, EndpointCounts, NodeInfo, NodeLabels, ServiceInfo, ServiceKey, TrafficPolicy,
};
use ferrolb_proto::election;
use ferrolb_proto::membership::heartbeat;

/// One BGPPeer's routes: prefix → attributes. A persistent map, so a plan is copied for
/// the cost of a pointer per peer, and the announcer and the status find what changed
/// between two plans by walking the changed nodes only ([`imbl::OrdMap::diff`]).
pub type PeerRoutes = imbl::OrdMap<IpNet, RouteAttrs>;

/// What this node should announce.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Per BGPPeer this node peers with (present even with no routes): prefix → attributes.
    pub bgp: BTreeMap<String, PeerRoutes>,
    /// Addresses this node owns for ARP/NDP → interfaces (empty: the default set).
    pub l2: BTreeMap<IpAddr, Vec<String>>,
    /// Every service address this node does not announce, with the reason.
    pub withdrawn: BTreeMap<IpAddr, String>,
    /// Addresses announced by BGP only as draining, with the reason.
    pub draining: BTreeMap<IpAddr, String>,
    /// The BGPPeers of `bgp` that are iBGP (myASN = peerASN).
    pub ibgp: BTreeSet<String>,
    /// Addresses of `l2` this node answers for only while it hands them over to the
    /// successor (make before break), with the reason.
    pub l2_draining: BTreeMap<IpAddr, String>,
    /// Addresses of `l2` this node owns (not handing over) → the nodes elected next if
    /// it fails: it sends them heartbeats, so they take over in tens of milliseconds
    /// ([`ferrolb_proto::membership::heartbeat`]).
    pub l2_successors: BTreeMap<IpAddr, Vec<String>>,
    /// Addresses an L2Advertisement selects that no node can own: no node it selects is
    /// Ready, live and not excluded. Every node computes the same set; the speakers
    /// export its size (`ferrolb_speaker_l2_unowned_addresses`) for the "no L2 owner"
    /// alert. A Local Service with no serving endpoint anywhere is not counted: that is
    /// the application's state, not the load balancer's.
    pub l2_unowned: BTreeSet<IpAddr>,
    /// Addresses of `l2` served active-active (an L2Advertisement with `mode:
    /// ActiveActive`) → every node serving them, this one included: each keeps the
    /// flows of its buckets ([`ferrolb_proto::l2::active_active`]).
    pub l2_active_active: BTreeMap<IpAddr, Vec<String>>,
}

impl Plan {
    /// The nodes this node sends L2 heartbeats to: the successors of the addresses it
    /// owns and does not hand over, at most [`heartbeat::MAX_TARGETS`] of them (those
    /// of the most addresses).
    pub fn heartbeat_targets(&self) -> BTreeSet<String> {
        heartbeat::targets(
            self.l2_successors.iter().filter(|(ip, _)| !self.l2_draining.contains_key(ip)).map(|(_, s)| s),
        )
    }

    /// Addresses announced by BGP to at least one peer.
    pub fn bgp_addresses(&self) -> BTreeSet<IpNet> {
        self.bgp.values().flat_map(|r| r.keys().copied()).collect()
    }

    /// Stops answering for `expired` addresses handed over to their successor (their
    /// handover grace has passed).
    pub fn expire_l2_handovers(&mut self, expired: &BTreeSet<IpAddr>, grace: std::time::Duration) {
        for ip in expired {
            if let Some(why) = self.l2_draining.remove(ip) {
                self.l2.remove(ip);
                self.l2_successors.remove(ip);
                self.withdrawn.insert(*ip, format!("{why}; handover grace of {grace:?} passed"));
            }
        }
    }

    /// Drains every BGP announcement (SIGTERM): routers move traffic away before the
    /// sessions close.
    pub fn drain_all(&mut self, reason: &str) {
        // Each route marked draining, with its attributes (GRACEFUL_SHUTDOWN, and
        // LOCAL_PREF 0 on iBGP peers), and its address draining: one pass over the routes.
        let Plan { bgp, ibgp, draining, .. } = self;
        for (peer, routes) in bgp {
            let ibgp = ibgp.contains(peer);
            *routes = std::mem::take(routes)
                .into_iter()
                .map(|(p, a)| {
                    draining.entry(p.addr()).or_insert_with(|| reason.to_owned());
                    let mut a = RouteAttrs { draining: true, ..a };
                    a.mark_draining(ibgp);
                    (p, a)
                })
                .collect();
        }
    }

    /// Withdraws the draining announcements of `expired` addresses (their drain
    /// outlived `--drain-max-delay`): every draining route whose prefix holds one.
    pub fn expire_drains(&mut self, expired: &BTreeSet<IpAddr>, max_delay: std::time::Duration) {
        if expired.is_empty() {
            return;
        }
        for routes in self.bgp.values_mut() {
            let gone: Vec<IpNet> = routes
                .iter()
                .filter(|(p, a)| a.draining && expired.iter().any(|ip| p.contains(ip)))
                .map(|(p, _)| *p)
                .collect();
            for p in gone {
                routes.remove(&p);
            }
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
    let empty = BTreeMap::new();
    let labels = pool.metadata.labels.as_ref().unwrap_or(&empty);
    names.iter().any(|n| n == pool_name) || (!selectors.is_empty() && selectors_match(selectors, labels))
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

/// No member suspected: plans made without heartbeats.
static NOBODY: BTreeSet<String> = BTreeSet::new();

/// Computes this node's announcements from scratch. `live_members` are the nodes
/// membership sees alive; L2 owners are elected among them only. [`Planner`] gives the
/// same result recomputing only what changed.
pub fn plan(model: &ClusterModel, me: &str, live_members: &BTreeSet<String>) -> Plan {
    let mut p = Planner::new();
    p.update(model, Changes::default(), me, live_members, &NOBODY);
    p.into_announcements()
}

/// What the whole node contributes, the same for every Service.
struct Globals<'a> {
    me: &'a str,
    my_labels: &'a NodeLabels,
    /// BGPPeers whose nodeSelectors match this node, their names shared by every route.
    my_peers: Vec<(Arc<str>, &'a ferrolb_api::BgpPeer)>,
    /// Every IPAddressPool with its ranges, parsed once per plan rather than per address.
    pools: Vec<(&'a String, &'a IpAddressPool, Vec<AddressRange>)>,
    /// Why this node announces nothing at all, if so.
    blocker: Option<String>,
    /// Why this node drains every BGP announcement, if so.
    node_drain: Option<String>,
    live: &'a BTreeSet<String>,
    /// Members of `live` whose L2 heartbeats stopped: what this node alone hears (it
    /// watches only the owners whose successor it is). A single-owner election leaves
    /// them out, so the successor takes over within tens of milliseconds and gives the
    /// address back as soon as the beats resume. An active-active spread does not: every
    /// node must agree on it, or a bucket has two owners and both answer a new flow's
    /// SYN (the client resets the connection). It waits for SWIM, which every node hears
    /// alike; a dead node's new flows lose nothing by it (a client sends its SYN again
    /// after a second, well after SWIM's few hundred milliseconds).
    suspected: &'a BTreeSet<String>,
}

impl<'a> Globals<'a> {
    fn of(
        model: &'a ClusterModel,
        me: &'a str,
        (live, suspected): (&'a BTreeSet<String>, &'a BTreeSet<String>),
        empty: &'a NodeLabels,
    ) -> Self {
        let my_node = model.nodes.get(me);
        let my_labels = my_node.map_or(empty, |n| &n.labels);
        let my_peers = model
            .peers
            .iter()
            .filter(|(_, p)| selectors_match(&p.spec.node_selectors, my_labels))
            .map(|(name, p)| (Arc::from(name.as_str()), p))
            .collect();
        // The validator rejected unparsable ranges; skip rather than panic.
        let pools = model
            .pools
            .iter()
            .map(|(name, p)| {
                (name, p, p.spec.addresses.iter().filter_map(|a| AddressRange::parse(a).ok()).collect())
            })
            .collect();
        Globals {
            me,
            my_labels,
            my_peers,
            pools,
            blocker: node_blocker(me, my_node),
            node_drain: my_node.and_then(|n| n.draining.clone()),
            live,
            suspected,
        }
    }

    /// Every session this node has (present even with no routes), and which are iBGP.
    fn sessions(&self, out: &mut Plan) {
        for (name, p) in &self.my_peers {
            out.bgp.insert(name.to_string(), PeerRoutes::new());
            if p.spec.is_ibgp() {
                out.ibgp.insert(name.to_string());
            }
        }
    }
}

/// L2 interfaces asked for an address; empty means every interface and absorbs the rest.
fn merge_interfaces(into: &mut Vec<String>, from: &[String]) {
    if into.is_empty() || from.is_empty() {
        into.clear();
    } else {
        for i in from {
            if !into.contains(i) {
                into.push(i.clone());
            }
        }
    }
}

/// What one (Service, address) pair yields.
#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    ip: IpAddr,
    /// Announced by BGP to some peer, or answered for by L2.
    done: bool,
    /// Why not, when not done.
    why: Vec<String>,
    /// Announced by BGP only as draining, and why (the first reason).
    draining: Option<String>,
    /// Owned for ARP/NDP, on these interfaces (empty: all).
    l2: Option<Vec<String>>,
    /// Answered for ARP/NDP only while handing over to the successor, on these interfaces, and why.
    l2_handover: Option<(Vec<String>, String)>,
    /// Owned for ARP/NDP: the nodes elected next if this one fails (one per
    /// L2Advertisement that elects it), which it sends heartbeats to.
    l2_successors: Vec<String>,
    /// Some L2Advertisement selects the address and none has a node that could own it.
    l2_unowned: bool,
    /// Served active-active by these nodes, this one among them.
    l2_active_active: Option<Vec<String>>,
}

/// What one Service contributes to the plan.
#[derive(Debug, Clone, Default, PartialEq)]
struct Fragment {
    /// One per ingress address, in order.
    outcomes: Vec<Outcome>,
    /// BGP routes before merging: (peer, prefix, attributes).
    routes: Vec<(Arc<str>, IpNet, RouteAttrs)>,
}

/// Computes what Service `key` contributes.
fn fragment(model: &ClusterModel, g: &Globals<'_>, key: &ServiceKey, svc: &ServiceInfo) -> Fragment {
    let eps = model.endpoints(key);
    let serving = crate::model::serving_among(&eps);
    let mine = eps.get(g.me).copied().unwrap_or_default();
    let mut f = Fragment {
        outcomes: Vec::with_capacity(svc.ingress.len()),
        routes: Vec::with_capacity(svc.ingress.len() * g.my_peers.len()),
    };
    for &ip in &svc.ingress {
        let pools: Vec<(&String, &IpAddressPool)> = g
            .pools
            .iter()
            .filter(|(_, _, ranges)| ranges.iter().any(|r| r.contains(ip)))
            .map(|(name, p, _)| (*name, *p))
            .collect();
        let mut o = Outcome {
            ip,
            done: false,
            why: Vec::new(),
            draining: None,
            l2: None,
            l2_handover: None,
            l2_successors: Vec::new(),
            l2_unowned: false,
            l2_active_active: None,
        };
        if pools.is_empty() {
            o.why.push(format!("{key}: {ip} is in no IPAddressPool"));
        }
        let mut any_ad = false;
        if let Some(b) = &g.blocker {
            o.why.push(b.clone());
        } else {
            let ctx = Ctx { model, g, key, svc, ip, pools: &pools, serving: &serving, mine };
            let (bgp_ads, bgp_done) = ctx.bgp(&mut f.routes, &mut o);
            let (l2_ads, l2_done) = ctx.l2(&mut o);
            any_ad = bgp_ads || l2_ads;
            o.done = bgp_done || l2_done;
        }
        if o.done {
            o.why.clear();
        } else if !pools.is_empty() && !any_ad && g.blocker.is_none() {
            let names: Vec<&str> = pools.iter().map(|(n, _)| n.as_str()).collect();
            o.why.push(format!(
                "{key}: no BGPAdvertisement or L2Advertisement selects pool {} and this service",
                names.join(", ")
            ));
        }
        f.outcomes.push(o);
    }
    // Kept for as long as the Service is: a pushed Vec holds room for 4 (576 and 448
    // bytes for the usual one address and one route, 10 MB with 10k Services, dhat).
    if f.routes.capacity() > f.routes.len() {
        f.routes.shrink_to_fit();
    }
    f
}

struct Ctx<'a> {
    model: &'a ClusterModel,
    g: &'a Globals<'a>,
    key: &'a ServiceKey,
    svc: &'a ServiceInfo,
    ip: IpAddr,
    pools: &'a [(&'a String, &'a IpAddressPool)],
    serving: &'a BTreeSet<String>,
    /// This node's endpoints of the Service.
    mine: EndpointCounts,
}

impl Ctx<'_> {
    fn selects_pool(&self, names: &[String], selectors: &[LabelSelector]) -> bool {
        self.pools.iter().any(|(n, p)| pool_selected(n, p, names, selectors))
    }

    fn local_without_endpoint(&self, node: &str) -> bool {
        self.svc.traffic_policy == TrafficPolicy::Local && !self.serving.contains(node)
    }

    /// Local: this node's serving endpoints are all terminating (make before break).
    fn endpoints_terminating(&self) -> bool {
        self.svc.traffic_policy == TrafficPolicy::Local
            && self.mine.serving_terminating > 0
            && self.mine.serving <= self.mine.serving_terminating
    }

    /// Returns (some advertisement applies, announced to at least one peer).
    fn bgp(&self, routes: &mut Vec<(Arc<str>, IpNet, RouteAttrs)>, o: &mut Outcome) -> (bool, bool) {
        let (key, ip, me) = (self.key, self.ip, self.g.me);
        let mut any = false;
        let mut done = false;
        for (ad_name, ad) in &self.model.bgp_advertisements {
            let s = &ad.spec;
            if !self.selects_pool(&s.ip_address_pools, &s.ip_address_pool_selectors)
                || !selectors_match(&s.service_selectors, &self.svc.labels)
            {
                continue;
            }
            any = true;
            if !selectors_match(&s.node_selectors, self.g.my_labels) {
                o.why.push(format!("BGPAdvertisement {ad_name} does not select node {me}"));
                continue;
            }
            // Local: the node's serving endpoints are all terminating: drain, do not withdraw yet.
            let endpoint_drain = self.endpoints_terminating();
            if !endpoint_drain && self.local_without_endpoint(me) {
                o.why.push(format!("{key}: no serving endpoint on node {me} (externalTrafficPolicy Local)"));
                continue;
            }
            let drain_reason = self.g.node_drain.clone().or_else(|| {
                endpoint_drain.then(|| format!("{key}: every serving endpoint on node {me} is terminating"))
            });
            let mut attrs = attrs_of(s, self.svc.traffic_policy, &self.mine);
            attrs.draining = drain_reason.is_some();
            let prefix = prefix_of(ip, s);
            let mut sent = false;
            for (peer_name, peer) in &self.g.my_peers {
                if !s.peers.is_empty() && !s.peers.iter().any(|p| **p == **peer_name) {
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
                if !peer.spec.is_ibgp() {
                    a.local_pref = None;
                }
                routes.push((peer_name.clone(), prefix, a));
                sent = true;
            }
            if sent {
                done = true;
                if o.draining.is_none() {
                    o.draining = drain_reason;
                }
            } else {
                o.why.push(format!(
                    "BGPAdvertisement {ad_name}: no BGPPeer of node {me} is selected (peers, nodeSelectors or addressFamilies)"
                ));
            }
        }
        (any, done)
    }

    /// Returns (some advertisement applies, this node answers for the address).
    fn l2(&self, o: &mut Outcome) -> (bool, bool) {
        let (key, ip, me) = (self.key, self.ip, self.g.me);
        let mut any = false;
        // Whether some advertisement has a node that could own the address, endpoints aside.
        let mut ownable = false;
        for (ad_name, ad) in &self.model.l2_advertisements {
            let s = &ad.spec;
            if !self.selects_pool(&s.ip_address_pools, &s.ip_address_pool_selectors)
                || !selectors_match(&s.service_selectors, &self.svc.labels)
            {
                continue;
            }
            any = true;
            let active_active = s.mode == ferrolb_api::L2Mode::ActiveActive;
            let eligible = |name: &str, n: &NodeInfo| {
                selectors_match(&s.node_selectors, &n.labels)
                    && n.ready
                    && !n.excluded
                    && !n.network_unavailable
                    && self.g.live.contains(name)
                    && (active_active || !self.g.suspected.contains(name))
            };
            // Each candidate with its preference (spec.nodePreferences; 0 when none is set).
            let mut candidates: Vec<(&str, u32)> = Vec::new();
            for (name, n) in self.model.nodes.iter().filter(|(name, n)| eligible(name, n)) {
                ownable = true;
                if !self.local_without_endpoint(name) {
                    candidates.push((name, s.preference(&n.labels)));
                }
            }
            if active_active {
                // Every candidate of the highest preference serves it; a node that stops
                // being one drains its buckets.
                let top = candidates.iter().map(|c| c.1).max();
                let candidates: Vec<&str> =
                    candidates.iter().filter(|c| Some(c.1) == top).map(|c| c.0).collect();
                if candidates.contains(&me) {
                    merge_interfaces(o.l2.get_or_insert_with(|| s.interfaces.clone()), &s.interfaces);
                    let nodes = o.l2_active_active.get_or_insert_with(Vec::new);
                    nodes.extend(candidates.iter().map(|c| c.to_string()));
                    nodes.sort();
                    nodes.dedup();
                } else {
                    o.why.push(format!("{key}: L2Advertisement {ad_name}: {ip} is served active-active by {} node(s), not by node {me}", candidates.len()));
                }
                continue;
            }
            let owner = election::preferred_owner(ip, candidates.iter().copied());
            if owner == Some(me) {
                merge_interfaces(o.l2.get_or_insert_with(|| s.interfaces.clone()), &s.interfaces);
                let successor =
                    election::preferred_owner(ip, candidates.iter().copied().filter(|c| c.0 != me));
                if let Some(next) = successor.filter(|n| !o.l2_successors.iter().any(|s| s == n)) {
                    o.l2_successors.push(next.to_owned());
                }
                continue;
            }
            // Make before break: the owner whose last serving endpoints turn terminating
            // leaves the candidates (every node elects the same successor, who announces)
            // but keeps answering during the handover grace.
            let was_owner = self.endpoints_terminating()
                && self.model.nodes.get(me).is_some_and(|n| {
                    eligible(me, n)
                        && election::preferred_owner(
                            ip,
                            candidates.iter().copied().chain([(me, s.preference(&n.labels))]),
                        ) == Some(me)
                });
            match (was_owner, owner) {
                // No live node can take over: keep serving rather than break.
                (true, None) => {
                    merge_interfaces(o.l2.get_or_insert_with(|| s.interfaces.clone()), &s.interfaces);
                    continue;
                }
                (true, Some(to)) => {
                    let (ifs, _) = o.l2_handover.get_or_insert_with(|| {
                        let why = format!(
                            "{key}: every serving endpoint on node {me} is terminating: handing {ip} over to node {to}"
                        );
                        (s.interfaces.clone(), why)
                    });
                    merge_interfaces(ifs, &s.interfaces);
                }
                (false, _) => {}
            }
            match owner {
                Some(o2) => o.why.push(format!("{key}: L2Advertisement {ad_name}: {ip} is owned by node {o2}")),
                None => o.why.push(format!(
                    "{key}: L2Advertisement {ad_name}: no eligible live node (Ready, selected, not excluded{})",
                    if self.svc.traffic_policy == TrafficPolicy::Local { ", with a serving endpoint" } else { "" }
                )),
            }
        }
        o.l2_unowned = any && !ownable;
        (any, o.l2.is_some() || o.l2_handover.is_some())
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_incremental;
