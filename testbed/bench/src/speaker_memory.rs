//! `bench speaker-memory`: one speaker's memory at rest with N fake Nodes and S Services,
//! served by the fake apiserver over HTTP, in minutes where `bench scale` needs the real
//! control plane and 21 minutes for 10 000 Services.
//!
//! The `ferrolb-speaker` process runs on node1 in Kubernetes mode with BGP to BIRD, as in
//! `bench scale`. The Nodes carry what kwok's do (labels, Ready, an InternalIP); each
//! Service has a selector, an ingress address and an EndpointSlice with one ready endpoint
//! on a fake Node, as the EndpointSlice controller writes it. The Services are created
//! while the speaker runs, in batches, as on the real control plane: the allocator sees
//! plans and status writes between them. Once BIRD has every route and the speaker has
//! written every ServiceAnnouncement, the speaker rests, then its VmRSS (anonymous and
//! file-backed) and `ferrolb_speaker_heap_bytes` are read.
//!
//! The heap and anonymous RSS here are lower than on the real control plane (shorter
//! objects, no managedFields to parse); the bench is for comparing builds and designs of
//! the speaker, `bench scale` for the figures. Printed, never asserted.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrolb_api::ServiceAnnouncement;
use ferrolb_fakeapi::FakeApiServer;
use ferrolb_lab::kubeapi::{FakeCluster, Objects};
use ferrolb_lab::routers::{self, Bird, RouterSpec};
use ferrolb_lab::speaker::{self, yaml};
use ferrolb_lab::{Error, Lab, LabConfig, addressing, client, wait};
use kube::api::{Api, ListParams};

use crate::bird_ctl::BirdCtl;
use crate::builds::Build;
use crate::{mib, rss, rss_split};

/// The node whose speaker is measured.
const NODE: usize = 1;
const METRICS_PORT: u16 = 7473;
const NS: &str = "bench";
/// Objects per create request batch (applied in process).
const BATCH: usize = 250;
/// The longest wait for the lab, BGP, and each phase.
const T: Duration = Duration::from_secs(60);

/// Measures each (nodes, services) pair in a lab of its own; `rest` is how long the
/// speaker is left alone before it is read.
pub fn run(nodes: &[usize], services: &[usize], rest: Duration) -> Result<(), Error> {
    let build = Build::choose("ferrolb-speaker")?;
    println!(
        "bench speaker-memory: one speaker (BGP to BIRD) at rest, fake apiserver over HTTP; the heap is ferrolb_speaker_heap_bytes"
    );
    println!("  binary: {}", build.how);
    for &n in nodes {
        for &s in services {
            measure(&build, n, s, rest)?;
        }
    }
    Ok(())
}

fn measure(build: &Build, nodes: usize, services: usize, rest: Duration) -> Result<(), Error> {
    if services > 250 * 250 {
        return Err(Error::Check(format!("--services {services}: at most 62 500 fit the bench's pool")));
    }
    let lab = Lab::up(LabConfig::nodes(NODE))?;
    let cluster = FakeCluster::start_with(&lab, FakeApiServer::new())?;
    for ns in ["ferrolb-system", NS] {
        cluster
            .apply(&serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))?;
    }
    cluster.apply_stream(&yaml::stream(&[
        yaml::node(NODE),
        yaml::pool("bench", &["198.18.0.0/16"]),
        yaml::router_peer_v4(&[]),
        yaml::bgp_advertisement("bench", &["ipAddressPools: [bench]"]),
    ]))?;
    let t = Instant::now();
    for chunk in (1..=nodes).collect::<Vec<_>>().chunks(BATCH) {
        cluster.apply_stream(&chunk.iter().map(|i| fake_node(*i)).collect::<String>())?;
    }
    let nodes_in = t.elapsed();
    let bird = Bird::start(&lab, &RouterSpec::default())?;
    let mut ctl = BirdCtl::connect(&lab.dir().join("bird").join("bird.ctl"))?;
    let metrics = SocketAddr::new(addressing::node_ip(NODE), METRICS_PORT);
    let proc = lab.spawn(
        lab.node(NODE),
        speaker::kube_spawn(&build.path, cluster.kubeconfig(), NODE, "speaker", Some(metrics))
            .env("RUST_LOG", "info"),
    )?;
    routers::wait_established(&bird, &[addressing::node_ip(NODE)], T)?;

    let t = Instant::now();
    for chunk in (0..services).collect::<Vec<_>>().chunks(BATCH) {
        cluster.apply_stream(&chunk.iter().map(|i| service(*i, nodes)).collect::<String>())?;
    }
    let created = t.elapsed();
    let budget = T + Duration::from_millis(60) * u32::try_from(services).unwrap_or(u32::MAX);
    wait::until_value("every route in BIRD", budget, || routes(&mut ctl), |r| *r >= services)?;
    wait::until_value(
        "every ServiceAnnouncement written",
        budget,
        || announcements(&cluster),
        |a| *a >= services,
    )?;
    let settled = t.elapsed();
    std::thread::sleep(rest);
    let (anon, file) = rss_split(proc.pid()).unwrap_or((0, 0));
    let heap = client::http_get(lab.client(), metrics, "/metrics", Duration::from_secs(2))
        .ok()
        .and_then(|m| client::metric_sample(&m, "ferrolb_speaker_heap_bytes"))
        .unwrap_or(0.0);
    let total = rss(proc.pid()).unwrap_or(0);
    println!(
        "  {nodes:>5} Nodes, {services:>6} Services (Nodes stored in {:.1} s, Services in {:.1} s, at rest {:.1} s after the first): \
         RSS {:.1} MiB (anonymous {:.1}, file {:.1}), heap {:.1} MiB, anonymous above the heap {:.1} MiB  (goal RSS < {:.0} MiB at 5 000 × 10 000 on the real control plane)",
        nodes_in.as_secs_f64(),
        created.as_secs_f64(),
        settled.as_secs_f64(),
        mib(total),
        mib(anon),
        mib(file),
        heap / f64::from(1u32 << 20),
        mib(anon) - heap / f64::from(1u32 << 20),
        crate::scale::goals::SPEAKER_RSS_MIB,
    );
    drop(proc);
    drop(bird);
    drop(cluster);
    drop(lab);
    Ok(())
}

/// BIRD's route count (`show route count`: "N of M routes for K networks ...").
fn routes(ctl: &mut BirdCtl) -> Result<usize, Error> {
    let text = ctl.command("show route count")?;
    let n = text.split(" of ").next().and_then(|t| t.split_whitespace().next_back());
    n.and_then(|n| n.parse().ok()).ok_or_else(|| Error::Parse(format!("BIRD's route count: {text}")))
}

/// The ServiceAnnouncements stored (the speaker writes one per Service).
fn announcements(cluster: &FakeCluster) -> Result<usize, Error> {
    let api: Api<ServiceAnnouncement> = Api::all(cluster.client());
    let list = cluster.block_on(api.list_metadata(&ListParams::default()));
    Ok(list.map_err(|e| Error::Parse(format!("listing ServiceAnnouncements: {e}")))?.items.len())
}

/// Fake Node `i` as kwok keeps it: its labels, Ready, an InternalIP.
fn fake_node(i: usize) -> String {
    let name = format!("kwok-node-{i:05}");
    let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 19, 192, 0)) + i as u32);
    format!(
        "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels: {{kubernetes.io/hostname: {name}, \
         kubernetes.io/os: linux, kubernetes.io/arch: amd64, kubernetes.io/role: agent, \
         node-role.kubernetes.io/agent: \"\", type: kwok}}\nstatus:\n  conditions: [{{type: Ready, status: \"True\"}}]\n  \
         addresses: [{{type: InternalIP, address: {ip}}}, {{type: Hostname, address: {name}}}]\n"
    )
}

/// Service `i` (policy Cluster, a selector, its address) and its EndpointSlice: one ready
/// pod on a fake Node, as the EndpointSlice controller writes it.
fn service(i: usize, nodes: usize) -> String {
    let (hi, lo) = (i / 250, i % 250 + 1);
    let name = format!("svc-{:05}", i + 1);
    let node = format!("kwok-node-{:05}", i % nodes.max(1) + 1);
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {NS}}}\n\
         spec: {{type: LoadBalancer, externalTrafficPolicy: Cluster, selector: {{app: {name}}}, ports: [{{port: 80, protocol: TCP}}]}}\n\
         status: {{loadBalancer: {{ingress: [{{ip: 198.18.{hi}.{lo}}}]}}}}\n\
         ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: {name}-x7k2p, namespace: {NS}, labels: {{kubernetes.io/service-name: {name}, \
         endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io}}}}\n\
         addressType: IPv4\nports: [{{name: \"\", port: 80, protocol: TCP}}]\nendpoints:\n\
         - {{addresses: [10.1.{hi}.{lo}], nodeName: {node}, conditions: {{ready: true, serving: true, terminating: false}}, \
         targetRef: {{kind: Pod, namespace: {NS}, name: {name}-0}}}}\n"
    )
}
