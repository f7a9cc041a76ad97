//! The bench's parsers and counting (no lab).

use std::time::Duration;

use ferrolb_cluster::load::Call;

use super::requests::Requests;
use super::workload::{self, v4_range};
use super::{Settings, Size};

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

/// Node status writes (heartbeats) do not keep the bench from rest; the TTL controller's
/// annotations of new Nodes, and reads, are not heartbeats.
#[test]
fn only_writes_of_a_nodes_status_are_heartbeats() {
    let call = |verb: &str, resource: &str| {
        Call::parse(&line("x", None, verb, resource, "/api/v1/nodes/n")).unwrap()
    };
    assert!(super::requests::is_heartbeat(&call("patch", "nodes/status")));
    assert!(super::requests::writes_watched(&call("patch", "nodes/status")), "still counted as a write");
    assert!(!super::requests::is_heartbeat(&call("patch", "nodes")));
    assert!(!super::requests::is_heartbeat(&call("get", "nodes/status")));
    assert!(!super::requests::is_heartbeat(&call("patch", "services/status")));
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

#[test]
fn the_address_plan_holds_fifty_thousand_services_without_overlaps() {
    // `--late`'s default (100 timed Services) and the one of the change.
    let timed = 100 + 1;
    assert!(workload::most_services() >= 50_000 + timed, "{}", workload::most_services());
    // Every range the bench's lab hands out, all in the benchmarking range.
    let (bulk, bulk_len) = v4_range(ferrolb_lab::addressing::BULK_V4);
    let mut ranges: Vec<(&str, u32, u64)> =
        workload::ranges().map(|c| (c, v4_range(c).0, v4_range(c).1)).collect();
    for c in [
        ferrolb_cluster::kwok::FAKE_POD_V4,
        ferrolb_cluster::kwok::FAKE_NODE_V4,
        ferrolb_lab::addressing::POD_V4,
    ]
    .into_iter()
    .chain(ferrolb_cluster::SERVICE_CIDRS.split(',').filter(|c| !c.contains(':')))
    {
        ranges.push((c, v4_range(c).0, v4_range(c).1));
    }
    ranges.sort_by_key(|r| r.1);
    for (c, first, len) in &ranges {
        assert!(
            *first >= bulk && u64::from(*first) + len <= u64::from(bulk) + bulk_len,
            "{c} is outside 198.18.0.0/15"
        );
    }
    for w in ranges.windows(2) {
        assert!(u64::from(w[0].1) + w[0].2 <= u64::from(w[1].1), "{} and {} overlap", w[0].0, w[1].0);
    }
}

#[test]
fn fifty_thousand_services_spread_over_namespaces_within_the_upstream_threshold() {
    let names: Vec<String> = (1..=50_000).map(workload::service_name).collect();
    let mut per_namespace: std::collections::BTreeMap<String, usize> = Default::default();
    for n in names.iter().map(String::as_str).chain(["late-00001", "change-00001"]) {
        *per_namespace.entry(workload::namespace_of(n)).or_default() += 1;
    }
    let made: Vec<String> = workload::namespaces(50_000).collect();
    assert_eq!(per_namespace.keys().cloned().collect::<Vec<_>>(), made, "a Service in a namespace not made");
    assert_eq!(made.len(), 51);
    // Kubernetes' scalability threshold: 5 000 Services a namespace.
    assert!(per_namespace.values().all(|&n| n <= 1_000), "{per_namespace:?}");
    assert!(made.iter().all(|ns| workload::is_benchs(Some(ns))));
    for other in ["default", "kube-system", "ferrolb-system", "scaled", "scale_1"] {
        assert!(!workload::is_benchs(Some(other)), "{other}");
    }
    assert!(!workload::is_benchs(None));
}

/// `--l2` adds an L2Advertisement of a pool no Service can take (no auto-assignment), in
/// the lab's LAN below its L2 pool; without it there is none, so speakers watch their own
/// Node only.
#[test]
fn the_l2_variant_adds_an_advertisement_of_a_pool_no_service_takes() {
    let objects = |l2| -> Vec<serde_json::Value> {
        workload::configuration(10, l2)
            .split("\n---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_saphyr::from_str(d).expect("a YAML object"))
            .collect()
    };
    let kinds = |objs: &[serde_json::Value], kind: &str| -> Vec<serde_json::Value> {
        objs.iter().filter(|o| o["kind"] == kind).cloned().collect()
    };
    assert!(kinds(&objects(false), "L2Advertisement").is_empty());
    let with = objects(true);
    let [adv] = kinds(&with, "L2Advertisement").try_into().expect("one L2Advertisement");
    let pool_name = adv["spec"]["ipAddressPools"][0].as_str().expect("a pool named").to_owned();
    let pools = kinds(&with, "IPAddressPool");
    let pool = pools.iter().find(|p| p["metadata"]["name"] == pool_name.as_str()).expect("its pool");
    assert_eq!(pool["spec"]["autoAssign"], false, "{pool}");
    let others: Vec<&serde_json::Value> =
        pools.iter().filter(|p| p["metadata"]["name"] != pool_name.as_str()).collect();
    assert!(others.iter().all(|p| p["spec"]["autoAssign"].is_null()), "the Services' pool auto-assigns");
    let cidr = pool["spec"]["addresses"][0].as_str().expect("a CIDR");
    let (first, len) = v4_range(cidr);
    let (lan, lan_len) = v4_range(ferrolb_lab::addressing::LAN_V4);
    let l2_first: std::net::Ipv4Addr = ferrolb_lab::addressing::L2_POOL_V4.0.parse().unwrap();
    assert!(first >= lan && u64::from(first) + len <= u64::from(lan) + lan_len, "{cidr} is outside the LAN");
    assert!(u64::from(first) + len <= u64::from(u32::from(l2_first)), "{cidr} overlaps the lab's L2 pool");
}

#[test]
fn a_size_the_addresses_cannot_hold_is_refused_before_any_lab() {
    let size = Size { nodes: 1, services: workload::most_services(), l2: false };
    let e = super::measure(size, &Settings::default()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("need more addresses than the bench's pool and ClusterIP ranges hold"), "{e}");
}

/// An audit event of `user` on Service `name`, received at `received` µs past a second
/// and answered at `staged`.
fn service_line(user: &str, verb: &str, sub: Option<&str>, name: &str, received: u32, staged: u32) -> String {
    let sub = sub.map(|s| format!(r#","subresource":"{s}""#)).unwrap_or_default();
    format!(
        r#"{{"stage":"ResponseComplete","requestURI":"/api/v1/namespaces/scale/services/{name}","verb":"{verb}","user":{{"username":"{user}"}},"objectRef":{{"resource":"services","name":"{name}"{sub}}},"responseStatus":{{"code":200}},"requestReceivedTimestamp":"2026-11-26T01:00:01.{received:06}Z","stageTimestamp":"2026-11-26T01:00:01.{staged:06}Z"}}"#
    )
}

#[test]
fn a_timed_route_is_split_only_when_the_log_has_its_create_and_status_write() {
    let controller = "system:serviceaccount:ferrolb-system:ferrolb-controller";
    let admin = "kubernetes-admin";
    let calls: Vec<Call> = [
        service_line(admin, "create", None, "late-00001", 1_000, 4_000),
        service_line(controller, "patch", Some("status"), "late-00001", 6_000, 7_000),
        // The second Service's status write is not logged yet.
        service_line(admin, "create", None, "late-00002", 20_000, 22_000),
    ]
    .iter()
    .map(|l| Call::parse(l).unwrap())
    .collect();
    let t0 = 1_795_654_801_000_000; // 2026-11-26T01:00:01Z, µs
    let created = [("late-00001".to_string(), t0), ("late-00002".to_string(), t0 + 19_000)];
    let routes = [Duration::from_millis(12), Duration::from_millis(30)];
    let stages = super::routes::split(&calls, controller, &created, &routes);
    assert_eq!(stages.len(), 1, "only the Service with both lines");
    let s = &stages[0];
    assert_eq!(s.create, Duration::from_millis(4));
    assert_eq!(s.controller, Duration::from_millis(2));
    assert_eq!(s.status_write, Duration::from_millis(1));
    assert_eq!(s.speaker, Duration::from_millis(5), "12 ms route, answered 7 ms after the create");
}
