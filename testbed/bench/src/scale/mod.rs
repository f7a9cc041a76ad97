//! `bench scale`: what ferrolb costs the apiserver as nodes and Services grow (issue #39,
//! point 2), on the real control plane.
//!
//! One lab per size: etcd, kube-apiserver v1.37 and kube-controller-manager on node1;
//! kwok keeping `nodes` fake Nodes Ready beside the two real ones; the real controller
//! (node2) and a real speaker on each real node, all with their own ServiceAccounts'
//! tokens; BIRD on r1, peering with both speakers. `services` LoadBalancer Services
//! (policy Cluster, no NodePorts) each select a few pods on fake nodes, which kwok makes
//! Ready and the real EndpointSlice controller lists.
//!
//! Once everything is at rest (every Service addressed and routed via both nodes, every
//! ServiceAnnouncement written, every endpoint ready, ferrolb silent for a while):
//! 1. the requests ferrolb sends at rest, per component and verb (apiserver audit log),
//!    with the speakers' and the controller's RSS and CPU time meanwhile;
//! 2. Services created one after another, from the create request to the route in BIRD;
//! 3. the requests one Service change costs: a Service's ports patched, one Service created;
//! 4. every speaker restarted in turn (SIGTERM, started again, its routes back before the
//!    next): the lists each one makes, per kind.
//!
//! Through all four, what each component received from the apiserver (watch events,
//! bytes) is read from its own counters ([`traffic`]).
//!
//! Figures are printed beside the goals, never asserted on time;
//! `testbed/tests/real_scale.rs` runs the smallest size and asserts what is counted.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::bird_ctl::BirdCtl;
use crate::builds::{Builds, CLOCK_TICKS, cpu_ticks};
use crate::whole_path::{REBUILT, wait_log};
use ferrolb_cluster::load::{Window, now_us};
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::process::Proc;
use ferrolb_lab::routers::{self, Bird, RouterSpec};
use ferrolb_lab::{Error, Lab, LabConfig, addressing, client};
use traffic::Snapshot;

mod print;
pub mod requests;
mod routes;
mod runs;
#[cfg(test)]
mod tests;
pub mod traffic;
mod workload;
pub mod write;

pub use requests::Requests;
use workload::Workload;

/// Sizes and settings of a run.
#[derive(Debug, Clone)]
pub struct Params {
    /// Fake Nodes, one lab per value (and per value of `services`).
    pub nodes: Vec<usize>,
    /// Services.
    pub services: Vec<usize>,
    /// Each size with an L2Advertisement ([`Size::l2`]).
    pub l2: bool,
    /// What every size runs with.
    pub settings: Settings,
    /// Write the figures into BENCHMARKS.md's cluster-scale section and its plots.
    pub write: bool,
}

/// One size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// Fake Nodes (kwok), besides the two real ones.
    pub nodes: usize,
    /// LoadBalancer Services made before the measurements.
    pub services: usize,
    /// With an L2Advertisement too (of a pool no Service uses): every speaker then
    /// watches every Node, as speakers of an L2 cluster do.
    pub l2: bool,
}

/// What every size runs with.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long ferrolb is watched at rest.
    pub rest: Duration,
    /// Services created one after another at rest, each timed to its route.
    pub late: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { rest: Duration::from_secs(20), late: 20 }
    }
}

/// The real nodes, each running a speaker; the controller runs on the last.
const SPEAKERS: usize = 2;
/// Any single wait that does not grow with the size (a start, a session, a restart).
const T: Duration = Duration::from_secs(120);
/// The longest kwok waits to rewrite a Ready fake Node's status, and then between two
/// rewrites (its stage `node-heartbeat-with-lease`: 600 s plus up to 10 s of jitter), as a
/// kubelet does at least every 5 minutes.
const KWOK_HEARTBEAT: Duration = Duration::from_secs(610);
/// How long ferrolb must have sent nothing but watches and Lease renewals to be at rest.
const QUIET: Duration = Duration::from_secs(3);

/// The goals, printed beside the figures.
pub(crate) mod goals {
    /// A speaker's RSS at 5 000 nodes and 10 000 Services, MiB.
    pub(crate) const SPEAKER_RSS_MIB: f64 = 64.0;
    /// Service created → route, p99, ms.
    pub(super) const ROUTE_P99_MS: f64 = 100.0;
}

/// Every size of `p`, one lab each, printed as it completes, then a summary.
pub fn run(p: &Params) -> Result<(), Error> {
    let mut all = Vec::new();
    for &nodes in &p.nodes {
        for &services in &p.services {
            let size = Size { nodes, services, l2: p.l2 };
            let l2 = if p.l2 { ", an L2Advertisement" } else { "" };
            println!("\n=== bench scale: {nodes} fake Nodes, {services} Services{l2} ===");
            let figures = measure(size, &p.settings)?;
            figures.print();
            all.push(figures);
        }
    }
    print::summary(&all);
    if p.write {
        write::write(&all, &ferrolb_lab::binary::workspace_root())?;
    }
    Ok(())
}

/// What one size measured.
#[derive(Debug, Clone)]
pub struct Figures {
    /// The size.
    pub size: Size,
    /// Fake pods behind each Service.
    pub pods_per_service: usize,
    /// Which builds ran.
    pub builds: Vec<String>,
    /// How long getting there took.
    pub setup: Setup,
    /// ferrolb at rest.
    pub rest: Rest,
    /// Services created at rest, one at a time.
    pub latency: Latency,
    /// One Service's ports patched.
    pub port_change: Requests,
    /// What each component received for it.
    pub port_change_received: BTreeMap<String, traffic::Received>,
    /// One Service created.
    pub new_service: Requests,
    /// What each component received for it.
    pub new_service_received: BTreeMap<String, traffic::Received>,
    /// Every speaker restarted in turn.
    pub restart: Restart,
    /// Services not routed via every speaker at the end (should be none).
    pub unrouted: Vec<String>,
}

/// How long getting to rest took.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// Lab, control plane, fake Nodes Ready, ferrolb installed and started, sessions up.
    pub cluster_up: Duration,
    /// Pods and Services created.
    pub created: Duration,
    /// From the first create to rest.
    pub settled: Duration,
}

/// ferrolb at rest.
#[derive(Debug, Clone)]
pub struct Rest {
    /// The requests of the window.
    pub requests: Requests,
    /// Writes by others to what the speakers watch, over the window (should be none).
    pub others: requests::Tally,
    /// Each process over the window.
    pub processes: Vec<Process>,
    /// What each component received over the window.
    pub received: BTreeMap<String, traffic::Received>,
}

/// One of ferrolb's processes over the rest window.
#[derive(Debug, Clone)]
pub struct Process {
    /// `controller`, `speaker node1`, …
    pub who: String,
    /// VmRSS at the end of the window, bytes.
    pub rss: Option<u64>,
    /// Of which anonymous (heap, stacks) and file-backed (mostly the binary's text), bytes.
    pub rss_split: Option<(u64, u64)>,
    /// Its live heap (`ferrolb_speaker_heap_bytes`, `ferrolb_controller_heap_bytes`), bytes.
    pub heap: Option<u64>,
    /// utime + stime over the window.
    pub cpu: Option<Duration>,
}

/// Service created → route in BIRD.
#[derive(Debug, Clone, Default)]
pub struct Latency {
    /// One per Service routed in time.
    pub samples: Vec<Duration>,
    /// Where each routed Service's time went, from the apiserver's audit log (same
    /// clock), when the log has both its create and the controller's status write.
    pub stages: Vec<Stages>,
    /// Services not routed within the bound.
    pub missed: Vec<String>,
    /// Each speaker's plans meanwhile (`ferrolb_speaker_replan_seconds`), None where
    /// its metrics could not be read.
    pub replans: Vec<(String, Option<Replans>)>,
}

/// One Service's route time, split at the apiserver.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stages {
    /// The create request sent → its response (admission, etcd).
    pub create: Duration,
    /// The create's response → the controller's status write received: the watch to
    /// the controller and the controller's own work.
    pub controller: Duration,
    /// That write, received → answered.
    pub status_write: Duration,
    /// The status write answered → the route in BIRD: the watch to the speakers, their
    /// plan, BGP and BIRD.
    pub speaker: Duration,
}

impl Stages {
    /// ferrolb's part: the create's answer → the route.
    pub fn after_create(&self) -> Duration {
        self.controller + self.status_write + self.speaker
    }
}

/// A speaker's plans: how many, and the seconds they took together.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Replans {
    /// Plans made.
    pub count: u64,
    /// Seconds they took, summed.
    pub seconds: f64,
}

impl Replans {
    /// What was added since `before`.
    fn since(self, before: Replans) -> Replans {
        Replans { count: self.count.saturating_sub(before.count), seconds: self.seconds - before.seconds }
    }

    /// The mean plan's time, when there was one.
    pub fn mean(&self) -> Option<Duration> {
        (self.count > 0).then(|| Duration::from_secs_f64(self.seconds.max(0.0) / self.count as f64))
    }
}

/// Every speaker restarted in turn.
#[derive(Debug, Clone)]
pub struct Restart {
    /// The requests from the first SIGTERM until ferrolb was at rest again.
    pub requests: Requests,
    /// The restarted speakers, as named in [`Requests`] (`speaker node1`, …).
    pub speakers: Vec<String>,
    /// How long, until every route was back and ferrolb at rest.
    pub took: Duration,
    /// What each component received meanwhile; a restarted speaker, from its start.
    pub received: BTreeMap<String, traffic::Received>,
    /// The whole list of each of the largest kinds a speaker lists, as uncompressed JSON
    /// (`kubectl get --raw`), by resource: what its list would be without gzip. For Nodes,
    /// the list of every Node, which a speaker without L2Advertisements does not make.
    pub uncompressed: BTreeMap<String, u64>,
}

/// Runs one size in a lab of its own and returns what it measured.
pub fn measure(size: Size, settings: &Settings) -> Result<Figures, Error> {
    // The Services measured, the timed ones and the one of the change.
    let most = workload::most_services();
    if size.services + settings.late + 1 > most {
        return Err(Error::Check(format!(
            "{} Services, {} timed and 1 changed need more addresses than the bench's pool and ClusterIP \
             ranges hold: {most} Services in all (scale/workload.rs)",
            size.services, settings.late
        )));
    }
    let builds = Builds::choose()?;
    let started = Instant::now();
    let lab = Lab::up(LabConfig::nodes(SPEAKERS))?;
    let cluster = Cluster::start(&lab, &ClusterConfig { kwok_nodes: size.nodes, ..Default::default() })?;
    let nodes_ready = Instant::now();
    ferrolb::install(&cluster, if size.l2 { "l2-bgp" } else { "bgp" })?;
    cluster.kubectl_stdin(&["apply", "-f", "-"], &workload::configuration(size.services, size.l2))?;
    workload::wait_ready(&cluster, size.services)?;
    let bird = Bird::start(&lab, &RouterSpec::default())?;
    let mut ctl = BirdCtl::connect(&routes::bird_socket(&lab))?;
    let controller_conf = ferrolb::kubeconfig(&cluster, ferrolb::CONTROLLER_SA, 1)?;
    let controller = builds.start_controller(&lab, &controller_conf, SPEAKERS, "controller")?;
    let speaker_confs = (1..=SPEAKERS)
        .map(|i| ferrolb::speaker_kubeconfig(&cluster, i, 1))
        .collect::<Result<Vec<PathBuf>, Error>>()?;
    let mut speakers = (1..=SPEAKERS)
        .map(|i| builds.start_speaker(&lab, &speaker_confs[i - 1], i, "speaker", SPEAKER_METRICS_PORT))
        .collect::<Result<Vec<Proc>, Error>>()?;
    routers::wait_established(&bird, &speaker_ips(), T)?;
    wait_log(&controller, REBUILT, T)?;
    let cluster_up = started.elapsed();
    println!(
        "  lab, control plane, {} fake Nodes Ready, ferrolb and BIRD up in {:.1} s",
        size.nodes,
        cluster_up.as_secs_f64()
    );

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let client = ferrolb_cluster::client_from(&rt, &cluster.kubeconfig())?;
    // Room for every Service the run makes: the late ones and the change's too.
    let work = Workload::new(&cluster, &rt, &client, size.services + settings.late + 1);
    let names: Vec<String> = (1..=size.services).map(workload::service_name).collect();
    let t = Instant::now();
    work.create_many(&names)?;
    let created = t.elapsed();
    println!(
        "  {} pods and {} Services created in {:.1} s; waiting for rest",
        names.len() * work.pods_per_service,
        names.len(),
        created.as_secs_f64()
    );
    // kube-controller-manager writes each new Node and EndpointSlice at 20 requests a
    // second; kwok makes pods Ready a few hundred a second.
    let per_object = |n: usize, ms: u64| Duration::from_millis(ms) * u32::try_from(n).unwrap_or(u32::MAX);
    let budget = T + per_object(size.nodes, 100) + per_object(size.services, 200);
    routes::wait_converged(&work, &mut ctl, size.services, budget)?;
    requests::wait_quiet(&cluster, budget)?;
    let setup = Setup { cluster_up, created, settled: t.elapsed() };
    println!("  at rest {:.1} s after the first create", setup.settled.as_secs_f64());

    if size.l2 {
        // Each fake Node's status is rewritten from KWOK_HEARTBEAT after it became Ready:
        // before that, no Node changes for the speakers to receive.
        if let Some(left) = (nodes_ready + KWOK_HEARTBEAT).checked_duration_since(Instant::now()) {
            println!(
                "  waiting {:.0} s more for kwok's Node status writes to begin (each Node every 600-610 s)",
                left.as_secs_f64()
            );
            std::thread::sleep(left);
        }
    }
    let rest = at_rest(&lab, &cluster, &controller, &speakers, settings.rest)?;
    let mut total = size.services;
    let replans_before: Vec<Option<Replans>> = (1..=SPEAKERS).map(|i| replans(&lab, i)).collect();
    let mut latency = routes::created_to_route(&work, &mut ctl, settings.late)?;
    latency.replans = (1..=SPEAKERS)
        .zip(replans_before)
        .map(|(i, before)| {
            (speaker_name(i), replans(&lab, i).zip(before).map(|(after, before)| after.since(before)))
        })
        .collect();
    total += settings.late;
    routes::wait_converged(&work, &mut ctl, total, budget)?;
    requests::wait_quiet(&cluster, T)?;
    let ((port_change, port_change_received), (new_service, new_service_received)) =
        one_change(&lab, &cluster, &work, &mut ctl, &names[0], total)?;
    total += 1;
    let restart =
        rolling_restart(&lab, &cluster, &builds, &work, &mut ctl, &mut speakers, &speaker_confs, total)?;
    let unrouted = routes::progress(&work, &mut ctl)?.unrouted;
    let pods_per_service = work.pods_per_service;

    drop(work);
    rt.shutdown_background();
    drop((controller, speakers, bird, cluster));
    drop(lab);
    Ok(Figures {
        size,
        pods_per_service,
        builds: vec![builds.controller.how.clone(), builds.speaker.how.clone()],
        setup,
        rest,
        latency,
        port_change,
        port_change_received,
        new_service,
        new_service_received,
        restart,
        unrouted,
    })
}

/// Watches ferrolb for `length` at rest: its requests, its processes' CPU time and RSS,
/// the speakers' live heap.
fn at_rest(
    lab: &Lab,
    cluster: &Cluster,
    controller: &Proc,
    speakers: &[Proc],
    length: Duration,
) -> Result<Rest, Error> {
    // (who, pid, the lab node whose speaker it is)
    let mut procs: Vec<(String, i32, Option<usize>)> = vec![("controller".into(), controller.pid(), None)];
    procs.extend(speakers.iter().enumerate().map(|(i, p)| (speaker_name(i + 1), p.pid(), Some(i + 1))));
    let window = Window::open(cluster);
    let received = Snapshot::read(lab, speakers.len(), SPEAKERS);
    let before: Vec<Option<u64>> = procs.iter().map(|(_, pid, _)| cpu_ticks(*pid)).collect();
    // The measurement itself: nothing is awaited, ferrolb is watched doing nothing.
    std::thread::sleep(length);
    let after: Vec<Option<u64>> = procs.iter().map(|(_, pid, _)| cpu_ticks(*pid)).collect();
    let received = Snapshot::read(lab, speakers.len(), SPEAKERS).since(&received);
    let processes = procs
        .iter()
        .zip(before.iter().zip(&after))
        .map(|((who, pid, node), (b, a))| Process {
            who: who.clone(),
            rss: crate::rss(*pid),
            rss_split: crate::rss_split(*pid),
            heap: heap(lab, *node),
            cpu: b.zip(*a).map(|(b, a)| ticks(a.saturating_sub(b))),
        })
        .collect();
    let end = now_us();
    let requests = requests::close(&window, end)?;
    let others = requests::others_writes(&window, end);
    Ok(Rest { requests, others, processes, received })
}

/// The live heap (what the build or the allocator's free lists do not change) of the
/// speaker of lab node `speaker`, or else of the controller, read from the client.
fn heap(lab: &Lab, speaker: Option<usize>) -> Option<u64> {
    let (node, port, name) = match speaker {
        Some(i) => (i, SPEAKER_METRICS_PORT, "ferrolb_speaker_heap_bytes"),
        None => (SPEAKERS, ferrolb::CONTROLLER_METRICS_PORT, "ferrolb_controller_heap_bytes"),
    };
    client::metric_sample(&metrics_at(lab, node, port)?, name).map(|b| b as u64)
}

/// The plans the speaker of lab node `i` has made so far.
fn replans(lab: &Lab, i: usize) -> Option<Replans> {
    let metrics = speaker_metrics(lab, i)?;
    let count = client::metric_sample(&metrics, "ferrolb_speaker_replan_seconds_count")?;
    let seconds = client::metric_sample(&metrics, "ferrolb_speaker_replan_seconds_sum")?;
    Some(Replans { count: count as u64, seconds })
}

/// The metrics of the speaker of lab node `i`, read from the client.
fn speaker_metrics(lab: &Lab, i: usize) -> Option<String> {
    metrics_at(lab, i, SPEAKER_METRICS_PORT)
}

/// The metrics served on `port` of lab node `node`, read from the client.
fn metrics_at(lab: &Lab, node: usize, port: u16) -> Option<String> {
    let addr = SocketAddr::new(addressing::node_ip(node), port);
    client::http_get(lab.client(), addr, "/metrics", Duration::from_secs(2)).ok()
}

/// What one change cost: ferrolb's requests, and what each component received.
type Cost = (Requests, BTreeMap<String, traffic::Received>);

/// One Service's ports patched, then (once ferrolb is quiet again) one Service created:
/// the requests of each, and what each component received, from the change until
/// ferrolb is at rest again. The new Service's route proves both were processed: every
/// component sees the Services in the order they changed, on one watch.
fn one_change(
    lab: &Lab,
    cluster: &Cluster,
    work: &Workload<'_>,
    ctl: &mut BirdCtl,
    patched: &str,
    services: usize,
) -> Result<(Cost, Cost), Error> {
    // The new Service's pods first: kwok's work, not the change's.
    let name = "change-00001";
    work.create_pods(name)?;
    requests::wait_quiet(cluster, T)?;
    let snapshot = || Snapshot::read(lab, SPEAKERS, SPEAKERS);
    let (first, before) = (Window::open(cluster), snapshot());
    work.patch_port(patched, 8080)?;
    requests::wait_quiet(cluster, T)?;
    let (second, between) = (Window::open(cluster), snapshot());
    work.create_service(name)?;
    routes::wait_converged(work, ctl, services + 1, T)?;
    requests::wait_quiet(cluster, T)?;
    let (end, after) = (now_us(), snapshot());
    let port_change = (requests::close(&first, second.from_us())?, between.since(&before));
    let new_service = (requests::close(&second, end)?, after.since(&between));
    Ok((port_change, new_service))
}

/// Restarts every speaker in turn, as a DaemonSet rollout does: SIGTERM, started again
/// with the same token, then its model synced and every route back from its node
/// before the next. Returns the requests from the first SIGTERM until ferrolb is at
/// rest again.
#[allow(clippy::too_many_arguments)] // the lab's parts, each used
fn rolling_restart(
    lab: &Lab,
    cluster: &Cluster,
    builds: &Builds,
    work: &Workload<'_>,
    ctl: &mut BirdCtl,
    speakers: &mut [Proc],
    confs: &[PathBuf],
    services: usize,
) -> Result<Restart, Error> {
    let window = Window::open(cluster);
    // The restarted speakers count from their start; the controller from here.
    let mut before = Snapshot::read(lab, speakers.len(), SPEAKERS);
    before.0.retain(|who, _| who == "controller");
    let t = Instant::now();
    for (i, conf) in (1..=speakers.len()).zip(confs) {
        let old = &mut speakers[i - 1];
        if old.terminate(Duration::from_secs(10)).is_none() {
            old.kill();
        }
        let new = builds.start_speaker(lab, conf, i, "speaker-restarted", SPEAKER_METRICS_PORT)?;
        wait_log(&new, SYNCED, T)?;
        speakers[i - 1] = new;
        routes::wait_routes_from(ctl, addressing::node_ip(i), services, T)?;
    }
    routes::wait_converged(work, ctl, services, T)?;
    requests::wait_quiet(cluster, T)?;
    let took = t.elapsed();
    let received = Snapshot::read(lab, speakers.len(), SPEAKERS).since(&before);
    let requests = requests::close(&window, now_us())?;
    let mut uncompressed = BTreeMap::new();
    for (resource, path) in
        [("nodes", "/api/v1/nodes"), ("services", "/api/v1/services"), ("endpointslices", ENDPOINTSLICES)]
    {
        uncompressed.insert(resource.to_owned(), cluster.kubectl(&["get", "--raw", path])?.len() as u64);
    }
    let speakers = (1..=speakers.len()).map(speaker_name).collect();
    Ok(Restart { requests, speakers, took, received, uncompressed })
}

const ENDPOINTSLICES: &str = "/apis/discovery.k8s.io/v1/endpointslices";

/// The speaker's log line once every watched kind is listed.
const SYNCED: &str = "every watch listed: model synced";

/// Where a speaker serves its metrics, on its node's address (the manifests' port).
const SPEAKER_METRICS_PORT: u16 = 9121;

/// How the figures name the speaker of lab node `i`.
fn speaker_name(i: usize) -> String {
    format!("speaker {}", addressing::node_name(i))
}

/// The speakers' addresses, BIRD's neighbours.
fn speaker_ips() -> Vec<std::net::IpAddr> {
    (1..=SPEAKERS).map(addressing::node_ip).collect()
}

fn ticks(n: u64) -> Duration {
    Duration::from_millis(n * 1000 / CLOCK_TICKS)
}
