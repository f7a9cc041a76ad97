//! What a speaker holds per Service grows with the cluster on every node (issue #39: a
//! speaker's RSS < 64 MiB at 10 000 Services), so it is budgeted in bytes, counted by the
//! speaker's own allocator: the model and the feed behind it (per Service and per Node),
//! and the status tracker (each Service's ServiceAnnouncements, shared with the writer,
//! and the index of their addresses). One test in its own binary, so no other test
//! allocates while it counts.
//!
//! Measured: 1.28 KB per Service for the model and feed, 0.48 KB per Node (seven labels),
//! 0.43 KB per object for the tracker. Before the tracker kept records (addresses, a peer
//! list shared by all Services announced alike) instead of specs (eight strings) and one
//! entry per address and Service instead of a list per address, 1.09 KB. Before every map
//! shared the model's key strings and the Service's uid (issue #39), the model and feed
//! took 1.58 KB; before the model held its slices and selectors exactly sized, 3.8 KB.
#![allow(clippy::unwrap_used)]

use ferrolb_runtime::heap::{Counting, in_use};
use ferrolb_speaker::cluster::status::Tracker;
use ferrolb_speaker::cluster::{Change, Feed, Update};
use ferrolb_speaker::model::{Changes, ClusterModel};
use ferrolb_speaker::plan::diff::PlanChange;
use ferrolb_speaker::plan::{Plan, RouteAttrs};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::json;

#[global_allocator]
static ALLOC: Counting = Counting;

/// Bytes per Service (three endpoints on three of the nodes) the model and feed may hold.
const MODEL_BUDGET: u64 = 1_400;
/// Bytes per Node (seven labels, its conditions and address) the model may hold.
const NODE_BUDGET: u64 = 520;
/// Bytes the tracker holds per ServiceAnnouncement (one per Service this node announces).
const TRACKED_BUDGET: u64 = 500;

const NODES: usize = 100;

/// Service `i` as the apiserver sends it, and its EndpointSlice: three endpoints.
fn service(i: usize) -> (Service, EndpointSlice) {
    let name = format!("svc-{i:05}");
    let ip = format!("198.51.{}.{}", 100 + i / 250, i % 250);
    let svc = json!({"metadata": {"name": name, "namespace": "scale", "uid": format!("4f1c1f6e-1f8e-4c39-9a51-{i:012}")},
        "spec": {"type": "LoadBalancer", "selector": {"app": name}, "externalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}});
    let endpoints: Vec<_> = (0..3)
        .map(|k| {
            json!({"addresses": [format!("10.{k}.{}.{}", i / 250, i % 250)],
            "nodeName": format!("node-{:04}", (i * 3 + k) % NODES),
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "targetRef": {"kind": "Pod", "name": format!("{name}-{k}"), "namespace": "scale"}})
        })
        .collect();
    let slice = json!({"metadata": {"name": format!("{name}-x7k2p"), "namespace": "scale",
            "labels": {"kubernetes.io/service-name": name}},
        "addressType": "IPv4", "endpoints": endpoints});
    (serde_json::from_value(svc).unwrap(), serde_json::from_value(slice).unwrap())
}

/// Node `i` with the labels a kubelet sets (and a rack and zone).
fn node(i: usize) -> Node {
    let name = format!("node-{i:04}");
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
            "rack": format!("rack-{:02}", i % 40)}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": format!("10.200.0.{i}")}]}}))
    .unwrap()
}

/// The model and feed of `n` Services, and the heap they hold (the objects fed are gone).
fn model_of(n: usize) -> (ClusterModel, Feed, u64) {
    let before = in_use().unwrap();
    let (services, slices): (Vec<_>, Vec<_>) = (0..n).map(service).unzip();
    let mut model = ClusterModel::new("ferrolb.io/lb");
    let mut feed = Feed::default();
    feed.apply(&mut model, Update::Node(Change::Listed((0..NODES).map(node).collect())));
    feed.apply(&mut model, Update::Service(Change::Listed(services)));
    feed.apply(&mut model, Update::EndpointSlice(Change::Listed(slices)));
    let _ = model.take_changes();
    let held = in_use().unwrap() - before;
    (model, feed, held)
}

/// What the status tracker holds for `n` Services, all announced to one peer: each one's
/// status, shared with the writer (which at rest holds no more per Service), and the
/// index of their addresses.
fn tracked_of(model: &ClusterModel, feed: &Feed) -> (usize, u64) {
    let routes = model
        .services
        .values()
        .flat_map(|s| s.ingress.iter())
        .map(|ip| (ipnet::IpNet::from(*ip), RouteAttrs::default()))
        .collect();
    let mut plan = Plan::default();
    plan.bgp.insert("router".into(), routes);
    let empty = Plan::default();
    let before = in_use().unwrap();
    let mut tracker = Tracker::default();
    let update =
        tracker.update(model, &PlanChange::between(&empty, &plan), &feed.uids, &Changes::none()).unwrap();
    let objects = update.services.values().flatten().map(|s| s.objects.len()).sum();
    drop(update);
    let held = in_use().unwrap() - before;
    drop(tracker);
    (objects, held)
}

#[test]
fn a_speaker_holds_a_bounded_number_of_bytes_per_service_and_node() {
    // The marginal cost of 1 000 more Services, so what every speaker holds anyway (the
    // Nodes, the maps' first nodes) is not charged to them.
    let (small, small_feed, small_held) = model_of(1_000);
    let (large, large_feed, large_held) = model_of(2_000);
    let per_service = (large_held - small_held) / 1_000;
    println!("model and feed: {per_service} bytes per Service (budget {MODEL_BUDGET})");
    assert!(per_service <= MODEL_BUDGET, "{per_service} bytes per Service; budget {MODEL_BUDGET}");
    assert_eq!(large.services.len(), 2_000, "every Service is in the model");
    assert_eq!(large.endpoints(large.services.keys().next().unwrap()).len(), 3, "with its endpoints");

    let (n_small, d_small) = tracked_of(&small, &small_feed);
    let (n_large, d_large) = tracked_of(&large, &large_feed);
    assert_eq!((n_small, n_large), (1_000, 2_000), "one ServiceAnnouncement per Service announced");
    let per_object = (d_large - d_small) / 1_000;
    println!("tracked ServiceAnnouncements: {per_object} bytes each (budget {TRACKED_BUDGET})");
    assert!(per_object <= TRACKED_BUDGET, "{per_object} bytes per object; budget {TRACKED_BUDGET}");
    // Here rather than in a test of its own: tests run in parallel, and the count is global.
    bytes_per_node();
}

/// Every speaker holds every Node (their labels, for nodeSelectors): with a map of labels
/// each, a Node took about 0.9 KB (a heap profile at 5 000 Nodes); 0.48 KB now.
fn bytes_per_node() {
    let held = |n: usize| {
        let before = in_use().unwrap();
        let mut model = ClusterModel::new("ferrolb.io/lb");
        let mut feed = Feed::default();
        feed.apply(&mut model, Update::Node(Change::Listed((0..n).map(node).collect())));
        let held = in_use().unwrap() - before;
        assert_eq!(model.nodes.len(), n);
        assert_eq!(model.nodes["node-0007"].labels.get("rack"), Some("rack-07"));
        held
    };
    let per_node = (held(2_000) - held(1_000)) / 1_000;
    println!("model and feed: {per_node} bytes per Node (budget {NODE_BUDGET})");
    assert!(per_node <= NODE_BUDGET, "{per_node} bytes per Node; budget {NODE_BUDGET}");
}
