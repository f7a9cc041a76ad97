//! Writing the store: create, update and delete with the apiserver's metadata rules
//! (names, uids, generation, managedFields, finalizers), and the commit every change
//! goes through (resourceVersion, change log, watchers, the garbage collector's index).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{LogEntry, Managed, Propagation, Store, Target, WatchMsg, meta, now, res_key, set_meta};
use crate::error::ApiError;
use crate::events;
use crate::fields::{self, Scope, Writer};
use crate::resource::ResourceInfo;

/// The object without what changes on every write, to spot no-op updates.
fn normalized(obj: &Value) -> Value {
    let mut v = obj.clone();
    set_meta(&mut v, "resourceVersion", Value::Null);
    if let Some(mf) = v.pointer_mut("/metadata/managedFields").and_then(Value::as_array_mut) {
        for e in mf.iter_mut().filter_map(Value::as_object_mut) {
            e.remove("time");
        }
    }
    v
}

/// The object without metadata and status: what `generation` counts changes of.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    v
}

impl Store {
    fn next_id(&mut self) -> u64 {
        self.counter += 1;
        // A 64-bit mix so generated names and uids do not look sequential.
        self.counter.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29) ^ self.counter
    }

    fn generated_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut n = self.next_id();
        (0..5)
            .map(|_| {
                let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
                n /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    fn new_uid(&mut self) -> String {
        let a = self.next_id();
        // The last group is the raw counter, so uids never repeat (GC matches owners by uid).
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            (a >> 12) & 0xfff,
            self.counter
        )
    }

    /// An object written through `t` as it is stored: at the version it was written in,
    /// except that events.k8s.io Events are stored as core Events.
    fn stored(t: &Target, obj: Value) -> Value {
        if events::is_events_v1(&t.info) { events::to_core(obj) } else { Self::show(t, &obj) }
    }

    pub(super) fn commit(
        &mut self,
        info: &ResourceInfo,
        etype: &'static str,
        mut obj: Value,
        old: Option<Value>,
    ) -> Value {
        self.rv += 1;
        set_meta(&mut obj, "resourceVersion", json!(self.rv.to_string()));
        let ns = meta(&obj, "namespace").unwrap_or_default();
        let name = meta(&obj, "name").unwrap_or_default();
        let key = (res_key(info), (ns.clone(), name.clone()));
        let bucket = self.objects.entry(key.0.clone()).or_default();
        let previous = if etype == "DELETED" {
            bucket.remove(&key.1)
        } else {
            bucket.insert(key.1.clone(), obj.clone())
        };
        // The garbage collector's index: forget what the replaced (or deleted) object
        // said, learn the new.
        if let Some(before) = &previous {
            self.owners.forget(&key, before);
        }
        if etype != "DELETED" {
            self.owners.learn(&key, &obj);
        }
        let (group, plural) = res_key(info);
        let entry =
            Arc::new(LogEntry { rv: self.rv, group, plural, namespace: ns, etype, object: obj.clone(), old });
        self.log.push(entry.clone());
        // No receivers is fine: nobody is watching.
        let _ = self.tx.send(WatchMsg::Event(entry));
        obj
    }

    /// POST: creates an object; `name` defaults from generateName.
    pub(crate) fn create(
        &mut self,
        t: &Target,
        mut obj: Value,
        manager: &str,
        managed: Managed,
    ) -> Result<Value, ApiError> {
        if !obj.get("metadata").is_some_and(Value::is_object) {
            return Err(ApiError::BadRequest("metadata is required".into()));
        }
        let name = match (meta(&obj, "name").filter(|n| !n.is_empty()), meta(&obj, "generateName")) {
            (Some(n), _) => n,
            (None, Some(prefix)) => format!("{prefix}{}", self.generated_suffix()),
            (None, None) => {
                return Err(ApiError::BadRequest("name or generateName is required".into()));
            }
        };
        set_meta(&mut obj, "name", json!(name));
        self.check_namespace(t, &mut obj)?;
        if self.lookup(t, &name).is_ok() {
            return Err(ApiError::AlreadyExists { kind: t.info.plural.clone(), name });
        }
        obj = Self::stored(t, obj);
        let uid = self.new_uid();
        set_meta(&mut obj, "uid", json!(uid));
        set_meta(&mut obj, "creationTimestamp", json!(now()));
        set_meta(&mut obj, "generation", if t.info.generation { json!(1) } else { Value::Null });
        for f in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"] {
            set_meta(&mut obj, f, Value::Null);
        }
        if t.info.status_subresource
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        if managed == Managed::Update {
            set_meta(&mut obj, "managedFields", Value::Null);
            fields::record_update(
                None,
                &mut obj,
                &Self::writer(t, manager, Scope::Main { status_subresource: t.info.status_subresource }),
            );
        }
        self.controllers_on_write(t, &mut obj);
        let created = self.commit(&t.info, "ADDED", obj, None);
        if (t.info.group.as_str(), t.info.plural.as_str()) == ("", "namespaces") {
            self.populate_namespace(&name);
        }
        Ok(Self::show(t, &created))
    }

    fn writer(t: &Target, manager: &str, scope: Scope) -> Writer {
        Writer {
            manager: manager.to_string(),
            api_version: t.info.api_version(&t.version),
            now: now(),
            scope,
        }
    }

    /// Sets `metadata.namespace` from the path and checks the namespace exists.
    fn check_namespace(&self, t: &Target, obj: &mut Value) -> Result<(), ApiError> {
        if !t.info.namespaced {
            set_meta(obj, "namespace", Value::Null);
            return Ok(());
        }
        let Some(ns) = &t.namespace else {
            return Err(ApiError::BadRequest("a namespace is required for a namespaced resource".into()));
        };
        if meta(obj, "namespace").is_some_and(|n| !n.is_empty() && n != *ns) {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
                    .into(),
            ));
        }
        set_meta(obj, "namespace", json!(ns));
        if self.get_raw("", "namespaces", None, ns).is_none() {
            return Err(ApiError::NotFound { kind: "namespaces".into(), name: ns.clone() });
        }
        Ok(())
    }

    /// Writes `candidate` over the existing object within `scope` (PUT, PATCH, apply on an existing object).
    pub(crate) fn update(
        &mut self,
        t: &Target,
        name: &str,
        candidate: Value,
        scope: Scope,
        manager: &str,
        managed: Managed,
    ) -> Result<Value, ApiError> {
        let old = self.lookup(t, name)?.clone();
        if let Some(want) = meta(&candidate, "resourceVersion").filter(|rv| !rv.is_empty())
            && meta(&old, "resourceVersion").as_deref() != Some(want.as_str())
        {
            return Err(ApiError::Conflict { kind: t.info.plural.clone(), name: name.into() });
        }
        if meta(&candidate, "name").is_some_and(|n| n != name) {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta(&candidate, "name").unwrap_or_default()
            )));
        }
        let mut new = match scope {
            Scope::Status => {
                let mut new = old.clone();
                if let Some(m) = new.as_object_mut() {
                    match candidate.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                new
            }
            Scope::Main { status_subresource } => {
                let mut new = candidate.clone();
                if !new.get("metadata").is_some_and(Value::is_object)
                    && let Some(m) = new.as_object_mut()
                {
                    m.insert("metadata".into(), json!({}));
                }
                if status_subresource && let Some(m) = new.as_object_mut() {
                    match old.get("status") {
                        Some(s) => m.insert("status".into(), s.clone()),
                        None => m.remove("status"),
                    };
                }
                self.check_namespace(t, &mut new)?;
                // Server-owned metadata cannot be changed by a write.
                for f in
                    ["name", "uid", "creationTimestamp", "generation", "deletionTimestamp", "generateName"]
                {
                    set_meta(
                        &mut new,
                        f,
                        old.pointer(&format!("/metadata/{f}")).cloned().unwrap_or(Value::Null),
                    );
                }
                new
            }
        };
        if managed == Managed::Update {
            set_meta(
                &mut new,
                "managedFields",
                old.pointer("/metadata/managedFields").cloned().unwrap_or(Value::Null),
            );
            fields::record_update(Some(&old), &mut new, &Self::writer(t, manager, scope));
        } else {
            set_meta(
                &mut new,
                "managedFields",
                candidate.pointer("/metadata/managedFields").cloned().unwrap_or(Value::Null),
            );
        }
        new = Self::stored(t, new);
        set_meta(
            &mut new,
            "resourceVersion",
            old.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null),
        );
        if normalized(&new) == normalized(&old) {
            // The real server does not bump resourceVersion or notify watchers for a no-op write.
            return Ok(Self::show(t, &old));
        }
        if t.info.generation && spec_part(&new) != spec_part(&old) {
            let g = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1);
            set_meta(&mut new, "generation", json!(g + 1));
        }
        let finalized = meta(&new, "deletionTimestamp").is_some()
            && new.pointer("/metadata/finalizers").and_then(Value::as_array).is_none_or(Vec::is_empty);
        if finalized {
            return self.remove(t, new, Some(old), Propagation::Cascade);
        }
        self.controllers_on_write(t, &mut new);
        Ok(Self::show(t, &self.commit(&t.info, "MODIFIED", new, Some(old))))
    }

    /// DELETE of one object, honouring finalizers and preconditions.
    pub(crate) fn delete(
        &mut self,
        t: &Target,
        name: &str,
        propagation: Propagation,
        precondition_rv: Option<&str>,
        precondition_uid: Option<&str>,
    ) -> Result<Value, ApiError> {
        let old = self.lookup(t, name)?.clone();
        if precondition_rv.is_some_and(|rv| meta(&old, "resourceVersion").as_deref() != Some(rv))
            || precondition_uid.is_some_and(|uid| meta(&old, "uid").as_deref() != Some(uid))
        {
            return Err(ApiError::Conflict { kind: t.info.plural.clone(), name: name.into() });
        }
        let has_finalizers =
            old.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if meta(&old, "deletionTimestamp").is_some() {
                return Ok(Self::show(t, &old));
            }
            let mut new = old.clone();
            set_meta(&mut new, "deletionTimestamp", json!(now()));
            set_meta(&mut new, "deletionGracePeriodSeconds", json!(0));
            // As the real server does, marking for deletion bumps generation (of kinds that
            // have one) so generation-filtered watchers see it.
            if let Some(g) = old.pointer("/metadata/generation").and_then(Value::as_i64) {
                set_meta(&mut new, "generation", json!(g + 1));
            }
            return Ok(Self::show(t, &self.commit(&t.info, "MODIFIED", new, Some(old))));
        }
        self.remove(t, old.clone(), Some(old), propagation)
    }

    /// Removes an object for good, then collects what depended on it.
    fn remove(
        &mut self,
        t: &Target,
        obj: Value,
        old: Option<Value>,
        propagation: Propagation,
    ) -> Result<Value, ApiError> {
        let gone = self.commit(&t.info, "DELETED", obj, old);
        let uid = meta(&gone, "uid").unwrap_or_default();
        match (t.info.group.as_str(), t.info.plural.as_str()) {
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                if let Some(info) = ResourceInfo::from_crd(&gone) {
                    self.drop_all(&info);
                    self.registry.remove(&info.group, &info.plural);
                }
            }
            ("", "namespaces") => {
                let ns = meta(&gone, "name").unwrap_or_default();
                self.drop_namespace(&ns);
            }
            _ => {}
        }
        self.collect_garbage(&uid, propagation);
        Ok(Self::show(t, &gone))
    }
}
