//! What the model holds of EndpointSlices: per slice, endpoint counts per node (what the
//! planner reads) and the endpoints one by one (what readiness gates read).
//!
//! Every speaker holds every slice of every served Service, so each is held exactly
//! sized: a map per slice and per node (room for 11 entries each, however few they
//! held) and owned strings cost about 2 KB per Service of three endpoints, the largest
//! part of the model at 1 000 Services.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::{ClusterModel, SERVICE_NAME_LABEL, ServiceKey, name_of};

/// Endpoints of one Service on one node, by condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndpointCounts {
    /// `conditions.ready` (absent counts as ready).
    pub ready: u32,
    /// `conditions.serving` (absent: same as ready).
    pub serving: u32,
    /// `conditions.terminating`.
    pub terminating: u32,
    /// Both `serving` and `terminating`: still answering, but going away.
    pub serving_terminating: u32,
}

/// One endpoint of an EndpointSlice as listed, for pod readiness gates
/// ([`crate::readiness`]), which need to know which pods back a Service.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndpointRef {
    /// `targetRef.name` when `targetRef.kind` is Pod.
    pub pod: Option<Box<str>>,
    /// `addresses`.
    pub addresses: Box<[IpAddr]>,
    /// `nodeName`.
    pub node: Option<Box<str>>,
    /// `conditions.ready` (absent counts as ready).
    pub ready: bool,
    /// `conditions.terminating`.
    pub terminating: bool,
}

/// One EndpointSlice of a Service.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Slice {
    /// `metadata.name`.
    pub name: Box<str>,
    /// Endpoint counts per node, sorted by node.
    pub per_node: Box<[(Box<str>, EndpointCounts)]>,
    /// The endpoints one by one.
    pub endpoints: Box<[EndpointRef]>,
}

impl Slice {
    /// What the model keeps of `slice`.
    pub fn of(slice: &EndpointSlice) -> Slice {
        let mut per_node: BTreeMap<&str, EndpointCounts> = BTreeMap::new();
        let mut endpoints = Vec::with_capacity(slice.endpoints.len());
        for ep in &slice.endpoints {
            let c = ep.conditions.as_ref();
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            let serving = c.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            let target = ep.target_ref.as_ref().filter(|t| t.kind.as_deref() == Some("Pod"));
            endpoints.push(EndpointRef {
                pod: target.and_then(|t| t.name.as_deref()).map(Box::from),
                addresses: ep.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
                node: ep.node_name.as_deref().map(Box::from),
                ready,
                terminating,
            });
            let Some(node) = ep.node_name.as_deref() else { continue };
            let e = per_node.entry(node).or_default();
            e.ready += u32::from(ready);
            e.serving += u32::from(serving);
            e.terminating += u32::from(terminating);
            e.serving_terminating += u32::from(serving && terminating);
        }
        Slice {
            name: name_of(&slice.metadata).into(),
            per_node: per_node.into_iter().map(|(n, c)| (Box::from(n), c)).collect(),
            endpoints: endpoints.into_boxed_slice(),
        }
    }
}

/// The endpoints of `slices` one by one.
pub fn endpoint_refs(slices: &[Slice]) -> impl Iterator<Item = &EndpointRef> {
    slices.iter().flat_map(|s| s.endpoints.iter())
}

impl ClusterModel {
    /// Adds or replaces an EndpointSlice (attributed to the Service its label names).
    pub fn upsert_endpoint_slice(&mut self, slice: &EndpointSlice) {
        let namespace = slice.metadata.namespace.as_deref().unwrap_or("default");
        let Some(svc) = slice.metadata.labels.as_ref().and_then(|l| l.get(SERVICE_NAME_LABEL)) else {
            // No longer attributed to a Service (its label went): forget it.
            self.remove_endpoint_slice(namespace, &name_of(&slice.metadata));
            return;
        };
        let key = self.key(namespace, svc);
        let new = Slice::of(slice);
        let held = self.endpoint_slices.get(&key).and_then(|s| s.iter().find(|s| s.name == new.name));
        // Counts are what the planner reads; the endpoints one by one are what readiness
        // gates read (a pod replaced by another leaves the counts as they were).
        if held == Some(&new) {
            return;
        }
        // The slice may have moved to another Service (its label changed).
        self.remove_endpoint_slice(&key.namespace, &new.name);
        self.mark(&key);
        self.slice_owners.insert((key.namespace.clone(), new.name.clone()), key.clone());
        let slices = self.endpoint_slices.entry(key).or_default();
        let at = slices.partition_point(|s| s.name < new.name);
        slices.insert(at, new);
        slices.shrink_to_fit();
    }

    /// The Service an EndpointSlice (namespace, name) is attributed to, if any.
    pub fn slice_owner(&self, namespace: &str, name: &str) -> Option<&ServiceKey> {
        self.slice_owners.get(&(namespace.into(), name.into()))
    }

    /// The EndpointSlices attributed to a Service, as (namespace, name).
    pub fn slice_names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.slice_owners.keys().map(|(ns, n)| (&**ns, &**n))
    }

    /// Removes an EndpointSlice by namespace and name.
    pub fn remove_endpoint_slice(&mut self, namespace: &str, name: &str) {
        let Some(k) = self.slice_owners.remove(&(namespace.into(), name.into())) else { return };
        if let Some(slices) = self.endpoint_slices.get_mut(&k) {
            slices.retain(|s| &*s.name != name);
            if slices.is_empty() {
                self.endpoint_slices.remove(&k);
            }
        }
        self.mark(&k);
    }

    /// Endpoint counts of a Service on every node, summed over its slices.
    pub fn endpoints(&self, key: &ServiceKey) -> BTreeMap<&str, EndpointCounts> {
        let mut out: BTreeMap<&str, EndpointCounts> = BTreeMap::new();
        for (node, c) in self.endpoint_slices.get(key).into_iter().flatten().flat_map(|s| s.per_node.iter()) {
            let e = out.entry(&**node).or_default();
            e.ready += c.ready;
            e.serving += c.serving;
            e.terminating += c.terminating;
            e.serving_terminating += c.serving_terminating;
        }
        for (node, n) in self.gate_pending.get(key).into_iter().flatten() {
            let e = out.entry(node.as_str()).or_default();
            e.ready += n;
            e.serving += n;
        }
        out
    }
}
