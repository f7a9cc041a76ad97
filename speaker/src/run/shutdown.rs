//! The shutdown sequence (SIGTERM, SIGINT): make before break, for BGP and L2.

use std::time::Duration;

use tokio::time::Instant;

use super::parts::drain::HANDOVER_GRACE;
use super::state::State;

/// How long a stopping speaker waits for its active-active buckets to drain in the
/// kernel before it leaves membership: a netlink batch, milliseconds unless the node is
/// starved of CPU.
const FILTER_DRAINED: Duration = Duration::from_secs(2);

/// Drains every BGP prefix, hands L2 over, then closes the sessions with Cease.
pub(super) async fn shutdown(mut state: State) {
    // Make before break, BGP: every prefix is re-announced with GRACEFUL_SHUTDOWN (and
    // LOCAL_PREF 0 on iBGP) so routers move traffic to other nodes; the L2 handover runs
    // during that window; the sessions close once it has passed.
    let drain_until = Instant::now() + state.opts.drain_on_shutdown.min(state.opts.drain_max_delay);
    let mut drained = state.plan.clone();
    drained.drain_all("speaker shutting down (SIGTERM)");
    if !drained.bgp_addresses().is_empty() {
        tracing::info!(
            delay = ?state.opts.drain_on_shutdown.min(state.opts.drain_max_delay),
            "draining: re-announcing every prefix with GRACEFUL_SHUTDOWN (65535:0) before closing sessions"
        );
        let _ = state.bgp.apply(&state.model, &state.passwords, &drained).await;
    }
    if let Some(mut p) = state.l2.take() {
        // Make before break: peers drop this node at once and their takeover
        // announcements go out while this node still answers. Its active-active
        // buckets drain first, in the kernel: the peers take new flows of them as soon
        // as it leaves, and a bucket two nodes take new flows of answers one SYN twice
        // (the client resets the connection; seen in CI under CPU pressure).
        p.announcer.hand_over_all();
        if !p.announcer.filtered(FILTER_DRAINED).await {
            tracing::warn!(
                within = ?FILTER_DRAINED,
                "active-active buckets not drained in the kernel yet; leaving membership anyway"
            );
        }
        p.membership.leave().await;
        tracing::info!(grace = ?HANDOVER_GRACE, "left membership; still answering ARP/NDP during the handover grace");
        tokio::time::sleep(HANDOVER_GRACE).await;
        p.announcer.shutdown().await;
        tracing::info!("L2 announcer stopped");
    }
    if !drained.bgp_addresses().is_empty() {
        tokio::time::sleep_until(drain_until).await;
    }
    state.bgp.shutdown().await;
    tracing::info!("speaker stopped");
}
