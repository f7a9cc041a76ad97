//! A real Kubernetes control plane in a lab: etcd, one kube-apiserver on each
//! control-plane node and one kube-controller-manager — the official programs, built
//! from the Go modules pinned in `testbed/kube/` by `testbed/kube/build.sh` — with a
//! kubeadm-shaped PKI, the Node and RBAC authorizers, ServiceAccount tokens and a
//! Metadata-level audit log.
//!
//! By default the testbed registers every lab node as a Node (InternalIP = its lab
//! addresses, Ready) and acts as the kubelet for the pods a test creates ([`kubelet`]),
//! so the real EndpointSlice controller produces the slices the speakers read. Nobody
//! renews Node leases then, so the node lifecycle controller is left out.
//!
//! With [`ClusterConfig::kubelets`] every lab node runs a real kubelet and containerd
//! instead ([`node`]): the Nodes register themselves, pods really run (hostNetwork), and
//! the node lifecycle controller runs, as on a real cluster.
//!
//! The apiservers live in the control-plane nodes' namespaces; the host reaches them
//! only through loopback forwarders ([`forward`]), never through a route into the lab.
//!
//! ```no_run
//! # use ferrolb_testbed::{Lab, LabConfig, cluster::{Cluster, ClusterConfig}, kubeapi::Objects};
//! let lab = Lab::up(LabConfig::nodes(2))?;
//! let cluster = Cluster::start(&lab, &ClusterConfig::default())?;
//! cluster.kubectl(&["get", "nodes"])?;
//! let speaker = cluster.token_kubeconfig("ferrolb-system", "ferrolb-speaker", 1)?;
//! # Ok::<(), ferrolb_testbed::Error>(())
//! ```

pub mod audit;
pub mod cli;
pub mod ferrolb;
pub mod forward;
pub mod kubelet;
pub mod node;
mod tokens;
pub mod vip;

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use nix::sys::signal::Signal;

use crate::https::TestCa;
use crate::kubeapi::Objects;
use crate::netns::{Netns, describe};
use crate::process::{Proc, Spawn, Supervised, read_lossy, tail};
use crate::{Error, Lab, plan, wait};
use serde_json::json;

use forward::Forwarder;

/// The apiservers' port, on every control-plane node (and on the VIP).
pub const APISERVER_PORT: u16 = 6443;
/// etcd's client port on the first control-plane node.
pub const ETCD_PORT: u16 = 2379;
/// ClusterIP ranges (dual-stack). No kube-proxy runs, so nothing ever routes them;
/// they sit at the top of the benchmarking block, above any bulk prefix the benches use.
pub const SERVICE_CIDRS: &str = "198.19.240.0/20,2001:db8:ff::/112";
/// The apiserver VIP the serving certificate names (a LAN address outside the L2 pool).
pub const VIP_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);
/// The ServiceAccount token issuer.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Control-plane nodes: lab nodes 1..=K each run a kube-apiserver.
    pub control_planes: usize,
    /// More names for the apiserver serving certificate (VIPs), besides [`VIP_V4`].
    pub extra_sans: Vec<String>,
    /// A real kubelet and containerd on every lab node ([`node`]) instead of the
    /// testbed acting as the kubelet; a kube-scheduler runs with them.
    pub kubelets: bool,
    /// The apiserver URL in the kubeconfig of the real kubelets on workers (nodes after
    /// the control planes), e.g. the VIP; `None`: node1's address. With a URL,
    /// [`Cluster::start`] does not wait for the workers' Nodes: what serves it may
    /// come up only later (the bootstrap static pod).
    pub workers_server: Option<String>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig { control_planes: 1, extra_sans: Vec::new(), kubelets: false, workers_server: None }
    }
}

/// How long a real kubelet may take to register its Node Ready (a cold start of several
/// kubelets on a loaded 2-core machine).
const KUBELET_READY_TIMEOUT: Duration = Duration::from_secs(180);

/// Path of `ferrolb-kube`, the multicall binary holding the control plane.
pub fn kube_binary() -> Result<PathBuf, Error> {
    crate::binary::kube()
}

/// Where the cluster's files live inside the lab directory.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The cluster's directory.
    pub dir: PathBuf,
    /// PKI: `ca.crt`, `ca.key`, `apiserver.{crt,key}`, `sa.{key,pub}`, client pairs.
    pub pki: PathBuf,
}

impl Paths {
    fn new(dir: PathBuf) -> Self {
        Paths { pki: dir.join("pki"), dir }
    }

    /// The cluster CA certificate (`/etc/kubernetes/pki/ca.crt` on a kubeadm node).
    pub fn ca_cert(&self) -> PathBuf {
        self.pki.join("ca.crt")
    }

    /// The cluster CA key.
    pub fn ca_key(&self) -> PathBuf {
        self.pki.join("ca.key")
    }

    /// The admin kubeconfig for the host (loopback forwarder).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.conf")
    }

    /// The audit log of control-plane node `i`'s apiserver.
    pub fn audit_log(&self, i: usize) -> PathBuf {
        self.dir.join(format!("audit-{}.log", plan::node_name(i)))
    }
}

/// A running control plane; everything stops when it is dropped.
pub struct Cluster {
    paths: Paths,
    kube: PathBuf,
    control_planes: usize,
    nodes: Vec<kubelet::NodeInfo>,
    etcd: Proc,
    etcd_spec: Spawn,
    cm_spec: Spawn,
    scheduler_spec: Option<Spawn>,
    apiservers: Vec<Option<Proc>>,
    apiserver_specs: Vec<(Netns, Spawn)>,
    controller_manager: Supervised,
    /// With real kubelets: places DaemonSet and Deployment pods.
    scheduler: Option<Supervised>,
    forwarder: Forwarder,
    direct: Vec<Forwarder>,
    rt: tokio::runtime::Runtime,
    /// The testbed acting as the kubelet (without real kubelets).
    kubelet: Option<tokio::task::JoinHandle<()>>,
    /// Real kubelets and their containerd, one per lab node (with [`ClusterConfig::kubelets`]).
    real_nodes: Vec<node::RealNode>,
    log_dir: PathBuf,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("dir", &self.paths.dir)
            .field("control_planes", &self.control_planes)
            .field("host", &self.forwarder.addr())
            .finish()
    }
}

impl Objects for Cluster {
    fn client(&self) -> kube::Client {
        self.admin_client_blocking()
    }

    fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }
}

impl Cluster {
    /// Starts etcd and the first apiserver on lab node 1, the other apiservers on nodes
    /// 2..=K, the controller-manager on node 1; waits for every apiserver's `/readyz`;
    /// registers every lab node as a Ready Node and starts acting as their kubelet, or,
    /// with [`ClusterConfig::kubelets`], starts a real node on each and waits until
    /// every Node is Ready.
    pub fn start(lab: &Lab, cfg: &ClusterConfig) -> Result<Self, Error> {
        Self::start_with(lab, cfg, &mut |_, _, _| Ok(()))
    }

    /// [`Cluster::start`], calling `before_kubelet(i, node, paths)` for each real node `i`
    /// once its containerd runs and before its kubelet starts: what a node has on disk
    /// when it boots (imported images, static pods, checkpoints) goes in there.
    pub fn start_with(
        lab: &Lab,
        cfg: &ClusterConfig,
        before_kubelet: &mut dyn FnMut(usize, &node::RealNode, &Paths) -> Result<(), Error>,
    ) -> Result<Self, Error> {
        let k = cfg.control_planes;
        if k == 0 || k > lab.nodes().len() {
            return Err(Error::Missing(format!(
                "{k} control planes need as many lab nodes (the lab has {})",
                lab.nodes().len()
            )));
        }
        let kube = kube_binary()?;
        let paths = Paths::new(lab.subdir("cluster")?);
        std::fs::create_dir_all(&paths.pki)?;
        let ca = write_pki(&paths, k, &cfg.extra_sans)?;
        std::fs::write(paths.dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
        let log_dir = paths.dir.clone();
        let kube_s = kube.display().to_string();

        let cp1 = lab.node(1).clone();
        let etcd_url = format!("http://{}:{ETCD_PORT}", plan::node_v4(1));
        let etcd_spec = Spawn::new(
            "etcd",
            &[
                &kube_s,
                "etcd",
                "--name=etcd",
                &format!("--data-dir={}", paths.dir.join("etcd").display()),
                &format!("--listen-client-urls={etcd_url},http://127.0.0.1:{ETCD_PORT}"),
                &format!("--advertise-client-urls={etcd_url}"),
                "--listen-peer-urls=http://127.0.0.1:2380",
                "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                "--initial-cluster=etcd=http://127.0.0.1:2380",
                "--listen-metrics-urls=http://127.0.0.1:2381",
                // A lab on a shared disk: durability across power loss is not tested here.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        );
        let etcd = Proc::start(&cp1, &log_dir, &etcd_spec)?;

        let mut apiserver_specs = Vec::new();
        for i in 1..=k {
            let spec = apiserver_spec(&kube_s, &paths, i, &etcd_url);
            apiserver_specs.push((lab.node(i).clone(), spec));
        }
        let mut apiservers = Vec::new();
        for (ns, spec) in &apiserver_specs {
            apiservers.push(Some(Proc::start(ns, &log_dir, spec)?));
        }

        let targets: Vec<(Netns, SocketAddr)> =
            (1..=k).map(|i| (lab.node(i).clone(), apiserver_addr(i))).collect();
        let forwarder = Forwarder::start(targets.clone())?;
        let direct = targets.into_iter().map(|t| Forwarder::start(vec![t])).collect::<Result<Vec<_>, _>>()?;

        let admin_server = format!("https://{}", forwarder.addr());
        write_cert_kubeconfig(&paths, &paths.admin_kubeconfig(), &admin_server, "kubernetes-admin", "admin")?;
        let cm_conf = paths.dir.join("controller-manager.conf");
        let cp1_server = format!("https://{}", apiserver_addr(1));
        write_cert_kubeconfig(
            &paths,
            &cm_conf,
            &cp1_server,
            "system:kube-controller-manager",
            "controller-manager",
        )?;

        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cluster")
            .enable_all()
            .build()?;

        let nodes: Vec<kubelet::NodeInfo> = (1..=lab.nodes().len())
            .map(|i| kubelet::NodeInfo {
                name: plan::node_name(i),
                ips: vec![IpAddr::V4(plan::node_v4(i)), IpAddr::V6(plan::node_v6(i))],
                control_plane: i <= k,
            })
            .collect();

        let cm_spec = Spawn::new(
            "kube-controller-manager",
            &[
                &kube_s,
                "kube-controller-manager",
                &format!("--kubeconfig={}", cm_conf.display()),
                &format!("--authentication-kubeconfig={}", cm_conf.display()),
                &format!("--authorization-kubeconfig={}", cm_conf.display()),
                &format!("--service-account-private-key-file={}", paths.pki.join("sa.key").display()),
                &format!("--root-ca-file={}", paths.ca_cert().display()),
                "--use-service-account-credentials=true",
                // Without real kubelets nobody renews Node leases: the lifecycle
                // controller would taint every node NotReady and evict. With them it
                // runs, and removes the not-ready taint each Node registers with.
                if cfg.kubelets { "--controllers=*" } else { "--controllers=*,-node-lifecycle-controller" },
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "-v=1",
            ],
        );
        // The controller-manager starts once the first apiserver answers.
        wait_ready(&rt, &direct[0], &paths, Duration::from_secs(120))
            .map_err(|e| startup_failure(e, &log_dir))?;
        let controller_manager = Supervised::start(&cp1, &log_dir, &cm_spec)?;
        let scheduler_spec = if cfg.kubelets {
            let conf = paths.dir.join("scheduler.conf");
            write_cert_kubeconfig(&paths, &conf, &cp1_server, "system:kube-scheduler", "scheduler")?;
            let conf = conf.display().to_string();
            let spec = Spawn::new(
                "kube-scheduler",
                &[
                    &kube_s,
                    "kube-scheduler",
                    &format!("--kubeconfig={conf}"),
                    &format!("--authentication-kubeconfig={conf}"),
                    &format!("--authorization-kubeconfig={conf}"),
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    "-v=1",
                ],
            );
            Some(spec)
        } else {
            None
        };
        let scheduler = scheduler_spec.as_ref().map(|s| Supervised::start(&cp1, &log_dir, s)).transpose()?;
        for (i, d) in direct.iter().enumerate().skip(1) {
            wait_ready(&rt, d, &paths, Duration::from_secs(120))
                .map_err(|e| startup_failure(Error::Parse(format!("apiserver {}: {e}", i + 1)), &log_dir))?;
        }

        let admin = client_from(&rt, &paths.admin_kubeconfig())?;
        let (kubelet, real_nodes) = if cfg.kubelets {
            let real = start_real_nodes(lab, &rt, &admin, &kube, &paths, &ca, &nodes, cfg, before_kubelet)
                .map_err(|e| startup_failure(e, &log_dir))?;
            (None, real)
        } else {
            rt.block_on(kubelet::register_nodes(&admin, &nodes))?;
            (Some(rt.spawn(kubelet::run(admin, nodes.clone()))), Vec::new())
        };

        let cluster = Cluster {
            paths,
            kube,
            control_planes: k,
            nodes,
            etcd,
            etcd_spec,
            cm_spec,
            scheduler_spec,
            apiservers,
            apiserver_specs,
            controller_manager,
            scheduler,
            forwarder,
            direct,
            rt,
            kubelet,
            real_nodes,
            log_dir,
        };
        // The ServiceAccount controllers and the RBAC bootstrap must have run before a
        // test asks for a token: wait for the default ServiceAccount.
        wait::until("the default ServiceAccount", Duration::from_secs(60), || {
            Ok(cluster.kubectl(&["get", "serviceaccount", "default", "-n", "default", "-o", "name"]).ok())
        })?;
        Ok(cluster)
    }

    /// The cluster's files.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// The admin kubeconfig, usable from the host.
    pub fn kubeconfig(&self) -> PathBuf {
        self.paths.admin_kubeconfig()
    }

    /// Where the host reaches the apiservers (the first that accepts).
    pub fn host_addr(&self) -> SocketAddr {
        self.forwarder.addr()
    }

    /// `https://<node i's address>:6443`: how processes in the lab reach apiserver `i`.
    pub fn lab_server(&self, i: usize) -> String {
        format!("https://{}", apiserver_addr(i))
    }

    /// The Nodes the testbed registered (every lab node).
    pub fn nodes(&self) -> &[kubelet::NodeInfo] {
        &self.nodes
    }

    /// The real nodes (kubelet + containerd), in lab node order; empty unless
    /// [`ClusterConfig::kubelets`].
    pub fn real_nodes(&self) -> &[node::RealNode] {
        &self.real_nodes
    }

    /// For each real node, how long its Node took to be Ready after its kubelet started.
    pub fn ready_after(&self) -> Vec<(String, Duration)> {
        self.real_nodes.iter().filter_map(|n| Some((n.name().to_owned(), n.ready_after()?))).collect()
    }

    /// The multicall binary (`ferrolb-kube kubectl …`).
    pub fn kube_binary(&self) -> &Path {
        &self.kube
    }

    fn admin_client_blocking(&self) -> kube::Client {
        // The kubeconfig was written and read once at start; it cannot be missing now.
        match client_from(&self.rt, &self.paths.admin_kubeconfig()) {
            Ok(c) => c,
            Err(e) => panic!("admin kubeconfig unusable: {e}"),
        }
    }

    /// A client authenticated by `kubeconfig` (e.g. a ServiceAccount's), through the host forwarder.
    pub fn client_for(&self, kubeconfig: &Path) -> Result<kube::Client, Error> {
        client_from(&self.rt, kubeconfig)
    }

    /// Runs kubectl (v1.37, from the same build) as the admin on the host; stdout on success.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, Error> {
        let mut cmd = Command::new(&self.kube);
        cmd.arg("kubectl").arg("--kubeconfig").arg(self.paths.admin_kubeconfig()).args(args);
        crate::netns::run(&mut cmd)
    }

    /// Runs kubectl with `stdin` as its input (`apply -f -`).
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> Result<String, Error> {
        use std::io::Write;
        let mut cmd = Command::new(&self.kube);
        cmd.arg("kubectl").arg("--kubeconfig").arg(self.paths.admin_kubeconfig()).args(args);
        let desc = describe(&cmd);
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| Error::Command { command: desc.clone(), detail: e.to_string() })?;
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(Error::Command {
                command: desc,
                detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Every event of every apiserver's audit log.
    pub fn audit(&self) -> Vec<audit::Request> {
        (1..=self.control_planes).flat_map(|i| audit::read(&self.paths.audit_log(i), 0, None)).collect()
    }

    /// Sends `sig` to apiserver `i` (SIGSTOP / SIGCONT / SIGKILL …).
    pub fn signal_apiserver(&mut self, i: usize, sig: Signal) {
        if let Some(Some(p)) = self.apiservers.get_mut(i - 1) {
            p.signal(sig);
        }
    }

    /// Kills apiserver `i` (SIGKILL) and reaps it.
    pub fn kill_apiserver(&mut self, i: usize) {
        if let Some(slot) = self.apiservers.get_mut(i - 1)
            && let Some(mut p) = slot.take()
        {
            p.kill();
        }
    }

    /// Starts apiserver `i` again (after [`Cluster::kill_apiserver`]) and waits for its `/readyz`.
    pub fn restart_apiserver(&mut self, i: usize) -> Result<(), Error> {
        self.kill_apiserver(i);
        let (ns, spec) = &self.apiserver_specs[i - 1];
        self.apiservers[i - 1] = Some(Proc::start(ns, &self.log_dir, spec)?);
        wait_ready(&self.rt, &self.direct[i - 1], &self.paths, Duration::from_secs(120))
    }

    /// Whether apiserver `i` answers `/readyz` with `ok` now.
    pub fn apiserver_ready(&self, i: usize) -> bool {
        probe_ready(&self.rt, &self.direct[i - 1], &self.paths).unwrap_or(false)
    }

    /// Power loss of the whole lab: SIGKILL to every kubelet, kube-proxy, containerd and
    /// container, the scheduler, the controller-manager, every apiserver and etcd; what a
    /// reboot clears goes (mounts, cgroups, containerd state, addresses added at runtime
    /// such as the VIP). Disks stay: etcd's data, images, kubelet roots, static pods,
    /// checkpoints, the PKI.
    pub fn power_off(&mut self, lab: &Lab) {
        for n in &mut self.real_nodes {
            n.power_off();
        }
        if let Some(s) = &mut self.scheduler {
            s.kill();
        }
        self.controller_manager.kill();
        for i in 1..=self.control_planes {
            self.kill_apiserver(i);
        }
        self.etcd.kill();
        for ns in lab.nodes() {
            let _ = ns.ip(&["addr", "del", &format!("{VIP_V4}/32"), "dev", "eth0"]);
        }
    }

    /// Cold start after [`Cluster::power_off`]: etcd, every apiserver, the
    /// controller-manager, the scheduler, and every node's containerd, kubelet and
    /// kube-proxy, started one after the other without waiting for any to be ready.
    pub fn power_on(&mut self) -> Result<(), Error> {
        let cp1 = self.apiserver_specs[0].0.clone();
        self.etcd = Proc::start(&cp1, &self.log_dir, &self.etcd_spec)?;
        for (i, (ns, spec)) in self.apiserver_specs.iter().enumerate() {
            self.apiservers[i] = Some(Proc::start(ns, &self.log_dir, spec)?);
        }
        self.controller_manager = Supervised::start(&cp1, &self.log_dir, &self.cm_spec)?;
        if let Some(spec) = &self.scheduler_spec {
            self.scheduler = Some(Supervised::start(&cp1, &self.log_dir, spec)?);
        }
        for n in &mut self.real_nodes {
            n.boot()?;
        }
        Ok(())
    }

    /// The last lines of the control plane's logs.
    pub fn logs(&self, lines: usize) -> String {
        let mut out = String::new();
        for p in [self.etcd.log_path().to_path_buf(), self.controller_manager.log_path().to_path_buf()]
            .into_iter()
            .chain(self.apiserver_specs.iter().map(|(_, s)| self.log_dir.join(format!("{}.log", s.name))))
        {
            out.push_str(&format!("----- {} -----\n{}\n", p.display(), tail(&read_lossy(&p), lines)));
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(k) = &self.kubelet {
            k.abort();
        }
        // The kubelets first, while the apiserver still answers them.
        self.real_nodes.clear();
        if let Some(s) = &mut self.scheduler {
            s.kill();
        }
        self.controller_manager.kill();
        for p in self.apiservers.iter_mut().flatten() {
            p.kill();
        }
        self.etcd.kill();
    }
}

const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

fn apiserver_addr(i: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(plan::node_v4(i)), APISERVER_PORT)
}

fn apiserver_spec(kube: &str, paths: &Paths, i: usize, etcd_url: &str) -> Spawn {
    let p = |f: &str| paths.pki.join(f).display().to_string();
    Spawn::new(
        format!("kube-apiserver-{}", plan::node_name(i)),
        &[
            kube,
            "kube-apiserver",
            &format!("--etcd-servers={etcd_url}"),
            "--bind-address=::",
            &format!("--secure-port={APISERVER_PORT}"),
            &format!("--advertise-address={}", plan::node_v4(i)),
            &format!("--tls-cert-file={}", p("apiserver.crt")),
            &format!("--tls-private-key-file={}", p("apiserver.key")),
            &format!("--client-ca-file={}", p("ca.crt")),
            &format!("--service-account-issuer={ISSUER}"),
            &format!("--service-account-key-file={}", p("sa.pub")),
            &format!("--service-account-signing-key-file={}", p("sa.key")),
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            &format!("--service-cluster-ip-range={SERVICE_CIDRS}"),
            &format!("--audit-policy-file={}", paths.dir.join("audit-policy.yaml").display()),
            &format!("--audit-log-path={}", paths.audit_log(i).display()),
            "--audit-log-format=json",
            "--allow-privileged=true",
            // Real kubelets (#17): dial them by InternalIP (lab node names do not
            // resolve), presenting a client cert their x509 authn accepts.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            &format!("--kubelet-client-certificate={}", p("apiserver-kubelet-client.crt")),
            &format!("--kubelet-client-key={}", p("apiserver-kubelet-client.key")),
            &format!("--cert-dir={}", paths.dir.join(format!("apiserver-{i}")).display()),
            "--profiling=false",
            "-v=1",
        ],
    )
}

/// Writes the kubeadm-shaped PKI: CA, apiserver serving pair (names and addresses of
/// every control-plane node, the VIP, loopback, the first ClusterIPs), ServiceAccount
/// signing pair, and the client pairs of the admin and the controller-manager; returns
/// the CA.
fn write_pki(paths: &Paths, control_planes: usize, extra_sans: &[String]) -> Result<TestCa, Error> {
    let ca = TestCa::new()?;
    ca.write(&paths.pki)?;
    let mut names: Vec<String> = [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
        "127.0.0.1",
        "::1",
        "198.19.240.1",
        "2001:db8:ff::1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push(VIP_V4.to_string());
    for i in 1..=control_planes {
        names.push(plan::node_name(i));
        names.push(plan::node_v4(i).to_string());
        names.push(plan::node_v6(i).to_string());
    }
    names.extend(extra_sans.iter().cloned());
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let (cert, key) = ca.serving_cert(&refs)?;
    std::fs::write(paths.pki.join("apiserver.crt"), cert)?;
    write_private(&paths.pki.join("apiserver.key"), &key)?;
    let sa = rcgen::KeyPair::generate().map_err(|e| Error::Parse(format!("ServiceAccount key: {e}")))?;
    write_private(&paths.pki.join("sa.key"), &sa.serialize_pem())?;
    std::fs::write(paths.pki.join("sa.pub"), sa.public_key_pem())?;
    for (file, cn, org) in [
        ("admin", "kubernetes-admin", Some("system:masters")),
        ("controller-manager", "system:kube-controller-manager", None),
        ("scheduler", "system:kube-scheduler", None),
        ("kube-proxy", "system:kube-proxy", None),
        // kubeadm's apiserver-kubelet-client: what a real kubelet's x509 authn sees on
        // logs/exec/port-forward.
        ("apiserver-kubelet-client", "kube-apiserver-kubelet-client", Some("kubeadm:cluster-admins")),
    ] {
        write_client_pair(paths, &ca, file, cn, org)?;
    }
    Ok(ca)
}

/// Writes `pki/<file>.{crt,key}`: a client pair for user `cn` in group `org`.
fn write_client_pair(
    paths: &Paths,
    ca: &TestCa,
    file: &str,
    cn: &str,
    org: Option<&str>,
) -> Result<(), Error> {
    let (cert, key) = ca.client_cert(cn, org)?;
    std::fs::write(paths.pki.join(format!("{file}.crt")), cert)?;
    write_private(&paths.pki.join(format!("{file}.key")), &key)
}

/// Starts a real node on every lab node (its kubelet talks to its own apiserver on a
/// control-plane node, elsewhere to [`ClusterConfig::workers_server`] or the first
/// one), waits until every Node is Ready (but the workers' with a `workers_server`) and
/// labels the control planes as kubeadm does.
#[allow(clippy::too_many_arguments)]
fn start_real_nodes(
    lab: &Lab,
    rt: &tokio::runtime::Runtime,
    admin: &kube::Client,
    kube: &Path,
    paths: &Paths,
    ca: &TestCa,
    nodes: &[kubelet::NodeInfo],
    cfg: &ClusterConfig,
    before_kubelet: &mut dyn FnMut(usize, &node::RealNode, &Paths) -> Result<(), Error>,
) -> Result<Vec<node::RealNode>, Error> {
    let control_planes = cfg.control_planes;
    let pause = node::build_pause_image(&paths.dir.join("pause.tar"))?;
    let mut real = Vec::new();
    for (i, n) in nodes.iter().enumerate().map(|(i, n)| (i + 1, n)) {
        let pair = format!("kubelet-{}", n.name);
        write_client_pair(paths, ca, &pair, &format!("system:node:{}", n.name), Some("system:nodes"))?;
        let spec = node::NodeSpec {
            name: n.name.clone(),
            netns: lab.node(i).clone(),
            ips: n.ips.clone(),
            pod_subnet: Some(plan::node_pod_v4(i)),
            proxy: Some(node::ProxySpec {
                client_cert: paths.pki.join("kube-proxy.crt"),
                client_key: paths.pki.join("kube-proxy.key"),
                cluster_cidr: plan::POD_V4.into(),
            }),
            server: match &cfg.workers_server {
                Some(url) if i > control_planes => url.clone(),
                _ => format!("https://{}", apiserver_addr(if i <= control_planes { i } else { 1 })),
            },
            ca_cert: paths.ca_cert(),
            client_cert: paths.pki.join(format!("{pair}.crt")),
            client_key: paths.pki.join(format!("{pair}.key")),
        };
        pod_routes(lab.node(i), i, nodes.len())?;
        let dir = paths.dir.join(format!("kubelet-{}", n.name));
        let mut node = node::RealNode::start_containerd(&spec, &dir, &paths.dir, &pause)?;
        before_kubelet(i, &node, paths)?;
        node.start_kubelet(kube, &spec, &paths.dir)?;
        real.push(node);
    }
    let api: Api<Node> = Api::all(admin.clone());
    let awaited = if cfg.workers_server.is_some() { control_planes } else { nodes.len() };
    for (n, node) in nodes.iter().zip(&mut real).take(awaited) {
        let what = format!("Node {} Ready through its kubelet", n.name);
        let waited = wait::until(&what, KUBELET_READY_TIMEOUT, || {
            // A kubelet that exited never will be: stop waiting at once.
            if !node.kubelet_running() {
                return Ok(Some(Err(Error::Command {
                    command: format!("kubelet {}", n.name),
                    detail: "exited".into(),
                })));
            }
            let got = rt.block_on(api.get_opt(&n.name)).map_err(|e| Error::Parse(e.to_string()))?;
            Ok(got.filter(node_ready).map(Ok))
        });
        if let Err(e) = waited.and_then(|r| r) {
            return Err(Error::Parse(format!("{e}\n{}", node.logs(30))));
        }
        node.saw_ready();
        if n.control_plane {
            let label = json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}});
            rt.block_on(api.patch(&n.name, &PatchParams::default(), &Patch::Merge(&label)))
                .map_err(|e| Error::Parse(format!("labelling Node {}: {e}", n.name)))?;
        }
    }
    Ok(real)
}

/// Node `i`'s routes for pod networking, as a cluster's network would provide them: the
/// other nodes' pod subnets through those nodes, and the ClusterIPs (v4) on the LAN link —
/// only so that a connect() finds a route before kube-proxy's DNAT rewrites it (there is
/// no default route). Forwarding on, for the pods and for kube-proxy's DNAT.
fn pod_routes(ns: &Netns, i: usize, nodes: usize) -> Result<(), Error> {
    ns.sysctl("net.ipv4.ip_forward", "1")?;
    for j in (1..=nodes).filter(|j| *j != i) {
        ns.ip(&["route", "replace", &plan::node_pod_v4(j), "via", &plan::node_v4(j).to_string()])?;
    }
    ns.ip(&["route", "replace", plan::SERVICES_V4, "dev", "eth0"])?;
    Ok(())
}

/// Whether `node`'s Ready condition is True.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(path)?;
    std::io::Write::write_all(&mut f, text.as_bytes())?;
    Ok(())
}

/// A kubeconfig authenticating with the client pair `pki/<pair>.{crt,key}`.
fn write_cert_kubeconfig(
    paths: &Paths,
    path: &Path,
    server: &str,
    user: &str,
    pair: &str,
) -> Result<(), Error> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {server}\n    \
         certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate: {crt}\n    \
         client-key: {key}\ncontexts:\n- name: lab\n  context:\n    cluster: lab\n    user: {user}\n\
         current-context: lab\n",
        ca = paths.ca_cert().display(),
        crt = paths.pki.join(format!("{pair}.crt")).display(),
        key = paths.pki.join(format!("{pair}.key")).display(),
    );
    std::fs::write(path, text)?;
    Ok(())
}

/// A kube client from a kubeconfig file, bound to `rt` (call it outside `rt`'s tasks).
pub fn client_from(rt: &tokio::runtime::Runtime, kubeconfig: &Path) -> Result<kube::Client, Error> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .map_err(|e| Error::Parse(format!("kubeconfig {}: {e}", kubeconfig.display())))?;
    let config = rt
        .block_on(kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()))
        .map_err(|e| Error::Parse(format!("kubeconfig {}: {e}", kubeconfig.display())))?;
    let _g = rt.enter();
    kube::Client::try_from(config)
        .map_err(|e| Error::Parse(format!("client for {}: {e}", kubeconfig.display())))
}

/// `GET /readyz` through a forwarder with the admin's credentials: `Ok(true)` on `ok`.
fn probe_ready(rt: &tokio::runtime::Runtime, via: &Forwarder, paths: &Paths) -> Result<bool, Error> {
    let conf = paths.dir.join(format!("probe-{}.conf", via.addr().port()));
    if !conf.exists() {
        write_cert_kubeconfig(paths, &conf, &format!("https://{}", via.addr()), "kubernetes-admin", "admin")?;
    }
    let client = client_from(rt, &conf)?;
    let req = http::Request::get("/readyz").body(Vec::new()).map_err(|e| Error::Parse(e.to_string()))?;
    let fut = async move { tokio::time::timeout(Duration::from_secs(3), client.request_text(req)).await };
    match rt.block_on(fut) {
        Ok(Ok(body)) => Ok(body.trim() == "ok"),
        Ok(Err(e)) => Err(Error::Parse(e.to_string())),
        Err(_) => Err(Error::Parse("/readyz timed out".into())),
    }
}

fn wait_ready(
    rt: &tokio::runtime::Runtime,
    via: &Forwarder,
    paths: &Paths,
    timeout: Duration,
) -> Result<(), Error> {
    wait::until(&format!("/readyz ok at {}", via.target_desc()), timeout, || {
        Ok(probe_ready(rt, via, paths)?.then_some(()))
    })
}

fn startup_failure(e: Error, log_dir: &Path) -> Error {
    let mut logs = String::new();
    for name in ["etcd", "kube-apiserver-node1", "kube-controller-manager"] {
        let p = log_dir.join(format!("{name}.log"));
        logs.push_str(&format!("\n----- {} -----\n{}", p.display(), tail(&read_lossy(&p), 15)));
    }
    Error::Parse(format!("the control plane did not start: {e}{logs}"))
}
