//! Kubernetes mode's inputs: watcher updates and the readiness gate's signals.

use std::collections::BTreeMap;

use super::input::Cause;
use super::parts::gate::GateSignal;
use super::state::State;
use crate::cluster::{self, Update};
use crate::metrics::ResultLabel;
use crate::readiness;

impl State {
    /// Applies a batch of watcher updates to the model; once every kind is listed, reads
    /// the passwords and starts L2 as configured, and plans.
    pub(super) async fn on_updates(&mut self, updates: Vec<Update>) {
        let Some(feed) = self.feed.as_mut() else { return };
        let applied = feed.apply(&mut self.model, &self.metrics, updates);
        let size = feed.feed.cluster_size(&self.model);
        if let Some(c) = self.cluster.as_ref() {
            if let Some(on) = feed.feed.wants_facts() {
                c.watchers.set_facts_watch(on);
            }
            if let Some(scope) = feed.feed.node_scope() {
                c.watchers.set_node_scope(scope);
            }
        }
        if !applied.synced {
            return;
        }
        // Not before: until the first sync the size is unknown and retries are not spread.
        cluster::set_cluster_size(size);
        if applied.config_applied {
            self.metrics.config_loads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
            // Only when the Secrets referenced change: the loop waits (at most 3 s) for them.
            if let Some(c) = self.cluster.as_mut() {
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
            }
            self.watch_secrets();
        }
        if !applied.was_synced {
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
        if applied.config_applied {
            self.ensure_l2_logged().await;
        }
        if applied.changed || !applied.was_synced {
            let cause = if applied.was_synced { "API change" } else { "model synced" };
            self.replan(&Cause::new("config", cause)).await;
        }
        if !applied.was_synced {
            self.metrics.set_ready();
        }
    }

    /// One of the readiness gate's inputs changed.
    pub(super) async fn on_gate_signal(&mut self, signal: GateSignal) {
        let synced = self.synced();
        let Some(c) = self.cluster.as_mut() else { return };
        match signal {
            GateSignal::Pods => {
                let pods = c.gate.read_pods(&c.client, &self.metrics);
                if pods == c.gate.pods {
                    // An evaluation skipped while this change was unseen happens now.
                    self.update_gates();
                    return;
                }
                c.gate.pods = pods;
                if !synced {
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
                c.gate.announced_seen();
                self.update_gates();
            }
            GateSignal::Remote => {
                c.gate.remote_changed(&self.opts.node_name);
                self.update_gates();
            }
        }
    }

    /// The readiness gate's startup hold ran out: evaluate without it.
    pub(super) fn end_gate_hold(&mut self) {
        if let Some(c) = self.cluster.as_mut() {
            c.gate.end_hold();
        }
        self.update_gates();
    }
}
