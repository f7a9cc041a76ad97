//! `ferrolb-testbed cluster up|down`: a cluster that outlives the command.
//!
//! `up` starts `ferrolb-testbed cluster serve` in its own session; that process owns the
//! lab (its namespaces carry its pid, so `down --stale` finds them if it dies) and the
//! control plane, and tears both down on SIGTERM. State lives in
//! `/tmp/ferrolb-testbed/clusters/<name>/`: `serve.pid`, `serve.log`, `kubeconfig`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{Cluster, ClusterConfig};
use ferrolb_lab::BASE_DIR;
use ferrolb_lab::lab::{Lab, LabConfig};
use ferrolb_lab::netns;
use ferrolb_lab::process::{read_lossy, tail};

/// How long `up` waits for the control plane (a cold start on a loaded 2-core machine).
const UP_TIMEOUT: Duration = Duration::from_secs(300);

fn state_dir(name: &str) -> PathBuf {
    PathBuf::from(BASE_DIR).join("clusters").join(name)
}

fn running_pid(name: &str) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(state_dir(name).join("serve.pid")).ok()?.trim().parse().ok()?;
    netns::pid_alive(pid).then_some(pid)
}

/// Starts the cluster in the background and waits until it is ready.
pub fn up(
    name: &str,
    control_planes: usize,
    nodes: usize,
    kubelets: bool,
    kwok_nodes: usize,
) -> anyhow::Result<()> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        bail!("--name: letters, digits and '-' only");
    }
    let dir = state_dir(name);
    if running_pid(name).is_some() {
        bail!(
            "cluster {name} is already up (ferrolb-testbed cluster down --name {name} stops it); \
             export KUBECONFIG={}",
            dir.join("kubeconfig").display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let log = std::fs::File::create(dir.join("serve.log"))?;
    let exe = std::env::current_exe().context("finding ferrolb-testbed's own path")?;
    let mut cmd = Command::new(exe);
    cmd.args(["cluster", "serve", "--name", name])
        .args(["--control-planes", &control_planes.to_string(), "--nodes", &nodes.to_string()])
        .args(kubelets.then_some("--kubelets"))
        .args(["--kwok-nodes", &kwok_nodes.to_string()])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    detach(&mut cmd);
    let mut child = cmd.spawn().context("starting ferrolb-testbed cluster serve")?;
    std::fs::write(dir.join("serve.pid"), child.id().to_string())?;
    let start = Instant::now();
    // Thousands of fake Nodes take their time to register and turn Ready.
    let timeout = UP_TIMEOUT + Duration::from_millis(40) * u32::try_from(kwok_nodes).unwrap_or(u32::MAX / 40);
    let ready = dir.join("ready");
    while !ready.exists() {
        if let Some(status) = child.try_wait()? {
            bail!(
                "the cluster did not start ({status}); its log ({}):\n{}",
                dir.join("serve.log").display(),
                tail(&read_lossy(&dir.join("serve.log")), 30)
            );
        }
        if start.elapsed() > timeout {
            let _ = kill(Pid::from_raw(i32::try_from(child.id()).unwrap_or(0)), Signal::SIGTERM);
            bail!("the cluster was not ready after {timeout:?}; see {}", dir.join("serve.log").display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    print!("{}", read_lossy(&ready));
    println!("stop it with: ferrolb-testbed cluster down --name {name}");
    println!("export KUBECONFIG={}", dir.join("kubeconfig").display());
    Ok(())
}

/// Stops the cluster and removes everything it made.
pub fn down(name: &str) -> anyhow::Result<()> {
    let dir = state_dir(name);
    let pid: Option<i32> =
        std::fs::read_to_string(dir.join("serve.pid")).ok().and_then(|p| p.trim().parse().ok());
    let Some(pid) = pid else {
        bail!("no cluster named {name} (nothing in {})", dir.display());
    };
    if netns::pid_alive(pid) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
        let exited =
            ferrolb_lab::wait::until_holds("the cluster server to exit", Duration::from_secs(30), || {
                !netns::pid_alive(pid)
            });
        if exited.is_err() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Whatever the server could not remove (it was killed): its namespaces, by its pid.
    // The lab directories go last: a real node's leftovers are found through them.
    let prefix = format!("{}{pid}x", netns::PREFIX);
    let mut lab_dirs = std::collections::BTreeSet::new();
    for ns in netns::list_ours().into_iter().filter(|n| n.starts_with(&prefix)) {
        netns::delete_by_name(&ns)?;
        crate::remove_real_node_leftovers(&ns);
        if let Some((id, _)) = ns.split_once('-') {
            lab_dirs.insert(PathBuf::from(BASE_DIR).join(id));
        }
    }
    for d in lab_dirs {
        let _ = std::fs::remove_dir_all(d);
    }
    crate::node::host::release_stale()?;
    std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    println!("cluster {name} is down");
    Ok(())
}

/// Runs the lab and its control plane until SIGTERM or SIGINT.
pub fn serve(
    name: &str,
    control_planes: usize,
    nodes: usize,
    kubelets: bool,
    kwok_nodes: usize,
) -> anyhow::Result<()> {
    let dir = state_dir(name);
    let lab = Lab::up(LabConfig::nodes(nodes.max(control_planes)))?;
    let cluster =
        Cluster::start(&lab, &ClusterConfig { control_planes, kubelets, kwok_nodes, ..Default::default() })?;
    std::fs::copy(cluster.kubeconfig(), dir.join("kubeconfig"))?;
    let mut summary = format!(
        "cluster {name} is up: lab {} ({} nodes, {control_planes} control plane{}), apiserver on the host at https://{}\n",
        lab.id(),
        lab.nodes().len(),
        if control_planes == 1 { "" } else { "s" },
        cluster.host_addr(),
    );
    for n in cluster.nodes() {
        let ips: Vec<String> = n.ips.iter().map(ToString::to_string).collect();
        summary.push_str(&format!(
            "  {}{} {}  (ip netns exec {} bash)\n",
            n.name,
            if n.control_plane { " (control plane)" } else { "" },
            ips.join(" "),
            lab.node(n.name.trim_start_matches("node").parse().unwrap_or(1)).name()
        ));
    }
    for (node, after) in cluster.ready_after() {
        summary.push_str(&format!(
            "  {node}: real kubelet, Ready {:.1} s after it started\n",
            after.as_secs_f64()
        ));
    }
    for node in cluster.real_nodes() {
        summary.push_str(&format!(
            "  {}: static pods in {}, images: ctr --address {} -n k8s.io images import ARCHIVE\n",
            node.name(),
            node.static_pod_path().display(),
            node.containerd()?.socket().display()
        ));
    }
    if let Some(kwok) = cluster.kwok() {
        let names = kwok.nodes();
        summary.push_str(&format!(
            "  {} fake nodes {}…{} (kwok, label {}={}): registered in {:.1} s, Ready {:.1} s later; \
             pods bound to them get IPs from {}; kwok log: {}\n",
            names.len(),
            names.first().map_or("", String::as_str),
            names.last().map_or("", String::as_str),
            crate::kwok::LABEL.0,
            crate::kwok::LABEL.1,
            kwok.registered_in().as_secs_f64(),
            kwok.ready_in().as_secs_f64(),
            crate::kwok::FAKE_POD_V4,
            kwok.log_path().display(),
        ));
    }
    summary.push_str(&format!("  files: {}\n", cluster.paths().dir.display()));
    std::fs::write(dir.join("ready"), summary)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok::<(), std::io::Error>(())
    })?;
    drop(cluster);
    drop(lab);
    let _ = crate::remove_leftovers(false);
    Ok(())
}

#[allow(unsafe_code)]
fn detach(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid(2) between fork and exec is async-signal-safe and touches no
    // memory shared with the parent; the server must not die with this shell's session.
    unsafe {
        cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(std::io::Error::from));
    }
}
