//! ferrolb's high availability on the real control plane (kube-apiserver v1.37, etcd,
//! kube-controller-manager), each component with its own ServiceAccount token:
//!
//! * two controller replicas elect a leader on the real Lease; 200 LoadBalancer Services
//!   churn while the leader is SIGKILLed (twice): the standby takes the Lease over, and
//!   at the end every Service holds one address, none twice, and the pool's counts match
//!   what Services hold — and the two never led at the same time;
//! * with two apiservers, the leader's own one frozen: it steps down within its renew
//!   deadline, before the standby (through the other apiserver) takes the Lease over;
//! * the kube-apiserver frozen (SIGSTOP) for a minute, then killed and restarted: the
//!   speakers withdraw nothing (BIRD's RIB unchanged, no UPDATE at the recorder), and
//!   changes flow again afterwards.
//!
//! Needs `target/kube/current/ferrolb-kube` and the debug `ferrolb-controller` and
//! `ferrolb-speaker` (testbed/test.sh builds them first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrolb_api::IpAddressPool;
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::addressing::node_ip as v4;
use ferrolb_lab::kubeapi::{Objects, ingress_ips as ingress};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::{Proc, strip_ansi};
use ferrolb_lab::routers::exabgp::Record;
use ferrolb_lab::routers::{self, Bird, ExaBgp, ExaNeighbor, RibPath, Router, RouterSpec};
use ferrolb_lab::speaker::yaml;
use ferrolb_lab::{Lab, LabConfig, addressing, client, wait};
use ferrolb_speaker::cluster::{CALL_TIMEOUT, KINDS, WatchBackoff};
use ferrolb_testkit::rng::Rng;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nix::sys::signal::Signal;
use serde_json::json;

const T: Duration = Duration::from_secs(60);
/// The controllers' `--lease-duration`: short, so that two takeovers fit in the churn
/// (renewals every 1.2 s, step-down after 4 s without one).
const LEASE: &str = "6s";
/// Services created over the churn (some deleted, some of those created again).
const SERVICES: usize = 200;
/// How long the apiserver stays frozen (the acceptance: a minute).
const STOP_OUTAGE: Duration = Duration::from_secs(60);
/// How long the apiserver stays dead: shorter than the freeze (refused at once), past the
/// controller's renew deadline (10 s of the default 15 s lease) and two watch back-offs.
const KILL_OUTAGE: Duration = Duration::from_secs(20);
const _: () = assert!(KILL_OUTAGE.as_millis() > 2 * (WatchBackoff::MAX.as_millis() * 3 / 2));
const _: () = assert!(STOP_OUTAGE.as_millis() > CALL_TIMEOUT.as_millis() + WatchBackoff::MAX.as_millis() * 3);
/// A bound on how long the speakers' watches may take to recover once the apiserver is
/// back from its death (a poll limit, not a goal: the figure is printed). Every watch of
/// the speakers (readiness pod watch included) and of the controller backs off at most
/// 7.5 s a round (speaker/src/cluster/mod.rs `WatchBackoff`, controller/src/run.rs
/// `watch_backoff`, not kube's default of up to 60 s), and the restarted apiserver's empty
/// watch cache answers each resumed watch with 410 Gone, which costs one more round
/// before the relist (seen: 8–14 s).
const RECOVERY: Duration = Duration::from_secs(60);
/// A bound on a new Local Service being announced after the restart. Its EndpointSlice
/// comes from kube-controller-manager, whose client-go reflectors back off up to 30 s a
/// round, twice that with jitter (seen: 54–64 s after a 20 s outage, the speakers long
/// recovered): kube's recovery, not ferrolb's, which RECOVERY bounds.
const KCM_RECOVERY: Duration = Duration::from_secs(180);
const SPEAKER_METRICS_PORT: u16 = 9121;
const LEASE_NAME: &str = "ferrolb-controller";
/// What a controller logs once it leads and has rebuilt its state.
const ALLOCATING: &str = "state rebuilt from the API; allocating";

// ---------------------------------------------------------------------------------------
// Controller replicas and what their logs say about leadership.

/// Starts a controller replica with a kubeconfig made beforehand (see
/// [`ferrolb::start_controller_with`]).
fn spawn_controller(lab: &Lab, node: usize, identity: &str, kubeconfig: &Path, extra: &[String]) -> Proc {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    ferrolb::start_controller_with(lab, node, identity, kubeconfig, &extra).unwrap()
}

/// One controller replica (a pod of the Deployment): restarted with the same identity
/// and token, as a kubelet restarts a container; its log accumulates every lifetime.
struct Replica {
    node: usize,
    identity: String,
    kubeconfig: PathBuf,
    extra: Vec<String>,
    proc: Proc,
    /// When each lifetime ended (we killed it, or saw it exited), in start order.
    ends: Vec<Option<Timestamp>>,
    /// Killed by the test and not restarted yet.
    down: bool,
}

impl Replica {
    /// Starts the replica on `node`, talking to the apiserver of control-plane node `server`.
    fn start(
        lab: &Lab,
        cluster: &Cluster,
        node: usize,
        server: usize,
        identity: &str,
        extra: &[&str],
    ) -> Self {
        let kubeconfig = ferrolb::kubeconfig(cluster, ferrolb::CONTROLLER_SA, server).unwrap();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let proc = spawn_controller(lab, node, identity, &kubeconfig, &extra);
        Replica { node, identity: identity.into(), kubeconfig, extra, proc, ends: vec![None], down: false }
    }

    fn kill(&mut self) {
        self.proc.kill();
        self.ends.last_mut().unwrap().get_or_insert_with(Timestamp::now);
        self.down = true;
    }

    fn restart(&mut self, lab: &Lab) {
        self.kill();
        self.proc = spawn_controller(lab, self.node, &self.identity, &self.kubeconfig, &self.extra);
        self.ends.push(None);
        self.down = false;
    }

    /// Restarts the replica if it exited by itself (as the kubelet would); whether it did.
    fn revive(&mut self, lab: &Lab) -> bool {
        if self.down || self.proc.is_running() {
            return false;
        }
        self.ends.last_mut().unwrap().get_or_insert_with(Timestamp::now);
        println!("{} exited by itself ({:?}); restarting it", self.identity, self.proc.try_exit());
        self.restart(lab);
        true
    }

    fn logs(&self) -> String {
        strip_ansi(&self.proc.logs())
    }

    fn metrics_addr(&self) -> SocketAddr {
        SocketAddr::new(v4(self.node), ferrolb::CONTROLLER_METRICS_PORT)
    }

    /// The spans during which this replica led: from "became leader" to its step-down,
    /// shutdown or death (the end we recorded, else the next start, else now).
    fn leadership(&self) -> Vec<(Timestamp, Timestamp)> {
        let mut spans = Vec::new();
        let mut lifetime: Option<usize> = None;
        let mut open: Option<Timestamp> = None;
        let lines = timed_lines(&self.logs());
        let close = |open: &mut Option<Timestamp>, end: Timestamp, spans: &mut Vec<_>| {
            if let Some(start) = open.take() {
                spans.push((start, end));
            }
        };
        for (ts, line) in &lines {
            if line.contains("ferrolb_controller: starting") {
                if let Some(l) = lifetime {
                    close(&mut open, self.ends.get(l).copied().flatten().unwrap_or(*ts), &mut spans);
                }
                lifetime = Some(lifetime.map_or(0, |l| l + 1));
            } else if line.contains("became leader") {
                open = Some(*ts);
            } else if ["lost the leader lease", "stepping down", "shutting down"]
                .iter()
                .any(|m| line.contains(m))
            {
                close(&mut open, *ts, &mut spans);
            }
        }
        let end = lifetime.and_then(|l| self.ends.get(l).copied().flatten()).unwrap_or_else(Timestamp::now);
        close(&mut open, end, &mut spans);
        spans
    }
}

/// Lines that start with a tracing timestamp, with it parsed.
fn timed_lines(text: &str) -> Vec<(Timestamp, String)> {
    text.lines()
        .filter_map(|l| {
            let (ts, _) = l.split_once(' ')?;
            Some((ts.parse::<Timestamp>().ok()?, l.to_string()))
        })
        .collect()
}

/// Every pair of overlapping leadership spans of different replicas.
fn overlaps(replicas: &[&Replica]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, a) in replicas.iter().enumerate() {
        for b in &replicas[i + 1..] {
            for (s1, e1) in a.leadership() {
                for (s2, e2) in b.leadership() {
                    if s1 < e2 && s2 < e1 {
                        out.push(format!("{} led {s1}..{e1} and {} led {s2}..{e2}", a.identity, b.identity));
                    }
                }
            }
        }
    }
    out
}

/// Log lines showing the API refused a request (RBAC), except those logged within
/// `starting`: an apiserver still starting refuses requests until its RBAC caches are
/// filled (it is not ready yet), whatever the roles say.
fn forbidden(logs: &str, starting: Option<(Timestamp, Timestamp)>) -> Vec<String> {
    let in_start = |line: &str| {
        let ts = line.split_once(' ').and_then(|(t, _)| t.parse::<Timestamp>().ok());
        matches!((ts, starting), (Some(t), Some((a, b))) if a <= t && t <= b)
    };
    logs.lines()
        .filter(|l| l.contains("code: 403") || l.to_ascii_lowercase().contains("forbidden"))
        .filter(|l| !in_start(l))
        .map(String::from)
        .collect()
}

/// Samples every replica's `ferrolb_controller_leader` gauge until dropped; counts the
/// samples in which more than one replica said it leads.
struct LeaderSampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(u64, u64)>>,
}

impl LeaderSampler {
    fn start(from: Netns, addrs: Vec<SocketAddr>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut samples, mut both) = (0u64, 0u64);
            while !flag.load(Ordering::Relaxed) {
                let leading = addrs
                    .iter()
                    .filter(|a| {
                        client::http_get(&from, **a, "/metrics", Duration::from_secs(2))
                            .is_ok_and(|m| m.lines().any(|l| l.trim() == "ferrolb_controller_leader 1"))
                    })
                    .count();
                samples += 1;
                if leading > 1 {
                    both += 1;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (samples, both)
        });
        LeaderSampler { stop, thread: Some(thread) }
    }

    /// (samples, samples with two leaders).
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().map(|t| t.join().unwrap()).unwrap_or_default()
    }
}

impl Drop for LeaderSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------
// The API, as the cluster's admin.

fn lease(cluster: &Cluster, c: &kube::Client) -> Option<Lease> {
    let api: Api<Lease> = Api::namespaced(c.clone(), ferrolb::NAMESPACE);
    cluster.block_on(api.get_opt(LEASE_NAME)).ok().flatten()
}

fn holder(cluster: &Cluster, c: &kube::Client) -> Option<String> {
    lease(cluster, c)?.spec?.holder_identity.filter(|h| !h.is_empty())
}

fn lb_service(name: &str, namespace: &str, selector: Option<&str>, local: bool) -> Service {
    let mut spec = json!({"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]});
    if let Some(app) = selector {
        spec["selector"] = json!({"app": app});
    }
    if local {
        spec["externalTrafficPolicy"] = json!("Local");
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))
    .unwrap()
}

/// Service `namespace/name`'s addresses once it has some.
fn wait_addresses(cluster: &Cluster, c: &kube::Client, namespace: &str, name: &str) -> Vec<String> {
    let api: Api<Service> = Api::namespaced(c.clone(), namespace);
    wait::until(&format!("an address for Service {namespace}/{name}"), T, || {
        let s = cluster.block_on(api.get(name)).map_err(|e| ferrolb_lab::Error::Parse(e.to_string()))?;
        let ips = ingress(&s);
        Ok((!ips.is_empty()).then_some(ips))
    })
    .unwrap()
}

// ---------------------------------------------------------------------------------------
// Part 1: two controllers, one real Lease, a churn with the leader killed.

#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Delete(String),
}

/// Creates svc-000 … svc-199; after a create, sometimes deletes a live Service, and
/// sometimes creates a deleted one again. Returns the ops and the Services left.
fn churn_plan(rng: &mut Rng) -> (Vec<Op>, BTreeSet<String>) {
    let mut ops = Vec::new();
    let mut live: Vec<String> = Vec::new();
    let mut gone: Vec<String> = Vec::new();
    for i in 0..SERVICES {
        let name = format!("svc-{i:03}");
        ops.push(Op::Create(name.clone()));
        live.push(name);
        if rng.below(4) == 0 {
            let n = live.swap_remove(rng.index(live.len()));
            ops.push(Op::Delete(n.clone()));
            gone.push(n);
        }
        if !gone.is_empty() && rng.below(3) == 0 {
            let n = gone.swap_remove(rng.index(gone.len()));
            ops.push(Op::Create(n.clone()));
            live.push(n);
        }
    }
    (ops, live.into_iter().collect())
}

const CHURN_NS: &str = "churn";
const CHURN_POOL: &str = "churn";

fn execute(cluster: &Cluster, c: &kube::Client, op: &Op) {
    let api: Api<Service> = Api::namespaced(c.clone(), CHURN_NS);
    match op {
        Op::Create(name) => {
            // A name deleted just before may still be going away: retry briefly.
            wait::until(&format!("create Service {name}"), T, || {
                match cluster
                    .block_on(api.create(&PostParams::default(), &lb_service(name, CHURN_NS, None, false)))
                {
                    Ok(_) => Ok(Some(())),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
                    Err(e) => Err(ferrolb_lab::Error::Parse(e.to_string())),
                }
            })
            .unwrap();
        }
        Op::Delete(name) => {
            cluster.block_on(api.delete(name, &DeleteParams::default())).unwrap();
        }
    }
}

/// Everything wrong with the end state; empty once converged.
fn churn_problems(cluster: &Cluster, c: &kube::Client, expected: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    let api: Api<Service> = Api::namespaced(c.clone(), CHURN_NS);
    let list = match cluster.block_on(api.list(&ListParams::default())) {
        Ok(l) => l.items,
        Err(e) => return vec![format!("listing Services: {e}")],
    };
    let names: BTreeSet<String> = list.iter().filter_map(|s| s.metadata.name.clone()).collect();
    if &names != expected {
        out.push(format!(
            "Services differ from the plan: missing {:?}, unexpected {:?}",
            expected.difference(&names).collect::<Vec<_>>(),
            names.difference(expected).collect::<Vec<_>>()
        ));
    }
    let mut holders: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in &list {
        let name = s.metadata.name.clone().unwrap_or_default();
        let ips = ingress(s);
        if ips.len() != 1 {
            out.push(format!("{name} holds {ips:?}, not exactly one address"));
        }
        for ip in ips {
            holders.entry(ip).or_default().push(name.clone());
        }
    }
    for (ip, hs) in &holders {
        if hs.len() > 1 {
            out.push(format!("{ip} held by {hs:?}"));
        }
    }
    let pools: Api<IpAddressPool> = Api::all(c.clone());
    match cluster.block_on(pools.get(CHURN_POOL)) {
        Ok(p) => {
            let st = p.status.unwrap_or_default();
            let held = holders.len() as i64;
            if st.assigned_ipv4 != held || st.available_ipv4 != 256 - held {
                out.push(format!(
                    "pool status says {} assigned / {} available, Services hold {held} of 256 (leak or stale count)",
                    st.assigned_ipv4, st.available_ipv4
                ));
            }
        }
        Err(e) => out.push(format!("reading IPAddressPool {CHURN_POOL}: {e}")),
    }
    out
}

#[test]
fn two_controllers_on_a_real_lease_survive_leader_kills_during_a_churn_of_200_services() {
    let seed = std::env::var("FERROLB_HA_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    println!("churn seed: {seed} (rerun with FERROLB_HA_SEED={seed})");
    let (ops, expected) = churn_plan(&mut Rng::new(seed));

    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    ferrolb::install(&cluster, "l2-bgp").unwrap();
    let c = cluster.client();
    cluster.apply_stream(&yaml::pool(CHURN_POOL, &[addressing::BGP_POOL_V4])).unwrap();
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CHURN_NS}})).unwrap();

    let flags = ["--lease-duration", LEASE];
    let mut replicas = [
        Replica::start(&lab, &cluster, 1, 1, "ctrl-a", &flags),
        Replica::start(&lab, &cluster, 2, 1, "ctrl-b", &flags),
    ];
    let sampler =
        LeaderSampler::start(lab.client().clone(), replicas.iter().map(Replica::metrics_addr).collect());
    let first = wait::until("a replica holds the Lease", T, || Ok(holder(&cluster, &c))).unwrap();
    let leader_ix = replicas.iter().position(|r| r.identity == first).unwrap();
    wait::until("the leader allocates", T, || {
        Ok(replicas[leader_ix].logs().contains(ALLOCATING).then_some(()))
    })
    .unwrap();
    let transitions_before = lease(&cluster, &c).and_then(|l| l.spec?.lease_transitions).unwrap_or_default();

    // Kill the leader about a third and two thirds into the churn; while the Lease is
    // orphaned the churn goes on (paced, so that it spans the takeover), and the killed
    // replica comes back (as a standby) only once the other took over — with its old
    // identity it would otherwise simply renew its own Lease.
    let kills = [ops.len() * 3 / 10, ops.len() * 65 / 100];
    let mut pending: Option<(usize, Instant)> = None;
    let mut takeovers: Vec<Duration> = Vec::new();
    let mut handovers = Vec::new();
    let churn_start = Instant::now();
    let check_takeover = |pending: &mut Option<(usize, Instant)>,
                          replicas: &mut [Replica; 2],
                          takeovers: &mut Vec<Duration>,
                          handovers: &mut Vec<(String, String)>|
     -> bool {
        let Some((killed, at)) = *pending else { return true };
        let other = &replicas[1 - killed].identity;
        if holder(&cluster, &c).as_ref() != Some(other) {
            return false;
        }
        takeovers.push(at.elapsed());
        handovers.push((replicas[killed].identity.clone(), other.clone()));
        replicas[killed].restart(&lab);
        *pending = None;
        true
    };
    for (n, op) in ops.iter().enumerate() {
        if kills.contains(&n) {
            if pending.is_some() {
                wait::until("the earlier takeover", T, || {
                    Ok(check_takeover(&mut pending, &mut replicas, &mut takeovers, &mut handovers)
                        .then_some(()))
                })
                .unwrap();
            }
            let current = holder(&cluster, &c).expect("a leader holds the Lease mid-churn");
            let ix = replicas.iter().position(|r| r.identity == current).unwrap();
            replicas[ix].kill();
            println!("op {n}/{}: SIGKILLed the leader {current}", ops.len());
            pending = Some((ix, Instant::now()));
        }
        execute(&cluster, &c, op);
        for r in replicas.iter_mut() {
            r.revive(&lab);
        }
        if pending.is_some() && !check_takeover(&mut pending, &mut replicas, &mut takeovers, &mut handovers) {
            std::thread::sleep(Duration::from_millis(60));
        }
    }
    let churned = Instant::now();
    wait::until("the last takeover", T, || {
        Ok(check_takeover(&mut pending, &mut replicas, &mut takeovers, &mut handovers).then_some(()))
    })
    .unwrap();
    println!(
        "churn of {} ops over {:?}; takeovers {handovers:?} after {takeovers:?}",
        ops.len(),
        churned.duration_since(churn_start)
    );

    let r = wait::until_value(
        "every Service with one address of its own, and the pool's counts right",
        Duration::from_secs(120),
        || Ok(churn_problems(&cluster, &c, &expected)),
        Vec::is_empty,
    );
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    println!("converged {:?} after the last op ({} Services)", churned.elapsed(), expected.len());

    // The Lease was really used: each kill handed it to the other identity.
    assert_eq!(handovers.len(), 2);
    for (from, to) in &handovers {
        assert_ne!(from, to);
    }
    let transitions = lease(&cluster, &c).and_then(|l| l.spec?.lease_transitions).unwrap_or_default();
    assert!(transitions >= transitions_before + 2, "leaseTransitions {transitions_before} → {transitions}");

    // Never two leaders: neither by the logs' leadership spans nor by any metrics sample.
    let (samples, both) = sampler.finish();
    println!("leader gauge sampled {samples} times");
    assert_eq!(both, 0, "{both} of {samples} samples saw two replicas report ferrolb_controller_leader 1");
    let refs: Vec<&Replica> = replicas.iter().collect();
    for r in &refs {
        println!("{} led {:?}", r.identity, r.leadership());
    }
    assert!(refs.iter().all(|r| !r.leadership().is_empty()), "each replica led at some point");
    assert_eq!(overlaps(&refs), Vec::<String>::new());
    for r in &refs {
        assert_eq!(forbidden(&r.logs(), None), Vec::<String>::new(), "{}: requests refused", r.identity);
    }
}

/// The leader's own apiserver freezes while the standby talks to another one: the
/// standby takes the Lease over once it expires, so the leader must have stopped leading
/// by then although its renewal never got an answer (it used to wait in that request
/// until the apiserver came back, leading all the while: two leaders).
#[test]
fn a_leader_whose_apiserver_freezes_steps_down_before_the_standby_on_another_apiserver_takes_over() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let mut cluster =
        Cluster::start(&lab, &ClusterConfig { control_planes: 2, ..Default::default() }).unwrap();
    ferrolb::install(&cluster, "l2-bgp").unwrap();
    let c = cluster.client();
    let flags = ["--lease-duration", LEASE];
    let mut a = Replica::start(&lab, &cluster, 1, 1, "ctrl-a", &flags);
    wait::until("ctrl-a holds the Lease", T, || {
        Ok((holder(&cluster, &c).as_deref() == Some("ctrl-a")).then_some(()))
    })
    .unwrap();
    let mut b = Replica::start(&lab, &cluster, 2, 2, "ctrl-b", &flags);
    wait::until("ctrl-b stands by, reading the Lease through apiserver 2", T, || {
        Ok(b.logs().contains("waiting for the leader lease").then_some(()))
    })
    .unwrap();
    let sampler = LeaderSampler::start(lab.client().clone(), vec![a.metrics_addr(), b.metrics_addr()]);

    cluster.signal_apiserver(1, Signal::SIGSTOP);
    let frozen = Instant::now();
    wait::until("ctrl-b takes over through apiserver 2", T, || {
        a.revive(&lab);
        Ok(b.logs().contains("became leader").then_some(()))
    })
    .unwrap();
    println!("the standby leads {:?} after the leader's apiserver froze", frozen.elapsed());
    cluster.signal_apiserver(1, Signal::SIGCONT);
    wait::until("the apiserver answers again", T, || Ok(cluster.apiserver_ready(1).then_some(()))).unwrap();
    // ctrl-a (restarted by then) follows the new leader.
    wait::until("ctrl-a follows ctrl-b", T, || {
        a.revive(&lab);
        Ok(a.logs().contains("waiting for the leader lease leader=ctrl-b").then_some(()))
    })
    .unwrap();
    assert_eq!(holder(&cluster, &c).as_deref(), Some("ctrl-b"));
    let (samples, both) = sampler.finish();
    for r in [&a, &b] {
        println!("{} led {:?}", r.identity, r.leadership());
    }
    assert_eq!(overlaps(&[&a, &b]), Vec::<String>::new());
    assert_eq!(both, 0, "{both} of {samples} samples saw two replicas report ferrolb_controller_leader 1");
    assert!(
        a.logs().contains("stepping down"),
        "ctrl-a did not step down although its renewals got no answer:\n{}",
        a.logs()
    );
    for r in [&a, &b] {
        assert_eq!(forbidden(&r.logs(), None), Vec::<String>::new(), "{}: requests refused", r.identity);
    }
    b.kill();
}

// ---------------------------------------------------------------------------------------
// Part 2: the speakers through an apiserver freeze and an apiserver death.

/// A BGP Service of ours: its name, its traffic policy and where its pod runs.
struct Web {
    name: &'static str,
    local: bool,
    pod_node: usize,
}

impl Web {
    /// The nodes that announce it: every node (Cluster), or its pod's node (Local).
    fn announcers(&self) -> Vec<IpAddr> {
        if self.local { vec![v4(self.pod_node)] } else { vec![v4(1), v4(2)] }
    }
}

/// Creates the Service and its pod (bound to the node: the testbed's kubelet makes it
/// Running and Ready, the real EndpointSlice controller lists it); waits for the address
/// and the routes in BIRD. Returns the `/32`.
fn deploy(cluster: &Cluster, c: &kube::Client, bird: &Bird, lab: &Lab, w: &Web, timeout: Duration) -> String {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{}-pod", w.name), "namespace": "default", "labels": {"app": w.name}},
        "spec": {
            "nodeName": addressing::node_name(w.pod_node),
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "web", "image": "example.invalid/web"}],
        },
    });
    cluster.apply(&pod).unwrap();
    let api: Api<Service> = Api::namespaced(c.clone(), "default");
    cluster
        .block_on(api.create(&PostParams::default(), &lb_service(w.name, "default", Some(w.name), w.local)))
        .unwrap();
    let created = Instant::now();
    let ips = wait_addresses(cluster, c, "default", w.name);
    assert_eq!(ips.len(), 1, "{}: {ips:?}", w.name);
    let assigned = created.elapsed();
    let prefix = format!("{}/32", ips[0]);
    let r = routers::wait_rib(bird, &prefix, &w.announcers(), timeout);
    assert!(r.is_ok(), "{}: {r:?}\n{}\n{}", w.name, lab.logs(40), cluster.logs(20));
    println!(
        "{}: address {assigned:?}, routes {:?} after the Service was created",
        w.name,
        created.elapsed()
    );
    prefix
}

fn update_records(recorder: &ExaBgp) -> Vec<Record> {
    recorder.records().into_iter().filter(|r| matches!(r, Record::Update(_))).collect()
}

/// The recorder holds `prefix` from exactly `from`.
fn wait_recorded(recorder: &ExaBgp, prefix: &str, from: &[IpAddr]) {
    let want: BTreeSet<IpAddr> = from.iter().copied().collect();
    wait::until_value(
        &format!("the recorder holds {prefix} from {want:?}"),
        T,
        || Ok(recorder.rib()?.into_iter().filter(|p| p.prefix == prefix).filter_map(|p| p.peer).collect()),
        |got: &BTreeSet<IpAddr>| *got == want,
    )
    .unwrap();
}

/// Every UPDATE after the first `since` announces only `prefix` and withdraws nothing.
fn only_announced(recorder: &ExaBgp, since: usize, prefix: &str) {
    let sent = update_records(recorder);
    for r in &sent[since..] {
        let Record::Update(u) = r else { continue };
        assert!(
            u.withdrawn.is_empty() && u.announced.iter().all(|(p, _)| p == prefix),
            "an UPDATE other than announcing {prefix}: {u:?}\n(all since: {:?})",
            &sent[since..]
        );
    }
}

/// Kinds whose watch failed and has not recovered since, by a speaker's log (it logs the
/// first failure of a kind and its recovery, once each).
fn unrecovered(log: &str) -> BTreeSet<String> {
    let mut failing = BTreeSet::new();
    for line in log.lines() {
        let Some(kind) = line.split("kind=").nth(1).and_then(|k| k.split_whitespace().next()) else {
            continue;
        };
        let kind = kind.trim_matches('"').to_string();
        if line.contains("watch failed;") {
            failing.insert(kind);
        } else if line.contains("watch recovered") {
            failing.remove(&kind);
        }
    }
    failing
}

/// The RIB is `before` plus `prefix`'s routes: nothing else was added or withdrawn.
fn only_added(bird: &Bird, before: &[RibPath], prefix: &str, when: &str) {
    let order = |a: &RibPath, b: &RibPath| (&a.prefix, a.next_hop).cmp(&(&b.prefix, b.next_hop));
    let mut expected = before.to_vec();
    expected.extend(bird.rib().unwrap().into_iter().filter(|r| r.prefix == prefix));
    expected.sort_by(order);
    let mut now = bird.rib().unwrap();
    now.sort_by(order);
    assert_eq!(now, expected, "{when}, only the new Service's routes were added");
}

fn count(logs: &str, needle: &str) -> usize {
    logs.matches(needle).count()
}

#[test]
fn speakers_on_the_real_apiserver_withdraw_nothing_when_it_freezes_or_dies() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    // The recorder (iBGP, on the client's LAN address) logs every UPDATE each node sends:
    // a withdrawal too short for the RIB poll to see still shows there.
    let recorder =
        ExaBgp::start(&lab, lab.client(), "recorder", &[ExaNeighbor::recorder(1), ExaNeighbor::recorder(2)])
            .unwrap();
    let mut cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    ferrolb::install(&cluster, "l2-bgp").unwrap();
    let c = cluster.client();
    cluster
        .apply_stream(&yaml::stream(&[
            yaml::pool("public", &[addressing::BGP_POOL_V4]),
            yaml::peer(
                "router",
                addressing::NODE_ASN,
                addressing::ROUTER_ASN,
                addressing::ROUTER_V4.into(),
                &[],
            ),
            yaml::recorder_peer(),
            yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        ]))
        .unwrap();
    // One controller, default lease (15 s): its step-down during an outage is part of the story.
    let mut controller = Replica::start(&lab, &cluster, 1, 1, "ctrl", &[]);
    let speakers: Vec<Proc> = (1..=2)
        .map(|i| {
            let m = SocketAddr::new(v4(i), SPEAKER_METRICS_PORT);
            ferrolb::start_speaker(&lab, &cluster, i, "speaker", Some(m)).unwrap()
        })
        .collect();

    let webs = [
        Web { name: "web-a", local: false, pod_node: 1 },
        Web { name: "web-b", local: false, pod_node: 2 },
        Web { name: "web-local", local: true, pod_node: 2 },
    ];
    let mut prefixes = Vec::new();
    for w in &webs {
        prefixes.push(deploy(&cluster, &c, &bird, &lab, w, T));
    }
    for (w, p) in webs.iter().zip(&prefixes) {
        wait_recorded(&recorder, p, &w.announcers());
    }
    let speaker_logs = |i: usize| strip_ansi(&speakers[i].logs());

    // ---- The apiserver frozen for a minute: connections stay open, nothing answers.
    let rib_before = bird.rib().unwrap();
    let updates_before = update_records(&recorder).len();
    let unchanged = |rib: &[RibPath], when: &str| {
        let now = bird.rib().unwrap();
        assert_eq!(now, rib, "BIRD's RIB changed {when}\n{}", lab.logs(40));
    };
    let stepdowns = count(&controller.logs(), "stepping down");
    let allocating = count(&controller.logs(), ALLOCATING);
    cluster.signal_apiserver(1, Signal::SIGSTOP);
    let stopped = Instant::now();
    assert!(!cluster.apiserver_ready(1), "the frozen apiserver still answers /readyz");
    while stopped.elapsed() < STOP_OUTAGE {
        unchanged(&rib_before, &format!("{:?} into the freeze", stopped.elapsed()));
        // Restarted as the kubelet would (it needs no apiserver for that).
        controller.revive(&lab);
        std::thread::sleep(Duration::from_millis(500));
    }
    // The controller noticed: no renewal within its deadline, so it stepped down (and
    // exited, and was restarted) instead of leading on an expired Lease.
    assert!(
        count(&controller.logs(), "stepping down") > stepdowns,
        "the controller kept leading through the freeze:\n{}",
        controller.logs()
    );
    assert_eq!(update_records(&recorder).len(), updates_before, "UPDATEs during the freeze");
    cluster.signal_apiserver(1, Signal::SIGCONT);
    let resumed = Instant::now();
    wait::until("the apiserver answers again", T, || Ok(cluster.apiserver_ready(1).then_some(()))).unwrap();
    println!("apiserver ready {:?} after SIGCONT", resumed.elapsed());
    wait::until("the restarted controller allocates again", T, || {
        controller.revive(&lab);
        Ok((count(&controller.logs(), ALLOCATING) > allocating).then_some(()))
    })
    .unwrap();
    println!("controller allocating again {:?} after SIGCONT", resumed.elapsed());
    // Changes flow again: a new Service gets an address and is announced by both nodes.
    let fresh = Web { name: "after-freeze", local: false, pod_node: 1 };
    let p = deploy(&cluster, &c, &bird, &lab, &fresh, T);
    println!("a new Service announced {:?} after SIGCONT", resumed.elapsed());
    wait_recorded(&recorder, &p, &fresh.announcers());
    only_added(&bird, &rib_before, &p, "after the freeze");
    only_announced(&recorder, updates_before, &p);
    assert_eq!(forbidden(&controller.logs(), None), Vec::<String>::new(), "controller: requests refused");

    // ---- The apiserver killed: connections refused, every watch fails and retries.
    let rib_before = bird.rib().unwrap();
    let updates_before = update_records(&recorder).len();
    cluster.kill_apiserver(1);
    let killed = Instant::now();
    // Proof the speakers saw it: every watch of both failed.
    wait::until("every watch of both speakers failed", T, || {
        unchanged(&rib_before, "while the apiserver is dead");
        Ok((0..2).all(|i| unrecovered(&speaker_logs(i)).len() == KINDS.len()).then_some(()))
    })
    .unwrap();
    while killed.elapsed() < KILL_OUTAGE {
        unchanged(&rib_before, &format!("{:?} after the apiserver died", killed.elapsed()));
        controller.revive(&lab);
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(update_records(&recorder).len(), updates_before, "UPDATEs while the apiserver was dead");
    assert!(
        count(&controller.logs(), "stepping down") > stepdowns + 1,
        "the controller led on without its apiserver"
    );
    let restart = Instant::now();
    let restart_began = Timestamp::now();
    cluster.restart_apiserver(1).unwrap();
    let starting = Some((restart_began, Timestamp::now()));
    println!("apiserver ready {:?} after its restart began", restart.elapsed());
    // Changes flow again, through the Service and the EndpointSlice watches: a Local
    // Service is announced by its pod's node only.
    // Every watch relisted (the new apiserver's watch cache answers the old
    // resourceVersions with 410 Gone) — and the relists withdrew nothing.
    let r = wait::until("every watch of both speakers recovered", RECOVERY, || {
        let left: Vec<BTreeSet<String>> = (0..2).map(|i| unrecovered(&speaker_logs(i))).collect();
        Ok(left.iter().all(BTreeSet::is_empty).then_some(()))
    });
    assert!(r.is_ok(), "{r:?}: {:?}", (0..2).map(|i| unrecovered(&speaker_logs(i))).collect::<Vec<_>>());
    println!("every watch recovered {:?} after the apiserver restart began", restart.elapsed());
    let fresh = Web { name: "after-kill", local: true, pod_node: 1 };
    let p = deploy(&cluster, &c, &bird, &lab, &fresh, KCM_RECOVERY);
    println!("a new Service announced {:?} after the apiserver restart began", restart.elapsed());
    wait_recorded(&recorder, &p, &fresh.announcers());
    only_added(&bird, &rib_before, &p, "after the restart");
    only_announced(&recorder, updates_before, &p);
    for (i, s) in speakers.iter().enumerate() {
        let refused = forbidden(&strip_ansi(&s.logs()), starting);
        assert_eq!(refused, Vec::<String>::new(), "speaker {}: requests refused", i + 1);
    }
    assert_eq!(forbidden(&controller.logs(), starting), Vec::<String>::new(), "controller: requests refused");
}
