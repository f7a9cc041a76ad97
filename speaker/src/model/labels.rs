//! Nodes' labels as a speaker holds them: every Node's, for the nodeSelectors of its
//! peers and advertisements, with the strings most Nodes have in common held once.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// A Node's labels, for nodeSelectors: its pairs sorted by key, the strings shared with
/// other Nodes' ([`LabelStrings`]): most keys and values are the same on every Node. A
/// map per Node took 0.9 KB, 4.4 MB of a speaker's heap at 5 000 Nodes (issue #39).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeLabels(pub(super) Box<[(Arc<str>, Arc<str>)]>);

impl NodeLabels {
    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let i = self.0.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.0[i].1)
    }

    /// Whether label `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }
}

impl ferrolb_api::Labels for NodeLabels {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

/// The strings of the Nodes' labels, each held once.
#[derive(Debug, Clone, Default)]
pub struct LabelStrings {
    pub(super) held: HashSet<Arc<str>>,
    /// How many were held after the last clean-up.
    kept: usize,
}

/// A cache, not part of what a model says.
impl PartialEq for LabelStrings {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl LabelStrings {
    /// `labels` with their strings shared.
    pub fn labels(&mut self, labels: &BTreeMap<String, String>) -> NodeLabels {
        let pairs = labels.iter().map(|(k, v)| (self.string(k), self.string(v))).collect();
        // Strings only gone Nodes held (their names) go once the set has doubled.
        if self.held.len() > 2 * self.kept.max(1024) {
            self.held.retain(|s| Arc::strong_count(s) > 1);
            self.kept = self.held.len();
        }
        NodeLabels(pairs)
    }

    fn string(&mut self, s: &str) -> Arc<str> {
        if let Some(held) = self.held.get(s) {
            return held.clone();
        }
        let new: Arc<str> = s.into();
        self.held.insert(new.clone());
        new
    }
}
