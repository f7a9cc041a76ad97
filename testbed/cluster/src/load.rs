//! The load API clients put on the apiserver, counted from its audit log ([`super::audit`]):
//! every request some users made within a window of time, each counted once. A speaker's
//! token is bound to its Node, so the apiserver names that node in the request's user
//! ([`Request::node`]): speakers sharing one ServiceAccount are told apart.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use super::Cluster;
use super::audit::{self, Request};

/// One request, as counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The audit event it is counted at (its `node`: the node the token is bound to).
    pub request: Request,
}

impl Call {
    /// Whether `r` is the one event its request is counted at: a watch when it starts
    /// streaming (or when it fails before that), anything else when it completes. With
    /// `omitStages: [RequestReceived]` (the testbed's audit policy) a request has one such
    /// event; a watch has a second one when it ends, not counted.
    pub fn counted_at(r: &Request) -> bool {
        match (r.verb.as_str(), r.stage.as_str()) {
            ("watch", "ResponseStarted") => true,
            ("watch", "ResponseComplete") => r.code.is_some_and(|c| c != 200),
            (_, stage) => stage == "ResponseComplete" || stage == "Panic",
        }
    }

    /// A later page of a list (`continue=` in the URI): part of a list already counted.
    pub fn is_later_page(&self) -> bool {
        self.request.verb == "list" && self.request.uri.contains("continue=")
    }

    /// Whether the request writes (create, update, patch, delete).
    pub fn is_write(&self) -> bool {
        matches!(self.request.verb.as_str(), "create" | "update" | "patch" | "delete" | "deletecollection")
    }

    /// One audit log line, if it is an event `Call::counted_at` counts.
    pub fn parse(line: &str) -> Option<Call> {
        let request = Request::parse(line)?;
        if !Call::counted_at(&request) {
            return None;
        }
        Some(Call { request })
    }
}

/// A stretch of every apiserver's audit log, from when it was opened on.
#[derive(Debug, Clone)]
pub struct Window {
    /// Each apiserver's audit log, its length when the window opened and its inode (none
    /// while it did not exist yet).
    logs: Vec<(PathBuf, u64, Option<u64>)>,
    from_us: i64,
}

impl Window {
    /// Opens a window now.
    pub fn open(cluster: &Cluster) -> Window {
        let logs = (1..=cluster.control_planes)
            .map(|i| {
                let path = cluster.paths.audit_log(i);
                let (len, file) = std::fs::metadata(&path).map_or((0, None), |m| (m.len(), Some(m.ino())));
                (path, len, file)
            })
            .collect();
        Window { logs, from_us: now_us() }
    }

    /// When the window opened, Unix microseconds.
    pub fn from_us(&self) -> i64 {
        self.from_us
    }

    /// The requests of `users` (no user given: everyone's) received since the window
    /// opened and before `until_us`, each once (see [`Call::counted_at`]), in log order
    /// per apiserver. A request still running (or not yet logged) is missing: read once
    /// the log has moved past `until_us`.
    pub fn calls(&self, users: &[&str], until_us: i64) -> Vec<Call> {
        let quoted: Vec<String> = users.iter().map(|u| format!("\"{u}\"")).collect();
        let anyone = users.is_empty();
        self.logs
            .iter()
            .map(|(path, offset, file)| {
                // A rotated log (`--audit-log-maxsize`) would hide the window's requests and
                // count none: fail instead.
                if let (Some(file), Ok(now)) = (file, std::fs::metadata(path)) {
                    assert!(
                        now.ino() == *file && now.len() >= *offset,
                        "the audit log {} was rotated or truncated since the window opened",
                        path.display()
                    );
                }
                audit::tail(path, *offset)
            })
            .flat_map(|text| {
                text.lines()
                    // Parsing JSON is the cost: skip lines that cannot be the users'.
                    .filter(|l| anyone || quoted.iter().any(|q| l.contains(q.as_str())))
                    .filter_map(Call::parse)
                    .collect::<Vec<_>>()
            })
            .filter(|c| anyone || users.contains(&c.request.user.as_str()))
            .filter(|c| c.request.received_us.is_some_and(|t| t >= self.from_us && t < until_us))
            .collect()
    }
}

/// Now, Unix microseconds.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"{"kind":"Event","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/nodes?limit=500\u0026continue=abc","verb":"list","user":{"username":"system:serviceaccount:ferrolb-system:ferrolb-speaker","extra":{"authentication.kubernetes.io/node-name":["node2"]}},"objectRef":{"resource":"nodes","apiVersion":"v1"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-26T01:00:00.000001Z","stageTimestamp":"2026-11-26T01:00:00.003000Z"}"#;

    #[test]
    fn a_call_names_its_node_and_later_pages() {
        let c = Call::parse(LIST).unwrap();
        assert_eq!(c.request.node.as_deref(), Some("node2"));
        assert_eq!((c.request.verb.as_str(), c.request.resource.as_str()), ("list", "nodes"));
        assert!(c.is_later_page() && !c.is_write());
        let first = LIST.replace(r"\u0026continue=abc", "");
        assert!(!Call::parse(&first).unwrap().is_later_page());
        let unbound = LIST.replace(r#","extra":{"authentication.kubernetes.io/node-name":["node2"]}"#, "");
        assert_eq!(Call::parse(&unbound).unwrap().request.node, None);
    }

    #[test]
    fn each_request_is_counted_once() {
        let watch = |stage: &str, code: u16| {
            LIST.replace("\"list\"", "\"watch\"")
                .replace("ResponseComplete", stage)
                .replace("{\"code\":200}", &format!("{{\"code\":{code}}}"))
        };
        assert!(Call::parse(&watch("ResponseStarted", 200)).is_some());
        assert!(Call::parse(&watch("ResponseComplete", 200)).is_none(), "the end of a counted watch");
        assert!(Call::parse(&watch("ResponseComplete", 403)).is_some(), "a watch refused at once");
        assert!(Call::parse(&LIST.replace("ResponseComplete", "ResponseStarted")).is_none());
        assert!(Call::parse(&LIST.replace("ResponseComplete", "Panic")).is_some());
    }

    /// A window over a scratch log holding `before`, opened as [`Window::open`] opens one.
    fn window_over(dir: &std::path::Path, before: &str) -> (PathBuf, Window) {
        let path = dir.join("audit.log");
        std::fs::write(&path, before).unwrap();
        let m = std::fs::metadata(&path).unwrap();
        (path.clone(), Window { logs: vec![(path, m.len(), Some(m.ino()))], from_us: 0 })
    }

    #[test]
    fn a_window_reads_what_the_log_gained_and_refuses_a_rotated_log() {
        let dir = std::env::temp_dir().join(format!("ferrolb-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (path, window) = window_over(&dir, &format!("{LIST}\n"));
        let first = LIST.replace(r"\u0026continue=abc", "");
        std::fs::write(&path, format!("{LIST}\n{first}\n")).unwrap();
        let calls = window.calls(&[], i64::MAX);
        assert_eq!(calls.len(), 1, "only the line written after the window opened");
        assert!(!calls[0].is_later_page());

        // Rotated as kube-apiserver rotates it: renamed, and a new file in its place.
        std::fs::rename(&path, dir.join("audit-old.log")).unwrap();
        std::fs::write(&path, format!("{first}\n")).unwrap();
        let rotated = std::panic::catch_unwind(|| window.calls(&[], i64::MAX));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(rotated.is_err(), "a rotated log must not read as a window with no request");
    }
}
