//! The Nodes in the model, by [`NodeScope`]: this node's own Node alone without L2; with
//! L2Advertisements, every node's facts as the controller publishes them
//! ([`ferrolb_api::node_facts`]) beside this node's own Node, or every Node where they are
//! not (all) published: a controller of an older release, or one that has not finished.
//!
//! The model is never planned from part of the nodes: until the Nodes of the scope wanted
//! are listed the feed is not synced, and an L2 election among the few nodes known would
//! claim addresses other nodes hold.

use std::collections::{BTreeMap, BTreeSet};

use ferrolb_api::NodeFacts;
use ferrolb_api::node_facts::COMPLETE_NAME;
use k8s_openapi::api::core::v1::{ConfigMap, Node};

use super::{Change, Feed, NodeScope, UNCOUNTED_CLUSTER, name};
use crate::model::ClusterModel;

/// The published facts, as listed and watched since (while L2Advertisements exist).
#[derive(Debug, Default)]
pub(super) struct Published {
    /// Facts by node name.
    nodes: BTreeMap<String, NodeFacts>,
    /// The controller said every Node's facts are published ([`COMPLETE_NAME`]).
    complete: bool,
}

impl Published {
    /// Applies one change; returns the nodes whose facts changed.
    fn apply(&mut self, c: Change<ConfigMap>) -> BTreeSet<String> {
        let mut touched = BTreeSet::new();
        let mut one = |p: &mut Published, cm: &ConfigMap, present: bool| {
            if cm.metadata.name.as_deref() == Some(COMPLETE_NAME) {
                p.complete = present;
                return;
            }
            match NodeFacts::from_config_map(cm) {
                Ok((node, facts)) if present => {
                    if p.nodes.get(&node) != Some(&facts) {
                        p.nodes.insert(node.clone(), facts);
                        touched.insert(node);
                    }
                }
                Ok((node, _)) => {
                    if p.nodes.remove(&node).is_some() {
                        touched.insert(node);
                    }
                }
                Err(e) => tracing::warn!("ignoring Node facts: {e}"),
            }
        };
        match c {
            Change::Apply(cm) => one(self, &cm, true),
            Change::Delete(cm) => one(self, &cm, false),
            Change::Listed(all) => {
                let before = std::mem::take(self);
                for cm in &all {
                    one(self, cm, true);
                }
                let gone = before.nodes.keys().filter(|n| !self.nodes.contains_key(*n)).cloned();
                touched.extend(gone);
                touched.retain(|n| before.nodes.get(n) != self.nodes.get(n));
            }
        }
        touched
    }
}

impl Feed {
    /// Which Nodes the speaker must watch: its own without L2Advertisements; with them its
    /// own (beside the published facts) once every Node's facts are published, else
    /// every Node. None until the L2Advertisements (and then the facts) are listed.
    pub fn node_scope(&self) -> Option<NodeScope> {
        match (self.l2?, &self.published) {
            (false, _) => Some(NodeScope::Own),
            (true, None) => None,
            (true, Some(p)) if p.complete => Some(NodeScope::Facts),
            (true, Some(_)) => Some(NodeScope::All),
        }
    }

    /// Whether the published facts are to be watched: while L2Advertisements exist (None
    /// until they are listed).
    pub fn wants_facts(&self) -> Option<bool> {
        self.l2
    }

    /// Whether the model holds every node (not only this node's own).
    pub fn every_node(&self) -> bool {
        matches!(self.nodes_as, Some(NodeScope::All | NodeScope::Facts))
    }

    /// The cluster size the relist spread is made of ([`super::set_cluster_size`]): the
    /// nodes of `model` when it holds every one, else [`UNCOUNTED_CLUSTER`].
    pub fn cluster_size(&self, model: &ClusterModel) -> usize {
        if self.every_node() { model.nodes.len() } else { UNCOUNTED_CLUSTER }
    }

    /// Whether the model holds the Nodes of the scope wanted (or more).
    pub(super) fn nodes_listed(&self) -> bool {
        use NodeScope::{All, Facts, Own};
        match (self.nodes_as, self.node_scope()) {
            (Some(have), Some(want)) => {
                have == want || matches!((have, want), (All, Own | Facts) | (Facts, Own))
            }
            _ => false,
        }
    }

    /// Whether a Node update comes from a watch of another scope than the one wanted, being
    /// replaced: its list would drop the other nodes (its own Node's, while every node is
    /// wanted) or take the place of the published facts.
    pub(super) fn stale_node_update(&self, own: bool) -> bool {
        match self.node_scope() {
            Some(NodeScope::All) => own,
            Some(NodeScope::Facts) => !own,
            _ => false,
        }
    }

    /// Applies a change of this node's own Node (`own`) or of every Node.
    pub(super) fn node(&mut self, model: &mut ClusterModel, c: Change<Node>, own: bool) -> bool {
        match c {
            Change::Apply(n) => {
                let k = name(&n.metadata);
                let before = model.nodes.get(&k).cloned();
                model.upsert_node(&n);
                model.nodes.get(&k) != before.as_ref()
            }
            Change::Delete(n) => {
                let k = name(&n.metadata);
                // Through the model's own method: it records the change for the planner.
                let existed = model.nodes.contains_key(&k);
                model.remove_node(&k);
                existed
            }
            Change::Listed(all) => {
                let facts = own && self.node_scope() == Some(NodeScope::Facts);
                self.nodes_as = Some(match (own, facts) {
                    (false, _) => NodeScope::All,
                    (true, false) => NodeScope::Own,
                    (true, true) => NodeScope::Facts,
                });
                self.own =
                    if own { all.iter().map(|n| name(&n.metadata)).collect() } else { BTreeSet::new() };
                let before = model.nodes.clone();
                let mut now: BTreeSet<String> = all.iter().map(|n| name(&n.metadata)).collect();
                if facts {
                    now.extend(self.published_nodes().map(|(n, _)| n.clone()));
                }
                let gone: Vec<String> = model.nodes.keys().filter(|k| !now.contains(*k)).cloned().collect();
                for k in &gone {
                    model.remove_node(k);
                }
                if facts {
                    let others: Vec<(String, NodeFacts)> =
                        self.published_nodes().map(|(n, f)| (n.clone(), f.clone())).collect();
                    for (n, f) in others {
                        model.upsert_node_facts(n, &f);
                    }
                }
                for n in &all {
                    model.upsert_node(n);
                }
                model.nodes != before
            }
        }
    }

    /// The published facts of every node but this one (whose own Node is watched).
    fn published_nodes(&self) -> impl Iterator<Item = (&String, &NodeFacts)> {
        let nodes = self.published.as_ref().map(|p| &p.nodes).into_iter().flatten();
        nodes.filter(|(n, _)| !self.own.contains(*n))
    }

    /// The watch of the published facts failed: until it lists them, every Node is watched
    /// (a Role of an older release may not grant it, and L2 must not wait for it).
    pub(super) fn facts_failed(&mut self) {
        if self.l2 == Some(true) && self.published.is_none() {
            self.published = Some(Published::default());
        }
    }

    /// Applies a change of the published facts: to the model too when it holds them.
    pub(super) fn facts(&mut self, model: &mut ClusterModel, c: Change<ConfigMap>) -> bool {
        if self.l2 != Some(true) {
            // A watch being stopped; the facts are read afresh when L2 comes back.
            self.published = None;
            return false;
        }
        // Single events count only after a list: one queued by a watch stopped before its
        // list (L2Advertisements gone and back) could say "complete" of next to nothing.
        if self.published.is_none() && !matches!(c, Change::Listed(_)) {
            return false;
        }
        let touched = self.published.get_or_insert_default().apply(c);
        if self.nodes_as != Some(NodeScope::Facts) || self.node_scope() != Some(NodeScope::Facts) {
            return false;
        }
        let mut changed = false;
        for node in touched.into_iter().filter(|n| !self.own.contains(n)) {
            let facts = self.published.as_ref().and_then(|p| p.nodes.get(&node)).cloned();
            let before = model.nodes.get(&node).cloned();
            match facts {
                Some(f) => model.upsert_node_facts(node.clone(), &f),
                None => model.remove_node(&node),
            }
            changed |= model.nodes.get(&node) != before.as_ref();
        }
        changed
    }
}
