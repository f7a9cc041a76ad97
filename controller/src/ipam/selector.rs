//! Kubernetes label selectors (matchLabels + matchExpressions), evaluated against plain maps.

use std::collections::{BTreeMap, BTreeSet};

/// A label selector; an empty selector matches everything, as in Kubernetes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    pub match_labels: BTreeMap<String, String>,
    /// Further requirements, all of which must hold.
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator and its values.
    pub op: Operator,
}

/// A `matchExpressions` operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operator {
    /// The label is present with one of these values.
    In(BTreeSet<String>),
    /// The label is absent or has none of these values.
    NotIn(BTreeSet<String>),
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl LabelSelector {
    /// Whether `labels` satisfy every label and expression of the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

impl Requirement {
    /// Whether `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match &self.op {
            Operator::In(values) => value.is_some_and(|v| values.contains(v)),
            Operator::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    use ferrolb_testkit::names as set;

    #[test]
    fn empty_selector_matches_everything() {
        assert!(LabelSelector::default().matches(&labels(&[])));
    }

    #[test]
    fn match_labels_and_expressions_are_anded() {
        let sel = LabelSelector {
            match_labels: labels(&[("tier", "web")]),
            match_expressions: vec![
                Requirement { key: "env".into(), op: Operator::In(set(&["prod", "staging"])) },
                Requirement { key: "zone".into(), op: Operator::NotIn(set(&["dmz"])) },
                Requirement { key: "owner".into(), op: Operator::Exists },
                Requirement { key: "legacy".into(), op: Operator::DoesNotExist },
            ],
        };
        assert!(sel.matches(&labels(&[("tier", "web"), ("env", "prod"), ("owner", "a")])));
        assert!(!sel.matches(&labels(&[("tier", "db"), ("env", "prod"), ("owner", "a")])));
        assert!(!sel.matches(&labels(&[("tier", "web"), ("env", "dev"), ("owner", "a")])));
        assert!(!sel.matches(&labels(&[("tier", "web"), ("env", "prod"), ("owner", "a"), ("zone", "dmz")])));
        assert!(!sel.matches(&labels(&[("tier", "web"), ("env", "prod")])));
        assert!(!sel.matches(&labels(&[("tier", "web"), ("env", "prod"), ("owner", "a"), ("legacy", "")])));
    }
}
