//! Kubernetes mode: kube-runtime watchers feed the same [`ClusterModel`] the static file
//! feeds, through its `upsert_*` / `remove_*` / `set_config` calls.
//!
//! Apiserver outages never look like deletions: a watcher's events are applied one by
//! one, but a (re)list is buffered and applied only once it completed (`InitDone`), and
//! only then are objects missing from it removed. A failed watch or a 410 Gone relists
//! without touching the model in between, so the announcements stay exactly as they are.
//!
//! Beside the watchers live the speaker's other API clients: [`status`] writes the
//! ServiceAnnouncements, [`pod_conditions`] the conditions of the pod readiness gate,
//! [`secrets`] reads keys and passwords.

mod nodes;
pub mod pod_conditions;
pub mod secrets;
pub mod slim;
pub mod status;
mod watchers;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::{
    BfdProfile, BgpAdvertisement, BgpPeer, Config, IpAddressPool, L2Advertisement, Origin, ValidationError,
};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::model::{ClusterModel, ServiceKey};

pub use watchers::{
    NodeScope, RELIST_SPREAD_PER_NODE, UNCOUNTED_CLUSTER, UPDATE_QUEUE, WatchBackoff, Watchers, channel,
    relist_spread, set_cluster_size, spawn_watchers,
};

/// How long one API call of the speaker may take: an apiserver may accept a request and
/// never answer. Watches are bounded by the client's read timeout and kube-runtime's idle
/// timeout instead (see `main.rs`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one API call, failing it after [`CALL_TIMEOUT`] as the transport does when a read
/// times out (an I/O `TimedOut` error), so callers handle both alike.
pub async fn within<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, kube::Error> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(r) => r,
        Err(_) => Err(kube::Error::Service(Box::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer from the apiserver within {CALL_TIMEOUT:?}"),
        )))),
    }
}

/// One change of one watched kind.
#[derive(Debug, Clone)]
pub enum Change<K> {
    /// Created or modified.
    Apply(Box<K>),
    /// Deleted.
    Delete(Box<K>),
    /// A complete (re)list: exactly these objects exist.
    Listed(Vec<K>),
}

/// What the watchers send to the speaker's event loop.
#[derive(Debug, Clone)]
pub enum Update {
    /// Nodes, every one of them ([`NodeScope::All`]).
    Node(Change<Node>),
    /// This node's own Node ([`NodeScope::Own`], [`NodeScope::Facts`]): a list holds it alone.
    OwnNode(Change<Node>),
    /// The Nodes' facts the controller publishes (ConfigMaps; [`NodeScope::Facts`]).
    NodeFacts(Change<ConfigMap>),
    /// Services.
    Service(Change<Service>),
    /// EndpointSlices.
    EndpointSlice(Change<EndpointSlice>),
    /// IPAddressPools.
    Pool(Change<IpAddressPool>),
    /// BGPPeers.
    Peer(Change<BgpPeer>),
    /// BGPAdvertisements.
    BgpAdvertisement(Change<BgpAdvertisement>),
    /// L2Advertisements.
    L2Advertisement(Change<L2Advertisement>),
    /// BFDProfiles.
    BfdProfile(Change<BfdProfile>),
    /// A watch failed; the watcher backs off and resumes or relists by itself.
    WatchFailed {
        /// The kind, e.g. `Service`.
        kind: &'static str,
        /// The error, one line.
        error: String,
    },
}

/// Every kind the speaker watches, as named in logs and readiness.
pub const KINDS: [&str; 8] = [
    "Node",
    "Service",
    "EndpointSlice",
    "IPAddressPool",
    "BGPPeer",
    "BGPAdvertisement",
    "L2Advertisement",
    "BFDProfile",
];

/// The kinds validated together as ferrolb configuration.
const CONFIG_KINDS: [&str; 5] =
    ["IPAddressPool", "BGPPeer", "BGPAdvertisement", "L2Advertisement", "BFDProfile"];

impl Update {
    /// The kind this update is about.
    pub fn kind(&self) -> &'static str {
        match self {
            Update::Node(_) | Update::OwnNode(_) => "Node",
            Update::NodeFacts(_) => "NodeFacts",
            Update::Service(_) => "Service",
            Update::EndpointSlice(_) => "EndpointSlice",
            Update::Pool(_) => "IPAddressPool",
            Update::Peer(_) => "BGPPeer",
            Update::BgpAdvertisement(_) => "BGPAdvertisement",
            Update::L2Advertisement(_) => "L2Advertisement",
            Update::BfdProfile(_) => "BFDProfile",
            Update::WatchFailed { kind, .. } => kind,
        }
    }
}

/// Only what configures announcements: name, labels, annotations and spec. Server-set
/// metadata and status (pool statistics the controller rewrites on every allocation)
/// would make every such write look like a configuration change.
fn config_meta(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        labels: meta.labels.clone().filter(|l| !l.is_empty()),
        annotations: meta.annotations.clone().filter(|a| !a.is_empty()),
        ..ObjectMeta::default()
    }
}

fn name(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn ns_name(meta: &ObjectMeta) -> (String, String) {
    (meta.namespace.clone().unwrap_or_else(|| "default".into()), name(meta))
}

/// Applies one change to a map of config objects keyed by name.
fn apply_config<K: Clone>(
    map: &mut BTreeMap<String, K>,
    change: Change<K>,
    meta: fn(&K) -> &ObjectMeta,
    strip: fn(K) -> K,
) {
    match change {
        Change::Apply(o) => {
            map.insert(name(meta(&o)), strip(*o));
        }
        Change::Delete(o) => {
            map.remove(&name(meta(&o)));
        }
        Change::Listed(all) => {
            *map = all.into_iter().map(|o| (name(meta(&o)), strip(o))).collect();
        }
    }
}

/// What one [`Feed::apply`] did.
#[derive(Debug, Default, PartialEq)]
pub struct Applied {
    /// The model changed (the plan may change).
    pub changed: bool,
    /// The configuration changed and is valid: it is in the model now.
    pub config_applied: bool,
    /// The configuration changed and is invalid; the last good one stays. Its errors.
    pub config_rejected: Option<Vec<ValidationError>>,
}

/// Turns watcher updates into model calls; remembers what it fed so a relist can
/// remove exactly what is gone, and which kinds have been listed once.
#[derive(Debug, Default)]
pub struct Feed {
    /// The uids of the Services the model serves, for owner references of
    /// ServiceAnnouncements and Event targets (shared by every status that names one).
    pub uids: BTreeMap<ServiceKey, Arc<str>>,
    /// The Services whose uid changed since the status last took them (a Service
    /// deleted and created again under its name, otherwise the same to the planner).
    pub uids_changed: BTreeSet<ServiceKey>,
    config: RawConfig,
    /// The configuration last put into the model (None: none yet).
    applied: Option<Config>,
    listed: BTreeSet<&'static str>,
    /// Whether L2Advertisements exist, once they are listed ([`Feed::node_scope`]).
    l2: Option<bool>,
    /// The published Nodes' facts, once listed (while L2Advertisements exist).
    published: Option<nodes::Published>,
    /// The names in the last list of this node's own Node (its facts are not read).
    own: BTreeSet<String>,
    /// The scope of the Nodes the model holds (of the last Node list applied).
    nodes_as: Option<NodeScope>,
}

#[derive(Debug, Default)]
struct RawConfig {
    pools: BTreeMap<String, IpAddressPool>,
    peers: BTreeMap<String, BgpPeer>,
    bgp_ads: BTreeMap<String, BgpAdvertisement>,
    l2_ads: BTreeMap<String, L2Advertisement>,
    bfd: BTreeMap<String, BfdProfile>,
}

impl RawConfig {
    fn to_config(&self) -> Config {
        Config {
            pools: self.pools.values().cloned().collect(),
            peers: self.peers.values().cloned().collect(),
            bgp_advertisements: self.bgp_ads.values().cloned().collect(),
            l2_advertisements: self.l2_ads.values().cloned().collect(),
            bfd_profiles: self.bfd.values().cloned().collect(),
            control_plane_vips: Vec::new(),
        }
    }
}

impl Feed {
    /// Whether every kind has been listed completely at least once (the Nodes in the
    /// scope wanted now).
    pub fn synced(&self) -> bool {
        self.unsynced().is_empty()
    }

    /// Kinds not listed yet (for logs while waiting).
    pub fn unsynced(&self) -> Vec<&'static str> {
        KINDS.iter().copied().filter(|k| !self.is_listed(k)).collect()
    }

    fn is_listed(&self, kind: &str) -> bool {
        if kind != "Node" {
            return self.listed.contains(kind);
        }
        self.nodes_listed()
    }

    /// Feeds one update into `model`.
    pub fn apply(&mut self, model: &mut ClusterModel, update: Update) -> Applied {
        let kind = update.kind();
        if let Update::WatchFailed { kind, .. } = update {
            if kind == "NodeFacts" {
                self.facts_failed();
            }
            return Applied::default();
        }
        if let Update::Node(_) | Update::OwnNode(_) = &update
            && self.stale_node_update(matches!(update, Update::OwnNode(_)))
        {
            return Applied::default();
        }
        let listed = matches!(
            &update,
            Update::Service(Change::Listed(_))
                | Update::EndpointSlice(Change::Listed(_))
                | Update::Pool(Change::Listed(_))
                | Update::Peer(Change::Listed(_))
                | Update::BgpAdvertisement(Change::Listed(_))
                | Update::L2Advertisement(Change::Listed(_))
                | Update::BfdProfile(Change::Listed(_))
        );
        if listed {
            self.listed.insert(kind);
        }
        let mut out = Applied::default();
        match update {
            Update::Node(c) => out.changed = self.node(model, c, false),
            Update::OwnNode(c) => out.changed = self.node(model, c, true),
            Update::NodeFacts(c) => out.changed = self.facts(model, c),
            Update::Service(c) => out.changed = self.service(model, c),
            Update::EndpointSlice(c) => out.changed = self.slice(model, c),
            Update::Pool(c) => apply_config(
                &mut self.config.pools,
                c,
                |o| &o.metadata,
                |mut o| {
                    o.metadata = config_meta(&o.metadata);
                    o.status = None;
                    o
                },
            ),
            Update::Peer(c) => apply_config(
                &mut self.config.peers,
                c,
                |o| &o.metadata,
                |mut o| {
                    o.metadata = config_meta(&o.metadata);
                    o.status = None;
                    o
                },
            ),
            Update::BgpAdvertisement(c) => apply_config(
                &mut self.config.bgp_ads,
                c,
                |o| &o.metadata,
                |mut o| {
                    o.metadata = config_meta(&o.metadata);
                    o.status = None;
                    o
                },
            ),
            Update::L2Advertisement(c) => apply_config(
                &mut self.config.l2_ads,
                c,
                |o| &o.metadata,
                |mut o| {
                    o.metadata = config_meta(&o.metadata);
                    o.status = None;
                    o
                },
            ),
            Update::BfdProfile(c) => apply_config(
                &mut self.config.bfd,
                c,
                |o| &o.metadata,
                |mut o| {
                    o.metadata = config_meta(&o.metadata);
                    o.status = None;
                    o
                },
            ),
            Update::WatchFailed { .. } => {}
        }
        if kind == "L2Advertisement" && self.listed.contains(kind) {
            let l2 = !self.config.l2_ads.is_empty();
            self.l2 = Some(l2);
            if !l2 {
                self.published = None;
            }
        }
        let is_config = matches!(
            kind,
            "IPAddressPool" | "BGPPeer" | "BGPAdvertisement" | "L2Advertisement" | "BFDProfile"
        );
        // Validated as a set, so only once every config kind was listed: a BGPAdvertisement
        // listed before its pool is not an error.
        let config_listed = CONFIG_KINDS.iter().all(|k| self.listed.contains(k));
        if is_config && config_listed {
            let config = self.config.to_config();
            if self.applied.as_ref() != Some(&config) {
                match config.clone().validate(Origin::Cluster) {
                    Ok(valid) => {
                        model.set_config(valid);
                        self.applied = Some(config);
                        out.changed = true;
                        out.config_applied = true;
                    }
                    Err(errors) => out.config_rejected = Some(errors),
                }
            }
        }
        out
    }

    fn service(&mut self, model: &mut ClusterModel, c: Change<Service>) -> bool {
        match c {
            Change::Apply(s) => {
                let (ns, n) = ns_name(&s.metadata);
                let before = model.services.get(&model.key(&ns, &n)).cloned();
                model.upsert_service(&s);
                // After the upsert: the key the model holds now, strings shared.
                let k = model.key(&ns, &n);
                self.note_uid(model, k.clone(), &s);
                model.services.get(&k) != before.as_ref()
            }
            Change::Delete(s) => {
                let (ns, n) = ns_name(&s.metadata);
                let k = model.key(&ns, &n);
                self.uids.remove(&k);
                let existed = model.services.contains_key(&k);
                model.remove_service(&k);
                existed
            }
            Change::Listed(all) => {
                let before = model.services.clone();
                let now: BTreeSet<(String, String)> = all.iter().map(|s| ns_name(&s.metadata)).collect();
                let listed = |k: &ServiceKey| now.contains(&(k.namespace.to_string(), k.name.to_string()));
                let gone: Vec<ServiceKey> = model.services.keys().filter(|k| !listed(k)).cloned().collect();
                for k in &gone {
                    model.remove_service(k);
                }
                for s in &all {
                    model.upsert_service(s);
                    let (ns, n) = ns_name(&s.metadata);
                    self.note_uid(model, model.key(&ns, &n), s);
                }
                self.uids.retain(|k, _| model.services.contains_key(k));
                model.services != before
            }
        }
    }

    /// Records the uid of Service `s` (key `key`) while the model serves it.
    fn note_uid(&mut self, model: &ClusterModel, key: ServiceKey, s: &Service) {
        match &s.metadata.uid {
            Some(uid) if model.services.contains_key(&key) => {
                if self.uids.get(&key).map(|u| &**u) != Some(uid.as_str()) {
                    self.uids_changed.insert(key.clone());
                    self.uids.insert(key, uid.as_str().into());
                }
            }
            _ => {
                self.uids.remove(&key);
            }
        }
    }

    fn slice(&mut self, model: &mut ClusterModel, c: Change<EndpointSlice>) -> bool {
        // The Service a slice (namespace, name) is attributed to (one lookup: a burst of
        // slice events must not scan every Service each).
        let holders = |model: &ClusterModel, ns: &str, n: &str| -> Vec<ServiceKey> {
            model.slice_owner(ns, n).cloned().into_iter().collect()
        };
        let snapshot = |model: &ClusterModel, keys: &[ServiceKey]| {
            keys.iter().map(|k| model.endpoint_slices.get(k).cloned()).collect::<Vec<_>>()
        };
        match c {
            Change::Apply(e) => {
                let (ns, n) = ns_name(&e.metadata);
                let mut keys = holders(model, &ns, &n);
                if let Some(svc) =
                    e.metadata.labels.as_ref().and_then(|l| l.get(crate::model::SERVICE_NAME_LABEL))
                {
                    keys.push(model.key(&ns, svc));
                }
                let before = snapshot(model, &keys);
                model.upsert_endpoint_slice(&e);
                snapshot(model, &keys) != before
            }
            Change::Delete(e) => {
                let (ns, n) = ns_name(&e.metadata);
                let changed = !holders(model, &ns, &n).is_empty();
                model.remove_endpoint_slice(&ns, &n);
                changed
            }
            Change::Listed(all) => {
                let before = model.endpoint_slices.clone();
                let now: BTreeSet<(String, String)> = all.iter().map(|e| ns_name(&e.metadata)).collect();
                let gone: Vec<(String, String)> = model
                    .slice_names()
                    .filter(|(ns, n)| !now.contains(&(ns.to_string(), n.to_string())))
                    .map(|(ns, n)| (ns.to_owned(), n.to_owned()))
                    .collect();
                for (ns, n) in &gone {
                    model.remove_endpoint_slice(ns, n);
                }
                for e in &all {
                    model.upsert_endpoint_slice(e);
                }
                model.endpoint_slices != before
            }
        }
    }
}

#[cfg(test)]
mod tests;
