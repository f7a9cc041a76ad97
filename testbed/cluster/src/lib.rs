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
//! With [`ClusterConfig::kwok_nodes`], kwok ([`kwok`]) keeps that many fake Nodes Ready
//! beside the lab's, and makes the pods bound to them Running and Ready.
//!
//! The apiservers live in the control-plane nodes' namespaces; the host reaches them
//! only through loopback forwarders ([`forward`]), never through a route into the lab.
//!
//! ```no_run
//! # use ferrolb_lab::{Lab, LabConfig, kubeapi::Objects};
//! # use ferrolb_cluster::{Cluster, ClusterConfig};
//! let lab = Lab::up(LabConfig::nodes(2))?;
//! let cluster = Cluster::start(&lab, &ClusterConfig::default())?;
//! cluster.kubectl(&["get", "nodes"])?;
//! let speaker = cluster.token_kubeconfig("ferrolb-system", "ferrolb-speaker", 1)?;
//! # Ok::<(), ferrolb_lab::Error>(())
//! ```

mod apiserver;
pub mod audit;
pub mod cli;
pub mod containerd;
mod faults;
pub mod ferrolb;
pub mod forward;
pub mod helm;
pub mod kubelet;
pub mod kwok;
mod leftovers;
pub mod load;
pub mod node;
mod pki;
mod start;
mod tokens;
pub mod vip;

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use ferrolb_lab::kubeapi::Objects;
use ferrolb_lab::netns::{Netns, describe};
use ferrolb_lab::process::{Proc, Spawn, Supervised, read_lossy, tail};
use ferrolb_lab::{Error, addressing};

use apiserver::apiserver_addr;
pub use apiserver::client_from;
use forward::Forwarder;
pub use leftovers::{remove_leftovers, remove_real_node_leftovers};

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
    /// Fake Nodes (`kwok-node-00001`, …) kwok keeps Ready, registered once the control
    /// plane is up ([`kwok`]); 0: no kwok.
    pub kwok_nodes: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            control_planes: 1,
            extra_sans: Vec::new(),
            kubelets: false,
            workers_server: None,
            kwok_nodes: 0,
        }
    }
}

/// Path of `ferrolb-kube`, the multicall binary holding the control plane.
pub fn kube_binary() -> Result<PathBuf, Error> {
    ferrolb_lab::binary::kube()
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
        self.dir.join(format!("audit-{}.log", addressing::node_name(i)))
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
    /// kwok and its fake Nodes (with [`ClusterConfig::kwok_nodes`]).
    kwok: Option<kwok::Kwok>,
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
        ferrolb_lab::netns::run(&mut cmd)
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

    /// The last lines of the control plane's logs.
    pub fn logs(&self, lines: usize) -> String {
        let mut out = String::new();
        for p in [self.etcd.log_path().to_path_buf(), self.controller_manager.log_path().to_path_buf()]
            .into_iter()
            .chain(self.kwok.as_ref().map(|k| k.log_path().to_path_buf()))
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
        if let Some(k) = &mut self.kwok {
            k.kill();
        }
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

/// Whether `node`'s Ready condition is True.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
