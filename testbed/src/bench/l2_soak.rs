//! `bench l2-soak`: false failovers when the CPU is starved. `stress-ng` keeps every
//! core of the machine busy (all lab nodes are namespaces of this one host) while the
//! client probes the VIPs every 10 ms. Nothing fails, so every change of the MAC the
//! client resolves a VIP to is a false failover. ferrolb runs on three nodes,
//! keepalived VRRPv3 with 10 ms adverts on two, one after the other.

use std::net::IpAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::failover::{self, Bed, Family, MacChange, System};
use crate::client::ProbeReport;
use crate::{Error, netns, plan, wait};

/// `stress-ng` keeping every core busy. Dropping it stops it, and it stops its workers
/// (which also die with it); if the bench itself is killed, stress-ng stops at its own
/// time limit. It stays in the bench's process group, so Ctrl-C reaches it too.
#[derive(Debug)]
struct Stress {
    child: Child,
}

impl Stress {
    /// Starts one CPU worker per core, cycling through every stress method, for at most
    /// `limit`; returns once the workers run.
    fn start(limit: Duration) -> Result<Self, Error> {
        let mut cmd = Command::new("stress-ng");
        let timeout = format!("{}s", limit.as_secs().max(1));
        cmd.args(["--cpu", "0", "--cpu-method", "all", "--timeout", &timeout, "--quiet"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Missing(
                "stress-ng not found: install the Debian package stress-ng (testbed/prereqs.sh does)".into(),
            ),
            _ => Error::Command { command: netns::describe(&cmd), detail: e.to_string() },
        })?;
        let stress = Stress { child };
        let pid = stress.child.id();
        wait::until_holds("stress-ng's workers to start", Duration::from_secs(10), || {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .is_ok_and(|c| !c.trim().is_empty())
        })?;
        Ok(stress)
    }
}

impl Drop for Stress {
    fn drop(&mut self) {
        let Ok(pid) = i32::try_from(self.child.id()).map(Pid::from_raw) else { return };
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = kill(pid, Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// What one system did during the soak.
#[derive(Debug, Clone)]
pub struct Soaked {
    /// The system soaked.
    pub system: System,
    /// Nodes it ran on.
    pub nodes: usize,
    /// When the soak started.
    pub start: SystemTime,
    /// How long it lasted.
    pub seconds: f64,
    /// What the client saw of each VIP.
    pub vips: Vec<SoakedVip>,
}

impl Soaked {
    /// The row label: the system and its node count.
    pub fn label(&self) -> String {
        format!("{} ({} nodes)", self.system.label(), self.nodes)
    }
}

/// What the client saw of one VIP during a soak.
#[derive(Debug, Clone)]
pub struct SoakedVip {
    /// The VIP.
    pub vip: IpAddr,
    /// Its probes.
    pub probes: ProbeReport,
    /// Every change of the MAC it resolved to: each a false failover.
    pub changes: Vec<MacChange>,
}

/// Soaks the system of `bed`: probes every VIP for `duration` under stress-ng.
fn soak(bed: &Bed, duration: Duration) -> Result<Soaked, Error> {
    bed.settle()?;
    let probes = bed.probe()?;
    let start = SystemTime::now();
    let began = Instant::now();
    let stress = Stress::start(duration + Duration::from_secs(30))?;
    std::thread::sleep(duration);
    drop(stress);
    let seconds = began.elapsed().as_secs_f64();
    let end = SystemTime::now();
    let changes = bed.watch().changes();
    let vips = bed
        .vips()
        .iter()
        .zip(probes)
        .map(|((vip, _), p)| {
            let moved =
                changes.iter().filter(|c| c.addr == *vip && c.at >= start && c.at <= end).cloned().collect();
            SoakedVip { vip: *vip, probes: p.stop(Duration::from_millis(200)), changes: moved }
        })
        .collect();
    Ok(Soaked { system: bed.system(), nodes: bed.lab().nodes().len(), start, seconds, vips })
}

/// Runs the soak for ferrolb and keepalived and prints a table.
pub fn run(seconds: u64) -> Result<(), Error> {
    let results = measure(seconds)?;
    print_table(&results);
    Ok(())
}

/// Soaks ferrolb, then keepalived, printing each false failover as it is found.
pub fn measure(seconds: u64) -> Result<Vec<Soaked>, Error> {
    let duration = Duration::from_secs(seconds);
    let vips = failover::vips(&Family::ALL);
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "bench l2-soak: {seconds} s of stress-ng on every core ({cores}) while the client probes {} every 10 ms; \
         nothing fails, so every owner change is a false failover",
        vips.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(" and ")
    );
    println!("  ferrolb speaker binary: {}", crate::binary::newest("ferrolb-speaker")?.display());
    let systems = [(System::Ferrolb, 3), (System::KeepalivedV3(Duration::from_millis(10)), 2)];
    let mut results = Vec::new();
    for (system, nodes) in systems {
        println!("{} ({nodes} nodes): soaking", system.label());
        let bed = Bed::up(system, nodes, &vips)?;
        let s = soak(&bed, duration)?;
        for v in &s.vips {
            for c in &v.changes {
                let node = failover::node_of_mac(bed.lab(), Some(&c.mac)).map_or("?".into(), plan::node_name);
                let after = c.at.duration_since(s.start).unwrap_or_default().as_secs_f64();
                println!(
                    "  false failover: {} → {node} ({}) at {} UTC, +{after:.3} s",
                    v.vip,
                    c.mac,
                    failover::clock(c.at)
                );
            }
        }
        results.push(s);
    }
    Ok(results)
}

/// The table `bench l2-soak` prints at the end.
pub fn print_table(results: &[Soaked]) {
    println!(
        "\n{:<34} {:<14} {:>7} {:>11} {:>6} {:>12} {:>14}",
        "system", "VIP", "seconds", "probes sent", "lost", "longest gap", "owner changes"
    );
    for s in results {
        for v in &s.vips {
            println!(
                "{:<34} {:<14} {:>7.1} {:>11} {:>6} {:>9.0} ms {:>14}",
                s.label(),
                v.vip.to_string(),
                s.seconds,
                v.probes.sent,
                v.probes.lost(),
                super::ms(v.probes.max_outage()),
                v.changes.len()
            );
        }
    }
}
