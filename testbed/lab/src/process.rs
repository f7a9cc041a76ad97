//! Processes supervised inside namespaces: start, SIGTERM, SIGKILL, logs kept.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::Error;
use crate::netns::{Netns, describe};

/// A process started inside a namespace; killed when dropped.
#[derive(Debug)]
pub struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
    exit: Option<ExitStatus>,
}

/// How to start a [`Proc`].
#[derive(Debug, Clone)]
pub struct Spawn {
    /// Short name used for the log file and in messages.
    pub name: String,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Kill the process when the test process dies (off for `ferrolb-testbed up`).
    pub die_with_parent: bool,
    /// Enter only the network namespace, keeping the host's mounts and `/sys` (a
    /// kubelet, which needs the cgroup hierarchies); see [`Netns::command_on_host_mounts`].
    pub host_mounts: bool,
}

impl Spawn {
    /// A process that dies with the test process.
    pub fn new(name: impl Into<String>, argv: &[&str]) -> Self {
        Spawn {
            name: name.into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            die_with_parent: true,
            host_mounts: false,
        }
    }

    /// Enters only the network namespace (see [`Spawn::host_mounts`]).
    pub fn on_host_mounts(mut self) -> Self {
        self.host_mounts = true;
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
}

impl Proc {
    /// Starts `spec` inside `ns`, stdout and stderr appended to `<log_dir>/<name>.log`.
    pub fn start(ns: &Netns, log_dir: &Path, spec: &Spawn) -> Result<Self, Error> {
        let (program, args) = spec
            .argv
            .split_first()
            .ok_or_else(|| Error::Command { command: spec.name.clone(), detail: "empty argv".into() })?;
        let log = log_dir.join(format!("{}.log", spec.name));
        let out = OpenOptions::new().create(true).append(true).open(&log)?;
        let err = out.try_clone()?;
        let mut cmd = if spec.host_mounts { ns.command_on_host_mounts(program) } else { ns.command(program) };
        cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        if spec.die_with_parent {
            die_with_parent(&mut cmd);
        }
        let child =
            cmd.spawn().map_err(|e| Error::Command { command: describe(&cmd), detail: e.to_string() })?;
        Ok(Proc { name: spec.name.clone(), child, log, exit: None })
    }

    /// The name given at start.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap_or(i32::MAX)
    }

    /// Path of the log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole log so far.
    pub fn logs(&self) -> String {
        read_lossy(&self.log)
    }

    /// Whether the process has not exited yet.
    pub fn is_running(&mut self) -> bool {
        self.try_exit().is_none()
    }

    /// The exit status, if it has exited.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Sends a signal (no-op once exited).
    pub fn signal(&mut self, sig: Signal) {
        if self.is_running() {
            let _ = kill(Pid::from_raw(self.pid()), sig);
        }
    }

    /// SIGTERM, then waits up to `grace` for the exit; returns the status if it exited.
    pub fn terminate(&mut self, grace: Duration) -> Option<ExitStatus> {
        self.signal(Signal::SIGTERM);
        self.wait_exit(grace)
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        self.signal(Signal::SIGKILL);
        self.wait_exit(Duration::from_secs(5))
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.try_exit() {
                return Some(s);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.is_running() {
            self.kill();
        }
    }
}

/// Reads a file as text, replacing invalid UTF-8; empty when unreadable.
pub fn read_lossy(path: &Path) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// The last `n` lines of a text.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A log without its ANSI escape sequences (`ESC [ … letter`): tracing writes its
/// colours to files too.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Makes `cmd`'s child die with the process that spawns it (prctl PR_SET_PDEATHSIG), so
/// nothing a killed test started outlives it.
#[allow(unsafe_code)]
pub fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only calls prctl(2), which is
    // async-signal-safe; it touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from));
    }
}

/// A [`Proc`] started again whenever it exits, as a kubelet restarts the static pods
/// kubeadm runs the control plane in (kube-controller-manager exits when it starts before
/// the apiserver authorizes it, as on a cold start). Killed when dropped.
#[derive(Debug)]
pub struct Supervised {
    proc: std::sync::Arc<std::sync::Mutex<Option<Proc>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    log: PathBuf,
}

impl Supervised {
    /// Starts `spec` in `ns` and keeps it running (checked every 500 ms).
    pub fn start(ns: &Netns, log_dir: &Path, spec: &Spawn) -> Result<Self, Error> {
        use std::sync::atomic::Ordering;
        let first = Proc::start(ns, log_dir, spec)?;
        let log = first.log_path().to_owned();
        let proc = std::sync::Arc::new(std::sync::Mutex::new(Some(first)));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (p, s, ns, dir, spec) =
            (proc.clone(), stop.clone(), ns.clone(), log_dir.to_owned(), spec.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                let Ok(mut slot) = p.lock() else { return };
                if s.load(Ordering::Relaxed) {
                    return;
                }
                if slot.as_mut().is_none_or(|p| !p.is_running()) {
                    *slot = Proc::start(&ns, &dir, &spec).ok();
                }
            }
        });
        Ok(Supervised { proc, stop, thread: Some(thread), log })
    }

    /// Path of the log file (every run appends to it).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Stops supervising and kills the process (SIGKILL).
    pub fn kill(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Ok(mut slot) = self.proc.lock()
            && let Some(mut p) = slot.take()
        {
            p.kill();
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.kill();
    }
}
