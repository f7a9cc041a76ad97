//! Kubernetes mode: the readiness gate `ferrolb.io/load-balancer-ready` of this node's
//! pods, fed by the plan, what is really announced and the other nodes' announcements.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::state::{Cause, State, len_i64};
use crate::announce::{Announced, AnnouncedFeed};
use crate::cluster::readiness::{Readiness, RemoteWatch};
use crate::plan::Announcements;
use crate::readiness::{self, GatedPod, RemoteAnnounced};

/// After the model synced, how long the readiness gate keeps pods True that it would
/// turn False, while this (re)started speaker's sessions come up and catch up with the
/// plan (the hold ends earlier once everything planned is really announced).
pub const GATE_STARTUP_HOLD: Duration = Duration::from_secs(30);

/// Kubernetes mode: the readiness gate `ferrolb.io/load-balancer-ready` of this node's
/// pods (see [`crate::readiness`] and README-readiness.md).
pub(super) struct GatePart {
    /// Watches this node's pods and writes their conditions.
    pub(super) readiness: Readiness,
    /// What the BGP and L2 announcers really announce.
    pub(super) feed: AnnouncedFeed,
    pub(super) announced: watch::Receiver<Announced>,
    /// Other nodes' ServiceAnnouncements, watched once this node has gated pods.
    pub(super) remote: Option<RemoteWatch>,
    /// What they announce, recomputed when they change (None: not listed yet).
    pub(super) remote_view: Option<RemoteAnnounced>,
    /// This node's pods with the gate, as last read.
    pub(super) pods: Vec<GatedPod>,
    /// The startup hold ([`GATE_STARTUP_HOLD`]): None before the first evaluation.
    pub(super) hold: Option<Hold>,
}

/// The readiness gate's startup hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// True conditions stay True until then (or until the plan is really announced).
    Until(Instant),
    /// Over.
    Done,
}

/// Whether everything `plan` announces is really announced.
pub(super) fn caught_up(plan: &Announcements, announced: &Announced) -> bool {
    plan.bgp_addresses().iter().all(|p| announced.bgp.contains_key(p))
        && plan.l2.keys().all(|ip| announced.l2.contains(ip))
}

/// Which gate input changed.
pub(super) enum GateSignal {
    Pods,
    Announced,
    Remote,
}

/// Clones of the gate's change receivers, so the event loop can wait on them without
/// borrowing the state (the handler marks the originals seen).
pub(super) type GateWatch = (watch::Receiver<u64>, watch::Receiver<Announced>, Option<watch::Receiver<u64>>);

/// Resolves when one of the gate's inputs changed (never in static mode).
pub(super) async fn gate_changed(w: Option<GateWatch>) -> GateSignal {
    let Some((mut pods, mut announced, remote)) = w else {
        return std::future::pending().await;
    };
    let remote_changed = async {
        match remote {
            Some(mut r) => r.changed().await.is_ok(),
            None => std::future::pending().await,
        }
    };
    let signal = tokio::select! {
        r = pods.changed() => r.is_ok().then_some(GateSignal::Pods),
        r = announced.changed() => r.is_ok().then_some(GateSignal::Announced),
        ok = remote_changed => ok.then_some(GateSignal::Remote),
    };
    match signal {
        Some(s) => s,
        // A closed channel never fires again: do not spin on it.
        None => std::future::pending().await,
    }
}

impl State {
    /// The clones [`gate_changed`] waits on (None in static mode).
    pub(super) fn gate_watch(&self) -> Option<GateWatch> {
        let g = &self.cluster.as_ref()?.gate;
        Some((g.readiness.pod_changes(), g.announced.clone(), g.remote.as_ref().map(RemoteWatch::changes)))
    }

    /// Kubernetes mode: one of the gate's inputs changed.
    pub(super) async fn on_gate_signal(&mut self, signal: GateSignal) {
        let Some(c) = self.cluster.as_mut() else { return };
        match signal {
            GateSignal::Pods => {
                c.gate.readiness.mark_pods_seen();
                let pods = c.gate.readiness.gated_pods();
                self.metrics.readiness.pods_gated.set(len_i64(&pods));
                if !pods.is_empty() && c.gate.remote.is_none() {
                    tracing::info!(
                        pods = pods.len(),
                        "pods with the readiness gate on this node: watching ServiceAnnouncements"
                    );
                    c.gate.remote = Some(RemoteWatch::start(c.client.clone()));
                }
                if pods == c.gate.pods {
                    // An evaluation skipped while this change was unseen happens now.
                    self.update_gates();
                    return;
                }
                c.gate.pods = pods;
                if !c.feed.synced() {
                    // The first plan (at sync) counts them.
                    return;
                }
                let changed =
                    readiness::apply_gate_pending(&mut self.model, &c.gate.pods, &self.opts.node_name);
                if changed.is_empty() {
                    self.update_gates();
                } else {
                    let names: Vec<String> = changed.iter().map(ToString::to_string).collect();
                    let text = format!("pods waiting for the readiness gate changed ({})", names.join(", "));
                    self.replan(&Cause::new("config", text)).await;
                }
            }
            GateSignal::Announced => {
                // Seen now, even if this evaluation is skipped: the loop must not spin on it.
                c.gate.announced.borrow_and_update();
                self.update_gates();
            }
            GateSignal::Remote => {
                if let Some(r) = c.gate.remote.as_mut() {
                    r.mark_seen();
                    // Once per change, not per evaluation: there may be many of them.
                    c.gate.remote_view = r.listed().then(|| r.remote(&self.opts.node_name));
                }
                self.update_gates();
            }
        }
    }

    /// Hands the readiness gate writer the conditions this node's gated pods should have
    /// now; not before the model is synced, this node's pods are listed and counted, and
    /// the other nodes' ServiceAnnouncements are listed. While the startup hold lasts,
    /// True conditions are not turned False.
    pub(super) fn update_gates(&mut self) {
        let Some(c) = self.cluster.as_mut() else { return };
        // Not from a partial model, nor from pods not listed yet or changed but not yet
        // counted (the pod handler evaluates again).
        if !c.feed.synced() || !c.gate.readiness.pods_current() {
            return;
        }
        let announced = c.gate.announced.borrow_and_update().clone();
        let no_remote = RemoteAnnounced::default();
        let remote = match (&c.gate.remote, &c.gate.remote_view) {
            (Some(_), Some(view)) => view,
            (Some(_), None) => return,
            // No gated pod here: nothing to write.
            (None, _) => &no_remote,
        };
        let inputs = readiness::Inputs {
            model: &self.model,
            me: &self.opts.node_name,
            plan: &self.plan,
            announced: &announced,
            remote,
        };
        let mut desired = readiness::desired_all(&c.gate.pods, &inputs);
        let now = Instant::now();
        let hold = *c.gate.hold.get_or_insert(Hold::Until(now + GATE_STARTUP_HOLD));
        if let Hold::Until(t) = hold {
            if now >= t || caught_up(&self.plan, &announced) {
                c.gate.hold = Some(Hold::Done);
            } else {
                readiness::keep_true(&mut desired, &c.gate.pods);
            }
        }
        c.gate.readiness.publish(desired);
    }

    /// The startup hold ran out: evaluate without it.
    pub(super) fn end_gate_hold(&mut self) {
        if let Some(c) = self.cluster.as_mut() {
            c.gate.hold = Some(Hold::Done);
        }
        self.update_gates();
    }

    /// When the readiness gate's startup hold ends (None: not running).
    pub(super) fn gate_hold_until(&self) -> Option<Instant> {
        match self.cluster.as_ref()?.gate.hold? {
            Hold::Until(t) => Some(t),
            Hold::Done => None,
        }
    }
}
