//! `bench bfd`: how long ferrolb's BFD and the router's take to declare a session down
//! after the node's switch port goes down, against BIRD and FRR. Also [`BfdPeer`], the speaker's
//! BFD session as a process in a node namespace, used by the lab tests.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::Summary;
use ferrolb_lab::process::{Proc, Spawn};
use ferrolb_lab::routers::{self, BfdSpec, Bird, Frr, Router, RouterSpec};
use ferrolb_lab::{Error, Lab, LabConfig, addressing, wait};

/// Where `cargo build -p ferrolb-proto --example bfd-peer` puts the binary, or
/// `$FERROLB_BFD_PEER`. Builds it when missing (`cargo test -p ferrolb-testbed` alone does
/// not build other packages' examples).
pub fn peer_binary() -> Result<PathBuf, Error> {
    if let Some(p) = std::env::var_os("FERROLB_BFD_PEER") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let find = || exe.ancestors().map(|d| d.join("examples").join("bfd-peer")).find(|p| p.is_file());
    if let Some(p) = find() {
        return Ok(p);
    }
    let workspace = ferrolb_lab::binary::workspace_root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(&cargo)
        .args(["build", "-q", "-p", "ferrolb-proto", "--example", "bfd-peer"])
        .current_dir(&workspace)
        .output()
        .map_err(|e| Error::Command {
            command: format!("{cargo} build --example bfd-peer"),
            detail: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: "cargo build -p ferrolb-proto --example bfd-peer".into(),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    find().ok_or_else(|| {
        Error::Missing(
            "bfd-peer: run `cargo build -p ferrolb-proto --example bfd-peer` or set FERROLB_BFD_PEER".into(),
        )
    })
}

/// One ferrolb BFD session (`proto/examples/bfd-peer.rs`) running in a lab namespace.
#[derive(Debug)]
pub struct BfdPeer {
    proc: Proc,
}

/// A state change printed by [`BfdPeer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateLine {
    /// "Up", "Down", "Init", "AdminDown".
    pub state: String,
    /// The diagnostic, in words.
    pub diag: String,
    /// Failures so far (losses of Up not signalled as AdminDown by the peer).
    pub downs: u64,
}

impl BfdPeer {
    /// Starts a session from `local` (an address of `ns`) to `peer`.
    pub fn start(
        lab: &Lab,
        ns: &ferrolb_lab::netns::Netns,
        name: &str,
        (local, peer): (IpAddr, IpAddr),
        interval: Duration,
        multiplier: u8,
        passive: bool,
    ) -> Result<Self, Error> {
        let bin = peer_binary()?.to_string_lossy().into_owned();
        let (local, peer) = (local.to_string(), peer.to_string());
        let ms = interval.as_millis().to_string();
        let mult = multiplier.to_string();
        let mut argv = vec![
            bin.as_str(),
            "--local",
            &local,
            "--peer",
            &peer,
            "--interval-ms",
            &ms,
            "--multiplier",
            &mult,
        ];
        if passive {
            argv.push("--passive");
        }
        let proc = lab.spawn(ns, Spawn::new(name, &argv))?;
        let p = BfdPeer { proc };
        wait::until(&format!("{name} to start"), Duration::from_secs(10), || {
            if p.proc.logs().contains("started") {
                return Ok(Some(()));
            }
            Err(Error::Command {
                command: name.into(),
                detail: ferrolb_lab::process::tail(&p.proc.logs(), 5),
            })
        })?;
        Ok(p)
    }

    /// Every state change so far, in order.
    pub fn states(&self) -> Vec<StateLine> {
        self.proc
            .logs()
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("state=")?;
                let (state, rest) = rest.split_once(' ')?;
                let (diag, rest) = rest.strip_prefix("diag=\"")?.split_once('"')?;
                let downs = rest.split_once("downs=")?.1.trim().parse().ok()?;
                Some(StateLine { state: state.into(), diag: diag.into(), downs })
            })
            .collect()
    }

    /// The current state ("Down" before any change).
    pub fn state(&self) -> String {
        self.states().last().map_or_else(|| "Down".into(), |s| s.state.clone())
    }

    /// Waits until the session is in `state`; returns its state change.
    pub fn wait_state(&self, state: &str, timeout: Duration) -> Result<StateLine, Error> {
        wait::until(&format!("ferrolb BFD session {state}"), timeout, || {
            Ok(self.states().into_iter().last().filter(|s| s.state == state))
        })
    }

    /// The process.
    pub fn process(&mut self) -> &mut Proc {
        &mut self.proc
    }
}

/// Detection times of one trial.
#[derive(Debug, Clone, Copy)]
pub struct Detection {
    /// From the link going down to ferrolb's session going Down (its log is polled every
    /// millisecond in a thread of its own).
    pub ferrolb: Duration,
    /// From the link going down to the return of the first router CLI call that showed
    /// the session not up: an upper bound, late by up to one CLI call.
    pub router: Duration,
    /// How long that router CLI call took.
    pub cli_call: Duration,
}

/// One trial: both sides Up, node1's switch port down, time until each side declares Down,
/// link up again and both sides Up.
pub fn trial(lab: &Lab, router: &dyn Router, peer: &BfdPeer, node: IpAddr) -> Result<Detection, Error> {
    let t = Duration::from_secs(20);
    peer.wait_state("Up", t)?;
    routers::wait_bfd(router, node, "up", t)?;
    let before = peer.states().len();
    let cut = Instant::now();
    lab.switch().ip(&["link", "set", "n1", "down"])?;
    let detection = std::thread::scope(|scope| {
        let ours = scope.spawn(|| {
            while cut.elapsed() < t {
                if peer.states().iter().skip(before).any(|s| s.state == "Down") {
                    return Some(cut.elapsed());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        });
        let mut theirs = None;
        while theirs.is_none() && cut.elapsed() < t {
            let call = Instant::now();
            if router.bfd_sessions()?.get(&node).is_some_and(|s| s != "up") {
                theirs = Some((cut.elapsed(), call.elapsed()));
            }
        }
        let ours = ours.join().map_err(|_| Error::Thread("BFD log poller panicked".into()))?;
        match (ours, theirs) {
            (Some(ferrolb), Some((router, cli_call))) => Ok(Detection { ferrolb, router, cli_call }),
            _ => Err(Error::Timeout {
                what: "both sides to detect the cut".into(),
                after: t,
                last: format!("ferrolb {ours:?}, router {theirs:?}"),
            }),
        }
    });
    lab.switch().ip(&["link", "set", "n1", "up"])?;
    detection
}

fn run_router(
    kind: &str,
    trials: usize,
    interval: Duration,
    multiplier: u8,
    start: impl Fn(&Lab, &RouterSpec) -> Result<Box<dyn Router>, Error>,
) -> Result<Vec<Detection>, Error> {
    let lab = Lab::up(LabConfig::nodes(1))?;
    let node: IpAddr = addressing::node_v4(1).into();
    let bfd = BfdSpec { interval, multiplier, ..BfdSpec::lan(&[node]) };
    let router = start(&lab, &RouterSpec::default().bfd(bfd))?;
    let peer = BfdPeer::start(
        &lab,
        lab.node(1),
        "bfd-peer",
        (node, addressing::ROUTER_V4.into()),
        interval,
        multiplier,
        false,
    )?;
    let mut out = Vec::new();
    for i in 0..trials {
        let d = trial(&lab, router.as_ref(), &peer, node)?;
        println!(
            "  {kind:<5} trial {:>2}: ferrolb detects in {:>6.0} ms, {kind} in {:>6.0} ms (its CLI call took {:.0} ms)",
            i + 1,
            super::ms(d.ferrolb),
            super::ms(d.router),
            super::ms(d.cli_call)
        );
        out.push(d);
    }
    Ok(out)
}

/// Runs the trials against BIRD and FRR and prints a table.
pub fn run(trials: usize, interval: Duration, multiplier: u8) -> Result<(), Error> {
    println!(
        "bench bfd: node1's switch port set down, {} ms x {multiplier} (detection expected within {} ms), {trials} trials",
        interval.as_millis(),
        interval.as_millis() * u128::from(multiplier)
    );
    let bird =
        run_router("bird", trials, interval, multiplier, |lab, spec| Ok(Box::new(Bird::start(lab, spec)?)))?;
    let frr =
        run_router("frr", trials, interval, multiplier, |lab, spec| Ok(Box::new(Frr::start(lab, spec)?)))?;
    println!(
        "\n{:<36} time from link down to session Down (routers: upper bound, + one CLI call)",
        "detector"
    );
    for (name, xs) in [
        ("ferrolb (peer: BIRD 2)", bird.iter().map(|d| d.ferrolb).collect::<Vec<_>>()),
        ("BIRD 2 bfd (peer: ferrolb)", bird.iter().map(|d| d.router).collect()),
        ("ferrolb (peer: FRR bfdd)", frr.iter().map(|d| d.ferrolb).collect()),
        ("FRR bfdd (peer: ferrolb)", frr.iter().map(|d| d.router).collect()),
    ] {
        match Summary::of(&xs) {
            Some(s) => println!("{name:<36} {s}"),
            None => println!("{name:<36} no trials"),
        }
    }
    Ok(())
}
