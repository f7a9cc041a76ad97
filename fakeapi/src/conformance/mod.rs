//! The conformance suite: the apiserver behaviour ferrolb relies on, as test bodies that
//! run unchanged against this fake (`fakeapi/tests/conformance.rs`) and against a real
//! kube-apiserver (`testbed/tests/conformance_real.rs`).
//!
//! A body talks to the server only through `kube::Api` / `kube::runtime`, in a namespace
//! of its own ([`Env`]). What a real cluster does asynchronously (garbage collection,
//! CRD establishment and cleanup) a body waits for with a bounded poll, which the fake
//! passes at once. The one server control a body needs, forgetting the change history so
//! that watches get 410 Gone ([`Backend::forget_history`]), has an equivalent on both.
//!
//! A body pins what the real apiserver does. Where the fake knowingly differs, the body is
//! a known gap ([`Body::gap`]): the fake's run asserts that it fails, so the gap stays
//! visible and a fix is noticed; the real run requires it to pass like any other.
//!
//! Behind the `conformance` feature: it is test code shipped as a library so that two
//! test crates share it.

// Test bodies fail by panicking, as tests do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod apply;
mod fixtures;
mod lifecycle;
mod objects;
mod runtime;
mod watch;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use crate::{FakeApiServer, ROOT_CA_CONFIGMAP};

/// The apiserver the bodies run against.
pub trait Backend: Send + Sync {
    /// What the report calls it.
    fn name(&self) -> String;

    /// A new client with the admin's rights, with connections of its own.
    fn client(&self) -> kube::Client;

    /// Makes the server forget its change history up to now, so that a watch from an
    /// older resourceVersion gets 410 Gone: the fake compacts; a real apiserver can be
    /// restarted, after which its watch cache begins at the current revision.
    fn forget_history(&self) -> BoxFuture<'_, ()>;
}

impl Backend for FakeApiServer {
    fn name(&self) -> String {
        "ferrolb-fakeapi".into()
    }

    fn client(&self) -> kube::Client {
        self.new_client()
    }

    fn forget_history(&self) -> BoxFuture<'_, ()> {
        Box::pin(async { self.compact() })
    }
}

/// What a body sees: a client, a fresh namespace of its own, and the server's one control.
pub struct Env {
    backend: Arc<dyn Backend>,
    client: kube::Client,
    ns: String,
}

impl Env {
    /// Creates namespace `ns` and waits until the cluster has set it up.
    pub async fn new(backend: Arc<dyn Backend>, ns: &str) -> Env {
        let client = backend.client();
        let namespace = Namespace {
            metadata: ObjectMeta { name: Some(ns.into()), ..Default::default() },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {ns}: {e}"));
        // kube-controller-manager adds these to every namespace; pods need the ServiceAccount.
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
        crate::wait::until(&format!("namespace {ns} set up"), || async {
            let ca = cms.get_opt(ROOT_CA_CONFIGMAP).await.unwrap().is_some();
            let sa = sas.get_opt("default").await.unwrap().is_some();
            (ca && sa).then_some(())
        })
        .await;
        Env { backend, client, ns: ns.into() }
    }

    /// The body's client.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Another independent client (another process, in a real cluster).
    pub fn new_client(&self) -> kube::Client {
        self.backend.client()
    }

    /// The body's namespace.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// A name for a cluster-scoped object that no other body uses.
    pub fn unique(&self, name: &str) -> String {
        format!("{}-{name}", self.ns)
    }

    /// An API for kind `K` in the body's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client(), &self.ns)
    }

    /// See [`Backend::forget_history`].
    pub async fn forget_history(&self) {
        self.backend.forget_history().await;
    }
}

/// One conformance test body.
#[derive(Debug)]
pub struct Body {
    /// Its name, also the name of its test on the fake.
    pub name: &'static str,
    /// The body itself.
    pub run: for<'a> fn(&'a Env) -> BoxFuture<'a, ()>,
    /// Why the fake fails it, when it is a known gap (listed in `fakeapi/README.md` too).
    pub gap: Option<&'static str>,
}

macro_rules! bodies {
    ($($module:ident :: $name:ident $(gap $reason:literal)?),* $(,)?) => {
        /// Every body, in the order a real cluster runs them.
        pub const BODIES: &[Body] = &[$(Body {
            name: stringify!($name),
            run: |env| Box::pin($module::$name(env)),
            gap: bodies!(@gap $($reason)?),
        }),*];
    };
    (@gap $reason:literal) => { Some($reason) };
    (@gap) => { None };
}

bodies![
    objects::resource_version_increases_on_every_write,
    objects::builtin_kinds_are_served_at_their_real_paths,
    objects::pods_by_node_and_resource_version_guarded_status_patches,
    objects::resource_version_guarded_service_status_and_metadata_patches,
    objects::stale_update_conflicts_and_missing_update_is_not_found,
    objects::create_twice_is_already_exists,
    objects::generate_name_and_missing_namespace,
    objects::status_subresource_is_kept_apart_from_spec,
    objects::lease_concurrent_takeover_conflicts,
    objects::events_can_be_created_in_both_apis,
    apply::server_side_apply_tracks_managers_and_force_wins,
    apply::fields_changed_by_an_update_conflict_with_a_later_apply,
    apply::apply_to_status_touches_only_status,
    apply::apply_removes_fields_its_manager_stopped_setting,
    apply::apply_merges_keyed_lists_element_by_element
        gap "server-side apply treats lists as atomic: no merging by x-kubernetes-list-map-keys",
    apply::an_applied_empty_map_stays_owned_after_the_server_drops_it
        gap "the fake keeps empty maps and lets an applied empty map claim no field",
    watch::watch_from_a_resource_version_sees_later_events_in_order,
    watch::watch_lines_begin_with_their_type,
    watch::watch_from_a_compacted_resource_version_is_gone,
    watch::bookmarks_arrive,
    watch::label_and_field_selectors_filter_lists_and_watches,
    runtime::watcher_relists_after_410,
    runtime::reflector_store_follows_the_api,
    runtime::kube_runtime_controller_reconciles,
    runtime::kube_runtime_finalizer_helper_round_trip,
    lifecycle::owner_reference_garbage_collection,
    lifecycle::finalizers_hold_deletion_until_removed,
    lifecycle::custom_resources_are_served_after_crd_registration,
];

/// The body called `name`.
pub fn body(name: &str) -> &'static Body {
    BODIES.iter().find(|b| b.name == name).unwrap_or_else(|| panic!("no conformance body {name}"))
}

/// The namespace a body runs in: its name, as a DNS label.
pub fn namespace_for(body: &str) -> String {
    let mut ns: String = body.replace('_', "-").chars().take(63).collect();
    while ns.ends_with('-') {
        ns.pop();
    }
    ns
}

/// Runs `body` in a fresh namespace of its own.
async fn run(backend: Arc<dyn Backend>, body: &Body) {
    let env = Env::new(backend, &namespace_for(body.name)).await;
    (body.run)(&env).await;
}

/// Runs body `name` against a fresh fake, panicking as it fails (one test per body); a
/// known gap must fail, and its test fails if it passes.
pub async fn run_on_fake(name: &str) {
    let b = body(name);
    let run = run(Arc::new(FakeApiServer::new()), b);
    let Some(gap) = b.gap else { return run.await };
    match AssertUnwindSafe(run).catch_unwind().await {
        Ok(()) => panic!("{name} passes on the fake now: remove its known gap ({gap})"),
        Err(panic) => eprintln!("{name}: known gap ({gap}): {}", panic_message(panic.as_ref())),
    }
}

/// How one body went.
#[derive(Debug)]
pub struct Outcome {
    /// The body.
    pub body: &'static Body,
    /// How long it took, namespace setup included.
    pub took: Duration,
    /// `Err(panic message)` when it failed.
    pub result: Result<(), String>,
}

/// Runs every body in turn against `backend`, each in its own namespace and within
/// `timeout`; a failing body does not stop the others.
pub async fn run_all(backend: Arc<dyn Backend>, timeout: Duration) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for body in BODIES {
        let start = Instant::now();
        let run = AssertUnwindSafe(run(backend.clone(), body)).catch_unwind();
        let result = match tokio::time::timeout(timeout, run).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(panic)) => Err(panic_message(panic.as_ref())),
            Err(_) => Err(format!("did not finish within {timeout:?}")),
        };
        outcomes.push(Outcome { body, took: start.elapsed(), result });
    }
    outcomes
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<String>(), panic.downcast_ref::<&str>()) {
        (Some(s), _) => s.clone(),
        (None, Some(s)) => (*s).to_string(),
        (None, None) => "a panic without a message".into(),
    }
}
