//! `bench membership-scale`: SWIM membership of 100, 1 000 and 5 000 members in one
//! process, with simulated time, delay and loss ([`ferrolb_proto::membership::sim`]),
//! and what the L2 heartbeats of an owner of 1 000 addresses send (issue #39 point 3).
//!
//! Every member runs the speaker's SWIM machine and settings; a run starts settled
//! (every member knows every other), measures the traffic and the probes that failed on
//! a live member over `seconds`, then kills one member and times how long each other
//! member takes to learn it.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ferrolb_lab::Error;
use ferrolb_proto::election;
use ferrolb_proto::membership::heartbeat::{self, HeartbeatConfig, Message};
use ferrolb_proto::membership::{auth, sim};

use super::{Summary, fmt_ms};

/// The goals (issue #39): every member learns a death within this long…
pub const GOAL_DEATH_KNOWN: Duration = Duration::from_secs(5);
/// …each member sends less than this many bytes a second…
pub const GOAL_BYTES_PER_SECOND: f64 = 10_000.0;
/// …and no live member is suspected, at 1 % loss.
pub const GOAL_LOSS: f64 = 0.01;

/// What to run.
#[derive(Debug, Clone)]
pub struct Params {
    /// Cluster sizes.
    pub sizes: Vec<usize>,
    /// Shares of datagrams lost.
    pub losses: Vec<f64>,
    /// Simulated seconds measured at rest, before the kill.
    pub seconds: u64,
}

/// One size and loss, measured.
#[derive(Debug, Clone)]
pub struct Row {
    pub members: usize,
    pub loss: f64,
    /// Bytes a second each member sent at rest: (mean, max over members).
    pub bytes_per_second: (f64, f64),
    /// Probes of live members that failed, and live members declared down, per hour of
    /// the whole cluster.
    pub false_suspicions_per_hour: f64,
    pub false_downs_per_hour: f64,
    /// How long the other members took to learn a death (None: some never did).
    pub death_known: Option<Summary>,
    /// Members that had not learned it 10 s after.
    pub never_learned: usize,
    /// Processor time the simulation took per member and simulated second: an upper
    /// bound of one member's SWIM processing (the simulator's queue included).
    pub cpu_per_member_second: Duration,
}

/// Measures one size and loss.
pub fn measure(members: usize, loss: f64, seconds: u64) -> Row {
    let cpu = Instant::now();
    let mut s = sim::Sim::settled(sim::Params::lan(members, loss));
    let warm = Duration::from_secs(3);
    s.run_until(warm);
    let before: Vec<u64> = s.sent().iter().map(|x| x.0).collect();
    let stats_before = s.stats().clone();
    let rest = Duration::from_secs(seconds);
    s.run_until(warm + rest);
    let rates: Vec<f64> =
        s.sent().iter().zip(&before).map(|(a, b)| (a.0 - b) as f64 / rest.as_secs_f64()).collect();
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let max = rates.iter().copied().fold(0.0, f64::max);
    let per_hour = |n: u64| n as f64 * 3600.0 / rest.as_secs_f64();
    let stats = s.stats().clone();
    let suspicions = stats.false_suspicions - stats_before.false_suspicions;
    let downs = stats.false_downs - stats_before.false_downs;
    s.kill(0);
    let killed_at = s.now();
    s.run_until(killed_at + Duration::from_secs(10));
    let learned = s.learned(0);
    let known: Vec<Duration> = learned.iter().flatten().copied().collect();
    let elapsed = cpu.elapsed();
    let simulated = (warm + rest + Duration::from_secs(10)).as_secs_f64();
    Row {
        members,
        loss,
        bytes_per_second: (mean, max),
        false_suspicions_per_hour: per_hour(suspicions),
        false_downs_per_hour: per_hour(downs),
        death_known: Summary::of(&known),
        never_learned: learned.len() - known.len(),
        cpu_per_member_second: elapsed.div_f64(members as f64 * simulated),
    }
}

/// What an owner of `addresses` L2 addresses among `members` sends as heartbeats:
/// (distinct successors, members beaten, bytes a second).
pub fn heartbeat_cost(members: usize, addresses: usize) -> (usize, usize, f64) {
    let owner = "worker-00000.rack.example";
    let others: Vec<String> = (1..members).map(|i| format!("worker-{i:05}.rack.example")).collect();
    let mut successors: BTreeMap<IpAddr, Vec<String>> = BTreeMap::new();
    for a in 0..addresses {
        let ip = IpAddr::V4(Ipv4Addr::from(0xc612_0000 + u32::try_from(a).unwrap_or(0)));
        if let Some(next) = election::owner(ip, others.iter().map(String::as_str)) {
            successors.insert(ip, vec![next.to_owned()]);
        }
    }
    let distinct: std::collections::BTreeSet<&String> = successors.values().flatten().collect();
    let beaten = heartbeat::targets(successors.values()).len();
    let mut beat = Vec::new();
    Message::Beat(owner).encode_into(&mut beat);
    let per_beat = (beat.len() + auth::OVERHEAD + sim::IP_UDP_HEADERS) as f64;
    let per_second = 1.0 / HeartbeatConfig::default().interval.as_secs_f64();
    (distinct.len(), beaten, beaten as f64 * per_beat * per_second)
}

/// Runs every size and loss and prints the figures beside the goals.
pub fn run(p: &Params) -> Result<(), Error> {
    println!("bench membership-scale: SWIM in one process, simulated time, 0.15–0.25 ms one way");
    println!(
        "goals: every member learns a death < {} s; < {:.0} kB/s per member; 0 false suspicions per hour at {:.0} % loss",
        GOAL_DEATH_KNOWN.as_secs(),
        GOAL_BYTES_PER_SECOND / 1000.0,
        GOAL_LOSS * 100.0
    );
    println!(
        "{:>7} {:>5}  {:>17}  {:>18}  {:>12}  {:>28}  {:>9}",
        "members",
        "loss",
        "B/s per member",
        "false susp./hour",
        "false downs/h",
        "death known (min/med/max ms)",
        "CPU/member"
    );
    let mut rows = Vec::new();
    for &n in &p.sizes {
        for &loss in &p.losses {
            let r = measure(n, loss, p.seconds);
            let known = match (&r.death_known, r.never_learned) {
                (Some(k), 0) => format!("{} / {} / {}", fmt_ms(k.min), fmt_ms(k.median), fmt_ms(k.max)),
                (_, missing) => format!("{missing} members never learned it"),
            };
            println!(
                "{:>7} {:>4.0}%  {:>7.0} (max {:>5.0})  {:>18.1}  {:>12.1}  {:>28}  {:>6.1} µs/s",
                r.members,
                r.loss * 100.0,
                r.bytes_per_second.0,
                r.bytes_per_second.1,
                r.false_suspicions_per_hour,
                r.false_downs_per_hour,
                known,
                r.cpu_per_member_second.as_secs_f64() * 1e6,
            );
            rows.push(r);
        }
    }
    println!(
        "memberlist, published (hashicorp/memberlist#243): about 2–3 cores per node at ~2 500 nodes; \
         no per-member byte rate is published"
    );
    println!(
        "L2 heartbeats of an owner of 1 000 addresses (beats every 5 ms, at most {} members):",
        heartbeat::MAX_TARGETS
    );
    for &n in &p.sizes {
        let (distinct, beaten, bytes) = heartbeat_cost(n, 1000);
        let uncapped = bytes / beaten.max(1) as f64 * distinct as f64;
        println!(
            "{n:>7} members: {distinct:>4} successors, {beaten:>2} beaten: {:>6.1} kB/s (every successor beaten: {:>8.1} kB/s)",
            bytes / 1000.0,
            uncapped / 1000.0
        );
    }
    let missed: Vec<&Row> = rows.iter().filter(|r| r.never_learned > 0).collect();
    if !missed.is_empty() {
        println!(
            "not every member learned a death within 10 s at: {:?}",
            missed.iter().map(|r| (r.members, r.loss)).collect::<Vec<_>>()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_of_many_addresses_beats_a_bounded_number_of_members() {
        let (distinct, beaten, bytes) = heartbeat_cost(500, 1000);
        assert!(distinct > 300, "{distinct} successors of 1 000 addresses among 500 members");
        assert_eq!(beaten, heartbeat::MAX_TARGETS);
        assert!(bytes < 16.0 * 200.0 * 120.0, "{bytes} B/s");
    }
}
