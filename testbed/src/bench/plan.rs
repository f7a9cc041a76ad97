//! `bench plan`: the planner on a large synthetic cluster, in process: the full plan,
//! the incremental plan after one change (an EndpointSlice, a new Service, a Node), and
//! this process's peak RSS with the model loaded. No lab, no root needed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use ferrolb_speaker::model::{ClusterModel, DEFAULT_LB_CLASS, SERVICE_NAME_LABEL};
use ferrolb_speaker::plan::{self, Planner};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, NodeCondition, NodeStatus, Service, ServiceSpec,
    ServiceStatus,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::Error;

/// Pools (documentation ranges), two BGP peers (one iBGP on half the nodes), one
/// BGPAdvertisement with communities and one L2Advertisement.
const CONFIG: &str = r#"
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: bgp}
spec: {addresses: [198.18.0.0/16, "2001:db8:b::/64"]}
---
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: lan}
spec: {addresses: [198.19.0.0/16, "2001:db8:c::/64"]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: tor}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, addressFamilies: [ipv4-unicast, ipv6-unicast]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: rr}
spec: {myASN: 64512, peerASN: 64512, peerAddress: 192.0.2.2, nodeSelectors: [{matchLabels: {rack: a}}]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: bgp}
spec: {ipAddressPools: [bgp], communities: ["64512:100"], localPref: 150}
---
apiVersion: ferrolb.io/v1alpha1
kind: L2Advertisement
metadata: {name: lan}
spec: {ipAddressPools: [lan]}
"#;

fn node_name(i: usize) -> String {
    format!("node-{i}")
}

fn node(i: usize, ready: bool) -> Node {
    let rack = if i.is_multiple_of(2) { "a" } else { "b" };
    Node {
        metadata: ObjectMeta {
            name: Some(node_name(i)),
            labels: Some(BTreeMap::from([("rack".to_string(), rack.to_string())])),
            ..Default::default()
        },
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Service `i`: by i % 4 BGP IPv4, BGP IPv6, L2 IPv4, L2 IPv6; every 10th dual-stack;
/// Local for odd i.
fn service(i: usize) -> Service {
    let n = u32::try_from(i).unwrap_or(u32::MAX);
    let v4 = |base: u32| IpAddr::V4(Ipv4Addr::from(base + n));
    let v6 = |base: u128| IpAddr::V6(Ipv6Addr::from(base + u128::from(n)));
    let (bgp4, lan4) = (0xc612_0000, 0xc613_0000);
    let (bgp6, lan6) = (0x2001_0db8_000b_u128 << 80, 0x2001_0db8_000c_u128 << 80);
    let mut ips = match i % 4 {
        0 => vec![v4(bgp4)],
        1 => vec![v6(bgp6)],
        2 => vec![v4(lan4)],
        _ => vec![v6(lan6)],
    };
    if i.is_multiple_of(10) {
        ips.push(if i % 4 < 2 { v6(bgp6) } else { v6(lan6) });
    }
    Service {
        metadata: ObjectMeta {
            name: Some(format!("svc-{i}")),
            namespace: Some("bench".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            external_traffic_policy: Some(if i % 2 == 1 { "Local" } else { "Cluster" }.into()),
            ..Default::default()
        }),
        status: Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(
                    ips.iter()
                        .map(|ip| LoadBalancerIngress { ip: Some(ip.to_string()), ..Default::default() })
                        .collect(),
                ),
            }),
            ..Default::default()
        }),
    }
}

/// The EndpointSlice of Service `i`: 1 to 3 endpoints on nodes spread by `i`; with
/// `terminating`, the first one is serving and terminating.
fn slice(i: usize, nodes: usize, terminating: bool) -> EndpointSlice {
    let endpoints = (0..1 + i % 3)
        .map(|j| {
            let t = terminating && j == 0;
            Endpoint {
                addresses: vec![format!("10.{}.{}.{}", j, (i >> 8) & 0xff, i & 0xff)],
                node_name: Some(node_name((i * 7 + j * 13) % nodes)),
                conditions: Some(EndpointConditions {
                    ready: Some(!t),
                    serving: Some(true),
                    terminating: Some(t),
                }),
                ..Default::default()
            }
        })
        .collect();
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("svc-{i}-abcde")),
            namespace: Some("bench".into()),
            labels: Some(BTreeMap::from([(SERVICE_NAME_LABEL.to_string(), format!("svc-{i}"))])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints,
        ports: None,
    }
}

fn model(services: usize, nodes: usize) -> Result<ClusterModel, Error> {
    let stream = ferrolb_api::parse_stream("bench.yaml", CONFIG).map_err(|e| Error::Parse(e.to_string()))?;
    let config = stream.validated_config("bench.yaml").map_err(|e| Error::Parse(e.to_string()))?;
    let mut m = ClusterModel::new(DEFAULT_LB_CLASS);
    m.set_config(config);
    for i in 0..nodes {
        m.upsert_node(&node(i, true));
    }
    for i in 0..services {
        m.upsert_service(&service(i));
        m.upsert_endpoint_slice(&slice(i, nodes, false));
    }
    Ok(m)
}

/// min / median / max, in microseconds.
fn micros(xs: &mut [Duration]) -> String {
    xs.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    match (xs.first(), xs.get((xs.len().max(1) - 1) / 2), xs.last()) {
        (Some(a), Some(m), Some(b)) => {
            format!("min {:>9.1} µs  median {:>9.1} µs  max {:>9.1} µs", us(*a), us(*m), us(*b))
        }
        _ => "no samples".into(),
    }
}

fn own_rss(field: &str) -> String {
    let kb = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    });
    kb.map_or_else(|| "unknown".into(), |kb| format!("{:.1} MiB", kb as f64 / 1024.0))
}

/// Runs the planner bench for `services` Services on each cluster size in `node_counts`.
pub fn run(services: usize, node_counts: &[usize], changes: usize) -> Result<(), Error> {
    println!("bench plan: {services} Services (BGP/L2 × IPv4/IPv6, Cluster/Local, every 10th dual-stack)");
    println!("before any model: VmHWM {}", own_rss("VmHWM:"));
    for &nodes in node_counts {
        let nodes = nodes.max(1);
        let t = Instant::now();
        let mut m = model(services, nodes)?;
        let build = t.elapsed();
        let me = node_name(0);
        let live: BTreeSet<String> = (0..nodes).map(node_name).collect();
        println!("\n{nodes} nodes: model built through upsert_* in {:.1} ms", build.as_secs_f64() * 1e3);

        let mut full = Vec::new();
        let mut announced = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let a = plan::plan(&m, &me, &live);
            full.push(t.elapsed());
            announced = a.bgp_addresses().len() + a.l2.len();
        }
        println!(
            "  full plan (from scratch)          {}  ({announced} addresses announced by node-0)",
            micros(&mut full)
        );

        let mut planner = Planner::new();
        let t = Instant::now();
        let a = planner.plan(&mut m, &me, &live);
        let first = t.elapsed();
        let t = Instant::now();
        let copy = a.clone();
        let clone = t.elapsed();
        drop(copy);
        println!(
            "  incremental planner, first plan   {:.1} ms (clone of the result at the speaker's call site: {:.1} ms)",
            first.as_secs_f64() * 1e3,
            clone.as_secs_f64() * 1e3
        );

        // One EndpointSlice changes: an endpoint turns terminating (and back).
        let (mut one_slice, mut slice_model) = (Vec::new(), Vec::new());
        let mut terminating = BTreeSet::new();
        for k in 0..changes {
            let i = (k * 7919) % services.max(1);
            let now_terminating = terminating.insert(i) || !terminating.remove(&i);
            let s = slice(i, nodes, now_terminating);
            let t = Instant::now();
            m.upsert_endpoint_slice(&s);
            slice_model.push(t.elapsed());
            let t = Instant::now();
            planner.plan(&mut m, &me, &live);
            one_slice.push(t.elapsed());
        }
        println!("  one EndpointSlice changed: plan   {}", micros(&mut one_slice));
        println!("    (its upsert into the model)     {}", micros(&mut slice_model));

        let (mut one_service, mut service_model) = (Vec::new(), Vec::new());
        for k in 0..changes {
            let i = services + k;
            let (svc, s) = (service(i), slice(i, nodes, false));
            let t = Instant::now();
            m.upsert_service(&svc);
            m.upsert_endpoint_slice(&s);
            service_model.push(t.elapsed());
            let t = Instant::now();
            planner.plan(&mut m, &me, &live);
            one_service.push(t.elapsed());
        }
        println!("  one Service added: plan          {}", micros(&mut one_service));
        println!("    (its upserts into the model)    {}", micros(&mut service_model));

        let mut one_node = Vec::new();
        for k in 0..5 {
            m.upsert_node(&node(nodes - 1, k % 2 == 1));
            let t = Instant::now();
            planner.plan(&mut m, &me, &live);
            one_node.push(t.elapsed());
        }
        println!("  one Node changed (recomputes all) {}", micros(&mut one_node));
        if planner.plan(&mut m, &me, &live) != &plan::plan(&m, &me, &live) {
            println!("  WARNING: the incremental plan differs from the plan from scratch");
        }
        println!("  peak RSS (VmHWM) with the model and planner loaded: {}", own_rss("VmHWM:"));
    }
    Ok(())
}
