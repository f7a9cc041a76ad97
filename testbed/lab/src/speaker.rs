//! The built `ferrolb-speaker` run in a node namespace from a static file the test writes.
//!
//! The binary is `$FERROLB_SPEAKER_BIN`, else `target/<profile>/ferrolb-speaker` of this
//! workspace (`testbed/test.sh` builds it before `cargo test`; [`crate::binary`]).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::netns::Netns;
use crate::process::{Proc, Spawn, read_lossy};
use crate::{Error, Lab, addressing, wait};

/// What runs the speaker as a container runtime that grants no real-time budget would:
/// RLIMIT_RTPRIO 0, RLIMIT_NICE 0 and no CAP_SYS_NICE (dropped from the bounding set, so
/// not even root gets it back at exec). The membership reader's SCHED_FIFO and nice -20
/// both fail, and the heartbeat runs at normal priority.
pub const WITHOUT_REALTIME: &[&str] =
    &["prlimit", "--rtprio=0", "--nice=0", "--", "setpriv", "--bounding-set=-sys_nice", "--"];

/// Sample `name` of node `i`'s speaker started by [`Speaker::start_l2_metered`] (0 when the
/// sample is absent), read from the client namespace; None when the metrics do not answer.
pub fn node_metric(lab: &Lab, i: usize, metrics_port: u16, name: &str) -> Option<f64> {
    let at = SocketAddr::new(addressing::node_v4(i).into(), metrics_port);
    let body = crate::client::http_get(lab.client(), at, "/metrics", Duration::from_secs(2)).ok()?;
    Some(crate::client::metric_sample(&body, name).unwrap_or(0.0))
}

/// Path of the speaker binary for `profile` ("debug" or "release").
pub fn binary(profile: &str) -> Result<PathBuf, Error> {
    crate::binary::workspace("ferrolb-speaker", profile)
}

/// A running speaker on one lab node.
#[derive(Debug)]
pub struct Speaker {
    ns: Netns,
    name: String,
    argv: Vec<String>,
    file: PathBuf,
    log: PathBuf,
    lab_dir: PathBuf,
    proc: Option<Proc>,
    generation: u32,
    /// Extra environment of every start (e.g. [`faketime`]).
    env: Vec<(String, String)>,
}

impl Speaker {
    /// Writes `yaml` as the static file and starts the debug build on node `i` as `nodeI`.
    pub fn start(lab: &Lab, i: usize, yaml: &str) -> Result<Self, Error> {
        Self::start_with(lab, i, yaml, &binary("debug")?, &[])
    }

    /// Like [`Speaker::start`] with a given binary and extra flags.
    pub fn start_with(lab: &Lab, i: usize, yaml: &str, bin: &Path, extra: &[&str]) -> Result<Self, Error> {
        Self::start_env(lab, i, yaml, bin, extra, &[])
    }

    /// Like [`Speaker::start_with`] with extra environment variables (kept for
    /// [`Speaker::restart`] until [`Speaker::set_env`]).
    pub fn start_env(
        lab: &Lab,
        i: usize,
        yaml: &str,
        bin: &Path,
        extra: &[&str],
        env: &[(String, String)],
    ) -> Result<Self, Error> {
        Self::start_wrapped(lab, i, yaml, &[], bin, extra, env)
    }

    /// Like [`Speaker::start_env`], the binary run by the command `wrapper` (e.g.
    /// [`WITHOUT_REALTIME`]), at every start.
    pub fn start_wrapped(
        lab: &Lab,
        i: usize,
        yaml: &str,
        wrapper: &[&str],
        bin: &Path,
        extra: &[&str],
        env: &[(String, String)],
    ) -> Result<Self, Error> {
        let node = addressing::node_name(i);
        let dir = lab.subdir(&format!("speaker-{node}"))?;
        let file = dir.join("static.yaml");
        std::fs::write(&file, yaml)?;
        let mut argv: Vec<String> = wrapper.iter().map(|s| s.to_string()).collect();
        argv.extend([
            bin.display().to_string(),
            "--node-name".into(),
            node.clone(),
            "--static".into(),
            file.display().to_string(),
        ]);
        argv.extend(extra.iter().map(|s| s.to_string()));
        let mut s = Speaker {
            ns: lab.node(i).clone(),
            name: format!("speaker-{node}"),
            argv,
            file,
            log: PathBuf::new(),
            lab_dir: lab.dir().to_path_buf(),
            proc: None,
            generation: 0,
            env: env.to_vec(),
        };
        s.spawn()?;
        Ok(s)
    }

    fn spawn(&mut self) -> Result<(), Error> {
        self.generation += 1;
        let name = if self.generation == 1 {
            self.name.clone()
        } else {
            format!("{}-{}", self.name, self.generation)
        };
        let argv: Vec<&str> = self.argv.iter().map(String::as_str).collect();
        let mut spec =
            Spawn::new(name, &argv).env("RUST_LOG", "info,ferrolb_speaker=debug,ferrolb_proto=debug");
        for (k, v) in &self.env {
            spec = spec.env(k, v);
        }
        let proc = Proc::start(&self.ns, &self.lab_dir, &spec)?;
        self.log = proc.log_path().to_path_buf();
        self.proc = Some(proc);
        Ok(())
    }

    /// Like [`Speaker::start`] with L2 announcements: `--membership-key-file key_file`.
    pub fn start_l2(lab: &Lab, i: usize, yaml: &str, key_file: &Path) -> Result<Self, Error> {
        Self::start_l2_env(lab, i, yaml, key_file, &[], &[])
    }

    /// Like [`Speaker::start_l2`] with extra arguments and environment variables (e.g.
    /// [`faketime`]).
    pub fn start_l2_env(
        lab: &Lab,
        i: usize,
        yaml: &str,
        key_file: &Path,
        extra: &[&str],
        env: &[(String, String)],
    ) -> Result<Self, Error> {
        let key = key_file.display().to_string();
        let args: Vec<&str> =
            ["--membership-key-file", key.as_str()].into_iter().chain(extra.iter().copied()).collect();
        Self::start_env(lab, i, yaml, &binary("debug")?, &args, env)
    }

    /// L2 speakers on nodes 1..=`nodes`, each serving its metrics on its node's address
    /// at `metrics_port` (read them with [`node_metric`]).
    pub fn start_l2_metered(
        lab: &Lab,
        nodes: usize,
        yaml: &str,
        key_file: &Path,
        metrics_port: u16,
    ) -> Result<Vec<Self>, Error> {
        (1..=nodes)
            .map(|i| {
                let metrics = SocketAddr::new(addressing::node_v4(i).into(), metrics_port).to_string();
                Self::start_l2_env(lab, i, yaml, key_file, &["--metrics-addr", &metrics], &[])
            })
            .collect()
    }

    /// Sets the extra environment of the next [`Speaker::restart`].
    pub fn set_env(&mut self, env: &[(String, String)]) {
        self.env = env.to_vec();
    }

    /// The static file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Replaces the static file by rename (as editors and config management do).
    pub fn replace_file(&self, yaml: &str) -> Result<(), Error> {
        let tmp = self.file.with_extension("yaml.tmp");
        std::fs::write(&tmp, yaml)?;
        std::fs::rename(&tmp, &self.file)?;
        Ok(())
    }

    /// Rewrites the static file in place (truncate and write).
    pub fn rewrite_file(&self, yaml: &str) -> Result<(), Error> {
        std::fs::write(&self.file, yaml)?;
        Ok(())
    }

    /// The current process's log.
    pub fn logs(&self) -> String {
        read_lossy(&self.log)
    }

    /// Waits until the current log contains `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> Result<(), Error> {
        wait::until(&format!("speaker log line containing {needle:?}"), timeout, || {
            Ok(self.logs().contains(needle).then_some(()))
        })
    }

    /// The running process.
    pub fn process(&mut self) -> Option<&mut Proc> {
        self.proc.as_mut()
    }

    /// PID of the running process.
    pub fn pid(&self) -> Option<i32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// SIGKILL (no Cease, no withdrawal: the peer's hold timer or graceful restart decides).
    pub fn kill(&mut self) {
        if let Some(p) = self.proc.as_mut() {
            p.kill();
        }
    }

    /// SIGTERM; returns the exit code if it exited within `grace`.
    pub fn terminate(&mut self, grace: Duration) -> Option<i32> {
        self.proc.as_mut().and_then(|p| p.terminate(grace)).and_then(|s| s.code())
    }

    /// Starts the same binary with the same file again (after [`Speaker::kill`]).
    pub fn restart(&mut self) -> Result<(), Error> {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
        self.spawn()
    }
}

/// Starts the debug `ferrolb-speaker` in Kubernetes mode on node `i` with `kubeconfig`
/// (the fake's, or a ServiceAccount's on the real apiserver; namespace `ferrolb-system`,
/// debug logs), with `metrics` as its `--metrics-addr` when given. `tag` names its log.
pub fn start_kube(
    lab: &Lab,
    kubeconfig: &Path,
    i: usize,
    tag: &str,
    metrics: Option<SocketAddr>,
) -> Result<Proc, Error> {
    lab.spawn(lab.node(i), kube_spawn(&binary("debug")?, kubeconfig, i, tag, metrics))
}

/// How [`start_kube`] starts `bin` on node `i`: for a caller running another build (e.g.
/// a release one) with `lab.spawn(lab.node(i), …)`.
pub fn kube_spawn(bin: &Path, kubeconfig: &Path, i: usize, tag: &str, metrics: Option<SocketAddr>) -> Spawn {
    let bin = bin.display().to_string();
    let node = addressing::node_name(i);
    let kubeconfig = kubeconfig.display().to_string();
    let mut argv = vec![
        bin,
        "--node-name".into(),
        node.clone(),
        "--kubeconfig".into(),
        kubeconfig,
        "--namespace".into(),
    ];
    argv.push("ferrolb-system".into());
    if let Some(m) = metrics {
        argv.extend(["--metrics-addr".into(), m.to_string()]);
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    Spawn::new(format!("{tag}-{node}"), &argv)
        .env("RUST_LOG", "info,ferrolb_speaker=debug,ferrolb_proto=debug")
}

/// The environment that runs a program with its clocks `offset` off (e.g. `"+60s"`):
/// libfaketime (Debian package `faketime`) preloaded as `faketime -f OFFSET PROGRAM`
/// does, minus the `faketime` wrapper, which forks and would keep signals from reaching
/// the program. It shifts CLOCK_REALTIME and, by default, CLOCK_MONOTONIC too.
pub fn faketime(offset: &str) -> Result<Vec<(String, String)>, Error> {
    const LIBS: [&str; 2] = [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    ];
    let lib = LIBS.iter().find(|p| Path::new(p).exists()).ok_or_else(|| {
        Error::Missing(
            "libfaketime not found: install the Debian package faketime (testbed/prereqs.sh)".into(),
        )
    })?;
    Ok(vec![("LD_PRELOAD".into(), (*lib).into()), ("FAKETIME".into(), offset.into())])
}

/// Writes a membership key file of 40 characters derived from `seed` in the lab
/// directory; the same seed gives the same key.
pub fn write_membership_key(lab: &Lab, seed: &str) -> Result<PathBuf, Error> {
    let dir = lab.subdir("membership-keys")?;
    let path = dir.join(format!("{seed}.key"));
    let mut key: String = std::iter::repeat(seed).flat_map(str::chars).take(40).collect();
    while key.chars().count() < 40 {
        key.push('k');
    }
    std::fs::write(&path, format!("{key}\n"))?;
    Ok(path)
}

/// Builders for the objects of a speaker's static file.
pub mod yaml {
    use super::*;

    /// Node `i` of the lab: Ready, InternalIPs = its LAN addresses, label `rack: r<i>`.
    pub fn node(i: usize) -> String {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {}, labels: {{rack: r{i}}}}}\nstatus:\n  conditions: [{{type: Ready, status: \"True\"}}]\n  addresses: [{{type: InternalIP, address: {}}}, {{type: InternalIP, address: \"{}\"}}]\n",
            addressing::node_name(i),
            addressing::node_v4(i),
            addressing::node_v6(i)
        )
    }

    /// A LoadBalancer Service (policy Cluster) with these ingress addresses.
    pub fn service(name: &str, ips: &[IpAddr]) -> String {
        let mut s = format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec: {{type: LoadBalancer, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: ["
        );
        let ips: Vec<String> = ips.iter().map(|ip| format!("{{ip: \"{ip}\"}}")).collect();
        s.push_str(&ips.join(", "));
        s.push_str("]}}\n");
        s
    }

    /// An IPAddressPool.
    pub fn pool(name: &str, addresses: &[&str]) -> String {
        pool_with(name, addresses, "")
    }

    /// An IPAddressPool that gives addresses only to Services asking for it
    /// (`autoAssign: false`).
    pub fn pool_manual(name: &str, addresses: &[&str]) -> String {
        pool_with(name, addresses, ", autoAssign: false")
    }

    fn pool_with(name: &str, addresses: &[&str], more: &str) -> String {
        let a: Vec<String> = addresses.iter().map(|a| format!("\"{a}\"")).collect();
        format!(
            "apiVersion: ferrolb.io/v1alpha1\nkind: IPAddressPool\nmetadata: {{name: {name}}}\nspec: {{addresses: [{}]{more}}}\n",
            a.join(", ")
        )
    }

    /// A BGPPeer; `extra` holds further `spec` lines, each indented by two spaces.
    pub fn peer(name: &str, my_asn: u32, peer_asn: u32, address: IpAddr, extra: &[&str]) -> String {
        peer_with(name, my_asn, &format!("peerASN: {peer_asn}"), address, extra)
    }

    /// A BGPPeer with `dynamicASN: internal|external` instead of `peerASN`.
    pub fn dynamic_peer(name: &str, my_asn: u32, dynamic: &str, address: IpAddr, extra: &[&str]) -> String {
        peer_with(name, my_asn, &format!("dynamicASN: {dynamic}"), address, extra)
    }

    fn peer_with(name: &str, my_asn: u32, peer_as: &str, address: IpAddr, extra: &[&str]) -> String {
        let mut s = format!(
            "apiVersion: ferrolb.io/v1alpha1\nkind: BGPPeer\nmetadata: {{name: {name}}}\nspec:\n  myASN: {my_asn}\n  {peer_as}\n  peerAddress: \"{address}\"\n  connectTime: 1s\n"
        );
        for e in extra {
            let _ = writeln!(s, "  {e}");
        }
        s
    }

    /// The client's ExaBGP recorder as BGPPeer `recorder` (iBGP in the router's AS, on
    /// the client's address): it records every UPDATE a speaker sends.
    pub fn recorder_peer() -> String {
        peer("recorder", addressing::ROUTER_ASN, addressing::ROUTER_ASN, addressing::CLIENT_V4.into(), &[])
    }

    /// The lab's router as BGPPeer `router` on its IPv4 LAN address, IPv4 unicast only;
    /// `extra` holds further `spec` lines.
    pub fn router_peer_v4(extra: &[&str]) -> String {
        let mut lines = vec!["addressFamilies: [ipv4-unicast]"];
        lines.extend_from_slice(extra);
        peer("router", addressing::NODE_ASN, addressing::ROUTER_ASN, addressing::ROUTER_V4.into(), &lines)
    }

    /// The `spec` line of a BGPPeer asking for graceful restart with `restart_time`.
    pub fn graceful_restart(restart_time: Duration) -> String {
        format!("gracefulRestart: {{enabled: true, restartTime: {}s}}", restart_time.as_secs())
    }

    /// A BGPAdvertisement; `extra` holds `spec` lines.
    pub fn bgp_advertisement(name: &str, extra: &[&str]) -> String {
        let mut s = format!(
            "apiVersion: ferrolb.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {{name: {name}}}\nspec:\n"
        );
        if extra.is_empty() {
            s.push_str("  ipAddressPools: []\n");
        }
        for e in extra {
            let _ = writeln!(s, "  {e}");
        }
        s
    }

    /// An L2Advertisement; `extra` holds `spec` lines (none: every pool).
    pub fn l2_advertisement(name: &str, extra: &[&str]) -> String {
        let mut s = format!(
            "apiVersion: ferrolb.io/v1alpha1\nkind: L2Advertisement\nmetadata: {{name: {name}}}\nspec:\n"
        );
        if extra.is_empty() {
            s.push_str("  ipAddressPools: []\n");
        }
        for e in extra {
            let _ = writeln!(s, "  {e}");
        }
        s
    }

    /// The `members` items of a ControlPlaneVIP: lab nodes 1..=`n` by name and IPv4
    /// address, each line indented four spaces.
    pub fn vip_members(n: usize) -> String {
        (1..=n)
            .map(|i| {
                format!("    - {{name: {}, address: {}}}\n", addressing::node_name(i), addressing::node_v4(i))
            })
            .collect()
    }

    /// Joins objects into one `---`-separated stream.
    pub fn stream(objects: &[String]) -> String {
        objects.join("---\n")
    }

    /// Nodes `nodes`, the L2 pool 192.0.2.200–250, one L2Advertisement and a Service
    /// holding `vips`.
    pub fn l2_file(nodes: &[usize], vips: &[IpAddr]) -> String {
        let mut objs: Vec<String> = nodes.iter().map(|i| node(*i)).collect();
        objs.push(pool("lan", &["192.0.2.200-192.0.2.250"]));
        objs.push(l2_advertisement("lan", &["ipAddressPools: [lan]"]));
        objs.push(service("web", vips));
        stream(&objs)
    }
}

/// The lab's last log lines and each speaker's whole log: what a failed lab test prints.
pub fn diag(lab: &Lab, speakers: &[&Speaker]) -> String {
    let mut out = lab.logs(20);
    for s in speakers {
        out.push_str(&format!("\n--- {}\n{}", s.file().display(), s.logs()));
    }
    out
}
