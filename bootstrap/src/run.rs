//! `run`: announces the VIP of the checkpoint (BGP or L2 mode) gated on the health
//! monitor, restarting with a refreshed checkpoint, until SIGTERM. In the library, so
//! tests drive the loop the binary runs.

mod bgp_mode;
mod l2_mode;
mod local_api;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Metrics;
use crate::{addr, checkpoint, health};
use anyhow::{Context, anyhow, bail};
use ferrolb_api::VipMode;
use tokio::sync::watch;

/// What `ferrolb-bootstrap run` is started with (its flags).
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The checkpoint file; FILE.prev is the fallback.
    pub checkpoint: std::path::PathBuf,
    /// This node's name (as in spec.members).
    pub node_name: String,
    /// Metrics (/metrics), liveness (/healthz) and readiness (/readyz) endpoint.
    pub metrics_addr: std::net::SocketAddr,
    /// Kubeconfig for the checkpoint refresh; default `bootstrap.kubeconfig` next to the
    /// checkpoint.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Name verified in the apiserver certificate when probing a loopback URL.
    pub apiserver_tls_name: String,
    /// BGP: how long a draining route (GRACEFUL_SHUTDOWN) stays before its withdrawal.
    pub drain_delay: ferrolb_api::Duration,
    /// BGP: keep announcing this long after SIGTERM before withdrawing.
    pub shutdown_drain: ferrolb_api::Duration,
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => {}
                _ = i.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// Why an announcing loop ended.
#[derive(Debug)]
pub(crate) enum Stop {
    /// SIGTERM / SIGINT: drain and exit 0.
    Signal,
    /// The checkpoint was refreshed with a different configuration: drain, restart with it.
    Reload(Box<checkpoint::Checkpoint>),
}

/// Resolves on a signal, or when the refresh rewrote the checkpoint into something
/// different from `current` (an unreadable rewrite is logged and ignored).
async fn wait_stop(
    shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    written: &mut watch::Receiver<u64>,
    path: &Path,
    current: &checkpoint::Checkpoint,
    metrics: &Metrics,
) -> Stop {
    loop {
        tokio::select! {
            _ = shutdown.as_mut() => return Stop::Signal,
            r = written.changed() => {
                if r.is_err() {
                    shutdown.as_mut().await;
                    return Stop::Signal;
                }
                metrics.checkpoint_refreshes.inc();
                match checkpoint::load_one(path) {
                    Ok(new) if new.config != current.config => return Stop::Reload(Box::new(new)),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "refreshed checkpoint unusable; keeping the running one"),
                }
            }
        }
    }
}

pub async fn run(a: RunOptions) -> anyhow::Result<()> {
    let mut cp = checkpoint::load(&a.checkpoint).map_err(|e| anyhow!(e))?;
    for w in &cp.warnings {
        tracing::warn!("{w}");
    }
    let vip_name = kube::ResourceExt::name_any(cp.vip());
    let metrics = Arc::new(Metrics::new());
    metrics
        .clone()
        .serve(a.metrics_addr)
        .await
        .with_context(|| format!("--metrics-addr {}", a.metrics_addr))?;

    // Refresh the checkpoint from the local apiserver when credentials exist.
    let (written_tx, mut written_rx) = watch::channel(0u64);
    let kubeconfig = a
        .kubeconfig
        .clone()
        .unwrap_or_else(|| a.checkpoint.parent().unwrap_or(Path::new(".")).join("bootstrap.kubeconfig"));
    if kubeconfig.exists() {
        if let Err(e) =
            local_api::start_refresh(&kubeconfig, &a.checkpoint, &vip_name, written_tx, &metrics).await
        {
            tracing::warn!(error = %format!("{e:#}"), "checkpoint refresh disabled");
        }
    } else {
        tracing::info!(kubeconfig = %kubeconfig.display(), "no refresh credentials; the checkpoint is not refreshed");
    }
    let addrs = addr::Addresses::connect()?;
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let vip = cp.vip().clone();
        let ip: IpAddr = vip.spec.address.trim().parse().map_err(|_| anyhow!("spec.address is not an IP"))?;
        if !vip.spec.members.iter().any(|m| m.name == a.node_name) {
            bail!(
                "{}: ControlPlaneVIP/{vip_name}: spec.members: node {:?} is not a member; add it or fix --node-name",
                cp.path.display(),
                a.node_name
            );
        }
        tracing::info!(file = %cp.path.display(), vip = %ip, mode = ?vip.spec.mode, node = %a.node_name, "checkpoint loaded");
        metrics.checkpoint_generation.inc();
        metrics.checkpoint_from_previous.set(i64::from(cp.path != a.checkpoint));
        let prober = health::Prober::new(&vip.spec.health_check, &a.apiserver_tls_name).map_err(|e| {
            anyhow!("{}: ControlPlaneVIP/{vip_name}: spec.healthCheck: {e}", cp.path.display())
        })?;
        let interval = vip.spec.health_check.interval().map(|d| d.std()).unwrap_or(Duration::from_secs(1));
        let threshold = u32::try_from(vip.spec.health_check.failure_threshold).unwrap_or(3);
        let timeout = vip.spec.health_check.timeout().map(|d| d.std()).unwrap_or(Duration::from_secs(1));
        metrics.set_liveness_window(Metrics::liveness_window(interval, timeout));
        let (health_tx, health_rx) = watch::channel(false);
        let monitor = health::Monitor::new(interval, threshold, health::SUCCESS_THRESHOLD);
        let health_task = tokio::spawn(health::run(prober, monitor, health_tx, metrics.clone()));
        let stop = wait_stop(&mut shutdown, &mut written_rx, &a.checkpoint, &cp, &metrics);
        let result = match vip.spec.mode {
            VipMode::Bgp => bgp_mode::run_bgp(&a, &cp, ip, &addrs, health_rx, &metrics, stop).await,
            VipMode::L2 => l2_mode::run_l2(&a, &vip, ip, &addrs, health_rx, &metrics, stop).await,
        };
        health_task.abort();
        metrics.set_ready(false);
        match result? {
            Stop::Signal => break,
            Stop::Reload(new) => {
                tracing::info!(file = %new.path.display(), "checkpoint changed; restarting the announcement with it");
                cp = *new;
            }
        }
    }
    tracing::info!("stopped");
    Ok(())
}
