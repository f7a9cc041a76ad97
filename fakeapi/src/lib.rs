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
pub use ferrolb_testkit::wait;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

pub use error::ApiError;
pub use resource::ResourceInfo;
pub use service::{FakeService, ResponseBody};
pub use store::ROOT_CA_CONFIGMAP;
use store::{Managed, Store, WatchMsg};

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

/// Who is being kept waiting: every client, or the clients with these tags; and whose
/// link is slow (their requests are held on the wire, see [`FakeApiServer::set_delaying_for`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Hang {
    all: bool,
    clients: BTreeSet<String>,
    delayed: BTreeSet<String>,
}

impl Hang {
    fn holds(&self, client: Option<&str>) -> bool {
        self.all || client.is_some_and(|c| self.clients.contains(c) || self.delayed.contains(c))
    }

    fn delays(&self, client: Option<&str>) -> bool {
        client.is_some_and(|c| self.delayed.contains(c))
    }
}

/// One request in the log ([`FakeApiServer::with_request_log`]). `sent` and `answered`
/// come from one counter, so they order requests of different clients against each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRequest {
    /// The tag of the client that sent it ([`FakeApiServer::new_client_tagged`]); `None` if untagged.
    pub client: Option<String>,
    /// What kind of request; `None` for paths outside the REST API (e.g. `/version`).
    pub verb: Option<Verb>,
    /// The request path, without the query.
    pub path: String,
    /// The query as sent (percent-encoded; empty without one).
    pub query: String,
    /// Its place in the log when it reached the server, before any hang held it.
    pub sent: u64,
    /// Its place in the log when the server answered, and the HTTP status; `None` while
    /// it waits, and for good if the client gave up waiting (it was then never served).
    pub answered: Option<(u64, u16)>,
}

impl LoggedRequest {
    /// Whether it is a write: create, update, patch or delete.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb,
            Some(Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection)
        )
    }

    /// Whether the server carried it out (answered 2xx).
    pub fn succeeded(&self) -> bool {
        self.answered.is_some_and(|(_, code)| (200..300).contains(&code))
    }
}

/// The request log and its sequence counter.
#[derive(Debug, Default)]
struct RequestLog {
    on: bool,
    seq: u64,
    entries: Vec<LoggedRequest>,
}

/// State shared by the server handle and every `FakeService` clone.
pub(crate) struct Inner {
    store: Mutex<Store>,
    tx: broadcast::Sender<WatchMsg>,
    unavailable: AtomicBool,
    hang: tokio::sync::watch::Sender<Hang>,
    counts: Mutex<BTreeMap<Option<Verb>, u64>>,
    bookmark_interval: Mutex<Duration>,
    log: Mutex<RequestLog>,
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

    fn request_log(&self) -> MutexGuard<'_, RequestLog> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Logs a request as it arrives; returns its index for [`Inner::log_answered`].
    fn log_sent(&self, client: Option<&str>, verb: Option<Verb>, path: &str, query: &str) -> Option<usize> {
        let mut log = self.request_log();
        if !log.on {
            return None;
        }
        log.seq += 1;
        let sent = log.seq;
        log.entries.push(LoggedRequest {
            client: client.map(String::from),
            verb,
            path: path.to_owned(),
            query: query.to_owned(),
            sent,
            answered: None,
        });
        Some(log.entries.len() - 1)
    }

    fn log_answered(&self, entry: Option<usize>, code: u16) {
        let Some(i) = entry else { return };
        let mut log = self.request_log();
        log.seq += 1;
        let seq = log.seq;
        if let Some(e) = log.entries.get_mut(i) {
            e.answered = Some((seq, code));
        }
    }

    /// Whether requests of this client arriving now are held on the wire (see
    /// [`FakeApiServer::set_delaying_for`]).
    fn delays(&self, client: Option<&str>) -> bool {
        self.hang.borrow().delays(client)
    }

    /// Waits while requests of this client are held (see [`FakeApiServer::set_hanging`]).
    async fn wait_while_hanging(&self, client: Option<&str>) {
        let mut hang = self.hang.subscribe();
        let _ = hang.wait_for(|h| !h.holds(client)).await;
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
        let (hang, _) = tokio::sync::watch::channel(Hang::default());
        FakeApiServer {
            inner: Arc::new(Inner {
                store: Mutex::new(Store::new(tx.clone())),
                tx,
                unavailable: AtomicBool::new(false),
                hang,
                counts: Mutex::new(BTreeMap::new()),
                bookmark_interval: Mutex::new(Duration::from_secs(1)),
                log: Mutex::new(RequestLog::default()),
            }),
        }
    }

    /// Sets how often open watches get a BOOKMARK (default 1 s; the real server sends one about every minute).
    pub fn with_bookmark_interval(self, interval: Duration) -> Self {
        *self.inner.bookmark_interval.lock().unwrap_or_else(|e| e.into_inner()) = interval;
        self
    }

    /// Logs every request from now on ([`FakeApiServer::request_log`]); off by default, as
    /// the log grows with every request.
    pub fn with_request_log(self) -> Self {
        self.inner.request_log().on = true;
        self
    }

    /// Every request since [`FakeApiServer::with_request_log`], in the order they arrived.
    pub fn request_log(&self) -> Vec<LoggedRequest> {
        self.inner.request_log().entries.clone()
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

    /// Another independent client whose requests carry `tag`: [`FakeApiServer::set_hanging_for`]
    /// holds them alone, and the request log names it (e.g. one leader-election candidate).
    pub fn new_client_tagged(&self, tag: &str) -> kube::Client {
        kube::Client::new(self.service_tagged(tag), "default")
    }

    /// The raw tower `Service`, for wrapping in layers.
    pub fn service(&self) -> FakeService {
        FakeService { inner: self.inner.clone(), client: None }
    }

    /// The raw tower `Service` of a tagged client (see [`FakeApiServer::new_client_tagged`]).
    pub fn service_tagged(&self, tag: &str) -> FakeService {
        FakeService { inner: self.inner.clone(), client: Some(tag.into()) }
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
        self.inner.hang.send_modify(|h| h.all = hanging);
        if hanging {
            let _ = self.inner.tx.send(WatchMsg::Disconnect);
        }
    }

    /// Simulates an apiserver that stops answering one client (as when API Priority and
    /// Fairness queues one user's requests): new requests of the clients tagged `client`
    /// hang until this is turned off; their open watches keep streaming, and every other
    /// client is served as usual.
    pub fn set_hanging_for(&self, client: &str, hanging: bool) {
        self.inner.hang.send_modify(|h| {
            if hanging {
                h.clients.insert(client.to_owned());
            } else {
                h.clients.remove(client);
            }
        });
    }

    /// Simulates a slow link from one client, or a client paused right after sending (a
    /// leader stopped mid-write): requests of the clients tagged `client` that arrive
    /// meanwhile are held on the wire and served when this is turned off, *even if the
    /// client gave up waiting* (a request [`FakeApiServer::set_hanging_for`] holds is never
    /// served once abandoned). Their open watches keep streaming; other clients are served.
    pub fn set_delaying_for(&self, client: &str, delaying: bool) {
        self.inner.hang.send_modify(|h| {
            if delaying {
                h.delayed.insert(client.to_owned());
            } else {
                h.delayed.remove(client);
            }
        });
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
}
