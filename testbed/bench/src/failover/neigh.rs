//! The client's neighbour entries: which node a VIP resolves to now, and
//! `ip -ts monitor neigh` stamping every change of the MAC it resolves to.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrolb_lab::client;
use ferrolb_lab::process::{Proc, Spawn};
use ferrolb_lab::{Error, Lab, addressing, wait};

/// Which node the client currently sends the VIP's traffic to (by resolved MAC).
pub fn owner(lab: &Lab, vip: IpAddr) -> Result<Option<usize>, Error> {
    let n = client::neighbour(lab.client(), "eth0", vip)?;
    let mac = n.and_then(|n| n.mac);
    Ok(node_of_mac(lab, mac.as_deref()))
}

/// The lab node with this LAN MAC.
pub fn node_of_mac(lab: &Lab, mac: Option<&str>) -> Option<usize> {
    (1..=lab.nodes().len()).find(|i| mac == Some(addressing::node_mac(*i).as_str()))
}

/// A change of the MAC the client resolves an address to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacChange {
    /// The address.
    pub addr: IpAddr,
    /// When `ip monitor` read it from the kernel.
    pub at: SystemTime,
    /// The new MAC, lower case.
    pub mac: String,
}

/// An address of the LAN no lab member uses: the watch sets an entry for it to see
/// that `ip monitor` listens.
const MARK: (u8, &str) = (99, "00:00:5e:00:53:99");

/// `ip -ts monitor neigh` in the client namespace: every change of the client's
/// neighbour entries, stamped by `ip` as it reads it from the kernel.
#[derive(Debug)]
pub struct NeighbourWatch {
    proc: Proc,
    initial: Vec<(IpAddr, Option<String>)>,
}

impl NeighbourWatch {
    /// Starts watching the client's entries for `addrs`; returns once `ip` listens.
    pub fn start(lab: &Lab, addrs: &[IpAddr]) -> Result<Self, Error> {
        let c = lab.client();
        let argv = ["stdbuf", "-oL", "ip", "-ts", "monitor", "neigh", "dev", "eth0"];
        // ip stamps lines in local time: UTC reads back without a time zone database.
        let proc = lab.spawn(c, Spawn::new("client-neigh-monitor", &argv).env("TZ", "UTC"))?;
        let mark = addressing::lan_v4(MARK.0).to_string();
        wait::until("ip monitor neigh to listen", Duration::from_secs(10), || {
            // A new entry each time: rewriting an unchanged one is not reported.
            let _ = c.ip(&["neigh", "del", &mark, "dev", "eth0"]);
            c.ip(&["neigh", "replace", &mark, "lladdr", MARK.1, "nud", "noarp", "dev", "eth0"])?;
            Ok(proc.logs().contains(&format!("] {mark} lladdr")).then_some(()))
        })?;
        c.ip(&["neigh", "del", &mark, "dev", "eth0"])?;
        let initial = addrs
            .iter()
            .map(|a| Ok((*a, client::neighbour(c, "eth0", *a)?.and_then(|n| n.mac))))
            .collect::<Result<_, Error>>()?;
        Ok(NeighbourWatch { proc, initial })
    }

    /// Every change of the MAC a watched address resolves to so far, in order.
    pub fn changes(&self) -> Vec<MacChange> {
        mac_changes(&self.proc.logs(), &self.initial)
    }
}

/// The MAC changes of `initial`'s addresses in `ip -ts monitor neigh` output.
pub(super) fn mac_changes(log: &str, initial: &[(IpAddr, Option<String>)]) -> Vec<MacChange> {
    let mut current = initial.to_vec();
    let mut out = Vec::new();
    // A line still being written has no newline yet.
    for line in log.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let Some((at, addr, mac)) = neigh_line(line) else { continue };
        let Some((_, cur)) = current.iter_mut().find(|(a, _)| *a == addr) else { continue };
        if cur.as_deref() != Some(mac.as_str()) {
            *cur = Some(mac.clone());
            out.push(MacChange { addr, at, mac });
        }
    }
    out
}

/// `[2026-11-26T04:52:35.688602] 192.0.2.200 lladdr 00:00:5e:00:53:12 STALE`: when,
/// which address, which MAC. None for other lines and entries without a MAC (deleted,
/// INCOMPLETE, FAILED).
fn neigh_line(line: &str) -> Option<(SystemTime, IpAddr, String)> {
    let (ts, rest) = line.trim().strip_prefix('[')?.split_once("] ")?;
    let mut words = rest.split_whitespace();
    let addr: IpAddr = words.next()?.parse().ok()?;
    let mac = words.skip_while(|w| *w != "lladdr").nth(1)?;
    Some((utc(ts)?, addr, mac.to_lowercase()))
}

/// `2026-11-26T04:52:35.688602`, in UTC.
pub(super) fn utc(ts: &str) -> Option<SystemTime> {
    let t = ts.parse::<jiff::civil::DateTime>().ok()?.to_zoned(jiff::tz::TimeZone::UTC).ok()?;
    Some(SystemTime::from(t.timestamp()))
}

/// A time of day in UTC, to the millisecond (`04:52:35.688`).
pub fn clock(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let s = since.as_secs() % 86_400;
    format!("{:02}:{:02}:{:02}.{:03}", s / 3600, s / 60 % 60, s % 60, since.subsec_millis())
}
