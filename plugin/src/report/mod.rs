//! Pure reports: from a [`Snapshot`] to rows. No I/O here. `explain` (one Service,
//! node by node) has a file of its own.

use std::collections::{BTreeMap, BTreeSet};

use ferrolb_api::{
    ANNOTATION_ADDRESS_POOL, ANNOTATION_IP_ALLOCATED_FROM_POOL, AnnouncementProtocol, IpAddressPool,
    READINESS_GATE_CONDITION, ServiceAnnouncement, service_annotation,
};
use k8s_openapi::api::core::v1::{Event, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;

use crate::snapshot::{Snapshot, event_order};

mod explain;
#[cfg(test)]
mod tests;

pub use explain::{Announcing, Explanation, Withdrawal, explain};

/// What kubectl prints for an empty cell or list.
pub const NONE: &str = "<none>";

/// Reporting component of the speakers' Events.
const SPEAKER: &str = "ferrolb-speaker";

/// One LoadBalancer Service, as `status` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusRow {
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub name: String,
    /// `status.loadBalancer.ingress` addresses.
    pub addresses: Vec<String>,
    /// The pool the controller allocated from, else the one the Service asks for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolRef>,
    /// `BGP` and/or `L2`, from the ServiceAnnouncements.
    pub protocols: Vec<String>,
    /// Nodes announcing the Service.
    pub nodes: Vec<String>,
    /// BGPPeers the addresses are sent to (by any node).
    pub peers: Vec<String>,
    /// Pods backing the Service that carry the readiness gate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_gate: Option<GateState>,
    /// The latest Event about the Service, `Reason: message`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reason: Option<String>,
}

/// A Service's pool and whether it is usable.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRef {
    /// Pool name.
    pub name: String,
    /// Where the name comes from: `allocated` (ferrolb.io/ip-allocated-from-pool) or the
    /// requesting annotation's key.
    pub source: String,
    /// The pool's `Valid` condition status (`True`, `False`, `Unknown`), or `NotFound`.
    pub valid: String,
    /// The `Valid` condition's message when it is not True.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Readiness gate `ferrolb.io/load-balancer-ready` over the pods backing a Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GateState {
    /// Pods whose gate condition is True.
    pub ready: usize,
    /// Pods carrying the gate.
    pub total: usize,
    /// `pod: reason: message` of every pod whose gate is not True.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
}

/// Whether a Service is a LoadBalancer.
fn is_load_balancer(s: &Service) -> bool {
    s.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

fn ns_name(s: &Service) -> (String, String) {
    (s.metadata.namespace.clone().unwrap_or_default(), s.metadata.name.clone().unwrap_or_default())
}

fn ingress(s: &Service) -> Vec<String> {
    s.status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|i| i.iter().filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone())).collect())
        .unwrap_or_default()
}

fn valid_condition(conditions: &[Condition]) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == "Valid")
}

/// The Service's pool: allocated from, else requested.
pub fn pool_of(svc: &Service, pools: &[IpAddressPool]) -> Option<PoolRef> {
    let annotations = svc.metadata.annotations.clone().unwrap_or_default();
    let (name, source) = match annotations.get(ANNOTATION_IP_ALLOCATED_FROM_POOL) {
        Some(p) => (p.clone(), "allocated".to_owned()),
        None => {
            let a = service_annotation(&annotations, ANNOTATION_ADDRESS_POOL)?;
            (a.value.to_owned(), a.key.to_owned())
        }
    };
    let pool = pools.iter().find(|p| p.metadata.name.as_deref() == Some(name.as_str()));
    let cond = pool.and_then(|p| p.status.as_ref()).and_then(|s| valid_condition(&s.conditions));
    let valid = match (pool, cond) {
        (None, _) => "NotFound".to_owned(),
        (Some(_), None) => "Unknown".to_owned(),
        (Some(_), Some(c)) => c.status.clone(),
    };
    let message = cond.filter(|c| c.status != "True").map(|c| c.message.clone()).filter(|m| !m.is_empty());
    Some(PoolRef { name, source, valid, message })
}

fn announcements_of<'a>(snap: &'a Snapshot, ns: &str, name: &str) -> Vec<&'a ServiceAnnouncement> {
    snap.announcements
        .iter()
        .filter(|a| a.spec.service.namespace == ns && a.spec.service.name == name)
        .collect()
}

fn protocol_name(p: AnnouncementProtocol) -> &'static str {
    match p {
        AnnouncementProtocol::Bgp => "BGP",
        AnnouncementProtocol::L2 => "L2",
    }
}

/// Events about a Service, oldest first.
fn events_of<'a>(snap: &'a Snapshot, ns: &str, name: &str) -> Vec<&'a Event> {
    let mut out: Vec<&Event> = snap
        .events
        .iter()
        .filter(|e| {
            let o = &e.involved_object;
            o.kind.as_deref() == Some("Service")
                && o.name.as_deref() == Some(name)
                && o.namespace.as_deref().or(e.metadata.namespace.as_deref()) == Some(ns)
        })
        .collect();
    out.sort_by_key(|e| event_order(e));
    out
}

fn reason_line(e: &Event) -> String {
    let reason = e.reason.clone().unwrap_or_default();
    match e.message.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => format!("{reason}: {m}"),
        None => reason,
    }
}

/// The readiness gate over the pods the Service's selector picks.
pub fn gate_of(snap: &Snapshot, svc: &Service) -> Option<GateState> {
    let (ns, _) = ns_name(svc);
    let selector = svc.spec.as_ref().and_then(|s| s.selector.clone()).filter(|s| !s.is_empty())?;
    let mut state = GateState { ready: 0, total: 0, pending: Vec::new() };
    for pod in &snap.pods {
        if pod.metadata.namespace.as_deref() != Some(ns.as_str()) {
            continue;
        }
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            continue;
        }
        let gated = pod
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.as_ref())
            .is_some_and(|g| g.iter().any(|g| g.condition_type == READINESS_GATE_CONDITION));
        if !gated {
            continue;
        }
        state.total += 1;
        let cond = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == READINESS_GATE_CONDITION));
        match cond {
            Some(c) if c.status == "True" => state.ready += 1,
            Some(c) => state.pending.push(format!(
                "{}: {}: {}",
                pod.metadata.name.as_deref().unwrap_or_default(),
                c.reason.as_deref().unwrap_or("-"),
                c.message.as_deref().unwrap_or("-")
            )),
            None => state
                .pending
                .push(format!("{}: not written yet", pod.metadata.name.as_deref().unwrap_or_default())),
        }
    }
    (state.total > 0).then_some(state)
}

/// `status`: one row per LoadBalancer Service in the snapshot (optionally only `only`),
/// sorted by namespace and name.
pub fn status(snap: &Snapshot, only: Option<&str>) -> Vec<StatusRow> {
    let mut rows: Vec<StatusRow> = snap
        .services
        .iter()
        .filter(|s| is_load_balancer(s))
        .filter(|s| only.is_none_or(|n| s.metadata.name.as_deref() == Some(n)))
        .map(|svc| {
            let (ns, name) = ns_name(svc);
            let anns = announcements_of(snap, &ns, &name);
            let protocols: BTreeSet<&str> = anns.iter().map(|a| protocol_name(a.spec.protocol)).collect();
            let nodes: BTreeSet<String> = anns.iter().map(|a| a.spec.node.clone()).collect();
            let peers: BTreeSet<String> = anns.iter().flat_map(|a| a.spec.peers.iter().cloned()).collect();
            StatusRow {
                addresses: ingress(svc),
                pool: pool_of(svc, &snap.pools),
                protocols: protocols.into_iter().map(String::from).collect(),
                nodes: nodes.into_iter().collect(),
                peers: peers.into_iter().collect(),
                readiness_gate: gate_of(snap, svc),
                last_reason: events_of(snap, &ns, &name).last().map(|e| reason_line(e)),
                namespace: ns,
                name,
            }
        })
        .collect();
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    rows
}

/// One pool and address family, as `pools` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    /// Pool name.
    pub name: String,
    /// `IPv4` or `IPv6`; none when the pool's addresses do not parse and it has no counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub family: Option<String>,
    /// Addresses assigned to Services (controller status), if written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assigned: Option<i64>,
    /// Addresses still free (controller status), if written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available: Option<i64>,
    /// assigned / (assigned + available), as a percentage with one decimal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<String>,
    /// `spec.autoAssign`.
    pub auto_assign: bool,
    /// `Valid` condition status, `Unknown` when the controller has not written it.
    pub valid: String,
    /// `Valid` message when not True.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn usage(assigned: i64, available: i64) -> Option<String> {
    let total = i128::from(assigned) + i128::from(available);
    if total <= 0 {
        return None;
    }
    // Tenths of a percent, in integers: IPv6 totals do not fit an f64 exactly.
    let tenths = i128::from(assigned) * 1000 / total;
    Some(format!("{}.{}%", tenths / 10, tenths % 10))
}

/// `pools`: one row per pool and family it holds (from `spec.addresses`, or from the
/// counts when the spec does not parse), sorted by name then family.
pub fn pools(snap: &Snapshot) -> Vec<PoolRow> {
    let mut rows = Vec::new();
    let mut pools: Vec<&IpAddressPool> = snap.pools.iter().collect();
    pools.sort_by_key(|p| p.metadata.name.clone());
    for p in pools {
        let status = p.status.clone();
        let cond = status.as_ref().and_then(|s| valid_condition(&s.conditions));
        let valid = cond.map_or_else(|| "Unknown".to_owned(), |c| c.status.clone());
        let message = cond.filter(|c| c.status != "True").map(|c| c.message.clone());
        let (v4, v6) = p.spec.capacity().unwrap_or((0, 0));
        let families = [
            ("IPv4", v4, status.as_ref().map(|s| (s.assigned_ipv4, s.available_ipv4))),
            ("IPv6", v6, status.as_ref().map(|s| (s.assigned_ipv6, s.available_ipv6))),
        ];
        let before = rows.len();
        for (family, capacity, counts) in families {
            let counted = counts.is_some_and(|(a, f)| a > 0 || f > 0);
            if capacity == 0 && !counted {
                continue;
            }
            rows.push(PoolRow {
                name: p.metadata.name.clone().unwrap_or_default(),
                family: Some(family.to_owned()),
                assigned: counts.map(|c| c.0),
                available: counts.map(|c| c.1),
                usage: counts.and_then(|(a, f)| usage(a, f)),
                auto_assign: p.spec.auto_assign,
                valid: valid.clone(),
                message: message.clone(),
            });
        }
        // An invalid pool shows too, with what its condition says.
        if rows.len() == before {
            rows.push(PoolRow {
                name: p.metadata.name.clone().unwrap_or_default(),
                family: None,
                assigned: None,
                available: None,
                usage: None,
                auto_assign: p.spec.auto_assign,
                valid: valid.clone(),
                message: message.clone(),
            });
        }
    }
    rows
}

/// One node and BGPPeer, as `peers` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeerRow {
    /// Node.
    pub node: String,
    /// BGPPeer name.
    pub peer: String,
    /// `spec.peerAddress`.
    pub peer_address: String,
    /// `spec.peerASN`.
    #[serde(rename = "peerASN", skip_serializing_if = "Option::is_none")]
    pub peer_asn: Option<u32>,
    /// `spec.dynamicASN`.
    #[serde(rename = "dynamicASN", skip_serializing_if = "Option::is_none")]
    pub dynamic_asn: Option<ferrolb_api::DynamicAsn>,
    /// `spec.bfdProfile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bfd_profile: Option<String>,
    /// The BGPPeer's `Valid` condition status.
    pub valid: String,
    /// Services whose addresses this node sends to this peer (ServiceAnnouncements).
    pub services: usize,
    /// Those addresses.
    pub addresses: Vec<String>,
}

/// What one node sends one peer: Services (namespace, name) and addresses.
type Sent = (BTreeSet<(String, String)>, BTreeSet<String>);

/// What `peers` cannot show, and where it is instead.
pub const PEERS_NOTE: &str = "BGP session state, BFD state and UPDATE/prefix counters are not published in the \
Kubernetes API; each speaker exports them on its /metrics endpoint (ferrolb_bgp_session_up, \
ferrolb_bgp_prefixes_sent_total, ferrolb_bfd_session_up). SERVICES and ADDRESSES are what the \
ServiceAnnouncements say each node sends to each peer.";

/// `peers`: one row per node and BGPPeer that selects it (or that an announcement names),
/// sorted by node then peer.
pub fn peers(snap: &Snapshot) -> Vec<PeerRow> {
    // (node, peer) -> (services, addresses)
    let mut sent: BTreeMap<(String, String), Sent> = BTreeMap::new();
    for a in snap.announcements.iter().filter(|a| a.spec.protocol == AnnouncementProtocol::Bgp) {
        for p in &a.spec.peers {
            let e = sent.entry((a.spec.node.clone(), p.clone())).or_default();
            e.0.insert((a.spec.service.namespace.clone(), a.spec.service.name.clone()));
            e.1.extend(a.spec.addresses.iter().cloned());
        }
    }
    let mut pairs: BTreeSet<(String, String)> = sent.keys().cloned().collect();
    for n in &snap.nodes {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        for p in &snap.peers {
            if ferrolb_api::selectors_match(&p.spec.node_selectors, &labels) {
                pairs.insert((
                    n.metadata.name.clone().unwrap_or_default(),
                    p.metadata.name.clone().unwrap_or_default(),
                ));
            }
        }
    }
    pairs
        .into_iter()
        .map(|(node, peer)| {
            let obj = snap.peers.iter().find(|p| p.metadata.name.as_deref() == Some(peer.as_str()));
            let (services, addresses) = sent.remove(&(node.clone(), peer.clone())).unwrap_or_default();
            PeerRow {
                peer_address: obj.map(|p| p.spec.peer_location()).unwrap_or_default(),
                peer_asn: obj.and_then(|p| p.spec.peer_asn),
                dynamic_asn: obj.and_then(|p| p.spec.dynamic_asn),
                bfd_profile: obj.and_then(|p| p.spec.bfd_profile.clone()),
                valid: match obj {
                    None => "NotFound".to_owned(),
                    Some(p) => p
                        .status
                        .as_ref()
                        .and_then(|s| valid_condition(&s.conditions))
                        .map_or_else(|| "Unknown".to_owned(), |c| c.status.clone()),
                },
                services: services.len(),
                addresses: addresses.into_iter().collect(),
                node,
                peer,
            }
        })
        .collect()
}

/// `a,b` or `<none>`.
pub fn or_none(v: &[String]) -> String {
    if v.is_empty() { NONE.to_owned() } else { v.join(",") }
}
