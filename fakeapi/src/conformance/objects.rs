//! Objects: resourceVersions, paths, conflicts, status, Leases, Events.

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, Namespace, Node, ObjectReference, Pod, Secret, Service, ServicePort,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::Env;
use super::fixtures::{api_code, cm, next_change, rv, service};

pub(super) async fn resource_version_increases_on_every_write(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
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
    assert_eq!(a.metadata.namespace.as_deref(), Some(env.ns()));
}

/// Creates `obj`, reads it back by name and finds it exactly once in the list.
async fn round_trip<K>(api: Api<K>, obj: serde_json::Value)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).unwrap();
    let name = obj.name_any();
    let made = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(api.get(&name).await.unwrap().meta().uid, made.meta().uid);
    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.iter().filter(|o| o.name_any() == name).count(), 1, "{name} listed once");
}

pub(super) async fn builtin_kinds_are_served_at_their_real_paths(env: &Env) {
    let client = env.client();
    let system = env.unique("system");
    let node = env.unique("node");
    round_trip(Api::<Namespace>::all(client.clone()), json!({"metadata": {"name": system}})).await;
    round_trip(Api::<Node>::all(client.clone()), json!({"metadata": {"name": node}})).await;
    round_trip(
        env.api::<Pod>(),
        json!({"metadata": {"name": "speaker-x"},
               "spec": {"containers": [{"name": "speaker", "image": "registry.invalid/speaker"}]}}),
    )
    .await;
    round_trip(env.api::<Secret>(), json!({"metadata": {"name": "bgp-passwords"}})).await;
    round_trip(env.api::<Service>(), serde_json::to_value(service("web")).unwrap()).await;
    round_trip(env.api::<Lease>(), json!({"metadata": {"name": node}})).await;
    let slices: Api<EndpointSlice> = env.api();
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.1.0.5"], "nodeName": node, "conditions": {"ready": true}}],
    }))
    .unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();
    let by_service =
        slices.list(&ListParams::default().labels("kubernetes.io/service-name=web")).await.unwrap();
    assert_eq!(by_service.items[0].endpoints[0].node_name.as_deref(), Some(node.as_str()));
}

/// What the speaker's readiness gate relies on: its node's pods by the field selector
/// `spec.nodeName` (list and watch), and pods/status merge patches guarded by
/// `metadata.resourceVersion` (a stale one is 409 and changes nothing; spec is ignored).
pub(super) async fn pods_by_node_and_resource_version_guarded_status_patches(env: &Env) {
    let pods: Api<Pod> = env.api();
    // Nodes no kubelet acts for: nothing but this body writes the pods' status.
    let (node1, node2) = (env.unique("node1"), env.unique("node2"));
    let pod = |name: &str, node: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/app"}],
                     "readinessGates": [{"conditionType": "ferrolb.io/load-balancer-ready"}]},
        }))
        .unwrap()
    };
    pods.create(&PostParams::default(), &pod("a", &node1)).await.unwrap();
    pods.create(&PostParams::default(), &pod("b", &node2)).await.unwrap();
    let on_node1 = format!("spec.nodeName={node1}");
    let listed = pods.list(&ListParams::default().fields(&on_node1)).await.unwrap();
    assert_eq!(listed.items.iter().map(|p| p.name_any()).collect::<Vec<_>>(), ["a"]);
    let start = listed.metadata.resource_version.unwrap();
    let mut stream = pods.watch(&WatchParams::default().fields(&on_node1), &start).await.unwrap().boxed();

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
        Some(node1.as_str()),
        "spec via /status ignored"
    );
    let err = pods.patch_status("a", &pp, &guarded(&rv_a, "True")).await.unwrap_err();
    assert_eq!(api_code(err).0, 409, "stale resourceVersion");
    let now = pods.get("a").await.unwrap();
    assert_eq!(now.status.unwrap().conditions.unwrap()[0].status, "False", "the stale patch changed nothing");

    // Only node1's pod shows up in its watch: b's change comes before a's second one, so
    // it would be seen first if it leaked.
    pods.patch_status("b", &pp, &Patch::Merge(json!({"status": {"conditions": [cond("True")]}})))
        .await
        .unwrap();
    pods.patch_status("a", &pp, &Patch::Merge(json!({"status": {"conditions": [cond("True")]}})))
        .await
        .unwrap();
    for want in ["False", "True"] {
        match next_change(&mut stream).await {
            WatchEvent::Modified(p) => {
                let name = p.name_any();
                let status = p.status.unwrap().conditions.unwrap()[0].status.clone();
                assert_eq!((name.as_str(), status.as_str()), ("a", want));
            }
            other => panic!("expected MODIFIED a, got {other:?}"),
        }
    }
}

/// What the controller's allocation writes rely on: merge patches of a Service's status
/// and of its metadata, each guarded by `metadata.resourceVersion`. A write bumps the
/// version, so the second write of one decision carries the first one's answer; a
/// version read before any write in between is 409 and changes nothing.
pub(super) async fn resource_version_guarded_service_status_and_metadata_patches(env: &Env) {
    let services: Api<Service> = env.api();
    let read = services.create(&PostParams::default(), &service("s")).await.unwrap();
    let read = read.metadata.resource_version.unwrap();
    let guarded = |version: &str, mut body: serde_json::Value| {
        body["metadata"]["resourceVersion"] = json!(version);
        Patch::Merge(body)
    };
    let ingress = |ip: &str| json!({"status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}}});
    let annotate = |pool: &str| json!({"metadata": {"annotations": {"example.com/pool": pool}}});
    let pp = PatchParams::default();
    let ips = |s: &Service| -> Vec<String> {
        let lb = s.status.as_ref().and_then(|st| st.load_balancer.as_ref());
        lb.and_then(|lb| lb.ingress.as_ref()).into_iter().flatten().filter_map(|i| i.ip.clone()).collect()
    };

    let first = services.patch_status("s", &pp, &guarded(&read, ingress("192.0.2.1"))).await.unwrap();
    let first = first.metadata.resource_version.unwrap();
    assert_ne!(first, read, "a status write bumps the version");
    // The metadata write of the same decision: conditional on the version read, it would be
    // refused by the decision's own first write; on the version that write returned, it passes.
    let err = services.patch("s", &pp, &guarded(&read, annotate("stale"))).await.unwrap_err();
    assert_eq!(api_code(err), (409, "Conflict".into()), "metadata patch on a stale version");
    let second = services.patch("s", &pp, &guarded(&first, annotate("lan"))).await.unwrap();
    let second = second.metadata.resource_version.unwrap();

    // Another writer changes the Service: a status write decided from the version before is
    // refused, and changes nothing.
    services
        .patch("s", &pp, &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})))
        .await
        .unwrap();
    let err = services.patch_status("s", &pp, &guarded(&second, ingress("192.0.2.2"))).await.unwrap_err();
    assert_eq!(api_code(err), (409, "Conflict".into()), "status patch on a stale version");
    let now = services.get("s").await.unwrap();
    assert_eq!(ips(&now), ["192.0.2.1"], "the stale status patch changed nothing");
    assert_eq!(now.annotations().get("example.com/pool").map(String::as_str), Some("lan"));
}

pub(super) async fn stale_update_conflicts_and_missing_update_is_not_found(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
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

pub(super) async fn create_twice_is_already_exists(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let err = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap_err();
    assert_eq!(api_code(err), (409, "AlreadyExists".into()));
}

pub(super) async fn generate_name_and_missing_namespace(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    let mut c = cm("", &[]);
    c.metadata.name = None;
    c.metadata.generate_name = Some("pool-".into());
    let made = cms.create(&PostParams::default(), &c).await.unwrap();
    assert!(made.name_any().starts_with("pool-") && made.name_any().len() > "pool-".len());
    let elsewhere: Api<ConfigMap> = Api::namespaced(env.client(), &env.unique("absent"));
    let err = elsewhere.create(&PostParams::default(), &cm("a", &[])).await.unwrap_err();
    assert_eq!(api_code(err).0, 404);
}

pub(super) async fn status_subresource_is_kept_apart_from_spec(env: &Env) {
    let svcs: Api<Service> = env.api();
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
    // Only some kinds count generations (see the custom resource body); Services do not.
    assert_eq!(created.metadata.generation, None, "Services have no generation");

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

    let mut main = svcs.get("web").await.unwrap();
    main.status = None;
    main.spec.as_mut().unwrap().ports = Some(vec![ServicePort { port: 443, ..Default::default() }]);
    let replaced = svcs.replace("web", &PostParams::default(), &main).await.unwrap();
    assert_eq!(replaced.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port, 443);
    assert!(!no_ingress(&replaced), "status survives a main-resource write");
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

pub(super) async fn lease_concurrent_takeover_conflicts(env: &Env) {
    let leases_a: Api<Lease> = env.api();
    // A second candidate: another process in a real cluster.
    let leases_b: Api<Lease> = Api::namespaced(env.new_client(), env.ns());
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

/// Both Event APIs write, and show, one set of Events.
pub(super) async fn events_can_be_created_in_both_apis(env: &Env) {
    let core: Api<CoreEvent> = env.api();
    let ev = CoreEvent {
        metadata: ObjectMeta { generate_name: Some("web.".into()), ..Default::default() },
        involved_object: ObjectReference {
            kind: Some("Service".into()),
            name: Some("web".into()),
            namespace: Some(env.ns().into()),
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
    let svcs: Api<Service> = env.api();
    let web = svcs.create(&PostParams::default(), &service("web")).await.unwrap();
    let recorder =
        Recorder::new(env.client(), Reporter { controller: "ferrolb-controller".into(), instance: None });
    let event = Event {
        type_: EventType::Normal,
        reason: "IPAllocated".into(),
        note: Some("assigned 192.0.2.10".into()),
        action: "Allocate".into(),
        secondary: None,
    };
    recorder.publish(&event, &web.object_ref(&())).await.unwrap();
    recorder.publish(&event, &web.object_ref(&())).await.unwrap();
    let events: Api<EventsV1Event> = env.api();
    let list = events.list(&ListParams::default()).await.unwrap();
    let from_core: Vec<_> = list.items.iter().filter(|e| e.reporting_controller.is_none()).collect();
    let recorded: Vec<_> = list
        .items
        .iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("ferrolb-controller"))
        .collect();
    assert_eq!((from_core.len(), recorded.len()), (1, 1), "one storage, two views: {list:?}");
    assert_eq!(from_core[0].note.as_deref(), Some("assigned 192.0.2.10"), "core message is note");
    assert_eq!(from_core[0].regarding.as_ref().and_then(|r| r.name.as_deref()), Some("web"));
    assert_eq!(recorded[0].reason.as_deref(), Some("IPAllocated"));
    assert_eq!(recorded[0].series.as_ref().map(|s| s.count), Some(2), "the repeat is counted");

    let in_core = core.list(&ListParams::default()).await.unwrap();
    let recorded =
        in_core.items.iter().find(|e| e.reporting_component.as_deref() == Some("ferrolb-controller"));
    let recorded = recorded.expect("the recorded Event in the core API");
    assert_eq!(recorded.involved_object.name.as_deref(), Some("web"));
    assert_eq!(recorded.message.as_deref(), Some("assigned 192.0.2.10"));
}
