//! `bench failover`: what a client sees when the node owning an L2 VIP fails, over
//! several trials, for ferrolb and keepalived (defaults, and VRRPv3 with 100 ms and
//! 10 ms adverts) in the same run, each system and failure mode in a lab of its own. An
//! IPv4 and an IPv6 VIP with the same owner are probed side by side in every trial.
//!
//! Two figures per trial and VIP: the outage (the longest run of unanswered probes,
//! sent every 10 ms) and the takeover (from the failure to the client's neighbour entry
//! pointing at another node, as `ip -ts monitor neigh` stamps it). When only the daemon
//! dies the node keeps answering for the VIP, so the outage can be nil while the
//! takeover still shows how long the failure took to be detected.

mod bed;
mod daemons;
mod neigh;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use super::Summary;
use ferrolb_lab::{Error, addressing};

pub use bed::{Bed, Handover, Takeover};
pub use neigh::{MacChange, NeighbourWatch, clock, node_of_mac, owner};

/// How often the client probes each VIP.
pub const PROBE_EVERY: Duration = Duration::from_millis(10);
/// Longest wait for the client to resolve a VIP to a new owner. Without an
/// announcement it does when its entry fails: reachable time (15–45 s), delay (5 s),
/// three probes.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(60);

/// An address family of the VIPs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IPv4 (ARP, gratuitous ARP).
    V4,
    /// IPv6 (NDP, unsolicited NA).
    V6,
}

impl Family {
    /// Both, IPv4 first.
    pub const ALL: [Family; 2] = [Family::V4, Family::V6];

    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> Family {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "v4",
            Family::V6 => "v6",
        })
    }
}

impl FromStr for Family {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "v4" | "ipv4" | "4" => Ok(Family::V4),
            "v6" | "ipv6" | "6" => Ok(Family::V6),
            other => Err(format!("unknown family {other:?}: say v4 or v6")),
        }
    }
}

/// How the owner fails in a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Its daemon is SIGKILLed, its link left up: the ferrolb speaker, or keepalived with
    /// all its processes (no VRRP priority-0 goodbye).
    Kill,
    /// Its LAN link goes down, the daemon alive: a dead node, as the network sees it.
    LinkDown,
}

impl Failure {
    /// Both, in the order measured.
    pub const ALL: [Failure; 2] = [Failure::Kill, Failure::LinkDown];
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Failure::Kill => "kill",
            Failure::LinkDown => "link",
        })
    }
}

impl FromStr for Failure {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "kill" => Ok(Failure::Kill),
            "link" | "link-down" => Ok(Failure::LinkDown),
            other => Err(format!("unknown failure {other:?}: say kill or link")),
        }
    }
}

/// A system measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    /// ferrolb speakers (membership defaults, ARP/NDP responder) from a static file.
    Ferrolb,
    /// keepalived as installed: advert_int 1 s (VRRPv2 for IPv4, v3 for IPv6).
    KeepalivedDefaults,
    /// keepalived, VRRPv3 with this advert interval for both families.
    KeepalivedV3(Duration),
}

impl System {
    /// Every system `bench failover` measures, in order.
    pub fn all() -> [System; 4] {
        [
            System::Ferrolb,
            System::KeepalivedDefaults,
            System::KeepalivedV3(Duration::from_millis(100)),
            System::KeepalivedV3(Duration::from_millis(10)),
        ]
    }

    /// The row label.
    pub fn label(&self) -> String {
        match self {
            System::Ferrolb => "ferrolb".into(),
            System::KeepalivedDefaults => "keepalived defaults (1 s)".into(),
            System::KeepalivedV3(a) => format!("keepalived VRRPv3 {:.0} ms", super::ms(*a)),
        }
    }
}

/// The bench's VIPs of `families`: 192.0.2.200 and an IPv6 VIP that ferrolb's election
/// gives the same node among node1 and node2 ([`addressing::l2_vip_pair`]).
pub fn vips(families: &[Family]) -> Vec<IpAddr> {
    addressing::l2_vip_pair().0.into_iter().filter(|v| families.contains(&Family::of(*v))).collect()
}

/// What `bench failover` runs.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Trials per system, failure and family.
    pub trials: usize,
    /// Only this family (both when None).
    pub family: Option<Family>,
    /// Only this failure (both, and ferrolb's SIGTERM handover, when None).
    pub failure: Option<Failure>,
}

/// The trials of one (system, failure, family), in order.
#[derive(Debug, Clone)]
pub struct Row {
    /// The system measured.
    pub system: System,
    /// How its owner failed.
    pub failure: Failure,
    /// The VIP probed (its family is the row's).
    pub vip: IpAddr,
    /// Each trial's figures.
    pub trials: Vec<Takeover>,
}

impl Row {
    /// The VIP's address family.
    pub fn family(&self) -> Family {
        Family::of(self.vip)
    }

    /// Each trial's client-visible outage.
    pub fn outages(&self) -> Vec<Duration> {
        self.trials.iter().map(Takeover::outage).collect()
    }

    /// Each trial's failure → client moved, None where it did not move.
    pub fn moved(&self) -> Vec<Option<Duration>> {
        self.trials.iter().map(|t| t.moved).collect()
    }
}

/// Everything `bench failover` measured.
#[derive(Debug, Clone, Default)]
pub struct Results {
    /// One row per (system, failure, family), in the order measured.
    pub rows: Vec<Row>,
    /// ferrolb's SIGTERM handover trials (none when a single failure was asked for).
    pub handovers: Vec<Handover>,
}

/// Runs every system and prints a table.
pub fn run(p: &Params) -> Result<(), Error> {
    let results = measure(p)?;
    print_tables(&results);
    Ok(())
}

/// Runs every system, printing each trial as it ends.
pub fn measure(p: &Params) -> Result<Results, Error> {
    let families: Vec<Family> =
        Family::ALL.into_iter().filter(|f| p.family.is_none_or(|x| x == *f)).collect();
    let failures: Vec<Failure> =
        Failure::ALL.into_iter().filter(|f| p.failure.is_none_or(|x| x == *f)).collect();
    let vips = vips(&families);
    print_intro(p, &vips)?;
    let mut results = Results::default();
    for system in System::all() {
        println!("{}:", system.label());
        // A lab per failure mode: what one leaves behind must not colour the other.
        for failure in &failures {
            results.rows.extend(measure_rows(system, *failure, &vips, p.trials)?);
        }
        if system == System::Ferrolb && p.failure.is_none() {
            results.handovers = measure_handovers(&vips, p.trials)?;
        }
    }
    Ok(results)
}

/// What the bench does, before it starts.
fn print_intro(p: &Params, vips: &[IpAddr]) -> Result<(), Error> {
    let names: Vec<String> = vips.iter().map(IpAddr::to_string).collect();
    println!(
        "bench failover: the owner of {} fails, the client probes each every 10 ms; {} trials per system and failure",
        names.join(" and "),
        p.trials
    );
    println!(
        "  kill: the owner's daemon SIGKILLed, its link up (keepalived: parent and children, no priority-0 advert)"
    );
    println!("  link: the owner's LAN link set down, its daemon alive");
    println!(
        "  outage: the longest run of unanswered probes; moved: failure → the client's entry points elsewhere"
    );
    println!("  ferrolb speaker binary: {}", ferrolb_lab::binary::newest("ferrolb-speaker")?.display());
    Ok(())
}

/// `trials` trials of `system` and `failure` in a lab of their own: a row per VIP.
fn measure_rows(system: System, failure: Failure, vips: &[IpAddr], trials: usize) -> Result<Vec<Row>, Error> {
    let mut bed = Bed::up(system, 2, vips)?;
    let mut rows: Vec<Row> =
        vips.iter().map(|v| Row { system, failure, vip: *v, trials: Vec::new() }).collect();
    for t in 1..=trials {
        let takeovers = bed.trial(failure)?;
        let line: Vec<String> = takeovers
            .iter()
            .map(|o| {
                let fam = Family::of(o.vip);
                let moved = o.moved.map_or_else(
                    || format!("not within {} s", TAKEOVER_LIMIT.as_secs()),
                    |m| format!("{:>5.0} ms", super::ms(m)),
                );
                format!("{fam} outage {:>5.0} ms, moved {moved}", super::ms(o.outage()))
            })
            .collect();
        println!("  {failure:<4} trial {t:>2}: {}", line.join("; "));
        for (row, o) in rows.iter_mut().zip(takeovers) {
            row.trials.push(o);
        }
    }
    Ok(rows)
}

/// `trials` SIGTERM handovers of ferrolb in a lab of their own.
fn measure_handovers(vips: &[IpAddr], trials: usize) -> Result<Vec<Handover>, Error> {
    let mut bed = Bed::up(System::Ferrolb, 2, vips)?;
    let mut out = Vec::new();
    for t in 1..=trials {
        let h = bed.handover()?;
        let line: Vec<String> = h
            .probes
            .iter()
            .map(|(v, r)| format!("{} {} probes, {} lost", Family::of(*v), r.sent, r.lost()))
            .collect();
        println!("  SIGTERM trial {t:>2}: exit {:?}, {}", h.exit, line.join("; "));
        out.push(h);
    }
    Ok(out)
}

/// The tables `bench failover` prints at the end.
pub fn print_tables(results: &Results) {
    let rows = &results.rows;
    print_table("client-visible outage", rows, |r| r.outages().into_iter().map(Some).collect());
    print_table("failure → client moved to another node", rows, Row::moved);
    if !results.handovers.is_empty() {
        let handover: Vec<u64> = results.handovers.iter().map(Handover::lost).collect();
        let zero = handover.iter().filter(|l| **l == 0).count();
        println!(
            "\nferrolb SIGTERM handover: {zero}/{} trials with zero lost probes (lost per trial {handover:?})",
            handover.len()
        );
    }
}

/// One row per (system, failure, family): min / median / max of `figures`, and how many
/// trials have none.
fn print_table(title: &str, rows: &[Row], figures: impl Fn(&Row) -> Vec<Option<Duration>>) {
    println!("\n{:<27} {:<7} {:<6} {title}", "system", "failure", "family");
    for r in rows {
        let all = figures(r);
        let got: Vec<Duration> = all.iter().flatten().copied().collect();
        let mut s = Summary::of(&got).map_or_else(|| "none".to_string(), |s| s.to_string());
        if got.len() < all.len() {
            s.push_str(&format!("  ({} of {} trials: none)", all.len() - got.len(), all.len()));
        }
        println!("{:<27} {:<7} {:<6} {s}", r.system.label(), r.failure.to_string(), r.family().to_string());
    }
}
