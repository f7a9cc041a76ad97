//! Taking fields out of an input object one by one, so whatever is left over is
//! reported instead of dropped.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::Unconverted;

/// Collects the fields that were not converted.
#[derive(Default)]
pub(super) struct Report(Vec<Unconverted>);

impl Report {
    pub(super) fn push(&mut self, object: &str, field: impl ToString, why: impl Into<String>) {
        self.0.push(Unconverted { object: object.to_owned(), field: field.to_string(), why: why.into() });
    }

    pub(super) fn into_lines(self) -> Vec<Unconverted> {
        self.0
    }
}

/// `Kind namespace/name` (or `Kind name`) of an input object.
pub(super) fn describe(doc: &Value) -> String {
    let kind = doc["kind"].as_str().unwrap_or("(no kind)");
    let name = doc["metadata"]["name"].as_str().unwrap_or("(no name)");
    match doc["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The `spec` of one input object, emptied as fields are converted.
pub(super) struct Spec<'r> {
    pub(super) object: String,
    map: Map<String, Value>,
    report: &'r mut Report,
}

impl<'r> Spec<'r> {
    pub(super) fn new(doc: &Value, report: &'r mut Report) -> Self {
        let map = doc["spec"].as_object().cloned().unwrap_or_default();
        Self { object: describe(doc), map, report }
    }

    /// Reports a field of this object.
    /// The report, for lines about other objects than this one.
    pub(super) fn report(&mut self) -> &mut Report {
        self.report
    }

    pub(super) fn unconverted(&mut self, field: impl Into<String>, why: impl Into<String>) {
        self.report.push(&self.object, field.into(), why);
    }

    /// Removes a field, returning its value unless it is absent or null.
    pub(super) fn take_raw(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    /// Removes a field and decodes it; a value of the wrong shape is reported.
    pub(super) fn take<T: DeserializeOwned>(&mut self, key: &str) -> Option<T> {
        let v = self.take_raw(key)?;
        match serde_json::from_value(v) {
            Ok(t) => Some(t),
            Err(e) => {
                self.unconverted(
                    format!("spec.{key}"),
                    format!("cannot be read ({e}); fix it in MetalLB's object"),
                );
                None
            }
        }
    }

    /// Reports every field nobody took.
    pub(super) fn finish(self) {
        for key in self.map.keys() {
            self.report.push(
                &self.object,
                format!("spec.{key}"),
                "not a field this converter knows (newer MetalLB?); carry it over by hand if ferrolb has an \
                 equivalent",
            );
        }
    }
}

/// ferrolb metadata for a converted cluster-scoped object: the name and labels (pool
/// selectors match labels), plus annotations other than kubectl's bookkeeping.
pub(super) fn metadata(doc: &Value) -> ObjectMeta {
    let meta = &doc["metadata"];
    let strings = |v: &Value| -> Option<std::collections::BTreeMap<String, String>> {
        let m: std::collections::BTreeMap<String, String> = v
            .as_object()?
            .iter()
            .filter(|(k, _)| !k.starts_with("kubectl.kubernetes.io/"))
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
            .collect();
        (!m.is_empty()).then_some(m)
    };
    ObjectMeta {
        name: meta["name"].as_str().map(str::to_owned),
        labels: strings(&meta["labels"]),
        annotations: strings(&meta["annotations"]),
        ..ObjectMeta::default()
    }
}
