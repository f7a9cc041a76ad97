//! Weighted ECMP by endpoints: two real `ferrolb-speaker --static` announce one Local
//! Service to real FRR with `linkBandwidth: endpoints`; FRR turns the Link Bandwidth
//! communities (RFC 10005) into kernel next-hop weights in the ratio of the nodes'
//! serving endpoints, the client's flows through it split in that ratio, and an endpoint
//! added moves the weights with one UPDATE from the node that gained it.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ferrolb_lab::addressing::{self, node_ip};
use ferrolb_lab::client::{EchoServer, flow_split, open_flows};
use ferrolb_lab::routers::{self, Frr, Router, RouterSpec};
use ferrolb_lab::speaker::{Speaker, yaml};
use ferrolb_lab::{Lab, LabConfig, wait};
use serde_json::Value;

const T: Duration = Duration::from_secs(30);
const PORT: u16 = 8080;

/// The static file: nodes 1 and 2, the BGP pool, the router as peer, an advertisement
/// with `linkBandwidth: endpoints`, and a Local Service with `endpoints[i]` serving
/// endpoints on node `i + 1`.
fn static_file(vip: IpAddr, endpoints: [usize; 2]) -> String {
    let mut objs = vec![yaml::node(1), yaml::node(2), yaml::pool("public", &[addressing::BGP_POOL_V4])];
    objs.push(yaml::router_peer_v4(&[]));
    objs.push(yaml::bgp_advertisement("public", &["ipAddressPools: [public]", "linkBandwidth: endpoints"]));
    objs.push(format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\nspec: {{type: LoadBalancer, externalTrafficPolicy: Local, ports: [{{port: {PORT}, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: {vip}}}]}}}}\n"
    ));
    let mut slice = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-abc, namespace: default, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints:\n".to_string();
    let mut pod = 0;
    for (i, n) in endpoints.iter().enumerate() {
        for _ in 0..*n {
            pod += 1;
            slice.push_str(&format!(
                "- {{addresses: [10.0.0.{pod}], nodeName: node{}, conditions: {{ready: true}}}}\n",
                i + 1
            ));
        }
    }
    objs.push(slice);
    yaml::stream(&objs)
}

/// The weight of each next hop of `prefix` in the router's kernel table.
fn weights(frr: &Frr, prefix: &str) -> BTreeMap<IpAddr, u64> {
    let text = frr.netns().ip(&["-j", "-4", "route", "show", prefix]).unwrap();
    let v: Value = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
    let mut out = BTreeMap::new();
    for r in v.as_array().into_iter().flatten() {
        for nh in r["nexthops"].as_array().into_iter().flatten() {
            if let Some(g) = nh["gateway"].as_str().and_then(|g| g.parse().ok()) {
                out.insert(g, nh["weight"].as_u64().unwrap_or(1));
            }
        }
    }
    out
}

/// Waits until node1 and node2 weigh `ratio` (node2's weight ÷ node1's, within 5 %).
fn wait_ratio(frr: &Frr, prefix: &str, ratio: f64) -> BTreeMap<IpAddr, u64> {
    let r = wait::until_value(
        &format!("FRR's kernel route {prefix} weighted 1:{ratio}"),
        T,
        || Ok(weights(frr, prefix)),
        |w| {
            let (a, b) = (w.get(&node_ip(1)).copied(), w.get(&node_ip(2)).copied());
            matches!((a, b), (Some(a), Some(b)) if ((b as f64 / a as f64) - ratio).abs() <= ratio * 0.05)
        },
    );
    r.unwrap_or_else(|e| {
        panic!("{e:?}\n{}", frr.vtysh(&format!("show ip route {prefix}")).unwrap_or_default())
    })
}

/// UPDATEs FRR received from `node`.
fn updates_from(frr: &Frr, node: IpAddr) -> u64 {
    let text = frr.vtysh(&format!("show bgp neighbors {node} json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    v[node.to_string()]["messageStats"]["updatesRecv"].as_u64().unwrap_or(0)
}

#[test]
fn frr_weighs_ecmp_by_each_nodes_serving_endpoints() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let frr = Frr::start(&lab, &RouterSpec::default()).unwrap();
    let vip = addressing::bgp_vip_v4(20);
    let prefix = format!("{vip}/32");
    // Each node serves the address (on `lo`, as kube-proxy makes it) with an echo server
    // naming the node; r1 hashes flows by ports too.
    let mut servers = Vec::new();
    for (i, ns) in lab.nodes().iter().enumerate() {
        lab.add_vip_on_lo(ns, vip).unwrap();
        servers
            .push(EchoServer::start(ns, SocketAddr::new(vip, PORT), &addressing::node_name(i + 1)).unwrap());
    }
    frr.netns().sysctl("net.ipv4.fib_multipath_hash_policy", "1").unwrap();

    let file = static_file(vip, [1, 3]);
    let speakers: Vec<Speaker> = (1..=2).map(|i| Speaker::start(&lab, i, &file).unwrap()).collect();
    routers::wait_established(&frr, &[node_ip(1), node_ip(2)], T).unwrap();
    let w = wait_ratio(&frr, &prefix, 3.0);
    println!("one endpoint on node1, three on node2: next-hop weights {w:?}");

    // 4 000 flows from the client, behind r1.
    let flows = open_flows(
        lab.client(),
        addressing::CLIENT_LINK_V4.into(),
        20000..24000,
        SocketAddr::new(vip, PORT),
        Duration::from_secs(5),
    )
    .unwrap();
    let split = flow_split(&flows);
    println!("4 000 connections: {split:?}");
    assert_eq!(split.get("failed"), None, "{split:?}");
    let (n1, n2) =
        (split.get("node1").copied().unwrap_or(0) as f64, split.get("node2").copied().unwrap_or(0) as f64);
    assert!(
        (n1 - 1000.0).abs() <= 100.0 && (n2 - 3000.0).abs() <= 300.0,
        "not within 10 % of 1:3: {split:?}"
    );

    // node1 gains an endpoint: it sends one UPDATE, and the weights turn 2:3.
    let before = [updates_from(&frr, node_ip(1)), updates_from(&frr, node_ip(2))];
    let edit = Instant::now();
    let file = static_file(vip, [2, 3]);
    for s in &speakers {
        s.replace_file(&file).unwrap();
    }
    let w = wait_ratio(&frr, &prefix, 1.5);
    println!("an endpoint added on node1: weights {w:?} within {:?} of the edit", edit.elapsed());
    let after = [updates_from(&frr, node_ip(1)), updates_from(&frr, node_ip(2))];
    assert_eq!([after[0] - before[0], after[1] - before[1]], [1, 0], "UPDATEs from node1 and node2");
}
