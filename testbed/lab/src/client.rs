//! What a client sees: its neighbour table, probe streams (ICMP echo, TCP connect) with
//! loss gaps, HTTP.

mod arp;
mod flows;
mod http;
mod probe;
mod serve;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use serde_json::Value;

use crate::netns::Netns;
use crate::{Error, wait};

pub use self::http::{HttpServer, http_get, metric_sample};
pub use arp::{ArpProbes, ArpReport, OWNER_RUN};
pub use flows::{EchoServer, Flow, open as open_flows, split as flow_split};
pub use probe::{Gap, ProbeReport, ProbeStream, across as probe_across};

/// A neighbour-table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Neighbour {
    /// Link-layer address, lower case; None while INCOMPLETE/FAILED.
    pub mac: Option<String>,
    /// Kernel states ("REACHABLE", "STALE", …).
    pub state: Vec<String>,
}

/// The neighbour entry of `addr` on `dev` in `ns`, if the kernel has one.
pub fn neighbour(ns: &Netns, dev: &str, addr: IpAddr) -> Result<Option<Neighbour>, Error> {
    let text = ns.ip(&["-j", "neigh", "show", "to", &addr.to_string(), "dev", dev])?;
    let v: Value =
        serde_json::from_str(text.trim()).map_err(|e| Error::Parse(format!("ip -j neigh: {e}")))?;
    Ok(v.as_array().and_then(|a| a.first()).map(|e| Neighbour {
        mac: e["lladdr"].as_str().map(str::to_lowercase),
        state: e["state"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(String::from))
            .collect(),
    }))
}

/// Waits until `ns` resolves `addr` on `dev` to `mac`.
pub fn wait_neighbour_mac(
    ns: &Netns,
    dev: &str,
    addr: IpAddr,
    mac: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let want = mac.to_lowercase();
    wait::until_value(
        &format!("{} to resolve {addr} to {want}", ns.name()),
        timeout,
        || neighbour(ns, dev, addr),
        |n| n.as_ref().and_then(|n| n.mac.as_deref()) == Some(want.as_str()),
    )?;
    Ok(())
}

/// Pings `addr` from `ns` until its neighbour entry on `dev` holds `mac` (the ping makes
/// the kernel resolve it, and re-resolve a stale entry).
pub fn wait_resolved(ns: &Netns, dev: &str, addr: IpAddr, mac: &str, timeout: Duration) -> Result<(), Error> {
    let want = mac.to_lowercase();
    wait::until(&format!("{} to resolve {addr} to {want}", ns.name()), timeout, || {
        let _ = ns.exec_output(&["ping", "-c", "1", "-W", "1", "-I", dev, &addr.to_string()]);
        Ok((neighbour(ns, dev, addr)?.and_then(|n| n.mac).as_deref() == Some(want.as_str())).then_some(()))
    })?;
    Ok(())
}

/// The MACs that answer `arping` for `addr` from `dev` in `ns` (Habets arping,
/// `count` requests): exactly one for an address with a single owner.
pub fn arp_responders(ns: &Netns, dev: &str, addr: IpAddr, count: u32) -> Result<BTreeSet<String>, Error> {
    let out =
        ns.exec_output(&["arping", "-c", &count.to_string(), "-w", "300000", "-i", dev, &addr.to_string()])?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| l.split("bytes from ").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(|m| m.to_lowercase())
        .collect())
}

/// Every link-layer address that answers `ndisc6` for `addr` on `dev` in `ns`.
pub fn ndp_responders(ns: &Netns, dev: &str, addr: IpAddr) -> Result<BTreeSet<String>, Error> {
    let out = ns.exec_output(&["ndisc6", "-m", "-r", "2", "-w", "500", &addr.to_string(), dev])?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("Target link-layer address:"))
        .map(|m| m.trim().to_lowercase())
        .collect())
}

/// Sends a gratuitous ARP (as a request: sender IP = target IP) for `addr` from `dev`
/// in `ns`, using the Habets arping.
pub fn gratuitous_arp(ns: &Netns, dev: &str, addr: IpAddr) -> Result<(), Error> {
    let a = addr.to_string();
    let argv = ["arping", "-q", "-c", "1", "-U", "-i", dev, "-S", &a, &a];
    let out = ns.exec_output(&argv)?;
    // Exit 1 means "no reply", which is what an unsolicited ARP gets.
    match out.status.code() {
        Some(0 | 1) => Ok(()),
        _ => Err(Error::Command {
            command: argv.join(" "),
            detail: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        }),
    }
}
