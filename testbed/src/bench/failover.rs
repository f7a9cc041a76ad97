//! `bench failover`: the outage a client sees when the node owning an L2 VIP fails,
//! over several trials, for each system in the same run.

use std::net::IpAddr;
use std::time::Duration;

use super::Summary;
use crate::client::{self, ProbeStream};
use crate::keepalived::{Keepalived, VrrpSpec};
use crate::{Error, Lab, LabConfig, plan, wait};

/// How the owner fails in a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Its LAN link goes down (a dead node, as the network sees it).
    LinkDown,
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
    let probe = ProbeStream::start(lab.client(), vip, Duration::from_millis(10))?;
    std::thread::sleep(Duration::from_millis(500));
    let owner = wait::until("an owner answering the VIP", Duration::from_secs(20), || owner(lab, vip))?;
    let node = lab.node(owner);
    let (_, before) = probe.counts();
    match failure {
        Failure::LinkDown => node.ip(&["link", "set", "eth0", "down"])?,
    };
    let resumed = wait::until("probes to resume", Duration::from_secs(30), || {
        let (_, now) = probe.counts();
        Ok((now >= before + 20).then_some(()))
    });
    std::thread::sleep(Duration::from_millis(200));
    let report = probe.stop(Duration::from_millis(200));
    match failure {
        Failure::LinkDown => node.ip(&["link", "set", "eth0", "up"])?,
    };
    resumed?;
    Ok(report.max_outage())
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
    println!("bench failover: owner's link set down, client probes {vip} every 10 ms, {trials} trials");
    let results = vec![keepalived(trials, vip)?];
    println!("\n{:<32} client-visible outage", "system");
    for r in &results {
        match Summary::of(&r.outages) {
            Some(s) => println!("{:<32} {s}", r.system),
            None => println!("{:<32} no trials", r.system),
        }
    }
    println!("ferrolb: not measured yet — its L2 announcer is not wired into ferrolb-speaker in this build");
    Ok(())
}
