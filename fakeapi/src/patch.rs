//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902).

use serde_json::{Value, json};

use crate::error::ApiError;

/// RFC 7386 JSON merge patch: objects merge, `null` deletes, everything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            if let Some(t) = target.as_object_mut() {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// Decodes an RFC 6901 JSON pointer into its reference tokens.
fn pointer(p: &str) -> Result<Vec<String>, ApiError> {
    if p.is_empty() {
        return Ok(Vec::new());
    }
    let rest = p.strip_prefix('/').ok_or_else(|| invalid(format!("invalid JSON pointer {p:?}")))?;
    Ok(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

fn invalid(msg: String) -> ApiError {
    ApiError::Unprocessable(msg)
}

fn index(token: &str, len: usize, allow_end: bool) -> Result<usize, ApiError> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    match token.parse::<usize>() {
        Ok(i) if i < len || (allow_end && i == len) => Ok(i),
        _ => Err(invalid(format!("array index {token:?} out of bounds"))),
    }
}

fn parent_mut<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, ApiError> {
    let mut cur = doc;
    for t in path {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => {
                let i = index(t, a.len(), false)?;
                a.get_mut(i)
            }
            _ => None,
        }
        .ok_or_else(|| invalid(format!("path segment {t:?} does not exist")))?;
    }
    Ok(cur)
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |cur, t| match cur {
        Value::Object(m) => m.get(t),
        Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), ApiError> {
    let Some((last, parents)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            let i = index(last, a.len(), true)?;
            a.insert(i, value);
        }
        _ => return Err(invalid(format!("cannot add {last:?} to a scalar"))),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, ApiError> {
    let (last, parents) =
        path.split_last().ok_or_else(|| invalid("cannot remove the whole document".into()))?;
    match parent_mut(doc, parents)? {
        Value::Object(m) => m.remove(last).ok_or_else(|| invalid(format!("cannot remove missing {last:?}"))),
        Value::Array(a) => {
            let i = index(last, a.len(), false)?;
            Ok(a.remove(i))
        }
        _ => Err(invalid(format!("cannot remove {last:?} from a scalar"))),
    }
}

/// RFC 6902 JSON patch; any failed operation (including `test`) rejects the whole patch.
pub(crate) fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let ops = patch.as_array().ok_or_else(|| ApiError::BadRequest("a JSON patch must be an array".into()))?;
    let mut out = doc.clone();
    for op in ops {
        let field = |k: &str| {
            op.get(k).and_then(Value::as_str).ok_or_else(|| invalid(format!("operation lacks {k:?}")))
        };
        let path = pointer(field("path")?)?;
        let value = || op.get("value").cloned().ok_or_else(|| invalid("operation lacks \"value\"".into()));
        match field("op")? {
            "add" => add(&mut out, &path, value()?)?,
            "remove" => {
                remove(&mut out, &path)?;
            }
            "replace" => {
                remove(&mut out, &path)?;
                add(&mut out, &path, value()?)?;
            }
            "move" => {
                let v = remove(&mut out, &pointer(field("from")?)?)?;
                add(&mut out, &path, v)?;
            }
            "copy" => {
                let v = get(&out, &pointer(field("from")?)?)
                    .cloned()
                    .ok_or_else(|| invalid("copy from a missing path".into()))?;
                add(&mut out, &path, v)?;
            }
            "test" => {
                // Like the apiserver's json-patch library, a missing path tests equal to null.
                if get(&out, &path).unwrap_or(&Value::Null) != &value()? {
                    return Err(invalid(format!("testing value {} failed", field("path")?)));
                }
            }
            other => return Err(invalid(format!("unknown JSON patch operation {other:?}"))),
        }
    }
    *doc = out;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
    }

    #[test]
    fn json_patch_follows_rfc6902() {
        let mut doc = json!({"metadata": {"finalizers": ["a", "b"]}, "x/y": 1});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers/1", "value": "b"},
            {"op": "remove", "path": "/metadata/finalizers/1"},
            {"op": "add", "path": "/metadata/finalizers/-", "value": "c"},
            {"op": "replace", "path": "/x~1y", "value": 2},
            {"op": "copy", "from": "/x~1y", "path": "/z"},
            {"op": "move", "from": "/z", "path": "/w"},
        ]);
        json_patch(&mut doc, &patch).unwrap();
        assert_eq!(doc, json!({"metadata": {"finalizers": ["a", "c"]}, "x/y": 2, "w": 2}));
        // A failed test leaves the document untouched.
        let before = doc.clone();
        let failing = json!([{"op": "remove", "path": "/w"}, {"op": "test", "path": "/x~1y", "value": 3}]);
        assert!(matches!(json_patch(&mut doc, &failing), Err(ApiError::Unprocessable(_))));
        assert_eq!(doc, before);
    }
}
