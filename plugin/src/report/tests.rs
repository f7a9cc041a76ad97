#![allow(clippy::unwrap_used)]
use serde_json::json;

use super::*;

fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn svc(name: &str, ip: Option<&str>) -> Service {
    let ingress = ip.map(|ip| json!([{"ip": ip}])).unwrap_or(json!([]));
    obj(json!({"metadata": {"name": name, "namespace": "ns",
                             "annotations": {"ferrolb.io/ip-allocated-from-pool": "p"}},
               "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": ingress}}}))
}

fn ann(svc: &str, node: &str, proto: &str, peers: &[&str]) -> ServiceAnnouncement {
    obj(json!({"metadata": {"name": format!("{svc}-{node}"), "namespace": "ns"},
               "spec": {"node": node, "service": {"namespace": "ns", "name": svc}, "protocol": proto,
                        "addresses": ["192.0.2.10"], "peers": peers}}))
}

fn ev(svc: &str, node: &str, reason: &str, rv: u32) -> Event {
    obj(json!({"metadata": {"name": format!("e{rv}"), "namespace": "ns", "resourceVersion": rv.to_string(),
                             "creationTimestamp": "2025-01-01T00:00:00Z"},
               "involvedObject": {"kind": "Service", "namespace": "ns", "name": svc},
               "reason": reason, "message": format!("{reason} by {node}"),
               "reportingComponent": "ferrolb-speaker", "reportingInstance": node}))
}

#[test]
fn status_merges_announcements_of_every_node_and_skips_other_types() {
    let mut cluster_ip = svc("internal", None);
    cluster_ip.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    let snap = Snapshot {
        services: vec![svc("web", Some("192.0.2.10")), cluster_ip],
        announcements: vec![
            ann("web", "n2", "BGP", &["r1"]),
            ann("web", "n1", "BGP", &["r2", "r1"]),
            ann("web", "n1", "L2", &[]),
        ],
        events: vec![
            ev("web", "n1", "Withdrawn", 2),
            ev("web", "n1", "Announced", 3),
            ev("other", "n1", "X", 9),
        ],
        ..Snapshot::default()
    };
    let rows = status(&snap, None);
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(
        (r.protocols.clone(), r.nodes.clone(), r.peers.clone()),
        (
            vec!["BGP".to_owned(), "L2".to_owned()],
            vec!["n1".to_owned(), "n2".to_owned()],
            vec!["r1".to_owned(), "r2".to_owned()]
        )
    );
    assert_eq!(r.pool.as_ref().unwrap().valid, "NotFound", "pool p is not in the snapshot");
    assert_eq!(r.last_reason.as_deref(), Some("Announced: Announced by n1"), "latest by resourceVersion");
}

#[test]
fn explain_lists_only_nodes_whose_latest_event_withdrew() {
    let snap = Snapshot {
        services: vec![svc("web", Some("192.0.2.10"))],
        // n1 withdrew then announced again; n2 announced then withdrew; n3 withdrew but announces now.
        events: vec![
            ev("web", "n1", "Withdrawn", 1),
            ev("web", "n1", "Announced", 2),
            ev("web", "n2", "Announced", 3),
            ev("web", "n2", "Withdrawn", 4),
            ev("web", "n3", "Withdrawn", 5),
        ],
        announcements: vec![ann("web", "n3", "BGP", &["r1"])],
        ..Snapshot::default()
    };
    let e = explain(&snap, "ns", "web").unwrap();
    assert_eq!(e.withdrawn, vec![Withdrawal { node: "n2".into(), reason: "Withdrawn by n2".into() }]);
    assert!(e.announced);
    assert_eq!(e.summary, "announced by 1 node(s): n3 by BGP to r1");
    let mut none = snap.clone();
    none.announcements.clear();
    let e = explain(&none, "ns", "web").unwrap();
    assert!(!e.announced);
    assert!(
        e.summary.starts_with("not announced: IPAddressPool p (from allocated) does not exist"),
        "{}",
        e.summary
    );
    assert!(explain(&snap, "ns", "nope").is_none());
}

#[test]
fn usage_in_tenths_even_for_huge_ipv6_pools() {
    assert_eq!(usage(1, 2), Some("33.3%".into()));
    assert_eq!(usage(i64::MAX, i64::MAX), Some("50.0%".into()));
    assert_eq!(usage(0, 0), None);
}

#[test]
fn peers_without_node_objects_come_from_announcements() {
    let snap = Snapshot {
        announcements: vec![
            ann("a", "n1", "BGP", &["r1"]),
            ann("b", "n1", "BGP", &["r1"]),
            ann("c", "n1", "L2", &[]),
        ],
        ..Snapshot::default()
    };
    let rows = peers(&snap);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].services, rows[0].valid.as_str(), rows[0].addresses.clone()),
        (2, "NotFound", vec!["192.0.2.10".to_owned()])
    );
}
