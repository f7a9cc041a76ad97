//! Reading the store: GET and LIST, with objects shown at the requested version and
//! filtered by namespace and selectors.

use serde_json::{Value, json};

use super::{ObjKey, Store, Target, res_key};
use crate::error::ApiError;
use crate::events;
use crate::selector::{FieldSelector, LabelSelector};

impl Store {
    /// The object as served at the requested version.
    pub(crate) fn show(t: &Target, obj: &Value) -> Value {
        let mut v = if events::is_events_v1(&t.info) { events::from_core(obj.clone()) } else { obj.clone() };
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), json!(t.info.api_version(&t.version)));
            m.insert("kind".into(), json!(t.info.kind));
        }
        v
    }

    fn obj_key(&self, t: &Target, name: &str) -> Result<ObjKey, ApiError> {
        match (&t.namespace, t.info.namespaced) {
            (Some(ns), true) => Ok((ns.clone(), name.to_string())),
            (None, false) => Ok((String::new(), name.to_string())),
            _ => Err(ApiError::NotFound { kind: t.info.plural.clone(), name: name.into() }),
        }
    }

    pub(super) fn lookup(&self, t: &Target, name: &str) -> Result<&Value, ApiError> {
        let key = self.obj_key(t, name)?;
        self.objects
            .get(&res_key(&t.info))
            .and_then(|m| m.get(&key))
            .ok_or_else(|| ApiError::NotFound { kind: t.info.plural.clone(), name: name.into() })
    }

    /// GET of one object.
    pub(crate) fn get(&self, t: &Target, name: &str) -> Result<Value, ApiError> {
        self.lookup(t, name).map(|o| Self::show(t, o))
    }

    /// Raw stored object, for the test helpers.
    pub(crate) fn get_raw(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let key = match self.registry.get(group, plural) {
            Some(info) => res_key(info),
            None => (group.to_string(), plural.to_string()),
        };
        self.objects.get(&key)?.get(&(namespace.unwrap_or_default().to_string(), name.to_string())).cloned()
    }

    fn in_scope(t: &Target, ns: &str, shown: &Value, labels: &LabelSelector, fields: &FieldSelector) -> bool {
        t.namespace.as_deref().is_none_or(|want| want == ns) && labels.matches(shown) && fields.matches(shown)
    }

    /// LIST: matching objects in (namespace, name) order, and the list resourceVersion.
    pub(crate) fn list(
        &self,
        t: &Target,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> (Vec<Value>, u64) {
        (self.matching(t, labels, fields).map(|(_, o)| Self::show(t, o)).collect(), self.rv)
    }

    /// The objects a LIST returns, in (namespace, name) order, as stored: a page shows
    /// only its own (a list of 100k objects in 500-item pages copied every object for
    /// every page). Selectors read what [`Store::show`] keeps of the stored object.
    pub(crate) fn matching<'a>(
        &'a self,
        t: &'a Target,
        labels: &'a LabelSelector,
        fields: &'a FieldSelector,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Value)> + 'a {
        let converted = events::is_events_v1(&t.info);
        self.objects.get(&res_key(&t.info)).into_iter().flatten().filter(move |((ns, _), o)| {
            if converted {
                Self::in_scope(t, ns, &Self::show(t, o), labels, fields)
            } else {
                Self::in_scope(t, ns, o, labels, fields)
            }
        })
    }
}
