//! keepalived (VRRP) on lab nodes: the L2 failover baseline ferrolb is measured against.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::netns::Netns;
use crate::process::{Proc, Spawn, tail};
use crate::{Error, Lab, wait};

/// One VRRP instance holding one VIP.
#[derive(Debug, Clone)]
pub struct VrrpSpec {
    /// The virtual address.
    pub vip: IpAddr,
    /// Interface it lives on.
    pub interface: String,
    /// VRRP router id (1..=255), shared by all nodes of the instance.
    pub vrid: u8,
    /// This node's priority (higher wins).
    pub priority: u8,
    /// VRRP version, 2 or 3 (keepalived runs IPv6 instances as version 3 whatever is said).
    pub version: u8,
    /// Advertisement interval (keepalived's default: 1 s; VRRPv3 takes 0.01 s to 255 s
    /// in hundredths, VRRPv2 whole seconds only).
    pub advert_int: Duration,
    /// Health-check command: a failing check lowers this node out of the election.
    pub check: Option<HealthCheck>,
}

/// A `vrrp_script` tracked by the instance.
#[derive(Debug, Clone)]
pub struct HealthCheck {
    /// Command run by keepalived (as root).
    pub script: String,
    /// Seconds between runs.
    pub interval: u32,
    /// Consecutive failures before the node is considered faulty.
    pub fall: u32,
    /// Consecutive successes before it is healthy again.
    pub rise: u32,
}

impl VrrpSpec {
    /// keepalived's defaults (VRRPv2 for IPv4, v3 for IPv6): advert_int 1 s, which makes
    /// a backup take over after 3 × advert_int + skew ≈ 3.6 s.
    pub fn defaults(vip: IpAddr, priority: u8) -> Self {
        VrrpSpec {
            vip,
            interface: "eth0".into(),
            vrid: 51,
            priority,
            version: if vip.is_ipv4() { 2 } else { 3 },
            advert_int: Duration::from_secs(1),
            check: None,
        }
    }

    /// VRRPv3 (RFC 5798) with sub-second adverts: a backup takes over after
    /// 3 × `advert_int` + skew.
    pub fn v3(vip: IpAddr, priority: u8, advert_int: Duration) -> Self {
        VrrpSpec { version: 3, advert_int, ..Self::defaults(vip, priority) }
    }

    /// The instance's name in the configuration: family and router id (`v4_51`).
    pub fn instance(&self) -> String {
        format!("v{}_{}", if self.vip.is_ipv4() { 4 } else { 6 }, self.vrid)
    }

    /// The version keepalived runs the instance with.
    fn effective_version(&self) -> u8 {
        if self.vip.is_ipv6() { 3 } else { self.version }
    }
}

/// A keepalived daemon (VRRP only) in a node namespace.
#[derive(Debug)]
pub struct Keepalived {
    ns: Netns,
    spawn: Spawn,
    specs: Vec<VrrpSpec>,
    proc: Proc,
    /// Children SIGKILLed by [`Keepalived::kill_all`], until reaped.
    killed: Vec<i32>,
}

impl Keepalived {
    /// Starts keepalived in `ns` with one instance; `name` names its files in the lab
    /// directory.
    pub fn start(lab: &Lab, ns: &Netns, name: &str, spec: &VrrpSpec) -> Result<Self, Error> {
        Self::start_instances(lab, ns, name, std::slice::from_ref(spec))
    }

    /// Starts keepalived in `ns` with one instance per spec, and fails unless its
    /// configuration dump shows every instance with the version and advert interval
    /// written (keepalived ignores a value it rejects and runs with its default).
    pub fn start_instances(lab: &Lab, ns: &Netns, name: &str, specs: &[VrrpSpec]) -> Result<Self, Error> {
        let dir = lab.subdir(name)?;
        let conf = dir.join("keepalived.conf");
        std::fs::write(&conf, config_instances(name, specs))?;
        let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
        let spawn = Spawn::new(
            name,
            &[
                "keepalived",
                "--dont-fork",
                "--log-console",
                "--log-detail",
                "--dump-conf",
                "--vrrp",
                "-f",
                &conf.to_string_lossy(),
                "-p",
                &p("keepalived.pid"),
                "-r",
                &p("vrrp.pid"),
                "-c",
                &p("checkers.pid"),
            ],
        );
        let proc = lab.spawn(ns, spawn.clone())?;
        let k = Keepalived { ns: ns.clone(), spawn, specs: specs.to_vec(), proc, killed: Vec::new() };
        k.check_running_as_written(0)?;
        Ok(k)
    }

    /// The supervised process.
    pub fn process(&mut self) -> &mut Proc {
        &mut self.proc
    }

    /// The daemon's log (every start so far).
    pub fn logs(&self) -> String {
        self.proc.logs()
    }

    /// SIGKILLs keepalived and every process below it, the parent stopped first so it
    /// neither respawns its VRRP child nor lets it see the parent die: no priority-0
    /// advert goes out, and the VIPs stay on the interface.
    pub fn kill_all(&mut self) {
        let pid = self.proc.pid();
        self.proc.signal(Signal::SIGSTOP);
        self.killed = descendants(pid);
        for child in &self.killed {
            let _ = kill(Pid::from_raw(*child), Signal::SIGKILL);
        }
        self.proc.kill();
    }

    /// Starts the daemon again with the same configuration (after [`Keepalived::kill_all`]);
    /// keepalived removes VIPs left on the interface as it starts.
    pub fn restart(&mut self, lab: &Lab) -> Result<(), Error> {
        self.proc.kill();
        // keepalived refuses to start while its pid files name a live process, and a
        // zombie counts: wait for init to reap the orphaned children.
        let killed = std::mem::take(&mut self.killed);
        wait::until_holds("keepalived's killed children to be reaped", Duration::from_secs(10), || {
            killed.iter().all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        })?;
        // The log file is appended to: this start's dump follows what is there now.
        let from = self.logs().len();
        self.proc = lab.spawn(&self.ns, self.spawn.clone())?;
        self.check_running_as_written(from)
    }

    /// Waits for the configuration dump in the log past byte `from` and compares it with
    /// the specs.
    fn check_running_as_written(&self, from: usize) -> Result<(), Error> {
        let name = self.spawn.name.as_str();
        let seen = wait::until(&format!("{name}'s configuration dump"), Duration::from_secs(10), || {
            let seen = running_instances(self.logs().get(from..).unwrap_or_default());
            let complete =
                |s: &VrrpSpec| seen.iter().any(|r| r.name == s.instance() && r.advert_int.is_some());
            Ok(self.specs.iter().all(complete).then_some(seen))
        })
        .map_err(|e| Error::Command {
            command: format!("keepalived {name}"),
            detail: format!("{e}; its log ends:\n{}", tail(&self.logs(), 8)),
        })?;
        for s in &self.specs {
            let want = (s.effective_version(), s.advert_int);
            match seen.iter().find(|r| r.name == s.instance()) {
                Some(r) if (r.version, r.advert_int) == (Some(want.0), Some(want.1)) => {}
                r => {
                    return Err(Error::Command {
                        command: format!("keepalived {name}"),
                        detail: format!(
                            "instance {} runs as {r:?}, not VRRPv{} with advert_int {:?} as written \
                             (keepalived takes 0.01 s to 255 s, in whole seconds for VRRPv2); see {}",
                            s.instance(),
                            want.0,
                            want.1,
                            self.proc.log_path().display()
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}

/// An instance as keepalived's `--dump-conf` shows it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningInstance {
    /// The instance name.
    pub name: String,
    /// `VRRP Version = N`.
    pub version: Option<u8>,
    /// `Advert interval = N sec` / `N milli-sec`.
    pub advert_int: Option<Duration>,
}

/// The instances of every configuration dump in a keepalived log, in order.
pub fn running_instances(log: &str) -> Vec<RunningInstance> {
    let mut out: Vec<RunningInstance> = Vec::new();
    // Each line reads `<date> <year>: <text>`; the date holds no ": ".
    for text in log.lines().filter_map(|l| l.split_once(": ")).map(|(_, t)| t.trim()) {
        if let Some(name) = text.strip_prefix("VRRP Instance = ") {
            out.push(RunningInstance { name: name.trim().into(), version: None, advert_int: None });
        } else if let Some(last) = out.last_mut() {
            if let Some(v) = text.strip_prefix("VRRP Version = ") {
                last.version = last.version.or(v.trim().parse().ok());
            } else if let Some(a) = text.strip_prefix("Advert interval = ") {
                last.advert_int = last.advert_int.or_else(|| advert_interval(a));
            }
        }
    }
    out
}

/// `10 milli-sec` or `1 sec` as a duration.
fn advert_interval(text: &str) -> Option<Duration> {
    let (n, unit) = text.trim().split_once(' ')?;
    let n: u64 = n.parse().ok()?;
    match unit {
        "milli-sec" => Some(Duration::from_millis(n)),
        "sec" => Some(Duration::from_secs(n)),
        _ => None,
    }
}

/// Every process below `pid`, from `/proc`'s children lists.
fn descendants(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let children: Vec<i32> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| s.split_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<i32>>())
        .collect();
    children.iter().flat_map(|c| std::iter::once(*c).chain(descendants(*c))).collect()
}

/// Seconds as keepalived reads them (`1`, `0.1`, `0.01`).
fn seconds(d: Duration) -> String {
    let ms = d.as_millis();
    let frac = format!("{:03}", ms % 1000);
    match frac.trim_end_matches('0') {
        "" => format!("{}", ms / 1000),
        f => format!("{}.{f}", ms / 1000),
    }
}

/// The generated keepalived.conf for one instance.
pub fn config(name: &str, spec: &VrrpSpec) -> String {
    config_instances(name, std::slice::from_ref(spec))
}

/// The generated keepalived.conf: one `vrrp_instance` per spec.
pub fn config_instances(name: &str, specs: &[VrrpSpec]) -> String {
    let mut c = String::new();
    let _ =
        writeln!(c, "global_defs {{\n  router_id {name}\n  script_user root\n  enable_script_security\n}}");
    for (i, h) in specs.iter().enumerate().filter_map(|(i, s)| Some((i, s.check.as_ref()?))) {
        let _ = writeln!(
            c,
            "vrrp_script health{i} {{\n  script \"{}\"\n  interval {}\n  fall {}\n  rise {}\n}}",
            h.script, h.interval, h.fall, h.rise
        );
    }
    for (i, spec) in specs.iter().enumerate() {
        let len = if spec.vip.is_ipv4() { 32 } else { 128 };
        let _ = writeln!(c, "vrrp_instance {} {{", spec.instance());
        let _ =
            writeln!(c, "  state BACKUP\n  interface {}\n  virtual_router_id {}", spec.interface, spec.vrid);
        let _ = writeln!(c, "  version {}", spec.version);
        let _ = writeln!(c, "  priority {}\n  advert_int {}", spec.priority, seconds(spec.advert_int));
        let _ = writeln!(c, "  virtual_ipaddress {{\n    {}/{len} dev {}\n  }}", spec.vip, spec.interface);
        if spec.check.is_some() {
            let _ = writeln!(c, "  track_script {{\n    health{i}\n  }}");
        }
        c.push_str("}\n");
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_the_vip_priority_and_check() {
        let mut s = VrrpSpec::defaults("192.0.2.200".parse().unwrap(), 150);
        s.check = Some(HealthCheck { script: "/bin/true".into(), interval: 1, fall: 3, rise: 1 });
        let c = config("node1", &s);
        assert!(c.contains("192.0.2.200/32 dev eth0"), "{c}");
        assert!(c.contains("priority 150"));
        assert!(c.contains("advert_int 1\n"));
        assert!(c.contains("version 2"));
        assert!(c.contains("track_script {\n    health0"));
    }

    #[test]
    fn sub_second_adverts_are_written_in_seconds() {
        let v6 = VrrpSpec::v3("2001:db8::200".parse().unwrap(), 100, Duration::from_millis(10));
        let v4 = VrrpSpec::v3("192.0.2.200".parse().unwrap(), 100, Duration::from_millis(100));
        let c = config_instances("node2", &[v4, v6]);
        assert!(c.contains("vrrp_instance v4_51 {") && c.contains("vrrp_instance v6_51 {"), "{c}");
        assert!(c.contains("advert_int 0.1\n") && c.contains("advert_int 0.01\n"), "{c}");
        assert!(c.contains("2001:db8::200/128 dev eth0"));
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5");
    }

    #[test]
    fn the_dump_shows_what_runs() {
        let log = "Thu Nov 26 04:52:26 2026: ------< VRRP Topology >------\n\
                   Thu Nov 26 04:52:26 2026:  VRRP Instance = v4_51\n\
                   Thu Nov 26 04:52:26 2026:    VRRP Version = 3\n\
                   Thu Nov 26 04:52:26 2026:    Advert interval = 10 milli-sec\n\
                   Thu Nov 26 04:52:26 2026:  VRRP Instance = v6_51\n\
                   Thu Nov 26 04:52:26 2026:    VRRP Version = 2\n\
                   Thu Nov 26 04:52:26 2026:    Advert interval = 1 sec\n";
        let r = running_instances(log);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].name.as_str(), r[0].version), ("v4_51", Some(3)));
        assert_eq!(r[0].advert_int, Some(Duration::from_millis(10)));
        assert_eq!(r[1].advert_int, Some(Duration::from_secs(1)));
    }
}
