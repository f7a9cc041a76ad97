//! The bucket filter of active-active L2 addresses, as the speaker drives it: the
//! plan's [`crate::plan::Plan::l2_active_active`] fed to the sans-IO
//! [`Spread`](ferrolb_proto::l2::active_active::Spread), its tables loaded with `nft`,
//! and each address's virtual MAC added to the unicast filter of the interfaces that
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
use futures::TryStreamExt;
use netlink_packet_route::neighbour::NeighbourFlags;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio::time::Instant;

/// How soon a table nft refused is tried again.
const RETRY: Duration = Duration::from_secs(5);

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
        registry.register(
            "l2_active_active_loads",
            "bucket filter table loads by result (nft)",
            m.loads.clone(),
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
        }
        *shown = spread.addresses().keys().copied().collect();
    }

    fn count(&self, result: &str) {
        self.loads.get_or_create(&LoadLabel { result: result.into() }).inc();
    }
}

/// What the filter is asked: None until the first plan (the tables a previous run left
/// stay untouched until then).
type Desired = Option<BTreeMap<IpAddr, Vec<String>>>;

/// Runs the filter; dropping it leaves the kernel's tables as they are.
#[derive(Debug)]
pub struct BucketFilter {
    desired: watch::Sender<Desired>,
    task: tokio::task::JoinHandle<()>,
}

impl BucketFilter {
    /// Starts the filter of node `me`; `status` tells which interfaces answer.
    pub fn spawn(me: &str, status: watch::Receiver<L2Status>, metrics: FilterMetrics) -> Self {
        let (desired, rx) = watch::channel(None);
        let task = tokio::spawn(run(me.to_owned(), rx, status, metrics));
        BucketFilter { desired, task }
    }

    /// The active-active addresses this node serves → the nodes serving each.
    pub fn set(&self, addresses: &BTreeMap<IpAddr, Vec<String>>) {
        self.desired.send_if_modified(|cur| {
            let changed = cur.as_ref() != Some(addresses);
            if changed {
                *cur = Some(addresses.clone());
            }
            changed
        });
    }

    /// Stops after loading `last` (every address left: each bucket this node owns
    /// drains for the grace, then the tables go on the next start).
    pub async fn stop(self, last: BTreeMap<IpAddr, Vec<String>>) {
        self.desired.send_replace(Some(last));
        let BucketFilter { desired, task } = self;
        drop(desired);
        let _ = task.await;
    }
}

async fn run(
    me: String,
    mut desired: watch::Receiver<Desired>,
    mut status: watch::Receiver<L2Status>,
    metrics: FilterMetrics,
) {
    let mut spread = Spread::new(&me, DEFAULT_GRACE);
    let mut loaded: Option<String> = None;
    // A table of a previous run (killed, or stopped) filters with what that run knew:
    // until the first plan, every bucket of it only keeps established flows.
    let (left, devices) = left_behind().await;
    if !left.is_empty() {
        spread.adopt(Instant::now().into_std(), left);
        let text = nft::ruleset(&spread, &devices);
        match load(&text).await {
            Ok(()) => {
                tracing::info!(
                    addresses = spread.addresses().len(),
                    "active-active bucket filter of a previous run: every bucket drains until the first plan"
                );
                loaded = Some(text);
            }
            Err(e) => {
                tracing::error!(error = %e, "active-active bucket filter: cannot load the draining table")
            }
        }
    }
    let mut unicast: BTreeSet<(String, [u8; 6])> = BTreeSet::new();
    let mut retry: Option<Instant> = None;
    let mut open = true;
    let mut shown = BTreeSet::new();
    loop {
        let want = desired.borrow_and_update().clone();
        if let Some(want) = want {
            let now = Instant::now();
            spread.handle(now.into_std(), Input::Desired(want));
            let st = status.borrow_and_update().clone();
            // Interfaces answering for an address whose buckets this node still holds;
            // while some bucket drains, also those it was received on (an interface that
            // stopped answering still brings its flows), unless that failed to load (an
            // interface that is gone).
            let draining = spread.addresses().values().any(|a| !a.settled());
            let devices: BTreeSet<String> = spread
                .addresses()
                .keys()
                .filter_map(|ip| st.addresses.get(ip))
                .flat_map(|a| a.interfaces.iter().cloned())
                .chain(if draining && retry.is_none() { loaded_devices(&loaded) } else { Vec::new() })
                .collect();
            let text = nft::ruleset(&spread, &devices);
            if loaded.as_deref() == Some(text.as_str()) {
                retry = None;
            } else if retry.is_none_or(|t| t <= now) {
                match load(&text).await {
                    Ok(()) => {
                        tracing::info!(
                            addresses = spread.addresses().len(),
                            "active-active bucket filter loaded"
                        );
                        loaded = Some(text);
                        retry = None;
                        metrics.count("loaded");
                    }
                    Err(e) => {
                        metrics.count("refused");
                        tracing::error!(error = %e, "active-active bucket filter: nft refused the table; retrying in 5 s");
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
        }
    }
}

/// The devices named in the loaded table: an interface that stops answering keeps
/// receiving the frames of addresses it still drains.
fn loaded_devices(loaded: &Option<String>) -> Vec<String> {
    let Some(text) = loaded else { return Vec::new() };
    text.split("device \"").skip(1).filter_map(|s| s.split('"').next()).map(str::to_owned).collect()
}

/// The addresses and interfaces of the tables a previous run left in the kernel.
async fn left_behind() -> (Vec<IpAddr>, BTreeSet<String>) {
    let list = |family: &'static str| async move {
        let out = tokio::process::Command::new("nft")
            .args(["list", "table", family, nft::TABLE])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .await;
        match out {
            Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).into_owned()),
            _ => None,
        }
    };
    let addresses = list("inet").await.map(|t| nft::addresses_in(&t)).unwrap_or_default();
    let devices = loaded_devices(&list("netdev").await).into_iter().collect();
    (addresses, devices)
}

/// Loads a table script with `nft -f -`.
async fn load(text: &str) -> Result<(), String> {
    let mut child = tokio::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("cannot run nft (active-active L2 needs nftables' nft command on the node): {e}")
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(text.as_bytes()).await.map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().await.map_err(|e| e.to_string())?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).trim().to_owned()) }
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
}
