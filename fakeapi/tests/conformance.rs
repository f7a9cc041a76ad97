//! Conformance tests: the apiserver behaviour ferrolb relies on, pinned.
//!
//! Written only against `kube::Api` / `kube::runtime`, so they could run against a real cluster:
//! only `cluster()` and the few `fake.*()` calls marked "fake-only" know about the fake.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, ObjectReference, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use ferrolb_fakeapi::FakeApiServer;

/// The cluster under test.
fn cluster() -> (Client, FakeApiServer) {
    FakeApiServer::new().client()
}

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    }
}

fn service(name: &str) -> Service {
    Service {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort { port: 80, ..Default::default() }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn rv<K: Resource>(k: &K) -> u64 {
    k.meta().resource_version.as_deref().unwrap().parse().unwrap()
}

fn api_code(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

async fn next_event<K>(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("watch event in time")
        .unwrap()
        .unwrap()
}

/// Next event that is not a bookmark.
async fn next_change<K>(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    loop {
        match next_event(stream).await {
            WatchEvent::Bookmark(_) => continue,
            other => return other,
        }
    }
}

#[tokio::test]
async fn resource_version_increases_on_every_write() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let b = cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    assert!(rv(&b) > rv(&a));
    let mut a2 = a.clone();
    a2.data = Some([("k".to_string(), "changed".to_string())].into());
    let a2 = cms.replace("a", &PostParams::default(), &a2).await.unwrap();
    assert!(rv(&a2) > rv(&b));
    let list = cms.list(&ListParams::default()).await.unwrap();
    let list_rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_rv >= rv(&a2));
    // Server-set metadata.
    assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
    assert_eq!(a.metadata.namespace.as_deref(), Some("default"));
}

async fn round_trip<K>(api: Api<K>, name: &str)
where
    K: Resource + Clone + serde::de::DeserializeOwned + Serialize + std::fmt::Debug + Default,
{
    let mut obj = K::default();
    obj.meta_mut().name = Some(name.into());
    let made = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(api.get(name).await.unwrap().meta().uid, made.meta().uid);
    assert_eq!(
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|o| o.meta().name.as_deref() == Some(name))
            .count(),
        1
    );
}

#[tokio::test]
async fn builtin_kinds_are_served_at_their_real_paths() {
    use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let (client, _fake) = cluster();
    round_trip(Api::<Namespace>::all(client.clone()), "ferrolb-system").await;
    round_trip(Api::<Node>::all(client.clone()), "node-1").await;
    round_trip(Api::<Pod>::namespaced(client.clone(), "ferrolb-system"), "speaker-x").await;
    round_trip(Api::<Secret>::namespaced(client.clone(), "ferrolb-system"), "bgp-passwords").await;
    round_trip(Api::<Service>::default_namespaced(client.clone()), "web").await;
    round_trip(Api::<Lease>::namespaced(client.clone(), "kube-node-lease"), "node-1").await;
    let slices: Api<EndpointSlice> = Api::default_namespaced(client);
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.0.5"], "nodeName": "node-1", "conditions": {"ready": true}}],
    }))
    .unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();
    let by_service =
        slices.list(&ListParams::default().labels("kubernetes.io/service-name=web")).await.unwrap();
    assert_eq!(by_service.items[0].endpoints[0].node_name.as_deref(), Some("node-1"));
}

/// What the speaker's readiness gate relies on: its node's pods by the field selector
/// `spec.nodeName` (list and watch), and pods/status merge patches guarded by
/// `metadata.resourceVersion` (a stale one is 409 and changes nothing; spec is ignored).
#[tokio::test]
async fn pods_by_node_and_resource_version_guarded_status_patches() {
    use k8s_openapi::api::core::v1::Pod;
    let (client, _fake) = cluster();
    let pods: Api<Pod> = Api::default_namespaced(client);
    let pod = |name: &str, node: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/app"}],
                     "readinessGates": [{"conditionType": "ferrolb.io/load-balancer-ready"}]},
        }))
        .unwrap()
    };
    pods.create(&PostParams::default(), &pod("a", "node1")).await.unwrap();
    pods.create(&PostParams::default(), &pod("b", "node2")).await.unwrap();
    let on_node1 = ListParams::default().fields("spec.nodeName=node1");
    let listed = pods.list(&on_node1).await.unwrap();
    assert_eq!(listed.items.iter().map(|p| p.name_any()).collect::<Vec<_>>(), ["a"]);
    let start = listed.metadata.resource_version.unwrap();
    let mut stream =
        pods.watch(&WatchParams::default().fields("spec.nodeName=node1"), &start).await.unwrap().boxed();

    let a = pods.get("a").await.unwrap();
    let cond = |status: &str| json!({"type": "ferrolb.io/load-balancer-ready", "status": status, "reason": "R", "message": "m"});
    let guarded = |rv: &str, status: &str| {
        Patch::Merge(json!({
            "metadata": {"resourceVersion": rv},
            "status": {"conditions": [cond(status)]},
            "spec": {"nodeName": "elsewhere"},
        }))
    };
    let pp = PatchParams::default();
    let rv_a = a.metadata.resource_version.clone().unwrap();
    let written = pods.patch_status("a", &pp, &guarded(&rv_a, "False")).await.unwrap();
    let conds = written.status.as_ref().unwrap().conditions.as_ref().unwrap();
    assert_eq!((conds.len(), conds[0].status.as_str()), (1, "False"));
    assert_eq!(
        written.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node1"),
        "spec via /status ignored"
    );
    let err = pods.patch_status("a", &pp, &guarded(&rv_a, "True")).await.unwrap_err();
    assert_eq!(api_code(err).0, 409, "stale resourceVersion");
    let now = pods.get("a").await.unwrap();
    assert_eq!(now.status.unwrap().conditions.unwrap()[0].status, "False", "the stale patch changed nothing");
    // Only node1's pod shows up in its watch.
    pods.patch_status("b", &pp, &Patch::Merge(json!({"status": {"conditions": [cond("True")]}})))
        .await
        .unwrap();
    match next_change(&mut stream).await {
        WatchEvent::Modified(p) => assert_eq!(p.name_any(), "a"),
        other => panic!("expected MODIFIED a, got {other:?}"),
    }
    let quiet = tokio::time::timeout(Duration::from_millis(200), next_change(&mut stream)).await;
    assert!(quiet.is_err(), "node2's pod leaked into node1's watch: {quiet:?}");
}

#[tokio::test]
async fn stale_update_conflicts_and_missing_update_is_not_found() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let original = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let mut first = original.clone();
    first.data = Some([("k".to_string(), "1".to_string())].into());
    cms.replace("a", &PostParams::default(), &first).await.unwrap();
    let mut second = original.clone();
    second.data = Some([("k".to_string(), "2".to_string())].into());
    let err = cms.replace("a", &PostParams::default(), &second).await.unwrap_err();
    assert_eq!(api_code(err), (409, "Conflict".into()));
    assert_eq!(cms.get("a").await.unwrap().data.unwrap()["k"], "1");

    let err = cms.replace("absent", &PostParams::default(), &cm("absent", &[])).await.unwrap_err();
    assert_eq!(api_code(err).0, 404);
}

#[tokio::test]
async fn create_twice_is_already_exists() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let err = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap_err();
    assert_eq!(api_code(err), (409, "AlreadyExists".into()));
}

#[tokio::test]
async fn generate_name_and_missing_namespace() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut c = cm("", &[]);
    c.metadata.name = None;
    c.metadata.generate_name = Some("pool-".into());
    let made = cms.create(&PostParams::default(), &c).await.unwrap();
    assert!(made.name_any().starts_with("pool-") && made.name_any().len() > "pool-".len());
    let elsewhere: Api<ConfigMap> = Api::namespaced(client, "no-such-namespace");
    let err = elsewhere.create(&PostParams::default(), &cm("a", &[])).await.unwrap_err();
    assert_eq!(api_code(err).0, 404);
}

#[tokio::test]
async fn status_subresource_is_kept_apart_from_spec() {
    let (client, _fake) = cluster();
    let svcs: Api<Service> = Api::default_namespaced(client);
    let mut s = service("web");
    s.status =
        Some(serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "10.0.0.1"}]}})).unwrap());
    let created = svcs.create(&PostParams::default(), &s).await.unwrap();
    let no_ingress = |s: &Service| {
        s.status
            .as_ref()
            .and_then(|st| st.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .is_none()
    };
    assert!(no_ingress(&created), "status on create is ignored");
    let generation = created.metadata.generation.unwrap();

    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}, "spec": {"ports": [{"port": 9999}]}});
    let after = svcs.patch_status("web", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    assert_eq!(
        after.status.unwrap().load_balancer.unwrap().ingress.unwrap()[0].ip.as_deref(),
        Some("192.0.2.10")
    );
    assert_eq!(
        after.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
        80,
        "spec via /status is ignored"
    );
    assert_eq!(after.metadata.generation, Some(generation), "status writes do not bump generation");

    let mut main = svcs.get("web").await.unwrap();
    main.status = None;
    main.spec.as_mut().unwrap().ports = Some(vec![ServicePort { port: 443, ..Default::default() }]);
    let replaced = svcs.replace("web", &PostParams::default(), &main).await.unwrap();
    assert_eq!(replaced.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port, 443);
    assert!(!no_ingress(&replaced), "status survives a main-resource write");
    assert_eq!(replaced.metadata.generation, Some(generation + 1), "spec writes bump generation");
}

#[tokio::test]
async fn server_side_apply_tracks_managers_and_force_wins() {
    let (client, _fake) = cluster();
    let svcs: Api<Service> = Api::default_namespaced(client);
    let apply = |port: i32, extra: serde_json::Value| {
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "labels": extra},
            "spec": {"type": "LoadBalancer", "ports": [{"port": port}]},
        })
    };
    // Apply creates.
    let created =
        svcs.patch("web", &PatchParams::apply("alice"), &Patch::Apply(apply(80, json!({})))).await.unwrap();
    let managers: Vec<_> =
        created.metadata.managed_fields.unwrap().into_iter().map(|m| m.manager.unwrap()).collect();
    assert_eq!(managers, vec!["alice".to_string()]);

    // Bob wants another value for a field Alice owns: conflict.
    let err = svcs
        .patch("web", &PatchParams::apply("bob"), &Patch::Apply(apply(8080, json!({}))))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else { panic!("expected a Status") };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(status.message.contains("alice"), "{}", status.message);

    // Same value: shared ownership, no conflict.
    svcs.patch("web", &PatchParams::apply("bob"), &Patch::Apply(apply(80, json!({})))).await.unwrap();

    // Force takes the field over.
    let forced = svcs
        .patch("web", &PatchParams::apply("bob").force(), &Patch::Apply(apply(8080, json!({}))))
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().ports.unwrap()[0].port, 8080);

    // Alice applying again without the field she no longer owns keeps Bob's value.
    let alice_again = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "labels": {"owner": "alice"}}});
    let after = svcs.patch("web", &PatchParams::apply("alice"), &Patch::Apply(alice_again)).await.unwrap();
    assert_eq!(after.spec.unwrap().ports.unwrap()[0].port, 8080);
    assert_eq!(after.metadata.labels.unwrap()["owner"], "alice");
}

#[tokio::test]
async fn fields_changed_by_an_update_conflict_with_a_later_apply() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let applied =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    cms.patch("c", &PatchParams::apply("alice"), &Patch::Apply(&applied)).await.unwrap();
    // An ordinary (non-apply) write by another manager takes ownership of what it changed.
    let pp = PatchParams { field_manager: Some("kubectl-edit".into()), ..Default::default() };
    cms.patch("c", &pp, &Patch::Merge(json!({"data": {"a": "edited"}}))).await.unwrap();
    let err = cms.patch("c", &PatchParams::apply("alice"), &Patch::Apply(&applied)).await.unwrap_err();
    assert_eq!(api_code(err), (409, "Conflict".into()));
    let ops: Vec<_> = cms
        .get("c")
        .await
        .unwrap()
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.operation.unwrap()))
        .collect();
    assert!(ops.contains(&("kubectl-edit".into(), "Update".into())), "{ops:?}");
}

#[tokio::test]
async fn apply_to_status_touches_only_status() {
    let (client, _fake) = cluster();
    let svcs: Api<Service> = Api::default_namespaced(client);
    svcs.create(&PostParams::default(), &service("web")).await.unwrap();
    let status = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 1}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}},
    });
    let pp = PatchParams::apply("ferrolb-controller").force();
    let after = svcs.patch_status("web", &pp, &Patch::Apply(&status)).await.unwrap();
    assert_eq!(
        after.status.unwrap().load_balancer.unwrap().ingress.unwrap()[0].ip.as_deref(),
        Some("192.0.2.10")
    );
    assert_eq!(after.spec.unwrap().ports.unwrap()[0].port, 80);
    let entry = after
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("ferrolb-controller"))
        .expect("a managedFields entry for the status manager");
    assert_eq!((entry.operation.as_deref(), entry.subresource.as_deref()), (Some("Apply"), Some("status")));
}

#[tokio::test]
async fn apply_removes_fields_its_manager_stopped_setting() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let two = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
    cms.patch("c", &PatchParams::apply("m"), &Patch::Apply(two)).await.unwrap();
    let one = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let after = cms.patch("c", &PatchParams::apply("m"), &Patch::Apply(one)).await.unwrap();
    assert_eq!(after.data.unwrap().len(), 1);
}

#[tokio::test]
async fn watch_from_a_resource_version_sees_later_events_in_order() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    // Changes made before the watch opens, but after its resourceVersion, are replayed.
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    let mut stream =
        cms.watch(&WatchParams::default().timeout(30), &rv(&a).to_string()).await.unwrap().boxed();
    cms.patch("b", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "2"}}))).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(match next_change(&mut stream).await {
            WatchEvent::Added(o) => ("ADDED", o.name_any(), rv(&o)),
            WatchEvent::Modified(o) => ("MODIFIED", o.name_any(), rv(&o)),
            WatchEvent::Deleted(o) => ("DELETED", o.name_any(), rv(&o)),
            other => panic!("unexpected {other:?}"),
        });
    }
    let kinds: Vec<_> = seen.iter().map(|(t, n, _)| (*t, n.as_str())).collect();
    assert_eq!(kinds, vec![("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a")]);
    assert!(seen.windows(2).all(|w| w[0].2 < w[1].2), "resourceVersions increase: {seen:?}");
}

#[tokio::test]
async fn watch_from_a_compacted_resource_version_is_gone() {
    let (client, fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    fake.compact(); // fake-only: a real cluster compacts on its own schedule.
    let mut stream = cms.watch(&WatchParams::default(), &rv(&a).to_string()).await.unwrap().boxed();
    match next_event(&mut stream).await {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

#[tokio::test]
async fn watcher_relists_after_410() {
    let (client, fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    // Without bookmarks and with a short server timeout, the watcher re-watches from the last RV it saw.
    let cfg = watcher::Config::default().timeout(1).disable_bookmarks();
    let mut events = watcher(cms.clone(), cfg).boxed();
    let mut next =
        async || tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap().unwrap();
    assert!(matches!(next().await, Ok(watcher::Event::Init)));
    assert!(matches!(next().await, Ok(watcher::Event::InitApply(o)) if o.name_any() == "a"));
    assert!(matches!(next().await, Ok(watcher::Event::InitDone)));
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    assert!(matches!(next().await, Ok(watcher::Event::Apply(o)) if o.name_any() == "b"));

    // A write this watcher does not see, then compaction past its resourceVersion.
    Api::<ConfigMap>::namespaced(client, "kube-system")
        .create(&PostParams::default(), &cm("x", &[]))
        .await
        .unwrap();
    fake.compact(); // fake-only
    match next().await {
        Err(watcher::Error::WatchError(e)) => assert_eq!(e.code, 410),
        other => panic!("expected a 410 watch error, got {other:?}"),
    }
    assert!(matches!(next().await, Ok(watcher::Event::Init)));
    let mut names = Vec::new();
    loop {
        match next().await {
            Ok(watcher::Event::InitApply(o)) => names.push(o.name_any()),
            Ok(watcher::Event::InitDone) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(names, vec!["a", "b"]);
}

#[tokio::test]
async fn reflector_store_follows_the_api() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(cms.clone(), watcher::Config::default())).applied_objects();
    let task = tokio::spawn(stream.try_for_each(|_| async { Ok(()) }));
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready()).await.unwrap().unwrap();
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        while reader.state().iter().map(|o| o.name_any()).collect::<Vec<_>>() != vec!["b".to_string()] {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    task.abort();
}

#[tokio::test]
async fn bookmarks_arrive() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let mut stream =
        cms.watch(&WatchParams::default().timeout(120), &rv(&a).to_string()).await.unwrap().boxed();
    // A real apiserver sends one about every minute; the fake every second by default.
    let deadline = Duration::from_secs(90);
    let bookmark = tokio::time::timeout(deadline, async {
        loop {
            if let WatchEvent::Bookmark(b) = stream.next().await.unwrap().unwrap() {
                return b;
            }
        }
    })
    .await
    .unwrap();
    assert!(bookmark.metadata.resource_version.parse::<u64>().unwrap() >= rv(&a));
}

#[tokio::test]
async fn label_and_field_selectors_filter_lists_and_watches() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    for (n, app, tier) in [("a", "web", "front"), ("b", "web", "back"), ("c", "db", "back")] {
        cms.create(&PostParams::default(), &cm(n, &[("app", app), ("tier", tier)])).await.unwrap();
    }
    let names = |sel: &'static str| {
        let cms = cms.clone();
        async move {
            cms.list(&ListParams::default().labels(sel))
                .await
                .unwrap()
                .items
                .iter()
                .map(|o| o.name_any())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(names("app=web").await, vec!["a", "b"]);
    assert_eq!(names("app=web,tier=back").await, vec!["b"]);
    assert_eq!(names("app in (db, cache)").await, vec!["c"]);
    assert_eq!(names("app!=web").await, vec!["c"]);
    assert_eq!(names("!tier").await, Vec::<String>::new());
    let by_name = cms.list(&ListParams::default().fields("metadata.name=b")).await.unwrap();
    assert_eq!(by_name.items.iter().map(|o| o.name_any()).collect::<Vec<_>>(), vec!["b"]);

    // Paging returns every item exactly once.
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    let token = first.metadata.continue_.clone().expect("a continue token");
    let second = cms.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    let paged: Vec<_> = first.items.iter().chain(&second.items).map(|o| o.name_any()).collect();
    assert_eq!(paged, vec!["a", "b", "c"]);
    assert!(second.metadata.continue_.is_none_or(|c| c.is_empty()));

    // Pages form one list: later pages report the first page's resourceVersion, so a watch
    // from it sees changes made while paging — here an object sorting before the token,
    // which no later page can show (kube's watcher pages by 500 and watches from the last
    // page's resourceVersion; without this it lost such objects for good).
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    let first_rv = first.metadata.resource_version.clone().unwrap();
    let token = first.metadata.continue_.clone().expect("a continue token");
    cms.create(&PostParams::default(), &cm("aa", &[])).await.unwrap();
    let second = cms.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    assert_eq!(second.metadata.resource_version.as_deref(), Some(first_rv.as_str()));
    assert!(second.items.iter().all(|o| o.name_any() != "aa"), "sorts before the token");
    let mut stream = cms.watch(&WatchParams::default(), &first_rv).await.unwrap().boxed();
    match next_change(&mut stream).await {
        WatchEvent::Added(o) => assert_eq!(o.name_any(), "aa"),
        other => panic!("expected ADDED aa, got {other:?}"),
    }
    cms.delete("aa", &DeleteParams::default()).await.unwrap();

    // A watch with a selector sees an object leave the selection as DELETED.
    let start = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = cms.watch(&WatchParams::default().labels("app=web"), &start).await.unwrap().boxed();
    cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})))
        .await
        .unwrap();
    assert!(matches!(next_change(&mut stream).await, WatchEvent::Deleted(o) if o.name_any() == "a"));

    // Collection delete honours the selector.
    cms.delete_collection(&DeleteParams::default(), &ListParams::default().labels("tier=back"))
        .await
        .unwrap();
    let left: Vec<_> =
        cms.list(&ListParams::default()).await.unwrap().items.iter().map(|o| o.name_any()).collect();
    assert_eq!(left, vec!["a"]);
}

fn owned_by(name: &str, owner: &Service) -> ConfigMap {
    let mut c = cm(name, &[]);
    c.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: owner.name_any(),
        uid: owner.metadata.uid.clone().unwrap(),
        ..Default::default()
    }]);
    c
}

async fn eventually_gone(cms: &Api<ConfigMap>, name: &str) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while cms.get_opt(name).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{name} was not garbage-collected"));
}

#[tokio::test]
async fn owner_reference_garbage_collection() {
    let (client, _fake) = cluster();
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let web = svcs.create(&PostParams::default(), &service("web")).await.unwrap();
    let other = svcs.create(&PostParams::default(), &service("other")).await.unwrap();
    cms.create(&PostParams::default(), &owned_by("dependent", &web)).await.unwrap();
    let mut two_owners = owned_by("shared", &web);
    two_owners
        .metadata
        .owner_references
        .as_mut()
        .unwrap()
        .extend(owned_by("x", &other).metadata.owner_references.unwrap());
    cms.create(&PostParams::default(), &two_owners).await.unwrap();
    cms.create(&PostParams::default(), &cm("unrelated", &[])).await.unwrap();

    svcs.delete("web", &DeleteParams::default()).await.unwrap();
    eventually_gone(&cms, "dependent").await;
    let shared = cms.get("shared").await.unwrap();
    assert_eq!(shared.metadata.owner_references.unwrap().len(), 1, "the surviving owner keeps it alive");
    assert!(cms.get_opt("unrelated").await.unwrap().is_some());

    // Orphan propagation keeps dependents.
    cms.create(&PostParams::default(), &owned_by("orphan", &other)).await.unwrap();
    svcs.delete("other", &DeleteParams::orphan()).await.unwrap();
    assert!(cms.get_opt("orphan").await.unwrap().is_some());
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let mut c = cm("held", &[]);
    c.metadata.finalizers = Some(vec!["ferrolb.io/cleanup".into()]);
    cms.create(&PostParams::default(), &c).await.unwrap();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let held = cms.get("held").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    cms.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .unwrap();
    assert!(cms.get_opt("held").await.unwrap().is_none());
}

#[derive(Debug, thiserror::Error)]
#[error("never fails")]
struct NeverFails;

#[tokio::test]
async fn kube_runtime_controller_reconciles() {
    use kube::runtime::controller::{Action, Controller};
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let reconcile = |obj: std::sync::Arc<ConfigMap>, api: std::sync::Arc<Api<ConfigMap>>| async move {
        let patch = json!({"metadata": {"annotations": {"ferrolb.io/seen": "yes"}}});
        api.patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await?;
        Ok::<_, kube::Error>(Action::await_change())
    };
    let controller = Controller::new(cms.clone(), watcher::Config::default())
        .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), std::sync::Arc::new(cms.clone()))
        .for_each(|_| async {});
    let task = tokio::spawn(controller);
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let list = cms.list(&ListParams::default()).await.unwrap();
            if list.items.iter().all(|o| o.annotations().contains_key("ferrolb.io/seen")) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the controller annotated both objects");
    task.abort();
}

#[tokio::test]
async fn kube_runtime_finalizer_helper_round_trip() {
    use kube::runtime::controller::Action;
    use kube::runtime::finalizer::{Event as Fin, finalizer};
    let (client, _fake) = cluster();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(&PostParams::default(), &cm("guarded", &[])).await.unwrap();
    let run = |seen: std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>| {
        let cms = cms.clone();
        async move {
            let obj = std::sync::Arc::new(cms.get("guarded").await.unwrap());
            finalizer(&cms, "ferrolb.io/cleanup", obj, |ev| async move {
                seen.lock().unwrap().push(match ev {
                    Fin::Apply(_) => "apply",
                    Fin::Cleanup(_) => "cleanup",
                });
                Ok::<_, NeverFails>(Action::await_change())
            })
            .await
            .unwrap();
        }
    };
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    run(seen.clone()).await; // adds the finalizer (JSON patch with a `test` op)
    assert_eq!(cms.get("guarded").await.unwrap().metadata.finalizers.unwrap(), vec!["ferrolb.io/cleanup"]);
    run(seen.clone()).await; // reconciles
    cms.delete("guarded", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("guarded").await.unwrap().is_some(), "held by the finalizer");
    run(seen.clone()).await; // cleans up and removes the finalizer
    assert!(cms.get_opt("guarded").await.unwrap().is_none());
    assert_eq!(*seen.lock().unwrap(), vec!["apply", "cleanup"]);

    // A JSON patch whose `test` fails changes nothing.
    cms.create(&PostParams::default(), &cm("other", &[])).await.unwrap();
    let stale: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/data/k", "value": "stale"}, {"op": "remove", "path": "/data"}]),
    )
    .unwrap();
    let err = cms.patch("other", &PatchParams::default(), &Patch::Json::<()>(stale)).await.unwrap_err();
    assert_eq!(api_code(err).0, 422);
    assert!(cms.get("other").await.unwrap().data.is_some());
}

fn lease(holder: &str) -> Lease {
    Lease {
        metadata: ObjectMeta { name: Some("ferrolb-controller".into()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(Timestamp::now())),
            renew_time: Some(MicroTime(Timestamp::now())),
            ..Default::default()
        }),
    }
}

#[tokio::test]
async fn lease_concurrent_takeover_conflicts() {
    let (client_a, fake) = cluster();
    let client_b = fake.new_client(); // a second candidate: another process in a real cluster
    let leases_a: Api<Lease> = Api::namespaced(client_a, "kube-system");
    let leases_b: Api<Lease> = Api::namespaced(client_b, "kube-system");
    leases_a.create(&PostParams::default(), &lease("a")).await.unwrap();
    assert_eq!(api_code(leases_b.create(&PostParams::default(), &lease("b")).await.unwrap_err()).0, 409);

    // Both read the same version and try to take over; exactly one wins.
    let seen_a = leases_a.get("ferrolb-controller").await.unwrap();
    let seen_b = leases_b.get("ferrolb-controller").await.unwrap();
    let mut take_a = lease("a2");
    take_a.metadata.resource_version = seen_a.metadata.resource_version.clone();
    let mut take_b = lease("b");
    take_b.metadata.resource_version = seen_b.metadata.resource_version.clone();
    leases_b.replace("ferrolb-controller", &PostParams::default(), &take_b).await.unwrap();
    let err = leases_a.replace("ferrolb-controller", &PostParams::default(), &take_a).await.unwrap_err();
    assert_eq!(api_code(err), (409, "Conflict".into()));
    let now = leases_a.get("ferrolb-controller").await.unwrap();
    assert_eq!(now.spec.unwrap().holder_identity.as_deref(), Some("b"));
}

#[tokio::test]
async fn events_can_be_created_in_both_apis() {
    let (client, _fake) = cluster();
    let core: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let ev = CoreEvent {
        metadata: ObjectMeta { generate_name: Some("web.".into()), ..Default::default() },
        involved_object: ObjectReference {
            kind: Some("Service".into()),
            name: Some("web".into()),
            ..Default::default()
        },
        reason: Some("IPAllocated".into()),
        message: Some("assigned 192.0.2.10".into()),
        type_: Some("Normal".into()),
        ..Default::default()
    };
    core.create(&PostParams::default(), &ev).await.unwrap();
    assert_eq!(core.list(&ListParams::default()).await.unwrap().items.len(), 1);

    // kube-runtime's Recorder (what the controller uses) writes events.k8s.io/v1, and patches on repeats.
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let web = svcs.create(&PostParams::default(), &service("web")).await.unwrap();
    let recorder =
        Recorder::new(client.clone(), Reporter { controller: "ferrolb-controller".into(), instance: None });
    let event = Event {
        type_: EventType::Normal,
        reason: "IPAllocated".into(),
        note: Some("assigned 192.0.2.10".into()),
        action: "Allocate".into(),
        secondary: None,
    };
    recorder.publish(&event, &web.object_ref(&())).await.unwrap();
    recorder.publish(&event, &web.object_ref(&())).await.unwrap();
    let events: Api<EventsV1Event> = Api::default_namespaced(client);
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].reason.as_deref(), Some("IPAllocated"));
}

/// A ferrolb-like cluster-scoped kind with a status subresource.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "ferrolb.io",
    version = "v1alpha1",
    kind = "TestPool",
    plural = "testpools",
    status = "TestPoolStatus"
)]
struct TestPoolSpec {
    addresses: Vec<String>,
}

/// Status of [`TestPool`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
struct TestPoolStatus {
    allocated: u32,
}

#[tokio::test]
async fn custom_resources_are_served_after_crd_registration() {
    let (client, _fake) = cluster();
    let pools: Api<TestPool> = Api::all(client.clone());
    assert_eq!(api_code(pools.list(&ListParams::default()).await.unwrap_err()).0, 404);

    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.create(&PostParams::default(), &TestPool::crd()).await.unwrap();
    let pool = TestPool::new("lan", TestPoolSpec { addresses: vec!["192.0.2.0/24".into()] });
    let created = pools.create(&PostParams::default(), &pool).await.unwrap();
    assert_eq!(created.metadata.namespace, None, "cluster-scoped");
    let st = pools
        .patch_status("lan", &PatchParams::default(), &Patch::Merge(json!({"status": {"allocated": 3}})))
        .await
        .unwrap();
    assert_eq!(st.status.unwrap().allocated, 3);
    let mut main = pools.get("lan").await.unwrap();
    main.status = Some(TestPoolStatus { allocated: 99 });
    main.spec.addresses.push("198.51.100.0/24".into());
    let replaced = pools.replace("lan", &PostParams::default(), &main).await.unwrap();
    assert_eq!(
        (replaced.spec.addresses.len(), replaced.status.unwrap().allocated),
        (2, 3),
        "main write ignores .status"
    );
    assert_eq!(pools.list(&ListParams::default()).await.unwrap().items.len(), 1);

    // Deleting the CRD takes its objects with it.
    crds.delete(TestPool::crd_name(), &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(pools.list(&ListParams::default()).await.unwrap_err()).0, 404);
}
