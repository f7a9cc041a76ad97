//! BGP mode: the VIP on `lo`, announced to the peers while healthy, drained when not.

use std::net::IpAddr;
use std::time::Duration;

use crate::bgp::Input;
use crate::metrics::Metrics;
use crate::{addr, bgp, checkpoint};
use anyhow::{anyhow, bail};
use tokio::sync::watch;
use tokio::time::Instant;

use super::RunOptions;
use super::Stop;

pub(super) async fn run_bgp(
    a: &RunOptions,
    cp: &checkpoint::Checkpoint,
    ip: IpAddr,
    addrs: &addr::Addresses,
    mut health: watch::Receiver<bool>,
    metrics: &Metrics,
    stop: impl std::future::Future<Output = Stop>,
) -> anyhow::Result<Stop> {
    let vip = cp.vip();
    let configs = bgp::session_configs(&cp.config, vip, &a.node_name)
        .map_err(|e| anyhow!("{}: {e}", cp.path.display()))?;
    if let Err(e) = addr::set_arp_sysctls() {
        tracing::warn!(error = %e, "cannot set arp_ignore=1/arp_announce=2; set them on the node (see README) or every node answers ARP for the VIP");
    }
    match addrs.ensure("lo", ip, addr::host_len(ip)).await {
        Ok(addr::Ensured::Foreign) => {
            tracing::warn!(%ip, "the VIP is already on lo, not added by ferrolb; leaving it")
        }
        Ok(_) => {}
        Err(e) => bail!("adding the VIP {ip} to lo: {e}"),
    }
    let announcer = bgp::Announcer::start(configs, vip, ip);
    let mut drain = bgp::Drain::new(a.drain_delay.std());
    metrics.set_ready(true);
    tokio::pin!(stop);
    let reason;
    loop {
        let deadline = drain.poll_timeout();
        tokio::select! {
            s = &mut stop => { reason = s; break }
            r = health.changed() => {
                if r.is_err() { bail!("the health checker stopped") }
                let h = *health.borrow_and_update();
                drain.handle(Instant::now(), Input::Health(h));
            }
            _ = ferrolb_proto::time::sleep_until(deadline) => {
                drain.handle(Instant::now(), Input::Timeout);
            }
        }
        while let Some(phase) = drain.poll_event() {
            tracing::info!(?phase, "BGP announcement of the VIP");
            announcer.apply(phase);
            publish_phase(metrics, phase);
        }
    }
    // SIGTERM: GRACEFUL_SHUTDOWN first, withdraw after the shutdown drain.
    if drain.phase() != bgp::Phase::Withdrawn {
        let mut drain = bgp::Drain::new(a.shutdown_drain.std());
        drain.handle(Instant::now(), Input::Health(true));
        drain.handle(Instant::now(), Input::Shutdown);
        tracing::info!("draining: GRACEFUL_SHUTDOWN, then withdraw");
        announcer.apply(drain.phase());
        publish_phase(metrics, drain.phase());
        if let Some(d) = drain.poll_timeout() {
            tokio::time::sleep_until(d).await;
        }
        announcer.apply(bgp::Phase::Withdrawn);
        publish_phase(metrics, bgp::Phase::Withdrawn);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    announcer.shutdown().await;
    if addrs.release("lo", ip).await? {
        tracing::info!(%ip, "VIP removed from lo");
    }
    Ok(reason)
}

fn publish_phase(metrics: &Metrics, phase: bgp::Phase) {
    metrics.vip_announced.set(i64::from(phase != bgp::Phase::Withdrawn));
    metrics.vip_draining.set(i64::from(matches!(phase, bgp::Phase::Draining { .. })));
}
