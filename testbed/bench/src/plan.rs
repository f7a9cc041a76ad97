//! `bench plan`: the planner on a large synthetic cluster, in process: the full plan,
//! the incremental plan after one change (an EndpointSlice, a new Service, a Node), and
//! this process's peak RSS with the model loaded. No lab, no root needed for that part.
//!
//! Then the real `ferrolb-speaker --static` process loaded with the same model as a
//! static file, in a one-node lab (its BGP peers lead nowhere outside the lab): its
//! VmHWM / VmRSS once it has planned (`/readyz`, set right after the first plan). Needs
//! root and a built speaker; `--no-speaker` skips it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
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

use ferrolb_lab::process::Spawn;
use ferrolb_lab::{Error, Lab, LabConfig, client, speaker, wait};

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

/// A `kB` field of `/proc/<pid>/status` (`self` for this process), in KiB.
fn status_kb(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
}

fn mib(kb: Option<u64>) -> String {
    kb.map_or_else(|| "unknown".into(), |kb| format!("{:.1} MiB", kb as f64 / 1024.0))
}

fn own_rss(field: &str) -> String {
    mib(status_kb("self", field))
}

/// The speaker's static file holding the bench model: [`CONFIG`], the Nodes, and every
/// Service with its EndpointSlice.
fn static_file(services: usize, nodes: usize) -> Result<String, Error> {
    let mut objects: Vec<ferrolb_api::Object> = (0..nodes).map(|i| node(i, true).into()).collect();
    for i in 0..services {
        objects.push(service(i).into());
        objects.push(slice(i, nodes, false).into());
    }
    let body = ferrolb_api::write_stream(&objects).map_err(|e| Error::Parse(e.to_string()))?;
    Ok(format!("{}\n{body}", CONFIG.trim()))
}

/// The value of `ferrolb_speaker_announced{protocol="<protocol>"}` in a metrics text.
fn announced(metrics: &str, protocol: &str) -> String {
    let key = format!("ferrolb_speaker_announced{{protocol=\"{protocol}\"}}");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .map_or_else(|| "?".into(), |v| v.trim().to_string())
}

/// Port of the measured speaker's `/metrics` and `/readyz`, on the lab node's address.
const METRICS_PORT: u16 = 9120;
/// How long a debug build may take to read 10k Services and plan.
const LOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs `ferrolb-speaker --static` as `node-0` in the lab's node 1 on the bench model of
/// `services` Services and `nodes` Nodes, waits until it has planned, prints its
/// VmHWM / VmRSS and what it announces.
fn speaker_process(lab: &Lab, services: usize, nodes: usize) -> Result<(), Error> {
    let (profile, bin) = match speaker::binary("release") {
        Ok(b) => ("release", b),
        Err(_) => ("debug", speaker::binary("debug")?),
    };
    let dir = lab.subdir(&format!("bench-plan-{nodes}"))?;
    let file = dir.join("static.yaml");
    let text = static_file(services, nodes)?;
    std::fs::write(&file, &text)?;
    let key = speaker::write_membership_key(lab, "bench-plan-membership")?;
    let ns = lab.node(1);
    let me = SocketAddr::new(ferrolb_lab::addressing::node_v4(1).into(), METRICS_PORT);
    let membership = SocketAddr::new(ferrolb_lab::addressing::node_v4(1).into(), 7946);
    let argv: Vec<String> = vec![
        bin.display().to_string(),
        "--node-name".into(),
        node_name(0),
        "--static".into(),
        file.display().to_string(),
        "--metrics-addr".into(),
        me.to_string(),
        "--membership-key-file".into(),
        key.display().to_string(),
        "--membership-bind".into(),
        membership.to_string(),
    ];
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let t = Instant::now();
    let mut proc = lab.spawn(ns, Spawn::new(format!("bench-plan-speaker-{nodes}"), &argv))?;
    let pid = proc.pid().to_string();
    let ready = wait::until("the speaker has planned (/readyz ok)", LOAD_TIMEOUT, || {
        if let Some(status) = proc.try_exit() {
            return Err(Error::Command {
                command: "ferrolb-speaker --static".into(),
                detail: format!("exited with {status}: {}", ferrolb_lab::process::tail(&proc.logs(), 20)),
            });
        }
        let r = client::http_get(ns, me, "/readyz", Duration::from_secs(2));
        Ok(r.ok().filter(|b| b.contains("ok")).map(|_| t.elapsed()))
    })?;
    let metrics = client::http_get(ns, me, "/metrics", Duration::from_secs(5)).unwrap_or_default();
    let (hwm, rss) = (status_kb(&pid, "VmHWM:"), status_kb(&pid, "VmRSS:"));
    proc.kill();
    println!(
        "  ferrolb-speaker --static process ({profile} build {}): static file {:.1} MiB, planned after {:.1} s;",
        bin.display(),
        text.len() as f64 / (1024.0 * 1024.0),
        ready.as_secs_f64()
    );
    println!(
        "    peak RSS (VmHWM) {}, RSS (VmRSS) {}; announcing {} by BGP, {} by L2",
        mib(hwm),
        mib(rss),
        announced(&metrics, "bgp"),
        announced(&metrics, "l2")
    );
    Ok(())
}

/// Runs the planner bench for `services` Services on each cluster size in `node_counts`.
/// With `speaker_process`, also the real speaker process on the same model (see the
/// module doc).
pub fn run(
    services: usize,
    node_counts: &[usize],
    changes: usize,
    speaker_process: bool,
) -> Result<(), Error> {
    println!("bench plan: {services} Services (BGP/L2 × IPv4/IPv6, Cluster/Local, every 10th dual-stack)");
    let lab = if speaker_process { Some(Lab::up(LabConfig::nodes(1))?) } else { None };
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
        println!("  peak RSS (VmHWM) of this bench with the model and planner loaded: {}", own_rss("VmHWM:"));
        if let Some(lab) = &lab {
            self::speaker_process(lab, services, nodes)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_static_file_loads_into_the_same_model_the_bench_plans() {
        let dir = std::env::temp_dir().join(format!("ferrolb-bench-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("static.yaml");
        std::fs::write(&path, static_file(40, 3).unwrap()).unwrap();
        let loaded = ferrolb_speaker::model::static_file::load(&path, DEFAULT_LB_CLASS);
        std::fs::remove_dir_all(&dir).unwrap();
        let from_file = loaded.unwrap().model;
        let me = node_name(0);
        let live: BTreeSet<String> = (0..3).map(node_name).collect();
        let want = plan::plan(&model(40, 3).unwrap(), &me, &live);
        assert!(!want.bgp_addresses().is_empty() && !want.l2.is_empty());
        assert_eq!(plan::plan(&from_file, &me, &live), want);
    }

    #[test]
    fn announced_reads_the_gauge_of_one_protocol() {
        let text = "# TYPE ferrolb_speaker_announced gauge\nferrolb_speaker_announced{protocol=\"bgp\"} 4666\nferrolb_speaker_announced{protocol=\"l2\"} 12\n";
        assert_eq!(announced(text, "bgp"), "4666");
        assert_eq!(announced(text, "l2"), "12");
        assert_eq!(announced("", "bgp"), "?");
    }
}
