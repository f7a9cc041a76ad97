//! A real node (#17 point 2): in a lab node's network namespace, one containerd with its
//! CRI plugin (own root, state, socket and config, [`Containerd::start_cri`]) and one
//! real kubelet (`ferrolb-kube kubelet`, the same k8s.io/kubernetes as the control
//! plane) with a client certificate `system:node:<name>` signed by the cluster CA, a
//! static pod directory of its own and a locally built pause image. Pods run with
//! `hostNetwork: true`; there is no CNI (a loopback-only network list makes CRI report
//! NetworkReady). The recipe and every workaround are in `testbed/kube/KUBELET.md`.
//!
//! Dropping a [`RealNode`] stops the kubelet (by pid), then its containerd kills every
//! container and shim, unmounts what is left under the node's directory, removes the
//! node's cgroups; the host state the kubelets share is put back by the last one ([`host`]).

pub mod host;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::containerd::{self, Containerd, Cri};
use ferrolb_lab::Error;
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::{Proc, Spawn, read_lossy, tail};

/// The pod sandbox image every node's containerd is given (`testbed/kube/pause/pause.c`).
pub const PAUSE_IMAGE: &str = "localhost/ferrolb/pause:1";

/// Where one node's kubelet and containerd keep their files: `<cluster dir>/kubelet-<name>/`.
#[derive(Debug, Clone)]
pub struct NodePaths {
    /// The node's directory.
    pub dir: PathBuf,
}

impl NodePaths {
    /// The static pod directory (`/etc/kubernetes/manifests` on a kubeadm node).
    pub fn manifests(&self) -> PathBuf {
        self.dir.join("manifests")
    }

    /// The kubelet's `--root-dir` (`/var/lib/kubelet`).
    pub fn kubelet_root(&self) -> PathBuf {
        self.dir.join("kubelet")
    }

    /// `podLogsDir` (`/var/log/pods`).
    pub fn pod_logs(&self) -> PathBuf {
        self.dir.join("pod-logs")
    }

    /// containerd's root, state and socket.
    pub fn containerd(&self) -> PathBuf {
        self.dir.join("containerd")
    }
}

/// What a node's kubelet needs from the cluster.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// The Node name (`node1`), also the kubelet's `--hostname-override`.
    pub name: String,
    /// The node's lab namespace.
    pub netns: Netns,
    /// `--node-ip` (IPv4 first, then IPv6): the Node's InternalIPs.
    pub ips: Vec<IpAddr>,
    /// Where the node's pods that are not hostNetwork get their addresses
    /// ([`Cri::pod_subnet`]); `None`: hostNetwork pods only.
    pub pod_subnet: Option<String>,
    /// kube-proxy's client pair (CN `system:kube-proxy`, bound to `system:node-proxier`)
    /// and the pod CIDR of the whole cluster: with them a kube-proxy (iptables mode) runs
    /// in the node's namespace, as kubeadm's DaemonSet would, and routes ClusterIPs and
    /// LoadBalancer addresses to pods.
    pub proxy: Option<ProxySpec>,
    /// The apiserver URL as seen from the node.
    pub server: String,
    /// The cluster CA certificate (the kubelet trusts it, and clients presenting a
    /// certificate it signed).
    pub ca_cert: PathBuf,
    /// The kubelet's client pair, CN `system:node:<name>`, O `system:nodes`.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
}

/// What a node's kube-proxy needs ([`NodeSpec::proxy`]).
#[derive(Debug, Clone)]
pub struct ProxySpec {
    /// Client certificate, CN `system:kube-proxy`.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
    /// Every node's pod addresses (traffic from elsewhere to a Service is masqueraded).
    pub cluster_cidr: String,
}

/// A containerd and a kubelet running for one lab node; both stop when dropped.
#[derive(Debug)]
pub struct RealNode {
    name: String,
    paths: NodePaths,
    cgroup_root: String,
    kubelet: Option<Proc>,
    proxy: Option<Proc>,
    containerd: Option<Containerd>,
    /// How the kubelet was started, to boot it again after a power-off.
    booted: Option<(PathBuf, NodeSpec, PathBuf)>,
    /// When the kubelet started, and how long after that its Node was seen Ready.
    started: Instant,
    ready_after: Option<Duration>,
    _host: host::Claim,
}

impl RealNode {
    /// Starts the node's containerd in its namespace, imports `pause` (the archive of
    /// [`build_pause_image`]), writes the kubelet's kubeconfig and config and starts
    /// `kube kubelet`. Logs go to `<log_dir>/containerd-<name>.log` and
    /// `<log_dir>/kubelet-<name>.log`. Returns once both run; the Node registers itself.
    pub fn start(
        kube: &Path,
        spec: &NodeSpec,
        dir: &Path,
        log_dir: &Path,
        pause: &Path,
    ) -> Result<Self, Error> {
        let mut node = Self::start_containerd(spec, dir, log_dir, pause)?;
        node.start_kubelet(kube, spec, log_dir)?;
        Ok(node)
    }

    /// The first half of [`RealNode::start`]: the node's containerd with the pause image,
    /// and its directories, but no kubelet yet — what a node has on disk before boot
    /// (images, static pods) goes in now.
    pub fn start_containerd(
        spec: &NodeSpec,
        dir: &Path,
        log_dir: &Path,
        pause: &Path,
    ) -> Result<Self, Error> {
        let paths = NodePaths { dir: dir.to_owned() };
        std::fs::create_dir_all(&paths.dir)?;
        for d in [paths.manifests(), paths.kubelet_root(), paths.pod_logs()] {
            std::fs::create_dir_all(d)?;
        }
        // Unique on the machine and tied to the owning process, like the namespace.
        let cgroup_root = spec.netns.name().to_owned();
        let host = host::claim(spec.netns.name())?;
        // The kubelet wants its cgroupRoot in every v1 hierarchy before it starts.
        for h in std::fs::read_dir("/sys/fs/cgroup")?.flatten() {
            std::fs::create_dir_all(h.path().join(&cgroup_root))?;
        }
        let mut node = RealNode {
            name: spec.name.clone(),
            paths,
            cgroup_root: cgroup_root.clone(),
            kubelet: None,
            proxy: None,
            containerd: None,
            booted: None,
            started: Instant::now(),
            ready_after: None,
            _host: host,
        };
        let cri = Cri { sandbox_image: PAUSE_IMAGE.into(), cgroup_root, pod_subnet: spec.pod_subnet.clone() };
        let log = log_dir.join(format!("containerd-{}.log", spec.name));
        node.containerd = Some(Containerd::start_cri(&node.paths.containerd(), &spec.netns, &cri, &log)?);
        node.import(pause)?;
        Ok(node)
    }

    /// The second half of [`RealNode::start`]: writes the kubelet's kubeconfig and config
    /// and starts it.
    pub fn start_kubelet(&mut self, kube: &Path, spec: &NodeSpec, log_dir: &Path) -> Result<(), Error> {
        self.booted = Some((kube.to_owned(), spec.clone(), log_dir.to_owned()));
        let node = self;
        let kubeconfig = node.paths.dir.join("kubelet.conf");
        std::fs::write(&kubeconfig, kubeconfig_text(spec))?;
        let config = node.paths.dir.join("kubelet.yaml");
        let socket = node.containerd()?.socket().to_owned();
        std::fs::write(&config, kubelet_config(spec, &node.paths, &socket, &node.cgroup_root))?;
        let ips: Vec<String> = spec.ips.iter().map(IpAddr::to_string).collect();
        let kube_s = kube.display().to_string();
        let argv = [
            kube_s.as_str(),
            "kubelet",
            &format!("--config={}", config.display()),
            &format!("--kubeconfig={}", kubeconfig.display()),
            &format!("--root-dir={}", node.paths.kubelet_root().display()),
            &format!("--cert-dir={}", node.paths.kubelet_root().join("pki").display()),
            &format!("--hostname-override={}", spec.name),
            &format!("--node-ip={}", ips.join(",")),
            "-v=1",
        ];
        let spawn = Spawn::new(format!("kubelet-{}", spec.name), &argv).on_host_mounts();
        node.kubelet = Some(Proc::start(&spec.netns, log_dir, &spawn)?);
        node.started = Instant::now();
        if let Some(proxy) = &spec.proxy {
            let kubeconfig = node.paths.dir.join("kube-proxy.conf");
            std::fs::write(
                &kubeconfig,
                kubeconfig_with(spec, "system:kube-proxy", &proxy.client_cert, &proxy.client_key),
            )?;
            let config = node.paths.dir.join("kube-proxy.yaml");
            std::fs::write(&config, proxy_config(spec, proxy, &kubeconfig))?;
            let argv = [kube_s.as_str(), "kube-proxy", &format!("--config={}", config.display()), "-v=1"];
            let spawn = Spawn::new(format!("kube-proxy-{}", spec.name), &argv).on_host_mounts();
            node.proxy = Some(Proc::start(&spec.netns, log_dir, &spawn)?);
        }
        Ok(())
    }

    /// Power loss: SIGKILL to the kubelet, kube-proxy, containerd and every container;
    /// what a reboot clears goes (mounts, cgroups, containerd's state), the node's disk
    /// (images, kubelet root, static pods, configs) stays for [`RealNode::boot`].
    pub fn power_off(&mut self) {
        for p in [self.kubelet.take(), self.proxy.take()].into_iter().flatten() {
            let mut p = p;
            p.kill();
        }
        if let Some(c) = self.containerd.take() {
            c.power_off();
        }
        containerd::unmount_under(&self.paths.dir);
        containerd::remove_cgroups(&self.cgroup_root);
        host::remove_links_into(Path::new("/var/log/containers"), &self.paths.dir);
    }

    /// Boots a node [`RealNode::power_off`] stopped: containerd, then the kubelet and
    /// kube-proxy, from what is on the node's disk; returns without waiting for anything
    /// but containerd's socket.
    pub fn boot(&mut self) -> Result<(), Error> {
        let (kube, spec, log_dir) =
            self.booted.clone().ok_or_else(|| Error::Missing(format!("{}: never started", self.name)))?;
        for h in std::fs::read_dir("/sys/fs/cgroup")?.flatten() {
            std::fs::create_dir_all(h.path().join(&self.cgroup_root))?;
        }
        let log = log_dir.join(format!("containerd-{}.log", spec.name));
        self.containerd =
            Some(Containerd::boot(&self.paths.containerd(), &spec.netns, &self.cgroup_root, &log)?);
        self.start_kubelet(&kube, &spec, &log_dir)
    }

    /// The kubelet's log so far.
    pub fn kubelet_log(&self) -> String {
        self.kubelet.as_ref().map(|k| read_lossy(k.log_path())).unwrap_or_default()
    }

    /// The Node name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's files.
    pub fn paths(&self) -> &NodePaths {
        &self.paths
    }

    /// The static pod directory the kubelet watches.
    pub fn static_pod_path(&self) -> PathBuf {
        self.paths.manifests()
    }

    /// The kubelet's cgroupRoot (below each hierarchy's root): every pod runs under it.
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }

    /// The node's containerd (`ctr` in namespace `k8s.io`, the one the CRI plugin reads).
    pub fn containerd(&self) -> Result<&Containerd, Error> {
        self.containerd.as_ref().ok_or_else(|| Error::Missing(format!("{}: containerd stopped", self.name)))
    }

    /// Imports an OCI image archive into the node's containerd, for the kubelet's pods.
    pub fn import(&self, archive: &Path) -> Result<(), Error> {
        self.containerd()?.import(archive)
    }

    /// Process ids of the kubelet and containerd (while they run).
    pub fn pids(&self) -> Vec<i32> {
        self.kubelet.iter().map(Proc::pid).chain(self.containerd.iter().map(Containerd::pid)).collect()
    }

    /// Records that the Node is Ready now (the first time only).
    pub fn saw_ready(&mut self) {
        self.ready_after.get_or_insert(self.started.elapsed());
    }

    /// How long after its kubelet started the Node was first seen Ready.
    pub fn ready_after(&self) -> Option<Duration> {
        self.ready_after
    }

    /// Whether the kubelet still runs.
    pub fn kubelet_running(&mut self) -> bool {
        self.kubelet.as_mut().is_some_and(Proc::is_running)
    }

    /// The last lines of the kubelet's and containerd's logs.
    pub fn logs(&self, lines: usize) -> String {
        let kubelet =
            self.kubelet.as_ref().map(|k| tail(&read_lossy(k.log_path()), lines)).unwrap_or_default();
        let containerd = self.containerd.as_ref().map(Containerd::log).unwrap_or_default();
        format!(
            "----- kubelet {} -----\n{kubelet}\n----- containerd {} -----\n{containerd}\n",
            self.name, self.name
        )
    }

    /// Stops the kubelet, then the containerd (containers, shims, mounts, cgroups), and
    /// removes the node's directory. Idempotent; also what dropping does.
    pub fn stop(&mut self) {
        for p in [self.kubelet.take(), self.proxy.take()].into_iter().flatten() {
            let mut p = p;
            if p.terminate(Duration::from_secs(5)).is_none() {
                p.kill();
            }
        }
        drop(self.containerd.take());
        // Volumes the kubelet mounted (projected tokens, emptyDirs) and whatever else.
        containerd::unmount_under(&self.paths.dir);
        containerd::remove_cgroups(&self.cgroup_root);
        host::remove_links_into(Path::new("/var/log/containers"), &self.paths.dir);
        let _ = std::fs::remove_dir_all(&self.paths.dir);
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs(40));
        }
        self.stop();
    }
}

/// The kubelet's kubeconfig: the cluster CA, the node's client pair, no bootstrap.
fn kubeconfig_text(spec: &NodeSpec) -> String {
    kubeconfig_with(spec, &format!("system:node:{}", spec.name), &spec.client_cert, &spec.client_key)
}

/// A kubeconfig for the node's apiserver URL with the client pair `crt`, `key` of `user`.
fn kubeconfig_with(spec: &NodeSpec, user: &str, crt: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {server}\n    \
         certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    client-certificate: \
         {crt}\n    client-key: {key}\ncontexts:\n- name: lab\n  context:\n    cluster: lab\n    user: \
         {user}\ncurrent-context: lab\n",
        server = spec.server,
        ca = spec.ca_cert.display(),
        crt = crt.display(),
        key = key.display(),
    )
}

/// The KubeProxyConfiguration: iptables mode in the node's namespace, and no host-wide
/// conntrack sysctl touched (zero means "leave it").
fn proxy_config(spec: &NodeSpec, proxy: &ProxySpec, kubeconfig: &Path) -> String {
    json!({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": { "kubeconfig": kubeconfig },
        "mode": "iptables",
        "clusterCIDR": proxy.cluster_cidr,
        "hostnameOverride": spec.name,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    })
    .to_string()
}

/// The KubeletConfiguration (JSON is YAML): the workarounds of KUBELET.md.
fn kubelet_config(spec: &NodeSpec, paths: &NodePaths, socket: &Path, cgroup_root: &str) -> String {
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": format!("unix://{}", socket.display()),
        // The machines have cgroup v1 controllers and no systemd managing the lab.
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": format!("/{cgroup_root}"),
        "failCgroupV1": false,
        "failSwapOn": false,
        "staticPodPath": paths.manifests(),
        "podLogsDir": paths.pod_logs(),
        "authentication": {
            "anonymous": { "enabled": false },
            "webhook": { "enabled": false },
            // The apiserver's kubelet client pair (logs, exec) is signed by the cluster CA.
            "x509": { "clientCAFile": spec.ca_cert },
        },
        "authorization": { "mode": "AlwaysAllow" },
        "readOnlyPort": 0,
        "healthzPort": 0,
        "resolvConf": "/etc/resolv.conf",
        // A full-ish shared disk must neither taint the node nor delete the local-only
        // images (no registry to pull them again): no disk thresholds, no image GC.
        "evictionHard": { "memory.available": "1Mi" },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
    })
    .to_string()
}

/// Builds the pause image from `testbed/kube/pause/pause.c` (`cc -static`) as an OCI
/// archive at `out`, named [`PAUSE_IMAGE`].
pub fn build_pause_image(out: &Path) -> Result<PathBuf, Error> {
    let source = ferrolb_lab::binary::workspace_root().join("testbed/kube/pause/pause.c");
    let bin = out.with_extension("bin");
    let status =
        Command::new("cc").args(["-static", "-Os", "-s", "-o"]).arg(&bin).arg(&source).output().map_err(
            |e| Error::Missing(format!("cc (apt-get install gcc libc6-dev) for the pause image: {e}")),
        )?;
    if !status.status.success() {
        return Err(Error::Command {
            command: format!("cc -static -Os -s -o {} {}", bin.display(), source.display()),
            detail: format!(
                "{}: {} (a static build needs libc6-dev)",
                status.status,
                String::from_utf8_lossy(&status.stderr).trim()
            ),
        });
    }
    let config = json!({ "Entrypoint": ["/pause"], "User": "65535:65535" });
    let built = ferrolb_release::image::write_image(out, PAUSE_IMAGE, config, "cc -static pause.c", |w| {
        let mut f = std::fs::File::open(&bin)?;
        let size = f.metadata()?.len();
        w.file("pause", 0o755, size, &mut f)
    });
    let _ = std::fs::remove_file(&bin);
    Ok(built?.archive)
}
