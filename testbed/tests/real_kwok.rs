//! Simulated nodes on the real control plane (issue #39 point 1): `Cluster::start` with
//! `kwok_nodes` runs kwok (sigs.k8s.io/kwok v0.8) beside a lab of one real node. kwok
//! turns 100 fake Nodes Ready and the pods bound to them Running and Ready with an IP,
//! and the real EndpointSlice controller of the real kube-controller-manager lists them,
//! beside a pod on the lab's real node, as ready endpoints of one Service.
//!
//! Needs `target/kube/current/ferrolb-kube` and `kwok` beside it (testbed/kube/build.sh
//! builds both; testbed/test.sh runs it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use serde_json::json;

use ferrolb_cluster::kwok::{self, FAKE_POD_V4, fake_node_name, fake_node_v4};
use ferrolb_cluster::{Cluster, ClusterConfig, node_ready};
use ferrolb_lab::kubeapi::Objects;
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const FAKE_NODES: usize = 100;
/// Pods Running and Ready through kwok, then listed by the EndpointSlice controller:
/// generous for a loaded 2-core machine.
const T: Duration = Duration::from_secs(120);

/// Whether `ip` is an IPv4 address in [`FAKE_POD_V4`].
fn in_fake_pod_range(ip: &str) -> bool {
    let (net, len) = FAKE_POD_V4.split_once('/').unwrap();
    let (net, shift): (Ipv4Addr, u32) = (net.parse().unwrap(), 32 - len.parse::<u32>().unwrap());
    ip.parse::<Ipv4Addr>().is_ok_and(|ip| u32::from(ip) >> shift == u32::from(net) >> shift)
}

/// The Service's ready endpoints, by node: (node, address) pairs from every slice the
/// EndpointSlice controller manages for it.
fn ready_endpoints(cluster: &Cluster, service: &str) -> BTreeSet<(String, String)> {
    let api: Api<EndpointSlice> = Api::namespaced(cluster.client(), "default");
    let lp = ListParams::default().labels(&format!(
        "kubernetes.io/service-name={service},endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io"
    ));
    let slices = cluster.block_on(api.list(&lp)).unwrap();
    slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .flat_map(|e| {
            let node = e.node_name.clone().unwrap_or_default();
            e.addresses.iter().map(move |a| (node.clone(), a.clone()))
        })
        .collect()
}

#[test]
fn kwok_nodes_turn_ready_and_their_pods_become_ready_endpoints_beside_a_real_node() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let started = Instant::now();
    let cluster =
        Cluster::start(&lab, &ClusterConfig { kwok_nodes: FAKE_NODES, ..Default::default() }).unwrap();
    let kwok = cluster.kwok().unwrap();
    println!(
        "control plane and {FAKE_NODES} fake nodes up in {:.1} s: registered in {:.2} s, all Ready {:.2} s later",
        started.elapsed().as_secs_f64(),
        kwok.registered_in().as_secs_f64(),
        kwok.ready_in().as_secs_f64(),
    );
    let names: Vec<String> = (1..=FAKE_NODES).map(fake_node_name).collect();
    assert_eq!(cluster.fake_nodes(), names.as_slice());

    // Every Node Ready: the real one as the testbed registered it, the fake ones as kwok
    // reports them, with the InternalIP the testbed gave them.
    let nodes = cluster.block_on(Api::<Node>::all(cluster.client()).list(&ListParams::default())).unwrap();
    let by_name: BTreeMap<String, &Node> =
        nodes.items.iter().map(|n| (n.metadata.name.clone().unwrap(), n)).collect();
    let expected: BTreeSet<String> = names.iter().cloned().chain([addressing::node_name(1)]).collect();
    assert_eq!(by_name.keys().cloned().collect::<BTreeSet<_>>(), expected);
    let not_ready: Vec<&String> = by_name.iter().filter(|(_, n)| !node_ready(n)).map(|(k, _)| k).collect();
    assert!(not_ready.is_empty(), "Nodes not Ready: {not_ready:?}");
    for (i, name) in names.iter().enumerate().map(|(i, n)| (i + 1, n)) {
        let node = by_name[name];
        let status = node.status.as_ref().unwrap();
        let kubelet = &status.node_info.as_ref().unwrap().kubelet_version;
        assert!(kubelet.starts_with("kwok-"), "{name}: kubeletVersion {kubelet} (kwok writes its own)");
        let internal: Vec<&str> = status
            .addresses
            .iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP")
            .map(|a| a.address.as_str())
            .collect();
        assert_eq!(internal, [fake_node_v4(i).to_string()], "{name}");
        let annotations = node.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations.get(kwok::ANNOTATION.0).map(String::as_str), Some(kwok::ANNOTATION.1));
    }
    // kwok leaves the real node alone.
    let real = by_name[&addressing::node_name(1)];
    let kubelet = &real.status.as_ref().unwrap().node_info.as_ref().map(|i| i.kubelet_version.clone());
    assert!(kubelet.as_deref().is_none_or(|v| !v.starts_with("kwok-")), "node1 taken by kwok: {kubelet:?}");

    // A Service selecting app=web; one pod on the real node (the testbed acts as its
    // kubelet) and one on each fake node.
    cluster
        .apply(&json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        }))
        .unwrap();
    cluster
        .apply(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-real", "namespace": "default", "labels": {"app": "web"}},
            "spec": {
                "nodeName": addressing::node_name(1),
                "containers": [{"name": "app", "image": kwok::FAKE_IMAGE, "ports": [{"name": "http", "containerPort": 8080}]}],
            },
        }))
        .unwrap();
    let t = Instant::now();
    let pods = cluster.create_fake_pods("default", "web", FAKE_NODES).unwrap();
    let created = t.elapsed();
    assert_eq!(pods.len(), FAKE_NODES);

    let endpoints = wait::until_value(
        &format!("{} ready endpoints in the EndpointSlices of Service web", FAKE_NODES + 1),
        T,
        || Ok(ready_endpoints(&cluster, "web")),
        |e| e.len() == FAKE_NODES + 1,
    )
    .unwrap();
    println!(
        "{FAKE_NODES} pods on fake nodes created in {:.2} s; all ready endpoints of Service web {:.2} s after the first create",
        created.as_secs_f64(),
        t.elapsed().as_secs_f64(),
    );

    // One endpoint on each node: the real pod at its node's address (hostNetwork-like),
    // the fake ones at distinct addresses kwok took from its range.
    let on_nodes: BTreeSet<&str> = endpoints.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(on_nodes, expected.iter().map(String::as_str).collect::<BTreeSet<_>>());
    assert!(
        endpoints.contains(&(addressing::node_name(1), addressing::node_v4(1).to_string())),
        "{endpoints:?}"
    );
    let fake: Vec<&str> =
        endpoints.iter().filter(|(n, _)| *n != addressing::node_name(1)).map(|(_, a)| a.as_str()).collect();
    assert!(fake.iter().all(|a| in_fake_pod_range(a)), "fake pod IPs outside {FAKE_POD_V4}: {fake:?}");
    assert_eq!(fake.iter().collect::<BTreeSet<_>>().len(), FAKE_NODES, "fake pod IPs repeat: {fake:?}");

    // kwok reports each fake pod as a kubelet would: Running, its node's address as hostIP.
    let listed = cluster.block_on(
        Api::<Pod>::namespaced(cluster.client(), "default").list(&ListParams::default().labels("app=web")),
    );
    for pod in listed.unwrap().items.iter().filter(|p| p.metadata.name.as_deref() != Some("web-real")) {
        let name = pod.metadata.name.as_deref().unwrap();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap();
        let i: usize = node.trim_start_matches("kwok-node-").parse().unwrap();
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"), "{name}");
        assert_eq!(status.host_ip.as_deref(), Some(fake_node_v4(i).to_string().as_str()), "{name} on {node}");
    }
}
