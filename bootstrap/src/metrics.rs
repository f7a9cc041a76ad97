//! Metrics (OpenMetrics, `ferrolb_bootstrap_*`) and the liveness / readiness endpoint,
//! served together on `--metrics-addr` (default 127.0.0.1:7949).
//!
//! * `/metrics`: the gauges and counters below.
//! * `/healthz` (liveness): `200` while the health checker makes progress — a probe
//!   finished within [`Metrics::set_liveness_window`] — else `503`, so the kubelet
//!   restarts a wedged process. A failing apiserver does not fail it: probes that fail
//!   still finish.
//! * `/readyz`: `200` while the announcer of the current checkpoint runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

/// Label of `ferrolb_bootstrap_health_checks_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `success` or `failure`.
    pub result: String,
}

/// Label of `ferrolb_bootstrap_checkpoint_refresh_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// `timeout`, `denied`, `api`, `invalid` or `write` (see `refresh::RefreshError::metric_label`).
    pub reason: String,
}

/// The bootstrap's metrics and liveness state; shared by `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Membership (L2 mode): `ferrolb_membership_*`, the speaker's names, among them
    /// `ferrolb_membership_blind`.
    pub membership: ferrolb_proto::membership::MembershipMetrics,
    /// The L2 announcer (L2 mode): `ferrolb_l2_*`, the speaker's names.
    pub l2: ferrolb_proto::l2::L2Metrics,
    /// What the refresh's client receives (`ferrolb_kube_client_*`, every binary's names).
    pub kube_received: ferrolb_runtime::kube_client::Received,
    /// 1 while the health monitor says the local apiserver is healthy.
    pub healthy: Gauge,
    /// 1 if the last health probe got a 200.
    pub last_check_success: Gauge,
    /// Health probes by result.
    pub checks: Family<ResultLabel, Counter>,
    /// L2: 1 while this node holds the VIP on its interface.
    pub vip_owned: Gauge,
    /// BGP: 1 while this node announces the VIP (draining included).
    pub vip_announced: Gauge,
    /// BGP: 1 while the announcement carries GRACEFUL_SHUTDOWN before its withdrawal.
    pub vip_draining: Gauge,
    /// Checkpoints loaded by this process: 1 at start, +1 per reload after a refresh.
    pub checkpoint_generation: Gauge,
    /// Checkpoint rewrites by the refresh from the local apiserver.
    pub checkpoint_refreshes: Counter,
    /// 1 when the running checkpoint came from `FILE.prev`.
    pub checkpoint_from_previous: Gauge,
    /// Checkpoint refreshes that failed, by reason.
    pub checkpoint_refresh_errors: Family<ReasonLabel, Counter>,
    /// notAfter of the refresh client certificate in use, in Unix seconds (0: none).
    pub client_certificate_expiry: Gauge,
    ready: AtomicBool,
    base: Instant,
    /// Milliseconds after `base` when the last probe finished (0: none yet).
    last_probe_ms: AtomicU64,
    window_ms: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric registered under `ferrolb_bootstrap_`.
    pub fn new() -> Self {
        let mut root = Registry::default();
        ferrolb_runtime::build_info::register(&mut root, env!("CARGO_PKG_VERSION"), env!("FERROLB_REVISION"));
        let membership = ferrolb_proto::membership::MembershipMetrics::new(&mut root);
        let l2 = ferrolb_proto::l2::L2Metrics::new(&mut root);
        let kube_received = ferrolb_runtime::kube_client::Received::default();
        kube_received.register(&mut root);
        let registry = root.sub_registry_with_prefix("ferrolb_bootstrap");
        let healthy = Gauge::default();
        registry.register("healthy", "1 while the local apiserver counts as healthy", healthy.clone());
        let last_check_success = Gauge::default();
        registry.register(
            "last_health_check_success",
            "1 if the last health probe of the local apiserver got a 200",
            last_check_success.clone(),
        );
        let checks = Family::<ResultLabel, Counter>::default();
        registry.register("health_checks", "Health probes of the local apiserver by result", checks.clone());
        let vip_owned = Gauge::default();
        registry.register("vip_owned", "L2: 1 while this node holds the VIP", vip_owned.clone());
        let vip_announced = Gauge::default();
        registry.register(
            "vip_announced",
            "BGP: 1 while this node announces the VIP (draining included)",
            vip_announced.clone(),
        );
        let vip_draining = Gauge::default();
        registry.register(
            "vip_draining",
            "BGP: 1 while the VIP is announced with GRACEFUL_SHUTDOWN before its withdrawal",
            vip_draining.clone(),
        );
        let checkpoint_generation = Gauge::default();
        registry.register(
            "checkpoint_generation",
            "Checkpoints loaded by this process (1 at start, +1 per reload after a refresh)",
            checkpoint_generation.clone(),
        );
        let checkpoint_refreshes = Counter::default();
        registry.register(
            "checkpoint_refreshes",
            "Checkpoint rewrites from the local apiserver",
            checkpoint_refreshes.clone(),
        );
        let checkpoint_from_previous = Gauge::default();
        registry.register(
            "checkpoint_from_previous",
            "1 when the running checkpoint was read from FILE.prev",
            checkpoint_from_previous.clone(),
        );
        let checkpoint_refresh_errors = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "checkpoint_refresh_errors",
            "Checkpoint refreshes from the local apiserver that failed, by reason",
            checkpoint_refresh_errors.clone(),
        );
        let client_certificate_expiry = Gauge::default();
        registry.register(
            "client_certificate_expiry_timestamp_seconds",
            "notAfter of the refresh client certificate in use, in Unix seconds (0: no refresh credentials)",
            client_certificate_expiry.clone(),
        );
        Self {
            registry: root,
            membership,
            l2,
            kube_received,
            healthy,
            last_check_success,
            checks,
            vip_owned,
            vip_announced,
            vip_draining,
            checkpoint_generation,
            checkpoint_refreshes,
            checkpoint_from_previous,
            checkpoint_refresh_errors,
            client_certificate_expiry,
            ready: AtomicBool::new(false),
            base: Instant::now(),
            last_probe_ms: AtomicU64::new(0),
            window_ms: AtomicU64::new(30_000),
        }
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Records one finished health probe.
    pub fn probe_finished(&self, now: Instant, ok: bool) {
        self.last_check_success.set(i64::from(ok));
        let result = if ok { "success" } else { "failure" };
        self.checks.get_or_create(&ResultLabel { result: result.into() }).inc();
        let ms = u64::try_from(now.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX);
        self.last_probe_ms.store(ms.max(1), Ordering::Relaxed);
    }

    /// Counts one failed checkpoint refresh.
    pub fn refresh_failed(&self, reason: &str) {
        self.checkpoint_refresh_errors.get_or_create(&ReasonLabel { reason: reason.into() }).inc();
    }

    /// How many checkpoint refreshes failed for `reason`.
    pub fn refresh_errors(&self, reason: &str) -> u64 {
        self.checkpoint_refresh_errors.get(&ReasonLabel { reason: reason.into() }).map_or(0, |c| c.get())
    }

    /// How long the health checker may go without finishing a probe before `/healthz`
    /// fails (set from the checkpoint's interval and timeout).
    pub fn set_liveness_window(&self, window: Duration) {
        self.window_ms.store(u64::try_from(window.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// The liveness window for a health check of `interval` and `timeout`: ten probes'
    /// worth, at least 30 s.
    pub fn liveness_window(interval: Duration, timeout: Duration) -> Duration {
        ((interval + timeout) * 10).max(Duration::from_secs(30))
    }

    /// Whether the health checker made progress within the window (counted from the
    /// start before the first probe).
    pub fn is_live(&self, now: Instant) -> bool {
        let since_base =
            u64::try_from(now.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX);
        let last = self.last_probe_ms.load(Ordering::Relaxed);
        since_base.saturating_sub(last) <= self.window_ms.load(Ordering::Relaxed)
    }

    /// Marks the announcer running (or not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether the announcer runs.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The answer to `GET path`: (status line, content type, body).
    pub fn answer(&self, path: &str, now: Instant) -> ferrolb_runtime::http::Answer {
        const TEXT: &str = "text/plain";
        match path {
            "/metrics" => {
                ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", self.encode())
            }
            "/healthz" if self.is_live(now) => ("200 OK", TEXT, "ok\n".into()),
            "/healthz" => ("503 Service Unavailable", TEXT, "the health checker made no progress\n".into()),
            "/readyz" if self.is_ready() => ("200 OK", TEXT, "ok\n".into()),
            "/readyz" => ("503 Service Unavailable", TEXT, "not announcing yet\n".into()),
            _ => ("404 Not Found", TEXT, "not found\n".into()),
        }
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` on `addr` (bound now, served on a task).
    pub async fn serve(self: Arc<Self>, addr: SocketAddr) -> std::io::Result<()> {
        ferrolb_runtime::http::serve(addr, move |path| self.answer(path, Instant::now())).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_carry_the_bootstrap_prefix() {
        let m = Metrics::new();
        m.healthy.set(1);
        m.vip_owned.set(1);
        m.checkpoint_generation.set(2);
        m.checkpoint_refreshes.inc();
        m.refresh_failed("timeout");
        m.client_certificate_expiry.set(1_800_000_000);
        m.probe_finished(Instant::now(), false);
        // Membership and L2 (L2 mode) keep the speaker's names, unprefixed.
        m.membership.set_blind(true);
        let text = m.encode();
        for line in [
            "ferrolb_membership_blind 1",
            "ferrolb_membership_members 0",
            "ferrolb_l2_owned_addresses 0",
            "ferrolb_bootstrap_healthy 1",
            "ferrolb_bootstrap_vip_owned 1",
            "ferrolb_bootstrap_vip_announced 0",
            "ferrolb_bootstrap_checkpoint_generation 2",
            "ferrolb_bootstrap_checkpoint_refreshes_total 1",
            "ferrolb_bootstrap_checkpoint_refresh_errors_total{reason=\"timeout\"} 1",
            "ferrolb_bootstrap_client_certificate_expiry_timestamp_seconds 1800000000",
            "ferrolb_bootstrap_last_health_check_success 0",
            "ferrolb_bootstrap_health_checks_total{result=\"failure\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "OpenMetrics text ends with # EOF: {text}");
    }

    #[test]
    fn build_info_names_the_version_and_revision() {
        let text = Metrics::new().encode();
        let line = ferrolb_runtime::build_info::sample(env!("CARGO_PKG_VERSION"), env!("FERROLB_REVISION"));
        assert!(text.lines().any(|l| l == line), "{line:?} missing in\n{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn healthz_fails_when_the_health_checker_stalls() {
        let m = Metrics::new();
        m.set_liveness_window(Duration::from_secs(30));
        let t0 = Instant::now();
        assert_eq!(m.answer("/healthz", t0).0, "200 OK", "live from the start");
        tokio::time::advance(Duration::from_secs(20)).await;
        m.probe_finished(Instant::now(), false);
        tokio::time::advance(Duration::from_secs(29)).await;
        assert_eq!(m.answer("/healthz", Instant::now()).0, "200 OK", "a failing probe is progress");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(m.answer("/healthz", Instant::now()).0, "503 Service Unavailable");
        m.probe_finished(Instant::now(), true);
        assert_eq!(m.answer("/healthz", Instant::now()).0, "200 OK");
    }

    #[test]
    fn readyz_follows_the_announcer() {
        let m = Metrics::new();
        assert_eq!(m.answer("/readyz", Instant::now()).0, "503 Service Unavailable");
        m.set_ready(true);
        assert_eq!(m.answer("/readyz", Instant::now()).0, "200 OK");
        assert_eq!(m.answer("/nope", Instant::now()).0, "404 Not Found");
    }

    #[test]
    fn the_liveness_window_is_ten_probes_and_at_least_30s() {
        let s = Duration::from_secs;
        assert_eq!(Metrics::liveness_window(s(1), s(1)), s(30));
        assert_eq!(Metrics::liveness_window(s(5), s(2)), s(70));
    }
}
