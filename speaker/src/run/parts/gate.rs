//! Kubernetes mode: the readiness gate `ferrolb.io/load-balancer-ready` of this node's
//! pods, fed by the plan, what is really announced and the other nodes' announcements.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::announce::{Announced, AnnouncedFeed};
use crate::cluster::pod_conditions::{PodConditions, RemoteWatch};
use crate::metrics::Metrics;
use crate::model::ClusterModel;
use crate::plan::Plan;
use crate::readiness::{self, GatedPod, RemoteAnnounced};

/// After the model synced, how long the readiness gate keeps pods True that it would
/// turn False, while this (re)started speaker's sessions come up and catch up with the
/// plan (the hold ends earlier once everything planned is really announced).
pub const GATE_STARTUP_HOLD: Duration = Duration::from_secs(30);

/// Kubernetes mode: the readiness gate `ferrolb.io/load-balancer-ready` of this node's
/// pods (see [`crate::readiness`] and README-readiness.md).
pub(in crate::run) struct GatePart {
    /// Watches this node's pods and writes their conditions.
    pub(in crate::run) conditions: PodConditions,
    /// What the BGP and L2 announcers really announce.
    pub(in crate::run) feed: AnnouncedFeed,
    pub(in crate::run) announced: watch::Receiver<Announced>,
    /// Other nodes' ServiceAnnouncements, watched once this node has gated pods.
    pub(in crate::run) remote: Option<RemoteWatch>,
    /// What they announce, recomputed when they change (None: not listed yet).
    pub(in crate::run) remote_view: Option<RemoteAnnounced>,
    /// This node's pods with the gate, as last read.
    pub(in crate::run) pods: Vec<GatedPod>,
    /// The startup hold ([`GATE_STARTUP_HOLD`]): None before the first evaluation.
    pub(in crate::run) hold: Option<Hold>,
}

/// The readiness gate's startup hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::run) enum Hold {
    /// True conditions stay True until then (or until the plan is really announced).
    Until(Instant),
    /// Over.
    Done,
}

/// Whether everything `plan` announces is really announced.
pub(in crate::run) fn caught_up(plan: &Plan, announced: &Announced) -> bool {
    plan.bgp_addresses().iter().all(|p| announced.holds(p))
        && plan.l2.keys().all(|ip| announced.l2.contains(ip))
}

/// Which gate input changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateSignal {
    Pods,
    Announced,
    Remote,
}

/// Clones of the gate's change receivers, so the event loop can wait on them without
/// borrowing the state (the handler marks the originals seen).
pub(in crate::run) type GateWatch =
    (watch::Receiver<u64>, watch::Receiver<Announced>, Option<watch::Receiver<u64>>);

/// Resolves when one of the gate's inputs changed (never in static mode).
pub(in crate::run) async fn gate_changed(w: Option<GateWatch>) -> GateSignal {
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

impl GatePart {
    /// The clones [`gate_changed`] waits on.
    pub(in crate::run) fn watch(&self) -> GateWatch {
        (
            self.conditions.pod_changes(),
            self.announced.clone(),
            self.remote.as_ref().map(RemoteWatch::changes),
        )
    }

    /// This node's gated pods as they are now (the change is marked seen); the first
    /// one starts the watch of the other nodes' ServiceAnnouncements.
    pub(in crate::run) fn read_pods(&mut self, client: &kube::Client, metrics: &Metrics) -> Vec<GatedPod> {
        self.conditions.mark_pods_seen();
        let pods = self.conditions.gated_pods();
        metrics.readiness.pods_gated.set(i64::try_from(pods.len()).unwrap_or(i64::MAX));
        if !pods.is_empty() && self.remote.is_none() {
            tracing::info!(
                pods = pods.len(),
                "pods with the readiness gate on this node: watching ServiceAnnouncements"
            );
            self.remote = Some(RemoteWatch::start(client.clone()));
        }
        pods
    }

    /// What is announced changed: seen now, even if the evaluation is skipped (the loop
    /// must not spin on it).
    pub(in crate::run) fn announced_seen(&mut self) {
        self.announced.borrow_and_update();
    }

    /// The other nodes' ServiceAnnouncements changed: their view is recomputed once per
    /// change, not per evaluation (there may be many of them).
    pub(in crate::run) fn remote_changed(&mut self, me: &str) {
        if let Some(r) = self.remote.as_mut() {
            r.mark_seen();
            self.remote_view = r.listed().then(|| r.remote(me));
        }
    }

    /// Hands the writer the conditions this node's gated pods should have now; not from
    /// a partial model (`synced` false), nor before this node's pods are listed and
    /// counted and the other nodes' ServiceAnnouncements are listed. While the startup
    /// hold lasts, True conditions are not turned False.
    pub(in crate::run) fn evaluate(
        &mut self,
        now: Instant,
        synced: bool,
        model: &ClusterModel,
        me: &str,
        plan: &Plan,
    ) {
        if !synced || !self.conditions.pods_current() {
            return;
        }
        if self.pods.is_empty() {
            // No gated pod on this node, the common case: nothing to judge, so no copy of
            // what is announced (every plan would pay for one, 10 000 routes of it).
            if let Hold::Until(t) = *self.hold.get_or_insert(Hold::Until(now + GATE_STARTUP_HOLD))
                && now >= t
            {
                self.hold = Some(Hold::Done);
            }
            self.conditions.publish(BTreeMap::new());
            return;
        }
        let announced = self.announced.borrow_and_update().clone();
        let no_remote = RemoteAnnounced::default();
        let remote = match (&self.remote, &self.remote_view) {
            (Some(_), Some(view)) => view,
            (Some(_), None) => return,
            // No gated pod here: nothing to write.
            (None, _) => &no_remote,
        };
        let inputs = readiness::Inputs { model, me, plan, announced: &announced, remote };
        let mut desired = readiness::desired_all(&self.pods, &inputs);
        let hold = *self.hold.get_or_insert(Hold::Until(now + GATE_STARTUP_HOLD));
        if let Hold::Until(t) = hold {
            if now >= t || caught_up(plan, &announced) {
                self.hold = Some(Hold::Done);
            } else {
                readiness::keep_true(&mut desired, &self.pods);
            }
        }
        self.conditions.publish(desired);
    }

    /// The startup hold ran out.
    pub(in crate::run) fn end_hold(&mut self) {
        self.hold = Some(Hold::Done);
    }

    /// When the startup hold ends (None: not running).
    pub(in crate::run) fn hold_until(&self) -> Option<Instant> {
        match self.hold? {
            Hold::Until(t) => Some(t),
            Hold::Done => None,
        }
    }
}
