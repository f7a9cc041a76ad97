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
//! * [`Readiness`]: watches this node's pods (field selector `spec.nodeName`) and
//!   patches `pods/status` when a pod's condition differs from the desired one.
//! * [`RemoteWatch`]: the other nodes' ServiceAnnouncements, for Cluster Services.
//! * [`keep_true`]: the startup hold of a restarted speaker (README-readiness.md).
//!
//! The speaker's Kubernetes mode (`speaker.rs`, `GatePart`) wires them: pods and
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
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::ServiceAnnouncement;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::announce::Announced;
use crate::metrics::{ConditionLabel, ReadinessMetrics};
use crate::model::{ClusterModel, ServiceKey, TrafficPolicy};
use crate::plan::Announcements;

/// The readiness gate's condition type (API.md).
pub const CONDITION_TYPE: &str = "ferrolb.io/load-balancer-ready";
/// The field manager of the pods/status patches.
pub const FIELD_MANAGER: &str = "ferrolb-speaker";

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
    pub plan: &'a Announcements,
    /// What this node really announces.
    pub announced: &'a Announced,
    /// What other nodes announce.
    pub remote: &'a RemoteAnnounced,
}

fn selector_matches(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
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
            Some(name) => self.by_name.get(&(ns, name.as_str())).copied(),
            None => ep.addresses.iter().find_map(|a| self.by_ip.get(&(ns, *a)).copied()),
        }
    }

    /// For each pod (by position), the served Services it backs: selected by their
    /// `spec.selector` (so a pod counts before the EndpointSlice lists it), or listed in
    /// one of their EndpointSlices by `targetRef` or, without one, by address.
    fn backing<'m>(&self, model: &'m ClusterModel) -> Vec<BTreeSet<&'m ServiceKey>> {
        let mut out: Vec<BTreeSet<&'m ServiceKey>> = vec![BTreeSet::new(); self.pods.len()];
        for ns in self.namespaces() {
            for (key, slices) in in_namespace(&model.slice_endpoints, ns) {
                if !model.services.contains_key(key) {
                    continue;
                }
                for i in slices.values().flatten().filter_map(|ep| self.endpoint_pod(ns, ep)) {
                    if let Some(set) = out.get_mut(i) {
                        set.insert(key);
                    }
                }
            }
            for (key, sel) in in_namespace(&model.service_selectors, ns) {
                // Candidates carry the selector's first label; then the whole selector must match.
                let Some((k, v)) = sel.iter().next() else { continue };
                for &i in self.by_label.get(&(ns, k.as_str(), v.as_str())).into_iter().flatten() {
                    let matches = self.pods.get(i).is_some_and(|p| selector_matches(sel, &p.labels));
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
    map.range(ServiceKey { namespace: namespace.to_owned(), name: String::new() }..)
        .take_while(move |(k, _)| k.namespace == namespace)
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
        for (key, slices) in in_namespace(&model.slice_endpoints, ns) {
            let local = model.services.get(key).is_some_and(|s| s.traffic_policy == TrafficPolicy::Local);
            if !local || model.l2_selects(key) {
                continue;
            }
            let n = slices
                .values()
                .flatten()
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

/// Errors writing a pod's condition.
#[derive(Debug, thiserror::Error)]
pub enum ReadinessError {
    /// The pods/status patch failed.
    #[error(
        "Pod {pod}: status.conditions[{CONDITION_TYPE}]: patch failed: {source}; the speaker needs RBAC \
         `patch` on `pods/status` and retries"
    )]
    Patch {
        /// The pod.
        pod: PodKey,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// The merge patch setting the gate condition on `pod` (which must be the stored
/// version): the whole condition list with only this gate's entry changed, guarded by
/// the pod's resourceVersion so a concurrent change by the kubelet is never lost
/// (a stale version gets 409 Conflict and is retried from the next pod event).
fn condition_patch(pod: &Pod, want: &GateCondition, now: &Time) -> serde_json::Value {
    let existing = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let status = if want.status { "True" } else { "False" };
    let mut conditions: Vec<serde_json::Value> = Vec::with_capacity(existing.len() + 1);
    let mut replaced = false;
    for c in &existing {
        if c.type_ == CONDITION_TYPE {
            // lastTransitionTime moves only when the status does.
            let since = if c.status == status {
                c.last_transition_time.clone().unwrap_or_else(|| now.clone())
            } else {
                now.clone()
            };
            conditions.push(json!({
                "type": CONDITION_TYPE, "status": status, "reason": want.reason, "message": want.message,
                "lastTransitionTime": since, "lastProbeTime": null,
            }));
            replaced = true;
        } else {
            conditions.push(serde_json::to_value(c).unwrap_or(serde_json::Value::Null));
        }
    }
    if !replaced {
        conditions.push(json!({
            "type": CONDITION_TYPE, "status": status, "reason": want.reason, "message": want.message,
            "lastTransitionTime": now, "lastProbeTime": null,
        }));
    }
    json!({
        "metadata": {"resourceVersion": pod.metadata.resource_version},
        "status": {"conditions": conditions},
    })
}

/// Watches this node's pods and keeps their gate conditions as desired.
///
/// The event loop calls [`Readiness::gated_pods`] after [`Readiness::pods_changed`],
/// plans with [`apply_gate_pending`], computes [`desired_all`] whenever the model, the
/// plan or the announced state changed, and hands the result to [`Readiness::publish`].
/// A writer task patches only pods whose condition differs. Dropping it stops both tasks.
#[derive(Debug)]
pub struct Readiness {
    store: Store<Pod>,
    changes: watch::Receiver<u64>,
    listed: watch::Receiver<bool>,
    desired: watch::Sender<Arc<BTreeMap<PodKey, GateCondition>>>,
    node: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Readiness {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Readiness {
    /// Starts watching the pods of `node` (field selector `spec.nodeName`) and the
    /// writer; call within a tokio runtime.
    pub fn start(client: kube::Client, node: &str) -> Self {
        Self::start_with_metrics(client, node, ReadinessMetrics::default())
    }

    /// [`Readiness::start`], counting writes into `metrics` (`ferrolb_readiness_*`).
    pub fn start_with_metrics(client: kube::Client, node: &str, metrics: ReadinessMetrics) -> Self {
        let pods: Api<Pod> = Api::all(client.clone());
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let (store, changes, listed, reflect) = reflect(pods, cfg, "this node's pods");
        let (desired, desired_rx) = watch::channel(Arc::new(BTreeMap::new()));
        let w = Writer { client, store: store.clone(), written: BTreeMap::new(), metrics };
        let write = tokio::spawn(w.run(desired_rx, changes.clone()));
        Readiness { store, changes, listed, desired, node: node.to_owned(), tasks: vec![reflect, write] }
    }

    /// Whether this node's pods were listed completely once, and every change since
    /// was marked seen ([`Readiness::mark_pods_seen`]): the gated pods last read are current.
    pub fn pods_current(&self) -> bool {
        *self.listed.borrow() && !self.changes.has_changed().unwrap_or(false)
    }

    /// A receiver that sees every later change of this node's pods (for an event loop
    /// that selects over clones; it calls [`Readiness::mark_pods_seen`] when it handles one).
    pub fn pod_changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// Marks the pod changes so far as handled.
    pub fn mark_pods_seen(&mut self) {
        self.changes.borrow_and_update();
    }

    /// Resolves when this node's pods changed since the last call (for `select!`).
    pub async fn pods_changed(&mut self) {
        if self.changes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// This node's pods that carry the gate.
    pub fn gated_pods(&self) -> Vec<GatedPod> {
        self.store
            .state()
            .iter()
            .filter_map(|p| GatedPod::from_pod(p))
            .filter(|p| p.node == self.node)
            .collect()
    }

    /// Hands the writer the conditions the pods should have.
    pub fn publish(&self, desired: BTreeMap<PodKey, GateCondition>) {
        self.desired.send_if_modified(|cur| {
            let changed = **cur != desired;
            if changed {
                *cur = Arc::new(desired);
            }
            changed
        });
    }

    /// Convenience for the event loop: [`desired_all`] over the current gated pods, published.
    pub fn update(&self, inputs: &Inputs<'_>) {
        self.publish(desired_all(&self.gated_pods(), inputs));
    }
}

/// A reflector over `api` with a change counter (bumped on every watch event) and a
/// flag set once the first complete list arrived; the task retries with back-off.
fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    what: &'static str,
) -> (Store<K>, watch::Receiver<u64>, watch::Receiver<bool>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let (changes_tx, changes) = watch::channel(0u64);
    let (listed_tx, listed) = watch::channel(false);
    let task = tokio::spawn(async move {
        let stream =
            reflector::reflector(writer, watcher(api, cfg)).backoff(crate::cluster::WatchBackoff::default());
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => {
                    if matches!(ev, watcher::Event::InitDone) {
                        listed_tx.send_if_modified(|l| !std::mem::replace(l, true));
                    }
                    changes_tx.send_modify(|n| *n = n.wrapping_add(1));
                }
                Err(e) => tracing::warn!(error = %e, "readiness gates: watching {what} failed; retrying"),
            }
        }
    });
    (store, changes, listed, task)
}

/// Watches every ServiceAnnouncement, for the gates of Cluster Services: an address
/// another node announces counts ([`RemoteAnnounced`]). Started only on nodes that
/// have gated pods, so other speakers do not pay for the watch. Dropping it stops it.
#[derive(Debug)]
pub struct RemoteWatch {
    store: Store<ServiceAnnouncement>,
    changes: watch::Receiver<u64>,
    listed: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl Drop for RemoteWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RemoteWatch {
    /// Starts the watch; call within a tokio runtime.
    pub fn start(client: kube::Client) -> Self {
        let api: Api<ServiceAnnouncement> = Api::all(client);
        let (store, changes, listed, task) = reflect(api, watcher::Config::default(), "ServiceAnnouncements");
        RemoteWatch { store, changes, listed, task }
    }

    /// Whether the first complete list arrived (before it, nothing is known elsewhere).
    pub fn listed(&self) -> bool {
        *self.listed.borrow()
    }

    /// A receiver that sees every later change (see [`Readiness::pod_changes`]).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// Marks the changes so far as handled.
    pub fn mark_seen(&mut self) {
        self.changes.borrow_and_update();
    }

    /// What the other nodes' ServiceAnnouncements say they announce.
    pub fn remote(&self, me: &str) -> RemoteAnnounced {
        let state = self.store.state();
        RemoteAnnounced::from_service_announcements(state.iter().map(|a| &**a), me)
    }
}

/// Patches pods whose gate condition differs from the desired one.
struct Writer {
    client: kube::Client,
    store: Store<Pod>,
    /// Per pod: the condition last written and the resourceVersion it was written
    /// over, so a write is not repeated while the pod store has not caught up.
    written: BTreeMap<PodKey, (GateCondition, String)>,
    metrics: ReadinessMetrics,
}

/// First retry delay after a failed patch (the next pod event retries sooner); it
/// doubles up to [`RETRY_MAX`] while patches keep failing.
const RETRY: Duration = Duration::from_secs(1);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(30);

impl Writer {
    async fn run(
        mut self,
        mut desired: watch::Receiver<Arc<BTreeMap<PodKey, GateCondition>>>,
        mut changes: watch::Receiver<u64>,
    ) {
        let mut delay = RETRY;
        loop {
            let want = desired.borrow_and_update().clone();
            let failed = self.converge(&want).await;
            let retry_at = failed.then(|| tokio::time::Instant::now() + delay);
            // Back off while writes keep failing (an apiserver outage), not to flood it or the log.
            delay = if failed { (delay * 2).min(RETRY_MAX) } else { RETRY };
            let retry = async {
                match retry_at {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = desired.changed() => if r.is_err() { return },
                r = changes.changed() => if r.is_err() { return },
                () = retry => {}
            }
        }
    }

    /// One pass over the desired conditions; true when some patch failed.
    async fn converge(&mut self, want: &BTreeMap<PodKey, GateCondition>) -> bool {
        self.written.retain(|k, _| want.contains_key(k));
        let mut failed = false;
        for (key, cond) in want {
            let Some(pod) = self.store.get(&reflector::ObjectRef::new(&key.name).within(&key.namespace))
            else {
                continue;
            };
            // Never touch a pod without the gate, whatever was asked.
            let Some(view) = GatedPod::from_pod(&pod) else { continue };
            if view.current.as_ref() == Some(cond) {
                continue;
            }
            let rv = pod.metadata.resource_version.clone().unwrap_or_default();
            if self.written.get(key).is_some_and(|(c, at)| c == cond && *at == rv) {
                continue;
            }
            match self.patch(key, &pod, cond).await {
                Ok(()) => {
                    tracing::info!(
                        pod = %key, status = cond.status, reason = %cond.reason, message = %cond.message,
                        "readiness gate {CONDITION_TYPE} set"
                    );
                    self.written.insert(key.clone(), (cond.clone(), rv));
                    let status = if cond.status { "True" } else { "False" };
                    self.metrics
                        .conditions_written
                        .get_or_create(&ConditionLabel { status: status.into(), reason: cond.reason.clone() })
                        .inc();
                }
                Err(ReadinessError::Patch { source: kube::Error::Api(s), .. })
                    if s.code == 409 || s.code == 404 =>
                {
                    // A newer pod version (or none) is on its way through the watch.
                    tracing::debug!(pod = %key, code = s.code, "readiness gate patch raced a pod change; retrying");
                    self.metrics.write_errors.inc();
                    failed = true;
                }
                Err(e) => {
                    tracing::warn!("{e}");
                    self.metrics.write_errors.inc();
                    failed = true;
                }
            }
        }
        failed
    }

    async fn patch(&self, key: &PodKey, pod: &Pod, cond: &GateCondition) -> Result<(), ReadinessError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let body = condition_patch(pod, cond, &now);
        let pp = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
        crate::cluster::within(api.patch_status(&key.name, &pp, &Patch::Merge(&body)))
            .await
            .map(|_| ())
            .map_err(|source| ReadinessError::Patch { pod: key.clone(), source })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::announce::bgp::BgpAnnounced;
    use crate::model::tests::model_of;
    use crate::plan;

    const FIXTURE: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node1}
status:
  conditions: [{type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 192.0.2.11}]
---
apiVersion: v1
kind: Node
metadata: {name: node2}
status:
  conditions: [{type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 192.0.2.12}]
---
apiVersion: v1
kind: Service
metadata: {name: shop, namespace: default}
spec: {type: LoadBalancer, externalTrafficPolicy: Local, selector: {app: shop}}
status: {loadBalancer: {ingress: [{ip: 203.0.113.20}]}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {type: LoadBalancer, selector: {app: web}}
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}
---
apiVersion: v1
kind: Service
metadata: {name: fresh, namespace: default}
spec: {type: LoadBalancer, selector: {app: fresh}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: shop-1, namespace: default, labels: {kubernetes.io/service-name: shop}}
addressType: IPv4
endpoints:
- addresses: [10.0.0.5]
  nodeName: node1
  conditions: {ready: false, serving: false}
  targetRef: {kind: Pod, name: shop-0, namespace: default}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: manual-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints:
- {addresses: [10.0.0.9], nodeName: node1, conditions: {ready: true}}
---
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: public}
spec: {addresses: [203.0.113.0/24]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-a}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: public}
spec: {ipAddressPools: [public]}
"#;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// A pod on `node` with `labels`, the gate, and ContainersReady as given.
    fn pod(name: &str, node: &str, app: &str, pod_ip: &str, containers_ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app}, "resourceVersion": "1"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "i"}],
                "readinessGates": [{"conditionType": CONDITION_TYPE}],
            },
            "status": {
                "podIP": pod_ip,
                "conditions": [
                    {"type": "ContainersReady", "status": if containers_ready { "True" } else { "False" }},
                    {"type": "Ready", "status": "False"},
                ],
            },
        }))
        .unwrap()
    }

    fn gated(p: &Pod) -> GatedPod {
        GatedPod::from_pod(p).expect("carries the gate")
    }

    fn announced_bgp(prefixes: &[&str], peer: &str) -> Announced {
        let mut b = BgpAnnounced::default();
        b.by_peer.insert(peer.into(), Arc::new(prefixes.iter().map(|p| p.parse().unwrap()).collect()));
        Announced::from_parts(&b, None)
    }

    fn eval(
        model: &ClusterModel,
        plan: &Announcements,
        announced: &Announced,
        remote: &RemoteAnnounced,
        p: &GatedPod,
    ) -> GateCondition {
        desired(p, &Inputs { model, me: "node1", plan, announced, remote })
    }

    #[test]
    fn pods_without_the_gate_are_not_ours_and_gated_pods_are_read_fully() {
        let mut plain = pod("a", "node1", "web", "10.0.0.1", true);
        plain.spec.as_mut().unwrap().readiness_gates =
            Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
                condition_type: "example.com/other".into(),
            }]);
        assert_eq!(GatedPod::from_pod(&plain), None);
        let mut p = pod("b", "node1", "web", "10.0.0.2", true);
        p.spec.as_mut().unwrap().readiness_gates.as_mut().unwrap().push(
            k8s_openapi::api::core::v1::PodReadinessGate { condition_type: "example.com/other".into() },
        );
        let g = gated(&p);
        assert_eq!(g.key, PodKey { namespace: "default".into(), name: "b".into() });
        assert_eq!((g.node.as_str(), g.ips.clone()), ("node1", vec![ip("10.0.0.2")]));
        assert!(g.containers_ready && !g.terminating && g.current.is_none());
        assert!(!g.other_gates_ready, "example.com/other has no True condition");
        assert!(!g.only_gate_pending());
    }

    #[test]
    fn local_service_is_true_only_once_this_node_really_announces_it() {
        let model = model_of(FIXTURE);
        let p = gated(&pod("shop-0", "node1", "shop", "10.0.0.5", true));
        let none = RemoteAnnounced::default();
        // Another node announcing a Local Service brings this pod nothing.
        let mut remote = RemoteAnnounced::default();
        remote.addresses.insert(ip("203.0.113.20"), ["node2".to_string()].into());

        let c = eval(&model, &Announcements::default(), &Announced::default(), &remote, &p);
        assert!(!c.status);
        assert_eq!(c.reason, reason::NOT_ANNOUNCED);
        assert!(
            c.message.contains("default/shop: 203.0.113.20 is not announced by node node1"),
            "{}",
            c.message
        );

        // Planned (the session is not up yet): pending, not True.
        let planned = plan::plan(&model, "node1", &BTreeSet::new());
        let mut model2 = model.clone();
        apply_gate_pending(&mut model2, std::slice::from_ref(&p), "node1");
        let planned2 = plan::plan(&model2, "node1", &BTreeSet::new());
        assert!(!planned.bgp_addresses().contains(&"203.0.113.20/32".parse().unwrap()));
        assert!(planned2.bgp_addresses().contains(&"203.0.113.20/32".parse().unwrap()));
        let c = eval(&model2, &planned2, &Announced::default(), &none, &p);
        assert_eq!((c.status, c.reason.as_str()), (false, reason::ANNOUNCEMENT_PENDING));
        assert!(c.message.contains("BGP UPDATE"), "{}", c.message);

        // Sent on an Established session: True, naming the peer.
        let c = eval(&model2, &planned2, &announced_bgp(&["203.0.113.20/32"], "router-a"), &none, &p);
        assert_eq!((c.status, c.reason.as_str()), (true, reason::ANNOUNCED));
        assert!(
            c.message.contains("203.0.113.20 announced by node node1 by BGP to router-a"),
            "{}",
            c.message
        );
        // An aggregate covering the address counts as well.
        let c = eval(&model2, &planned2, &announced_bgp(&["203.0.113.0/24"], "router-a"), &none, &p);
        assert!(c.status);
    }

    #[test]
    fn cluster_service_counts_any_node_and_says_why_not() {
        let model = model_of(FIXTURE);
        let p = gated(&pod("web-0", "node1", "web", "10.0.0.7", true));
        let plan = Announcements::default();
        let mut remote = RemoteAnnounced::default();
        let c = eval(&model, &plan, &Announced::default(), &remote, &p);
        assert_eq!((c.status, c.reason.as_str()), (false, reason::NOT_ANNOUNCED));
        assert!(c.message.contains("203.0.113.10 is not announced by any node"), "{}", c.message);
        remote.addresses.insert(ip("203.0.113.10"), ["node2".to_string()].into());
        let c = eval(&model, &plan, &Announced::default(), &remote, &p);
        assert_eq!((c.status, c.reason.as_str()), (true, reason::ANNOUNCED));
        assert!(c.message.contains("announced by node node2"), "{}", c.message);
        // L2 on this node.
        let mut l2 = ferrolb_proto::l2::L2Status::default();
        l2.addresses.insert(
            ip("203.0.113.10"),
            ferrolb_proto::l2::AddressStatus { gratuitous_sent: true, ..Default::default() },
        );
        let a = Announced::from_parts(&BgpAnnounced::default(), Some(&l2));
        let c = eval(&model, &plan, &a, &RemoteAnnounced::default(), &p);
        assert!(c.status && c.message.contains("by ARP/NDP"), "{c:?}");
        // Owned but the gratuitous announcement not sent: pending.
        l2.addresses.insert(ip("203.0.113.10"), ferrolb_proto::l2::AddressStatus::default());
        let a = Announced::from_parts(&BgpAnnounced::default(), Some(&l2));
        let mut planned = Announcements::default();
        planned.l2.insert(ip("203.0.113.10"), vec![]);
        let c = eval(&model, &planned, &a, &RemoteAnnounced::default(), &p);
        assert_eq!((c.status, c.reason.as_str()), (false, reason::ANNOUNCEMENT_PENDING));
        assert!(c.message.contains("gratuitous"), "{}", c.message);
    }

    #[test]
    fn backing_comes_from_selectors_slices_or_addresses() {
        let model = model_of(FIXTURE);
        let plan = Announcements::default();
        let none = RemoteAnnounced::default();
        // Selected by a Service without an address yet.
        let p = gated(&pod("fresh-0", "node1", "fresh", "10.0.0.3", true));
        let c = eval(&model, &plan, &Announced::default(), &none, &p);
        assert_eq!((c.status, c.reason.as_str()), (false, reason::ADDRESS_PENDING));
        assert!(c.message.contains("default/fresh"), "{}", c.message);
        // Backs nothing: nothing to wait for.
        let p = gated(&pod("lonely", "node1", "nothing", "10.0.0.4", true));
        let c = eval(&model, &plan, &Announced::default(), &none, &p);
        assert_eq!((c.status, c.reason.as_str()), (true, reason::NO_LOAD_BALANCER_SERVICE));
        // A hand-made slice without targetRef names the pod by its address.
        let p = gated(&pod("manual", "node1", "nothing", "10.0.0.9", true));
        assert_eq!(services_of(&p, &model).iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["web"]);
        // By targetRef, even without matching labels.
        let p = gated(&pod("shop-0", "node1", "relabelled", "10.9.9.9", true));
        assert_eq!(services_of(&p, &model).iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["shop"]);
    }

    /// The Local chicken-and-egg: the gated pod's endpoint is not ready, yet its node
    /// must plan the announcement, and keep it while the gate is True but the slice
    /// lags; not when the containers are not ready or the pod terminates.
    #[test]
    fn pods_waiting_only_for_the_gate_count_as_serving_on_their_own_node() {
        let base = model_of(FIXTURE);
        let vip: ipnet::IpNet = "203.0.113.20/32".parse().unwrap();
        let announces =
            |m: &ClusterModel, me: &str| plan::plan(m, me, &BTreeSet::new()).bgp_addresses().contains(&vip);
        assert!(!announces(&base, "node1"), "no serving endpoint without the rule");

        let mut ready = pod("shop-0", "node1", "shop", "10.0.0.5", true);
        let mut m = base.clone();
        let shop = ServiceKey { namespace: "default".into(), name: "shop".into() };
        assert_eq!(apply_gate_pending(&mut m, &[gated(&ready)], "node1"), BTreeSet::from([shop.clone()]));
        assert!(announces(&m, "node1"));
        assert!(!announces(&m, "node2"), "only for the pod's own node");
        assert!(apply_gate_pending(&mut m, &[gated(&ready)], "node1").is_empty(), "unchanged");
        // The gate turned True, the EndpointSlice has not caught up: still counted.
        ready.status.as_mut().unwrap().conditions.as_mut().unwrap().push(
            k8s_openapi::api::core::v1::PodCondition {
                type_: CONDITION_TYPE.into(),
                status: "True".into(),
                ..Default::default()
            },
        );
        assert!(apply_gate_pending(&mut m, &[gated(&ready)], "node1").is_empty());
        assert!(announces(&m, "node1"));
        // Other speakers do not count this node's pods.
        let mut other = base.clone();
        assert!(apply_gate_pending(&mut other, &[gated(&ready)], "node2").is_empty());

        let not_ready = pod("shop-0", "node1", "shop", "10.0.0.5", false);
        assert_eq!(apply_gate_pending(&mut m, &[gated(&not_ready)], "node1"), BTreeSet::from([shop.clone()]));
        assert!(!announces(&m, "node1"), "containers not ready: not counted");
        let mut leaving = pod("shop-0", "node1", "shop", "10.0.0.5", true);
        leaving.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(apply_gate_pending(&mut m, &[gated(&leaving)], "node1").is_empty());
        assert!(!announces(&m, "node1"), "terminating: not counted");
    }

    /// L2 owners are elected by every node from the same endpoints: a count only the
    /// pod's node sees must not make it a candidate (two owners).
    #[test]
    fn gate_pending_never_touches_l2_elections_or_cluster_services() {
        let l2 = format!(
            "{FIXTURE}---\napiVersion: ferrolb.io/v1alpha1\nkind: L2Advertisement\nmetadata: {{name: lan}}\nspec: {{ipAddressPools: [public]}}\n"
        );
        let mut m = model_of(&l2);
        let shop = ServiceKey { namespace: "default".into(), name: "shop".into() };
        assert!(m.l2_selects(&shop));
        let p = gated(&pod("shop-0", "node1", "shop", "10.0.0.5", true));
        assert!(apply_gate_pending(&mut m, &[p], "node1").is_empty());
        let live: BTreeSet<String> = ["node1".to_string(), "node2".to_string()].into();
        let l2_plan = plan::plan(&m, "node1", &live);
        assert!(!l2_plan.l2.contains_key(&ip("203.0.113.20")), "node1 is no L2 candidate: {l2_plan:?}");
        assert!(l2_plan.withdrawn[&ip("203.0.113.20")].contains("no eligible live node"), "{l2_plan:?}");
        // Without the L2Advertisement the same pod counts.
        let m2 = model_of(FIXTURE);
        assert!(!m2.l2_selects(&shop));
        let p = gated(&pod("shop-0", "node1", "shop", "10.0.0.5", true));
        assert!(gate_pending(std::slice::from_ref(&p), &m2, "node1").contains_key(&shop));
        // Cluster Services are announced without endpoints: nothing to count.
        let mut m = model_of(FIXTURE);
        let mut slice = m.slice_endpoints[&shop].clone();
        for eps in slice.values_mut() {
            for ep in eps.iter_mut() {
                ep.pod = Some("web-0".into());
            }
        }
        let web = ServiceKey { namespace: "default".into(), name: "web".into() };
        m.slice_endpoints.insert(web.clone(), slice);
        let w = gated(&pod("web-0", "node1", "web", "10.0.0.5", true));
        assert!(!gate_pending(&[w], &m, "node1").contains_key(&web));
    }

    #[test]
    fn remote_announcements_leave_out_this_node() {
        let sa = |node: &str, addr: &str| {
            ServiceAnnouncement::new(
                &format!("web-{node}"),
                ferrolb_api::ServiceAnnouncementSpec {
                    node: node.into(),
                    addresses: vec![addr.into(), "not-an-ip".into()],
                    ..Default::default()
                },
            )
        };
        let items = [sa("node1", "203.0.113.10"), sa("node2", "203.0.113.10"), sa("node3", "203.0.113.11")];
        let r = RemoteAnnounced::from_service_announcements(&items, "node1");
        assert_eq!(r.addresses.len(), 2);
        assert_eq!(r.addresses[&ip("203.0.113.10")], BTreeSet::from(["node2".to_string()]));
    }

    #[test]
    fn the_patch_changes_only_the_gate_condition_and_keeps_transition_time_while_status_holds() {
        let mut p = pod("a", "node1", "web", "10.0.0.1", true);
        let t0 = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let t1 = Time("2026-01-02T00:00:00Z".parse().unwrap());
        let cond = |status| GateCondition { status, reason: "R".into(), message: "m".into() };
        let body = condition_patch(&p, &cond(false), &t0);
        assert_eq!(body["metadata"]["resourceVersion"], "1", "guarded by the resourceVersion");
        let cs = body["status"]["conditions"].as_array().unwrap();
        assert_eq!(cs.len(), 3);
        assert_eq!(cs[0]["type"], "ContainersReady");
        assert_eq!(cs[1]["type"], "Ready");
        assert_eq!((cs[2]["type"].as_str(), cs[2]["status"].as_str()), (Some(CONDITION_TYPE), Some("False")));
        // Store it, then: same status keeps t0, a flip takes the new time.
        p.status.as_mut().unwrap().conditions =
            serde_json::from_value(body["status"]["conditions"].clone()).unwrap();
        let same = condition_patch(&p, &cond(false), &t1);
        assert_eq!(same["status"]["conditions"][2]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(same["status"]["conditions"].as_array().unwrap().len(), 3, "replaced in place");
        let flip = condition_patch(&p, &cond(true), &t1);
        assert_eq!(flip["status"]["conditions"][2]["lastTransitionTime"], "2026-01-02T00:00:00Z");
        assert_eq!(flip["status"]["conditions"][2]["status"], "True");
    }

    #[test]
    fn keep_true_holds_only_true_pods_back_from_false() {
        let mut was_true = gated(&pod("a", "node1", "web", "10.0.0.1", true));
        was_true.current = Some(GateCondition::new(true, reason::ANNOUNCED, "m".into()));
        let was_false = gated(&pod("b", "node1", "web", "10.0.0.2", true));
        let pending = GateCondition::new(false, reason::ANNOUNCEMENT_PENDING, "p".into());
        let mut desired = BTreeMap::from([
            (was_true.key.clone(), pending.clone()),
            (was_false.key.clone(), pending.clone()),
        ]);
        keep_true(&mut desired, &[was_true.clone(), was_false.clone()]);
        assert_eq!(desired[&was_true.key], *was_true.current.as_ref().unwrap());
        assert_eq!(desired[&was_false.key], pending);
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let c = GateCondition::new(false, reason::NOT_ANNOUNCED, "é".repeat(MAX_MESSAGE));
        assert!(c.message.len() <= MAX_MESSAGE && c.message.ends_with("..."));
    }
}
