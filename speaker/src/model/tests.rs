//! Model tests and the YAML fixtures the planner tests share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use ferrolb_api::parse_stream;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Two nodes, one LoadBalancer Service per policy, endpoints, a BGP and an L2 setup.
pub(crate) use ferrolb_lab::fixtures::PLANNER as FIXTURE;

pub(crate) fn fixture_model() -> ClusterModel {
    model_of(FIXTURE)
}

pub(crate) fn model_of(text: &str) -> ClusterModel {
    let s = parse_stream("static.yaml", text).unwrap();
    ClusterModel::from_stream(s, "static.yaml", DEFAULT_LB_CLASS).unwrap()
}

fn key(name: &str) -> ServiceKey {
    ServiceKey { namespace: "default".into(), name: name.into() }
}

#[test]
fn static_stream_fills_every_part_of_the_model() {
    let m = fixture_model();
    assert_eq!(m.nodes.len(), 2);
    let n1 = &m.nodes["node1"];
    assert!(n1.ready && !n1.network_unavailable && !n1.excluded);
    assert_eq!(n1.addresses, vec!["192.0.2.11".parse::<IpAddr>().unwrap()]);
    assert_eq!(n1.labels.get("rack"), Some("a"));
    let web = &m.services[&key("web")];
    assert_eq!(web.ingress.len(), 2);
    assert_eq!(web.traffic_policy, TrafficPolicy::Cluster);
    assert_eq!(m.services[&key("local")].traffic_policy, TrafficPolicy::Local);
    assert!(!m.services.contains_key(&key("other-class")), "another loadBalancerClass is not ours");
    assert_eq!(m.pools.len(), 2);
    assert_eq!(m.peers.len(), 2);
    assert_eq!(m.bgp_advertisements.len(), 1);
    assert_eq!(m.l2_advertisements.len(), 1);
}

#[test]
fn endpoints_are_counted_per_node_and_condition() {
    let m = fixture_model();
    let eps = m.endpoints(&key("local"));
    assert_eq!(eps["node2"], EndpointCounts { ready: 1, serving: 1, terminating: 0, serving_terminating: 0 });
    assert_eq!(eps["node1"], EndpointCounts { ready: 0, serving: 1, terminating: 1, serving_terminating: 1 });
    // A ready endpoint exists, so the terminating one takes no new traffic.
    assert_eq!(m.serving_nodes(&key("local")), BTreeSet::from(["node2".to_string()]));
}

#[test]
fn serving_terminating_endpoints_count_when_none_is_ready() {
    let text = FIXTURE
        .replace("nodeName: node2, conditions: {ready: true}", "nodeName: node2, conditions: {ready: false}");
    let m = model_of(&text);
    assert_eq!(m.serving_nodes(&key("local")), BTreeSet::from(["node1".to_string()]));
}

#[test]
fn exclusion_label_and_network_unavailable_are_seen() {
    let text = FIXTURE
        .replace(
            "labels: {rack: a}}",
            "labels: {rack: a, node.kubernetes.io/exclude-from-external-load-balancers: \"\"}}",
        )
        .replace(
            "{type: NetworkUnavailable, status: \"False\"}",
            "{type: NetworkUnavailable, status: \"True\"}",
        );
    let m = model_of(&text);
    assert!(m.nodes["node1"].excluded);
    assert!(m.nodes["node2"].network_unavailable);
}

#[test]
fn replacing_an_endpoint_slice_replaces_its_counts() {
    let mut m = fixture_model();
    let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "local-abc", "namespace": "default", "labels": {"kubernetes.io/service-name": "local"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.3"], "nodeName": "node1"}]
    }))
    .unwrap();
    m.upsert_endpoint_slice(&slice);
    assert_eq!(m.serving_nodes(&key("local")), BTreeSet::from(["node1".to_string()]));
    m.remove_endpoint_slice("default", "local-abc");
    assert!(m.serving_nodes(&key("local")).is_empty());
}

#[test]
fn invalid_ferrolb_objects_reject_the_whole_file() {
    let bad = FIXTURE.replace("peerAddress: 192.0.2.1}", "peerAddress: 192.0.2.1, holdTime: 2s}");
    let s = parse_stream("static.yaml", &bad).unwrap();
    let e = ClusterModel::from_stream(s, "static.yaml", DEFAULT_LB_CLASS).unwrap_err().to_string();
    assert!(e.contains("BGPPeer/router-a: spec.holdTime"), "{e}");
}

#[test]
fn load_reads_password_files() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    let with_pw = FIXTURE.replace(
        "peerAddress: 192.0.2.1}",
        &format!("peerAddress: 192.0.2.1, passwordFile: {}}}", pw.display()),
    );
    let path = dir.path().join("static.yaml");
    std::fs::write(&path, &with_pw).unwrap();
    let e = static_file::load(&path, DEFAULT_LB_CLASS).unwrap_err().to_string();
    assert!(e.contains("BGPPeer/router-a: spec.passwordFile: cannot read"), "{e}");
    assert!(e.contains("create the file or fix the path"), "{e}");
    std::fs::write(&pw, "s3cret\n").unwrap();
    let l = static_file::load(&path, DEFAULT_LB_CLASS).unwrap();
    assert_eq!(l.passwords["router-a"], ferrolb_proto::bgp::socket::Password::new("s3cret"));
    assert!(!format!("{:?}", l.passwords).contains("s3cret"));
}

#[tokio::test]
async fn directory_watch_sees_in_place_writes_and_renames() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("static.yaml");
    std::fs::write(&path, "a").unwrap();
    let mut rx = static_file::watch(&path).unwrap();
    std::fs::write(&path, "b").unwrap();
    assert_eq!(
        tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv()).await.unwrap(),
        Some(()),
        "in-place write"
    );
    while rx.try_recv().is_ok() {}
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    while rx.try_recv().is_ok() {}
    let tmp = dir.path().join(".static.yaml.tmp");
    std::fs::write(&tmp, "c").unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    while rx.try_recv().is_ok() {}
    std::fs::rename(&tmp, &path).unwrap();
    assert_eq!(
        tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv()).await.unwrap(),
        Some(()),
        "rename over the file"
    );
}

/// A static file read the speaker's way (each Service converted as it is decoded, on
/// several threads past 512 documents) gives the model the upserts give: the last
/// document of a Service wins, even when it is not a LoadBalancer any more.
#[test]
fn parsing_a_file_equals_upserting_its_objects_in_order() {
    let mut text = String::from(FIXTURE);
    for i in 0..700 {
        let extra = if i % 7 == 0 { "\n  selector: {app: web}" } else { "" };
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: bulk-{i}, labels: {{n: \"{i}\"}}}}\nspec:\n  type: LoadBalancer{extra}\nstatus: {{loadBalancer: {{ingress: [{{ip: 198.18.{}.{}}}]}}}}\n",
            i / 256,
            i % 256
        ));
    }
    // Later documents of earlier Services: one moves, one stops being a LoadBalancer.
    text.push_str("---\napiVersion: v1\nkind: Service\nmetadata: {name: bulk-3}\nspec: {type: LoadBalancer}\nstatus: {loadBalancer: {ingress: [{ip: 198.18.9.9}]}}\n");
    text.push_str("---\napiVersion: v1\nkind: Service\nmetadata: {name: bulk-7}\nspec: {type: ClusterIP}\n");
    let (parsed, warnings) = ClusterModel::parse("static.yaml", &text, DEFAULT_LB_CLASS).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    // The reference: every object upserted one by one, in file order.
    let stream = parse_stream("static.yaml", &text).unwrap();
    let mut upserted = ClusterModel::new(DEFAULT_LB_CLASS);
    upserted.set_config(stream.validated_config("static.yaml").unwrap());
    for (_, o) in stream.objects {
        match o {
            Object::Node(n) => upserted.upsert_node(&n),
            Object::Service(s) => upserted.upsert_service(&s),
            Object::EndpointSlice(e) => upserted.upsert_endpoint_slice(&e),
            _ => {}
        }
    }
    assert_eq!(parsed.services, upserted.services);
    assert_eq!(parsed.service_selectors, upserted.service_selectors);
    assert_eq!(parsed.nodes, upserted.nodes);
    assert_eq!(parsed.endpoint_slices, upserted.endpoint_slices);
    assert_eq!(parsed.services[&key("bulk-3")].ingress, vec!["198.18.9.9".parse::<IpAddr>().unwrap()]);
    assert!(!parsed.services.contains_key(&key("bulk-7")));
    assert!(!parsed.service_selectors.contains_key(&key("bulk-7")), "its selector went with it");
    assert!(parsed.service_selectors.contains_key(&key("bulk-14")));
    // Every Service of the fixture and 699 of the bulk ones.
    assert_eq!(parsed.services.len(), model_of(FIXTURE).services.len() + 699);
}

/// Nodes' label strings are held once however many Nodes carry them, and those only gone
/// Nodes held are let go.
#[test]
fn nodes_share_their_label_strings_and_gone_ones_are_let_go() {
    let mut strings = LabelStrings::default();
    let node = |i: usize| -> BTreeMap<String, String> {
        [
            ("kubernetes.io/hostname", format!("n{i}")),
            ("kubernetes.io/os", "linux".into()),
            ("rack", "a".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    };
    let a = strings.labels(&node(1));
    let b = strings.labels(&node(2));
    assert_eq!(
        (a.get("kubernetes.io/hostname"), b.get("rack"), a.get("zone")),
        (Some("n1"), Some("a"), None)
    );
    assert!(a.contains_key("kubernetes.io/os") && !a.contains_key("kubernetes.io"));
    assert!(ferrolb_api::Labels::label(&b, "kubernetes.io/hostname") == Some("n2"));
    let shared =
        |l: &NodeLabels| l.0.iter().map(|(k, v)| (Arc::as_ptr(k), Arc::as_ptr(v))).collect::<Vec<_>>();
    let (sa, sb) = (shared(&a), shared(&b));
    assert_eq!((sa[1], sa[2]), (sb[1], sb[2]), "the same key and value strings");
    assert_ne!(sa[0].1, sb[0].1, "each Node's own name");
    // Thousands of Nodes come and go: what only they held does not stay.
    for i in 3..5_000 {
        drop(strings.labels(&node(i)));
    }
    assert!(strings.held.len() < 2_100, "{} strings held", strings.held.len());
    assert_eq!(a.get("kubernetes.io/hostname"), Some("n1"), "what live Nodes hold stays");
}
