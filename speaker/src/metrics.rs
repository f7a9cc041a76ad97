//! Speaker metrics (OpenMetrics via prometheus-client) and the tiny HTTP endpoint that
//! serves them with `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use ferrolb_proto::bfd::BfdMetrics;
use ferrolb_proto::l2::L2Metrics;
use ferrolb_proto::membership::MembershipMetrics;

/// Label set `{peer}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabel {
    /// BGPPeer name.
    pub peer: String,
}

/// Label set `{protocol}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabel {
    /// `bgp` or `l2`.
    pub protocol: String,
}

/// Label set `{reason}` for rejected static files.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok` or `rejected`.
    pub result: String,
}

/// Label set `{reason}` of Events.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// `Announced` or `Withdrawn`.
    pub reason: String,
}

/// Label set `{kind}` of watch errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The watched kind, e.g. `Service`.
    pub kind: String,
}

/// Label set `{change, reason}` of L2 ownership changes.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OwnershipLabel {
    /// `acquired` or `released`.
    pub change: String,
    /// `member_joined`, `member_left`, `heartbeat_missed`, `heartbeat_resumed`,
    /// `declared_down`, `rejoined`, `membership_settled`, `membership_unsettled`, `config`
    /// or `shutdown`.
    pub reason: String,
}

/// Label set `{status, reason}` of readiness gate conditions written.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabel {
    /// `True` or `False`.
    pub status: String,
    /// The condition's reason, e.g. `Announced`.
    pub reason: String,
}

/// Readiness gate metrics (`ferrolb_readiness_*`); clones share the same values.
#[derive(Clone, Debug, Default)]
pub struct ReadinessMetrics {
    /// Pods on this node carrying the gate `ferrolb.io/load-balancer-ready`.
    pub pods_gated: Gauge,
    /// Gate conditions written (pods/status patches that succeeded), by status and reason.
    pub conditions_written: Family<ConditionLabel, Counter>,
    /// pods/status patches that failed (each is retried).
    pub write_errors: Counter,
}

impl ReadinessMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "readiness_pods_gated",
            "pods on this node with the readiness gate ferrolb.io/load-balancer-ready",
            self.pods_gated.clone(),
        );
        registry.register(
            "readiness_conditions_written",
            "readiness gate conditions written to pods/status, by status and reason",
            self.conditions_written.clone(),
        );
        registry.register(
            "readiness_write_errors",
            "failed pods/status patches of the readiness gate (retried)",
            self.write_errors.clone(),
        );
    }
}

/// Every metric the speaker exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// 1 while the session with the peer is Established.
    pub session_up: Family<PeerLabel, Gauge>,
    /// UPDATE messages sent per peer.
    pub updates_sent: Family<PeerLabel, Counter>,
    /// Prefixes announced (counted per UPDATE) per peer.
    pub prefixes_sent: Family<PeerLabel, Counter>,
    /// UPDATE messages received per peer (their routes are dropped).
    pub updates_received: Family<PeerLabel, Counter>,
    /// Prefixes received per peer.
    pub prefixes_received: Family<PeerLabel, Counter>,
    /// Addresses this node announces, per protocol.
    pub announced: Family<ProtocolLabel, Gauge>,
    /// L2 addresses no node can own ([`crate::plan::Plan::l2_unowned`]).
    pub l2_unowned: Gauge,
    /// Static file loads, by result.
    pub config_loads: Family<ResultLabel, Counter>,
    /// L2 addresses this node started or stopped owning, by reason.
    pub l2_ownership_changes: Family<OwnershipLabel, Counter>,
    /// Kubernetes mode: ServiceAnnouncement writes by result (`applied`, `deleted`, `error`).
    pub status_writes: Family<ResultLabel, Counter>,
    /// Kubernetes mode: Events published, by reason.
    pub events: Family<ReasonLabel, Counter>,
    /// Kubernetes mode: Events not published because the Service had too many lately.
    pub events_suppressed: Family<ReasonLabel, Counter>,
    /// Kubernetes mode: failed watches (each is retried with back-off), by kind.
    pub watch_errors: Family<KindLabel, Counter>,
    /// Kubernetes mode: 1 once every watched kind has been listed completely.
    pub model_synced: Gauge,
    /// Kubernetes mode: readiness gate metrics (`ferrolb_readiness_*`).
    pub readiness: ReadinessMetrics,
    /// The L2 announcer's metrics (`ferrolb_l2_*`).
    pub l2: L2Metrics,
    /// The active-active bucket filter's metrics (`ferrolb_l2_active_active_*`).
    pub active_active: crate::announce::active_active::FilterMetrics,
    /// Membership metrics (`ferrolb_membership_*`).
    pub membership: MembershipMetrics,
    /// BFD session metrics (`ferrolb_bfd_*`).
    pub bfd: BfdMetrics,
    /// Seconds each plan took, from the change to the plan handed to the announcers,
    /// the status writer and the readiness gates.
    pub replan_seconds: Histogram,
    /// Heap bytes the speaker's allocations hold, read at each scrape.
    heap_bytes: Gauge,
    /// What the speaker's client receives (`ferrolb_kube_client_*`, every binary's names).
    pub kube_received: ferrolb_runtime::kube_client::Received,
    ready: AtomicBool,
    scrapes: AtomicU64,
    /// Milliseconds after `started` of the event loop's last heartbeat (0: none yet).
    heartbeat_ms: AtomicU64,
    started: std::time::Instant,
}

/// Bytes held by live allocations: what a leak grows. RSS also counts freed memory the
/// allocator has not handed back yet, which swings by 10 % from one burst to the next.
/// `/healthz` fails once the event loop has not beaten for this long.
pub const HEARTBEAT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut root = Registry::default();
        ferrolb_runtime::build_info::register(&mut root, env!("CARGO_PKG_VERSION"), env!("FERROLB_REVISION"));
        // These three register their own `ferrolb_`-prefixed names.
        let l2 = L2Metrics::new(&mut root);
        let membership = MembershipMetrics::new(&mut root);
        let bfd = BfdMetrics::register(&mut root);
        let kube_received = ferrolb_runtime::kube_client::Received::default();
        kube_received.register(&mut root);
        let l2_ownership_changes = Family::<OwnershipLabel, Counter>::default();
        let registry = root.sub_registry_with_prefix("ferrolb");
        let session_up = Family::<PeerLabel, Gauge>::default();
        let updates_sent = Family::<PeerLabel, Counter>::default();
        let prefixes_sent = Family::<PeerLabel, Counter>::default();
        let updates_received = Family::<PeerLabel, Counter>::default();
        let prefixes_received = Family::<PeerLabel, Counter>::default();
        let announced = Family::<ProtocolLabel, Gauge>::default();
        let l2_unowned = Gauge::default();
        let config_loads = Family::<ResultLabel, Counter>::default();
        // Exported at 0 from the start, so that the first rejection is an increase
        // (FerrolbSpeakerConfigRejected in manifests/components/monitoring).
        for result in ["ok", "rejected"] {
            let _ = config_loads.get_or_create(&ResultLabel { result: result.into() });
        }
        let status_writes = Family::<ResultLabel, Counter>::default();
        let events = Family::<ReasonLabel, Counter>::default();
        let events_suppressed = Family::<ReasonLabel, Counter>::default();
        let watch_errors = Family::<KindLabel, Counter>::default();
        let model_synced = Gauge::default();
        let heap_bytes = Gauge::default();
        // 0.25 ms to 4 s.
        let replan_seconds = Histogram::new(exponential_buckets(0.000_25, 2.0, 15));
        let readiness = ReadinessMetrics::default();
        readiness.register(registry);
        let active_active = crate::announce::active_active::FilterMetrics::register(registry);
        registry.register(
            "speaker_status_writes",
            "ServiceAnnouncement writes by result",
            status_writes.clone(),
        );
        registry.register("speaker_events", "Events published on Services, by reason", events.clone());
        registry.register(
            "speaker_events_suppressed",
            "Events not published (rate limit per Service), by reason",
            events_suppressed.clone(),
        );
        registry.register(
            "speaker_watch_errors",
            "failed API watches, by kind (retried)",
            watch_errors.clone(),
        );
        registry.register(
            "speaker_model_synced",
            "1 once every watched kind has been listed completely",
            model_synced.clone(),
        );
        registry.register(
            "speaker_heap_bytes",
            "heap bytes held by live allocations (counted by the allocator; excludes freed memory it keeps)",
            heap_bytes.clone(),
        );
        registry.register(
            "speaker_replan_seconds",
            "time each plan took: from the change to the plan handed to the announcers, status writer and gates",
            replan_seconds.clone(),
        );
        registry.register("bgp_session_up", "1 while the BGP session is Established", session_up.clone());
        registry.register("bgp_updates_sent", "BGP UPDATE messages sent", updates_sent.clone());
        registry.register("bgp_prefixes_sent", "prefixes announced in BGP UPDATEs", prefixes_sent.clone());
        registry.register("bgp_updates_received", "BGP UPDATE messages received", updates_received.clone());
        registry.register("bgp_prefixes_received", "prefixes received (dropped)", prefixes_received.clone());
        registry.register("speaker_announced", "addresses this node announces", announced.clone());
        registry.register(
            "speaker_l2_unowned_addresses",
            "addresses an L2Advertisement selects that no Ready, live, selected node can own",
            l2_unowned.clone(),
        );
        registry.register("speaker_config_loads", "static file loads by result", config_loads.clone());
        registry.register(
            "l2_ownership_changes",
            "L2 addresses this node started (acquired) or stopped (released) owning, by reason",
            l2_ownership_changes.clone(),
        );
        Self {
            registry: root,
            l2_ownership_changes,
            l2,
            active_active,
            membership,
            bfd,
            session_up,
            updates_sent,
            prefixes_sent,
            updates_received,
            prefixes_received,
            announced,
            l2_unowned,
            config_loads,
            status_writes,
            events,
            events_suppressed,
            watch_errors,
            model_synced,
            readiness,
            heap_bytes,
            kube_received,
            replan_seconds,
            ready: AtomicBool::new(false),
            scrapes: AtomicU64::new(0),
            heartbeat_ms: AtomicU64::new(0),
            started: std::time::Instant::now(),
        }
    }

    /// Drops every `{peer}` series of a BGPPeer that no longer applies to this node
    /// (a deleted peer is gone from the metrics, not shown down forever).
    pub fn forget_peer(&self, peer: &str) {
        let l = PeerLabel { peer: peer.to_owned() };
        self.session_up.remove(&l);
        self.updates_sent.remove(&l);
        self.prefixes_sent.remove(&l);
        self.updates_received.remove(&l);
        self.prefixes_received.remove(&l);
    }

    /// Marks the speaker ready (first configuration applied).
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Whether the speaker is ready (its first configuration or synced model applied).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The event loop is alive (called on every loop iteration and clock tick).
    pub fn beat(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX).max(1);
        self.heartbeat_ms.store(ms, Ordering::Relaxed);
    }

    /// Healthy: the event loop has not started yet, or beat within [`HEARTBEAT_TIMEOUT`].
    pub fn is_alive(&self) -> bool {
        let last = self.heartbeat_ms.load(Ordering::Relaxed);
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let timeout = u64::try_from(HEARTBEAT_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
        last == 0 || now.saturating_sub(last) < timeout
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        self.scrapes.fetch_add(1, Ordering::Relaxed);
        if let Some(bytes) = ferrolb_runtime::heap::in_use() {
            self.heap_bytes.set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// The answer to `GET path`: (status line, content type, body).
    pub fn answer(&self, path: &str) -> ferrolb_runtime::http::Answer {
        match path {
            "/metrics" => {
                ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", self.encode())
            }
            "/healthz" if self.is_alive() => ("200 OK", "text/plain", "ok\n".to_string()),
            "/healthz" => (
                "503 Service Unavailable",
                "text/plain",
                "the event loop is stuck: no heartbeat for 30s\n".to_string(),
            ),
            "/readyz" if self.is_ready() => ("200 OK", "text/plain", "ok\n".into()),
            "/readyz" => (
                "503 Service Unavailable",
                "text/plain",
                "no configuration applied yet (Kubernetes mode: not every watch has listed)\n".into(),
            ),
            _ => ("404 Not Found", "text/plain", "not found\n".into()),
        }
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `addr` until the runtime stops.
    pub async fn serve(self: Arc<Self>, addr: SocketAddr) -> std::io::Result<()> {
        ferrolb_runtime::http::serve(addr, move |path| self.answer(path)).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn names_carry_the_prefix_and_labels() {
        let m = Metrics::new();
        m.session_up.get_or_create(&PeerLabel { peer: "router-a".into() }).set(1);
        m.announced.get_or_create(&ProtocolLabel { protocol: "bgp".into() }).set(3);
        m.updates_sent.get_or_create(&PeerLabel { peer: "router-a".into() }).inc_by(2);
        let text = m.encode();
        assert!(text.contains("ferrolb_bgp_session_up{peer=\"router-a\"} 1"), "{text}");
        assert!(text.contains("ferrolb_speaker_announced{protocol=\"bgp\"} 3"), "{text}");
        assert!(text.contains("ferrolb_bgp_updates_sent_total{peer=\"router-a\"} 2"), "{text}");
        m.l2_ownership_changes
            .get_or_create(&OwnershipLabel { change: "acquired".into(), reason: "member_left".into() })
            .inc();
        let text = m.encode();
        assert!(
            text.contains("ferrolb_l2_ownership_changes_total{change=\"acquired\",reason=\"member_left\"} 1"),
            "{text}"
        );
        assert!(text.contains("ferrolb_l2_owned_addresses 0"), "{text}");
        assert!(text.contains("ferrolb_membership_members 0"), "{text}");
        // BFD sessions report into this registry, without a doubled prefix.
        m.bfd.transition(
            "192.0.2.1".parse().unwrap(),
            ferrolb_proto::bfd::State::Init,
            ferrolb_proto::bfd::State::Up,
        );
        let text = m.encode();
        assert!(text.contains("ferrolb_bfd_session_up{peer=\"192.0.2.1\"} 1"), "{text}");
        assert!(!text.contains("ferrolb_ferrolb"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn build_info_names_the_version_and_revision() {
        let text = Metrics::new().encode();
        let line = ferrolb_runtime::build_info::sample(env!("CARGO_PKG_VERSION"), env!("FERROLB_REVISION"));
        assert!(text.lines().any(|l| l == line), "{line:?} missing in\n{text}");
    }

    #[test]
    fn unowned_l2_addresses_are_exported() {
        let m = Metrics::new();
        assert!(m.encode().lines().any(|l| l == "ferrolb_speaker_l2_unowned_addresses 0"));
        m.l2_unowned.set(2);
        let text = m.encode();
        assert!(text.lines().any(|l| l == "ferrolb_speaker_l2_unowned_addresses 2"), "{text}");
    }

    #[test]
    fn rejected_configurations_are_exported_from_zero() {
        // The first rejection is then an increase (FerrolbSpeakerConfigRejected).
        let text = Metrics::new().encode();
        assert!(
            text.lines().any(|l| l == "ferrolb_speaker_config_loads_total{result=\"rejected\"} 0"),
            "{text}"
        );
    }

    fn heap_gauge(text: &str) -> u64 {
        text.lines().find_map(|l| l.strip_prefix("ferrolb_speaker_heap_bytes ")?.parse().ok()).unwrap()
    }

    #[test]
    fn heap_gauge_counts_live_allocations_and_not_freed_ones() {
        // Other tests allocate beside this one in the same process: a margin of 192 MiB
        // on a 256 MiB block leaves them room.
        const BLOCK: u64 = 256 << 20;
        const MARGIN: u64 = 192 << 20;
        let m = Metrics::new();
        let before = heap_gauge(&m.encode());
        // Touched, so that it is neither optimised away nor left unmapped.
        let held = vec![1u8; BLOCK as usize];
        let holding = heap_gauge(&m.encode());
        assert!(holding >= before + MARGIN, "{before} -> {holding}");
        assert_eq!(held.iter().map(|&b| u64::from(b)).sum::<u64>(), BLOCK);
        drop(held);
        let after = heap_gauge(&m.encode());
        assert!(after + MARGIN <= holding, "{holding} -> {after} after the free");
    }

    #[test]
    fn healthz_fails_once_the_event_loop_stops_beating() {
        let mut m = Metrics::new();
        assert!(m.is_alive(), "healthy before the loop starts");
        m.started = std::time::Instant::now() - std::time::Duration::from_secs(100);
        m.beat();
        assert!(m.is_alive());
        // The last beat was 99 s ago.
        m.heartbeat_ms.store(1_000, Ordering::Relaxed);
        assert!(!m.is_alive());
        m.beat();
        assert!(m.is_alive());
    }

    #[tokio::test]
    async fn http_endpoint_serves_metrics_and_readiness() {
        let m = Arc::new(Metrics::new());
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        m.clone().serve(addr).await.unwrap();
        let get = |path: &'static str| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        m.set_ready();
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/metrics").await.contains("# EOF"));
        // A request head arriving in pieces (as `write!` sends it) is read whole.
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /rea").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        s.write_all(b"dyz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    }
}
