//! Kubernetes I/O of the pod readiness gate ([`crate::readiness`] holds the pure rule):
//! [`PodConditions`] watches this node's pods and patches `pods/status` where a pod's
//! condition differs from the desired one; [`RemoteWatch`] follows the other nodes'
//! ServiceAnnouncements, for Cluster Services.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::ServiceAnnouncement;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{WatchBackoff, within};
use crate::metrics::{ConditionLabel, ReadinessMetrics};
use crate::readiness::{
    CONDITION_TYPE, GateCondition, GatedPod, Inputs, PodKey, RemoteAnnounced, desired_all,
};

/// The field manager of the pods/status patches.
pub const FIELD_MANAGER: &str = "ferrolb-speaker";

/// Errors writing a pod's condition.
#[derive(Debug, thiserror::Error)]
pub enum ReadinessError {
    /// The pods/status patch failed.
    #[error(
        "Pod {pod}: status.conditions[{CONDITION_TYPE}]: patch failed: {source}; the speaker needs RBAC \
         `patch` on `pods/status` and retries"
    )]
    Patch {
        /// The pod.
        pod: PodKey,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// The merge patch setting the gate condition on `pod` (which must be the stored
/// version): the whole condition list with only this gate's entry changed, guarded by
/// the pod's resourceVersion so a concurrent change by the kubelet is never lost
/// (a stale version gets 409 Conflict and is retried from the next pod event).
fn condition_patch(pod: &Pod, want: &GateCondition, now: &Time) -> serde_json::Value {
    let existing = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let status = if want.status { "True" } else { "False" };
    let mut conditions: Vec<serde_json::Value> = Vec::with_capacity(existing.len() + 1);
    let mut replaced = false;
    for c in &existing {
        if c.type_ == CONDITION_TYPE {
            // lastTransitionTime moves only when the status does.
            let since = if c.status == status {
                c.last_transition_time.clone().unwrap_or_else(|| now.clone())
            } else {
                now.clone()
            };
            conditions.push(json!({
                "type": CONDITION_TYPE, "status": status, "reason": want.reason, "message": want.message,
                "lastTransitionTime": since, "lastProbeTime": null,
            }));
            replaced = true;
        } else {
            conditions.push(serde_json::to_value(c).unwrap_or(serde_json::Value::Null));
        }
    }
    if !replaced {
        conditions.push(json!({
            "type": CONDITION_TYPE, "status": status, "reason": want.reason, "message": want.message,
            "lastTransitionTime": now, "lastProbeTime": null,
        }));
    }
    json!({
        "metadata": {"resourceVersion": pod.metadata.resource_version},
        "status": {"conditions": conditions},
    })
}

/// Watches this node's pods and keeps their gate conditions as desired.
///
/// The event loop calls [`PodConditions::gated_pods`] after [`PodConditions::pods_changed`],
/// plans with [`crate::readiness::apply_gate_pending`], computes [`desired_all`]
/// whenever the model, the plan or the announced state changed, and hands the result
/// to [`PodConditions::publish`]. A writer task patches only pods whose condition differs.
/// Dropping it stops both tasks.
#[derive(Debug)]
pub struct PodConditions {
    store: Store<Pod>,
    changes: watch::Receiver<u64>,
    listed: watch::Receiver<bool>,
    desired: watch::Sender<Arc<BTreeMap<PodKey, GateCondition>>>,
    node: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for PodConditions {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl PodConditions {
    /// Starts watching the pods of `node` (field selector `spec.nodeName`) and the
    /// writer; call within a tokio runtime.
    pub fn start(client: kube::Client, node: &str) -> Self {
        Self::start_with_metrics(client, node, ReadinessMetrics::default())
    }

    /// [`PodConditions::start`], counting writes into `metrics` (`ferrolb_readiness_*`).
    pub fn start_with_metrics(client: kube::Client, node: &str, metrics: ReadinessMetrics) -> Self {
        let pods: Api<Pod> = Api::all(client.clone());
        let cfg = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let (store, changes, listed, reflect) = reflect(pods, cfg, "this node's pods");
        let (desired, desired_rx) = watch::channel(Arc::new(BTreeMap::new()));
        let w = Writer { client, store: store.clone(), written: BTreeMap::new(), metrics };
        let write = tokio::spawn(w.run(desired_rx, changes.clone()));
        PodConditions { store, changes, listed, desired, node: node.to_owned(), tasks: vec![reflect, write] }
    }

    /// Whether this node's pods were listed completely once, and every change since
    /// was marked seen ([`PodConditions::mark_pods_seen`]): the gated pods last read are current.
    pub fn pods_current(&self) -> bool {
        *self.listed.borrow() && !self.changes.has_changed().unwrap_or(false)
    }

    /// A receiver that sees every later change of this node's pods (for an event loop
    /// that selects over clones; it calls [`PodConditions::mark_pods_seen`] when it handles one).
    pub fn pod_changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// Marks the pod changes so far as handled.
    pub fn mark_pods_seen(&mut self) {
        self.changes.borrow_and_update();
    }

    /// Resolves when this node's pods changed since the last call (for `select!`).
    pub async fn pods_changed(&mut self) {
        if self.changes.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// This node's pods that carry the gate.
    pub fn gated_pods(&self) -> Vec<GatedPod> {
        self.store
            .state()
            .iter()
            .filter_map(|p| GatedPod::from_pod(p))
            .filter(|p| p.node == self.node)
            .collect()
    }

    /// Hands the writer the conditions the pods should have.
    pub fn publish(&self, desired: BTreeMap<PodKey, GateCondition>) {
        self.desired.send_if_modified(|cur| {
            let changed = **cur != desired;
            if changed {
                *cur = Arc::new(desired);
            }
            changed
        });
    }

    /// Convenience for the event loop: [`desired_all`] over the current gated pods, published.
    pub fn update(&self, inputs: &Inputs<'_>) {
        self.publish(desired_all(&self.gated_pods(), inputs));
    }
}

/// A reflector over `api` with a change counter (bumped on every watch event) and a
/// flag set once the first complete list arrived; the task retries with back-off.
fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    what: &'static str,
) -> (Store<K>, watch::Receiver<u64>, watch::Receiver<bool>, JoinHandle<()>)
where
    K: ferrolb_api::Watched,
{
    let (store, writer) = reflector::store();
    let (changes_tx, changes) = watch::channel(0u64);
    let (listed_tx, listed) = watch::channel(false);
    let task = tokio::spawn(async move {
        // Without managedFields, most of an object as listed: the store holds every pod of
        // this node, or every ServiceAnnouncement of the cluster (one per Service and node).
        let slim = watcher(api, cfg).modify(|o: &mut K| o.meta_mut().managed_fields = None);
        let stream = reflector::reflector(writer, slim).backoff(WatchBackoff::default());
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(ev) => {
                    if matches!(ev, watcher::Event::InitDone) {
                        listed_tx.send_if_modified(|l| !std::mem::replace(l, true));
                    }
                    changes_tx.send_modify(|n| *n = n.wrapping_add(1));
                }
                Err(e) => tracing::warn!(error = %e, "readiness gates: watching {what} failed; retrying"),
            }
        }
    });
    (store, changes, listed, task)
}

/// Watches every ServiceAnnouncement, for the gates of Cluster Services: an address
/// another node announces counts ([`RemoteAnnounced`]). Started only on nodes that
/// have gated pods, so other speakers do not pay for the watch. Dropping it stops it.
#[derive(Debug)]
pub struct RemoteWatch {
    store: Store<ServiceAnnouncement>,
    changes: watch::Receiver<u64>,
    listed: watch::Receiver<bool>,
    task: JoinHandle<()>,
}

impl Drop for RemoteWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RemoteWatch {
    /// Starts the watch; call within a tokio runtime.
    pub fn start(client: kube::Client) -> Self {
        let api: Api<ServiceAnnouncement> = Api::all(client);
        let (store, changes, listed, task) = reflect(api, watcher::Config::default(), "ServiceAnnouncements");
        RemoteWatch { store, changes, listed, task }
    }

    /// Whether the first complete list arrived (before it, nothing is known elsewhere).
    pub fn listed(&self) -> bool {
        *self.listed.borrow()
    }

    /// A receiver that sees every later change (see [`PodConditions::pod_changes`]).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// Marks the changes so far as handled.
    pub fn mark_seen(&mut self) {
        self.changes.borrow_and_update();
    }

    /// What the other nodes' ServiceAnnouncements say they announce.
    pub fn remote(&self, me: &str) -> RemoteAnnounced {
        let state = self.store.state();
        RemoteAnnounced::from_service_announcements(state.iter().map(|a| &**a), me)
    }
}

/// Patches pods whose gate condition differs from the desired one.
struct Writer {
    client: kube::Client,
    store: Store<Pod>,
    /// Per pod: the condition last written and the resourceVersion it was written
    /// over, so a write is not repeated while the pod store has not caught up.
    written: BTreeMap<PodKey, (GateCondition, String)>,
    metrics: ReadinessMetrics,
}

/// First retry delay after a failed patch (the next pod event retries sooner); it
/// doubles up to [`RETRY_MAX`] while patches keep failing.
const RETRY: Duration = Duration::from_secs(1);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(30);

impl Writer {
    async fn run(
        mut self,
        mut desired: watch::Receiver<Arc<BTreeMap<PodKey, GateCondition>>>,
        mut changes: watch::Receiver<u64>,
    ) {
        let mut delay = RETRY;
        loop {
            let want = desired.borrow_and_update().clone();
            let failed = self.converge(&want).await;
            let retry_at = failed.then(|| tokio::time::Instant::now() + delay);
            // Back off while writes keep failing (an apiserver outage), not to flood it or the log.
            delay = if failed { (delay * 2).min(RETRY_MAX) } else { RETRY };
            let retry = ferrolb_proto::time::sleep_until(retry_at);
            tokio::select! {
                r = desired.changed() => if r.is_err() { return },
                r = changes.changed() => if r.is_err() { return },
                () = retry => {}
            }
        }
    }

    /// One pass over the desired conditions; true when some patch failed.
    async fn converge(&mut self, want: &BTreeMap<PodKey, GateCondition>) -> bool {
        self.written.retain(|k, _| want.contains_key(k));
        let mut failed = false;
        for (key, cond) in want {
            let Some(pod) = self.store.get(&reflector::ObjectRef::new(&key.name).within(&key.namespace))
            else {
                continue;
            };
            // Never touch a pod without the gate, whatever was asked.
            let Some(view) = GatedPod::from_pod(&pod) else { continue };
            if view.current.as_ref() == Some(cond) {
                continue;
            }
            let rv = pod.metadata.resource_version.clone().unwrap_or_default();
            if self.written.get(key).is_some_and(|(c, at)| c == cond && *at == rv) {
                continue;
            }
            match self.patch(key, &pod, cond).await {
                Ok(()) => {
                    tracing::info!(
                        pod = %key, status = cond.status, reason = %cond.reason, message = %cond.message,
                        "readiness gate {CONDITION_TYPE} set"
                    );
                    self.written.insert(key.clone(), (cond.clone(), rv));
                    let status = if cond.status { "True" } else { "False" };
                    self.metrics
                        .conditions_written
                        .get_or_create(&ConditionLabel { status: status.into(), reason: cond.reason.clone() })
                        .inc();
                }
                Err(ReadinessError::Patch { source: kube::Error::Api(s), .. })
                    if s.code == 409 || s.code == 404 =>
                {
                    // A newer pod version (or none) is on its way through the watch.
                    tracing::debug!(pod = %key, code = s.code, "readiness gate patch raced a pod change; retrying");
                    self.metrics.write_errors.inc();
                    failed = true;
                }
                Err(e) => {
                    tracing::warn!("{e}");
                    self.metrics.write_errors.inc();
                    failed = true;
                }
            }
        }
        failed
    }

    async fn patch(&self, key: &PodKey, pod: &Pod, cond: &GateCondition) -> Result<(), ReadinessError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let body = condition_patch(pod, cond, &now);
        let pp = PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..PatchParams::default() };
        within(api.patch_status(&key.name, &pp, &Patch::Merge(&body)))
            .await
            .map(|_| ())
            .map_err(|source| ReadinessError::Patch { pod: key.clone(), source })
    }
}

#[cfg(test)]
mod tests;
