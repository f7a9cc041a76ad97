//! The bucket filter of active-active L2 addresses, as the speaker drives it: the
//! plan's [`crate::plan::Plan::l2_active_active`] fed to the sans-IO
//! [`Spread`](ferrolb_proto::l2::active_active::Spread), its tables loaded over
//! netlink (no nftables userland needed), and each address's virtual MAC added to the unicast filter of the interfaces that
//! answer for it (as `bridge fdb add MAC dev IF self permanent` does), so the NIC
//! accepts its frames without promiscuous mode.
//!
//! Crash-only: the tables outlive the speaker. A speaker that stops (SIGTERM) first
//! turns every bucket it owns into a draining one, so the nodes that take them over
//! get the new flows while this node keeps its established ones for the grace; one
//! that starts again takes every bucket through the grace, since the kernel may hold
//! flows of its previous run.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use ferrolb_proto::l2::L2Status;
use ferrolb_proto::l2::active_active::{DEFAULT_GRACE, Input, Spread, nft, virtual_mac};
use ferrolb_proto::nftables::{self, Batch, socket};
use futures::TryStreamExt;
use netlink_packet_route::neighbour::NeighbourFlags;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::time::Instant;

/// How soon tables the kernel refused are tried again.
const RETRY: Duration = Duration::from_secs(5);
/// How often the not-mine counters are read (and before every load, which resets them).
const READ_COUNTERS: Duration = Duration::from_secs(15);

/// One active-active address.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AddressLabel {
    /// The address.
    pub address: String,
}

/// A load of the tables, by result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoadLabel {
    /// `loaded` or `refused`.
    pub result: String,
}

/// The bucket filter's metrics.
#[derive(Debug, Clone, Default)]
pub struct FilterMetrics {
    /// Buckets of each address this node takes new flows of (of 256).
    pub buckets: Family<AddressLabel, Gauge>,
    /// Table loads by result.
    pub loads: Family<LoadLabel, Counter>,
    /// Packets of each address dropped as another node's.
    pub not_mine: Family<AddressLabel, Counter>,
}

impl FilterMetrics {
    /// Registers under `registry` (prefixed `ferrolb`).
    pub fn register(registry: &mut Registry) -> Self {
        let m = FilterMetrics::default();
        for result in ["loaded", "refused"] {
            let _ = m.loads.get_or_create(&LoadLabel { result: result.into() });
        }
        registry.register(
            "l2_active_active_buckets",
            "buckets of an active-active address this node takes new flows of (of 256)",
            m.buckets.clone(),
        );
        registry.register("l2_active_active_loads", "bucket filter table loads by result", m.loads.clone());
        registry.register(
            "l2_active_active_not_mine_packets",
            "packets of an active-active address this node dropped as another node's",
            m.not_mine.clone(),
        );
        m
    }

    /// Sets each address's owned buckets; those of `shown` gone from the filter are removed.
    fn observe(&self, spread: &Spread, shown: &mut BTreeSet<IpAddr>) {
        for (ip, a) in spread.addresses() {
            let owned = i64::try_from(a.owned()).unwrap_or(i64::MAX);
            self.buckets.get_or_create(&AddressLabel { address: ip.to_string() }).set(owned);
        }
        for gone in shown.iter().filter(|ip| !spread.addresses().contains_key(ip)) {
            self.buckets.remove(&AddressLabel { address: gone.to_string() });
            self.not_mine.remove(&AddressLabel { address: gone.to_string() });
        }
        *shown = spread.addresses().keys().copied().collect();
    }

    /// Adds what the loaded table's counters (`now`) counted since they were last read
    /// (`last`, from the same table).
    fn count_not_mine(&self, now: BTreeMap<IpAddr, u64>, last: &mut BTreeMap<IpAddr, u64>) {
        for (ip, n) in &now {
            let before = last.get(ip).copied().filter(|b| b <= n).unwrap_or(0);
            self.not_mine.get_or_create(&AddressLabel { address: ip.to_string() }).inc_by(n - before);
        }
        *last = now;
    }

    fn count(&self, result: &str) {
        self.loads.get_or_create(&LoadLabel { result: result.into() }).inc();
    }
}

/// What the filter is asked, numbered from 1: None until the first plan (the tables a
/// previous run left stay untouched until then).
type Desired = Option<(u64, BTreeMap<IpAddr, Vec<String>>)>;

/// Runs the filter; dropping it leaves the kernel's tables as they are.
#[derive(Debug)]
pub struct BucketFilter {
    desired: watch::Sender<Desired>,
    /// The number of the last desired set whose tables are in the kernel.
    loaded: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl BucketFilter {
    /// Starts the filter of node `me`, whose buckets wait `join_grace` before it takes
    /// them ([`Spread::with_join_hold`]); `status` tells which interfaces answer.
    pub fn spawn(
        me: &str,
        join_grace: Duration,
        status: watch::Receiver<L2Status>,
        metrics: FilterMetrics,
    ) -> Self {
        let (desired, rx) = watch::channel(None);
        let (done, loaded) = watch::channel(0);
        let spread = Spread::new(me, DEFAULT_GRACE).with_join_hold(join_grace);
        let task = tokio::spawn(run(spread, rx, status, metrics, done));
        BucketFilter { desired, loaded, task }
    }

    /// The active-active addresses this node serves → the nodes serving each.
    pub fn set(&self, addresses: &BTreeMap<IpAddr, Vec<String>>) {
        self.desired.send_if_modified(|cur| {
            let changed = cur.as_ref().map(|(_, a)| a) != Some(addresses);
            if changed {
                let n = cur.as_ref().map_or(0, |(n, _)| *n) + 1;
                *cur = Some((n, addresses.clone()));
            }
            changed
        });
    }

    /// Waits (at most `within`) until the kernel holds the tables of the last set given:
    /// false if it does not by then (the kernel refused them, or the filter is slow).
    /// Before this node leaves membership on shutdown, its buckets must be draining in
    /// the kernel: the others take them over as soon as it leaves, and a bucket both
    /// still take new flows of gets two answers to one SYN (the client resets the
    /// connection).
    pub async fn loaded(&self, within: Duration) -> bool {
        let Some(want) = self.desired.borrow().as_ref().map(|(n, _)| *n) else { return true };
        let mut loaded = self.loaded.clone();
        matches!(tokio::time::timeout(within, loaded.wait_for(|n| *n >= want)).await, Ok(Ok(_)))
    }

    /// Stops after loading `last` (every address left: each bucket this node owns
    /// drains for the grace, then the tables go on the next start).
    pub async fn stop(self, last: BTreeMap<IpAddr, Vec<String>>) {
        self.set(&last);
        let BucketFilter { desired, task, .. } = self;
        drop(desired);
        let _ = task.await;
    }
}

/// The tables last loaded, and the interfaces they receive on.
type Loaded = Option<(Batch, BTreeSet<String>)>;

async fn run(
    mut spread: Spread,
    mut desired: watch::Receiver<Desired>,
    mut status: watch::Receiver<L2Status>,
    metrics: FilterMetrics,
    done: watch::Sender<u64>,
) {
    let mut loaded: Loaded = None;
    let mut counted = BTreeMap::new();
    // A table of a previous run (killed, or stopped) filters with what that run knew:
    // until the first plan, every bucket of it only keeps established flows.
    let (left, devices) = left_behind().await;
    if !left.is_empty() {
        spread.adopt(Instant::now().into_std(), left);
        let batch = nft::ruleset(&spread, &devices);
        match blocking(move || socket::load(&batch).map(|()| batch)).await {
            Ok(batch) => {
                tracing::info!(
                    addresses = spread.addresses().len(),
                    "active-active bucket filter of a previous run: every bucket drains until the first plan"
                );
                loaded = Some((batch, devices));
            }
            Err(e) => {
                tracing::error!(error = %e, "active-active bucket filter: cannot load the draining table")
            }
        }
    } else if devices.is_empty() {
        // No table of ours in the kernel (or a kernel that cannot dump nf_tables, so
        // holds none): that is what an empty spread loads, so a node that never serves an
        // address active-active never touches nf_tables, and a kernel without it is
        // not asked every 5 s.
        loaded = Some((nft::ruleset(&spread, &devices), devices));
    }
    let mut unicast: BTreeSet<(String, [u8; 6])> = BTreeSet::new();
    let mut retry: Option<Instant> = None;
    let mut open = true;
    let mut shown = BTreeSet::new();
    let mut read = tokio::time::interval(READ_COUNTERS);
    read.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let want = desired.borrow_and_update().clone();
        if let Some((number, want)) = want {
            let now = Instant::now();
            spread.handle(now.into_std(), Input::Desired(want));
            let st = status.borrow_and_update().clone();
            // Interfaces answering for an address whose buckets this node still holds;
            // while some bucket drains, also those it was received on (an interface that
            // stopped answering still brings its flows), unless that failed to load (an
            // interface that is gone).
            let draining = spread.addresses().values().any(|a| !a.settled());
            let kept = loaded.as_ref().filter(|_| draining && retry.is_none()).map(|(_, d)| d.clone());
            let devices: BTreeSet<String> = spread
                .addresses()
                .keys()
                .filter_map(|ip| st.addresses.get(ip))
                .flat_map(|a| a.interfaces.iter().cloned())
                .chain(kept.into_iter().flatten())
                .collect();
            let batch = nft::ruleset(&spread, &devices);
            if loaded.as_ref().is_some_and(|(b, _)| *b == batch) {
                retry = None;
                done.send_replace(number);
            } else if retry.is_none_or(|t| t <= now) {
                // Loading resets the counters: what they counted is read first.
                read_not_mine(&metrics, &mut counted).await;
                match blocking(move || socket::load(&batch).map(|()| batch)).await {
                    Ok(batch) => {
                        tracing::info!(
                            addresses = spread.addresses().len(),
                            "active-active bucket filter loaded"
                        );
                        loaded = Some((batch, devices));
                        counted.clear();
                        retry = None;
                        metrics.count("loaded");
                        done.send_replace(number);
                    }
                    Err(e) => {
                        metrics.count("refused");
                        tracing::error!(error = %e, "active-active bucket filter: the kernel refused the tables; retrying in 5 s");
                        retry = Some(now + RETRY);
                    }
                }
            }
            metrics.observe(&spread, &mut shown);
            let want: BTreeSet<(String, [u8; 6])> = spread
                .addresses()
                .keys()
                .filter_map(|ip| st.addresses.get(ip).map(|a| (ip, a)))
                .flat_map(|(ip, a)| a.interfaces.iter().map(|i| (i.clone(), virtual_mac(*ip))))
                .collect();
            for (dev, mac) in want.difference(&unicast) {
                if let Err(e) = accept_mac(dev, *mac).await {
                    tracing::warn!(interface = %dev, error = %e, "cannot add the virtual MAC to the interface's unicast filter; its frames reach this node only if the NIC floods them");
                }
            }
            unicast = want;
        }
        if !open {
            return;
        }
        let timeout = spread.poll_timeout().map(Instant::from_std).into_iter().chain(retry).min();
        tokio::select! {
            r = desired.changed() => if r.is_err() {
                // Stopping: this pass loads the last desired set, then returns.
                open = false;
            },
            r = status.changed() => if r.is_err() {
                status = watch::channel(L2Status::default()).1;
            },
            _ = ferrolb_proto::time::sleep_until(timeout), if timeout.is_some() => {
                spread.handle(Instant::now().into_std(), Input::Timeout);
            }
            _ = read.tick(), if loaded.is_some() => {
                read_not_mine(&metrics, &mut counted).await;
                continue;
            }
        }
    }
}

/// Runs a netlink exchange on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, socket::Error> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Reads the loaded table's not-mine counters into the metrics.
async fn read_not_mine(metrics: &FilterMetrics, counted: &mut BTreeMap<IpAddr, u64>) {
    match blocking(|| socket::rule_packets(nftables::Family::Inet, nft::TABLE)).await {
        Ok(rules) => metrics.count_not_mine(nft::not_mine(&rules), counted),
        Err(e) => tracing::debug!(error = %e, "cannot read the active-active counters"),
    }
}

/// The addresses and interfaces of the tables a previous run left in the kernel.
async fn left_behind() -> (Vec<IpAddr>, BTreeSet<String>) {
    let addresses = blocking(|| socket::chains(nftables::Family::Inet, nft::TABLE)).await;
    let devices = blocking(|| socket::chains(nftables::Family::Netdev, nft::TABLE)).await;
    match (addresses, devices) {
        (Ok(a), Ok(d)) => (nft::addresses_in(&a), nft::devices_in(&d)),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "cannot read the active-active tables a previous run left; starting afresh");
            (Vec::new(), BTreeSet::new())
        }
    }
}

/// Adds `mac` to `dev`'s unicast address list (an existing entry is kept).
async fn accept_mac(dev: &str, mac: [u8; 6]) -> Result<(), String> {
    let (conn, handle, _) = rtnetlink::new_connection().map_err(|e| e.to_string())?;
    let conn = tokio::spawn(conn);
    let result = async {
        let link = handle
            .link()
            .get()
            .match_name(dev.to_owned())
            .execute()
            .try_next()
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no interface {dev}"))?;
        handle
            .neighbours()
            .add_bridge(link.header.index, &mac)
            .flags(NeighbourFlags::Own)
            .replace()
            .execute()
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    conn.abort();
    result
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ferrolb_testkit::ip;

    fn encoded(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn each_address_shows_its_owned_buckets_until_it_leaves_the_filter() {
        let mut registry = Registry::default();
        let metrics = FilterMetrics::register(&mut registry);
        let mut spread = Spread::new("node1", DEFAULT_GRACE);
        let now = std::time::Instant::now();
        let both = vec!["node1".to_string(), "node2".to_string()];
        spread.handle(
            now,
            Input::Desired(BTreeMap::from([(ip("192.0.2.50"), both.clone()), (ip("2001:db8::50"), both)])),
        );
        let mut shown = BTreeSet::new();
        metrics.observe(&spread, &mut shown);
        let text = encoded(&registry);
        assert!(text.contains("l2_active_active_buckets{address=\"192.0.2.50\"} 128"), "{text}");
        assert!(text.contains("l2_active_active_buckets{address=\"2001:db8::50\"} 128"), "{text}");
        assert!(text.contains("l2_active_active_loads_total{result=\"refused\"} 0"), "{text}");
        // One address leaves: it drains (owning nothing), then goes from the filter and the metrics.
        spread.handle(now, Input::Desired(BTreeMap::from([(ip("192.0.2.50"), vec!["node1".to_string()])])));
        metrics.observe(&spread, &mut shown);
        assert!(encoded(&registry).contains("l2_active_active_buckets{address=\"2001:db8::50\"} 0"));
        spread.handle(now + DEFAULT_GRACE, Input::Timeout);
        metrics.observe(&spread, &mut shown);
        let text = encoded(&registry);
        assert!(text.contains("l2_active_active_buckets{address=\"192.0.2.50\"} 256"), "{text}");
        assert!(!text.contains("2001:db8::50"), "{text}");
    }

    #[test]
    fn not_mine_packets_add_up_across_reads_and_table_loads() {
        let mut registry = Registry::default();
        let metrics = FilterMetrics::register(&mut registry);
        let a = ip("192.0.2.50");
        let sample = "l2_active_active_not_mine_packets_total{address=\"192.0.2.50\"}";
        let mut last = BTreeMap::new();
        metrics.count_not_mine(BTreeMap::from([(a, 10)]), &mut last);
        metrics.count_not_mine(BTreeMap::from([(a, 25)]), &mut last);
        assert!(encoded(&registry).contains(&format!("{sample} 25")));
        // A load resets the kernel's counters; the reader starts over from nothing.
        last.clear();
        metrics.count_not_mine(BTreeMap::from([(a, 4)]), &mut last);
        assert!(encoded(&registry).contains(&format!("{sample} 29")));
        // Counters that went down (a table replaced behind our back) count from zero.
        metrics.count_not_mine(BTreeMap::from([(a, 1)]), &mut last);
        assert!(encoded(&registry).contains(&format!("{sample} 30")));
    }
}
