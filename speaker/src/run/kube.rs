//! Kubernetes mode: the model comes from watchers over the API.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::event_loop::{serve, signals};
use super::gate::GatePart;
use super::options::KubeOptions;
use super::state::{Cause, State};
use crate::announce::AnnouncedFeed;
use crate::cluster::readiness::Readiness;
use crate::cluster::status::{self, Desired};
use crate::cluster::{self, Feed, Update};
use crate::error::SpeakerError;
use crate::metrics::{KindLabel, Metrics, ResultLabel};

/// Kubernetes mode: the watchers' feed, the status writer and the Secret reader.
pub(super) struct ClusterPart {
    pub(super) client: kube::Client,
    pub(super) namespace: String,
    pub(super) feed: Feed,
    /// The desired ServiceAnnouncements; the writer task converges the API to them.
    pub(super) status: watch::Sender<Option<Desired>>,
    /// Kinds whose watch is failing (logged once when it starts and when it recovers).
    pub(super) failing: BTreeSet<&'static str>,
    /// The last configuration rejection logged, so it is logged once.
    pub(super) rejected: Option<String>,
    /// The BGP password Secrets last read completely (re-read when they change).
    pub(super) password_refs: BTreeMap<String, ferrolb_api::SecretKeyRef>,
    /// Watches the Secrets in use, so rotated keys and passwords apply ([`super::rotation`]).
    pub(super) secrets: cluster::secrets::SecretWatch,
    /// What of them was applied last.
    pub(super) secrets_seen: watch::Receiver<cluster::secrets::Watched>,
    /// Pod readiness gates of this node's pods.
    pub(super) gate: GatePart,
    /// Aborts the watchers when the speaker stops.
    _watchers: JoinSet<()>,
}

impl State {
    /// Kubernetes mode: applies one watcher update (and what else is queued) to the model.
    pub(super) async fn on_updates(&mut self, first: Update, more: &mut mpsc::Receiver<Update>) {
        let Some(c) = self.cluster.as_mut() else { return };
        let was_synced = c.feed.synced();
        let mut changed = false;
        let mut config_applied = false;
        let mut next = Some(first);
        // A relist or a burst arrives as many updates: apply them all, plan once.
        while let Some(u) = next.take() {
            let kind = u.kind();
            if let Update::WatchFailed { error, .. } = &u {
                self.metrics.watch_errors.get_or_create(&KindLabel { kind: kind.into() }).inc();
                if c.failing.insert(kind) {
                    tracing::warn!(
                        kind,
                        error = %error,
                        "watch failed; keeping the model and every announcement as they are, retrying with back-off"
                    );
                }
            } else if c.failing.remove(kind) {
                tracing::info!(kind, "watch recovered");
            }
            let applied = c.feed.apply(&mut self.model, u);
            changed |= applied.changed;
            config_applied |= applied.config_applied;
            if applied.config_applied {
                c.rejected = None;
            }
            if let Some(errors) = applied.config_rejected {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                let text = text.join("; ");
                if c.rejected.as_ref() != Some(&text) {
                    self.metrics.config_loads.get_or_create(&ResultLabel { result: "rejected".into() }).inc();
                    for e in &errors {
                        tracing::error!("invalid configuration, the last good one stays in force: {e}");
                    }
                    c.rejected = Some(text);
                }
            }
            next = more.try_recv().ok();
        }
        let synced = c.feed.synced();
        if !synced {
            tracing::debug!(waiting_for = ?c.feed.unsynced(), "waiting for the first complete lists");
            return;
        }
        // Configuration applied while other kinds were still listing was not acted on
        // then (above): the first complete model counts as a configuration load. Without
        // this, a BGPPeer listed before the last EndpointSlice never had its password read.
        let config_applied = config_applied || !was_synced;
        if config_applied {
            self.metrics.config_loads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
            // Only when the Secrets referenced change: the loop waits (at most 3 s) for them.
            let refs = cluster::secrets::password_refs(&self.model);
            if refs != c.password_refs {
                let (passwords, errors) =
                    cluster::secrets::bgp_passwords(&c.client, &refs, &self.passwords).await;
                for e in &errors {
                    tracing::error!("{e}");
                }
                self.passwords = passwords;
                c.password_refs = if errors.is_empty() { refs } else { BTreeMap::new() };
            }
            self.watch_secrets();
        }
        if !was_synced {
            self.metrics.model_synced.set(1);
            tracing::info!(
                nodes = self.model.nodes.len(),
                services = self.model.services.len(),
                "every watch listed: model synced"
            );
            if !self.model.nodes.contains_key(&self.opts.node_name) {
                tracing::warn!(node = %self.opts.node_name, "no Node of this name: nothing will be announced until it exists");
            }
        }
        if config_applied || !was_synced {
            self.ensure_l2_logged().await;
        }
        if changed || !was_synced {
            let cause = if was_synced { "API change" } else { "model synced" };
            self.replan(&Cause::new("config", cause)).await;
        }
        if !was_synced {
            self.metrics.set_ready();
        }
    }
}

/// Runs Kubernetes mode until SIGTERM or SIGINT: the model comes from watchers over the
/// API; nothing is announced (and no ServiceAnnouncement touched) before every watched
/// kind has been listed once; an unreachable apiserver changes no announcement.
pub async fn run_kube(
    opts: KubeOptions,
    client: kube::Client,
    metrics: Arc<Metrics>,
) -> Result<(), SpeakerError> {
    let signals = signals()?;
    let (tx, updates) = cluster::channel();
    let watchers = cluster::spawn_watchers(&client, &tx);
    drop(tx);
    let status = status::spawn(client.clone(), &opts.options.node_name, metrics.clone());
    let mut state = State::new(opts.options, metrics.clone());
    state.plans = opts.plans;
    tracing::info!(node = %state.opts.node_name, namespace = %opts.namespace, "speaker started in Kubernetes mode; listing");
    let feed = AnnouncedFeed::spawn(state.bgp.announced());
    let gate = GatePart {
        readiness: Readiness::start_with_metrics(
            client.clone(),
            &state.opts.node_name,
            metrics.readiness.clone(),
        ),
        announced: feed.subscribe(),
        feed,
        remote: None,
        remote_view: None,
        pods: Vec::new(),
        hold: None,
    };
    let secrets = cluster::secrets::SecretWatch::new(client.clone());
    state.cluster = Some(ClusterPart {
        gate,
        client,
        namespace: opts.namespace,
        feed: Feed::default(),
        status,
        failing: BTreeSet::new(),
        rejected: None,
        password_refs: BTreeMap::new(),
        secrets_seen: secrets.subscribe(),
        secrets,
        _watchers: watchers,
    });
    serve(state, None, Some(updates), signals).await
}
