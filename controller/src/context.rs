//! What every reconciliation shares: the API client, the event recorder, the metrics, the
//! watch caches and the one allocator.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::Notify;
use tracing::warn;

use crate::error::CallError;
use crate::fence::{CALL_TIMEOUT, Fence};
use crate::ipam::{Allocator, ServiceKey};
use crate::metrics::Metrics;
use crate::model::{self, CachedNamespace};
use crate::queue::WorkQueue;
use crate::service_cache::ServiceCache;

/// `reportingController` of the controller's Events.
pub const REPORTING_CONTROLLER: &str = "ferrolb-controller";

/// Controller settings from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--lb-class`: the loadBalancerClass served besides "no class".
    pub lb_class: String,
    /// The controller's namespace (membership Secret, Lease).
    pub namespace: String,
    /// This replica's identity (Lease holder, event reporting instance).
    pub identity: String,
    /// Leader election; `None` runs as the only replica.
    pub leader: Option<crate::leader::LeaseConfig>,
}

/// The allocator and what the controller remembers about allocation outcomes.
///
/// Allocation is global state — one address pool shared by every Service — so every
/// decision must see the previous one. It lives behind one `Mutex` around just this
/// state, taken for the microseconds a decision lasts and never across an `.await`: API
/// writes, which take milliseconds, happen after the lock is released, so reconciliations
/// of different Services still overlap their I/O. An owner task with a channel would
/// serialise the same way with more plumbing.
#[derive(Debug, Default)]
pub struct Ipam {
    /// The pure IPAM.
    pub alloc: Allocator,
    /// Services whose last allocation failed: retried when addresses free up or pools change.
    pub pending: BTreeSet<ServiceKey>,
    /// The last AllocationFailed message per Service, so a repeated failure is not re-announced.
    pub reported: BTreeMap<ServiceKey, String>,
}

/// Shared by every reconciliation and watch task.
pub struct Context {
    /// The API client; call it through [`Context::call`].
    pub client: kube::Client,
    /// Closes when this replica's leader term ends: no write after that.
    pub fence: Fence,
    /// Publishes Events.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Metrics,
    /// Settings.
    pub settings: Settings,
    /// The allocator (see [`Ipam`] for why a Mutex).
    pub ipam: Mutex<Ipam>,
    /// The cache of Services.
    pub services: ServiceCache,
    /// Watch cache of Namespaces (labels for namespaceSelectors).
    pub namespaces: Store<CachedNamespace>,
    /// Services to reconcile, each at most once.
    pub queue: Arc<WorkQueue>,
    /// Pool statistics changed: the pool task rewrites pool status.
    pub pools_dirty: Notify,
    /// Every Service's status has been replayed into the allocator: pool counts are true
    /// from here on. Before, a pool status write would say 0 assigned, then be corrected.
    pub replayed: AtomicBool,
    /// The MetalLB-spelling notice each Service got (see [`crate::metallb_notice`]).
    pub metallb_notices: crate::memo::Notices,
    /// Pools changed: the configuration task re-validates the other kinds, which refer to them.
    pub config_dirty: Notify,
    /// Service versions a later write of ours superseded: not reconciled.
    pub superseded: crate::memo::Superseded,
}

/// A reference to this version of an object, for an Event whose note is about this
/// version: a later version's Event is then a new Event, not a repeat of the first.
pub fn versioned_ref<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    ObjectReference { resource_version: obj.meta().resource_version.clone(), ..obj.object_ref(&()) }
}

impl Context {
    /// Makes one API call of the leader's work: not sent once the leader term has ended,
    /// abandoned when it ends or after [`CALL_TIMEOUT`].
    pub async fn call<T>(&self, call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, CallError> {
        self.fence.call(CALL_TIMEOUT, call).await
    }

    /// Whether pool counts may be written (see [`Context::replayed`]).
    pub fn counts_known(&self) -> bool {
        self.replayed.load(Ordering::Acquire)
    }

    /// Locks the allocator state (a poisoned lock only follows a panic in a test; keep going).
    pub fn ipam(&self) -> MutexGuard<'_, Ipam> {
        self.ipam.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a Service for reconciliation.
    pub fn enqueue(&self, key: &ServiceKey) {
        self.queue.push(key.clone());
    }

    /// Queues every Service whose allocation failed, after addresses freed up or pools changed.
    pub fn retry_pending(&self) {
        let pending: Vec<ServiceKey> = self.ipam().pending.iter().cloned().collect();
        for k in &pending {
            self.enqueue(k);
        }
    }

    /// Releases what a Service holds (deleted, or no longer ours). Returns whether it held anything.
    pub fn release(&self, key: &ServiceKey) -> bool {
        let released = {
            let mut ipam = self.ipam();
            ipam.pending.remove(key);
            ipam.reported.remove(key);
            ipam.alloc.release(key)
        };
        self.metallb_notices.forget(key);
        self.superseded.forget(key);
        if released {
            self.metrics.releases.inc();
            self.pools_dirty.notify_one();
            self.retry_pending();
        }
        released
    }

    /// The labels of a namespace from the watch cache (shared, not copied).
    pub fn namespace_labels(&self, namespace: &str) -> Arc<BTreeMap<String, String>> {
        self.namespaces.get(&ObjectRef::new(namespace)).map(|ns| ns.labels.clone()).unwrap_or_default()
    }

    /// A reference to a Service for Events, from the cache (with its uid) or from its key.
    pub fn service_ref(&self, key: &ServiceKey) -> ObjectReference {
        self.services.get(key).map_or_else(|| model::service_reference(key), |s| s.object_ref())
    }

    /// Publishes an Event; a failure is logged, never fatal (Events are best effort).
    /// kube's Recorder folds an Event with the same reason about the same `regarding`
    /// (compared with its resourceVersion) into the first one's series for 6 minutes,
    /// keeping the first note: give a [`versioned_ref`] when the note may differ.
    pub async fn event(&self, regarding: &ObjectReference, type_: EventType, reason: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(ferrolb_api::event_note(note)),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.call(self.recorder.publish(&ev, regarding)).await {
            warn!(reason, object = ?regarding.name, error = %e, "cannot publish event");
        }
    }
}
