//! Label and field selectors, in the string syntax of `?labelSelector=` / `?fieldSelector=`.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<LabelReq>);

/// Splits on commas that are not inside `( )`, since `in (a,b)` holds commas itself.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().map(str::trim).filter(|p| !p.is_empty()).collect()
}

fn parse_set(key: &str, rest: &str, raw: &str) -> Result<(String, Vec<String>), ApiError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| ApiError::BadRequest(format!("unable to parse requirement: {raw:?}")))?;
    let values = inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect();
    Ok((key.trim().to_string(), values))
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
    pub(crate) fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let req = if let Some(k) = part.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                let (k, vs) = parse_set(k, rest, part)?;
                LabelReq::NotIn(k, vs)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                let (k, vs) = parse_set(k, rest, part)?;
                LabelReq::In(k, vs)
            } else if part.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) {
                LabelReq::Exists(part.to_string())
            } else {
                return Err(ApiError::BadRequest(format!("unable to parse requirement: {part:?}")));
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let label = |k: &str| obj.pointer("/metadata/labels").and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            LabelReq::Eq(k, v) => label(k) == Some(v.as_str()),
            // Kubernetes: `!=` also matches objects without the label.
            LabelReq::NotEq(k, v) => label(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            LabelReq::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            LabelReq::Exists(k) => label(k).is_some(),
            LabelReq::NotExists(k) => label(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value` / `path!=value` terms on dotted JSON paths.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,spec.nodeName!=y`.
    pub(crate) fn parse(s: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for part in split_top_level(s) {
            let (path, eq, value) = if let Some((p, v)) = part.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = part.split_once("==") {
                (p, true, v)
            } else if let Some((p, v)) = part.split_once('=') {
                (p, true, v)
            } else {
                return Err(ApiError::BadRequest(format!("invalid field selector: {part:?}")));
            };
            terms.push((path.trim().split('.').map(String::from).collect(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether every term holds; a missing field compares as the empty string, as in Kubernetes.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let got = path.iter().try_fold(obj, |v, seg| v.get(seg)).map(|v| match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            });
            (got.unwrap_or_default() == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn label_selector_forms() {
        let obj = json!({"metadata": {"name": "a", "labels": {"app": "web", "tier": "front"}}});
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (db, web)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("app=web,tier=back", false),
            ("missing!=x", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&obj), want, "{sel}");
        }
    }

    #[test]
    fn field_selector_forms() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}});
        assert!(FieldSelector::parse("metadata.name=a").unwrap().matches(&obj));
        assert!(!FieldSelector::parse("metadata.name!=a").unwrap().matches(&obj));
        assert!(FieldSelector::parse("metadata.namespace=ns,spec.nodeName=n1").unwrap().matches(&obj));
        assert!(FieldSelector::parse("spec.missing=").unwrap().matches(&obj));
    }
}
