//! L2 announcements: this node answers ARP (IPv4) and NDP (IPv6) for the service
//! addresses it owns, and announces a takeover with gratuitous ARP / unsolicited NA.
//!
//! * [`arp`] and [`ndp`] are sans-IO codecs; [`links`] is the interface table fed by
//!   rtnetlink events with the allowed-interface policy; [`socket`] holds the two
//!   sockets of an interface.
//! * [`L2Announcer::spawn`] starts one task that owns the interface table and one
//!   responder task per interface that currently answers for something. The speaker's
//!   event loop drives it through [`L2Handle::set_owned`] with the whole desired set.
//!
//! Takeover burst: a newly owned address is announced at 0, 250 ms, 1 s, 2 s and 4 s
//! after it became owned ([`DEFAULT_TAKEOVER`]): the first at once so clients switch
//! within a millisecond of receiving it, the second soon after in case the first was
//! lost, the later ones spread over the few seconds a client may spend re-resolving.
//! Losing an address stops both answers and pending announcements at once.
//!
//! The kernel never answers for a service address: kube-proxy puts them on `lo` or
//! `kube-ipvs0` with `arp_ignore`/`arp_announce` (strictARP) set, see `README-l2.md`.

pub mod active_active;
pub mod arp;
pub mod conflict;
pub mod links;
mod metrics;
pub mod ndp;
mod responder;
pub mod socket;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use netlink_packet_core::NetlinkPayload;
use netlink_sys::AsyncSocket;
use rtnetlink::constants::{RTMGRP_IPV4_IFADDR, RTMGRP_IPV6_IFADDR, RTMGRP_LINK};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

pub use links::{InterfaceChoice, Link, LinkTable};
pub use metrics::L2Metrics;

/// When a newly owned address is announced, counted from the moment it became owned.
pub const DEFAULT_TAKEOVER: [Duration; 5] = [
    Duration::ZERO,
    Duration::from_millis(250),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// Configuration of the announcer.
#[derive(Debug, Clone)]
pub struct L2Config {
    /// Interfaces allowed to answer; None: up, non-loopback, ARP-capable links that are
    /// not a bridge or bond port.
    pub allowed_interfaces: Option<BTreeSet<String>>,
    /// Offsets of the takeover announcements (empty: none).
    pub takeover: Vec<Duration>,
}

impl Default for L2Config {
    fn default() -> Self {
        L2Config { allowed_interfaces: None, takeover: DEFAULT_TAKEOVER.to_vec() }
    }
}

/// What the announcer does for one owned address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressStatus {
    /// Interfaces answering for it (empty: owned, but no interface fits).
    pub interfaces: BTreeSet<String>,
    /// The first takeover announcement went out since it became owned.
    pub gratuitous_sent: bool,
    /// Another MAC answers for it too ([`conflict`]).
    pub conflict: Option<Conflict>,
}

/// Another MAC answering for an owned address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conflict {
    /// The other MAC.
    pub other: arp::Mac,
    /// This node outranks it and keeps answering; else it yielded.
    pub won: bool,
    /// The other kept answering after losing: no ferrolb node of this release.
    pub foreign: bool,
}

/// The announcer's state, published on every change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct L2Status {
    /// Every owned address.
    pub addresses: BTreeMap<IpAddr, AddressStatus>,
}

impl L2Status {
    /// The owned addresses whose first gratuitous ARP / unsolicited NA went out: the
    /// ones clients on the segment have been told about.
    pub fn announced(&self) -> BTreeSet<IpAddr> {
        self.addresses.iter().filter(|(_, st)| st.gratuitous_sent).map(|(a, _)| *a).collect()
    }
}

/// Errors starting the announcer.
#[derive(Debug, thiserror::Error)]
pub enum L2Error {
    /// The rtnetlink socket could not be opened or subscribed.
    #[error("L2 announcer: cannot follow interfaces through rtnetlink: {0}; the speaker needs CAP_NET_ADMIN")]
    Netlink(std::io::Error),
}

/// The desired set: every address this node owns, with where to announce it.
pub type Owned = BTreeMap<IpAddr, InterfaceChoice>;

/// Starts the L2 announcer.
#[derive(Debug)]
pub struct L2Announcer;

impl L2Announcer {
    /// Opens the rtnetlink subscription and starts the announcer task on the current
    /// tokio runtime. It answers for nothing until [`L2Handle::set_owned`].
    pub fn spawn(cfg: L2Config, metrics: L2Metrics) -> Result<L2Handle, L2Error> {
        let (mut conn, handle, messages) = rtnetlink::new_connection().map_err(L2Error::Netlink)?;
        let groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
        conn.socket_mut()
            .socket_mut()
            .bind(&netlink_sys::SocketAddr::new(0, groups))
            .map_err(L2Error::Netlink)?;
        if let Some(problem) = strict_arp_problem(
            &std::fs::read_to_string("/proc/sys/net/ipv4/conf/all/arp_ignore").unwrap_or_default(),
            &std::fs::read_to_string("/proc/sys/net/ipv4/conf/all/arp_announce").unwrap_or_default(),
        ) {
            tracing::warn!("{problem}");
        }
        let conn_task = tokio::spawn(conn);
        let (desired_tx, desired_rx) = watch::channel(Owned::new());
        let (status_tx, status_rx) = watch::channel(L2Status::default());
        let (reannounce_tx, reannounce_rx) = watch::channel(Again::default());
        let (modes_tx, modes_rx) = watch::channel(Modes::default());
        let announcer = Announcer {
            allowed: cfg.allowed_interfaces,
            takeover: cfg.takeover.into(),
            metrics,
            table: LinkTable::default(),
            workers: BTreeMap::new(),
            announced: BTreeSet::new(),
            modes: Modes::default(),
            conflicts: BTreeMap::new(),
            status: status_tx,
        };
        let task =
            tokio::spawn(announcer.run(handle, messages, desired_rx, reannounce_rx, modes_rx, conn_task));
        Ok(L2Handle {
            desired: desired_tx,
            status: status_rx,
            reannounce: reannounce_tx,
            modes: modes_tx,
            task,
        })
    }
}

/// Why the node's kernel may answer ARP for service addresses itself, given the
/// `net.ipv4.conf.all.arp_ignore` / `arp_announce` sysctl texts; None when strict.
pub fn strict_arp_problem(arp_ignore: &str, arp_announce: &str) -> Option<String> {
    let ignore: u8 = arp_ignore.trim().parse().unwrap_or(0);
    let announce: u8 = arp_announce.trim().parse().unwrap_or(0);
    (ignore < 1 || announce < 2).then(|| {
        format!(
            "node sysctl net.ipv4.conf.all.arp_ignore={ignore} arp_announce={announce}: the kernel may answer ARP \
             for service addresses kube-proxy put on kube-ipvs0; set kube-proxy `ipvs.strictARP: true` \
             (arp_ignore=1, arp_announce=2)"
        )
    })
}

/// Drives a running announcer; dropping it stops the announcer.
#[derive(Debug)]
pub struct L2Handle {
    desired: watch::Sender<Owned>,
    status: watch::Receiver<L2Status>,
    reannounce: watch::Sender<Again>,
    modes: watch::Sender<Modes>,
    task: JoinHandle<()>,
}

impl L2Handle {
    /// Replaces the whole owned set. Addresses new to the set get the takeover burst;
    /// addresses left out are no longer answered for, at once.
    pub fn set_owned(&self, owned: Owned) {
        self.desired.send_replace(owned);
    }

    /// Sends the takeover burst again for every owned address. For a member that
    /// rejoins after a false suspicion: while it was thought dead another node may have
    /// claimed this node's addresses and moved clients' neighbour entries to itself; the
    /// owner, whose owned set did not change, must move them back.
    pub fn reannounce(&self) {
        self.reannounce.send_modify(|a| a.announce = a.announce.wrapping_add(1));
    }

    /// Membership elected this node for its owned addresses again after a split (it
    /// hears the nodes it could not): forgets the address conflicts of the split
    /// (answering again for the ones yielded, see [`conflict::Input::Renew`]) and sends
    /// the takeover burst for every owned address.
    pub fn renew(&self) {
        self.reannounce.send_modify(|a| {
            a.announce = a.announce.wrapping_add(1);
            a.renew = a.renew.wrapping_add(1);
        });
    }

    /// The owned set last given to [`L2Handle::set_owned`].
    pub fn owned(&self) -> BTreeSet<IpAddr> {
        self.desired.borrow().keys().copied().collect()
    }

    /// Owned addresses this node is handing over: still answered, but no takeover
    /// announcement of them leaves any more (a pending one would move clients back from
    /// the successor). Leaving the set while owned announces the address again.
    pub fn set_quiet(&self, quiet: BTreeSet<IpAddr>) {
        self.modes.send_if_modified(|cur| {
            let changed = cur.quiet != quiet;
            cur.quiet = quiet;
            changed
        });
    }

    /// Owned addresses served active-active: answered with their virtual MAC
    /// ([`active_active::virtual_mac`]), which other nodes answer with too.
    pub fn set_shared(&self, shared: BTreeSet<IpAddr>) {
        self.modes.send_if_modified(|cur| {
            let changed = cur.shared != shared;
            cur.shared = shared;
            changed
        });
    }

    /// The announcer's status, updated on every change.
    pub fn status(&self) -> watch::Receiver<L2Status> {
        self.status.clone()
    }

    /// Stops answering for everything and ends the announcer.
    pub async fn shutdown(self) {
        let L2Handle { desired, task, .. } = self;
        drop(desired);
        let _ = task.await;
    }
}

/// What [`L2Handle::reannounce`] and [`L2Handle::renew`] ask: each counter is bumped
/// once per call (a responder acts on a change of either).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Again {
    announce: u64,
    renew: u64,
}

/// How owned addresses are answered, beyond being owned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Modes {
    /// Being handed over: answered, never announced ([`L2Handle::set_quiet`]).
    quiet: BTreeSet<IpAddr>,
    /// Answered with their virtual MAC ([`L2Handle::set_shared`]).
    shared: BTreeSet<IpAddr>,
}

/// Reports from responders to the announcer.
#[derive(Debug)]
enum Report {
    /// A takeover announcement of `addr` went out (the first one marks it announced).
    Announced(IpAddr),
    /// Another MAC answers for an owned address, or no longer does ([`conflict`]).
    Conflict(conflict::Event),
}

struct Announcer {
    allowed: Option<BTreeSet<String>>,
    takeover: Arc<[Duration]>,
    metrics: L2Metrics,
    table: LinkTable,
    workers: BTreeMap<u32, responder::Worker>,
    /// Owned addresses whose first announcement went out.
    announced: BTreeSet<IpAddr>,
    /// How owned addresses are answered.
    modes: Modes,
    /// Address conflicts the responders report.
    conflicts: BTreeMap<IpAddr, Conflict>,
    status: watch::Sender<L2Status>,
}

type Messages = futures::channel::mpsc::UnboundedReceiver<(
    netlink_packet_core::NetlinkMessage<netlink_packet_route::RouteNetlinkMessage>,
    netlink_sys::SocketAddr,
)>;

impl Announcer {
    async fn run(
        mut self,
        handle: rtnetlink::Handle,
        mut messages: Messages,
        mut desired: watch::Receiver<Owned>,
        mut reannounce: watch::Receiver<Again>,
        mut modes: watch::Receiver<Modes>,
        conn_task: JoinHandle<()>,
    ) {
        // Subscribed before dumping: an event racing the dump is applied after it.
        if let Err(e) = self.dump(&handle).await {
            tracing::error!(error = %e, "L2 announcer: cannot list interfaces; answering on none");
        }
        let (report_tx, mut report_rx) = mpsc::unbounded_channel();
        let mut reannounce_open = true;
        let mut modes_open = true;
        let mut asked = Again::default();
        loop {
            let want = desired.borrow_and_update().clone();
            self.modes = modes.borrow_and_update().clone();
            self.reconcile(&want, &report_tx);
            tokio::select! {
                changed = desired.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                r = reannounce.changed(), if reannounce_open => match r {
                    Ok(()) => {
                        let now = *reannounce.borrow_and_update();
                        let renew = now.renew != asked.renew;
                        asked = now;
                        for w in self.workers.values() {
                            w.reannounce.send_modify(|a| {
                                a.announce = a.announce.wrapping_add(1);
                                if renew {
                                    a.renew = a.renew.wrapping_add(1);
                                }
                            });
                        }
                    }
                    Err(_) => reannounce_open = false,
                },
                r = modes.changed(), if modes_open => {
                    if r.is_err() {
                        modes_open = false;
                    }
                }
                msg = messages.next() => match msg {
                    Some((msg, _)) => {
                        if let NetlinkPayload::InnerMessage(inner) = msg.payload {
                            self.table.apply(&inner);
                        }
                    }
                    None => {
                        tracing::error!("L2 announcer: rtnetlink subscription closed; interfaces no longer followed");
                        // Keep serving the current interfaces; wait for owned-set changes only.
                        messages = futures::channel::mpsc::unbounded().1;
                    }
                },
                Some(report) = report_rx.recv() => match report {
                    Report::Announced(addr) => {
                        if desired.borrow().contains_key(&addr) {
                            self.announced.insert(addr);
                        }
                    }
                    Report::Conflict(event) => self.on_conflict(event),
                },
            }
        }
        self.workers.clear();
        self.metrics.owned.set(0);
        conn_task.abort();
    }

    fn on_conflict(&mut self, event: conflict::Event) {
        match event {
            conflict::Event::Conflict { addr, other, won } => {
                self.conflicts.insert(addr, Conflict { other, won, foreign: false });
            }
            conflict::Event::Foreign { addr, other } => {
                self.conflicts.insert(addr, Conflict { other, won: true, foreign: true });
            }
            conflict::Event::Reclaim { .. } => {}
            conflict::Event::Resolved { addr, .. } | conflict::Event::Renewed { addr, .. } => {
                self.conflicts.remove(&addr);
            }
        }
    }

    async fn dump(&mut self, handle: &rtnetlink::Handle) -> Result<(), rtnetlink::Error> {
        let mut links = handle.link().get().execute();
        while let Some(l) = links.try_next().await? {
            self.table.upsert_link(&l);
        }
        let mut addrs = handle.address().get().execute();
        while let Some(a) = addrs.try_next().await? {
            self.table.apply(&netlink_packet_route::RouteNetlinkMessage::NewAddress(a));
        }
        Ok(())
    }

    fn reconcile(&mut self, desired: &Owned, report_tx: &mpsc::UnboundedSender<Report>) {
        let mut per_link: BTreeMap<u32, BTreeSet<IpAddr>> = BTreeMap::new();
        for (addr, choice) in desired {
            for l in self.table.interfaces_for(*addr, choice, self.allowed.as_ref()) {
                per_link.entry(l.index).or_default().insert(*addr);
            }
        }
        // Responders of links that are gone, renamed, re-addressed or idle stop.
        let table = &self.table;
        self.workers.retain(|index, w| {
            let same = table.get(*index).is_some_and(|l| l.mac == Some(w.mac) && l.name == w.name);
            same && per_link.contains_key(index)
        });
        let mut status =
            L2Status { addresses: desired.keys().map(|a| (*a, AddressStatus::default())).collect() };
        for (index, owned) in per_link {
            if !self.workers.contains_key(&index) {
                let Some(link) = self.table.get(index) else { continue };
                match responder::Worker::spawn(
                    link,
                    owned.clone(),
                    self.modes.clone(),
                    self.takeover.clone(),
                    self.metrics.clone(),
                    report_tx.clone(),
                ) {
                    Ok(w) => {
                        tracing::info!(interface = %link.name, "L2 responder started");
                        self.workers.insert(index, w);
                    }
                    Err(e) => {
                        tracing::error!(interface = %link.name, error = %e, "L2 responder cannot open its sockets");
                        continue;
                    }
                }
            }
            let Some(w) = self.workers.get(&index) else { continue };
            w.owned.send_if_modified(|cur| {
                let changed = *cur != owned;
                *cur = owned.clone();
                changed
            });
            // Owned first: an address leaving both sets must be gone from the owned set
            // when the responder sees it leave the quiet one, or it would announce it.
            w.modes.send_if_modified(|cur| {
                let changed = *cur != self.modes;
                cur.clone_from(&self.modes);
                changed
            });
            for a in &owned {
                if let Some(st) = status.addresses.get_mut(a) {
                    st.interfaces.insert(w.name.clone());
                }
            }
        }
        self.announced.retain(|a| desired.contains_key(a));
        if self.takeover.is_empty() {
            self.announced.extend(desired.keys().copied());
        }
        self.conflicts.retain(|a, _| desired.contains_key(a));
        for (addr, st) in status.addresses.iter_mut() {
            st.gratuitous_sent = self.announced.contains(addr);
            st.conflict = self.conflicts.get(addr).copied();
        }
        self.metrics.owned.set(i64::try_from(desired.len()).unwrap_or(i64::MAX));
        // The published status lists the previous owned set. (A responder counting a
        // packet it read just before its owned set shrank can re-create one series.)
        for gone in self.status.borrow().addresses.keys().filter(|a| !desired.contains_key(a)) {
            self.metrics.forget(*gone);
        }
        self.status.send_if_modified(|cur| {
            if *cur != status {
                for (addr, st) in &status.addresses {
                    if cur.addresses.get(addr).map(|s| &s.interfaces) != Some(&st.interfaces) {
                        tracing::info!(address = %addr, interfaces = ?st.interfaces, "L2: answering");
                    }
                }
                for addr in cur.addresses.keys().filter(|a| !status.addresses.contains_key(a)) {
                    tracing::info!(address = %addr, "L2: no longer owned, not answering");
                }
                *cur = status.clone();
                true
            } else {
                false
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;
    use std::net::Ipv4Addr;

    #[test]
    fn strict_arp_is_detected() {
        assert_eq!(strict_arp_problem("1\n", "2\n"), None);
        let p = strict_arp_problem("0\n", "0\n").unwrap();
        assert!(p.contains("arp_ignore=0") && p.contains("strictARP"), "{p}");
        assert!(strict_arp_problem("1", "1").is_some());
    }

    #[test]
    fn metrics_are_exported_with_the_ferrolb_prefix() {
        let mut registry = Registry::default();
        let m = L2Metrics::new(&mut registry);
        let a = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 200));
        m.count_request(a);
        m.count_reply(a);
        m.count_gratuitous(a);
        m.count_malformed("arp");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "ferrolb_l2_requests_received_total{address=\"192.0.2.200\"} 1",
            "ferrolb_l2_replies_sent_total{address=\"192.0.2.200\"} 1",
            "ferrolb_l2_gratuitous_sent_total{address=\"192.0.2.200\"} 1",
            "ferrolb_l2_malformed_received_total{protocol=\"arp\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert_eq!((m.requests_received(a), m.replies_sent(a), m.gratuitous_sent(a)), (1, 1, 1));
    }

    #[test]
    fn the_series_of_an_address_go_when_it_is_no_longer_owned() {
        let mut registry = Registry::default();
        let metrics = L2Metrics::new(&mut registry);
        let (status, _rx) = watch::channel(L2Status::default());
        let mut announcer = Announcer {
            allowed: None,
            takeover: Arc::from(Vec::new()),
            metrics: metrics.clone(),
            table: LinkTable::default(),
            workers: BTreeMap::new(),
            announced: BTreeSet::new(),
            modes: Modes::default(),
            conflicts: BTreeMap::new(),
            status,
        };
        let (report_tx, _report_rx) = mpsc::unbounded_channel();
        let kept = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 201));
        let encoded = || {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            text
        };
        let mut owned = Owned::new();
        for i in 0..100u8 {
            let a = IpAddr::V4(Ipv4Addr::new(198, 18, 0, i));
            owned.insert(a, InterfaceChoice::Auto);
            metrics.count_request(a);
            metrics.count_reply(a);
            metrics.count_gratuitous(a);
        }
        owned.insert(kept, InterfaceChoice::Auto);
        metrics.count_gratuitous(kept);
        announcer.reconcile(&owned, &report_tx);
        assert!(encoded().contains("address=\"198.18.0.99\""));
        announcer.reconcile(&Owned::from([(kept, InterfaceChoice::Auto)]), &report_tx);
        let text = encoded();
        assert!(!text.contains("198.18.0."), "{text}");
        assert!(text.contains("ferrolb_l2_gratuitous_sent_total{address=\"192.0.2.201\"} 1"), "{text}");
        // Reading a count creates no series.
        assert_eq!(metrics.requests_received(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))), 0);
        assert!(!encoded().contains("198.18.0."));
    }
}
