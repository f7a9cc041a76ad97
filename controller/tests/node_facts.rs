//! The Nodes' facts for L2 speakers: published while an L2Advertisement exists, one
//! ConfigMap per Node, written only when a fact changes (a heartbeat writes nothing),
//! converged after a crash, deleted with their Node and when the last L2Advertisement goes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use ferrolb_api::node_facts::{COMPLETE_NAME, FACTS_KEY, NODE_FACTS_COMPONENT, NODE_FACTS_LABEL};
use ferrolb_api::{L2Advertisement, L2AdvertisementSpec, NodeFacts};
use ferrolb_fakeapi::{FakeApiServer, Verb};
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeAddress, NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn node(name: &str, ip: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("zone".to_owned(), "a".to_owned())])),
            ..Default::default()
        },
        status: Some(NodeStatus {
            addresses: Some(vec![NodeAddress { type_: "InternalIP".into(), address: ip.into() }]),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The published facts by node name.
async fn published(client: &kube::Client) -> BTreeMap<String, NodeFacts> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default().labels(&format!("{NODE_FACTS_LABEL}={NODE_FACTS_COMPONENT}"));
    let items = api.list(&lp).await.unwrap().items;
    let facts = items.iter().filter(|cm| cm.metadata.name.as_deref() != Some(COMPLETE_NAME));
    facts.map(|cm| NodeFacts::from_config_map(cm).unwrap()).collect()
}

/// Whether the ConfigMap saying every Node's facts are published exists.
async fn complete(client: &kube::Client) -> bool {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    api.get_opt(COMPLETE_NAME).await.unwrap().is_some()
}

/// Waits until the published facts satisfy `check`.
async fn facts_until(
    client: &kube::Client,
    what: &str,
    check: impl Fn(&BTreeMap<String, NodeFacts>) -> bool,
) {
    until(what, || async {
        let p = published(client).await;
        check(&p).then_some(())
    })
    .await;
}

/// The controllers' writes of facts ConfigMaps, from the fake's request log; only those of
/// the controller tagged `by` where one is given.
fn facts_writes_by(server: &FakeApiServer, by: Option<&str>) -> usize {
    server
        .request_log()
        .iter()
        .filter(|r| r.path.contains("/configmaps/node-facts"))
        .filter(|r| matches!(r.verb, Some(Verb::Patch | Verb::Delete | Verb::Create | Verb::Update)))
        .filter(|r| by.is_none() || r.client.as_deref() == by)
        .count()
}

/// Every controller's writes of facts ConfigMaps.
fn facts_writes(server: &FakeApiServer) -> usize {
    facts_writes_by(server, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facts_follow_the_nodes_facts_only_while_l2_advertisements_exist() {
    let (client, server) = cluster_on(FakeApiServer::new().with_request_log()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    for (n, ip) in [("a", "192.0.2.1"), ("b", "192.0.2.2")] {
        let node = node(n, ip);
        nodes.create(&PostParams::default(), &node).await.unwrap();
        let status = Patch::Merge(json!({"status": node.status}));
        nodes.patch_status(n, &PatchParams::default(), &status).await.unwrap();
    }
    let ctl = start(&server, settings("c1", None));
    until("the controller ready", || async { ctl.health.is_ready().then_some(()) }).await;

    let l2s: Api<L2Advertisement> = Api::all(client.clone());
    let ad = L2Advertisement::new("l2", L2AdvertisementSpec::default());
    l2s.create(&PostParams::default(), &ad).await.unwrap();
    until("every Node's facts published", || async { complete(&client).await.then_some(()) }).await;
    let p = published(&client).await;
    assert_eq!(p.len(), 2, "said complete once each Node's facts were written: {p:?}");
    assert_eq!(p["a"], NodeFacts::of(&nodes.get("a").await.unwrap()));
    assert_eq!(p["b"].addresses, ["192.0.2.2".parse::<std::net::IpAddr>().unwrap()]);
    assert!(p["b"].ready && p["b"].labels["zone"] == "a");
    assert_eq!(facts_writes(&server), 3, "a, b, then complete");

    // Heartbeats change no fact and write nothing; a cordon writes its Node's facts once.
    for beat in 0..5 {
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
            "lastHeartbeatTime": format!("2026-12-02T10:00:0{beat}Z")}]}});
        nodes.patch_status("a", &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
    }
    nodes
        .patch("b", &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .unwrap();
    facts_until(&client, "b cordoned", |p| p["b"].draining.is_some()).await;
    assert_eq!(facts_writes(&server), 4, "5 heartbeats and a cordon: one write");
    // The metric counts a write once its answer is read.
    until("4 writes counted", || async { (ctl.metrics.node_facts_writes.get() == 4).then_some(()) }).await;

    // A Node deleted: its facts go.
    nodes.delete("a", &DeleteParams::default()).await.unwrap();
    facts_until(&client, "a's facts gone", |p| !p.contains_key("a")).await;

    // Crash-only: facts changed behind a dead controller's back are put right by the next,
    // which writes nothing else.
    ctl.kill().await;
    // What the next one finds wrong: b's facts, tampered with below, and a's where the dead
    // one wrote them again after a's Node went: the fake deletes a's facts with their owner,
    // and when its watch of the facts told it so before its watch of the Nodes told it why,
    // it put them back and died before it deleted them (a live one does; so does the
    // apiserver's garbage collector, their owner gone).
    let tampered = json!({"data": {FACTS_KEY: "{\"ready\":false}"}});
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    cms.patch("node-facts.b", &PatchParams::default(), &Patch::Merge(tampered)).await.unwrap();
    let stale = published(&client).await.contains_key("a");
    let ctl = start(&server, settings("c2", None));
    facts_until(&client, "b's facts put right, none of a's", |p| {
        p.get("b").is_some_and(|f| f.ready) && !p.contains_key("a")
    })
    .await;
    assert_eq!(published(&client).await["b"], NodeFacts::of(&nodes.get("b").await.unwrap()));
    let wrong = 1 + usize::from(stale);
    assert_eq!(
        facts_writes_by(&server, Some("c2")),
        wrong,
        "one write for each fact found wrong (a stale: {stale})"
    );

    // No L2Advertisement left: no facts left.
    l2s.delete("l2", &DeleteParams::default()).await.unwrap();
    facts_until(&client, "no facts", BTreeMap::is_empty).await;
    assert!(!complete(&client).await);
    ctl.stop().await.unwrap();
}
