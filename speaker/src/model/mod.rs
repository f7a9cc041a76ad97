//! The ClusterModel: a plain snapshot of everything the planner looks at.
//!
//! Built from Kubernetes objects by the `upsert_*` / `remove_*` calls: the static-file
//! source ([`static_file`]) feeds the whole file through them, a Kubernetes reflector
//! feeds watch events through the same calls, so there is one code path after that.
//! ferrolb configuration arrives as a whole [`ValidConfig`] (it is validated as a set).

mod endpoints;
mod labels;
pub mod static_file;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_api::{
    BfdProfile, BgpAdvertisement, BgpPeer, IpAddressPool, L2Advertisement, NodeFacts, Object, ObjectStream,
    ServiceFields, StreamError, ValidConfig,
};
use k8s_openapi::api::core::v1::{Node, Service};

pub use endpoints::{EndpointCounts, EndpointRef, Slice, endpoint_refs};
pub use labels::{LabelStrings, NodeLabels};

/// The label that keeps a node out of every announcement.
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
pub use ferrolb_api::node_facts::DRAIN_TAINTS;
/// The EndpointSlice label naming its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The loadBalancerClass ferrolb serves by default (besides Services with none).
pub const DEFAULT_LB_CLASS: &str = "ferrolb.io/lb";

/// `namespace/name` of a Service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    /// Namespace ("default" when absent).
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl std::fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// `spec.externalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrafficPolicy {
    /// Every node forwards (kube-proxy SNATs across nodes).
    #[default]
    Cluster,
    /// Only nodes with a serving endpoint may attract traffic.
    Local,
}

/// What the planner needs of a Service.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServiceInfo {
    /// Labels, for serviceSelectors.
    pub labels: BTreeMap<String, String>,
    /// `status.loadBalancer.ingress[].ip`.
    pub ingress: Vec<IpAddr>,
    /// `spec.externalTrafficPolicy`.
    pub traffic_policy: TrafficPolicy,
}

/// A Service's `spec.selector`, sorted by key and exactly sized (a map holds room for 11
/// pairs, however few: most selectors have one or two).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Box<[(Box<str>, Box<str>)]>);

impl Selector {
    /// The selector of these labels.
    pub fn of(labels: BTreeMap<String, String>) -> Selector {
        Selector(labels.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }

    /// Its pairs, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Whether `labels` carry every pair (an empty selector selects nothing).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.0.is_empty() && self.iter().all(|(k, v)| labels.get(k).is_some_and(|l| l == v))
    }
}

/// What the planner needs of a Node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeInfo {
    /// Labels, for nodeSelectors.
    pub labels: NodeLabels,
    /// Condition Ready is True.
    pub ready: bool,
    /// Condition NetworkUnavailable is True.
    pub network_unavailable: bool,
    /// Carries [`EXCLUDE_LABEL`].
    pub excluded: bool,
    /// InternalIP addresses.
    pub addresses: Vec<IpAddr>,
    /// Why this node drains (cordoned by `spec.unschedulable`, or a [`DRAIN_TAINTS`]
    /// taint), if it does.
    pub draining: Option<String>,
}

/// The snapshot the planner reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterModel {
    /// Services ferrolb serves.
    pub services: BTreeMap<ServiceKey, ServiceInfo>,
    /// The EndpointSlices of each Service, sorted by name.
    pub endpoint_slices: BTreeMap<ServiceKey, Vec<Slice>>,
    /// Nodes by name.
    pub nodes: BTreeMap<String, NodeInfo>,
    /// The strings of their labels.
    pub label_strings: LabelStrings,
    /// IPAddressPools by name.
    pub pools: BTreeMap<String, IpAddressPool>,
    /// BGPPeers by name.
    pub peers: BTreeMap<String, BgpPeer>,
    /// BGPAdvertisements by name.
    pub bgp_advertisements: BTreeMap<String, BgpAdvertisement>,
    /// L2Advertisements by name.
    pub l2_advertisements: BTreeMap<String, L2Advertisement>,
    /// BFDProfiles by name.
    pub bfd_profiles: BTreeMap<String, BfdProfile>,
    /// loadBalancerClass served besides "none".
    pub lb_class: String,
    /// What changed since the planner last looked (see [`ClusterModel::take_changes`]).
    changes: Changes,
    /// The Service of each EndpointSlice (namespace, name) added by `upsert_endpoint_slice`.
    slice_owners: BTreeMap<(Arc<str>, Box<str>), ServiceKey>,
    /// `spec.selector` of the served Services that have a non-empty one (readiness gates).
    pub service_selectors: BTreeMap<ServiceKey, Selector>,
    /// Endpoints, per Service and node, that are not ready only because ferrolb's own
    /// readiness gate is pending; [`ClusterModel::endpoints`] counts them as ready and
    /// serving, or a Local Service could never be announced for a pod whose gate waits
    /// for that announcement. Set by [`crate::readiness::apply_gate_pending`].
    pub gate_pending: BTreeMap<ServiceKey, BTreeMap<String, u32>>,
}

/// What changed in a [`ClusterModel`] since the last [`ClusterModel::take_changes`].
///
/// Filled by the `upsert_*` / `remove_*` / `set_config` calls, which mark a Service only
/// when what the planner reads of it really changed. Edits made directly through the
/// public fields are not tracked: call [`ClusterModel::mark_all_changed`] after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Something every Service depends on changed (nodes, configuration), or the model
    /// is new: everything must be recomputed.
    pub all: bool,
    /// Services whose Service or EndpointSlices changed (or that went away).
    pub services: BTreeSet<ServiceKey>,
}

impl Default for Changes {
    /// A new model is all news.
    fn default() -> Self {
        Changes { all: true, services: BTreeSet::new() }
    }
}

impl Changes {
    /// Nothing changed.
    pub fn none() -> Self {
        Changes { all: false, services: BTreeSet::new() }
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        !self.all && self.services.is_empty()
    }
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// Whether two name → object maps hold the same objects, as far as `eq` compares them.
fn same_objects<T>(a: &BTreeMap<String, T>, b: &BTreeMap<String, T>, eq: impl Fn(&T, &T) -> bool) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|((ka, va), (kb, vb))| ka == kb && eq(va, vb))
}

/// Whether two models hold the same ferrolb configuration, as far as the planner reads
/// it (labels and spec of pools, peers and advertisements).
fn same_config(a: &ClusterModel, b: &ClusterModel) -> bool {
    macro_rules! same {
        ($field:ident) => {
            same_objects(&a.$field, &b.$field, |x, y| {
                x.metadata.labels == y.metadata.labels && x.spec == y.spec
            })
        };
    }
    same!(pools) && same!(peers) && same!(bgp_advertisements) && same!(l2_advertisements)
}

/// Adds to `changed` every key whose value differs between `old` and `new`.
fn diff_keys<V: PartialEq>(
    old: &BTreeMap<ServiceKey, V>,
    new: &BTreeMap<ServiceKey, V>,
    changed: &mut BTreeSet<ServiceKey>,
) {
    for (k, v) in old {
        if new.get(k) != Some(v) {
            changed.insert(k.clone());
        }
    }
    changed.extend(new.keys().filter(|k| !old.contains_key(*k)).cloned());
}

/// A map keyed by Service, for [`ClusterModel::key`].
trait KeyedBy {
    /// The key held equal to `probe`.
    fn held(&self, probe: &ServiceKey) -> Option<ServiceKey>;
    /// The namespace of a key held next to `probe`, when it is `probe`'s.
    fn namespace_of(&self, probe: &ServiceKey) -> Option<Arc<str>>;
}

impl<V> KeyedBy for BTreeMap<ServiceKey, V> {
    fn held(&self, probe: &ServiceKey) -> Option<ServiceKey> {
        self.get_key_value(probe).map(|(k, _)| k.clone())
    }

    fn namespace_of(&self, probe: &ServiceKey) -> Option<Arc<str>> {
        let next = self.range(probe..).next().map(|(k, _)| k);
        let previous = self.range(..probe).next_back().map(|(k, _)| k);
        next.into_iter().chain(previous).find(|k| k.namespace == probe.namespace).map(|k| k.namespace.clone())
    }
}

/// What the model keeps of a Service: its key, and unless the Service is not for
/// `lb_class` (not a LoadBalancer, another class) what the planner reads and its pod
/// selector.
type ServiceEntry = (ServiceKey, Option<(ServiceInfo, Option<BTreeMap<String, String>>)>);

fn service_entry(lb_class: &str, svc: ServiceFields<'_>) -> ServiceEntry {
    let key = ServiceKey {
        namespace: svc.namespace.as_deref().unwrap_or("default").into(),
        name: svc.name.as_deref().unwrap_or_default().into(),
    };
    let is_lb = svc.type_.as_deref() == Some("LoadBalancer");
    if !is_lb || svc.load_balancer_class.is_some_and(|c| c != lb_class) {
        return (key, None);
    }
    let selector = svc.selector.filter(|s| !s.is_empty()).map(Cow::into_owned);
    let traffic_policy = match svc.external_traffic_policy.as_deref() {
        Some("Local") => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    };
    let labels = svc.labels.map(Cow::into_owned).unwrap_or_default();
    (key, Some((ServiceInfo { labels, ingress: svc.ingress, traffic_policy }, selector)))
}

impl ClusterModel {
    /// An empty model serving `lb_class` (and Services without a class).
    pub fn new(lb_class: &str) -> Self {
        Self { lb_class: lb_class.to_owned(), ..Self::default() }
    }

    /// Builds a model from a parsed object stream; the ferrolb objects must validate.
    /// Each object is dropped once read, so the whole stream and the whole model are
    /// never in memory together (8 MB of k8s Services with 10k of them, dhat).
    pub fn from_stream(mut stream: ObjectStream, file: &str, lb_class: &str) -> Result<Self, StreamError> {
        let mut services = Vec::new();
        stream.objects.retain_mut(|(_, o)| {
            let Object::Service(s) = o else { return true };
            services.push(service_entry(lb_class, ServiceFields::of(s)));
            false
        });
        Self::build(stream, services, file, lb_class)
    }

    /// Parses static file `file` and builds its model, with the warnings to log. Each
    /// Service becomes what the model keeps of it on the thread that read it, so 50k of
    /// them are converted on every core, and a plain one is never built as a Kubernetes
    /// object.
    pub fn parse(file: &str, text: &str, lb_class: &str) -> Result<(Self, Vec<String>), StreamError> {
        let (mut stream, services) =
            ferrolb_api::parse_stream_services(file, text, |s| service_entry(lb_class, s))?;
        let warnings = std::mem::take(&mut stream.warnings);
        let services = services.into_iter().map(|(_, s)| s).collect();
        Ok((Self::build(stream, services, file, lb_class)?, warnings))
    }

    /// The model of `stream` and `services` (in file order: a later document of the
    /// same Service wins), built in one sorted pass.
    fn build(
        stream: ObjectStream,
        mut services: Vec<ServiceEntry>,
        file: &str,
        lb_class: &str,
    ) -> Result<Self, StreamError> {
        let config = stream.validated_config(file)?;
        let mut m = Self::new(lb_class);
        m.set_config(config);
        for (_, o) in stream.objects {
            match o {
                Object::Node(n) => m.upsert_node(&n),
                Object::EndpointSlice(e) => m.upsert_endpoint_slice(&e),
                _ => {}
            }
        }
        // Sorted through indices (stable: file order among one key's documents): an
        // entry is hundreds of bytes, and sorting 50k entries moved each of them 16 times.
        let mut order: Vec<usize> = (0..services.len()).collect();
        order.sort_by(|a, b| services[*a].0.cmp(&services[*b].0));
        let last: Vec<usize> = order
            .chunk_by(|a, b| services[*a].0 == services[*b].0)
            .filter_map(|run| run.last().copied())
            .collect();
        let mut selectors = Vec::new();
        m.services = last
            .into_iter()
            .filter_map(|i| {
                let (key, entry) = &mut services[i];
                let (info, selector) = entry.take()?;
                if let Some(sel) = selector {
                    selectors.push((key.clone(), Selector::of(sel)));
                }
                Some((key.clone(), info))
            })
            .collect();
        m.service_selectors = selectors.into_iter().collect();
        m.changes.all = true;
        Ok(m)
    }

    /// Hands over what changed since the last call and starts afresh.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::replace(&mut self.changes, Changes::none())
    }

    /// Marks everything changed (after editing the public fields directly).
    pub fn mark_all_changed(&mut self) {
        self.changes.all = true;
    }

    /// Takes over everything `new` holds, marking changed only what differs, so a
    /// re-read static file recomputes only the Services it changed.
    pub fn replace_with(&mut self, new: ClusterModel) {
        // From or to no Service at all, every Service changed: no need to compare them.
        let global = self.lb_class != new.lb_class
            || self.nodes != new.nodes
            || !same_config(self, &new)
            || self.services.is_empty()
            || new.services.is_empty();
        if global {
            self.changes.all = true;
        } else if !self.changes.all {
            let mut changed = BTreeSet::new();
            diff_keys(&self.services, &new.services, &mut changed);
            diff_keys(&self.endpoint_slices, &new.endpoint_slices, &mut changed);
            self.changes.services.extend(changed);
        }
        let changes = std::mem::replace(&mut self.changes, Changes::none());
        let old = std::mem::replace(self, ClusterModel { changes, ..new });
        let entries = old.services.len() + old.endpoint_slices.len();
        crate::drop_later(old, entries);
    }

    /// Marks one Service changed (after editing what its plan reads directly, such as
    /// [`ClusterModel::gate_pending`]).
    pub fn mark(&mut self, key: &ServiceKey) {
        if !self.changes.all && !self.changes.services.contains(key) {
            self.changes.services.insert(key.clone());
        }
    }

    /// Replaces the ferrolb configuration with a validated set.
    pub fn set_config(&mut self, config: ValidConfig) {
        let c = config.into_inner();
        let by_name = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| name_of(m);
        let pools: BTreeMap<_, _> = c.pools.into_iter().map(|o| (by_name(&o.metadata), o)).collect();
        let peers: BTreeMap<_, _> = c.peers.into_iter().map(|o| (by_name(&o.metadata), o)).collect();
        let bgp_advertisements: BTreeMap<_, _> =
            c.bgp_advertisements.into_iter().map(|o| (by_name(&o.metadata), o)).collect();
        let l2_advertisements: BTreeMap<_, _> =
            c.l2_advertisements.into_iter().map(|o| (by_name(&o.metadata), o)).collect();
        let bfd_profiles: BTreeMap<_, _> =
            c.bfd_profiles.into_iter().map(|o| (by_name(&o.metadata), o)).collect();
        // The planner reads pools, peers and advertisements (labels and spec); a resync
        // that changes none of them recomputes nothing.
        let new = ClusterModel {
            pools,
            peers,
            bgp_advertisements,
            l2_advertisements,
            bfd_profiles,
            ..ClusterModel::default()
        };
        if !same_config(self, &new) {
            self.changes.all = true;
        }
        self.pools = new.pools;
        self.peers = new.peers;
        self.bgp_advertisements = new.bgp_advertisements;
        self.l2_advertisements = new.l2_advertisements;
        self.bfd_profiles = new.bfd_profiles;
    }

    /// Adds or replaces a Node.
    pub fn upsert_node(&mut self, node: &Node) {
        self.upsert_node_facts(name_of(&node.metadata), &NodeFacts::of(node));
    }

    /// Adds or replaces the facts of Node `name`.
    pub fn upsert_node_facts(&mut self, name: String, facts: &NodeFacts) {
        let labels = self.label_strings.labels(&facts.labels);
        let info = NodeInfo {
            draining: facts.draining.clone(),
            excluded: labels.contains_key(EXCLUDE_LABEL),
            labels,
            ready: facts.ready,
            network_unavailable: facts.network_unavailable,
            addresses: facts.addresses.clone(),
        };
        // Kubelet heartbeats rewrite the Node often; only what the planner reads counts.
        if self.nodes.get(&name) != Some(&info) {
            self.changes.all = true;
            self.nodes.insert(name, info);
        }
    }

    /// Removes a Node.
    pub fn remove_node(&mut self, name: &str) {
        if self.nodes.remove(name).is_some() {
            self.changes.all = true;
        }
    }

    /// The key of Service `namespace/name`, sharing the strings of a key the model holds:
    /// the Service's own, else a neighbour's namespace (keys sort by namespace first).
    /// Every map of a speaker is keyed by Service; at 10 000 Services in a few namespaces,
    /// keys made afresh were two allocations per map and Service.
    pub fn key(&self, namespace: &str, name: &str) -> ServiceKey {
        let probe = ServiceKey { namespace: namespace.into(), name: name.into() };
        for map in [&self.services as &dyn KeyedBy, &self.endpoint_slices] {
            if let Some(k) = map.held(&probe) {
                return k;
            }
        }
        for map in [&self.services as &dyn KeyedBy, &self.endpoint_slices] {
            if let Some(ns) = map.namespace_of(&probe) {
                return ServiceKey { namespace: ns, name: probe.name };
            }
        }
        probe
    }

    /// Adds or replaces a Service; Services of another class or type are dropped.
    pub fn upsert_service(&mut self, svc: &Service) {
        let (key, entry) = service_entry(&self.lb_class, ServiceFields::of(svc));
        let key = self.key(&key.namespace, &key.name);
        let Some((info, selector)) = entry else {
            self.remove_service(&key);
            return;
        };
        match selector {
            Some(sel) => self.service_selectors.insert(key.clone(), Selector::of(sel)),
            None => self.service_selectors.remove(&key),
        };
        if self.services.get(&key) != Some(&info) {
            self.mark(&key);
            self.services.insert(key, info);
        }
    }

    /// Removes a Service.
    pub fn remove_service(&mut self, key: &ServiceKey) {
        if self.services.remove(key).is_some() {
            self.mark(key);
        }
        self.service_selectors.remove(key);
    }

    /// True when an L2Advertisement applies to one of the Service's addresses (its
    /// pools and service selectors match; node selectors aside). Mirrors the planner's
    /// pool selection; readiness gates use it to keep L2 elections out of their
    /// per-node endpoint counting.
    pub fn l2_selects(&self, key: &ServiceKey) -> bool {
        let Some(svc) = self.services.get(key) else { return false };
        self.l2_advertisements.values().any(|ad| {
            let s = &ad.spec;
            ferrolb_api::selectors_match(&s.service_selectors, &svc.labels)
                && self.pools.iter().any(|(name, pool)| {
                    let labels = pool.metadata.labels.clone().unwrap_or_default();
                    let selected = (s.ip_address_pools.is_empty() && s.ip_address_pool_selectors.is_empty())
                        || s.ip_address_pools.iter().any(|n| n == name)
                        || (!s.ip_address_pool_selectors.is_empty()
                            && ferrolb_api::selectors_match(&s.ip_address_pool_selectors, &labels));
                    selected
                        && svc.ingress.iter().any(|ip| {
                            pool.spec
                                .addresses
                                .iter()
                                .filter_map(|a| ferrolb_api::AddressRange::parse(a).ok())
                                .any(|r| r.contains(*ip))
                        })
                })
        })
    }

    /// Nodes with an endpoint that may take new traffic: ready ones, or, when the
    /// Service has none ready anywhere, serving (terminating) ones, so a rollout's
    /// last pods keep their traffic until they go.
    pub fn serving_nodes(&self, key: &ServiceKey) -> BTreeSet<String> {
        serving_among(&self.endpoints(key))
    }
}

/// [`ClusterModel::serving_nodes`] from a Service's [`ClusterModel::endpoints`].
pub(crate) fn serving_among(eps: &BTreeMap<&str, EndpointCounts>) -> BTreeSet<String> {
    let any_ready = eps.values().any(|c| c.ready > 0);
    eps.iter()
        .filter(|(_, c)| if any_ready { c.ready > 0 } else { c.serving > 0 })
        .map(|(n, _)| (*n).to_owned())
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
