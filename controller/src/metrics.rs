//! The controller's Prometheus metrics (OpenMetrics text via prometheus-client).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::ipam::PoolStats;

type Labels = Vec<(String, String)>;

/// The kinds `ferrolb_controller_invalid_objects` counts.
pub const INVALID_OBJECT_KINDS: [&str; 6] = [
    ferrolb_api::validate::kind::IP_ADDRESS_POOL,
    ferrolb_api::validate::kind::BGP_PEER,
    ferrolb_api::validate::kind::BGP_ADVERTISEMENT,
    ferrolb_api::validate::kind::L2_ADVERTISEMENT,
    ferrolb_api::validate::kind::BFD_PROFILE,
    ferrolb_api::validate::kind::CONTROL_PLANE_VIP,
];

/// Every metric the controller exports; cheap to clone (the metrics are shared handles).
#[derive(Clone)]
pub struct Metrics {
    registry: std::sync::Arc<Registry>,
    /// Addresses in use per pool and family.
    pub assigned: Family<Labels, Gauge>,
    /// Free addresses per pool and family (a float: IPv6 pools exceed i64).
    pub available: Family<Labels, Gauge<f64, AtomicU64>>,
    /// Allocation attempts by result (`assigned`, `failed`).
    pub allocations: Family<Labels, Counter>,
    /// Services whose addresses were released.
    pub releases: Counter,
    /// Addresses held by Services that are in no pool.
    pub orphaned: Gauge,
    /// Addresses found held twice at startup and resolved (the older Service kept it).
    pub conflicts: Counter,
    /// Service reconciliations.
    pub reconciles: Counter,
    /// Failed reconciliations, by error kind.
    pub reconcile_errors: Family<Labels, Counter>,
    /// IPAddressPools rejected by the validator (their last good config stays in force).
    pub invalid_pools: Gauge,
    /// Objects whose `Valid` condition is False, by kind (validity.rs sets it).
    pub invalid_objects: Family<Labels, Gauge>,
    /// 1 while this replica leads.
    pub leader: Gauge,
    /// Writes (applies and deletes) of the Nodes' facts ConfigMaps (`node_facts`).
    pub node_facts_writes: Counter,
    /// Bytes of live heap allocations, set at each scrape (`encode`).
    pub heap_bytes: Gauge,
    /// What the controller's client receives (`ferrolb_kube_client_*`, every binary's names).
    pub kube_received: ferrolb_runtime::kube_client::Received,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut r = Registry::default();
        let m = Metrics {
            registry: std::sync::Arc::new(Registry::default()),
            assigned: Family::default(),
            available: Family::default(),
            allocations: Family::default(),
            releases: Counter::default(),
            orphaned: Gauge::default(),
            conflicts: Counter::default(),
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            invalid_pools: Gauge::default(),
            invalid_objects: Family::default(),
            leader: Gauge::default(),
            node_facts_writes: Counter::default(),
            heap_bytes: Gauge::default(),
            kube_received: Default::default(),
        };
        m.kube_received.register(&mut r);
        r.register(
            "ferrolb_allocator_assigned_addresses",
            "Addresses in use per pool and family (a shared address counts once)",
            m.assigned.clone(),
        );
        r.register(
            "ferrolb_allocator_available_addresses",
            "Free addresses per pool and family",
            m.available.clone(),
        );
        r.register("ferrolb_allocator_allocations", "Allocation attempts by result", m.allocations.clone());
        r.register(
            "ferrolb_allocator_releases",
            "Services whose addresses were released",
            m.releases.clone(),
        );
        r.register(
            "ferrolb_allocator_orphaned_addresses",
            "Addresses held by Services that lie in no pool",
            m.orphaned.clone(),
        );
        r.register(
            "ferrolb_allocator_conflicts",
            "Addresses found held twice on startup; the older Service kept each",
            m.conflicts.clone(),
        );
        r.register("ferrolb_controller_reconciles", "Service reconciliations", m.reconciles.clone());
        r.register(
            "ferrolb_controller_reconcile_errors",
            "Failed Service reconciliations by error kind",
            m.reconcile_errors.clone(),
        );
        r.register(
            "ferrolb_controller_invalid_pools",
            "IPAddressPools rejected by the validator",
            m.invalid_pools.clone(),
        );
        r.register(
            "ferrolb_controller_invalid_objects",
            "Configuration objects the validator rejects (Valid=False), by kind",
            m.invalid_objects.clone(),
        );
        r.register("ferrolb_controller_leader", "1 while this replica is the leader", m.leader.clone());
        r.register(
            "ferrolb_controller_node_facts_writes",
            "Writes of the Nodes' facts ConfigMaps that L2 speakers read (applied or deleted)",
            m.node_facts_writes.clone(),
        );
        r.register(
            "ferrolb_controller_heap_bytes",
            "heap bytes held by live allocations (counted by the allocator; excludes freed memory it keeps)",
            m.heap_bytes.clone(),
        );
        // Which build runs (the revision comes from buildinfo/build.rs, as in `--version`).
        ferrolb_runtime::build_info::register(&mut r, env!("CARGO_PKG_VERSION"), env!("FERROLB_REVISION"));
        // Exported at 0 from the start, so that the first failure is an increase
        // (FerrolbAllocationFailing in manifests/components/monitoring).
        for result in ["assigned", "failed"] {
            let _ = m.allocations.get_or_create(&vec![("result".to_owned(), result.to_owned())]);
        }
        // Every kind at 0 from the start, so FerrolbConfigInvalid sees a series to compare.
        for kind in INVALID_OBJECT_KINDS {
            m.set_invalid(kind, 0);
        }
        Metrics { registry: std::sync::Arc::new(r), ..m }
    }

    /// Publishes how many objects of `kind` are invalid.
    pub fn set_invalid(&self, kind: &str, count: usize) {
        let labels = vec![("kind".to_owned(), kind.to_owned())];
        self.invalid_objects.get_or_create(&labels).set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Publishes one pool's statistics.
    pub fn set_pool(&self, pool: &str, stats: &PoolStats) {
        for (family, s) in [("ipv4", stats.v4), ("ipv6", stats.v6)] {
            let labels = vec![("pool".to_owned(), pool.to_owned()), ("family".to_owned(), family.to_owned())];
            self.assigned.get_or_create(&labels).set(i64::try_from(s.assigned).unwrap_or(i64::MAX));
            self.available.get_or_create(&labels).set(s.available as f64);
        }
    }

    /// Forgets a deleted pool.
    pub fn remove_pool(&self, pool: &str) {
        for family in ["ipv4", "ipv6"] {
            let labels = vec![("pool".to_owned(), pool.to_owned()), ("family".to_owned(), family.to_owned())];
            self.assigned.remove(&labels);
            self.available.remove(&labels);
        }
    }

    /// Counts one allocation attempt.
    pub fn allocation(&self, result: &str) {
        self.allocations.get_or_create(&vec![("result".to_owned(), result.to_owned())]).inc();
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        if let Some(bytes) = ferrolb_runtime::heap::in_use() {
            self.heap_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_uses_the_ferrolb_prefix() {
        let m = Metrics::new();
        m.allocation("assigned");
        m.set_pool("lan", &PoolStats::default());
        let text = m.encode();
        assert!(text.contains("ferrolb_allocator_allocations_total{result=\"assigned\"} 1"), "{text}");
        assert!(
            text.contains("ferrolb_allocator_assigned_addresses{pool=\"lan\",family=\"ipv4\"} 0"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.starts_with("ferrolb_"), "{line}");
        }
    }

    #[test]
    fn build_info_names_the_version_and_revision() {
        let text = Metrics::new().encode();
        let line = ferrolb_runtime::build_info::sample(env!("CARGO_PKG_VERSION"), env!("FERROLB_REVISION"));
        assert!(text.lines().any(|l| l == line), "{line:?} missing in\n{text}");
    }

    #[test]
    fn failed_allocations_are_exported_from_zero() {
        // The first failure is then an increase (FerrolbAllocationFailing).
        let text = Metrics::new().encode();
        assert!(
            text.lines().any(|l| l == "ferrolb_allocator_allocations_total{result=\"failed\"} 0"),
            "{text}"
        );
    }

    #[test]
    fn the_live_heap_is_exported_at_each_scrape() {
        let text = Metrics::new().encode();
        let heap: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("ferrolb_controller_heap_bytes ")?.parse().ok())
            .unwrap_or_default();
        // The registry alone holds more than this; 0 would be a gauge never set.
        assert!(heap > 4096, "{text}");
    }
}
