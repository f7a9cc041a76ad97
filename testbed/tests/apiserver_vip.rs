//! The kube-apiserver VIP for real: three control-plane nodes, each running a real
//! kube-apiserver v1.37 (the testbed's [`Cluster`]) and `ferrolb-bootstrap` in L2 mode
//! for `192.0.2.99:6443`, set up as bootstrap/README.md tells an operator: a shared
//! membership key, `checkpoint init --from controlplanevip.yaml` with the cluster CA
//! (which also issues the least-privilege refresh certificate), `checkpoint rbac` and the
//! ControlPlaneVIP applied to the cluster, and the process started exactly as the
//! static pod printed by `ferrolb-bootstrap manifest` says.
//!
//! Needs `target/kube/current/ferrolb-kube` (testbed/kube/build.sh) and
//! `target/debug/ferrolb-bootstrap` (`cargo build -p ferrolb-bootstrap`).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolb_bootstrap::l2::{ALONE_WAIT, holder::HANDOVER_WAIT};
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::{Proc, Spawn};
use ferrolb_lab::{Error, Lab, LabConfig, addressing, client, wait};
use ferrolb_proto::membership::Timings;
use k8s_openapi::api::core::v1::Pod;

const T: Duration = Duration::from_secs(30);
const MEMBERS: usize = 3;
/// healthCheck.interval and failureThreshold of the ControlPlaneVIP.
const INTERVAL: Duration = Duration::from_millis(300);
const FAILURE_THRESHOLD: u32 = 2;

fn vip() -> IpAddr {
    IpAddr::V4(ferrolb_cluster::VIP_V4)
}

fn vip_server() -> String {
    format!("https://{}:{}", ferrolb_cluster::VIP_V4, ferrolb_cluster::APISERVER_PORT)
}

/// What an operator writes (manifests/examples/controlplane-vip.yaml with the lab's
/// addresses, a faster health check, and the lab's stand-ins for /etc paths). The
/// health URL is left to its default, https://127.0.0.1:6443/readyz.
fn controlplanevip_yaml(key_file: &Path, ca: &Path) -> String {
    let members: String = (1..=MEMBERS)
        .map(|i| format!("  - {{name: {}, address: {}}}\n", addressing::node_name(i), addressing::node_v4(i)))
        .collect();
    format!(
        "apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata:
  name: apiserver
spec:
  address: {vip}
  port: {port}
  mode: L2
  members:
{members}  membershipPort: 7947
  membershipKeyFile: {key}
  healthCheck:
    interval: {interval}ms
    timeout: 1s
    failureThreshold: {FAILURE_THRESHOLD}
    caFile: {ca}
",
        vip = ferrolb_cluster::VIP_V4,
        port = ferrolb_cluster::APISERVER_PORT,
        key = key_file.display(),
        interval = INTERVAL.as_millis(),
        ca = ca.display(),
    )
}

/// Runs `ferrolb-bootstrap ARGS` on the host; stdout.
fn bootstrap_cli(bin: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(bin).args(args).env_remove("NODE_NAME").output().unwrap();
    assert!(
        out.status.success(),
        "ferrolb-bootstrap {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One control-plane node's bootstrap as its static pod runs it.
struct Member {
    i: usize,
    config_dir: PathBuf,
    checkpoint: PathBuf,
    /// The container's command and args, `$(VAR)` expanded as the kubelet does.
    argv: Vec<String>,
    env: Vec<(String, String)>,
    /// Where the pod's liveness and readiness probes look.
    liveness: SocketAddr,
    readiness: (SocketAddr, String),
}

impl Member {
    fn start(&self, lab: &Lab, bin: &Path, run: usize) -> Proc {
        // The image's binary is the one cargo built; everything else as the pod says.
        let mut argv: Vec<&str> = vec![bin.to_str().unwrap()];
        argv.extend(self.argv[1..].iter().map(String::as_str));
        let mut spec = Spawn::new(format!("bootstrap-node{}-{run}", self.i), &argv);
        for (k, v) in &self.env {
            spec = spec.env(k, v);
        }
        lab.spawn(lab.node(self.i), spec).unwrap()
    }
}

/// `$(NAME)` references expanded from `env` (Kubernetes' rule for command and args).
fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = s.to_string();
    for (k, v) in env {
        out = out.replace(&format!("$({k})"), v);
    }
    assert!(!out.contains("$("), "unexpanded reference in {s:?}");
    out
}

/// The static pod for node `i`: printed by `ferrolb-bootstrap manifest`, accepted by the
/// real apiserver (server-side dry run), and read back into the argv we run.
fn static_pod(cluster: &Cluster, bin: &Path, i: usize, etc: &Path, ca: &Path) -> Member {
    let config_dir = etc.to_path_buf();
    let node_dir = etc.join(addressing::node_name(i));
    std::fs::create_dir_all(&node_dir).unwrap();
    let checkpoint = node_dir.join("checkpoint.yaml");
    let yaml = bootstrap_cli(
        bin,
        &[
            "manifest",
            "--checkpoint",
            checkpoint.to_str().unwrap(),
            "--config-dir",
            config_dir.to_str().unwrap(),
            "--ca-file",
            ca.to_str().unwrap(),
        ],
    );
    let file = node_dir.join("ferrolb-bootstrap.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let json =
        cluster.kubectl(&["create", "--dry-run=server", "-o", "json", "-f", file.to_str().unwrap()]).unwrap();
    let pod: Pod = serde_json::from_str(&json).unwrap();
    let spec = pod.spec.unwrap();
    assert_eq!(spec.host_network, Some(true), "the VIP lives in the node's network namespace");
    assert_eq!(spec.containers.len(), 1);
    let c = &spec.containers[0];

    // The environment as the kubelet gives it: NODE_NAME from the downward API.
    let mut env = BTreeMap::new();
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), None) => v.clone(),
            (None, Some(from)) => {
                let field = from.field_ref.as_ref().map(|f| f.field_path.as_str());
                assert_eq!(field, Some("spec.nodeName"), "env {} from {from:?}", e.name);
                addressing::node_name(i)
            }
            other => panic!("env {}: {other:?}", e.name),
        };
        env.insert(e.name.clone(), value);
    }
    let argv: Vec<String> =
        c.command.iter().flatten().chain(c.args.iter().flatten()).map(|a| expand(a, &env)).collect();
    assert_eq!(argv.first().map(String::as_str), Some("/usr/local/bin/ferrolb-bootstrap"), "{argv:?}");
    assert_eq!(argv.get(1).map(String::as_str), Some("run"), "{argv:?}");
    let arg =
        |flag: &str| argv.iter().find_map(|a| a.strip_prefix(&format!("--{flag}="))).map(str::to_string);
    assert_eq!(arg("checkpoint"), Some(checkpoint.display().to_string()), "{argv:?}");
    assert_eq!(arg("node-name"), Some(addressing::node_name(i)), "{argv:?}");

    // Every file the process reads is inside what the pod mounts.
    let mounts: Vec<(String, String)> = c
        .volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            // Only hostPath volumes: the dry run adds the ServiceAccount token volume
            // that the kubelet never gives a static pod.
            let vol = spec.volumes.iter().flatten().find(|v| v.name == m.name).unwrap();
            let host = vol.host_path.as_ref()?.path.clone();
            assert_eq!(host, m.mount_path, "volume {} is mounted where it is on the host", m.name);
            Some((m.name.clone(), m.mount_path.clone()))
        })
        .collect();
    let mounted = |p: &Path| mounts.iter().any(|(_, m)| p.starts_with(m));
    assert!(mounted(&checkpoint), "{} not mounted: {mounts:?}", checkpoint.display());
    assert!(mounts.iter().any(|(_, m)| Path::new(m) == ca), "the CA is not mounted: {mounts:?}");

    let probe_addr = |p: &k8s_openapi::api::core::v1::Probe| {
        let g = p.http_get.as_ref().unwrap();
        let port = match &g.port {
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => u16::try_from(*n).unwrap(),
            other => panic!("probe port {other:?}"),
        };
        let host: IpAddr = g.host.as_deref().unwrap().parse().unwrap();
        (SocketAddr::new(host, port), g.path.clone().unwrap())
    };
    let (liveness, live_path) = probe_addr(c.liveness_probe.as_ref().unwrap());
    assert_eq!(live_path, "/healthz");
    let readiness = probe_addr(c.readiness_probe.as_ref().unwrap());
    assert_eq!(arg("metrics-addr"), Some(liveness.to_string()), "the probes look where the process serves");
    Member { i, config_dir, checkpoint, argv, env: env.into_iter().collect(), liveness, readiness }
}

/// Nodes holding the VIP on eth0.
fn holders(lab: &Lab) -> Vec<usize> {
    let needle = format!(" {}/32 ", ferrolb_cluster::VIP_V4);
    (1..=MEMBERS)
        .filter(|i| lab.node(*i).ip(&["-o", "addr", "show", "dev", "eth0"]).unwrap().contains(&needle))
        .collect()
}

/// The MACs answering ARP for the VIP on the LAN, asked from the client.
fn arp_answers(lab: &Lab) -> BTreeSet<String> {
    client::arp_responders(lab.client(), "eth0", vip(), 2).unwrap()
}

/// A `ferrolb_bootstrap_*` sample from node `i`'s metrics endpoint (labels included in `name`).
fn metric(lab: &Lab, m: &Member, name: &str) -> Option<f64> {
    let text = client::http_get(lab.node(m.i), m.liveness, "/metrics", Duration::from_secs(2)).ok()?;
    client::metric_sample(&text, name)
}

/// kubectl through the VIP from the client namespace, CA-verified, as the admin.
#[derive(Clone)]
struct VipKubectl {
    client: Netns,
    kube: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl VipKubectl {
    fn new(lab: &Lab, cluster: &Cluster) -> Self {
        let pki = &cluster.paths().pki;
        let kubeconfig = lab.dir().join("vip-admin.conf");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: vip\n  cluster:\n    server: {server}\n    \
                 certificate-authority: {ca}\nusers:\n- name: admin\n  user:\n    client-certificate: {crt}\n    \
                 client-key: {key}\ncontexts:\n- name: vip\n  context: {{cluster: vip, user: admin}}\n\
                 current-context: vip\n",
                server = vip_server(),
                ca = cluster.paths().ca_cert().display(),
                crt = pki.join("admin.crt").display(),
                key = pki.join("admin.key").display(),
            ),
        )
        .unwrap();
        VipKubectl {
            client: lab.client().clone(),
            kube: cluster.kube_binary().to_path_buf(),
            kubeconfig,
            cache: lab.dir().join("kubectl-cache"),
        }
    }

    /// `kubectl get nodes`: the node names, or why not.
    fn get_nodes(&self, timeout: Duration) -> Result<String, Error> {
        let timeout = format!("--request-timeout={}ms", timeout.as_millis());
        self.client.exec(&[
            self.kube.to_str().unwrap(),
            "kubectl",
            "--kubeconfig",
            self.kubeconfig.to_str().unwrap(),
            "--cache-dir",
            self.cache.to_str().unwrap(),
            &timeout,
            "get",
            "nodes",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
    }

    /// Waits until `get nodes` lists every lab node.
    fn wait_works(&self, what: &str) {
        let all: Vec<String> = (1..=MEMBERS).map(addressing::node_name).collect();
        wait::until(what, T, || {
            Ok(self.get_nodes(Duration::from_secs(2)).ok().filter(|n| *n == all.join(" ")))
        })
        .unwrap();
    }
}

/// kubectl attempts through the VIP started every `every` (each in its own thread, a
/// few at a time), so one attempt stuck on a stale neighbour entry does not hide that
/// the VIP works again; records when the first one succeeded.
struct KubectlStream {
    stop: Arc<AtomicBool>,
    first_ok: Arc<Mutex<Option<(Instant, Instant)>>>,
    attempts: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl KubectlStream {
    fn start(k: &VipKubectl, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let first_ok = Arc::new(Mutex::new(None));
        let attempts = Arc::new(AtomicUsize::new(0));
        let (k, s, f, a) = (k.clone(), stop.clone(), first_ok.clone(), attempts.clone());
        let thread = std::thread::spawn(move || {
            let in_flight = Arc::new(AtomicUsize::new(0));
            let mut workers = Vec::new();
            while !s.load(Ordering::Relaxed) && f.lock().unwrap().is_none() {
                if in_flight.load(Ordering::Relaxed) < 4 {
                    in_flight.fetch_add(1, Ordering::Relaxed);
                    a.fetch_add(1, Ordering::Relaxed);
                    let (k, f, n) = (k.clone(), f.clone(), in_flight.clone());
                    workers.push(std::thread::spawn(move || {
                        let started = Instant::now();
                        if k.get_nodes(Duration::from_secs(2)).is_ok() {
                            let mut first = f.lock().unwrap();
                            let done = Instant::now();
                            if first.is_none_or(|(_, d)| done < d) {
                                *first = Some((started, done));
                            }
                        }
                        n.fetch_sub(1, Ordering::Relaxed);
                    }));
                }
                std::thread::sleep(every);
            }
            for w in workers {
                let _ = w.join();
            }
        });
        KubectlStream { stop, first_ok, attempts, thread: Some(thread) }
    }

    /// Waits for the first success: (when that attempt started, when it succeeded).
    fn wait_first_ok(mut self, what: &str) -> (Instant, Instant, usize) {
        let got = wait::until(what, T, || Ok(*self.first_ok.lock().unwrap()));
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let (started, done) = got.unwrap();
        (started, done, self.attempts.load(Ordering::Relaxed))
    }
}

impl Drop for KubectlStream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits until the VIP is on `want` only, and the client's ARP gets exactly `want`'s MAC.
fn wait_vip_at(lab: &Lab, want: usize, what: &str) {
    wait::until_value(what, T, || Ok(holders(lab)), |h| h == &vec![want]).unwrap();
    let mac = BTreeSet::from([addressing::node_mac(want)]);
    let what = format!("{what}: ARP answered by node{want} only");
    wait::until_value(&what, T, || Ok(arp_answers(lab)), |a| *a == mac).unwrap();
}

/// The audit log events of one user in one file, but for the test's own kubectl.
fn audit_entries(path: &Path, user: &str) -> Vec<ferrolb_cluster::audit::Request> {
    let mut events = ferrolb_cluster::audit::read(path, 0, Some(user));
    events.retain(|e| !e.user_agent.starts_with("kubectl/"));
    events
}

/// The refresh read the ControlPlaneVIP the real apiserver serves (kubectl's
/// last-applied annotation included) and found it equal to what `checkpoint init` wrote:
/// no rewrite, no restart of the announcement.
fn unchanged_by_refresh(lab: &Lab, members: &[Member], initial: &[String]) {
    for (m, text) in members.iter().zip(initial) {
        let now = std::fs::read_to_string(&m.checkpoint).unwrap();
        assert_eq!(&now, text, "node{}'s checkpoint rewritten by the refresh", m.i);
        assert_eq!(metric(lab, m, "ferrolb_bootstrap_checkpoint_generation"), Some(1.0), "node{}", m.i);
        assert_eq!(metric(lab, m, "ferrolb_bootstrap_checkpoint_refreshes_total"), Some(0.0), "node{}", m.i);
    }
}

#[test]
fn the_apiserver_vip_follows_healthy_real_apiservers() {
    let test_start = Instant::now();
    let lab = Lab::up(LabConfig::nodes(MEMBERS)).unwrap();
    let mut cluster =
        Cluster::start(&lab, &ClusterConfig { control_planes: MEMBERS, ..Default::default() }).unwrap();
    eprintln!("control plane up after {:?}", test_start.elapsed());
    let bin = ferrolb_lab::binary::workspace("ferrolb-bootstrap", "debug").unwrap();
    let ca = cluster.paths().ca_cert();
    let ca_key = cluster.paths().ca_key();

    // The lab's disk is shared: `etc` stands in for each node's /etc/ferrolb (mounted
    // by the static pod), with the node's own files in a subdirectory.
    let etc = lab.subdir("etc-ferrolb").unwrap();
    // README: `head -c 32 /dev/urandom | base64 > /etc/ferrolb/bootstrap-membership.key`.
    let key_file = etc.join("bootstrap-membership.key");
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom").unwrap().read_exact(&mut raw).unwrap();
    let key: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&key_file, format!("{key}\n")).unwrap();
    let vip_file = etc.join("controlplanevip.yaml");
    std::fs::write(&vip_file, controlplanevip_yaml(&key_file, &ca)).unwrap();

    // The cluster side: the CRDs, the refresh's read-only RBAC, the VIP as an object.
    let crds = ferrolb::manifests_dir().join("crds");
    cluster.kubectl(&["apply", "--server-side", "-k", crds.to_str().unwrap()]).unwrap();
    cluster
        .kubectl(&["wait", "--for=condition=Established", "--timeout=60s", "crd/controlplanevips.ferrolb.io"])
        .unwrap();
    cluster.kubectl_stdin(&["apply", "-f", "-"], &bootstrap_cli(&bin, &["checkpoint", "rbac"])).unwrap();
    cluster.kubectl(&["apply", "-f", vip_file.to_str().unwrap()]).unwrap();

    // Each node: checkpoint and refresh credentials from the cluster CA, then its static pod.
    let members: Vec<Member> = (1..=MEMBERS)
        .map(|i| {
            let m = static_pod(&cluster, &bin, i, &etc, &ca);
            let node = addressing::node_name(i);
            bootstrap_cli(
                &bin,
                &[
                    "checkpoint",
                    "init",
                    "--checkpoint",
                    m.checkpoint.to_str().unwrap(),
                    "--from",
                    vip_file.to_str().unwrap(),
                    "--node-name",
                    &node,
                    "--ca-file",
                    ca.to_str().unwrap(),
                    "--ca-key",
                    ca_key.to_str().unwrap(),
                ],
            );
            let dir = m.checkpoint.parent().unwrap();
            for f in ["checkpoint.yaml", "bootstrap.kubeconfig", "bootstrap.crt", "bootstrap.key"] {
                assert!(dir.join(f).starts_with(&m.config_dir), "{f} outside the pod's mount");
                assert!(dir.join(f).exists(), "checkpoint init wrote no {f}");
            }
            assert!(key_file.starts_with(&m.config_dir), "the membership key outside the pod's mount");
            m
        })
        .collect();

    let initial: Vec<String> =
        members.iter().map(|m| std::fs::read_to_string(&m.checkpoint).unwrap()).collect();

    // The refresh credential is least-privilege and works against the real local
    // apiserver (loopback, certificate verified for the name `kubernetes`).
    let kube = cluster.kube_binary().to_str().unwrap().to_string();
    for m in &members {
        let conf = m.checkpoint.parent().unwrap().join("bootstrap.kubeconfig");
        let kc = |args: &[&str]| {
            let mut argv = vec![kube.as_str(), "kubectl", "--kubeconfig", conf.to_str().unwrap()];
            argv.extend_from_slice(args);
            lab.node(m.i).exec_output(&argv).unwrap()
        };
        let got = kc(&["get", "controlplanevips.ferrolb.io", "apiserver", "-o", "name"]);
        assert!(got.status.success(), "{}", String::from_utf8_lossy(&got.stderr));
        for (verb, resource, allowed) in [
            ("watch", "controlplanevips.ferrolb.io", "yes"),
            ("list", "secrets", "no"),
            ("create", "controlplanevips.ferrolb.io", "no"),
            ("get", "nodes", "no"),
        ] {
            let out = kc(&["auth", "can-i", verb, resource, "--all-namespaces"]);
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), allowed, "can-i {verb} {resource}");
        }
    }

    // Every member's bootstrap, as its static pod runs it.
    let mut procs: Vec<Proc> = members.iter().map(|m| m.start(&lab, &bin, 1)).collect();
    let all: Vec<usize> = (1..=MEMBERS).collect();
    let owner = addressing::owner(vip(), &all);
    wait_vip_at(&lab, owner, "the VIP at the election winner among three healthy members");
    for m in &members {
        let (addr, path) = &m.readiness;
        wait::until("the static pod's readiness probe", T, || {
            Ok(client::http_get(lab.node(m.i), *addr, path, Duration::from_secs(2)).ok())
        })
        .unwrap();
        client::http_get(lab.node(m.i), m.liveness, "/healthz", Duration::from_secs(2)).unwrap();
        assert_eq!(metric(&lab, m, "ferrolb_bootstrap_healthy"), Some(1.0), "node{}", m.i);
    }

    // 1. kubectl through the VIP, CA-verified.
    let k = VipKubectl::new(&lab, &cluster);
    k.wait_works("kubectl get nodes through the VIP");

    // 2. The owner's apiserver dies: kubectl through the VIP works again within
    // failureThreshold × interval + 1 s.
    let bound = INTERVAL * FAILURE_THRESHOLD + Duration::from_secs(1);
    let candidates: Vec<usize> = all.iter().copied().filter(|i| *i != owner).collect();
    let successor = addressing::owner(vip(), &candidates);
    let killed_at = Instant::now();
    cluster.kill_apiserver(owner);
    let stream = KubectlStream::start(&k, Duration::from_millis(100));
    wait::until_value("the VIP moved", T, || Ok(holders(&lab)), |h| h == &vec![successor]).unwrap();
    let moved = killed_at.elapsed();
    let (started, done, attempts) =
        stream.wait_first_ok("kubectl through the VIP after the owner's apiserver died");
    let works = done - killed_at;
    eprintln!(
        "failover node{owner} → node{successor} (kube-apiserver SIGKILLed): VIP on node{successor} after \
         {moved:?} (polled), kubectl get nodes through the VIP OK after {works:?} (that attempt started at \
         {:?}, {attempts} attempts); bound failureThreshold × interval + 1 s = {bound:?}",
        started.saturating_duration_since(killed_at)
    );
    assert!(works <= bound, "kubectl through the VIP worked again only after {works:?} (bound {bound:?})");
    wait_vip_at(&lab, successor, "the client's ARP follows the successor");
    k.wait_works("kubectl get nodes through the VIP on the successor");
    // So far every request of the refresh credentials succeeded, at the local apiserver only.
    for m in &members {
        let user = format!("system:ferrolb-bootstrap:{}", addressing::node_name(m.i));
        let own = audit_entries(&cluster.paths().audit_log(m.i), &user);
        assert!(
            own.iter().any(|e| e.resource == "controlplanevips" && e.code == Some(200)),
            "{user} never read its ControlPlaneVIP from its local apiserver"
        );
        let denied: Vec<_> = own.iter().filter(|e| e.code.is_none_or(|c| c >= 400)).collect();
        assert!(denied.is_empty(), "{user}: {denied:?}");
        // The health probes: /readyz of the local apiserver, anonymous, answered 200.
        let probes = audit_entries(&cluster.paths().audit_log(m.i), "system:anonymous");
        assert!(
            probes
                .iter()
                .any(|e| e.user_agent == "ferrolb-bootstrap" && e.uri == "/readyz" && e.code == Some(200)),
            "no anonymous /readyz probe of node{}'s apiserver answered 200",
            m.i
        );
        for j in all.iter().filter(|j| **j != m.i) {
            let elsewhere = audit_entries(&cluster.paths().audit_log(*j), &user);
            assert!(elsewhere.is_empty(), "{user} talked to node{j}'s apiserver: {elsewhere:?}");
        }
    }

    unchanged_by_refresh(&lab, &members, &initial);

    // 3. Every apiserver down, one at a time (two members turning unhealthy in the same
    // millisecond may each hand the VIP to the other): the holder keeps the VIP past the
    // HANDOVER_WAIT after which it would give it up, as nothing better exists …
    let third = candidates.iter().copied().find(|i| *i != successor).unwrap();
    for i in [third, successor] {
        cluster.kill_apiserver(i);
        wait::until_value(
            "the member counts its apiserver unhealthy",
            T,
            || Ok(metric(&lab, &members[i - 1], "ferrolb_bootstrap_healthy")),
            |h| *h == Some(0.0),
        )
        .unwrap();
    }
    let keeps = |h: &Vec<usize>| h == &vec![successor];
    let last = wait::stays("the holder keeps the VIP", HANDOVER_WAIT, || Ok(holders(&lab)), keeps).unwrap();
    // … every bootstrap is SIGKILLed (the address stays on the interface, as after a
    // crash) and restarted: nobody holds the VIP while no apiserver is healthy.
    for p in &mut procs {
        p.kill();
    }
    assert_eq!(holders(&lab), last, "SIGKILL leaves the address behind");
    let procs: Vec<Proc> = members.iter().map(|m| m.start(&lab, &bin, 2)).collect();
    for m in &members {
        // Proof that the restarted processes run their announcer and probe (and fail).
        let (addr, path) = &m.readiness;
        wait::until("the restarted bootstrap is ready", T, || {
            Ok(client::http_get(lab.node(m.i), *addr, path, Duration::from_secs(2)).ok())
        })
        .unwrap();
        wait::until_value(
            "failed probes of the dead apiserver",
            T,
            || Ok(metric(&lab, m, "ferrolb_bootstrap_health_checks_total{result=\"failure\"}")),
            |n| n.is_some_and(|n| n >= 3.0),
        )
        .unwrap();
    }
    for p in &procs {
        wait::until("membership started", T, || Ok(p.logs().contains("membership started").then_some(())))
            .unwrap();
    }
    let (claim, seen) =
        (Timings::default().join_timeout + ALONE_WAIT, || Ok((holders(&lab), arp_answers(&lab))));
    let what = "no apiserver healthy: nobody holds the VIP, past the moment a lone member claims";
    wait::stays(what, claim, seen, |(h, a)| h.is_empty() && a.is_empty()).unwrap();

    // Apiservers come back one at a time — first one the election would not pick among
    // all three, so only the health gate can put the VIP there.
    let mut order: Vec<usize> = all.iter().copied().filter(|i| *i != owner).collect();
    order.push(owner);
    let mut up = Vec::new();
    for i in order {
        let t = Instant::now();
        cluster.restart_apiserver(i).unwrap();
        let ready = Instant::now();
        up.push(i);
        let want = addressing::owner(vip(), &up);
        let what = format!("the VIP at node{want} once {up:?} are up");
        wait::until_value(&what, T, || Ok(holders(&lab)), |h| h == &vec![want]).unwrap();
        let held = ready.elapsed();
        k.wait_works("kubectl get nodes through the VIP");
        let works = ready.elapsed();
        wait_vip_at(&lab, want, &what);
        eprintln!(
            "apiserver node{i} restarted ({:?} to /readyz ok); with {up:?} up the VIP is at node{want} \
             {held:?} after that (polled) and kubectl through it works {works:?} after it",
            ready - t,
        );
    }
    unchanged_by_refresh(&lab, &members, &initial);
    eprintln!("test done in {:?}", test_start.elapsed());
}
