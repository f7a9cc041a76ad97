//! A private containerd: its own root, state and socket under one directory, and `ctr`
//! against it; either for `ctr` alone or, for a real kubelet, with its CRI plugin on and
//! inside a lab node's network namespace ([`Cri`]). Dropping it (also when a test
//! panics) kills what it started, unmounts what is left under the directory, removes the
//! containers' cgroups and the directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use ferrolb_lab::Error;
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::{read_lossy, tail};

/// The containerd namespace the images and containers of `ctr` alone live in.
const NAMESPACE: &str = "ferrolb";
/// Where Debian's containernetworking-plugins are.
const CNI_PLUGINS: &str = "/usr/lib/cni";

/// The containerd namespace the CRI plugin (the kubelet's side) reads.
const CRI_NAMESPACE: &str = "k8s.io";

/// The CRI plugin's settings for a kubelet's containerd.
#[derive(Debug, Clone)]
pub struct Cri {
    /// The pod sandbox image, imported before the first pod (no registry is ever asked).
    pub sandbox_image: String,
    /// The kubelet's `cgroupRoot` (without the leading `/`): pods run below it, and it
    /// is removed with the containerd.
    pub cgroup_root: String,
    /// Pods that are not hostNetwork get an address of this subnet on a bridge in the
    /// node's namespace (CNI bridge + host-local from containernetworking-plugins), a
    /// route to the LAN only and the node's address outbound (masquerade). `None`:
    /// hostNetwork pods only.
    pub pod_subnet: Option<String>,
}

/// A containerd started by [`Containerd::start`].
#[derive(Debug)]
pub struct Containerd {
    dir: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    child: Child,
    /// The cgroup (relative to each hierarchy's root) holding the containers.
    cgroup: String,
    /// The containerd namespace `ctr` works in.
    namespace: &'static str,
    /// Powered off: dropping leaves its files (the node's disk) in place.
    powered_off: bool,
}

impl Containerd {
    /// Starts containerd with root, state, socket and log under `dir` (created; it must
    /// not exist), CRI off, and waits until it answers.
    pub fn start(dir: &Path) -> Result<Self, Error> {
        Self::launch(dir, None, None)
    }

    /// Starts containerd with its CRI plugin on for a kubelet, inside `netns` (its
    /// network namespace, the host's mounts and cgroups), root, state and socket under
    /// `dir` (created; it must not exist), its log at `log`.
    pub fn start_cri(dir: &Path, netns: &Netns, cri: &Cri, log: &Path) -> Result<Self, Error> {
        Self::launch(dir, Some((netns, cri)), Some(log))
    }

    fn launch(dir: &Path, cri: Option<(&Netns, &Cri)>, log: Option<&Path>) -> Result<Self, Error> {
        for (bin, package) in [("containerd", "containerd"), ("ctr", "containerd"), ("runc", "runc")] {
            if which(bin).is_none() {
                return Err(Error::Missing(format!(
                    "{bin} not found: apt-get install {package} (testbed/prereqs.sh installs it)"
                )));
            }
        }
        std::fs::create_dir(dir)?;
        let dir = std::fs::canonicalize(dir)?;
        let mut config = format!(
            "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n\
             [grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{sock}.ttrpc\"\n\
             [debug]\n  address = \"{dir}/debug.sock\"\n",
            root = dir.join("root").display(),
            state = dir.join("state").display(),
            sock = dir.join("containerd.sock").display(),
            dir = dir.display(),
        );
        match cri {
            // Only ctr here: no CRI (and no CNI to configure).
            None => config.push_str("disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"),
            Some((_, cri)) => config.push_str(&cri_config(&dir, cri)?),
        }
        std::fs::write(dir.join("config.toml"), config)?;
        Self::spawn(dir, cri.map(|(netns, cri)| (netns, cri.cgroup_root.as_str())), log)
    }

    /// Starts a CRI containerd again on the disk a [`Containerd::power_off`] left: its
    /// root (images, content, metadata) and config, the state gone as after a reboot.
    pub fn boot(dir: &Path, netns: &Netns, cgroup_root: &str, log: &Path) -> Result<Self, Error> {
        if !dir.join("config.toml").exists() {
            return Err(Error::Missing(format!("{}: no containerd config to boot from", dir.display())));
        }
        Self::spawn(std::fs::canonicalize(dir)?, Some((netns, cgroup_root)), Some(log))
    }

    fn spawn(dir: PathBuf, cri: Option<(&Netns, &str)>, log: Option<&Path>) -> Result<Self, Error> {
        let socket = dir.join("containerd.sock");
        let log = log.map_or_else(|| dir.join("containerd.log"), Path::to_owned);
        let out = std::fs::File::create(&log)?;
        let mut cmd = match cri {
            Some((netns, _)) => netns.command_on_host_mounts("containerd"),
            None => Command::new("containerd"),
        };
        cmd.arg("--config")
            .arg(dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        ferrolb_lab::process::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| Error::Command { command: "containerd".into(), detail: e.to_string() })?;
        let (cgroup, namespace) = match cri {
            Some((_, cgroup_root)) => (cgroup_root.to_owned(), CRI_NAMESPACE),
            None => (format!("ferrolb-testbed-{}-{}", std::process::id(), child.id()), NAMESPACE),
        };
        let me = Containerd { dir, socket, log, child, cgroup, namespace, powered_off: false };
        ferrolb_lab::wait::until("containerd to answer on its socket", Duration::from_secs(30), || {
            Ok(me.ctr(&["version"]).is_ok_and(|o| o.status.success()).then_some(()))
        })
        .map_err(|e| Error::Command { command: "containerd".into(), detail: format!("{e}\n{}", me.log()) })?;
        Ok(me)
    }

    /// containerd's process id.
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(i32::MAX)
    }

    /// The directory holding its root, state, socket and log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The socket `ctr --address` takes.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The cgroup (below each hierarchy's root) the containers run in.
    pub fn cgroup(&self) -> &str {
        &self.cgroup
    }

    /// The last lines of containerd's log.
    pub fn log(&self) -> String {
        tail(&read_lossy(&self.log), 30)
    }

    /// `ctr --address SOCKET --namespace NS ARGS...`, NS `k8s.io` with CRI on, else `ferrolb`.
    pub fn ctr(&self, args: &[&str]) -> Result<Output, Error> {
        Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", self.namespace])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::Command { command: format!("ctr {}", args.join(" ")), detail: e.to_string() })
    }

    /// [`Containerd::ctr`], failing with its output unless it succeeds.
    pub fn ctr_ok(&self, args: &[&str]) -> Result<Output, Error> {
        let out = self.ctr(args)?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(Error::Command {
                command: format!("ctr {}", args.join(" ")),
                detail: format!(
                    "{}: {}{}\ncontainerd log:\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr),
                    self.log()
                ),
            })
        }
    }

    /// Imports an OCI image archive.
    pub fn import(&self, archive: &Path) -> Result<(), Error> {
        let archive = archive.to_string_lossy();
        self.ctr_ok(&["images", "import", &archive]).map(|_| ())
    }

    /// Runs a container `id` of `image` with `args` as its command (after the image's
    /// entrypoint), removed afterwards; its output, whatever its exit status.
    pub fn run(&self, image: &str, id: &str, args: &[&str]) -> Result<Output, Error> {
        let cgroup = format!("/{}/{id}", self.cgroup);
        let mut argv = vec!["run", "--rm", "--cgroup", &cgroup, image, id];
        argv.extend_from_slice(args);
        self.ctr(&argv)
    }

    /// Kills the tasks and shims this containerd started, then containerd.
    fn stop(&mut self) {
        if let Ok(out) = self.ctr(&["tasks", "ls", "--quiet"]) {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = self.ctr(&["tasks", "kill", "--signal", "SIGKILL", id]);
                let _ = self.ctr(&["tasks", "delete", "--force", id]);
                let _ = self.ctr(&["containers", "delete", id]);
            }
        }
        // Shims outlive containerd; ours name our socket on their command line.
        let socket = self.socket.to_string_lossy().into_owned();
        for pid in processes_naming(&socket) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = kill(Pid::from_raw(self.pid()), Signal::SIGTERM);
        let exited = ferrolb_lab::wait::until("containerd to exit", Duration::from_secs(10), || {
            Ok(self.child.try_wait()?.map(|_| ()))
        });
        if exited.is_err() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Containerd {
    /// Power loss: SIGKILL to every process of its containers, its shims and itself; then
    /// what a reboot clears goes (mounts, cgroups, shim sockets, the state and runc
    /// directories, which live on tmpfs on a real node). The root stays for
    /// [`Containerd::boot`].
    pub fn power_off(mut self) {
        kill_cgroup(&self.cgroup);
        let socket = self.socket.to_string_lossy().into_owned();
        for pid in processes_naming(&socket) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        kill_cgroup(&self.cgroup);
        remove_shim_sockets(&self.dir);
        unmount_under(&self.dir);
        remove_cgroups(&self.cgroup);
        for d in ["state", "runc"] {
            let _ = std::fs::remove_dir_all(self.dir.join(d));
        }
        let _ = std::fs::remove_file(&self.socket);
        self.powered_off = true;
    }
}

/// SIGKILL to every process in cgroup `name` and below, in every hierarchy.
pub fn kill_cgroup(name: &str) {
    fn walk(path: &Path) {
        for pid in read_lossy(&path.join("cgroup.procs")).lines().filter_map(|l| l.trim().parse().ok()) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        for child in std::fs::read_dir(path).into_iter().flatten().flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&child.path());
            }
        }
    }
    for h in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
        walk(&h.path().join(name));
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.powered_off {
            return;
        }
        self.stop();
        remove_shim_sockets(&self.dir);
        unmount_under(&self.dir);
        remove_cgroups(&self.cgroup);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The CRI part of a kubelet's containerd config (see testbed/kube/KUBELET.md).
fn cri_config(dir: &Path, cri: &Cri) -> Result<String, Error> {
    // Without any CNI network CRI reports NetworkReady=false and the Node stays NotReady;
    // a loopback-only list is enough: hostNetwork pods never call CNI (no binaries needed).
    let cni = dir.join("cni");
    std::fs::create_dir_all(cni.join("net.d"))?;
    std::fs::create_dir_all(cni.join("bin"))?;
    let (conflist, bin) = match &cri.pod_subnet {
        None => (
            r#"{"cniVersion":"0.4.0","name":"ferrolb-hostnet-only","plugins":[{"type":"loopback"}]}"#
                .to_owned(),
            cni.join("bin"),
        ),
        Some(subnet) => {
            let plugins = Path::new(CNI_PLUGINS);
            if !plugins.join("bridge").exists() {
                return Err(Error::Missing(format!(
                    "{CNI_PLUGINS}/bridge not found: apt-get install containernetworking-plugins \
                     (testbed/prereqs.sh installs it)"
                )));
            }
            let list = serde_json::json!({
                "cniVersion": "0.4.0",
                "name": "ferrolb-lab",
                "plugins": [{
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": true,
                    "ipMasq": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{ "subnet": subnet }]],
                        // No default route anywhere: pods reach the LAN (apiserver VIP,
                        // nodes) and nothing else.
                        "routes": [{ "dst": ferrolb_lab::addressing::LAN_V4 }, { "dst": ferrolb_lab::addressing::SERVICES_V4 }],
                        "dataDir": cni.join("ipam"),
                    },
                }],
            });
            (list.to_string(), plugins.to_owned())
        }
    };
    std::fs::write(cni.join("net.d/10-ferrolb.conflist"), conflist)?;
    Ok(format!(
        "[plugins.\"io.containerd.grpc.v1.cri\"]\n\
         sandbox_image = \"{sandbox}\"\n\
         # Pod network namespaces below the state dir, not in the host's /run/netns.\n\
         netns_mounts_under_state_dir = true\n\
         enable_cdi = false\n\
         # This machine's root lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (the\n\
         # sandbox asks -998) and fails with \"can't get final child's PID from pipe: EOF\".\n\
         restrict_oom_score_adj = true\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n\
         snapshotter = \"overlayfs\"\n\
         default_runtime_name = \"runc\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n\
         runtime_type = \"io.containerd.runc.v2\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n\
         SystemdCgroup = false\n\
         # runc's state here, else /run/containerd/runc, shared by every containerd.\n\
         Root = \"{runc}\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".cni]\n\
         bin_dir = \"{bin}\"\n\
         conf_dir = \"{conf}\"\n",
        sandbox = cri.sandbox_image,
        runc = dir.join("runc").display(),
        bin = bin.display(),
        conf = cni.join("net.d").display(),
    ))
}

/// Unmounts every mount point under `dir` (snapshots, rootfs, shm), deepest first.
pub fn unmount_under(dir: &Path) {
    let prefix = dir.to_string_lossy().into_owned();
    let mut mounts: Vec<String> = read_lossy(Path::new("/proc/self/mountinfo"))
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
        .filter(|m| m.starts_with(&prefix))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let _ = Command::new("umount").args(["--lazy", &m]).status();
    }
}

/// Removes cgroup `name` (relative to each hierarchy's root) and the cgroups below it, in
/// every hierarchy, waiting up to 5 s for the killed processes in them to be gone.
pub fn remove_cgroups(name: &str) {
    let left = || {
        std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
            .map(|h| h.path().join(name))
            .filter(|p| p.exists())
            .collect::<Vec<_>>()
    };
    // A cgroup with a dying (not yet reaped) task cannot be removed yet.
    let _ =
        ferrolb_lab::wait::until_holds(&format!("cgroups {name} removed"), Duration::from_secs(5), || {
            left().iter().for_each(|p| remove_cgroup(p));
            left().is_empty()
        });
}

/// Removes the sockets in `/run/containerd/s/` of the shims started by the containerd
/// whose directory is `dir` (a shim removes its own unless it was killed): each task's
/// bundle, `state/io.containerd.runtime.v2.task/<namespace>/<id>/`, names it in `address`.
pub fn remove_shim_sockets(dir: &Path) {
    let tasks = dir.join("state").join("io.containerd.runtime.v2.task");
    for ns in std::fs::read_dir(tasks).into_iter().flatten().flatten() {
        for bundle in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
            let address = read_lossy(&bundle.path().join("address"));
            if let Some(socket) = address.trim().strip_prefix("unix://")
                && socket.starts_with("/run/containerd/s/")
            {
                let _ = std::fs::remove_file(socket);
            }
        }
    }
}

/// Removes a cgroup directory and the (empty) cgroups below it.
fn remove_cgroup(path: &Path) {
    if let Ok(children) = std::fs::read_dir(path) {
        for child in children.flatten().filter(|c| c.file_type().is_ok_and(|t| t.is_dir())) {
            remove_cgroup(&child.path());
        }
        let _ = std::fs::remove_dir(path);
    }
}

/// Processes with `word` among their arguments.
pub fn processes_naming(word: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == word.as_bytes()))
        })
        .collect()
}

/// `bin` on `$PATH` (and the sbin directories root has).
fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':').chain(["/usr/sbin", "/sbin"]).map(|d| Path::new(d).join(bin)).find(|p| p.is_file())
}
