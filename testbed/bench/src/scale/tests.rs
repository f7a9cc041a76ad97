//! The bench's parsers and counting (no lab).

use std::time::Duration;

use ferrolb_cluster::load::Call;

use super::requests::Requests;

/// An audit event of ServiceAccount `sa` of ferrolb-system, its token bound to `node`.
fn line(sa: &str, node: Option<&str>, verb: &str, resource: &str, uri: &str) -> String {
    let extra = node
        .map(|n| format!(r#","extra":{{"authentication.kubernetes.io/node-name":["{n}"]}}"#))
        .unwrap_or_default();
    let stage = if verb == "watch" { "ResponseStarted" } else { "ResponseComplete" };
    let object = match resource.split_once('/') {
        Some((res, sub)) => format!(r#"{{"resource":"{res}","subresource":"{sub}"}}"#),
        None => format!(r#"{{"resource":"{resource}"}}"#),
    };
    format!(
        r#"{{"stage":"{stage}","requestURI":"{uri}","verb":"{verb}","user":{{"username":"system:serviceaccount:ferrolb-system:{sa}"{extra}}},"objectRef":{object},"responseStatus":{{"code":200}},"requestReceivedTimestamp":"2026-11-26T01:00:00.000001Z"}}"#
    )
}

#[test]
fn requests_are_counted_per_component_and_kind() {
    let calls: Vec<Call> = [
        line("ferrolb-speaker", Some("node1"), "list", "nodes", "/api/v1/nodes?limit=500"),
        line("ferrolb-speaker", Some("node1"), "list", "nodes", "/api/v1/nodes?limit=500&continue=x"),
        line("ferrolb-speaker", Some("node2"), "list", "nodes", "/api/v1/nodes?limit=500"),
        line("ferrolb-speaker", Some("node2"), "watch", "nodes", "/api/v1/nodes?watch=true"),
        line("ferrolb-speaker", Some("node2"), "patch", "serviceannouncements", "/apis/x"),
        line("ferrolb-controller", None, "get", "leases", "/apis/l"),
        line("ferrolb-controller", None, "update", "leases", "/apis/l"),
        line("ferrolb-controller", None, "patch", "services/status", "/api/v1/s"),
    ]
    .iter()
    .map(|l| Call::parse(l).unwrap())
    .collect();
    let r = Requests { window: Duration::from_secs(2), calls };
    let lists = r.lists();
    assert_eq!(lists.get(&("speaker node1".into(), "nodes".into())), Some(&1), "{lists:?}");
    assert_eq!(lists.get(&("speaker node2".into(), "nodes".into())), Some(&1));
    assert_eq!(r.later_pages().values().sum::<usize>(), 1);
    assert_eq!(r.watches().get(&("speaker node2".into(), "nodes".into())), Some(&1));
    assert_eq!(r.lease_renewals(), 2);
    let busy: Vec<(String, String, String)> = r.busy().into_keys().collect();
    assert_eq!(
        busy,
        [
            ("controller".to_string(), "patch".to_string(), "services/status".to_string()),
            ("speaker node1".into(), "list".into(), "nodes".into()),
            ("speaker node2".into(), "list".into(), "nodes".into()),
            ("speaker node2".into(), "patch".into(), "serviceannouncements".into()),
        ]
    );
    assert!((r.rate(4) - 2.0).abs() < 1e-9);
}
