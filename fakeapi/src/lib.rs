//! An in-process fake Kubernetes apiserver behind a real `kube::Client`, for ferrolb's tests.
//!
//! ```no_run
//! # async fn demo() {
//! let (client, server) = ferrolb_fakeapi::FakeApiServer::new().client();
//! # let _ = (client, server);
//! # }
//! ```
//!
//! See `README.md` for what is faithful to the real apiserver and what is simplified.

#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod events;
mod fields;
pub mod http;
mod patch;
mod resource;
mod selector;
mod service;
mod store;
mod watch;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

pub use error::ApiError;
pub use resource::ResourceInfo;
pub use service::{FakeService, ResponseBody};
use store::{Managed, Store, WatchMsg};

/// The ConfigMap holding the cluster's CA bundle, which every namespace has.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// The kind of API request, for the request counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET of a collection with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH (merge, strategic merge or apply).
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

/// State shared by the server handle and every `FakeService` clone.
pub(crate) struct Inner {
    store: Mutex<Store>,
    tx: broadcast::Sender<WatchMsg>,
    unavailable: AtomicBool,
    hang: tokio::sync::watch::Sender<bool>,
    counts: Mutex<BTreeMap<Option<Verb>, u64>>,
    bookmark_interval: Mutex<Duration>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic while holding the lock only happens in a failing test; keep serving.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, verb: Option<Verb>) {
        *self.counts.lock().unwrap_or_else(|e| e.into_inner()).entry(verb).or_default() += 1;
    }

    fn bookmark_interval(&self) -> Duration {
        *self.bookmark_interval.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The fake apiserver: a shared handle to its state and test controls; cheap to clone.
#[derive(Clone)]
pub struct FakeApiServer {
    inner: Arc<Inner>,
}

impl Default for FakeApiServer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer").field("resource_version", &self.resource_version()).finish()
    }
}

impl FakeApiServer {
    /// An empty cluster with the `default`, `kube-system`, `kube-public` and `kube-node-lease` namespaces.
    pub fn new() -> Self {
        // Large enough that only a stuck watcher lags; a lagging watch gets 410 Gone.
        let (tx, _) = broadcast::channel(16 * 1024);
        let (hang, _) = tokio::sync::watch::channel(false);
        FakeApiServer {
            inner: Arc::new(Inner {
                store: Mutex::new(Store::new(tx.clone())),
                tx,
                unavailable: AtomicBool::new(false),
                hang,
                counts: Mutex::new(BTreeMap::new()),
                bookmark_interval: Mutex::new(Duration::from_secs(1)),
            }),
        }
    }

    /// Sets how often open watches get a BOOKMARK (default 1 s; the real server sends one about every minute).
    pub fn with_bookmark_interval(self, interval: Duration) -> Self {
        *self.inner.bookmark_interval.lock().unwrap_or_else(|e| e.into_inner()) = interval;
        self
    }

    /// A `kube::Client` talking to this server, and the server handle. Needs a tokio runtime.
    pub fn client(self) -> (kube::Client, FakeApiServer) {
        let client = self.new_client();
        (client, self)
    }

    /// Another independent `kube::Client` on the same server (e.g. a second leader-election candidate).
    pub fn new_client(&self) -> kube::Client {
        kube::Client::new(self.service(), "default")
    }

    /// The raw tower `Service`, for wrapping in layers.
    pub fn service(&self) -> FakeService {
        FakeService { inner: self.inner.clone() }
    }

    /// Simulates an apiserver outage: every request gets 503 and open watches end.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.inner.unavailable.store(unavailable, Ordering::SeqCst);
        if unavailable {
            let _ = self.inner.tx.send(WatchMsg::Disconnect);
        }
    }

    /// Simulates an unreachable apiserver: requests hang until this is turned off; open watches end.
    pub fn set_hanging(&self, hanging: bool) {
        self.inner.hang.send_replace(hanging);
        if hanging {
            let _ = self.inner.tx.send(WatchMsg::Disconnect);
        }
    }

    /// How many requests of this kind reached the API (requests refused by an outage are not counted).
    pub fn request_count(&self, verb: Verb) -> u64 {
        self.inner.counts.lock().unwrap_or_else(|e| e.into_inner()).get(&Some(verb)).copied().unwrap_or(0)
    }

    /// How many requests arrived in total, including failed ones.
    pub fn total_requests(&self) -> u64 {
        self.inner.counts.lock().unwrap_or_else(|e| e.into_inner()).get(&None).copied().unwrap_or(0)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.lock().rv
    }

    /// Forgets change history: watches from any resourceVersion before now get 410 Gone.
    pub fn compact(&self) {
        self.inner.lock().compact();
    }

    /// Makes every open watch that allows bookmarks send one now.
    pub fn send_bookmarks(&self) {
        let _ = self.inner.tx.send(WatchMsg::Bookmark);
    }

    /// The stored object, e.g. `get_json("v1", "services", Some("default"), "web")`.
    pub fn get_json(
        &self,
        api_version: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let (group, _) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.inner.lock().get_raw(group, plural, namespace, name)
    }

    /// Creates a `CustomResourceDefinition` (e.g. `MyKind::crd()`), after which its kinds are served.
    pub fn register_crd<T: serde::Serialize>(&self, crd: &T) -> Result<Value, ApiError> {
        let body = serde_json::to_value(crd).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let mut store = self.inner.lock();
        let t = store.target("apiextensions.k8s.io", "v1", "customresourcedefinitions", None)?;
        store.create(&t, body, "ferrolb-fakeapi", Managed::Update)
    }

    /// Registers a cluster-scoped `ferrolb.io/v1alpha1` kind through a minimal CRD.
    pub fn register_ferrolb_kind(
        &self,
        kind: &str,
        plural: &str,
        status_subresource: bool,
    ) -> Result<Value, ApiError> {
        let mut version = json!({
            "name": "v1alpha1",
            "served": true,
            "storage": true,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        });
        if status_subresource && let Some(m) = version.as_object_mut() {
            m.insert("subresources".into(), json!({"status": {}}));
        }
        self.register_crd(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.ferrolb.io")},
            "spec": {
                "group": "ferrolb.io",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                "scope": "Cluster",
                "versions": [version],
            },
        }))
    }

    /// Serves a resource type without creating a CRD object (e.g. a built-in this fake lacks).
    pub fn register_resource(&self, info: ResourceInfo) {
        self.inner.lock().register(info);
    }
}
