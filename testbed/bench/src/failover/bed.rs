//! One system under test in a lab of its own ([`Bed`]): the client's probes and
//! neighbour watch on its VIPs, a trial failing their home and timing the takeover, and
//! ferrolb's SIGTERM handover.

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use super::daemons::{Daemons, Homed, start_ferrolb, start_keepalived};
use super::neigh::{NeighbourWatch, owner};
use super::{Failure, PROBE_EVERY, System, TAKEOVER_LIMIT};
use ferrolb_lab::client::{self, ProbeReport, ProbeStream};
use ferrolb_lab::keepalived::VrrpSpec;
use ferrolb_lab::speaker::Speaker;
use ferrolb_lab::{Error, Lab, LabConfig, addressing, wait};

/// Longest wait for the VIPs to come back to their preferred owner between trials.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// How long the client's entries must stay put before a trial. keepalived sends a
/// second round of gratuitous ARPs / NAs 5 s after becoming master (garp_master_delay),
/// but only while still master: the home's own falls into a trial harmlessly.
const QUIET: Duration = Duration::from_secs(1);

/// Waits until the client's entry for `vip` points at node `i`.
fn wait_back(lab: &Lab, vip: IpAddr, i: usize) -> Result<(), Error> {
    let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", &vip.to_string()]);
    client::wait_neighbour_mac(lab.client(), "eth0", vip, &addressing::node_mac(i), SETTLE_LIMIT)
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
    /// [`speaker::WITHOUT_REALTIME`](ferrolb_lab::speaker::WITHOUT_REALTIME)); keepalived ignores it.
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

    /// The node the trials fail: the first VIP's home ([`vips`](super::vips) gives both families
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
        let mac = addressing::node_mac(from);
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

impl Handover {
    /// Probes lost over every VIP.
    pub fn lost(&self) -> u64 {
        self.probes.iter().map(|(_, r)| r.lost()).sum()
    }
}
