//! Kubernetes mode: the model assembled from the watchers' updates ([`Feed`]), and what
//! is logged once about them (failing watches, the last configuration rejected).

use std::collections::BTreeSet;

use crate::cluster::{Feed, Update};
use crate::metrics::{KindLabel, Metrics, ResultLabel};
use crate::model::ClusterModel;

/// The watchers' feed into the model.
#[derive(Debug, Default)]
pub(in crate::run) struct FeedPart {
    pub(in crate::run) feed: Feed,
    /// Kinds whose watch is failing (logged once when it starts and when it recovers).
    failing: BTreeSet<&'static str>,
    /// The last configuration rejection logged, so it is logged once.
    rejected: Option<String>,
}

/// What a batch of updates did to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::run) struct Applied {
    /// Every kind had been listed before the batch.
    pub(in crate::run) was_synced: bool,
    /// Every kind has been listed now.
    pub(in crate::run) synced: bool,
    /// The model changed.
    pub(in crate::run) changed: bool,
    /// Configuration (pools, peers, advertisements, profiles) was applied, or the model
    /// became complete: passwords and L2 are to be looked at again.
    pub(in crate::run) config_applied: bool,
}

impl FeedPart {
    /// Whether every watched kind has been listed once.
    pub(in crate::run) fn synced(&self) -> bool {
        self.feed.synced()
    }

    /// Applies a batch of updates (a relist or a burst: plan once after it).
    pub(in crate::run) fn apply(
        &mut self,
        model: &mut ClusterModel,
        metrics: &Metrics,
        updates: Vec<Update>,
    ) -> Applied {
        let was_synced = self.feed.synced();
        let mut changed = false;
        let mut config_applied = false;
        for u in updates {
            let kind = u.kind();
            if let Update::WatchFailed { error, .. } = &u {
                metrics.watch_errors.get_or_create(&KindLabel { kind: kind.into() }).inc();
                if self.failing.insert(kind) {
                    tracing::warn!(
                        kind,
                        error = %error,
                        "watch failed; keeping the model and every announcement as they are, retrying with back-off"
                    );
                }
            } else if self.failing.remove(kind) {
                tracing::info!(kind, "watch recovered");
            }
            let applied = self.feed.apply(model, u);
            changed |= applied.changed;
            config_applied |= applied.config_applied;
            if applied.config_applied {
                self.rejected = None;
            }
            if let Some(errors) = applied.config_rejected {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                let text = text.join("; ");
                if self.rejected.as_ref() != Some(&text) {
                    metrics.config_loads.get_or_create(&ResultLabel { result: "rejected".into() }).inc();
                    for e in &errors {
                        tracing::error!("invalid configuration, the last good one stays in force: {e}");
                    }
                    self.rejected = Some(text);
                }
            }
        }
        let synced = self.feed.synced();
        if !synced {
            tracing::debug!(waiting_for = ?self.feed.unsynced(), "waiting for the first complete lists");
        }
        // Configuration applied while other kinds were still listing was not acted on
        // then: the first complete model counts as a configuration load. Without this, a
        // BGPPeer listed before the last EndpointSlice never had its password read.
        Applied { was_synced, synced, changed, config_applied: config_applied || (synced && !was_synced) }
    }
}
