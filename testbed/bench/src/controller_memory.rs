//! `bench controller-memory`: the controller's peak RSS (VmHWM) on a cold start with N
//! LoadBalancer Services already holding addresses (issue #15 point 3: < 150 MiB at 100k).
//!
//! `whole-path --existing` does the same cold start on the real control plane, but its
//! pool and ClusterIP ranges stop at 30k Services and each one is written through etcd;
//! here the fake apiserver serves them over HTTP from the router namespace to the
//! `ferrolb-controller` process on node1, which lists, watches, replays every status into
//! its IPAM and reconciles every Service once. The Services are stored as the real
//! apiserver stores them once ferrolb addressed them: the spec with the apiserver's
//! defaults (clusterIP, ipFamilies, policies, targetPort), managedFields of their creator
//! and of the controller's two writes, `ipMode: VIP` ingress and the
//! `ferrolb.io/ip-allocated-from-pool` annotation — so the controller finds nothing to
//! write, which the bench checks from the fake's request log.
//!
//! The fake copies every stored object to serve each 500-item page of a list, so listing
//! grows with the square of N: on 2 CPUs 10k Services list in seconds, 50k in about two
//! minutes, 100k in about ten; hence the default sizes.
//!
//! `--real` runs the cold start on the real control plane instead ([`real`]), up to 64 000
//! Services.
//!
//! Figures are printed beside the goal, never asserted.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use ferrolb_api::ANNOTATION_IP_ALLOCATED_FROM_POOL;
use ferrolb_fakeapi::FakeApiServer;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::builds::Build;
use super::whole_path::{GOAL_CONTROLLER_RSS_MIB, GOAL_RSS_SERVICES, REBUILT, reconciles, wait_log};
use super::{mib, peak_rss, rss};
use ferrolb_cluster::ferrolb;
use ferrolb_lab::kubeapi::{FakeCluster, Objects};
use ferrolb_lab::process::Proc;
use ferrolb_lab::speaker::yaml;
use ferrolb_lab::{Error, Lab, LabConfig, addressing, wait};

/// The namespace of the bench's Services.
const NS: &str = "bench";
/// The pool: every bulk benchmarking address (131072).
const POOL: &str = "198.18.0.0/15";
const POOL_NAME: &str = "bench";
/// The node running the controller.
const NODE: usize = 1;
/// Concurrent in-process writes while storing the Services.
const IN_FLIGHT: usize = 8;
/// The field managers the real apiserver records: the creator, and the controller (its
/// user agent's product token, as for its status and annotation patches).
const CREATOR: &str = "kubectl-create";
const CONTROLLER: &str = "ferrolb-controller";

mod real;

/// Runs one cold start per size (on the real control plane when `real`) and prints the
/// controller's memory.
pub fn run(sizes: &[usize], real: bool) -> Result<(), Error> {
    let capacity = if real { real::CAPACITY } else { 1usize << (32 - 15) };
    if let Some(n) = sizes.iter().find(|n| **n == 0 || **n > capacity) {
        let within = if real { "the real control plane's IPv6 ClusterIPs" } else { POOL };
        return Err(Error::Missing(format!("--services {n}: between 1 and {capacity} ({within})")));
    }
    let build = Build::choose("ferrolb-controller")?;
    if real {
        println!(
            "bench controller-memory --real: ferrolb-controller cold start with N LoadBalancer Services holding addresses, on the real control plane"
        );
        println!("  binary: {}", build.how);
        for &n in sizes {
            real::cold_start(&build, n)?;
        }
        return Ok(());
    }
    println!(
        "bench controller-memory: ferrolb-controller cold start with N LoadBalancer Services holding addresses, served by the fake apiserver over HTTP"
    );
    println!("  binary: {}", build.how);
    let mut peaks = Vec::new();
    for &n in sizes {
        peaks.push((n, cold_start(&build, n)?));
    }
    if let [(n0, Some(p0)), .., (n1, Some(p1))] = peaks.as_slice()
        && n1 > n0
    {
        println!(
            "\n  marginal peak RSS per Service between {n0} and {n1}: {:.0} bytes",
            (*p1 as f64 - *p0 as f64) / (n1 - n0) as f64
        );
    }
    Ok(())
}

/// One lab, `n` Services stored, the controller started once; returns its VmHWM in bytes.
fn cold_start(build: &Build, n: usize) -> Result<Option<u64>, Error> {
    println!("\n{n} Services");
    let lab = Lab::up(LabConfig::nodes(NODE))?;
    let cluster = FakeCluster::start_with(&lab, FakeApiServer::new().with_request_log())?;
    for ns in [ferrolb::NAMESPACE, NS] {
        // With the label the real apiserver gives every namespace (the fake gives none).
        let metadata = json!({"name": ns, "labels": {"kubernetes.io/metadata.name": ns}});
        cluster.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}))?;
    }
    cluster.apply_stream(&yaml::pool(POOL_NAME, &[POOL]))?;

    let t = Instant::now();
    let client = cluster.client();
    cluster.block_on(
        futures::stream::iter((0..n).map(|i| store(&client, i)))
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>(),
    )?;
    let one = cluster
        .api()
        .get_json("v1", "services", Some(NS), &service_name(0))
        .ok_or_else(|| Error::Parse(format!("Service {NS}/{} not stored", service_name(0))))?;
    println!(
        "   stored in {:.1} s (in process); one Service is {} bytes of JSON, {} managedFields entries",
        t.elapsed().as_secs_f64(),
        one.to_string().len(),
        one.pointer("/metadata/managedFields").and_then(|m| m.as_array()).map_or(0, Vec::len)
    );
    // The change log would replay every write to a watch from resourceVersion 0; the
    // controller lists, so only the objects matter.
    cluster.api().compact();
    let before = cluster.api().request_log().len();

    let watched =
        ColdStart::watch(&lab, &build.path, cluster.kubeconfig(), NODE, n, Duration::from_millis(2))?;
    let service_writes = cluster.api().request_log()[before..]
        .iter()
        .filter(|r| r.is_write() && r.path.contains("/services/"))
        .count();
    watched.print(&format!("writes to Services meanwhile: {service_writes}"));
    let peak = watched.at_end.0;
    drop(watched);
    drop(cluster);
    drop(lab);
    Ok(peak)
}

fn service_name(i: usize) -> String {
    format!("svc-{i:06}")
}

/// A controller's cold start with `n` Services, watched from its process start.
struct ColdStart {
    controller: Proc,
    /// Process start → its state rebuilt from the API.
    ready: Duration,
    /// Process start → every Service reconciled once.
    reconciled: Duration,
    /// (VmHWM, VmRSS) once ready, and once every Service is reconciled.
    at_ready: (Option<u64>, Option<u64>),
    at_end: (Option<u64>, Option<u64>),
}

impl ColdStart {
    /// Starts the controller `bin` on lab node `node` and waits until it has reconciled
    /// every one of `n` Services (a minute or two, and `per_service` for each).
    fn watch(
        lab: &Lab,
        bin: &Path,
        kubeconfig: &Path,
        node: usize,
        n: usize,
        per_service: Duration,
    ) -> Result<Self, Error> {
        let start = Instant::now();
        let controller =
            lab.spawn(lab.node(node), ferrolb::controller_spawn(bin, kubeconfig, node, "controller", &[]))?;
        let budget = Duration::from_secs(120) + per_service * u32::try_from(n).unwrap_or(u32::MAX);
        wait_log(&controller, REBUILT, budget)?;
        let ready = start.elapsed();
        let memory = |p: &Proc| (peak_rss(p.pid()), rss(p.pid()));
        let at_ready = memory(&controller);
        let metrics = std::net::SocketAddr::new(addressing::node_ip(node), ferrolb::CONTROLLER_METRICS_PORT);
        wait::until_value(
            "the controller to reconcile every Service",
            budget,
            || reconciles(lab, metrics),
            |r| *r >= n as u64,
        )?;
        let reconciled = start.elapsed();
        let at_end = memory(&controller);
        Ok(ColdStart { controller, ready, reconciled, at_ready, at_end })
    }

    /// Prints the times, with `also` on the first line, and the memory beside the goal.
    fn print(&self, also: &str) {
        let show = |b: Option<u64>| b.map_or_else(|| "unknown".to_string(), |b| format!("{:.1} MiB", mib(b)));
        println!(
            "   process start → ready (state rebuilt) {:.2} s, → every Service reconciled {:.2} s; {also}",
            self.ready.as_secs_f64(),
            self.reconciled.as_secs_f64()
        );
        println!(
            "   at ready:                 VmHWM {}, VmRSS {}",
            show(self.at_ready.0),
            show(self.at_ready.1)
        );
        println!(
            "   every Service reconciled: VmHWM {}, VmRSS {}   (goal: VmHWM < {GOAL_CONTROLLER_RSS_MIB:.0} MiB at {GOAL_RSS_SERVICES} Services)",
            show(self.at_end.0),
            show(self.at_end.1)
        );
    }
}

/// Creates Service `i` as its creator would, then writes what the controller writes: the
/// ingress (status) and the pool annotation, each as its own request.
async fn store(client: &kube::Client, i: usize) -> Result<(), Error> {
    let api: Api<Service> = Api::namespaced(client.clone(), NS);
    let name = service_name(i);
    let fail = |what: &str, e: kube::Error| Error::Parse(format!("{what} Service {NS}/{name}: {e}"));
    let svc: Service = serde_json::from_value(defaulted(&name, i))
        .map_err(|e| Error::Parse(format!("Service {name}: {e}")))?;
    let pp = PostParams { field_manager: Some(CREATOR.into()), ..Default::default() };
    api.create(&pp, &svc).await.map_err(|e| fail("creating", e))?;
    let pp = PatchParams { field_manager: Some(CONTROLLER.into()), ..Default::default() };
    let ip = nth_address(i);
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}}});
    api.patch_status(&name, &pp, &Patch::Merge(&status))
        .await
        .map_err(|e| fail("writing the status of", e))?;
    let annotation = json!({"metadata": {"annotations": {ANNOTATION_IP_ALLOCATED_FROM_POOL: POOL_NAME}}});
    api.patch(&name, &pp, &Patch::Merge(&annotation)).await.map_err(|e| fail("annotating", e))?;
    Ok(())
}

/// A LoadBalancer Service as the real apiserver stores it after defaulting (the fake
/// defaults nothing). The ClusterIP is a string only: nothing routes it, no kube-proxy runs.
fn defaulted(name: &str, i: usize) -> serde_json::Value {
    let cluster_ip =
        Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 10)) + u32::try_from(i).unwrap_or(0)).to_string();
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": false,
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
            "clusterIP": cluster_ip,
            "clusterIPs": [cluster_ip],
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "sessionAffinity": "None",
            "externalTrafficPolicy": "Cluster",
            "internalTrafficPolicy": "Cluster",
        },
    })
}

/// The `i`-th address of [`POOL`].
fn nth_address(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + u32::try_from(i).unwrap_or(0))
}
