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

use crate::time::sleep_until;

use super::arp::{self, ArpPacket, BROADCAST_MAC, Mac, Operation};
use super::conflict::{self, Conflicts};
use super::links::Link;
use super::ndp::{self, ALL_NODES, ND_HOP_LIMIT, NdMessage, TYPE_NA, TYPE_NS};
use super::socket::{ArpSocket, NdFrameSocket, NdpSocket};
use super::{Again, L2Metrics, Modes, Report, active_active};

/// A running responder; dropping it stops the task and closes its sockets.
pub(super) struct Worker {
    pub(super) name: String,
    pub(super) mac: Mac,
    pub(super) owned: watch::Sender<BTreeSet<IpAddr>>,
    /// Bumped to announce every owned address again (see [`super::L2Handle::reannounce`]
    /// and [`super::L2Handle::renew`]).
    pub(super) reannounce: watch::Sender<Again>,
    /// Owned addresses answered but not announced, or answered with their virtual MAC.
    pub(super) modes: watch::Sender<Modes>,
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
        modes: Modes,
        takeover: Arc<[Duration]>,
        metrics: L2Metrics,
        reports: mpsc::UnboundedSender<Report>,
    ) -> io::Result<Worker> {
        let mac = link.mac.ok_or_else(|| io::Error::other("interface has no MAC address"))?;
        let arp = ArpSocket::open(link.index)?;
        let ndp = NdpSocket::open(&link.name, link.index)?;
        let nd_frames = NdFrameSocket::open(link.index)?;
        let (tx, rx) = watch::channel(owned);
        let (re_tx, re_rx) = watch::channel(Again::default());
        let (modes_tx, modes_rx) = watch::channel(modes);
        let r = Responder {
            interface: link.name.clone(),
            mac,
            arp,
            ndp,
            nd_frames,
            takeover,
            metrics,
            reports,
            owned: BTreeSet::new(),
            groups: BTreeSet::new(),
            bursts: BTreeMap::new(),
            quiet: BTreeSet::new(),
            shared: BTreeSet::new(),
            conflicts: Conflicts::new(mac),
        };
        let task = tokio::spawn(r.run(rx, re_rx, modes_rx));
        Ok(Worker { name: link.name.clone(), mac, owned: tx, reannounce: re_tx, modes: modes_tx, task })
    }
}

struct Responder {
    interface: String,
    mac: Mac,
    arp: ArpSocket,
    ndp: NdpSocket,
    /// Where NS and NA are read: every one that reaches the interface.
    nd_frames: NdFrameSocket,
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
    /// Addresses served active-active: answered with their virtual MAC.
    shared: BTreeSet<IpAddr>,
    /// Other MACs answering for owned addresses ([`conflict`]).
    conflicts: Conflicts,
}

impl Responder {
    async fn run(
        mut self,
        mut owned: watch::Receiver<BTreeSet<IpAddr>>,
        mut reannounce: watch::Receiver<Again>,
        mut modes: watch::Receiver<Modes>,
    ) {
        let mut arp_buf = vec![0u8; 2048];
        let mut ndp_buf = vec![0u8; 2048];
        let first = modes.borrow_and_update().clone();
        self.quiet = first.quiet;
        self.shared = first.shared;
        let initial = owned.borrow_and_update().clone();
        self.set_owned(initial);
        let mut modes_open = true;
        let mut reannounce_open = true;
        let mut renewed = 0;
        loop {
            let next = self.bursts.keys().next().map(|(due, _)| *due);
            let probe = self.conflicts.poll_timeout();
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
                        let asked = *reannounce.borrow_and_update();
                        if asked.renew != renewed {
                            renewed = asked.renew;
                            self.on_conflict(conflict::Input::Renew).await;
                        }
                        self.restart_bursts();
                    }
                    Err(_) => reannounce_open = false,
                },
                r = modes.changed(), if modes_open => match r {
                    Ok(()) => {
                        let new = modes.borrow_and_update().clone();
                        self.shared = new.shared;
                        self.set_quiet(new.quiet);
                    }
                    Err(_) => modes_open = false,
                },
                _ = sleep_until(next), if next.is_some() => self.send_due().await,
                _ = sleep_until(probe), if probe.is_some() => {
                    self.on_conflict(conflict::Input::Timeout).await;
                }
                r = self.arp.recv(&mut arp_buf) => match r {
                    Ok(n) => self.on_arp(arp_buf.get(..n).unwrap_or_default()).await,
                    Err(e) => tracing::debug!(interface = %self.interface, error = %e, "ARP receive failed"),
                },
                r = self.nd_frames.recv(&mut ndp_buf) => match r {
                    Ok(n) => {
                        let frame = ndp_buf.get(..n).unwrap_or_default().to_vec();
                        self.on_nd_frame(&frame).await;
                    }
                    Err(e) => tracing::debug!(interface = %self.interface, error = %e, "ND frame receive failed"),
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
        self.owned_to_conflicts();
    }

    /// Tells conflict detection what is owned and what is being handed over.
    fn owned_to_conflicts(&mut self) {
        let input = conflict::Input::Owned { owned: self.owned.clone(), quiet: self.quiet.clone() };
        let before = self.conflicts.yielded_count();
        self.conflicts.handle(Instant::now().into_std(), input);
        self.count_yielded(before);
    }

    fn count_yielded(&self, before: usize) {
        let after = self.conflicts.yielded_count();
        let delta = i64::try_from(after).unwrap_or(i64::MAX) - i64::try_from(before).unwrap_or(i64::MAX);
        if delta != 0 {
            self.metrics.add_yielded(delta);
        }
    }

    /// Feeds conflict detection, sends the probes it asks for and acts on its events.
    async fn on_conflict(&mut self, input: conflict::Input) {
        let before = self.conflicts.yielded_count();
        self.conflicts.handle(Instant::now().into_std(), input);
        self.count_yielded(before);
        while let Some(addr) = self.conflicts.poll_transmit() {
            if let Err(e) = self.probe(addr).await {
                tracing::debug!(interface = %self.interface, address = %addr, error = %e, "conflict probe failed");
            }
        }
        while let Some(event) = self.conflicts.poll_event() {
            self.on_conflict_event(event);
        }
    }

    fn on_conflict_event(&mut self, event: conflict::Event) {
        let interface = &self.interface;
        let mac = |m: &Mac| arp::mac_to_string(m);
        match event {
            conflict::Event::Conflict { addr, other, won: true } => {
                self.metrics.count_conflict("won");
                tracing::warn!(%interface, address = %addr, other = %mac(&other),
                    "L2 address conflict: {} also answers for {addr}; this node outranks it and keeps the address", mac(&other));
            }
            conflict::Event::Reclaim { addr, other } => {
                tracing::info!(%interface, address = %addr, other = %mac(&other),
                    "L2 address conflict: announcing {addr} again, so clients that followed {} come back", mac(&other));
                self.announce_again(addr);
            }
            conflict::Event::Conflict { addr, other, won: false } => {
                self.metrics.count_conflict("yielded");
                tracing::warn!(%interface, address = %addr, other = %mac(&other),
                    "L2 address conflict: {} also answers for {addr} and outranks this node: no longer answering for it \
                     (membership between the two nodes is split, or a device on the LAN holds the address)", mac(&other));
                self.bursts.retain(|(_, a), _| *a != addr);
            }
            conflict::Event::Foreign { addr, other } => {
                self.metrics.count_conflict("foreign");
                tracing::error!(%interface, address = %addr, other = %mac(&other),
                    "L2 address conflict: {} keeps answering for {addr} although it does not outrank this node: \
                     it is no ferrolb node of this release; remove the address from that device or from the pool", mac(&other));
            }
            conflict::Event::Renewed { addr, other, resumed } => {
                tracing::info!(%interface, address = %addr, other = %mac(&other), resumed,
                    "L2 address conflict left to membership: it elected this node for {addr} again");
            }
            conflict::Event::Resolved { addr, other, resumed } => {
                tracing::info!(%interface, address = %addr, other = %mac(&other),
                    "L2 address conflict over: {} no longer answers for {addr}", mac(&other));
                if resumed {
                    self.announce_again(addr);
                }
            }
        }
        let _ = self.reports.send(Report::Conflict(event));
    }

    /// Starts the takeover burst of one owned address again.
    fn announce_again(&mut self, addr: IpAddr) {
        let Some(first) = self.takeover.first() else { return };
        if !self.owned.contains(&addr) || self.quiet.contains(&addr) {
            return;
        }
        let now = Instant::now();
        self.bursts.retain(|(_, a), _| *a != addr);
        self.bursts.insert((now + *first, addr), (now, 0));
    }

    /// The MAC `addr` is answered with: its virtual MAC when served active-active (the
    /// frames still leave from this interface's own MAC, so no switch learns it).
    fn answer_mac(&self, addr: IpAddr) -> Mac {
        if self.shared.contains(&addr) { active_active::virtual_mac(addr) } else { self.mac }
    }

    /// Another MAC speaking for `addr`: the address's virtual MAC is every node's answer.
    fn is_other(&self, addr: IpAddr, mac: Mac) -> bool {
        mac != self.mac && mac != self.answer_mac(addr)
    }

    async fn probe(&self, addr: IpAddr) -> io::Result<()> {
        match addr {
            IpAddr::V4(ip) => {
                let frame = arp::encode_frame(BROADCAST_MAC, self.mac, &ArpPacket::probe(self.mac, ip));
                self.arp.send(&frame).await.map(|_| ())
            }
            IpAddr::V6(ip) => {
                let ns = ndp::probe(ip).to_bytes();
                self.ndp.send(Ipv6Addr::UNSPECIFIED, ndp::solicited_node(ip), &ns).await.map(|_| ())
            }
        }
    }

    /// Starts the takeover burst again for every owned address (pending ones restart).
    fn restart_bursts(&mut self) {
        let Some(first) = self.takeover.first() else { return };
        let now = Instant::now();
        self.bursts.clear();
        // A yielded address too: membership says it is this node's (a member that was to
        // take it left, or rejoined after a false suspicion), and the clients must come
        // back before the other node's grace ends (the conflict ends 400 ms after it
        // falls silent, too late for them).
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
        self.owned_to_conflicts();
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
                let answer = self.answer_mac(addr);
                let frame = arp::encode_frame(BROADCAST_MAC, self.mac, &ArpPacket::gratuitous(answer, ip));
                self.arp.send(&frame).await.map(|_| ())
            }
            IpAddr::V6(ip) => {
                let na = ndp::advertisement(ip, self.answer_mac(addr), false).to_bytes();
                self.ndp.send(ip, ALL_NODES, &na).await.map(|_| ())
            }
        }
    }

    async fn on_arp(&mut self, frame: &[u8]) {
        let (eth, req) = match arp::decode_frame(frame) {
            Ok(x) => x,
            Err(e) => {
                self.metrics.count_malformed("arp");
                tracing::trace!(interface = %self.interface, error = %e, "dropped ARP frame");
                return;
            }
        };
        // Our own frames loop back to packet sockets.
        if eth.src == self.mac {
            return;
        }
        // Another MAC speaking for an owned address (an answer, an announcement).
        let sender = IpAddr::V4(req.sender_ip);
        if !req.sender_ip.is_unspecified()
            && self.owned.contains(&sender)
            && self.is_other(sender, req.sender_mac)
        {
            self.on_conflict(conflict::Input::Seen { addr: sender, mac: req.sender_mac }).await;
        }
        // Announcements need no answer.
        if req.operation != Operation::Request || req.is_gratuitous() {
            return;
        }
        let target = IpAddr::V4(req.target_ip);
        if !self.owned.contains(&target) || self.conflicts.yielded(&target) {
            return;
        }
        self.metrics.count_request(target);
        let reply = arp::encode_frame(eth.src, self.mac, &req.reply(self.answer_mac(target)));
        match self.arp.send(&reply).await {
            Ok(_) => self.metrics.count_reply(target),
            Err(e) => tracing::debug!(interface = %self.interface, error = %e, "ARP reply failed"),
        }
    }

    /// An NS or NA frame that reached the interface: ours (looped back), or for another
    /// host (a promiscuous interface), are no input.
    async fn on_nd_frame(&mut self, frame: &[u8]) {
        let Some(f) = ndp::decode_frame(frame) else {
            self.metrics.count_malformed("ndp");
            return;
        };
        let for_us = f.dst_mac == self.mac || f.dst_mac[0] & 1 == 1;
        if f.src_mac == self.mac || !for_us {
            return;
        }
        self.on_ndp(f.message, f.src, Some(i32::from(f.hop_limit))).await;
    }

    async fn on_ndp(&mut self, msg: &[u8], src: Ipv6Addr, hop_limit: Option<i32>) {
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
            Ok(NdMessage::Advertisement(na)) => {
                let addr = IpAddr::V6(na.target);
                if let Some(mac) = na.target_mac().filter(|m| self.is_other(addr, *m))
                    && self.owned.contains(&addr)
                {
                    self.on_conflict(conflict::Input::Seen { addr, mac }).await;
                }
                return;
            }
            Err(e) => {
                self.metrics.count_malformed("ndp");
                tracing::trace!(interface = %self.interface, error = %e, "dropped NDP message");
                return;
            }
        };
        let target = IpAddr::V6(ns.target);
        if !self.owned.contains(&target) || self.conflicts.yielded(&target) {
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
        let na = ndp::advertisement(ns.target, self.answer_mac(target), solicited).to_bytes();
        match self.ndp.send(ns.target, dst, &na).await {
            Ok(_) => self.metrics.count_reply(target),
            Err(e) => tracing::debug!(interface = %self.interface, error = %e, "NA failed"),
        }
    }
}
