//! `bench l2-soak`: false failovers when the CPU is starved. `stress-ng` keeps every
//! core of the machine busy (CPU, I/O and memory workers; all lab nodes are namespaces
//! of this one host) while the client probes the VIPs every 10 ms and asks for the IPv4
//! one by ARP every 10 ms. Nothing fails, so every change of the MAC the client resolves
//! a VIP to is a false failover, and every ARP request answered by two MACs is two
//! owners at once. Then, the stress still on, the VIPs' home has its link cut a few
//! times: how long the client took to follow the successor. ferrolb runs on three nodes
//! with its shipped defaults, keepalived VRRPv3 with 10 ms adverts on two, one after the
//! other. `testbed/tests/l2_stress.rs` runs the same for ferrolb and asserts on it.

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Summary;
use super::failover::{self, Bed, Failure, Family, MacChange, System};
use ferrolb_lab::client::{ArpProbes, ArpReport, ProbeReport};
use ferrolb_lab::{Error, addressing, netns, wait};

/// Link cuts of the VIPs' home after the soak, under the same stress.
pub const FAILOVER_TRIALS: usize = 5;

/// How long stress-ng runs past the soak, at most, for the link cuts.
const FAILOVER_STRESS: Duration = Duration::from_secs(60);

/// `stress-ng` keeping every core busy. Dropping it stops it, and it stops its workers
/// (which also die with it); if the bench itself is killed, stress-ng stops at its own
/// time limit. It stays in the bench's process group, so Ctrl-C reaches it too.
#[derive(Debug)]
pub struct Stress {
    child: Child,
}

impl Stress {
    /// Starts a CPU worker (cycling through every stress method), an I/O worker (sync)
    /// and a memory worker (256 MiB, touched over and over) per core, for at most
    /// `limit`; returns once the workers run.
    pub fn start(limit: Duration) -> Result<Self, Error> {
        let mut cmd = Command::new("stress-ng");
        let timeout = format!("{}s", limit.as_secs().max(1));
        cmd.args(["--cpu", "0", "--cpu-method", "all", "--io", "0", "--vm", "0", "--vm-bytes", "256M"])
            .args(["--timeout", &timeout, "--quiet"])
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
    /// After the soak, under the same stress: for each link cut of the home and each VIP,
    /// how long the client took to resolve it elsewhere (None: it did not within a minute).
    pub failovers: Vec<Option<Duration>>,
}

impl Soaked {
    /// The row label: the system and its node count.
    pub fn label(&self) -> String {
        format!("{} ({} nodes)", self.system.label(), self.nodes)
    }

    /// Owner changes seen by the client during the soak, all VIPs together.
    pub fn owner_changes(&self) -> usize {
        self.vips.iter().map(|v| v.changes.len()).sum()
    }

    /// ARP requests answered by two MACs at once during the soak, all VIPs together.
    pub fn answered_twice(&self) -> u64 {
        self.vips.iter().filter_map(|v| v.arp.as_ref()).map(|a| a.answered_twice).sum()
    }

    /// ARP requests sent during the soak, all VIPs together.
    pub fn arp_samples(&self) -> u64 {
        self.vips.iter().filter_map(|v| v.arp.as_ref()).map(|a| a.sent).sum()
    }

    /// The link cuts' failover times (median, max; None when a cut was never followed or
    /// none was made).
    pub fn failover_summary(&self) -> Option<Summary> {
        let moved: Option<Vec<Duration>> = self.failovers.iter().copied().collect();
        Summary::of(&moved?)
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
    /// IPv4: an ARP request every 10 ms, and who answered each.
    pub arp: Option<ArpReport>,
}

/// Unused LAN addresses the ARP requests name as their sender, in turn (so a late answer
/// still matches its request).
fn arp_senders() -> Vec<Ipv4Addr> {
    (150..200).map(|k| Ipv4Addr::new(192, 0, 2, k)).collect()
}

/// Watches every VIP of `bed` for `duration` (whatever else runs meanwhile: the caller
/// starts the stress): the client's probes, its neighbour entries, and for IPv4 VIPs an
/// ARP request every 10 ms.
pub fn observe(bed: &Bed, duration: Duration) -> Result<Soaked, Error> {
    bed.settle()?;
    let probes = bed.probe()?;
    let arps = bed
        .vips()
        .iter()
        .map(|(vip, _)| match vip {
            IpAddr::V4(v4) => {
                ArpProbes::start(bed.lab().client(), "eth0", *v4, failover::PROBE_EVERY, &arp_senders())
                    .map(Some)
            }
            IpAddr::V6(_) => Ok(None),
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let start = SystemTime::now();
    let began = Instant::now();
    std::thread::sleep(duration);
    let seconds = began.elapsed().as_secs_f64();
    let end = SystemTime::now();
    let changes = bed.watch().changes();
    let mut vips = Vec::new();
    for (((vip, _), p), arp) in bed.vips().iter().zip(probes).zip(arps) {
        let moved =
            changes.iter().filter(|c| c.addr == *vip && c.at >= start && c.at <= end).cloned().collect();
        let arp = arp.map(ArpProbes::stop).transpose()?;
        vips.push(SoakedVip { vip: *vip, probes: p.stop(Duration::from_millis(200)), changes: moved, arp });
    }
    Ok(Soaked {
        system: bed.system(),
        nodes: bed.lab().nodes().len(),
        start,
        seconds,
        vips,
        failovers: Vec::new(),
    })
}

/// Cuts the link of the VIPs' home `trials` times (restored after each) and returns how
/// long the client took to resolve each VIP elsewhere, every trial's VIPs in turn.
pub fn link_cuts(bed: &mut Bed, trials: usize) -> Result<Vec<Option<Duration>>, Error> {
    let mut moved = Vec::new();
    for _ in 0..trials {
        moved.extend(bed.trial(Failure::LinkDown)?.into_iter().map(|t| t.moved));
    }
    Ok(moved)
}

/// Soaks the system of `bed`: probes every VIP for `duration` under stress-ng, then cuts
/// the home's link [`FAILOVER_TRIALS`] times under the same stress.
fn soak(bed: &mut Bed, duration: Duration) -> Result<Soaked, Error> {
    bed.settle()?;
    let stress = Stress::start(duration + FAILOVER_STRESS)?;
    let mut soaked = observe(bed, duration)?;
    soaked.failovers = link_cuts(bed, FAILOVER_TRIALS)?;
    drop(stress);
    Ok(soaked)
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
        "bench l2-soak: {seconds} s of stress-ng (CPU, I/O and memory workers) on every core ({cores}) while the \
         client probes {} every 10 ms; nothing fails, so every owner change is a false failover; then \
         {FAILOVER_TRIALS} link cuts of the home under the same stress",
        vips.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(" and ")
    );
    println!(
        "  ferrolb speaker binary: {} (shipped defaults)",
        ferrolb_lab::binary::newest("ferrolb-speaker")?.display()
    );
    let systems = [(System::Ferrolb, 3), (System::KeepalivedV3(Duration::from_millis(10)), 2)];
    let mut results = Vec::new();
    for (system, nodes) in systems {
        println!("{} ({nodes} nodes): soaking", system.label());
        let mut bed = Bed::up(system, nodes, &vips)?;
        let s = soak(&mut bed, duration)?;
        print_changes(&bed, &s);
        results.push(s);
    }
    Ok(results)
}

/// Prints each false failover of a soak.
pub fn print_changes(bed: &Bed, s: &Soaked) {
    for v in &s.vips {
        for c in &v.changes {
            let node =
                failover::node_of_mac(bed.lab(), Some(&c.mac)).map_or("?".into(), addressing::node_name);
            let after = c.at.duration_since(s.start).unwrap_or_default().as_secs_f64();
            println!(
                "  false failover: {} → {node} ({}) at {} UTC, +{after:.3} s",
                v.vip,
                c.mac,
                failover::clock(c.at)
            );
        }
    }
}

/// The table `bench l2-soak` prints at the end.
pub fn print_table(results: &[Soaked]) {
    println!(
        "\n{:<34} {:<14} {:>7} {:>11} {:>6} {:>12} {:>14} {:>12} {:>14}",
        "system",
        "VIP",
        "seconds",
        "probes sent",
        "lost",
        "longest gap",
        "owner changes",
        "ARP samples",
        "two MACs"
    );
    for s in results {
        for v in &s.vips {
            let (samples, twice) = v.arp.as_ref().map_or(("-".to_string(), "-".to_string()), |a| {
                (a.sent.to_string(), a.answered_twice.to_string())
            });
            println!(
                "{:<34} {:<14} {:>7.1} {:>11} {:>6} {:>9.0} ms {:>14} {:>12} {:>14}",
                s.label(),
                v.vip.to_string(),
                s.seconds,
                v.probes.sent,
                v.probes.lost(),
                super::ms(v.probes.max_outage()),
                v.changes.len(),
                samples,
                twice
            );
        }
    }
    if results.iter().all(|s| s.failovers.is_empty()) {
        return;
    }
    println!("\nlink cuts of the home under the same stress (client follows the successor):");
    for s in results.iter().filter(|s| !s.failovers.is_empty()) {
        let figure = s.failover_summary().map_or_else(
            || {
                format!(
                    "{} of {} not followed",
                    s.failovers.iter().filter(|m| m.is_none()).count(),
                    s.failovers.len()
                )
            },
            |f| f.to_string(),
        );
        println!("  {:<34} {} trials × VIPs: {figure}", s.label(), s.failovers.len());
    }
}
