//! The apiservers' audit logs read back: who asked for what, and what the apiserver
//! decided. Tests check least privilege and who talked to which apiserver with it; the
//! whole-path bench times requests with it.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;

/// One audit event (one stage of one request).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// `user.username`.
    pub user: String,
    /// `userAgent`.
    pub user_agent: String,
    /// `stage`: RequestReceived, ResponseComplete, …
    pub stage: String,
    /// `verb`: get, list, watch, create, patch, …
    pub verb: String,
    /// `requestURI`.
    pub uri: String,
    /// Whether the request named an object (`objectRef`): false for `/readyz` and the like.
    pub object: bool,
    /// The object's API group ("" for core).
    pub group: String,
    /// `resource`, or `resource/subresource`.
    pub resource: String,
    /// The object's name, if the request named one.
    pub name: String,
    /// `authorization.k8s.io/decision`: `allow` or `forbid`.
    pub decision: String,
    /// `responseStatus.code`, once there is a response.
    pub code: Option<u16>,
    /// `requestReceivedTimestamp`, Unix microseconds.
    pub received_us: Option<i64>,
    /// `stageTimestamp`, Unix microseconds.
    pub stage_us: Option<i64>,
    /// The node the user's token is bound to (user extra [`NODE_NAME_EXTRA`]), if any:
    /// speakers sharing one ServiceAccount are told apart by it.
    pub node: Option<String>,
}

/// The user extra a token bound to a Node (or to a pod on it) carries: the node's name.
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

impl Request {
    /// One line of an audit log; None if it is not an audit event.
    pub fn parse(line: &str) -> Option<Request> {
        let e: Value = serde_json::from_str(line).ok()?;
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let o = &e["objectRef"];
        let resource = match o["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", s(&o["resource"])),
            None => s(&o["resource"]),
        };
        Some(Request {
            user: s(&e["user"]["username"]),
            user_agent: s(&e["userAgent"]),
            stage: s(&e["stage"]),
            verb: s(&e["verb"]),
            uri: s(&e["requestURI"]),
            object: o.is_object(),
            group: s(&o["apiGroup"]),
            resource,
            name: s(&o["name"]),
            decision: s(&e["annotations"]["authorization.k8s.io/decision"]),
            code: e["responseStatus"]["code"].as_u64().and_then(|c| u16::try_from(c).ok()),
            received_us: e["requestReceivedTimestamp"].as_str().and_then(rfc3339_us),
            stage_us: e["stageTimestamp"].as_str().and_then(rfc3339_us),
            node: e["user"]["extra"][NODE_NAME_EXTRA][0].as_str().map(str::to_owned),
        })
    }
}

/// Every event of an audit log's text.
pub fn parse(text: &str) -> Vec<Request> {
    text.lines().filter_map(Request::parse).collect()
}

/// The events of the audit log at `path` from byte `offset` on (tens of MB with
/// thousands of Services: read only the tail), only those of `user` if given. A missing
/// log holds no event.
pub fn read(path: &Path, offset: u64, user: Option<&str>) -> Vec<Request> {
    let text = tail(path, offset);
    // Parsing JSON is the cost: skip lines that cannot be the user's.
    let quoted = user.map(|u| format!("\"{u}\""));
    text.lines()
        .filter(|l| quoted.as_deref().is_none_or(|q| l.contains(q)))
        .filter_map(Request::parse)
        .filter(|r| user.is_none_or(|u| r.user == u))
        .collect()
}

/// The text of the log at `path` from byte `offset` on; a missing log holds none.
pub fn tail(path: &Path, offset: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let _ = f.seek(SeekFrom::Start(offset)).and_then(|_| f.read_to_end(&mut bytes));
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// An RFC 3339 timestamp as Unix microseconds.
pub fn rfc3339_us(s: &str) -> Option<i64> {
    let t: k8s_openapi::jiff::Timestamp = s.parse().ok()?;
    Some(t.as_microsecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"kind":"Event","level":"Metadata","stage":"ResponseComplete","requestURI":"/apis/ferrolb.io/v1alpha1/ipaddresspools/lan/status","verb":"patch","user":{"username":"system:serviceaccount:ferrolb-system:ferrolb-controller"},"userAgent":"ferrolb-controller","objectRef":{"resource":"ipaddresspools","name":"lan","apiGroup":"ferrolb.io","subresource":"status"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-26T01:00:00.000001Z","stageTimestamp":"2026-11-26T01:00:00.003000Z","annotations":{"authorization.k8s.io/decision":"allow"}}"#;

    #[test]
    fn reads_every_field_an_audit_event_has() {
        let r = Request::parse(LINE).unwrap();
        assert_eq!(r.user, "system:serviceaccount:ferrolb-system:ferrolb-controller");
        assert_eq!(
            (r.verb.as_str(), r.group.as_str(), r.resource.as_str()),
            ("patch", "ferrolb.io", "ipaddresspools/status")
        );
        assert_eq!((r.name.as_str(), r.decision.as_str(), r.code), ("lan", "allow", Some(200)));
        assert!(r.object);
        assert_eq!(r.stage_us.unwrap() - r.received_us.unwrap(), 2_999);
        let probe = Request::parse(r#"{"stage":"ResponseComplete","requestURI":"/readyz","verb":"get","user":{"username":"system:anonymous"}}"#).unwrap();
        assert!(!probe.object && probe.code.is_none() && probe.resource.is_empty());
        assert_eq!(Request::parse("not json"), None);
    }

    #[test]
    fn reads_the_tail_of_one_users_events() {
        let dir = std::env::temp_dir().join(format!("ferrolb-audit-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let other = LINE.replace("ferrolb-controller\"}", "ferrolb-speaker\"}");
        std::fs::write(&path, format!("{LINE}\n{other}\n{LINE}\n")).unwrap();
        assert_eq!(read(&path, 0, None).len(), 3);
        let user = "system:serviceaccount:ferrolb-system:ferrolb-controller";
        assert_eq!(read(&path, 0, Some(user)).len(), 2);
        assert_eq!(read(&path, (LINE.len() + 1) as u64, Some(user)).len(), 1);
        assert!(read(&dir.join("missing"), 0, None).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
