//! The object store: every write goes through here, under one lock, in resourceVersion order.
//!
//! This file holds the store's types, the change log and the metadata helpers every part
//! uses. The parts: `read` (GET and LIST, as served at a version), `write` (create,
//! update, delete and the commit every change goes through), `gc` (owner-reference
//! garbage collection) and `controllers` (what the cluster's controllers do on a write).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::events;
use crate::resource::{Registry, ResourceInfo};

mod controllers;
pub use controllers::ROOT_CA_CONFIGMAP;
mod gc;
mod read;
mod write;

use gc::OwnerIndex;

/// A change, as watchers see it.
#[derive(Debug)]
pub(crate) struct LogEntry {
    pub(crate) rv: u64,
    pub(crate) group: String,
    pub(crate) plural: String,
    pub(crate) namespace: String,
    pub(crate) etype: &'static str,
    pub(crate) object: Value,
    /// The object before a MODIFIED, so selector-filtered watches can turn it into ADDED/DELETED.
    pub(crate) old: Option<Value>,
}

/// What the store broadcasts to open watches.
#[derive(Debug, Clone)]
pub(crate) enum WatchMsg {
    Event(Arc<LogEntry>),
    /// Send a bookmark now (test control).
    Bookmark,
    /// End every stream, as when the apiserver goes away.
    Disconnect,
}

/// The resource a request addresses, resolved against the registry.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) info: ResourceInfo,
    pub(crate) version: String,
    /// Namespace from the path; None for cluster-scoped or all-namespaces requests.
    pub(crate) namespace: Option<String>,
}

/// How a write touches managedFields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Managed {
    /// An `Update` operation by this manager: it takes the fields it changed.
    Update,
    /// Server-side apply already computed managedFields on the candidate.
    Applied,
}

/// Which dependents a delete takes with it (`DeleteOptions.propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    /// Delete dependents whose owners are all gone (Background and Foreground alike here).
    Cascade,
    /// Strip the owner reference and keep dependents.
    Orphan,
}

type ObjKey = (String, String);
type ResKey = (String, String);

/// All objects, the change log watches replay from, and the served resource types.
pub(crate) struct Store {
    pub(crate) rv: u64,
    pub(crate) compacted: u64,
    pub(crate) registry: Registry,
    objects: BTreeMap<ResKey, BTreeMap<ObjKey, Value>>,
    /// The garbage collector's index, kept by `commit`.
    owners: OwnerIndex,
    log: Vec<Arc<LogEntry>>,
    counter: u64,
    pub(crate) tx: broadcast::Sender<WatchMsg>,
}

pub(crate) fn now() -> String {
    Timestamp::now().round(k8s_openapi::jiff::Unit::Second).map(|t| t.to_string()).unwrap_or_default()
}

fn meta(obj: &Value, field: &str) -> Option<String> {
    obj.get("metadata")?.get(field)?.as_str().map(String::from)
}

fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if value.is_null() {
            m.remove(field);
        } else {
            m.insert(field.to_string(), value);
        }
    }
}

/// Where a resource's objects are stored: its own bucket, except events.k8s.io Events,
/// which are the core Events.
pub(crate) fn res_key(info: &ResourceInfo) -> ResKey {
    if events::is_events_v1(info) {
        return (String::new(), "events".into());
    }
    (info.group.clone(), info.plural.clone())
}

impl Store {
    pub(crate) fn new(tx: broadcast::Sender<WatchMsg>) -> Self {
        let mut s = Store {
            rv: 0,
            compacted: 0,
            registry: Registry::builtins(),
            objects: BTreeMap::new(),
            owners: OwnerIndex::default(),
            log: Vec::new(),
            counter: 0,
            tx,
        };
        // A real cluster always has these namespaces.
        if let Some(info) = s.registry.lookup("", "v1", "namespaces").cloned() {
            let t = Target { info, version: "v1".into(), namespace: None };
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let _ = s.create(&t, json!({"metadata": {"name": ns}}), "kube-apiserver", Managed::Update);
            }
        }
        s
    }

    /// A throwaway copy for `dryRun=All`: writes go through every check but reach no one.
    pub(crate) fn dry_run_copy(&self) -> Store {
        let (tx, _) = broadcast::channel(1);
        Store {
            rv: self.rv,
            compacted: self.compacted,
            registry: self.registry.clone(),
            objects: self.objects.clone(),
            owners: self.owners.clone(),
            log: Vec::new(),
            counter: self.counter,
            tx,
        }
    }

    /// Resolves `group/version/plural` to a served resource.
    pub(crate) fn target(
        &self,
        group: &str,
        version: &str,
        plural: &str,
        namespace: Option<String>,
    ) -> Result<Target, ApiError> {
        let info = self
            .registry
            .lookup(group, version, plural)
            .cloned()
            .ok_or_else(|| ApiError::NotFound { kind: plural.to_string(), name: String::new() })?;
        // Cluster-scoped resources have no namespaced path.
        if !info.namespaced && namespace.is_some() {
            return Err(ApiError::NotFound { kind: plural.into(), name: String::new() });
        }
        Ok(Target { info, version: version.into(), namespace })
    }

    /// Changes after `rv` for this resource, or None when `rv` was compacted away.
    pub(crate) fn events_since(&self, rv: u64) -> Option<Vec<Arc<LogEntry>>> {
        if rv < self.compacted {
            return None;
        }
        let start = self.log.partition_point(|e| e.rv <= rv);
        Some(self.log[start..].to_vec())
    }

    /// Forgets history up to now: watches from older resourceVersions get 410 Gone.
    pub(crate) fn compact(&mut self) {
        self.compacted = self.rv;
        self.log.clear();
    }
}
