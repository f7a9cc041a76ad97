//! `explain`: why one Service is (not) announced, node by node.

use ferrolb_api::DEFAULT_LOAD_BALANCER_CLASS;
use serde::Serialize;

use super::*;

/// How one node announces a Service.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Announcing {
    /// Node.
    pub node: String,
    /// `BGP` or `L2`.
    pub protocol: String,
    /// Addresses.
    pub addresses: Vec<String>,
    /// BGP: peers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// L2: interfaces.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
}

/// A node that withdrew the Service and has not announced it since, with its reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Withdrawal {
    /// Node (the Event's reporting instance).
    pub node: String,
    /// The speaker's Event message, which carries the planner's reason.
    pub reason: String,
}

/// `explain`: why a Service is or is not announced.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub name: String,
    /// Whether at least one node announces it.
    pub announced: bool,
    /// One line: how it is announced, or the first reason it is not.
    pub summary: String,
    /// `status.loadBalancer.ingress`.
    pub addresses: Vec<String>,
    /// The pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolRef>,
    /// Who announces it, how.
    pub announcing: Vec<Announcing>,
    /// Nodes whose latest Event withdrew it.
    pub withdrawn: Vec<Withdrawal>,
    /// Problems found, most fundamental first.
    pub problems: Vec<String>,
    /// The readiness gate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_gate: Option<GateState>,
    /// The last Events about the Service, oldest first: `[component/instance] Reason: message`.
    pub events: Vec<String>,
}

/// Events `explain` lists at most.
const EXPLAIN_EVENTS: usize = 10;

/// `explain`: None when the snapshot has no Service `namespace/name`.
pub fn explain(snap: &Snapshot, namespace: &str, name: &str) -> Option<Explanation> {
    let svc = snap.services.iter().find(|s| {
        s.metadata.namespace.as_deref() == Some(namespace) && s.metadata.name.as_deref() == Some(name)
    })?;
    let spec = svc.spec.clone().unwrap_or_default();
    let addresses = ingress(svc);
    let pool = pool_of(svc, &snap.pools);
    let mut anns = announcements_of(snap, namespace, name);
    anns.sort_by(|a, b| {
        (&a.spec.node, protocol_name(a.spec.protocol)).cmp(&(&b.spec.node, protocol_name(b.spec.protocol)))
    });
    let announcing: Vec<Announcing> = anns
        .iter()
        .map(|a| Announcing {
            node: a.spec.node.clone(),
            protocol: protocol_name(a.spec.protocol).to_owned(),
            addresses: a.spec.addresses.clone(),
            peers: a.spec.peers.clone(),
            interfaces: a.spec.interfaces.clone(),
        })
        .collect();
    let events = events_of(snap, namespace, name);
    let announcing_nodes: BTreeSet<&str> = announcing.iter().map(|a| a.node.as_str()).collect();
    // The latest speaker Event per node.
    let mut latest: BTreeMap<String, &Event> = BTreeMap::new();
    for e in events.iter().filter(|e| {
        e.reporting_component.as_deref() == Some(SPEAKER)
            || e.source.as_ref().and_then(|s| s.component.as_deref()) == Some(SPEAKER)
    }) {
        let node = e
            .reporting_instance
            .clone()
            .or_else(|| e.source.as_ref().and_then(|s| s.host.clone()))
            .unwrap_or_default();
        latest.insert(node, e);
    }
    let withdrawn: Vec<Withdrawal> = latest
        .into_iter()
        .filter(|(node, e)| {
            e.reason.as_deref() == Some("Withdrawn") && !announcing_nodes.contains(node.as_str())
        })
        .map(|(node, e)| Withdrawal { node, reason: e.message.clone().unwrap_or_default() })
        .collect();

    let mut problems = Vec::new();
    let type_ = spec.type_.clone().unwrap_or_else(|| "ClusterIP".into());
    if type_ != "LoadBalancer" {
        problems.push(format!("spec.type is {type_}: ferrolb serves only type LoadBalancer Services"));
    }
    if let Some(class) = spec.load_balancer_class.as_deref().filter(|c| *c != DEFAULT_LOAD_BALANCER_CLASS) {
        problems.push(format!(
            "spec.loadBalancerClass is {class}: ferrolb serves Services with no class or the controller's \
             --lb-class (default {DEFAULT_LOAD_BALANCER_CLASS}); it ignores this one unless started with --lb-class {class}"
        ));
    }
    if let Some(p) = &pool
        && p.valid != "True"
    {
        let why = p.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
        problems.push(match p.valid.as_str() {
            "NotFound" => format!("IPAddressPool {} (from {}) does not exist", p.name, p.source),
            v => format!("IPAddressPool {} is not Valid (status {v}){why}", p.name),
        });
    }
    if addresses.is_empty() {
        let last_controller = events
            .iter()
            .rev()
            .find(|e| e.reporting_component.as_deref() != Some(SPEAKER))
            .map(|e| format!("; latest Event: {}", reason_line(e)))
            .unwrap_or_default();
        problems.push(format!(
            "no address in status.loadBalancer.ingress: the controller has not assigned one{last_controller}"
        ));
    } else if announcing.is_empty() {
        problems.push(if withdrawn.is_empty() {
            "no node announces it: no ServiceAnnouncement names it and no speaker reported a withdrawal \
             (is a BGPAdvertisement or L2Advertisement selecting its pool, and are the speakers running?)"
                .to_owned()
        } else {
            "no node announces it: every speaker that did has withdrawn it (reasons below)".to_owned()
        });
    }
    let gate = gate_of(snap, svc);
    if let Some(g) = gate.as_ref().filter(|g| g.ready < g.total) {
        problems.push(format!(
            "readiness gate: {} of {} pods not yet ready: {}",
            g.total - g.ready,
            g.total,
            g.pending.join("; ")
        ));
    }
    let summary = if announcing.is_empty() {
        format!("not announced: {}", problems.first().map_or("no reason recorded", String::as_str))
    } else {
        let how: Vec<String> = announcing
            .iter()
            .map(|a| match a.protocol.as_str() {
                "BGP" => format!("{} by BGP to {}", a.node, or_none(&a.peers)),
                _ => format!("{} by L2 on {}", a.node, or_none(&a.interfaces)),
            })
            .collect();
        format!("announced by {} node(s): {}", announcing_nodes.len(), how.join("; "))
    };
    let events = events[events.len().saturating_sub(EXPLAIN_EVENTS)..]
        .iter()
        .map(|e| {
            let who = e.reporting_component.clone().unwrap_or_default();
            let who = match e.reporting_instance.as_deref().filter(|i| !i.is_empty()) {
                Some(i) => format!("{who}/{i}"),
                None => who,
            };
            format!("[{who}] {}", reason_line(e))
        })
        .collect();
    Some(Explanation {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        announced: !announcing.is_empty(),
        summary,
        addresses,
        pool,
        announcing,
        withdrawn,
        problems,
        readiness_gate: gate,
        events,
    })
}
