//! A private containerd: its own root, state and socket under one directory, and `ctr`
//! against it. Dropping it (also when a test panics) kills what it started, unmounts
//! what is left under the directory, removes the containers' cgroups and the directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::Error;
use crate::process::{read_lossy, tail};

/// The containerd namespace the images and containers live in.
const NAMESPACE: &str = "ferrolb";

/// A containerd started by [`Containerd::start`].
#[derive(Debug)]
pub struct Containerd {
    dir: PathBuf,
    socket: PathBuf,
    child: Child,
    /// The cgroup (relative to each hierarchy's root) holding the containers.
    cgroup: String,
}

impl Containerd {
    /// Starts containerd with root, state, socket and log under `dir` (created; it must
    /// not exist), and waits until it answers.
    pub fn start(dir: &Path) -> Result<Self, Error> {
        for (bin, package) in [("containerd", "containerd"), ("ctr", "containerd"), ("runc", "runc")] {
            if which(bin).is_none() {
                return Err(Error::Missing(format!(
                    "{bin} not found: apt-get install {package} (testbed/prereqs.sh installs it)"
                )));
            }
        }
        std::fs::create_dir(dir)?;
        let dir = std::fs::canonicalize(dir)?;
        let socket = dir.join("containerd.sock");
        let config = format!(
            "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n\
             # Only ctr here: no CRI (and no CNI to configure).\n\
             disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{sock}.ttrpc\"\n\
             [debug]\n  address = \"{dir}/debug.sock\"\n",
            root = dir.join("root").display(),
            state = dir.join("state").display(),
            sock = socket.display(),
            dir = dir.display(),
        );
        std::fs::write(dir.join("config.toml"), config)?;
        let log = std::fs::File::create(dir.join("containerd.log"))?;
        let mut cmd = Command::new("containerd");
        cmd.arg("--config")
            .arg(dir.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        crate::process::die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| Error::Command { command: "containerd".into(), detail: e.to_string() })?;
        let cgroup = format!("ferrolb-testbed-{}-{}", std::process::id(), child.id());
        let me = Containerd { dir, socket, child, cgroup };
        crate::wait::until("containerd to answer on its socket", Duration::from_secs(30), || {
            Ok(me.ctr(&["version"]).is_ok_and(|o| o.status.success()).then_some(()))
        })
        .map_err(|e| Error::Command { command: "containerd".into(), detail: format!("{e}\n{}", me.log()) })?;
        Ok(me)
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
        tail(&read_lossy(&self.dir.join("containerd.log")), 30)
    }

    /// `ctr --address SOCKET --namespace ferrolb ARGS...`.
    pub fn ctr(&self, args: &[&str]) -> Result<Output, Error> {
        Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", NAMESPACE])
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
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let exited = crate::wait::until("containerd to exit", Duration::from_secs(10), || {
            Ok(self.child.try_wait()?.map(|_| ()))
        });
        if exited.is_err() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.stop();
        // Mounts under the directory (snapshots, rootfs), deepest first.
        let prefix = self.dir.to_string_lossy().into_owned();
        let mut mounts: Vec<String> = read_lossy(Path::new("/proc/self/mountinfo"))
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(str::to_owned))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = Command::new("umount").args(["--lazy", &m]).status();
        }
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
            remove_cgroup(&hierarchy.path().join(&self.cgroup));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
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
