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

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Summary;
use crate::client::{self, ProbeReport, ProbeStream};
use crate::keepalived::{Keepalived, VrrpSpec};
use crate::process::{Proc, Spawn};
use crate::speaker::{self, Speaker, yaml};
use crate::{Error, Lab, LabConfig, plan, wait};

/// How often the client probes each VIP.
pub const PROBE_EVERY: Duration = Duration::from_millis(10);
/// Longest wait for the client to resolve a VIP to a new owner. Without an
/// announcement it does when its entry fails: reachable time (15–45 s), delay (5 s),
/// three probes.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(60);
/// Longest wait for the VIPs to come back to their preferred owner between trials.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// How long the client's entries must stay put before a trial. keepalived sends a
/// second round of gratuitous ARPs / NAs 5 s after becoming master (garp_master_delay),
/// but only while still master: the home's own falls into a trial harmlessly.
const QUIET: Duration = Duration::from_secs(1);

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
/// gives the same node among node1 and node2 ([`plan::l2_vip_pair`]).
pub fn vips(families: &[Family]) -> Vec<IpAddr> {
    plan::l2_vip_pair().0.into_iter().filter(|v| families.contains(&Family::of(*v))).collect()
}

/// Which node the client currently sends the VIP's traffic to (by resolved MAC).
pub fn owner(lab: &Lab, vip: IpAddr) -> Result<Option<usize>, Error> {
    let n = client::neighbour(lab.client(), "eth0", vip)?;
    let mac = n.and_then(|n| n.mac);
    Ok(node_of_mac(lab, mac.as_deref()))
}

/// The lab node with this LAN MAC.
pub fn node_of_mac(lab: &Lab, mac: Option<&str>) -> Option<usize> {
    (1..=lab.nodes().len()).find(|i| mac == Some(plan::node_mac(*i).as_str()))
}

/// Waits until the client's entry for `vip` points at node `i`.
fn wait_back(lab: &Lab, vip: IpAddr, i: usize) -> Result<(), Error> {
    let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", &vip.to_string()]);
    client::wait_neighbour_mac(lab.client(), "eth0", vip, &plan::node_mac(i), SETTLE_LIMIT)
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
        let mark = plan::lan_v4(MARK.0).to_string();
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
fn mac_changes(log: &str, initial: &[(IpAddr, Option<String>)]) -> Vec<MacChange> {
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
fn utc(ts: &str) -> Option<SystemTime> {
    let t = ts.parse::<jiff::civil::DateTime>().ok()?.to_zoned(jiff::tz::TimeZone::UTC).ok()?;
    Some(SystemTime::from(t.timestamp()))
}

/// A time of day in UTC, to the millisecond (`04:52:35.688`).
pub fn clock(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let s = since.as_secs() % 86_400;
    format!("{:02}:{:02}:{:02}.{:03}", s / 3600, s / 60 % 60, s % 60, since.subsec_millis())
}

/// One system's daemons, node i's at index i - 1.
#[derive(Debug)]
enum Daemons {
    Ferrolb(Vec<Speaker>),
    Keepalived(Vec<Keepalived>),
}

impl Daemons {
    /// SIGKILLs node `i`'s daemon (keepalived: with its children).
    fn kill(&mut self, i: usize) {
        let at = i.saturating_sub(1);
        match self {
            Daemons::Ferrolb(s) => s.get_mut(at).into_iter().for_each(Speaker::kill),
            Daemons::Keepalived(k) => k.get_mut(at).into_iter().for_each(Keepalived::kill_all),
        }
    }

    /// Starts node `i`'s daemon again.
    fn restart(&mut self, lab: &Lab, i: usize) -> Result<(), Error> {
        let at = i.saturating_sub(1);
        match self {
            Daemons::Ferrolb(s) => s.get_mut(at).map_or(Ok(()), Speaker::restart),
            Daemons::Keepalived(k) => k.get_mut(at).map_or(Ok(()), |k| k.restart(lab)),
        }
    }
}

/// The ferrolb speakers' static file: the nodes, the L2 pool, one L2Advertisement,
/// one Service holding `vips`.
fn ferrolb_file(nodes: &[usize], vips: &[IpAddr]) -> String {
    let pool = [
        format!("{}-{}", plan::L2_POOL_V4.0, plan::L2_POOL_V4.1),
        format!("{}-{}", plan::L2_POOL_V6.0, plan::L2_POOL_V6.1),
    ];
    let pool: Vec<&str> = pool.iter().map(String::as_str).collect();
    let mut objects: Vec<String> = nodes.iter().map(|i| yaml::node(*i)).collect();
    objects.extend([
        yaml::pool("lan", &pool),
        yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]),
        yaml::service("web", vips),
    ]);
    yaml::stream(&objects)
}

/// A VIP and the node that holds it when nothing fails.
type Homed = (IpAddr, usize);

/// ferrolb speakers on every node of `lab` (membership defaults, 1 s handover grace),
/// the newest build, each run by `wrapper` (none: as it is); each VIP's home is the node
/// ferrolb's election picks.
fn start_ferrolb(lab: &Lab, vips: &[IpAddr], wrapper: &[&str]) -> Result<(Daemons, Vec<Homed>), Error> {
    let bin = crate::binary::newest("ferrolb-speaker")?;
    let key = speaker::write_membership_key(lab, "bench-failover-key")?.display().to_string();
    let nodes: Vec<usize> = (1..=lab.nodes().len()).collect();
    let file = ferrolb_file(&nodes, vips);
    for n in lab.nodes() {
        for vip in vips {
            lab.add_vip_on_lo(n, *vip)?;
        }
    }
    let flags = ["--membership-key-file", key.as_str()];
    let speakers = nodes
        .iter()
        .map(|i| Speaker::start_wrapped(lab, *i, &file, wrapper, &bin, &flags, &[]))
        .collect::<Result<_, _>>()?;
    let homes = vips.iter().map(|v| (*v, plan::owner(*v, &nodes))).collect();
    Ok((Daemons::Ferrolb(speakers), homes))
}

/// keepalived on every node of `lab`, one instance per VIP (`spec(vip, priority)`),
/// node i at priority 150 − 50 (i − 1): node1 is every VIP's home.
fn start_keepalived(
    lab: &Lab,
    vips: &[IpAddr],
    spec: impl Fn(IpAddr, u8) -> VrrpSpec,
) -> Result<(Daemons, Vec<Homed>), Error> {
    let mut daemons = Vec::new();
    for i in 1..=lab.nodes().len() {
        let priority = u8::try_from(150usize.saturating_sub(50 * (i - 1)).max(1)).unwrap_or(1);
        let specs: Vec<VrrpSpec> = vips.iter().map(|v| spec(*v, priority)).collect();
        daemons.push(Keepalived::start_instances(lab, lab.node(i), &format!("keepalived-node{i}"), &specs)?);
    }
    Ok((Daemons::Keepalived(daemons), vips.iter().map(|v| (*v, 1)).collect()))
}

/// One trial's figures for one VIP, and its probes for a timeline.
#[derive(Debug, Clone)]
pub struct Takeover {
    /// The VIP.
    pub vip: IpAddr,
    /// From the failure to the client's entry pointing at another node; None when it
    /// still pointed at the failed one after a minute.
    pub moved: Option<Duration>,
    /// When the owner failed, from the start of the probe stream.
    pub failed_at: Duration,
    /// The client's probes of the VIP: probe `i` went out `i` intervals after the start.
    pub probes: ProbeReport,
}

impl Takeover {
    /// The longest run without answers the client saw.
    pub fn outage(&self) -> Duration {
        self.probes.max_outage()
    }
}

/// One system running in a lab of its own, holding the VIPs, the client watching them.
#[derive(Debug)]
pub struct Bed {
    system: System,
    daemons: Daemons,
    watch: NeighbourWatch,
    vips: Vec<Homed>,
    // Last: its teardown follows the processes' ends.
    lab: Lab,
}

impl Bed {
    /// Builds a lab of `nodes` nodes, starts `system` on every node holding `vips`, and
    /// waits until the client reaches each VIP at its home.
    pub fn up(system: System, nodes: usize, vips: &[IpAddr]) -> Result<Bed, Error> {
        Self::up_wrapped(system, nodes, vips, &[])
    }

    /// Like [`Bed::up`], ferrolb's speakers run by `wrapper` (e.g.
    /// [`speaker::WITHOUT_REALTIME`]); keepalived ignores it.
    pub fn up_wrapped(system: System, nodes: usize, vips: &[IpAddr], wrapper: &[&str]) -> Result<Bed, Error> {
        let lab = Lab::up(LabConfig::nodes(nodes))?;
        for n in lab.nodes() {
            // The kernel flushes IPv6 addresses when a link goes down, and no network
            // manager here puts them back when it comes up again.
            n.sysctl("net.ipv6.conf.eth0.keep_addr_on_down", "1")?;
        }
        let (daemons, homed) = match system {
            System::Ferrolb => start_ferrolb(&lab, vips, wrapper)?,
            System::KeepalivedDefaults => start_keepalived(&lab, vips, VrrpSpec::defaults)?,
            System::KeepalivedV3(a) => start_keepalived(&lab, vips, |v, p| VrrpSpec::v3(v, p, a))?,
        };
        let watch = NeighbourWatch::start(&lab, vips)?;
        let bed = Bed { system, daemons, watch, vips: homed, lab };
        bed.settle()?;
        Ok(bed)
    }

    /// The lab.
    pub fn lab(&self) -> &Lab {
        &self.lab
    }

    /// The system running.
    pub fn system(&self) -> System {
        self.system
    }

    /// Each VIP and its home node.
    pub fn vips(&self) -> &[(IpAddr, usize)] {
        &self.vips
    }

    /// The client's neighbour entries for the VIPs.
    pub fn watch(&self) -> &NeighbourWatch {
        &self.watch
    }

    /// ferrolb only: each node's speaker log (its current process), node 1 first.
    pub fn speaker_logs(&self) -> Vec<String> {
        match &self.daemons {
            Daemons::Ferrolb(s) => s.iter().map(Speaker::logs).collect(),
            Daemons::Keepalived(_) => Vec::new(),
        }
    }

    /// Probe streams from the client to every VIP, each answered 20 times already.
    pub fn probe(&self) -> Result<Vec<ProbeStream>, Error> {
        Ok(self.probe_timed()?.into_iter().map(|(p, _)| p).collect())
    }

    /// [`Bed::probe`], each stream with when it started (to within a thread spawn).
    fn probe_timed(&self) -> Result<Vec<(ProbeStream, Instant)>, Error> {
        let probes = self
            .vips
            .iter()
            .map(|(v, _)| Ok((ProbeStream::start(self.lab.client(), *v, PROBE_EVERY)?, Instant::now())))
            .collect::<Result<Vec<_>, Error>>()?;
        for (p, _) in &probes {
            p.wait_answered(20, Duration::from_secs(10))?;
        }
        Ok(probes)
    }

    /// Waits until the client resolves every VIP to its home and no entry has moved
    /// for [`QUIET`].
    pub fn settle(&self) -> Result<(), Error> {
        for (vip, home) in &self.vips {
            wait_back(&self.lab, *vip, *home)?;
        }
        wait::until("the VIPs to stay at home", SETTLE_LIMIT, || {
            let last = self.watch.changes().last().map(|c| c.at);
            let still = last.is_none_or(|t| t.elapsed().unwrap_or_default() >= QUIET);
            for (vip, home) in &self.vips {
                if owner(&self.lab, *vip)? != Some(*home) {
                    return Ok(None);
                }
            }
            Ok(still.then_some(()))
        })
    }

    /// The node the trials fail: the first VIP's home ([`vips`] gives both families
    /// the same among two nodes).
    fn home(&self) -> Result<usize, Error> {
        self.vips.first().map(|v| v.1).ok_or_else(|| Error::Missing("a failover trial needs a VIP".into()))
    }

    /// One trial: settle, probe every VIP, fail their home, wait until the client
    /// resolves each to another node and is answered again, restore the home. Only the
    /// lab failing is an error; a system that does not take over shows in the figures.
    pub fn trial(&mut self, failure: Failure) -> Result<Vec<Takeover>, Error> {
        let home = self.home()?;
        self.settle()?;
        let probes = self.probe_timed()?;
        let (failed, failed_mono) = (SystemTime::now(), Instant::now());
        let observed = self.fail(home, failure).map(|()| {
            let moved = self.wait_moved(home, failed);
            if moved.iter().all(Option::is_some) {
                // Probes never answered again make the outage last to the stream's end.
                let _ = probes.iter().try_for_each(|(p, _)| p.wait_answered(20, TAKEOVER_LIMIT));
            }
            moved
        });
        let reports: Vec<(ProbeReport, Duration)> = probes
            .into_iter()
            .map(|(p, started)| {
                (p.stop(Duration::from_millis(200)), failed_mono.saturating_duration_since(started))
            })
            .collect();
        self.restore(home, failure)?;
        let moved = observed?;
        Ok(self
            .vips
            .iter()
            .zip(reports.into_iter().zip(moved))
            .map(|((vip, _), ((probes, failed_at), moved))| Takeover { vip: *vip, moved, failed_at, probes })
            .collect())
    }

    fn fail(&mut self, node: usize, failure: Failure) -> Result<(), Error> {
        match failure {
            Failure::Kill => {
                self.daemons.kill(node);
                Ok(())
            }
            Failure::LinkDown => self.lab.node(node).ip(&["link", "set", "eth0", "down"]).map(drop),
        }
    }

    fn restore(&mut self, node: usize, failure: Failure) -> Result<(), Error> {
        match failure {
            Failure::Kill => self.daemons.restart(&self.lab, node),
            Failure::LinkDown => self.lab.node(node).ip(&["link", "set", "eth0", "up"]).map(drop),
        }
    }

    /// Waits up to [`TAKEOVER_LIMIT`] until the client resolves every VIP to a node other
    /// than `from`; returns how long after `since` each moved, if it did.
    fn wait_moved(&self, from: usize, since: SystemTime) -> Vec<Option<Duration>> {
        let mac = plan::node_mac(from);
        let moved = || {
            let changes = self.watch.changes();
            let first =
                |vip: &IpAddr| changes.iter().find(|c| c.addr == *vip && c.at >= since && c.mac != mac);
            self.vips.iter().map(|(vip, _)| first(vip)?.at.duration_since(since).ok()).collect::<Vec<_>>()
        };
        let all = wait::until("the client to resolve the VIPs elsewhere", TAKEOVER_LIMIT, || {
            Ok(Some(moved()).filter(|m| m.iter().all(Option::is_some)))
        });
        all.unwrap_or_else(|_| moved())
    }

    /// ferrolb only: the home's speaker is SIGTERMed, then the node stops accepting the
    /// VIPs (their addresses leave `lo`). The speaker and the addresses are put back after.
    pub fn handover(&mut self) -> Result<Handover, Error> {
        let home = self.home()?;
        self.settle()?;
        let probes = self.probe()?;
        let Daemons::Ferrolb(speakers) = &mut self.daemons else {
            return Err(Error::Missing("the SIGTERM handover is ferrolb's".into()));
        };
        let speaker =
            speakers.get_mut(home - 1).ok_or_else(|| Error::Missing(format!("no speaker on node{home}")))?;
        let code = speaker.terminate(Duration::from_secs(15));
        let node = self.lab.node(home);
        for (vip, _) in &self.vips {
            let len = if vip.is_ipv4() { 32 } else { 128 };
            node.ip(&["addr", "del", &format!("{vip}/{len}"), "dev", "lo"])?;
        }
        for p in &probes {
            p.wait_sent(30, Duration::from_secs(5))?;
        }
        let reports =
            self.vips.iter().map(|v| v.0).zip(probes.into_iter().map(|p| p.stop(Duration::from_millis(100))));
        let reports = reports.collect();
        for (vip, _) in &self.vips {
            self.lab.add_vip_on_lo(node, *vip)?;
        }
        speaker.restart()?;
        Ok(Handover { exit: code, probes: reports })
    }
}

/// A SIGTERM handover trial.
#[derive(Debug, Clone)]
pub struct Handover {
    /// The speaker's exit code, if it exited within 15 s.
    pub exit: Option<i32>,
    /// Each VIP's probes.
    pub probes: Vec<(IpAddr, ProbeReport)>,
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
    println!("  ferrolb speaker binary: {}", crate::binary::newest("ferrolb-speaker")?.display());
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

impl Handover {
    /// Probes lost over every VIP.
    pub fn lost(&self) -> u64 {
        self.probes.iter().map(|(_, r)| r.lost()).sum()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_lines_give_mac_changes_only() {
        let v4: IpAddr = "192.0.2.200".parse().unwrap();
        let v6: IpAddr = "2001:db8::200".parse().unwrap();
        let log = "[1970-01-01T00:00:01.500000] 192.0.2.200 lladdr 00:00:5e:00:53:11 REACHABLE \n\
                   [1970-01-01T00:00:02.000000] 192.0.2.200 lladdr 00:00:5E:00:53:12 STALE \n\
                   [1970-01-01T00:00:02.100000] 2001:db8::200 lladdr 00:00:5e:00:53:12 STALE \n\
                   [1970-01-01T00:00:02.200000] Deleted 192.0.2.200 lladdr 00:00:5e:00:53:12 STALE \n\
                   [1970-01-01T00:00:02.300000] 192.0.2.99 lladdr 00:00:5e:00:53:99 NOARP \n\
                   [1970-01-01T00:00:02.400000] 192.0.2.200  FAILED \n\
                   [1970-01-01T00:00:03.000000] 192.0.2.200 lladdr 00:00:5e:00:53:12 REACHABLE \n\
                   [1970-01-01T00:00:04.000000] 192.0.2.200 lladdr 00:00:5e:00:53:11 STA";
        let initial = [(v4, Some("00:00:5e:00:53:11".to_string())), (v6, None)];
        let c = mac_changes(log, &initial);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!((c[0].addr, c[0].mac.as_str()), (v4, "00:00:5e:00:53:12"));
        assert_eq!(c[0].at, UNIX_EPOCH + Duration::from_secs(2));
        assert_eq!((c[1].addr, c[1].at), (v6, UNIX_EPOCH + Duration::from_millis(2100)));
    }

    #[test]
    fn utc_timestamps_read_back() {
        // date -u -d 2026-11-26T04:52:35 +%s
        let t = utc("2026-11-26T04:52:35.688602").unwrap();
        assert_eq!(t, UNIX_EPOCH + Duration::from_secs(1_795_668_755) + Duration::from_micros(688_602));
        assert_eq!(utc("2000-03-01T00:00:00.000000").unwrap(), UNIX_EPOCH + Duration::from_secs(951_868_800));
        assert_eq!(clock(t), "04:52:35.688");
        assert!(utc("yesterday").is_none());
    }

    #[test]
    fn filters_parse() {
        assert_eq!("v6".parse::<Family>(), Ok(Family::V6));
        assert_eq!("link".parse::<Failure>(), Ok(Failure::LinkDown));
        assert!("both".parse::<Failure>().is_err());
        assert_eq!(vips(&[Family::V6]).len(), 1);
        assert!(vips(&Family::ALL)[0].is_ipv4());
    }
}
