//! Events: as on a real apiserver, `events.k8s.io/v1` Events are the core/v1 Events seen
//! through another schema — one storage, two views, so an Event written through either
//! API is listed and watched through both.

use serde_json::{Value, json};

use crate::resource::ResourceInfo;

/// events.k8s.io/v1 field names and the core/v1 fields they are stored as
/// (`k8s.io/kubernetes/pkg/apis/events/v1/conversion.go`); the other fields share a name.
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// Whether `info` is the events.k8s.io view of core Events.
pub(crate) fn is_events_v1(info: &ResourceInfo) -> bool {
    info.group == "events.k8s.io" && info.plural == "events"
}

fn rename(obj: &mut Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) {
    let Some(m) = obj.as_object_mut() else { return };
    for (from, to) in pairs {
        if let Some(v) = m.remove(from) {
            m.insert(to.into(), v);
        }
    }
}

/// An events.k8s.io/v1 Event as stored: a core/v1 Event.
pub(crate) fn to_core(mut obj: Value) -> Value {
    rename(&mut obj, RENAMES.iter().copied());
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("kind".into(), json!("Event"));
    }
    obj
}

/// A stored core/v1 Event seen as an events.k8s.io/v1 Event (apiVersion and kind are the caller's).
pub(crate) fn from_core(mut obj: Value) -> Value {
    rename(&mut obj, RENAMES.iter().map(|(v1, core)| (*core, *v1)));
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_views_round_trip() {
        let v1 = json!({"metadata": {"name": "e"}, "regarding": {"name": "web"}, "note": "n",
                        "reportingController": "c", "reason": "R", "series": {"count": 2}});
        let core = to_core(v1.clone());
        assert_eq!(core["involvedObject"]["name"], "web");
        assert_eq!((core["message"].as_str(), core["reportingComponent"].as_str()), (Some("n"), Some("c")));
        assert_eq!(core["series"]["count"], 2);
        let mut back = from_core(core);
        if let Some(m) = back.as_object_mut() {
            m.remove("apiVersion");
            m.remove("kind");
        }
        assert_eq!(back, v1);
    }
}
