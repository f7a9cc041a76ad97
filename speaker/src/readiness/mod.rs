//! Pod readiness gate `ferrolb.io/load-balancer-ready` (API.md).
//!
//! A pod that lists the gate in `spec.readinessGates` gets the condition True only once
//! traffic can reach it through the load balancer: every address of every ferrolb
//! Service it backs is really announced — by its own node for `externalTrafficPolicy:
//! Local`, by any node for `Cluster` — where "really" means the BGP UPDATE was written
//! to an Established session or the L2 owner sent its gratuitous ARP / unsolicited NA
//! ([`crate::announce::Announced`]). It turns False, with a reason and a message, when
//! that stops being true. The speaker of the pod's node writes it; pods without the
//! gate are never written to.
//!
//! Pieces, wired by the speaker's event loop:
//! * [`GatedPod::from_pod`] and [`desired`]: pure, from the node's gated pods, the
//!   [`ClusterModel`], the plan and the really-announced state to each pod's condition.
//! * [`apply_gate_pending`]: the Local chicken-and-egg (below), applied to the model
//!   before planning.
//! * [`keep_true`]: the startup hold of a restarted speaker (README-readiness.md).
//! * [`crate::cluster::pod_conditions`]: the Kubernetes I/O, `PodConditions` (this node's pods,
//!   field selector `spec.nodeName`, and their `pods/status` patches) and
//!   `RemoteWatch` (the other nodes' ServiceAnnouncements, for Cluster Services).
//!
//! The speaker's Kubernetes mode (`run/parts/gate.rs`, `GatePart`) wires them: pods and
//! ServiceAnnouncements watched, [`apply_gate_pending`] before every plan, [`desired_all`]
//! after every plan and every change of [`Announced`] or of the remote view.
//!
//! ## The Local chicken-and-egg
//!
//! A pod whose only unmet readiness condition is this gate is not Ready, so its
//! EndpointSlice endpoint is neither `ready` nor `serving`; a Local Service is announced
//! only by nodes with a serving endpoint, so the node would never announce it and the
//! gate could never turn True. The speaker therefore counts, for its own node only,
//! every endpoint whose pod carries the gate, has ContainersReady=True and every other
//! readiness gate True, and is not terminating, as ready and serving when planning
//! ([`ClusterModel::gate_pending`]). It keeps counting it after the gate turned True
//! until the EndpointSlice shows it ready, so the announcement never flaps in between.
//! The cost: for the moments between the announcement and kube-proxy seeing the pod
//! Ready (the gate patch, the kubelet's status update, the EndpointSlice update), this
//! node attracts traffic for a Service whose only local endpoint kube-proxy does not
//! forward to yet. Other nodes are unaffected, and without this rule the gate could
//! never be used with Local Services at all.
//!
//! The rule applies to Local Services announced by BGP only, where each node decides
//! for itself. An L2 owner is elected by every node from the EndpointSlices, and a count
//! that only the pod's node can see would make two nodes claim the same address. So a
//! Local Service that an L2Advertisement selects is not helped: its gated pods turn
//! True only on the node that owns the address by the endpoints everyone sees, and a
//! Local L2 Service whose every pod waits for the gate stays unannounced (its pods
//! show NotAnnounced with the election's reason). Use Cluster, or BGP, for such
//! Services.
//!
//! ## Cluster Services announced elsewhere
//!
//! With `Cluster`, traffic reaches the pod through any node, so an announcement by
//! another node counts. This node learns those from [`RemoteAnnounced`] (built from the
//! other speakers' ServiceAnnouncements, [`RemoteAnnounced::from_service_announcements`]);
//! those are as good as what the other speakers write into them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use ferrolb_api::ServiceAnnouncement;
use k8s_openapi::api::core::v1::Pod;

use crate::announce::Announced;
use crate::model::{ClusterModel, ServiceKey, TrafficPolicy, endpoint_refs};
use crate::plan::Plan;

/// The readiness gate's condition type (API.md).
pub const CONDITION_TYPE: &str = "ferrolb.io/load-balancer-ready";

/// Condition reasons.
pub mod reason {
    /// True: every address of every Service the pod backs is announced.
    pub const ANNOUNCED: &str = "Announced";
    /// True: the pod backs no LoadBalancer Service ferrolb serves; nothing to wait for.
    pub const NO_LOAD_BALANCER_SERVICE: &str = "NoLoadBalancerService";
    /// False: a Service the pod backs has no load-balancer address yet.
    pub const ADDRESS_PENDING: &str = "AddressPending";
    /// False: this node plans the announcement but has not sent it yet.
    pub const ANNOUNCEMENT_PENDING: &str = "AnnouncementPending";
    /// False: the address is not announced (where it would have to be).
    pub const NOT_ANNOUNCED: &str = "NotAnnounced";
}

/// Longest condition message written (the API allows 32768 bytes).
const MAX_MESSAGE: usize = 1024;

/// `namespace/name` of a Pod.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PodKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl fmt::Display for PodKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The gate's condition, as it is or as it should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateCondition {
    /// `status` True / False.
    pub status: bool,
    /// `reason` (one of [`reason`]).
    pub reason: String,
    /// `message`.
    pub message: String,
}

impl GateCondition {
    fn new(status: bool, reason: &str, message: String) -> Self {
        let mut message = message;
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE - 3;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str("...");
        }
        GateCondition { status, reason: reason.to_owned(), message }
    }
}

/// What the gate logic needs of a pod that carries the gate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GatedPod {
    /// Namespace and name.
    pub key: PodKey,
    /// `spec.nodeName`.
    pub node: String,
    /// `status.podIPs` (or `status.podIP`).
    pub ips: Vec<IpAddr>,
    /// Labels, for Service selectors.
    pub labels: BTreeMap<String, String>,
    /// Condition ContainersReady is True.
    pub containers_ready: bool,
    /// Every other readiness gate's condition is True.
    pub other_gates_ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// The gate's condition as the pod has it.
    pub current: Option<GateCondition>,
}

impl GatedPod {
    /// The pod's view, or None when it does not list the gate in `spec.readinessGates`.
    pub fn from_pod(pod: &Pod) -> Option<GatedPod> {
        let spec = pod.spec.as_ref()?;
        let gates = spec.readiness_gates.as_deref().unwrap_or_default();
        if !gates.iter().any(|g| g.condition_type == CONDITION_TYPE) {
            return None;
        }
        let status = pod.status.as_ref();
        let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
        let is_true = |t: &str| conditions.iter().any(|c| c.type_ == t && c.status == "True");
        let mut ips: Vec<IpAddr> = status
            .and_then(|s| s.pod_ips.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|p| p.ip.parse().ok())
            .collect();
        if let Some(ip) = status.and_then(|s| s.pod_ip.as_deref()).and_then(|s| s.parse().ok())
            && !ips.contains(&ip)
        {
            ips.push(ip);
        }
        let current = conditions.iter().find(|c| c.type_ == CONDITION_TYPE).map(|c| GateCondition {
            status: c.status == "True",
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        });
        Some(GatedPod {
            key: PodKey {
                namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
                name: pod.metadata.name.clone().unwrap_or_default(),
            },
            node: spec.node_name.clone().unwrap_or_default(),
            ips,
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            containers_ready: is_true("ContainersReady"),
            other_gates_ready: gates
                .iter()
                .filter(|g| g.condition_type != CONDITION_TYPE)
                .all(|g| is_true(&g.condition_type)),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            current,
        })
    }

    /// Ready but for this gate: it would serve if the gate were True.
    fn only_gate_pending(&self) -> bool {
        self.containers_ready && self.other_gates_ready && !self.terminating
    }
}

/// Addresses other nodes announce, with the announcing nodes (for Cluster Services).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteAnnounced {
    /// Address → nodes announcing it.
    pub addresses: BTreeMap<IpAddr, BTreeSet<String>>,
}

impl RemoteAnnounced {
    /// From the speakers' ServiceAnnouncements, leaving out this node's own.
    pub fn from_service_announcements<'a>(
        items: impl IntoIterator<Item = &'a ServiceAnnouncement>,
        me: &str,
    ) -> Self {
        let mut out = RemoteAnnounced::default();
        for a in items.into_iter().filter(|a| a.spec.node != me) {
            for ip in a.spec.addresses.iter().filter_map(|s| s.parse::<IpAddr>().ok()) {
                out.addresses.entry(ip).or_default().insert(a.spec.node.clone());
            }
        }
        out
    }
}

/// Everything [`desired`] reads besides the pod.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The model (with [`apply_gate_pending`] applied).
    pub model: &'a ClusterModel,
    /// This node's name.
    pub me: &'a str,
    /// This node's plan (for "planned, not sent yet" and withdrawal reasons).
    pub plan: &'a Plan,
    /// What this node really announces.
    pub announced: &'a Announced,
    /// What other nodes announce.
    pub remote: &'a RemoteAnnounced,
}

/// Gated pods indexed by what EndpointSlices and selectors refer to them by.
struct PodIndex<'p> {
    pods: Vec<&'p GatedPod>,
    by_name: BTreeMap<(&'p str, &'p str), usize>,
    by_ip: BTreeMap<(&'p str, IpAddr), usize>,
    by_label: BTreeMap<(&'p str, &'p str, &'p str), Vec<usize>>,
}

impl<'p> PodIndex<'p> {
    fn new(pods: impl IntoIterator<Item = &'p GatedPod>) -> Self {
        let mut idx = PodIndex {
            pods: Vec::new(),
            by_name: BTreeMap::new(),
            by_ip: BTreeMap::new(),
            by_label: BTreeMap::new(),
        };
        for (i, p) in pods.into_iter().enumerate() {
            let ns = p.key.namespace.as_str();
            idx.pods.push(p);
            idx.by_name.insert((ns, p.key.name.as_str()), i);
            for ip in &p.ips {
                idx.by_ip.insert((ns, *ip), i);
            }
            for (k, v) in &p.labels {
                idx.by_label.entry((ns, k.as_str(), v.as_str())).or_default().push(i);
            }
        }
        idx
    }

    fn namespaces(&self) -> BTreeSet<&'p str> {
        self.pods.iter().map(|p| p.key.namespace.as_str()).collect()
    }

    /// The pod an endpoint of a slice in `ns` refers to: by `targetRef`, else by address.
    fn endpoint_pod(&self, ns: &str, ep: &crate::model::EndpointRef) -> Option<usize> {
        match &ep.pod {
            Some(name) => self.by_name.get(&(ns, &**name)).copied(),
            None => ep.addresses.iter().find_map(|a| self.by_ip.get(&(ns, *a)).copied()),
        }
    }

    /// For each pod (by position), the served Services it backs: selected by their
    /// `spec.selector` (so a pod counts before the EndpointSlice lists it), or listed in
    /// one of their EndpointSlices by `targetRef` or, without one, by address.
    fn backing<'m>(&self, model: &'m ClusterModel) -> Vec<BTreeSet<&'m ServiceKey>> {
        let mut out: Vec<BTreeSet<&'m ServiceKey>> = vec![BTreeSet::new(); self.pods.len()];
        for ns in self.namespaces() {
            for (key, slices) in in_namespace(&model.endpoint_slices, ns) {
                if !model.services.contains_key(key) {
                    continue;
                }
                for i in endpoint_refs(slices).filter_map(|ep| self.endpoint_pod(ns, ep)) {
                    if let Some(set) = out.get_mut(i) {
                        set.insert(key);
                    }
                }
            }
            for (key, sel) in in_namespace(&model.service_selectors, ns) {
                // Candidates carry the selector's first label; then the whole selector must match.
                let Some((k, v)) = sel.iter().next() else { continue };
                for &i in self.by_label.get(&(ns, k, v)).into_iter().flatten() {
                    let matches = self.pods.get(i).is_some_and(|p| sel.matches(&p.labels));
                    if matches && let Some(set) = out.get_mut(i) {
                        set.insert(key);
                    }
                }
            }
        }
        out
    }
}

/// The served Services `pod` backs: selected by their `spec.selector` (so a pod counts
/// before the EndpointSlice lists it), or listed in one of their EndpointSlices by
/// `targetRef` or, for endpoints without one, by address.
pub fn services_of<'m>(pod: &GatedPod, model: &'m ClusterModel) -> Vec<&'m ServiceKey> {
    PodIndex::new([pod]).backing(model).into_iter().flatten().collect()
}

/// The entries of a map keyed by Service that lie in `namespace` (keys sort by namespace first).
fn in_namespace<'m, V>(
    map: &'m BTreeMap<ServiceKey, V>,
    namespace: &str,
) -> impl Iterator<Item = (&'m ServiceKey, &'m V)> {
    map.range(ServiceKey { namespace: namespace.into(), name: "".into() }..)
        .take_while(move |(k, _)| *k.namespace == *namespace)
}

/// The endpoints of this node that wait only for the gate, per Service: what
/// [`ClusterModel::gate_pending`] should hold (see the module docs). Only Local
/// Services need it (Cluster ones are announced without endpoints), and only those no
/// L2Advertisement selects: an L2 owner is elected by every node from the same
/// endpoints, and a count only this node can see would let two nodes claim an address.
pub fn gate_pending(
    pods: &[GatedPod],
    model: &ClusterModel,
    me: &str,
) -> BTreeMap<ServiceKey, BTreeMap<String, u32>> {
    let waiting: Vec<&GatedPod> = pods.iter().filter(|p| p.node == me && p.only_gate_pending()).collect();
    let mut out: BTreeMap<ServiceKey, BTreeMap<String, u32>> = BTreeMap::new();
    if waiting.is_empty() {
        return out;
    }
    let idx = PodIndex::new(waiting);
    for ns in idx.namespaces() {
        for (key, slices) in in_namespace(&model.endpoint_slices, ns) {
            let local = model.services.get(key).is_some_and(|s| s.traffic_policy == TrafficPolicy::Local);
            if !local || model.l2_selects(key) {
                continue;
            }
            let n = endpoint_refs(slices)
                .filter(|ep| !ep.ready && !ep.terminating && ep.node.as_deref() == Some(me))
                .filter(|ep| idx.endpoint_pod(ns, ep).is_some())
                .count();
            if let Ok(n @ 1..) = u32::try_from(n) {
                out.entry(key.clone()).or_default().insert(me.to_owned(), n);
            }
        }
    }
    out
}

/// Sets [`ClusterModel::gate_pending`] from this node's gated pods; returns the
/// Services whose count changed (their plan must be recomputed; empty: nothing to do).
pub fn apply_gate_pending(model: &mut ClusterModel, pods: &[GatedPod], me: &str) -> BTreeSet<ServiceKey> {
    let new = gate_pending(pods, model, me);
    let changed: BTreeSet<ServiceKey> = model
        .gate_pending
        .keys()
        .chain(new.keys())
        .filter(|k| model.gate_pending.get(*k) != new.get(*k))
        .cloned()
        .collect();
    if !changed.is_empty() {
        model.gate_pending = new;
        for k in &changed {
            model.mark(k);
        }
    }
    changed
}

/// Why one address falls short.
struct Unmet {
    reason: &'static str,
    message: String,
}

/// How `ip` is announced, for the True message; None when it is not (where it must be).
fn reached(ip: IpAddr, local: bool, inputs: &Inputs<'_>) -> Option<String> {
    let mut how = Vec::new();
    let peers = inputs.announced.bgp_peers(ip);
    if !peers.is_empty() {
        how.push(format!("by BGP to {}", peers.into_iter().collect::<Vec<_>>().join(", ")));
    }
    if inputs.announced.l2.contains(&ip) {
        how.push("by ARP/NDP".to_owned());
    }
    if !how.is_empty() {
        return Some(format!("{ip} announced by node {} {}", inputs.me, how.join(" and ")));
    }
    if !local && let Some(nodes) = inputs.remote.addresses.get(&ip).filter(|n| !n.is_empty()) {
        let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
        return Some(format!("{ip} announced by node {}", nodes.join(", ")));
    }
    None
}

fn unmet(key: &ServiceKey, ip: IpAddr, local: bool, inputs: &Inputs<'_>) -> Unmet {
    let me = inputs.me;
    let plan = inputs.plan;
    let planned =
        plan.l2.contains_key(&ip) || plan.bgp.values().flat_map(|r| r.keys()).any(|p| p.contains(&ip));
    if planned {
        let what = if plan.l2.contains_key(&ip) {
            "its first gratuitous ARP/NDP announcement"
        } else {
            "its BGP UPDATE on an Established session"
        };
        return Unmet {
            reason: reason::ANNOUNCEMENT_PENDING,
            message: format!("{key}: {ip}: node {me} announces it but has not sent {what} yet"),
        };
    }
    let scope = if local {
        format!("by node {me} (externalTrafficPolicy Local: only the pod's node can bring it traffic)")
    } else {
        "by any node".to_owned()
    };
    let why = plan.withdrawn.get(&ip).map(|w| format!("; node {me}: {w}")).unwrap_or_default();
    Unmet { reason: reason::NOT_ANNOUNCED, message: format!("{key}: {ip} is not announced {scope}{why}") }
}

/// The condition `pod` should have.
pub fn desired(pod: &GatedPod, inputs: &Inputs<'_>) -> GateCondition {
    desired_for(&services_of(pod, inputs.model), inputs)
}

/// The condition for a pod backing `services`.
fn desired_for(services: &[&ServiceKey], inputs: &Inputs<'_>) -> GateCondition {
    if services.is_empty() {
        return GateCondition::new(
            true,
            reason::NO_LOAD_BALANCER_SERVICE,
            "the pod backs no LoadBalancer Service that ferrolb serves".to_owned(),
        );
    }
    let mut unmet_list: Vec<Unmet> = Vec::new();
    let mut reached_list: Vec<String> = Vec::new();
    for key in services {
        let Some(svc) = inputs.model.services.get(key) else { continue };
        if svc.ingress.is_empty() {
            unmet_list.push(Unmet {
                reason: reason::ADDRESS_PENDING,
                message: format!(
                    "{key}: no load-balancer address assigned yet (status.loadBalancer.ingress)"
                ),
            });
            continue;
        }
        let local = svc.traffic_policy == TrafficPolicy::Local;
        for &ip in &svc.ingress {
            match reached(ip, local, inputs) {
                Some(how) => reached_list.push(format!("{key}: {how}")),
                None => unmet_list.push(unmet(key, ip, local, inputs)),
            }
        }
    }
    match unmet_list.first() {
        None => GateCondition::new(true, reason::ANNOUNCED, reached_list.join("; ")),
        Some(first) => {
            let reason = first.reason;
            let messages: Vec<String> = unmet_list.into_iter().map(|u| u.message).collect();
            GateCondition::new(false, reason, messages.join("; "))
        }
    }
}

/// [`desired`] for every pod of this node.
pub fn desired_all(pods: &[GatedPod], inputs: &Inputs<'_>) -> BTreeMap<PodKey, GateCondition> {
    // One index for all pods: a node's pods against thousands of Services.
    let idx = PodIndex::new(pods.iter().filter(|p| p.node == inputs.me));
    let backing = idx.backing(inputs.model);
    idx.pods
        .iter()
        .zip(backing)
        .map(|(p, services)| {
            let services: Vec<&ServiceKey> = services.into_iter().collect();
            (p.key.clone(), desired_for(&services, inputs))
        })
        .collect()
}

/// Keeps True the pods `desired` would turn False: used while a restarted speaker's
/// sessions come back, so its restart alone never makes serving pods unready.
pub fn keep_true(desired: &mut BTreeMap<PodKey, GateCondition>, pods: &[GatedPod]) {
    for p in pods {
        if let Some(cur) = p.current.as_ref().filter(|c| c.status)
            && desired.get(&p.key).is_some_and(|d| !d.status)
        {
            desired.insert(p.key.clone(), cur.clone());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
