//! Field ownership (`metadata.managedFields`) and server-side apply.
//!
//! Ownership is tracked per leaf path: objects are walked, while lists and scalars are atomic
//! leaves (the real server merges lists by their `x-kubernetes-list-map-keys`; we do not).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::error::ApiError;

/// A field path, one key per segment (`["spec", "ports"]`).
pub(crate) type Path = Vec<String>;

/// Which part of the object a write may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The main resource; excludes `.status` when the kind has a status subresource.
    Main { status_subresource: bool },
    /// The `/status` subresource: only `.status`.
    Status,
}

impl Scope {
    fn subresource(self) -> Option<&'static str> {
        match self {
            Scope::Main { .. } => None,
            Scope::Status => Some("status"),
        }
    }

    fn includes_top(self, key: &str) -> bool {
        match self {
            Scope::Status => key == "status",
            Scope::Main { status_subresource } => {
                !(matches!(key, "apiVersion" | "kind") || (status_subresource && key == "status"))
            }
        }
    }
}

/// Leaf paths an object sets, within a scope; in `metadata` only user-owned fields count.
pub(crate) fn leaves(obj: &Value, scope: Scope) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    let Some(map) = obj.as_object() else { return out };
    for (k, v) in map {
        if !scope.includes_top(k) {
            continue;
        }
        if k == "metadata" {
            for mk in ["labels", "annotations", "finalizers", "ownerReferences"] {
                if let Some(mv) = v.get(mk) {
                    walk(mv, vec!["metadata".into(), mk.into()], &mut out);
                }
            }
        } else {
            walk(v, vec![k.clone()], &mut out);
        }
    }
    out
}

fn walk(v: &Value, path: Path, out: &mut BTreeSet<Path>) {
    match v {
        // An empty map claims nothing: owning a parent map would make every later key a conflict.
        Value::Object(m) => {
            for (k, child) in m {
                let mut p = path.clone();
                p.push(k.clone());
                walk(child, p, out);
            }
        }
        _ => {
            out.insert(path);
        }
    }
}

/// Reads the value at a path.
pub(crate) fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, seg| v.get(seg))
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut cur = v;
    for seg in parents {
        match cur.get_mut(seg) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(m) = cur.as_object_mut() {
        m.remove(last);
    }
}

/// Renders a path as the real server does in conflict messages (`.spec.ports`).
pub(crate) fn render_path(path: &[String]) -> String {
    path.iter().map(|s| format!(".{s}")).collect()
}

fn is_prefix(a: &[String], b: &[String]) -> bool {
    a.len() <= b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

fn overlaps(a: &[String], b: &[String]) -> bool {
    is_prefix(a, b) || is_prefix(b, a)
}

/// One `managedFields` entry, with its field set decoded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    manager: String,
    operation: String,
    subresource: Option<String>,
    api_version: String,
    time: String,
    fields: BTreeSet<Path>,
}

impl Entry {
    fn to_json(&self) -> Value {
        let mut root = Map::new();
        for p in &self.fields {
            let mut cur = &mut root;
            for seg in p {
                let next = cur.entry(format!("f:{seg}")).or_insert_with(|| json!({}));
                match next.as_object_mut() {
                    Some(m) => cur = m,
                    None => break,
                }
            }
        }
        let mut e = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": Value::Object(root),
        });
        if let (Some(sub), Some(m)) = (&self.subresource, e.as_object_mut()) {
            m.insert("subresource".into(), json!(sub));
        }
        e
    }

    fn from_json(v: &Value) -> Option<Entry> {
        let mut fields = BTreeSet::new();
        fn decode(m: &Value, path: Path, out: &mut BTreeSet<Path>) {
            match m.as_object() {
                Some(map) if !map.is_empty() => {
                    for (k, child) in map {
                        let Some(seg) = k.strip_prefix("f:") else { continue };
                        let mut p = path.clone();
                        p.push(seg.to_string());
                        decode(child, p, out);
                    }
                }
                _ if !path.is_empty() => {
                    out.insert(path);
                }
                _ => {}
            }
        }
        decode(v.get("fieldsV1")?, Vec::new(), &mut fields);
        Some(Entry {
            manager: v.get("manager")?.as_str()?.to_string(),
            operation: v.get("operation")?.as_str()?.to_string(),
            subresource: v.get("subresource").and_then(Value::as_str).map(String::from),
            api_version: v.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string(),
            time: v.get("time").and_then(Value::as_str).unwrap_or_default().to_string(),
            fields,
        })
    }
}

fn read_entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Entry::from_json).collect())
        .unwrap_or_default()
}

fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let rendered: Vec<Value> = entries.iter().filter(|e| !e.fields.is_empty()).map(Entry::to_json).collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if rendered.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(rendered));
        }
    }
}

/// Who is writing, for managedFields bookkeeping.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    pub(crate) manager: String,
    pub(crate) api_version: String,
    pub(crate) now: String,
    pub(crate) scope: Scope,
}

fn entry_mut<'e>(entries: &'e mut Vec<Entry>, w: &Writer, operation: &str) -> &'e mut Entry {
    let sub = w.scope.subresource().map(String::from);
    let idx = match entries
        .iter()
        .position(|e| e.manager == w.manager && e.operation == operation && e.subresource == sub)
    {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: w.manager.clone(),
                operation: operation.to_string(),
                subresource: sub,
                api_version: w.api_version.clone(),
                time: String::new(),
                fields: BTreeSet::new(),
            });
            entries.len() - 1
        }
    };
    let e = &mut entries[idx];
    e.time = w.now.clone();
    e.api_version = w.api_version.clone();
    e
}

/// Records an `Update` operation (create, PUT, merge patch): the writer takes the fields it changed.
pub(crate) fn record_update(old: Option<&Value>, new: &mut Value, w: &Writer) {
    let mut entries = old.map(read_entries).unwrap_or_default();
    let new_leaves = leaves(new, w.scope);
    let old_leaves = old.map(|o| leaves(o, w.scope)).unwrap_or_default();
    let changed: BTreeSet<Path> =
        new_leaves.iter().filter(|p| old.and_then(|o| get_path(o, p)) != get_path(new, p)).cloned().collect();
    let removed: Vec<&Path> = old_leaves.difference(&new_leaves).collect();
    let sub = w.scope.subresource().map(String::from);
    for e in entries.iter_mut().filter(|e| e.subresource == sub) {
        e.fields.retain(|f| !changed.iter().chain(removed.iter().copied()).any(|c| overlaps(f, c)));
    }
    if !changed.is_empty() {
        entry_mut(&mut entries, w, "Update").fields.extend(changed);
    }
    write_entries(new, &entries);
}

/// Server-side apply of `applied` onto `old` (None: create); returns the merged object.
pub(crate) fn apply(
    old: Option<&Value>,
    applied: &Value,
    force: bool,
    w: &Writer,
) -> Result<Value, ApiError> {
    let mut entries = old.map(read_entries).unwrap_or_default();
    let applied_set = leaves(applied, w.scope);
    let sub = w.scope.subresource().map(String::from);
    let is_mine = |e: &Entry| e.manager == w.manager && e.operation == "Apply";

    let mut conflicts = Vec::new();
    if let Some(old) = old {
        for e in entries.iter().filter(|e| e.subresource == sub && !is_mine(e)) {
            for owned in &e.fields {
                for want in applied_set.iter().filter(|a| overlaps(owned, a)) {
                    let at = if owned.len() <= want.len() { owned } else { want };
                    if get_path(old, at) != get_path(applied, at) {
                        conflicts.push((e.manager.clone(), render_path(at)));
                    }
                }
            }
        }
    }
    conflicts.sort();
    conflicts.dedup();
    if !conflicts.is_empty() && !force {
        return Err(ApiError::ApplyConflict { conflicts });
    }
    // Forcing (or agreeing on values) moves or shares ownership: only forced-over fields are taken away.
    if force {
        for e in entries.iter_mut().filter(|e| e.subresource == sub && !is_mine(e)) {
            e.fields.retain(|f| !conflicts.iter().any(|(_, p)| render_path(f).starts_with(p.as_str())));
        }
    }

    let mut result = old.cloned().unwrap_or_else(|| json!({"metadata": {}}));
    // Fields this manager applied before but no longer does are removed, unless someone else owns them.
    let previous = entries
        .iter()
        .find(|e| is_mine(e) && e.subresource == sub)
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for gone in previous.difference(&applied_set) {
        let owned_elsewhere = entries
            .iter()
            .any(|e| !is_mine(e) && e.subresource == sub && e.fields.iter().any(|f| overlaps(f, gone)));
        if !owned_elsewhere {
            remove_path(&mut result, gone);
        }
    }
    merge_applied(&mut result, applied, w.scope);
    let mine = entry_mut(&mut entries, w, "Apply");
    mine.fields = applied_set;
    write_entries(&mut result, &entries);
    Ok(result)
}

/// Deep-merges the in-scope parts of an applied configuration; lists and scalars replace.
fn merge_applied(target: &mut Value, applied: &Value, scope: Scope) {
    let Some(src) = applied.as_object() else { return };
    for (k, v) in src {
        if k == "metadata" {
            let Some(meta) = v.as_object() else { continue };
            for (mk, mv) in meta {
                if matches!(mk.as_str(), "labels" | "annotations" | "finalizers" | "ownerReferences")
                    && let Some(tm) = target.get_mut("metadata")
                {
                    deep_merge(tm, &json!({ mk: mv }));
                }
            }
        } else if scope.includes_top(k) {
            deep_merge(target, &json!({ k: v }));
        }
    }
}

fn deep_merge(target: &mut Value, src: &Value) {
    match (target, src) {
        (Value::Object(t), Value::Object(s)) => {
            for (k, v) in s {
                match t.get_mut(k) {
                    Some(tv) if tv.is_object() && v.is_object() => deep_merge(tv, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, s) => *t = s.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(manager: &str) -> Writer {
        Writer {
            manager: manager.into(),
            api_version: "v1".into(),
            now: "2026-01-01T00:00:00Z".into(),
            scope: Scope::Main { status_subresource: true },
        }
    }

    #[test]
    fn apply_conflicts_then_force_moves_ownership() {
        let a =
            apply(None, &json!({"metadata": {"name": "x"}, "spec": {"p": 1}}), false, &writer("a")).unwrap();
        let err = apply(Some(&a), &json!({"spec": {"p": 2}}), false, &writer("b")).unwrap_err();
        assert_eq!(err, ApiError::ApplyConflict { conflicts: vec![("a".into(), ".spec.p".into())] });
        // Same value: shared ownership, no conflict.
        assert!(apply(Some(&a), &json!({"spec": {"p": 1}}), false, &writer("b")).is_ok());
        let b = apply(Some(&a), &json!({"spec": {"p": 2}}), true, &writer("b")).unwrap();
        assert_eq!(b["spec"]["p"], 2);
        let owners: Vec<_> = read_entries(&b).into_iter().map(|e| e.manager).collect();
        assert_eq!(owners, vec!["b".to_string()]);
    }

    #[test]
    fn apply_removes_fields_the_manager_dropped() {
        let a = apply(None, &json!({"spec": {"p": 1, "q": 2}}), false, &writer("a")).unwrap();
        let a2 = apply(Some(&a), &json!({"spec": {"p": 1}}), false, &writer("a")).unwrap();
        assert_eq!(a2["spec"], json!({"p": 1}));
    }

    #[test]
    fn managed_fields_round_trip() {
        let a = apply(
            None,
            &json!({"metadata": {"labels": {"l": "v"}}, "spec": {"p": [1]}}),
            false,
            &writer("a"),
        )
        .unwrap();
        let e = &read_entries(&a)[0];
        assert_eq!(e.fields.len(), 2);
        assert_eq!(
            a["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:l": {}}}, "f:spec": {"f:p": {}}})
        );
    }
}
