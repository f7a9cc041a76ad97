//! Network namespaces: create, run commands in, enter from a thread, delete.
//!
//! Every namespace the testbed makes is named `flb<pid>x<lab>-<role>`: the pid of the
//! process that made it tells parallel runs apart, and lets `down --stale` find the
//! leftovers of a run that died without tearing down.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::thread;

use nix::sched::{CloneFlags, setns};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::Error;

/// Prefix shared by every namespace the testbed creates.
pub const PREFIX: &str = "flb";

/// A network namespace owned by a lab; deleted by [`Netns::delete`].
#[derive(Debug, Clone)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a new, empty namespace (only `lo`, brought up).
    pub fn create(name: &str) -> Result<Self, Error> {
        run(Command::new("ip").args(["netns", "add", name]))?;
        let ns = Netns { name: name.to_owned() };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A handle on an existing namespace (no check that it exists).
    pub fn existing(name: &str) -> Self {
        Netns { name: name.to_owned() }
    }

    /// The namespace's name as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path of the namespace's bind mount, usable with setns(2).
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/var/run/netns").join(&self.name)
    }

    /// `ip -n <ns> ARGS`, failing with stderr on a non-zero exit.
    pub fn ip(&self, args: &[&str]) -> Result<String, Error> {
        let mut cmd = Command::new("ip");
        cmd.arg("-n").arg(&self.name).args(args);
        run(&mut cmd)
    }

    /// Sets a sysctl inside the namespace (`net.*` keys are per namespace).
    pub fn sysctl(&self, key: &str, value: &str) -> Result<(), Error> {
        self.exec(&["sysctl", "-q", "-w", &format!("{key}={value}")])?;
        Ok(())
    }

    /// A command that runs inside this namespace (via `ip netns exec`).
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }

    /// A command that enters only this network namespace (`nsenter --net`) and execs
    /// `program`, so its pid is the program's. Unlike [`Netns::command`] it keeps the
    /// host's `/sys`: `ip netns exec` remounts it, hiding `/sys/fs/cgroup/*` from a
    /// kubelet or containerd.
    pub fn command_on_host_mounts(&self, program: &str) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.path().display())).arg(program);
        cmd
    }

    /// Runs a command inside the namespace and returns its stdout.
    pub fn exec(&self, argv: &[&str]) -> Result<String, Error> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| Error::Command { command: String::new(), detail: "empty command".into() })?;
        run(self.command(program).args(args))
    }

    /// Runs a command inside the namespace and returns its full output, whatever its status.
    pub fn exec_output(&self, argv: &[&str]) -> Result<Output, Error> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| Error::Command { command: String::new(), detail: "empty command".into() })?;
        self.command(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::Command { command: argv.join(" "), detail: e.to_string() })
    }

    /// Runs `f` on a fresh thread that has entered this namespace, so sockets `f`
    /// opens live inside it (setns(2) moves only the calling thread).
    pub fn run<T, F>(&self, f: F) -> Result<T, Error>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let path = self.path();
        let handle = thread::spawn(move || -> Result<T, Error> {
            enter(&path)?;
            Ok(f())
        });
        handle.join().map_err(|_| Error::Thread("namespace thread panicked".into()))?
    }

    /// A `TcpExt` counter of the namespace's `/proc/net/netstat` (`nstat` names it
    /// `TcpExt<name>`), e.g. `TCPMinTTLDrop`: segments dropped for arriving below a
    /// socket's IP_MINTTL / IPV6_MINHOPCOUNT.
    pub fn tcp_ext_counter(&self, name: &str) -> Result<u64, Error> {
        let text = self.exec(&["cat", "/proc/net/netstat"])?;
        tcp_ext(&text, name)
            .ok_or_else(|| Error::Parse(format!("no TcpExt counter {name} in /proc/net/netstat")))
    }

    /// Process ids of everything running in the namespace.
    pub fn pids(&self) -> Vec<i32> {
        pids_of(&self.name)
    }

    /// Kills every process in the namespace, then deletes it. Idempotent.
    pub fn delete(&self) -> Result<(), Error> {
        delete_by_name(&self.name)
    }
}

/// A namespace of a test's own, outside any lab: deleted (with whatever runs in it)
/// when dropped, on success and on panic alike.
#[derive(Debug)]
pub struct TempNetns(Netns);

impl TempNetns {
    /// Creates the namespace `name` (give it a per-run name: `flb<pid>x<tag>`).
    pub fn create(name: &str) -> Result<Self, Error> {
        Netns::create(name).map(TempNetns)
    }
}

impl std::ops::Deref for TempNetns {
    type Target = Netns;

    fn deref(&self) -> &Netns {
        &self.0
    }
}

impl Drop for TempNetns {
    fn drop(&mut self) {
        let _ = self.0.delete();
    }
}

/// Moves the calling thread into the namespace at `path`.
pub fn enter(path: &std::path::Path) -> Result<(), Error> {
    let file = File::open(path).map_err(|e| Error::Namespace(format!("open {}: {e}", path.display())))?;
    setns(file, CloneFlags::CLONE_NEWNET)
        .map_err(|e| Error::Namespace(format!("setns {}: {e}", path.display())))
}

/// Names of all namespaces on the machine.
pub fn list() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/var/run/netns") else { return Vec::new() };
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort();
    names
}

/// Names of the namespaces this testbed created (any run).
pub fn list_ours() -> Vec<String> {
    list().into_iter().filter(|n| parse_owner(n).is_some()).collect()
}

/// The pid and lab number encoded in a testbed namespace name, if it is one.
pub fn parse_owner(name: &str) -> Option<(i32, u32)> {
    let rest = name.strip_prefix(PREFIX)?;
    let (id, _role) = rest.split_once('-')?;
    let (pid, lab) = id.split_once('x')?;
    Some((pid.parse().ok()?, lab.parse().ok()?))
}

/// Whether a process with this pid runs (a zombie awaiting its reaper does not).
pub fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

fn pids_of(name: &str) -> Vec<i32> {
    let out = Command::new("ip").args(["netns", "pids", name]).stderr(Stdio::null()).output();
    match out {
        Ok(o) => {
            String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()
        }
        Err(_) => Vec::new(),
    }
}

/// Kills every process inside namespace `name` (by pid, never by name), then deletes it.
pub fn delete_by_name(name: &str) -> Result<(), Error> {
    if !PathBuf::from("/var/run/netns").join(name).exists() {
        return Ok(());
    }
    // Processes may fork while we kill: repeat until the namespace is empty.
    for _ in 0..50 {
        let pids = pids_of(name);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        thread::sleep(std::time::Duration::from_millis(20));
    }
    run(Command::new("ip").args(["netns", "del", name]))?;
    Ok(())
}

/// Runs a command to completion; stdout on success, a descriptive error otherwise.
pub fn run(cmd: &mut Command) -> Result<String, Error> {
    let desc = describe(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Command { command: desc.clone(), detail: e.to_string() })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: desc,
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A command line as a string, for error messages and logs.
pub fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A counter of the `TcpExt` rows of a `/proc/net/netstat` text (`nstat` names it
/// `TcpExt<name>`).
pub fn tcp_ext(netstat: &str, name: &str) -> Option<u64> {
    let mut rows = netstat.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (rows.next()?, rows.next()?);
    names.split_whitespace().zip(values.split_whitespace()).find(|(n, _)| *n == name)?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_is_parsed_from_our_names_only() {
        assert_eq!(parse_owner("flb1234x7-r1"), Some((1234, 7)));
        assert_eq!(parse_owner("flb1234x7-node12"), Some((1234, 7)));
        assert_eq!(parse_owner("flbx7-r1"), None);
        assert_eq!(parse_owner("other-ns"), None);
        assert_eq!(parse_owner("flb12-r1"), None);
    }

    #[test]
    fn a_tcp_ext_counter_is_read_by_its_name() {
        let netstat = "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 12 13\n\
                       IpExt: InNoRoutes\nIpExt: 4\n";
        assert_eq!(tcp_ext(netstat, "ListenOverflows"), Some(12));
        assert_eq!(tcp_ext(netstat, "ListenDrops"), Some(13));
        assert_eq!(tcp_ext(netstat, "InNoRoutes"), None);
    }
}
