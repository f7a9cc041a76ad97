//! `bench bgp-scale`: N /32 prefixes from 198.18.0.0/15 announced by one speaker on
//! node1 to BIRD on r1, every system timed from the moment its user's input changes.
//!
//! Each speaker starts with an empty table and is Established with r1 before the
//! clock starts; then its input changes (ferrolb: a static file of N Services renamed
//! into place; BIRD: an included file of N static routes and `birdc configure`; GoBGP:
//! `gobgp mrt inject`; ExaBGP: N `announce route` lines on its API). Measured: time to
//! the last prefix in r1 BIRD's RIB and in r1's kernel, time from the input change that
//! removes them to the last one gone from the kernel, bytes on the wire per prefix and
//! the speaker's resident memory at rest (Established, no routes, just before the clock
//! starts) and at its peak. BIRD as the speaker is the reference: a C implementation
//! feeding the same router, the practical limit of r1's import.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{ms, peak_rss, rss};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::{Proc, Spawn};
use ferrolb_lab::routers::{self, Bird, ExaNeighbor, PeerAs, RouterSpec};
use ferrolb_lab::speaker::{self, Speaker, yaml};
use ferrolb_lab::{Error, Lab, LabConfig, addressing, mrt, wait};

/// What one speaker achieved for one table size; times run from the input change.
#[derive(Debug, Clone)]
pub struct ScaleResult {
    /// Speaker measured.
    pub system: String,
    /// Prefixes announced.
    pub prefixes: u32,
    /// How long the input change itself took (file written and renamed, `birdc
    /// configure` returned, the last `mrt inject` returned, the API lines written).
    pub input: Duration,
    /// From the input change to the last prefix in BIRD's RIB.
    pub to_rib: Duration,
    /// From the input change to the last prefix in r1's kernel.
    pub to_kernel: Duration,
    /// From the input change that removes them to the last prefix gone from r1's kernel.
    pub withdraw: Duration,
    /// UPDATE messages sent, where the speaker counts them.
    pub updates: Option<u64>,
    /// TCP payload bytes BIRD received on the session while the prefixes were announced.
    pub bytes: u64,
    /// Peak resident memory of the speaker.
    pub rss: Option<u64>,
    /// Resident memory of the speaker at rest: Established with an empty table, just
    /// before the input change.
    pub idle_rss: Option<u64>,
    /// Networks in BIRD's RIB just before the input change, then at each poll until the
    /// last prefix arrived: (time from the input change, count).
    pub rib_series: Vec<(Duration, u64)>,
}

mod feeds;
mod observe;

use feeds::{BirdFeed, ExaBgpFeed, FerrolbFeed, GoBgpFeed};

use super::bird_ctl::BirdCtl;
use observe::KernelRoutes;

/// Networks in BIRD's tables (`show route count`).
pub fn bird_route_count(bird: &Bird) -> Result<u64, Error> {
    Ok(parse_route_count(&bird.birdc("show route count")?))
}

/// Networks in the per-table lines of `show route count` (`N of M routes for K networks
/// in table master4`); the `Total:` line repeats their sum.
fn parse_route_count(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.contains("routes for") && !l.contains("Total:"))
        .filter_map(|l| l.split(" for ").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Payload bytes received on established BGP sessions in `ns`.
pub fn bgp_bytes_received(ns: &Netns) -> Result<u64, Error> {
    let text = ns.exec(&["ss", "-tinH", "state", "established", "( sport = :179 )"])?;
    Ok(text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("bytes_received:"))
        .filter_map(|v| v.parse::<u64>().ok())
        .sum())
}

/// A speaker measured: BIRD, ferrolb, GoBGP or ExaBGP on node1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    /// BIRD 2 with a static protocol fed from an included file: the reference.
    Bird,
    /// ferrolb-speaker in static mode, one Service per address.
    Ferrolb,
    /// GoBGP 3 fed with `gobgp mrt inject`.
    Gobgp,
    /// ExaBGP 4 fed through its API.
    Exabgp,
}

impl System {
    /// Every speaker, the reference first.
    pub const ALL: [System; 4] = [System::Bird, System::Ferrolb, System::Gobgp, System::Exabgp];

    /// The speaker's short name.
    pub fn name(self) -> &'static str {
        match self {
            System::Bird => "BIRD 2",
            System::Ferrolb => "ferrolb",
            System::Gobgp => "GoBGP 3",
            System::Exabgp => "ExaBGP 4",
        }
    }

    /// The row label: the system and how its input is given.
    pub fn label(self, n: u32) -> String {
        match self {
            System::Bird => "BIRD 2 (include+configure)".into(),
            System::Ferrolb => format!("ferrolb ({n} Services)"),
            System::Gobgp => "GoBGP 3 (mrt inject)".into(),
            System::Exabgp => "ExaBGP 4 (API lines)".into(),
        }
    }
}

impl std::str::FromStr for System {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "bird" => Ok(System::Bird),
            "ferrolb" => Ok(System::Ferrolb),
            "gobgp" => Ok(System::Gobgp),
            "exabgp" => Ok(System::Exabgp),
            other => Err(format!("unknown system {other:?}: say bird, ferrolb, gobgp or exabgp")),
        }
    }
}

/// A speaker on node1 with an empty table, whose input the bench changes.
trait Feed {
    /// How long the speaker may take to reach Established with r1.
    fn connect_timeout(&self) -> Duration {
        Duration::from_secs(60)
    }
    /// The input change that announces the prepared prefixes; returns when it is made.
    fn announce(&mut self) -> Result<(), Error>;
    /// The input change that removes them all.
    fn withdraw(&mut self) -> Result<(), Error>;
    /// UPDATE messages sent, where the speaker counts them.
    fn updates_sent(&mut self) -> Option<u64> {
        None
    }
    /// The speaker's process.
    fn pid(&mut self) -> Option<i32>;
}

/// The speaker's static file: node1, `n` Services holding one bulk /32 each (as an
/// operator has them: one Service per address), a pool, BIRD on r1 as the peer.
pub fn ferrolb_static_file(n: u32) -> String {
    let mut objs = vec![yaml::node(1), yaml::pool("bulk", &[addressing::BULK_V4])];
    objs.extend(
        mrt::bulk_prefixes(n).enumerate().map(|(i, ip)| yaml::service(&format!("bulk-{i}"), &[ip.into()])),
    );
    objs.extend([
        yaml::peer(
            "r1",
            addressing::NODE_ASN,
            addressing::ROUTER_ASN,
            addressing::ROUTER_V4.into(),
            &["addressFamilies: [ipv4-unicast]"],
        ),
        yaml::bgp_advertisement("bulk", &["ipAddressPools: [bulk]"]),
    ]);
    yaml::stream(&objs)
}

/// `ferrolb_bgp_updates_sent_total` summed over peers, scraped inside `ns`.
pub fn scrape_updates_sent(ns: &Netns, addr: std::net::SocketAddr) -> Result<Option<u64>, Error> {
    let text = ns.run(move || -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })??;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("ferrolb_bgp_updates_sent_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .reduce(|a, b| a + b))
}

/// The ferrolb-speaker binary the bench runs: release if built, else debug.
pub fn ferrolb_binary() -> Result<(PathBuf, &'static str), Error> {
    speaker::binary("release").map(|p| (p, "release")).or_else(|_| Ok((speaker::binary("debug")?, "debug")))
}

/// Measures `system` announcing and withdrawing `n` prefixes in a fresh one-node lab;
/// ferrolb runs `ferrolb_bin` ([`ferrolb_binary`] when None).
pub fn measure_system(system: System, n: u32, ferrolb_bin: Option<&Path>) -> Result<ScaleResult, Error> {
    let lab = Lab::up(LabConfig::nodes(1))?;
    let r = measure_in(&lab, system, n, ferrolb_bin);
    if r.is_err() {
        // The lab directory goes with the lab: show why before it does.
        eprintln!(
            "bgp-scale: {} with {n} prefixes failed; lab {} logs:\n{}",
            system.label(n),
            lab.id(),
            lab.logs(30)
        );
    }
    r
}

fn measure_in(lab: &Lab, system: System, n: u32, ferrolb_bin: Option<&Path>) -> Result<ScaleResult, Error> {
    let router = Bird::start(lab, &RouterSpec::default())?;
    let mut feed: Box<dyn Feed> = match system {
        System::Bird => Box::new(BirdFeed::start(lab, n)?),
        System::Ferrolb => {
            let bin = match ferrolb_bin {
                Some(b) => b.to_path_buf(),
                None => ferrolb_binary()?.0,
            };
            Box::new(FerrolbFeed::start(lab, &bin, n)?)
        }
        System::Gobgp => Box::new(GoBgpFeed::start(lab, n)?),
        System::Exabgp => Box::new(ExaBgpFeed::start(lab, n)?),
    };
    routers::wait_established(&router, &[addressing::node_ip(1)], feed.connect_timeout())?;
    let r = measure(lab, n, feed.as_mut())?;
    Ok(ScaleResult { system: system.label(n), ..r })
}

/// The clock runs from each input change; the speaker is Established and empty.
fn measure(lab: &Lab, n: u32, feed: &mut dyn Feed) -> Result<ScaleResult, Error> {
    let long = Duration::from_secs(600);
    let want = u64::from(n);
    // r1's BIRD, started by `Bird::start`, listens in its lab subdirectory "bird".
    let mut rib = BirdCtl::connect(&lab.dir().join("bird").join("bird.ctl"))?;
    let mut kernel = KernelRoutes::open(lab.router())?;
    let bytes_before = bgp_bytes_received(lab.router())?;
    let before = rib.route_count()?;
    let idle_rss = feed.pid().and_then(rss);
    let t0 = Instant::now();
    feed.announce()?;
    let input = t0.elapsed();
    let mut rib_series = vec![(Duration::ZERO, before)];
    wait::until_every("all prefixes in BIRD's RIB", long, observe::POLL, || {
        let count = rib.route_count()?;
        rib_series.push((t0.elapsed(), count));
        Ok((count >= want).then_some(()))
    })?;
    let to_rib = t0.elapsed();
    wait::until_every("all prefixes in the kernel", long, observe::POLL, || {
        Ok((kernel.count()? >= want).then_some(()))
    })?;
    let to_kernel = t0.elapsed();
    let bytes = bgp_bytes_received(lab.router())?.saturating_sub(bytes_before);
    let updates = feed.updates_sent();
    let t1 = Instant::now();
    feed.withdraw()?;
    wait::until_every("all prefixes withdrawn from the kernel", long, observe::POLL, || {
        Ok((kernel.count()? == 0).then_some(()))
    })?;
    let withdraw = t1.elapsed();
    Ok(ScaleResult {
        system: String::new(),
        prefixes: n,
        input,
        to_rib,
        to_kernel,
        withdraw,
        updates,
        bytes,
        rss: feed.pid().and_then(peak_rss),
        idle_rss,
        rib_series,
    })
}

/// One speaker at one table size: its figures, or why it could not be measured.
#[derive(Debug)]
pub struct Outcome {
    /// The speaker.
    pub system: System,
    /// Prefixes announced.
    pub prefixes: u32,
    /// The figures.
    pub result: Result<ScaleResult, Error>,
}

/// Runs `systems` (BIRD first, the reference) `runs` times for every size and prints one
/// table per size; see [`measure_all`].
pub fn run(sizes: &[u32], systems: &[System], runs: usize) -> Result<(), Error> {
    measure_all(sizes, systems, runs)?.into_iter().find_map(|o| o.result.err()).map_or(Ok(()), Err)
}

/// Measures `systems` (BIRD first, the reference) `runs` times for every size, printing
/// one table per size as the rows come; a speaker that fails is a row saying why, and the
/// rest go on. Each run's ratios are to that run's BIRD (a 2-core machine swings BIRD's
/// own time by half from run to run); several runs end with their min / median / max.
pub fn measure_all(sizes: &[u32], systems: &[System], runs: usize) -> Result<Vec<Outcome>, Error> {
    let mut systems = systems.to_vec();
    systems.sort();
    systems.dedup();
    let bin = if systems.contains(&System::Ferrolb) { Some(ferrolb_binary()?) } else { None };
    println!(
        "bench bgp-scale: N /32s from 198.18.0.0/15, one speaker on node1 → BIRD 2 on r1 (eBGP).\n\
         Each speaker starts empty and Established; times run from the input change. \
         Ratios are to BIRD→BIRD."
    );
    if let Some((path, profile)) = &bin {
        println!("ferrolb-speaker: {profile} build, {}", path.display());
    }
    let mut outcomes = Vec::new();
    for &n in sizes {
        println!("\n{n} prefixes");
        println!(
            "{:<28} {:>9} {:>22} {:>22} {:>22} {:>8} {:>8} {:>9} {:>9}",
            "system", "input", "RIB", "kernel", "withdraw", "B/prefix", "UPDATEs", "idle RSS", "peak RSS"
        );
        let mut by_run: Vec<Vec<Outcome>> = Vec::new();
        for k in 0..runs.max(1) {
            if runs > 1 {
                println!("run {} of {runs}", k + 1);
            }
            let mut reference: Option<ScaleResult> = None;
            let mut this_run = Vec::new();
            for &system in &systems {
                let result = measure_system(system, n, bin.as_ref().map(|(p, _)| p.as_path()));
                match &result {
                    Ok(r) => {
                        println!("{}", row(r, reference.as_ref()));
                        if system == System::Bird {
                            reference = Some(r.clone());
                        }
                    }
                    Err(e) => println!("{:<28} failed: {e}", system.label(n)),
                }
                this_run.push(Outcome { system, prefixes: n, result });
            }
            by_run.push(this_run);
        }
        if runs > 1 {
            print_spread(&by_run, &systems, n);
        }
        outcomes.extend(by_run.into_iter().flatten());
    }
    Ok(outcomes)
}

/// min / median / max over the runs of each system's times, and of its ratios to BIRD
/// in the same run.
fn print_spread(by_run: &[Vec<Outcome>], systems: &[System], n: u32) {
    let of = |run: &[Outcome], system: System| {
        run.iter().find(|o| o.system == system).and_then(|o| o.result.as_ref().ok()).cloned()
    };
    println!("{} runs, min / median / max (ratios: to BIRD in the same run)", by_run.len());
    for &system in systems {
        let results: Vec<(ScaleResult, Option<ScaleResult>)> =
            by_run.iter().filter_map(|run| Some((of(run, system)?, of(run, System::Bird)))).collect();
        let times = |f: fn(&ScaleResult) -> Duration| -> String {
            let xs: Vec<Duration> = results.iter().map(|(r, _)| f(r)).collect();
            let ratios: Vec<f64> = results
                .iter()
                .filter_map(|(r, b)| b.as_ref().map(|b| f(r).as_secs_f64() / f(b).as_secs_f64().max(1e-9)))
                .collect();
            let mut cell = super::Summary::of(&xs).map_or("—".into(), |s| {
                format!("{:.0}/{:.0}/{:.0} ms", ms(s.min), ms(s.median), ms(s.max))
            });
            if system != System::Bird
                && let Some(r) = super::Summary::of(&ratios)
            {
                cell.push_str(&format!(" ({:.2}/{:.2}/{:.2}×)", r.min, r.median, r.max));
            }
            cell
        };
        println!(
            "{:<28} RIB {}  kernel {}  withdraw {}",
            system.label(n),
            times(|r| r.to_rib),
            times(|r| r.to_kernel),
            times(|r| r.withdraw)
        );
    }
}

/// One table row; each time with its ratio to `reference` when there is one.
fn row(r: &ScaleResult, reference: Option<&ScaleResult>) -> String {
    let cell = |d: Duration, base: Option<Duration>| match base {
        Some(b) if !b.is_zero() => {
            format!("{:.0} ms {:>5.2}× BIRD", ms(d), d.as_secs_f64() / b.as_secs_f64())
        }
        _ => format!("{:.0} ms", ms(d)),
    };
    format!(
        "{:<28} {:>9} {:>22} {:>22} {:>22} {:>8.1} {:>8} {:>9} {:>9}",
        r.system,
        format!("{:.0} ms", ms(r.input)),
        cell(r.to_rib, reference.map(|b| b.to_rib)),
        cell(r.to_kernel, reference.map(|b| b.to_kernel)),
        cell(r.withdraw, reference.map(|b| b.withdraw)),
        r.bytes as f64 / f64::from(r.prefixes.max(1)),
        r.updates.map_or("—".into(), |u| u.to_string()),
        r.idle_rss.map_or("?".into(), |b| format!("{:.1} MiB", super::mib(b))),
        r.rss.map_or("?".into(), |b| format!("{:.1} MiB", super::mib(b))),
    )
}

#[cfg(test)]
mod tests;
