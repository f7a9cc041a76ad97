//! `bench whole-path`: ferrolb on the real control plane (issue #15, point 4) — the
//! path a user sees, from `kubectl create` of a LoadBalancer Service to its /32 in the
//! router's RIB, and the two restarts an upgrade goes through.
//!
//! One lab: etcd and kube-apiserver v1.37 on node1 (with kube-controller-manager), the
//! controller and one speaker as processes on node2 with their own ServiceAccounts'
//! tokens, BIRD 2 on r1 with graceful restart, the speaker's BGPPeer asking for it too.
//! Services take addresses from 198.18.0.0/16 and skip NodePorts; an extra ServiceCIDR
//! gives the apiserver ClusterIPs for more than the default /20 holds.
//!
//! 1. `--services` Services created one after another, each waiting for its route
//!    before the next: create call returned → `status.loadBalancer.ingress` seen by a
//!    watch, and → its /32 in BIRD's RIB (one poll loop over BIRD's control socket
//!    timestamps each prefix's first appearance).
//! 2. With `--existing` Services holding addresses, the controller is stopped (SIGTERM:
//!    it releases its Lease) and started again: process start → its "state rebuilt"
//!    log line, and the writes its ServiceAccount made since (the apiserver audit log).
//! 3. The speaker is SIGKILLed and started again: restart → BIRD's session Established,
//!    → graceful restart over (End-of-RIB) with every route imported again.
//!
//! Before step 1 the speaker's RSS at rest is printed (Kubernetes mode; `bench bgp-scale`
//! gives the static-mode figure). Figures are printed beside the goals, never
//! asserted.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Service;

use crate::builds::Builds;
use kube::api::{Api, PostParams};

use crate::bird_ctl::BirdCtl;
use ferrolb_cluster::audit::rfc3339_us;
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::process::{Proc, read_lossy, strip_ansi};
use ferrolb_lab::routers::{self, Bird, RouterSpec};
use ferrolb_lab::speaker::yaml;
use ferrolb_lab::{Error, Lab, LabConfig, addressing, wait};

mod cold_start;
pub(crate) use cold_start::{REBUILT, reconciles};

/// The speaker's metrics port, as the manifests serve it.
const SPEAKER_METRICS_PORT: u16 = 9121;
mod latency;
mod observe;
mod restart;
#[cfg(test)]
mod tests;

use observe::Seen;

/// What the bench runs with.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Services created one at a time for the latency figures.
    pub services: usize,
    /// Services holding addresses during the restarts (those of step 1 included).
    pub existing: usize,
}

/// The namespace of the bench's Services.
const NS: &str = "bench";
/// The address pool: bulk benchmarking addresses, room for [`MAX_SERVICES`].
const POOL: &str = "198.18.0.0/16";
/// More ClusterIPs than the cluster's default /20 (never routed: no kube-proxy runs).
const EXTRA_SERVICE_CIDR: &str = "198.19.0.0/17";
/// What the pool and the two ServiceCIDRs hold, with room to spare.
const MAX_SERVICES: usize = 30_000;
/// The node running the controller and the speaker (node1 holds the control plane).
const WORKER: usize = 2;
/// Graceful restart time, on BIRD and in the BGPPeer.
const GR_TIME: Duration = Duration::from_secs(120);
/// How often BIRD's RIB and sessions are polled while timing.
const BIRD_POLL: Duration = Duration::from_millis(5);
/// Concurrent create requests while making the `--existing` Services.
const IN_FLIGHT: usize = 16;
/// Longest wait for one Service of step 1.
const PER_SERVICE: Duration = Duration::from_secs(30);
/// Any other single wait (a restart, a session).
const T: Duration = Duration::from_secs(120);
/// The goals.
const GOAL_P50: Duration = Duration::from_millis(100);
const GOAL_P99: Duration = Duration::from_millis(300);
const GOAL_CONTROLLER: Duration = Duration::from_secs(3);
const GOAL_SPEAKER: Duration = Duration::from_secs(2);
/// The controller's peak RSS, MiB, with [`GOAL_RSS_SERVICES`] Services (issue #15 point 3).
pub(crate) const GOAL_CONTROLLER_RSS_MIB: f64 = 150.0;
/// The Services of [`GOAL_CONTROLLER_RSS_MIB`].
pub(crate) const GOAL_RSS_SERVICES: usize = 100_000;

/// Runs the three measurements in one lab and prints them.
pub fn run(p: &Params) -> Result<(), Error> {
    if p.services == 0 || p.existing > MAX_SERVICES {
        return Err(Error::Missing(format!(
            "--services must be at least 1 and --existing at most {MAX_SERVICES} (the pool {POOL} and the ClusterIP ranges)"
        )));
    }
    let total = p.existing.max(p.services);
    let builds = Builds::choose()?;
    println!(
        "bench whole-path: ferrolb on the real control plane (etcd, kube-apiserver v1.37, kube-controller-manager), BIRD 2 as the router"
    );
    println!("  binaries: {}\n            {}", builds.controller.how, builds.speaker.how);
    println!(
        "  lab: control plane on node1; ferrolb-controller and one ferrolb-speaker (BGP) on node2; everything shares {} CPUs",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let lab = Lab::up(LabConfig::nodes(WORKER))?;
    let t = Instant::now();
    let cluster = Cluster::start(&lab, &ClusterConfig::default())?;
    ferrolb::install(&cluster, "bgp")?;
    cluster.kubectl_stdin(&["apply", "-f", "-"], &configuration())?;
    ferrolb::wait_jsonpath(
        &cluster,
        &["servicecidr", "bench-extra"],
        "{.status.conditions[?(@.type==\"Ready\")].status}",
        T,
        |s| s == "True",
    )?;
    let bird = Bird::start(&lab, &RouterSpec::default().graceful_restart(GR_TIME))?;
    let controller_conf = ferrolb::kubeconfig(&cluster, ferrolb::CONTROLLER_SA, 1)?;
    let speaker_conf = ferrolb::speaker_kubeconfig(&cluster, WORKER, 1)?;
    let mut controller = builds.start_controller(&lab, &controller_conf, WORKER, "controller")?;
    let mut speaker = builds.start_speaker(&lab, &speaker_conf, WORKER, "speaker", SPEAKER_METRICS_PORT)?;
    routers::wait_established(&bird, &[addressing::node_ip(WORKER)], T)?;
    wait_log(&controller, cold_start::REBUILT, T)?;
    println!("  cluster, ferrolb and BIRD up in {:.1} s", t.elapsed().as_secs_f64());
    // The Kubernetes-mode speaker at rest: its BGP session up, its watches listed,
    // no Service yet (`bench bgp-scale` gives the static-mode figure).
    let pid = speaker.pid();
    match (crate::rss(pid), crate::rss_split(pid)) {
        (Some(b), Some((anon, file))) => println!(
            "  speaker at rest (Kubernetes mode, session up, no Service): RSS {:.1} MiB (anonymous {:.1}, file {:.1})",
            crate::mib(b),
            crate::mib(anon),
            crate::mib(file)
        ),
        _ => println!("  speaker at rest: /proc/{pid}/status unreadable"),
    }

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let client = ferrolb_cluster::client_from(&rt, &cluster.kubeconfig())?;
    let api: Api<Service> = Api::namespaced(client, NS);
    let (tx, seen) = mpsc::channel();
    let watch = observe::spawn_ingress_watch(&rt, api.clone(), tx.clone());
    let mut seen = Seen::new(seen);
    seen.wait_watch_listed(T)?;
    let mut ctl = BirdCtl::connect(&bird_socket(&lab))?;

    latency::created_to_route(&lab, &cluster, &rt, &api, &mut seen, tx, p.services)?;
    cold_start::make_existing(&lab, &rt, &api, &mut seen, &mut ctl, p.services, total)?;
    cold_start::controller_cold_start(&lab, &cluster, &builds, &mut controller, &controller_conf, total)?;
    restart::speaker_restart(&lab, &builds, &mut ctl, &mut speaker, &speaker_conf, total)?;

    watch.abort();
    rt.shutdown_background();
    drop((controller, speaker, bird, cluster));
    let id = lab.id().to_string();
    drop(lab);
    println!("\nlab {id} torn down");
    Ok(())
}

/// The bench's objects: its namespace, more ClusterIPs, the pool, the router as a
/// BGPPeer with graceful restart, and the advertisement.
fn configuration() -> String {
    let peer = yaml::router_peer_v4(&[&yaml::graceful_restart(GR_TIME)]);
    yaml::stream(&[
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"),
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: bench-extra}}\nspec: {{cidrs: [\"{EXTRA_SERVICE_CIDR}\"]}}\n"
        ),
        yaml::pool("bench", &[POOL]),
        peer,
        yaml::bgp_advertisement("bench", &["ipAddressPools: [bench]"]),
    ])
}

/// A LoadBalancer Service in `namespace` without NodePorts (thousands of Services would
/// exhaust their range): selecting `app=<name>` on target port `http` when `selected`,
/// else without a selector (no endpoints).
pub(crate) fn lb_service(namespace: &str, name: &str, selected: bool) -> Result<Service, Error> {
    let mut svc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": false,
            "ports": [{"port": 80, "protocol": "TCP"}],
        },
    });
    if selected {
        svc["spec"]["selector"] = serde_json::json!({"app": name});
        svc["spec"]["ports"][0]["targetPort"] = "http".into();
    }
    serde_json::from_value(svc).map_err(|e| Error::Parse(format!("Service {name}: {e}")))
}

fn service_name(i: usize) -> String {
    format!("svc-{i:05}")
}

/// Creates Service `name`.
async fn create(api: &Api<Service>, name: &str) -> Result<(), Error> {
    create_service(api, &lb_service(NS, name, false)?).await
}

/// Creates `svc`, retrying twice on failure; each attempt bounded. Already there (an
/// earlier attempt got through) is success.
pub(crate) async fn create_service(api: &Api<Service>, svc: &Service) -> Result<(), Error> {
    let mut last = String::new();
    for _ in 0..3 {
        match tokio::time::timeout(Duration::from_secs(30), api.create(&PostParams::default(), svc)).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => return Ok(()),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "no answer in 30 s".into(),
        }
    }
    let (ns, name) = (
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default(),
    );
    Err(Error::Parse(format!("creating Service {ns}/{name}: {last}")))
}

/// Where [`Bird::start`] puts BIRD's control socket (`<lab>/bird/bird.ctl`).
fn bird_socket(lab: &Lab) -> PathBuf {
    lab.dir().join("bird").join("bird.ctl")
}

// ---------------------------------------------------------------------------------------
// The apiserver audit log: server-side timestamps for step 1's breakdown, and the
// writes the restarted controller makes in step 2

/// One request of the apiserver audit log.
#[derive(Debug, Clone)]
struct Audited {
    verb: String,
    /// `resource` or `resource/subresource`.
    resource: String,
    name: String,
    /// requestReceivedTimestamp, Unix microseconds.
    received_us: i64,
    /// stageTimestamp of ResponseComplete, Unix microseconds.
    done_us: i64,
}

/// `system:serviceaccount:ferrolb-system:<sa>`.
fn service_account(sa: &str) -> String {
    format!("system:serviceaccount:{}:{sa}", ferrolb::NAMESPACE)
}

fn is_write(verb: &str) -> bool {
    matches!(verb, "create" | "update" | "patch" | "delete" | "deletecollection")
}

/// The audit log of the (only) apiserver.
fn audit_path(cluster: &Cluster) -> PathBuf {
    cluster.paths().audit_log(1)
}

/// How long the audit log is now, in bytes.
fn audit_len(cluster: &Cluster) -> u64 {
    std::fs::metadata(audit_path(cluster)).map_or(0, |m| m.len())
}

/// The requests of `user` received at or after `since_us`, in log order, read from byte
/// `offset` of the audit log on.
fn audit(cluster: &Cluster, offset: u64, user: &str, since_us: i64) -> Vec<Audited> {
    ferrolb_cluster::audit::read(&audit_path(cluster), offset, Some(user))
        .into_iter()
        .filter(|r| r.object)
        .filter_map(|r| {
            Some(Audited {
                received_us: r.received_us?,
                done_us: r.stage_us?,
                verb: r.verb,
                resource: r.resource,
                name: r.name,
            })
        })
        .filter(|a| a.received_us >= since_us)
        .collect()
}

// ---------------------------------------------------------------------------------------
// Process logs and times

/// Waits until the process's log has a line containing `needle`.
pub(crate) fn wait_log(proc: &Proc, needle: &str, timeout: Duration) -> Result<(), Error> {
    wait::until(&format!("{} to log {needle:?}", proc.name()), timeout, || {
        Ok(read_lossy(proc.log_path()).contains(needle).then_some(()))
    })
}

/// The timestamp of the first line of `log` containing `needle`, Unix microseconds.
fn log_time(log: &str, needle: &str) -> Option<i64> {
    log.lines().find(|l| l.contains(needle)).and_then(line_time)
}

/// tracing's RFC 3339 timestamp opening a log line (colours stripped), Unix microseconds.
fn line_time(line: &str) -> Option<i64> {
    rfc3339_us(strip_ansi(line).split_whitespace().next()?)
}

/// `key=value` of a tracing log line.
fn field(line: &str, key: &str) -> Option<String> {
    let plain = strip_ansi(line);
    let prefix = format!("{key}=");
    plain.split_whitespace().find_map(|w| w.strip_prefix(&prefix).map(str::to_string))
}

fn unix_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, micros)
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// From `from` to `to`, Unix microseconds (zero when `to` is earlier).
fn us_between(from: i64, to: i64) -> Duration {
    Duration::from_micros(u64::try_from(to.saturating_sub(from)).unwrap_or(0))
}
