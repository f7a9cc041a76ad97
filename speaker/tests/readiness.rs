//! Readiness gate `ferrolb.io/load-balancer-ready` against the fake apiserver: the
//! speaker of node1 watches its pods and writes the gate condition from the plan and
//! the really-announced state, as its event loop would.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_fakeapi::wait::{until, until_watched_within};
use ferrolb_fakeapi::{FakeApiServer, Verb};
use ferrolb_lab::fixtures::SHOP;
use ferrolb_speaker::announce::Announced;
use ferrolb_speaker::announce::bgp::BgpAnnounced;
use ferrolb_speaker::cluster::pod_conditions::PodConditions;
use ferrolb_speaker::model::ClusterModel;
use ferrolb_speaker::plan;
use ferrolb_speaker::readiness::{self, CONDITION_TYPE, Inputs, RemoteAnnounced, reason};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const ME: &str = "node1";

fn model() -> ClusterModel {
    let s = ferrolb_api::parse_stream("static.yaml", SHOP).unwrap();
    ClusterModel::from_stream(s, "static.yaml", ferrolb_speaker::model::DEFAULT_LB_CLASS).unwrap()
}

/// Creates a pod (optionally with the gate) and gives it the status a kubelet would.
async fn create_pod(pods: &Api<Pod>, name: &str, node: &str, gate: bool, pod_ip: &str) {
    let mut spec = json!({"nodeName": node, "containers": [{"name": "c", "image": "registry.invalid/app"}]});
    if gate {
        spec["readinessGates"] = json!([{"conditionType": CONDITION_TYPE}]);
    }
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "shop"}},
        "spec": spec,
    }))
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    let status = json!({"status": {
        "podIP": pod_ip,
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "ContainersReady", "status": "True"},
            {"type": "Ready", "status": "False"},
        ],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
}

fn stored(server: &FakeApiServer, name: &str) -> Value {
    server.get_json("v1", "pods", Some("default"), name).expect("pod stored")
}

/// The types of the stored pod's conditions, in order.
fn condition_types(server: &FakeApiServer, name: &str) -> Vec<Value> {
    stored(server, name)["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].clone())
        .collect()
}

fn gate_of(pod: &Value) -> Option<Value> {
    pod["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == CONDITION_TYPE).cloned()
}

/// Waits until the stored pod's gate condition satisfies `f`.
async fn wait_gate(server: &FakeApiServer, name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    until(what, || async { gate_of(&stored(server, name)).filter(|c| f(c)) }).await
}

/// What the speaker's event loop does on any change: count gate-pending pods, plan,
/// hand the desired conditions to the writer.
fn evaluate(r: &PodConditions, model: &mut ClusterModel, announced: &Announced) -> plan::Plan {
    let pods = r.gated_pods();
    readiness::apply_gate_pending(model, &pods, ME);
    let plan = plan::plan(model, ME, &BTreeSet::new());
    let remote = RemoteAnnounced::default();
    r.update(&Inputs { model, me: ME, plan: &plan, announced, remote: &remote });
    plan
}

fn sent_to_router(prefix: &str) -> Announced {
    let mut b = BgpAnnounced::default();
    b.by_peer.insert("router-a".into(), ferrolb_proto::bgp::session::Prefixes::unit(prefix.parse().unwrap()));
    Announced::from_parts(&b, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_turns_true_only_once_announced_and_false_with_a_reason_when_withdrawn() {
    let (client, server) = FakeApiServer::new().client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_pod(&pods, "shop-0", ME, true, "10.0.0.5").await;
    create_pod(&pods, "plain-0", ME, false, "10.0.0.6").await;
    create_pod(&pods, "elsewhere-0", "node2", true, "10.0.1.5").await;
    let plain_before = stored(&server, "plain-0");
    let elsewhere_before = stored(&server, "elsewhere-0");

    let mut readiness = PodConditions::start(client.clone(), ME);
    // The reflector lists this node's pods (and only those).
    until("the reflector lists a gated pod", || async { (!readiness.gated_pods().is_empty()).then_some(()) })
        .await;
    let gated: Vec<String> = readiness.gated_pods().into_iter().map(|p| p.key.name).collect();
    assert_eq!(gated, ["shop-0"], "only this node's pods with the gate");

    // Nothing sent yet: the Local Service is planned here (the pod waits only for the
    // gate, so it counts as serving) but not announced: False, pending.
    let mut m = model();
    let plan = evaluate(&readiness, &mut m, &Announced::default());
    assert!(
        plan.bgp_addresses().contains(&"203.0.113.20/32".parse().unwrap()),
        "planned thanks to the gate rule"
    );
    let c = wait_gate(&server, "shop-0", "False / AnnouncementPending", |c| c["status"] == "False").await;
    assert_eq!(c["reason"], reason::ANNOUNCEMENT_PENDING);
    let false_since = c["lastTransitionTime"].clone();
    assert!(false_since.is_string(), "{c}");

    // The UPDATE went out on the Established session: True.
    evaluate(&readiness, &mut m, &sent_to_router("203.0.113.20/32"));
    let c = wait_gate(&server, "shop-0", "True", |c| c["status"] == "True").await;
    assert_eq!(c["reason"], reason::ANNOUNCED);
    assert!(c["message"].as_str().unwrap().contains("by BGP to router-a"), "{c}");
    let true_since = c["lastTransitionTime"].clone();
    // The kubelet's conditions are untouched.
    let types = condition_types(&server, "shop-0");
    assert_eq!(
        types,
        [json!("PodScheduled"), json!("ContainersReady"), json!("Ready"), json!(CONDITION_TYPE)]
    );

    // Unchanged inputs and unrelated pod events write nothing.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let patches = server.request_count(Verb::Patch);
    evaluate(&readiness, &mut m, &sent_to_router("203.0.113.20/32"));
    let kubelet = json!({"metadata": {"labels": {"app": "shop", "touched": "yes"}}});
    let mut seen = readiness.pod_changes();
    seen.borrow_and_update();
    pods.patch("shop-0", &PatchParams::default(), &Patch::Merge(&kubelet)).await.unwrap();
    // The speaker saw the unrelated pod event before it evaluates again.
    tokio::time::timeout(Duration::from_secs(10), seen.changed()).await.unwrap().unwrap();
    evaluate(&readiness, &mut m, &sent_to_router("203.0.113.20/32"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.request_count(Verb::Patch), patches + 1, "only the test's own label patch");

    // The node is excluded: the plan withdraws, the session withdraws: False with the reason.
    let mut node: Node = serde_json::from_value(json!({
        "metadata": {"name": ME, "labels": {"node.kubernetes.io/exclude-from-external-load-balancers": ""}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": [{"type": "InternalIP", "address": "192.0.2.11"}]},
    }))
    .unwrap();
    node.metadata.namespace = None;
    m.upsert_node(&node);
    let plan = evaluate(&readiness, &mut m, &Announced::default());
    assert!(plan.bgp_addresses().is_empty());
    let c = wait_gate(&server, "shop-0", "False / NotAnnounced", |c| c["status"] == "False").await;
    assert_eq!(c["reason"], reason::NOT_ANNOUNCED);
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.contains("203.0.113.20 is not announced by node node1")
            && msg.contains("exclude-from-external-load-balancers"),
        "{msg}"
    );
    // Second precision: a flip within the same second may show the same time.
    let t = |v: &Value| v.as_str().unwrap().parse::<k8s_openapi::jiff::Timestamp>().unwrap();
    assert!(t(&c["lastTransitionTime"]) >= t(&true_since) && t(&true_since) >= t(&false_since));
    let withdrawn_since = c["lastTransitionTime"].clone();

    // Included again, not yet re-sent: still False, the reason and message follow, the
    // transition time stays.
    m.upsert_node(&serde_json::from_value(json!({
        "metadata": {"name": ME},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": [{"type": "InternalIP", "address": "192.0.2.11"}]},
    }))
    .unwrap());
    evaluate(&readiness, &mut m, &Announced::default());
    let c =
        wait_gate(&server, "shop-0", "AnnouncementPending", |c| c["reason"] == reason::ANNOUNCEMENT_PENDING)
            .await;
    assert_eq!(c["status"], "False");
    assert_eq!(c["lastTransitionTime"], withdrawn_since, "same status: same transition time");

    // Pods without the gate, and other nodes' pods, were never written.
    assert_eq!(
        stored(&server, "plain-0")["metadata"]["resourceVersion"],
        plain_before["metadata"]["resourceVersion"]
    );
    assert_eq!(gate_of(&stored(&server, "plain-0")), None);
    assert_eq!(
        stored(&server, "elsewhere-0")["metadata"]["resourceVersion"],
        elsewhere_before["metadata"]["resourceVersion"]
    );

    // Even if asked to, the writer leaves a pod without the gate alone.
    let mut bogus = std::collections::BTreeMap::new();
    bogus.insert(
        readiness::PodKey { namespace: "default".into(), name: "plain-0".into() },
        readiness::GateCondition { status: true, reason: "X".into(), message: "x".into() },
    );
    // With it, a change for the gated pod: once that is written, the writer has handled
    // this input (it handles plain-0 first, in key order).
    bogus.insert(
        readiness::PodKey { namespace: "default".into(), name: "shop-0".into() },
        readiness::GateCondition { status: false, reason: "Marker".into(), message: "m".into() },
    );
    readiness.publish(bogus);
    wait_gate(&server, "shop-0", "the marker written", |c| c["reason"] == "Marker").await;
    assert_eq!(
        stored(&server, "plain-0")["metadata"]["resourceVersion"],
        plain_before["metadata"]["resourceVersion"]
    );
    // The pod-change notification fires for this node's pod events.
    let changed = tokio::time::timeout(Duration::from_secs(5), readiness.pods_changed());
    pods.patch(
        "shop-0",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"app": "shop"}}})),
    )
    .await
    .unwrap();
    assert!(changed.await.is_ok(), "pods_changed resolves on a pod event");
}

/// A write racing a kubelet status update (stale resourceVersion) is retried from the
/// fresh pod, and the kubelet's change is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_racing_the_kubelet_is_retried_without_losing_its_change() {
    let (client, server) = FakeApiServer::new().client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_pod(&pods, "shop-0", ME, true, "10.0.0.5").await;
    let readiness = PodConditions::start(client.clone(), ME);
    until("the reflector lists a gated pod", || async { (!readiness.gated_pods().is_empty()).then_some(()) })
        .await;
    let mut m = model();
    evaluate(&readiness, &mut m, &Announced::default());
    wait_gate(&server, "shop-0", "False", |c| c["status"] == "False").await;
    // The "kubelet" rewrites the condition list (as a merge patch of status does) just
    // as the speaker writes True; whichever lands second must keep the other's change.
    let mut conds = stored(&server, "shop-0")["status"]["conditions"].clone();
    conds.as_array_mut().unwrap().push(json!({"type": "example.com/kubelet-seen", "status": "True"}));
    evaluate(&readiness, &mut m, &sent_to_router("203.0.113.0/24"));
    pods.patch_status(
        "shop-0",
        &PatchParams::default(),
        &Patch::Merge(&json!({"status": {"conditions": conds}})),
    )
    .await
    .unwrap();
    wait_gate(&server, "shop-0", "True", |c| c["status"] == "True").await;
    let types = condition_types(&server, "shop-0");
    assert!(types.contains(&json!("example.com/kubelet-seen")), "kubelet's change kept: {types:?}");
    assert_eq!(types.iter().filter(|t| **t == json!(CONDITION_TYPE)).count(), 1);
}

/// End to end on loopback: the node's real BGP announcer, the merged announced state
/// and the writer, driven as the speaker's event loop drives them. The gate stays
/// False while the router refuses the session, turns True once the UPDATE went out on
/// the Established session, and False again when the router drops the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_follows_the_real_bgp_session() {
    use ferrolb_proto::bgp::fsm::PeerConfig;
    use ferrolb_proto::bgp::session::{self, Listener, SessionConfig};
    use ferrolb_speaker::announce::AnnouncedFeed;
    use ferrolb_speaker::announce::bgp::BgpAnnouncer;
    use ferrolb_speaker::metrics::Metrics;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};

    // The router: a passive session on 127.0.0.1, refusing connections (held down) at first.
    let listener = Listener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut rpeer = PeerConfig::new(64512, 64513, Ipv4Addr::new(192, 0, 2, 1));
    rpeer.passive = true;
    let router = session::spawn(SessionConfig::new(rpeer, "127.0.0.1:179".parse().unwrap()));
    listener.add_peer(&router, None).unwrap();
    router.set_bfd_up(false).await;

    let (client, server) = FakeApiServer::new().client();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_pod(&pods, "shop-0", ME, true, "10.0.0.5").await;
    let text = SHOP.replace(
        "spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}",
        &format!("spec: {{myASN: 64513, peerASN: 64512, peerAddress: 127.0.0.1, peerPort: {port}, connectTime: 1s}}"),
    );
    let s = ferrolb_api::parse_stream("static.yaml", &text).unwrap();
    let mut m =
        ClusterModel::from_stream(s, "static.yaml", ferrolb_speaker::model::DEFAULT_LB_CLASS).unwrap();

    // The event loop: gated pods → model → plan → BGP announcer; announced state → gate.
    let (stop_tx, mut stop) = tokio::sync::oneshot::channel::<()>();
    let event_loop = tokio::spawn(async move {
        let mut readiness = PodConditions::start(client, ME);
        let mut bgp = BgpAnnouncer::new(ME, Arc::new(Metrics::new()));
        let feed = AnnouncedFeed::spawn(bgp.announced());
        let mut announced = feed.subscribe();
        let mut planned = None;
        loop {
            let pods = readiness.gated_pods();
            if !readiness::apply_gate_pending(&mut m, &pods, ME).is_empty() || planned.is_none() {
                let p = plan::plan(&m, ME, &BTreeSet::new());
                let errors = bgp.apply(&m, &std::collections::BTreeMap::new(), &p).await;
                assert!(errors.is_empty(), "{errors:?}");
                planned = Some(p);
            }
            let a = announced.borrow_and_update().clone();
            if let Some(p) = &planned {
                let remote = RemoteAnnounced::default();
                readiness.update(&Inputs { model: &m, me: ME, plan: p, announced: &a, remote: &remote });
            }
            tokio::select! {
                () = readiness.pods_changed() => {}
                r = announced.changed() => r.unwrap(),
                _ = &mut stop => break,
            }
        }
        bgp.shutdown().await;
    });

    let c = wait_gate(&server, "shop-0", "False while the router refuses", |c| c["status"] == "False").await;
    assert_eq!(c["reason"], reason::ANNOUNCEMENT_PENDING);
    assert!(!router.status().is_up());

    router.set_bfd_up(true).await;
    let c = wait_gate(&server, "shop-0", "True once the UPDATE went out", |c| c["status"] == "True").await;
    assert!(c["message"].as_str().unwrap().contains("by BGP to router-a"), "{c}");
    let mut rs = router.watch_status();
    until_watched_within("the router to receive the prefix", Duration::from_secs(10), &mut rs, |s| {
        s.prefixes_received >= 1
    })
    .await;

    // The router goes away: the route is gone with the session.
    router.shutdown(2).await;
    let c =
        wait_gate(&server, "shop-0", "False after the session went down", |c| c["status"] == "False").await;
    assert_eq!(c["reason"], reason::ANNOUNCEMENT_PENDING, "{c}");
    let _ = stop_tx.send(());
    event_loop.await.unwrap();
}
