//! Label selectors: the API's matching rule for selector lists, and syntax checks (apimachinery's rules).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Labels as selectors read them: a key's value. Whoever holds many label sets (a speaker
/// holds every Node's) may keep them compactly and still match them.
pub trait Labels {
    /// The value of label `key`, if set.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// The API's selector-list rule, in one place: an empty list matches everything, otherwise
/// any one selector must match. An invalid selector (which the validator reports)
/// matches nothing, so a typo never widens what a rule applies to.
pub fn selectors_match(selectors: &[LabelSelector], labels: &impl Labels) -> bool {
    selectors.is_empty() || selectors.iter().any(|s| selector_matches(s, labels))
}

/// One selector, by kube's rule (`kube::core::Selector`, which the tests hold this to):
/// every `matchLabels` pair and every expression; an empty selector matches everything;
/// an expression with an unknown operator, or `In`/`NotIn` without values, makes the
/// selector match nothing. Read in place: the planner matches every Node against it.
fn selector_matches(s: &LabelSelector, labels: &impl Labels) -> bool {
    let expressions = s.match_expressions.as_deref().unwrap_or_default();
    let valid = |r: &LabelSelectorRequirement| match r.operator.as_str() {
        "In" | "NotIn" => r.values.is_some(),
        "Exists" | "DoesNotExist" => true,
        _ => false,
    };
    let holds = |r: &LabelSelectorRequirement| {
        let value = labels.label(&r.key);
        let listed = || value.is_some_and(|v| r.values.iter().flatten().any(|x| x == v));
        match r.operator.as_str() {
            "In" => listed(),
            "NotIn" => !listed(),
            "Exists" => value.is_some(),
            _ => value.is_none(),
        }
    };
    expressions.iter().all(valid)
        && s.match_labels.iter().flatten().all(|(k, v)| labels.label(k) == Some(v.as_str()))
        && expressions.iter().all(holds)
}

/// A problem at a path relative to the checked value: (sub-path, problem, fix).
pub(crate) type Problem = (String, String, String);

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

/// Label value or name part of a key: at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends.
fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(is_name_char)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// RFC 1123 DNS subdomain, the rule for most object names and key prefixes.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Label key: `[prefix/]name`.
pub(crate) fn is_label_key(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(s),
    }
}

/// Label value: empty or a label name.
pub(crate) fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

const KEY_FIX: &str = "use [prefix/]name: name up to 63 letters, digits, '-', '_' or '.', \
                       starting and ending with a letter or digit; prefix a DNS subdomain";
const VALUE_FIX: &str = "use up to 63 letters, digits, '-', '_' or '.', starting and ending \
                         with a letter or digit, or an empty value";

/// Checks a selector; an empty selector is valid and matches everything.
pub(crate) fn check_selector(sel: &LabelSelector) -> Vec<Problem> {
    let mut out = Vec::new();
    for (k, v) in sel.match_labels.iter().flatten() {
        if !is_label_key(k) {
            out.push((
                format!(".matchLabels[{k:?}]"),
                format!("{k:?} is not a valid label key"),
                KEY_FIX.into(),
            ));
        }
        if !is_label_value(v) {
            out.push((
                format!(".matchLabels[{k:?}]"),
                format!("{v:?} is not a valid label value"),
                VALUE_FIX.into(),
            ));
        }
    }
    for (i, req) in sel.match_expressions.iter().flatten().enumerate() {
        let at = format!(".matchExpressions[{i}]");
        if !is_label_key(&req.key) {
            out.push((
                format!("{at}.key"),
                format!("{:?} is not a valid label key", req.key),
                KEY_FIX.into(),
            ));
        }
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    out.push((
                        format!("{at}.values"),
                        format!("operator {} needs at least one value", req.operator),
                        "list the values, or use Exists".into(),
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    out.push((
                        format!("{at}.values"),
                        format!("operator {} takes no values", req.operator),
                        "remove values, or use In / NotIn".into(),
                    ));
                }
            }
            other => out.push((
                format!("{at}.operator"),
                format!("{other:?} is not a selector operator"),
                "use In, NotIn, Exists or DoesNotExist".into(),
            )),
        }
        for (j, v) in values.iter().enumerate() {
            if !is_label_value(v) {
                out.push((
                    format!("{at}.values[{j}]"),
                    format!("{v:?} is not a valid label value"),
                    VALUE_FIX.into(),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selector_lists() {
        let rack1 = LabelSelector { match_labels: Some(labels(&[("rack", "r1")])), match_expressions: None };
        let rack2 = LabelSelector { match_labels: Some(labels(&[("rack", "r2")])), match_expressions: None };
        let node = labels(&[("rack", "r2")]);
        assert!(selectors_match(&[], &node));
        assert!(selectors_match(&[rack1.clone(), rack2], &node));
        assert!(!selectors_match(&[rack1], &node));
        let broken = LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "rack".into(),
                    operator: "Bogus".into(),
                    values: None,
                },
            ]),
            match_labels: None,
        };
        assert!(!selectors_match(&[broken], &node));
    }

    /// The rule read in place is kube's: every selector of a table against every label set.
    #[test]
    fn selectors_match_as_kube_matches_them() {
        use kube::core::{Selector, SelectorExt};
        let req = |key: &str, op: &str, values: Option<&[&str]>| LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.map(|v| v.iter().map(|s| s.to_string()).collect()),
        };
        let sel = |pairs: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>| LabelSelector {
            match_labels: (!pairs.is_empty()).then(|| labels(pairs)),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        };
        let selectors = [
            sel(&[], vec![]),
            sel(&[("rack", "r1")], vec![]),
            sel(&[("rack", "r1"), ("zone", "a")], vec![]),
            sel(&[], vec![req("rack", "In", Some(&["r1", "r2"]))]),
            sel(&[], vec![req("rack", "In", Some(&[]))]),
            sel(&[], vec![req("rack", "In", None)]),
            sel(&[], vec![req("rack", "NotIn", Some(&["r1"]))]),
            sel(&[], vec![req("rack", "NotIn", None)]),
            sel(&[], vec![req("rack", "Exists", None)]),
            sel(&[], vec![req("rack", "DoesNotExist", Some(&["ignored"]))]),
            sel(&[], vec![req("rack", "Bogus", Some(&["r1"]))]),
            sel(&[("zone", "a")], vec![req("rack", "Exists", None), req("edge", "DoesNotExist", None)]),
            sel(&[("zone", "a")], vec![req("rack", "NotIn", Some(&["r2"])), req("rack", "Gt", Some(&["1"]))]),
        ];
        let sets = [
            labels(&[]),
            labels(&[("rack", "r1")]),
            labels(&[("rack", "r2"), ("zone", "a")]),
            labels(&[("rack", "r1"), ("zone", "a"), ("edge", "")]),
            labels(&[("zone", "a")]),
        ];
        for s in &selectors {
            for l in &sets {
                let kube = Selector::try_from(s.clone()).is_ok_and(|k| k.matches(l));
                assert_eq!(selector_matches(s, l), kube, "{s:?} on {l:?}");
            }
        }
    }

    #[test]
    fn keys_and_values() {
        assert!(is_label_key("app"));
        assert!(is_label_key("kubernetes.io/hostname"));
        assert!(is_label_key("node-role.kubernetes.io/control-plane"));
        assert!(!is_label_key("-app"));
        assert!(!is_label_key("Bad_Prefix/app"));
        assert!(!is_label_key("a/b/c"));
        assert!(!is_label_key(&"x".repeat(64)));
        assert!(is_label_value(""));
        assert!(!is_label_value("has space"));
    }
}
