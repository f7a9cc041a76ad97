//! One interface's responder task: answers ARP and NS for the owned addresses and sends
//! the takeover announcements. Its owned set arrives through a watch channel; the
//! sockets live as long as the task.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::arp::{self, ArpPacket, BROADCAST_MAC, Mac, Operation};
use super::links::Link;
use super::ndp::{self, ALL_NODES, ND_HOP_LIMIT, NdMessage, TYPE_NA, TYPE_NS};
use super::socket::{ArpSocket, NdpSocket};
use super::{L2Metrics, Report};

/// A running responder; dropping it stops the task and closes its sockets.
pub(super) struct Worker {
    pub(super) name: String,
    pub(super) mac: Mac,
    pub(super) owned: watch::Sender<BTreeSet<IpAddr>>,
    /// Bumped to announce every owned address again (see [`super::L2Handle::reannounce`]).
    pub(super) reannounce: watch::Sender<u64>,
    /// Owned addresses answered but not announced (see [`super::L2Handle::set_quiet`]).
    pub(super) quiet: watch::Sender<BTreeSet<IpAddr>>,
    task: JoinHandle<()>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Worker {
    /// Opens the interface's sockets and starts answering for `owned`.
    pub(super) fn spawn(
        link: &Link,
        owned: BTreeSet<IpAddr>,
        quiet: BTreeSet<IpAddr>,
        takeover: Arc<[Duration]>,
        metrics: L2Metrics,
        reports: mpsc::UnboundedSender<Report>,
    ) -> io::Result<Worker> {
        let mac = link.mac.ok_or_else(|| io::Error::other("interface has no MAC address"))?;
        let arp = ArpSocket::open(link.index)?;
        let ndp = NdpSocket::open(&link.name, link.index)?;
        let (tx, rx) = watch::channel(owned);
        let (re_tx, re_rx) = watch::channel(0);
        let (quiet_tx, quiet_rx) = watch::channel(quiet);
        let r = Responder {
            interface: link.name.clone(),
            mac,
            arp,
            ndp,
            takeover,
            metrics,
            reports,
            owned: BTreeSet::new(),
            groups: BTreeSet::new(),
            bursts: BTreeMap::new(),
            quiet: BTreeSet::new(),
        };
        let task = tokio::spawn(r.run(rx, re_rx, quiet_rx));
        Ok(Worker { name: link.name.clone(), mac, owned: tx, reannounce: re_tx, quiet: quiet_tx, task })
    }
}

struct Responder {
    interface: String,
    mac: Mac,
    arp: ArpSocket,
    ndp: NdpSocket,
    takeover: Arc<[Duration]>,
    metrics: L2Metrics,
    reports: mpsc::UnboundedSender<Report>,
    owned: BTreeSet<IpAddr>,
    /// Solicited-node groups joined.
    groups: BTreeSet<Ipv6Addr>,
    /// Pending announcements: (due, address) → (burst start, step).
    bursts: BTreeMap<(Instant, IpAddr), (Instant, usize)>,
    /// Addresses being handed over: answered, never announced.
    quiet: BTreeSet<IpAddr>,
}

impl Responder {
    async fn run(
        mut self,
        mut owned: watch::Receiver<BTreeSet<IpAddr>>,
        mut reannounce: watch::Receiver<u64>,
        mut quiet: watch::Receiver<BTreeSet<IpAddr>>,
    ) {
        let mut arp_buf = vec![0u8; 2048];
        let mut ndp_buf = vec![0u8; 2048];
        self.quiet = quiet.borrow_and_update().clone();
        let initial = owned.borrow_and_update().clone();
        self.set_owned(initial);
        let mut quiet_open = true;
        let mut reannounce_open = true;
        loop {
            let next = self.bursts.keys().next().map(|(due, _)| *due);
            tokio::select! {
                biased;
                changed = owned.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let new = owned.borrow_and_update().clone();
                    self.set_owned(new);
                }
                r = reannounce.changed(), if reannounce_open => match r {
                    Ok(()) => {
                        reannounce.borrow_and_update();
                        self.restart_bursts();
                    }
                    Err(_) => reannounce_open = false,
                },
                r = quiet.changed(), if quiet_open => match r {
                    Ok(()) => {
                        let new = quiet.borrow_and_update().clone();
                        self.set_quiet(new);
                    }
                    Err(_) => quiet_open = false,
                },
                _ = sleep_until(next), if next.is_some() => self.send_due().await,
                r = self.arp.recv(&mut arp_buf) => match r {
                    Ok(n) => self.on_arp(arp_buf.get(..n).unwrap_or_default()).await,
                    Err(e) => tracing::debug!(interface = %self.interface, error = %e, "ARP receive failed"),
                },
                r = self.ndp.recv(&mut ndp_buf) => match r {
                    Ok(rx) => {
                        let msg = ndp_buf.get(..rx.len).unwrap_or_default().to_vec();
                        self.on_ndp(&msg, rx.src, rx.hop_limit).await;
                    }
                    Err(e) => tracing::debug!(interface = %self.interface, error = %e, "ICMPv6 receive failed"),
                },
            }
        }
    }

    fn set_owned(&mut self, new: BTreeSet<IpAddr>) {
        let now = Instant::now();
        if let Some(first) = self.takeover.first() {
            for a in new.difference(&self.owned).filter(|a| !self.quiet.contains(a)) {
                self.bursts.insert((now + *first, *a), (now, 0));
            }
        }
        self.bursts.retain(|(_, a), _| new.contains(a));
        let groups: BTreeSet<Ipv6Addr> = new
            .iter()
            .filter_map(|a| match a {
                IpAddr::V6(v6) => Some(ndp::solicited_node(*v6)),
                IpAddr::V4(_) => None,
            })
            .collect();
        for g in self.groups.difference(&groups) {
            if let Err(e) = self.ndp.leave(*g) {
                tracing::debug!(interface = %self.interface, group = %g, error = %e, "leaving group failed");
            }
        }
        for g in groups.difference(&self.groups) {
            if let Err(e) = self.ndp.join(*g) {
                tracing::warn!(interface = %self.interface, group = %g, error = %e, "cannot join the solicited-node group; NS for it will not be seen");
            }
        }
        self.groups = groups;
        self.owned = new;
    }

    /// Starts the takeover burst again for every owned address (pending ones restart).
    fn restart_bursts(&mut self) {
        let Some(first) = self.takeover.first() else { return };
        let now = Instant::now();
        self.bursts.clear();
        for a in self.owned.difference(&self.quiet) {
            self.bursts.insert((now + *first, *a), (now, 0));
        }
    }

    /// Make before break: an address being handed over keeps being answered, but an
    /// announcement of it still pending from this node's own takeover would move clients
    /// back from the successor, and lose their traffic once this node stops answering.
    /// An address that stops being quiet while still owned is announced afresh.
    fn set_quiet(&mut self, new: BTreeSet<IpAddr>) {
        self.bursts.retain(|(_, a), _| !new.contains(a));
        if let Some(first) = self.takeover.first() {
            let now = Instant::now();
            for a in self.quiet.difference(&new).filter(|a| self.owned.contains(a)) {
                self.bursts.insert((now + *first, *a), (now, 0));
            }
        }
        self.quiet = new;
    }

    async fn send_due(&mut self) {
        let now = Instant::now();
        while let Some(entry) = self.bursts.first_entry() {
            let (due, addr) = *entry.key();
            if due > now {
                break;
            }
            let (start, step) = entry.remove();
            match self.announce(addr).await {
                Ok(()) => {
                    self.metrics.count_gratuitous(addr);
                    // Every success is reported, not only the first step's: when the
                    // first send failed, a later one is the address's first announcement.
                    let _ = self.reports.send(Report::Announced(addr));
                }
                Err(e) => {
                    tracing::warn!(interface = %self.interface, address = %addr, error = %e, "takeover announcement failed")
                }
            }
            if let Some(off) = self.takeover.get(step + 1) {
                self.bursts.insert((start + *off, addr), (start, step + 1));
            }
        }
    }

    async fn announce(&self, addr: IpAddr) -> io::Result<()> {
        match addr {
            IpAddr::V4(ip) => {
                let frame = arp::encode_frame(BROADCAST_MAC, self.mac, &ArpPacket::gratuitous(self.mac, ip));
                self.arp.send(&frame).await.map(|_| ())
            }
            IpAddr::V6(ip) => {
                let na = ndp::advertisement(ip, self.mac, false).to_bytes();
                self.ndp.send(ip, ALL_NODES, &na).await.map(|_| ())
            }
        }
    }

    async fn on_arp(&self, frame: &[u8]) {
        let (eth, req) = match arp::decode_frame(frame) {
            Ok(x) => x,
            Err(e) => {
                self.metrics.count_malformed("arp");
                tracing::trace!(interface = %self.interface, error = %e, "dropped ARP frame");
                return;
            }
        };
        // Our own frames loop back to packet sockets; announcements need no answer.
        if eth.src == self.mac || req.operation != Operation::Request || req.is_gratuitous() {
            return;
        }
        let target = IpAddr::V4(req.target_ip);
        if !self.owned.contains(&target) {
            return;
        }
        self.metrics.count_request(target);
        let reply = arp::encode_frame(eth.src, self.mac, &req.reply(self.mac));
        match self.arp.send(&reply).await {
            Ok(_) => self.metrics.count_reply(target),
            Err(e) => tracing::debug!(interface = %self.interface, error = %e, "ARP reply failed"),
        }
    }

    async fn on_ndp(&self, msg: &[u8], src: Ipv6Addr, hop_limit: Option<i32>) {
        let kind = msg.first().copied();
        if kind != Some(TYPE_NS) && kind != Some(TYPE_NA) {
            return; // other ICMPv6 (echo, RA, MLD) reaches raw sockets too
        }
        // RFC 4861 §7.1.1: a hop limit other than 255 means it crossed a router.
        if hop_limit != Some(i32::from(ND_HOP_LIMIT)) {
            self.metrics.count_malformed("ndp");
            return;
        }
        let ns = match NdMessage::decode(&mut &msg[..]) {
            Ok(NdMessage::Solicitation(ns)) => ns,
            Ok(NdMessage::Advertisement(_)) => return,
            Err(e) => {
                self.metrics.count_malformed("ndp");
                tracing::trace!(interface = %self.interface, error = %e, "dropped NDP message");
                return;
            }
        };
        let target = IpAddr::V6(ns.target);
        if !self.owned.contains(&target) {
            return;
        }
        // RFC 4861 §7.1.1: DAD probes (from ::) carry no source link-layer option.
        if src.is_unspecified() && ns.source_mac().is_some() {
            self.metrics.count_malformed("ndp");
            return;
        }
        self.metrics.count_request(target);
        // §7.2.4: answer a DAD probe to all-nodes, unsolicited; otherwise unicast, solicited.
        let (dst, solicited) = if src.is_unspecified() { (ALL_NODES, false) } else { (src, true) };
        let na = ndp::advertisement(ns.target, self.mac, solicited).to_bytes();
        match self.ndp.send(ns.target, dst, &na).await {
            Ok(_) => self.metrics.count_reply(target),
            Err(e) => tracing::debug!(interface = %self.interface, error = %e, "NA failed"),
        }
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
