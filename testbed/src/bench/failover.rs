//! `bench failover`: the outage a client sees when the node owning an L2 VIP fails,
//! over several trials, for each system in the same run.

use std::net::IpAddr;
use std::time::Duration;

use super::Summary;
use crate::client::{self, ProbeStream};
use crate::keepalived::{Keepalived, VrrpSpec};
use crate::speaker::{self, Speaker, yaml};
use crate::{Error, Lab, LabConfig, plan, wait};

/// How the owner fails in a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Its LAN link goes down (a dead node, as the network sees it).
    LinkDown,
    /// Its ferrolb speaker is SIGKILLed and its LAN link goes down at the same moment.
    KillAndLinkDown,
}

/// Outages of one system over the trials.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// System measured ("keepalived (VRRP, defaults)", …).
    pub system: String,
    /// Client-visible outage per trial.
    pub outages: Vec<Duration>,
}

/// Which node the client currently sends the VIP's traffic to (by resolved MAC).
pub fn owner(lab: &Lab, vip: IpAddr) -> Result<Option<usize>, Error> {
    let n = client::neighbour(lab.client(), "eth0", vip)?;
    let mac = n.and_then(|n| n.mac);
    Ok((1..=lab.nodes().len()).find(|i| mac.as_deref() == Some(plan::node_mac(*i).as_str())))
}

/// One trial: probe the VIP every 10 ms, fail its owner, wait for the probes to come
/// back, restore the owner. Returns the longest gap after the failure.
pub fn trial(lab: &Lab, vip: IpAddr, failure: Failure) -> Result<Duration, Error> {
    trial_with(lab, vip, failure, &mut [])
}

/// [`trial`] where `speakers[i - 1]` is node i's ferrolb speaker (SIGKILLed by
/// [`Failure::KillAndLinkDown`] and started again after the trial).
pub fn trial_with(
    lab: &Lab,
    vip: IpAddr,
    failure: Failure,
    speakers: &mut [Speaker],
) -> Result<Duration, Error> {
    let probe = ProbeStream::start(lab.client(), vip, Duration::from_millis(10))?;
    std::thread::sleep(Duration::from_millis(500));
    let owner = wait::until("an owner answering the VIP", Duration::from_secs(20), || owner(lab, vip))?;
    let node = lab.node(owner);
    let (_, before) = probe.counts();
    match failure {
        Failure::LinkDown => node.ip(&["link", "set", "eth0", "down"])?,
        Failure::KillAndLinkDown => {
            if let Some(s) = speakers.get_mut(owner - 1) {
                s.kill();
            }
            node.ip(&["link", "set", "eth0", "down"])?
        }
    };
    let resumed = wait::until("probes to resume", Duration::from_secs(30), || {
        let (_, now) = probe.counts();
        Ok((now >= before + 20).then_some(()))
    });
    std::thread::sleep(Duration::from_millis(200));
    let report = probe.stop(Duration::from_millis(200));
    node.ip(&["link", "set", "eth0", "up"])?;
    if failure == Failure::KillAndLinkDown
        && let Some(s) = speakers.get_mut(owner - 1)
    {
        s.restart()?;
    }
    resumed?;
    Ok(report.max_outage())
}

/// The ferrolb speakers' static file: both nodes, the L2 pool, one L2Advertisement,
/// one Service holding `vip`.
fn ferrolb_file(vip: IpAddr) -> String {
    let pool = [
        format!("{}-{}", plan::L2_POOL_V4.0, plan::L2_POOL_V4.1),
        format!("{}-{}", plan::L2_POOL_V6.0, plan::L2_POOL_V6.1),
    ];
    let pool: Vec<&str> = pool.iter().map(String::as_str).collect();
    yaml::stream(&[
        yaml::node(1),
        yaml::node(2),
        yaml::pool("lan", &pool),
        yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]),
        yaml::service("web", &[vip]),
    ])
}

/// The most recently built speaker binary (release or debug), so a stale build is
/// never measured.
fn speaker_binary() -> Result<std::path::PathBuf, Error> {
    let built = |p: &std::path::PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    match (speaker::binary("release"), speaker::binary("debug")) {
        (Ok(r), Ok(d)) => Ok(if built(&r) >= built(&d) { r } else { d }),
        (Ok(p), Err(_)) | (Err(_), Ok(p)) => Ok(p),
        (Err(e), Err(_)) => Err(e),
    }
}

/// Waits until the client's entry for `vip` points at node `i`.
fn wait_back(lab: &Lab, vip: IpAddr, i: usize) -> Result<(), Error> {
    let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", &vip.to_string()]);
    client::wait_neighbour_mac(lab.client(), "eth0", vip, &plan::node_mac(i), Duration::from_secs(30))
}

/// ferrolb speakers on node1 and node2 (membership defaults, 1 s handover grace):
/// outage when the owner is SIGKILLed with its link cut, and lost probes when the
/// owner is SIGTERMed (the node stops accepting the VIP right after the speaker exits).
pub fn ferrolb(trials: usize, vip: IpAddr) -> Result<(Outcome, Vec<u64>), Error> {
    let lab = Lab::up(LabConfig::nodes(2))?;
    let bin = speaker_binary()?;
    println!("  ferrolb speaker binary: {}", bin.display());
    let key = speaker::write_membership_key(&lab, "bench-failover-key")?;
    let key = key.display().to_string();
    let file = ferrolb_file(vip);
    for n in lab.nodes() {
        lab.add_vip_on_lo(n, vip)?;
    }
    let flags = ["--membership-key-file", key.as_str()];
    let mut speakers = vec![
        Speaker::start_with(&lab, 1, &file, &bin, &flags)?,
        Speaker::start_with(&lab, 2, &file, &bin, &flags)?,
    ];
    let elected = wait::until("an owner answering the VIP", Duration::from_secs(30), || {
        let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", &vip.to_string()]);
        owner(&lab, vip)
    })?;
    let mut outages = Vec::new();
    for i in 0..trials {
        wait_back(&lab, vip, elected)?;
        std::thread::sleep(Duration::from_millis(500));
        let o = trial_with(&lab, vip, Failure::KillAndLinkDown, &mut speakers)?;
        println!("  ferrolb SIGKILL+link down trial {:>2}: outage {:>6.0} ms", i + 1, super::ms(o));
        outages.push(o);
    }
    let mut lost = Vec::new();
    let prefix = format!("{vip}/{}", if vip.is_ipv4() { 32 } else { 128 });
    for i in 0..trials {
        wait_back(&lab, vip, elected)?;
        std::thread::sleep(Duration::from_millis(500));
        let probe = ProbeStream::start(lab.client(), vip, Duration::from_millis(10))?;
        std::thread::sleep(Duration::from_millis(300));
        let s = &mut speakers[elected - 1];
        let code = s.terminate(Duration::from_secs(15));
        lab.node(elected).ip(&["addr", "del", &prefix, "dev", "lo"])?;
        std::thread::sleep(Duration::from_millis(300));
        let r = probe.stop(Duration::from_millis(100));
        println!("  ferrolb SIGTERM trial {:>2}: exit {code:?}, {} probes, {} lost", i + 1, r.sent, r.lost());
        lost.push(r.lost());
        lab.add_vip_on_lo(lab.node(elected), vip)?;
        s.restart()?;
    }
    Ok((Outcome { system: "ferrolb (SWIM + ARP responder)".into(), outages }, lost))
}

/// keepalived with its defaults on node1 (priority 150) and node2 (100).
pub fn keepalived(trials: usize, vip: IpAddr) -> Result<Outcome, Error> {
    let lab = Lab::up(LabConfig::nodes(2))?;
    let _k1 = Keepalived::start(&lab, lab.node(1), "keepalived-node1", &VrrpSpec::defaults(vip, 150))?;
    let _k2 = Keepalived::start(&lab, lab.node(2), "keepalived-node2", &VrrpSpec::defaults(vip, 100))?;
    let mut outages = Vec::new();
    for i in 0..trials {
        // Let preemption put the VIP back on node1 and the client re-learn it.
        std::thread::sleep(Duration::from_secs(5));
        let o = trial(&lab, vip, Failure::LinkDown)?;
        println!("  keepalived trial {:>2}: outage {:>6.0} ms", i + 1, super::ms(o));
        outages.push(o);
    }
    Ok(Outcome { system: "keepalived (VRRP, defaults)".into(), outages })
}

/// Runs every system and prints a table.
pub fn run(trials: usize) -> Result<(), Error> {
    let vip: IpAddr = plan::L2_POOL_V4.0.parse().map_err(|e| Error::Parse(format!("{e}")))?;
    println!("bench failover: owner fails, client probes {vip} every 10 ms, {trials} trials per system");
    println!("ferrolb: owner's speaker SIGKILLed and its link set down at once");
    let (ferrolb, lost) = ferrolb(trials, vip)?;
    println!("keepalived: owner's link set down");
    let results = vec![ferrolb, keepalived(trials, vip)?];
    println!("\n{:<32} client-visible outage", "system");
    for r in &results {
        match Summary::of(&r.outages) {
            Some(s) => println!("{:<32} {s}", r.system),
            None => println!("{:<32} no trials", r.system),
        }
    }
    let zero = lost.iter().filter(|l| **l == 0).count();
    println!(
        "ferrolb SIGTERM handover: {zero}/{} trials with zero lost probes (lost per trial {lost:?})",
        lost.len()
    );
    Ok(())
}
