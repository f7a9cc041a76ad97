//! `bench controller-memory --real`: the controller's cold start with N Services holding
//! addresses on the real control plane (etcd, kube-apiserver, kube-controller-manager;
//! issue #39: controller cold start and RSS at 50 000 Services), then the same controller
//! addressing new Services, to give what a first start with N unaddressed Services costs.
//!
//! The Services are IPv6 single-stack: their ClusterIPs come from the cluster's IPv6
//! range (a /112, where the IPv4 one is a /20) and their addresses from a /112 pool.
//! The admin stores each one as the controller leaves it: created with the pool
//! annotation, then its ingress written to status (two requests, at [`IN_FLIGHT`] at once).
//! The controller itself would take three writes each at its 50 a second (the fill
//! below measures them), about 50 minutes for 50 000.
//!
//! The controller runs on node2 with its ServiceAccount's token and the shipped limits;
//! what it sent comes from the apiserver's audit log. Figures are printed, never asserted.

use std::net::{Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use ferrolb_api::ANNOTATION_IP_ALLOCATED_FROM_POOL;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::ColdStart;
use crate::builds::{Build, CLOCK_TICKS, cpu_ticks};
use crate::scale::requests::{self, Requests};
use crate::whole_path::{create_service, lb_service};
use ferrolb_cluster::load::{Call, Window, now_us};
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::speaker::yaml;
use ferrolb_lab::{Error, Lab, LabConfig, addressing, client, wait};

/// The namespace of the bench's Services.
const NS: &str = "bench";
/// The pool: a /112 of the documentation prefix that no lab link uses.
const POOL: &str = "2001:db8:b0::/112";
const POOL_NAME: &str = "bench";
/// Services stored at most: [`FILL`] more must fit in [`POOL`] and in the cluster's IPv6
/// ClusterIP range (a /112 each).
pub(super) const CAPACITY: usize = 64_000;
/// The node running the controller (node1 runs the control plane).
const NODE: usize = 2;
/// Requests in flight while storing and creating.
const IN_FLIGHT: usize = 16;
/// The controller's shipped request rate (`ferrolb_runtime`'s `Limits::CONTROLLER`).
const CONTROLLER_QPS: u32 = 50;
/// New Services the running controller addresses after the cold start.
const FILL: usize = 1_000;

/// One lab with `n` Services stored, the controller started once, then [`FILL`] new
/// Services; returns the controller's VmHWM in bytes after the cold start.
pub(super) fn cold_start(build: &Build, n: usize) -> Result<Option<u64>, Error> {
    println!("\n{n} Services (real control plane)");
    let lab = Lab::up(LabConfig::nodes(NODE))?;
    let cluster = Cluster::start(&lab, &ClusterConfig::default())?;
    ferrolb::install(&cluster, "bgp")?;
    let config = yaml::stream(&[
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"),
        yaml::pool(POOL_NAME, &[POOL]),
    ]);
    cluster.kubectl_stdin(&["apply", "-f", "-"], &config)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let api: Api<Service> = Api::namespaced(ferrolb_cluster::client_from(&rt, &cluster.kubeconfig())?, NS);

    let t = Instant::now();
    rt.block_on(
        futures::stream::iter((0..n).map(|i| store(&api, i)))
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>(),
    )?;
    let stored = t.elapsed();
    let one = cluster.kubectl(&["get", "service", "-n", NS, &service_name(0), "-o", "json"])?;
    println!(
        "   stored in {:.1} s ({:.0} Services/s, two requests each); one Service is {} bytes of JSON",
        stored.as_secs_f64(),
        n as f64 / stored.as_secs_f64().max(1e-3),
        one.len()
    );

    let conf = ferrolb::kubeconfig(&cluster, ferrolb::CONTROLLER_SA, 1)?;
    let window = Window::open(&cluster);
    let watched = ColdStart::watch(&lab, &build.path, &conf, NODE, n, Duration::from_millis(5))?;
    let cpu = cpu_ticks(watched.controller.pid()).map(|t| t as f64 / CLOCK_TICKS as f64);
    let cold = requests::close(&window, now_us())?;
    watched.print(&cpu.map_or_else(|| "CPU unknown".into(), |s| format!("CPU {s:.1} s")));
    print_requests("   its requests from its start until then", &cold);

    let metrics = SocketAddr::new(addressing::node_ip(NODE), ferrolb::CONTROLLER_METRICS_PORT);
    fill(&lab, &rt, &api, &cluster, metrics, n)?;
    let peak = watched.at_end.0;
    drop(watched);
    rt.shutdown_background();
    drop(cluster);
    drop(lab);
    Ok(peak)
}

/// [`FILL`] new Services created at once, addressed by the running controller: how long,
/// and its writes per Service, from which a first start with `n` unaddressed Services follows.
fn fill(
    lab: &Lab,
    rt: &tokio::runtime::Runtime,
    api: &Api<Service>,
    cluster: &Cluster,
    metrics: SocketAddr,
    n: usize,
) -> Result<(), Error> {
    let assigned = || {
        let text = client::http_get(lab.client(), metrics, "/metrics", Duration::from_secs(2))?;
        Ok(client::metric_sample(&text, "ferrolb_allocator_allocations_total{result=\"assigned\"}")
            .unwrap_or(0.0) as u64)
    };
    let before = assigned()?;
    let window = Window::open(cluster);
    let t = Instant::now();
    rt.block_on(
        futures::stream::iter((0..FILL).map(|i| async move {
            let name = format!("new-{i:05}");
            create_service(api, &ipv6_service(&name, None)?).await
        }))
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>(),
    )?;
    let created = t.elapsed();
    wait::until_value(
        &format!("the controller to address {FILL} new Services"),
        Duration::from_secs(600),
        assigned,
        |a| *a >= before + FILL as u64,
    )?;
    let addressed = t.elapsed();
    let filled = requests::close(&window, now_us())?;
    let writes = filled.calls.iter().filter(|c| c.is_write() && !requests::is_lease_renewal(c)).count();
    let per_service = writes as f64 / FILL as f64;
    println!(
        "   {FILL} new Services created in {:.1} s, every one addressed {:.1} s after the first create: {:.0} a second",
        created.as_secs_f64(),
        addressed.as_secs_f64(),
        FILL as f64 / addressed.as_secs_f64().max(1e-3)
    );
    print_requests("   the controller's requests meanwhile", &filled);
    println!(
        "   {per_service:.2} writes per new Service: at the controller's {CONTROLLER_QPS} requests a second, a first start with {n} unaddressed Services takes about {:.1} minutes",
        n as f64 * per_service / f64::from(CONTROLLER_QPS) / 60.0
    );
    Ok(())
}

/// The controller's requests of `r` by verb and resource, Lease renewals apart.
fn print_requests(what: &str, r: &Requests) {
    let controller = |c: &Call| Requests::who(c) == "controller";
    let pages: usize =
        r.later_pages().iter().filter(|((who, _), _)| who == "controller").map(|(_, n)| n).sum();
    println!(
        "{what} ({:.1} s; besides {} Lease renewals and {pages} later pages of lists):",
        r.window.as_secs_f64(),
        r.lease_renewals()
    );
    let tally = r.tally(|c| controller(c) && !c.is_later_page() && !requests::is_lease_renewal(c));
    for ((_, verb, resource), n) in tally {
        println!("     {n:>7} {verb} {resource}");
    }
}

fn service_name(i: usize) -> String {
    format!("svc-{i:06}")
}

/// Creates Service `i` with the pool annotation, then writes its ingress to status: as
/// the controller leaves it.
async fn store(api: &Api<Service>, i: usize) -> Result<(), Error> {
    let name = service_name(i);
    let ip = nth_address(i);
    create_service(api, &ipv6_service(&name, Some(POOL_NAME))?).await?;
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(|e| Error::Parse(format!("writing the status of Service {NS}/{name}: {e}")))?;
    Ok(())
}

/// A LoadBalancer Service, IPv6 single-stack, selecting nothing (so no EndpointSlice is
/// made for it); annotated as allocated from `pool` when given.
fn ipv6_service(name: &str, pool: Option<&str>) -> Result<Service, Error> {
    let mut svc = lb_service(NS, name, false)?;
    if let Some(spec) = svc.spec.as_mut() {
        spec.ip_families = Some(vec!["IPv6".into()]);
        spec.ip_family_policy = Some("SingleStack".into());
    }
    if let Some(pool) = pool {
        svc.metadata.annotations =
            Some([(ANNOTATION_IP_ALLOCATED_FROM_POOL.to_owned(), pool.to_owned())].into());
    }
    Ok(svc)
}

/// The `i`-th address of [`POOL`].
fn nth_address(i: usize) -> Ipv6Addr {
    let base: Ipv6Addr = "2001:db8:b0::".parse().unwrap_or(Ipv6Addr::UNSPECIFIED);
    Ipv6Addr::from(u128::from(base) + i as u128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_in_the_pool() {
        let (base, len) = POOL.split_once('/').unwrap();
        let base: Ipv6Addr = base.parse().unwrap();
        let size = 1u128 << (128 - len.parse::<u32>().unwrap());
        assert_eq!(nth_address(0), base);
        assert!(u128::from(nth_address(CAPACITY + FILL)) < u128::from(base) + size);
        assert_ne!(nth_address(1), nth_address(2));
    }
}
