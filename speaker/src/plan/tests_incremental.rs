//! The incremental planner against planning from scratch.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use ferrolb_api::{ValidConfig, parse_stream};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, NodeCondition, NodeSpec, NodeStatus, Service, ServiceSpec,
    ServiceStatus,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;

use super::*;
use crate::model::{DEFAULT_LB_CLASS, EXCLUDE_LABEL, SERVICE_NAME_LABEL};

const NODES: usize = 4;
const ME: &str = "n0";
/// Addresses Services pick from: shared ones, both families, one in no pool.
const IPS: [&str; 10] = [
    "192.0.2.200",
    "192.0.2.201",
    "192.0.2.202",
    "192.0.2.203",
    "203.0.113.10",
    "203.0.113.11",
    "203.0.113.77",
    "2001:db8:3::10",
    "2001:db8:3::11",
    "198.51.100.7",
];

const POOLS: &str = r#"
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: public, labels: {kind: public}}
spec: {addresses: [203.0.113.0/24, "2001:db8:3::/120"]}
---
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: lan}
spec: {addresses: [192.0.2.200-192.0.2.250]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-a}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, addressFamilies: [ipv4-unicast, ipv6-unicast]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-ibgp}
spec: {myASN: 64512, peerASN: 64512, peerAddress: 192.0.2.2, nodeSelectors: [{matchLabels: {rack: a}}]}
"#;

/// Three configurations: plain, aggregated with selectors, and L2 on two advertisements.
fn configs() -> Vec<ValidConfig> {
    let extra = [
        "---\napiVersion: ferrolb.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: public}\nspec: {ipAddressPools: [public], localPref: 150, communities: [\"64512:100\"]}\n---\napiVersion: ferrolb.io/v1alpha1\nkind: L2Advertisement\nmetadata: {name: lan}\nspec: {ipAddressPools: [lan], interfaces: [eth0]}\n",
        "---\napiVersion: ferrolb.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: agg}\nspec: {ipAddressPoolSelectors: [{matchLabels: {kind: public}}], aggregationLength: 24, aggregationLengthV6: 120, serviceSelectors: [{matchLabels: {app: a}}]}\n---\napiVersion: ferrolb.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: hosts}\nspec: {ipAddressPools: [public], peers: [router-ibgp], localPref: 90}\n",
        "---\napiVersion: ferrolb.io/v1alpha1\nkind: L2Advertisement\nmetadata: {name: lan}\nspec: {ipAddressPools: [lan], interfaces: [eth0]}\n---\napiVersion: ferrolb.io/v1alpha1\nkind: L2Advertisement\nmetadata: {name: all}\nspec: {serviceSelectors: [{matchLabels: {app: a}}], nodeSelectors: [{matchLabels: {rack: a}}]}\n---\napiVersion: ferrolb.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: public}\nspec: {ipAddressPools: [public], nodeSelectors: [{matchLabels: {rack: b}}]}\n",
    ];
    extra
        .iter()
        .map(|e| {
            let text = format!("{POOLS}{e}");
            parse_stream("c.yaml", &text).unwrap().validated_config("c.yaml").unwrap()
        })
        .collect()
}

fn meta(name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some("default".into()),
        labels: Some(labels),
        ..Default::default()
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Service {
        svc: usize,
        ips: Vec<usize>,
        local: bool,
        app_a: bool,
        lb: bool,
    },
    RemoveService(usize),
    /// Endpoints as (node, condition): 0 ready, 1 serving and terminating, 2 terminating, 3 not ready.
    /// Service 4 stands for no `kubernetes.io/service-name` label.
    Slice {
        slice: usize,
        svc: usize,
        eps: Vec<(usize, u8)>,
    },
    RemoveSlice(usize),
    Node {
        node: usize,
        ready: bool,
        excluded: bool,
        cordoned: bool,
        rack_a: bool,
    },
    RemoveNode(usize),
    Config(usize),
    Live(Vec<bool>),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (0..4usize, prop::collection::vec(0..IPS.len(), 0..3), any::<bool>(), any::<bool>(), prop::bool::weighted(0.9))
            .prop_map(|(svc, ips, local, app_a, lb)| Edit::Service { svc, ips, local, app_a, lb }),
        1 => (0..4usize).prop_map(Edit::RemoveService),
        6 => (0..6usize, 0..5usize, prop::collection::vec((0..NODES, 0..4u8), 0..4))
            .prop_map(|(slice, svc, eps)| Edit::Slice { slice, svc, eps }),
        1 => (0..8usize).prop_map(Edit::RemoveSlice),
        2 => (0..NODES, prop::bool::weighted(0.8), prop::bool::weighted(0.1), prop::bool::weighted(0.1), any::<bool>())
            .prop_map(|(node, ready, excluded, cordoned, rack_a)| Edit::Node { node, ready, excluded, cordoned, rack_a }),
        1 => (0..NODES).prop_map(Edit::RemoveNode),
        1 => (0..3usize).prop_map(Edit::Config),
        1 => prop::collection::vec(prop::bool::weighted(0.8), NODES).prop_map(Edit::Live),
    ]
}

fn apply(m: &mut ClusterModel, live: &mut BTreeSet<String>, configs: &[ValidConfig], e: &Edit) {
    match e {
        Edit::Service { svc, ips, local, app_a, lb } => {
            let labels = BTreeMap::from([("app".to_string(), if *app_a { "a" } else { "b" }.to_string())]);
            let ingress =
                ips.iter().map(|i| LoadBalancerIngress { ip: Some(IPS[*i].into()), ..Default::default() });
            m.upsert_service(&Service {
                metadata: meta(format!("svc{svc}"), labels),
                spec: Some(ServiceSpec {
                    type_: Some(if *lb { "LoadBalancer" } else { "ClusterIP" }.into()),
                    external_traffic_policy: Some(if *local { "Local" } else { "Cluster" }.into()),
                    ..Default::default()
                }),
                status: Some(ServiceStatus {
                    load_balancer: Some(LoadBalancerStatus { ingress: Some(ingress.collect()) }),
                    ..Default::default()
                }),
            });
        }
        Edit::RemoveService(svc) => {
            m.remove_service(&ServiceKey { namespace: "default".into(), name: format!("svc{svc}").into() })
        }
        Edit::Slice { slice, svc, eps } => {
            let endpoints = eps
                .iter()
                .map(|(node, cond)| {
                    let (ready, serving, terminating) = match cond {
                        0 => (true, true, false),
                        1 => (false, true, true),
                        2 => (false, false, true),
                        _ => (false, false, false),
                    };
                    Endpoint {
                        addresses: vec!["10.0.0.1".into()],
                        node_name: Some(format!("n{node}")),
                        conditions: Some(EndpointConditions {
                            ready: Some(ready),
                            serving: Some(serving),
                            terminating: Some(terminating),
                        }),
                        ..Default::default()
                    }
                })
                .collect();
            let mut labels = BTreeMap::from([(SERVICE_NAME_LABEL.to_string(), format!("svc{svc}"))]);
            if *svc == 4 {
                labels.clear();
            }
            m.upsert_endpoint_slice(&EndpointSlice {
                metadata: meta(format!("slice{slice}"), labels),
                address_type: "IPv4".into(),
                endpoints,
                ports: None,
            });
        }
        Edit::RemoveSlice(slice) => m.remove_endpoint_slice("default", &format!("slice{slice}")),
        Edit::Node { node, ready, excluded, cordoned, rack_a } => {
            let mut labels =
                BTreeMap::from([("rack".to_string(), if *rack_a { "a" } else { "b" }.to_string())]);
            if *excluded {
                labels.insert(EXCLUDE_LABEL.into(), String::new());
            }
            m.upsert_node(&Node {
                metadata: ObjectMeta {
                    name: Some(format!("n{node}")),
                    labels: Some(labels),
                    ..Default::default()
                },
                spec: Some(NodeSpec { unschedulable: Some(*cordoned), ..Default::default() }),
                status: Some(NodeStatus {
                    conditions: Some(vec![NodeCondition {
                        type_: "Ready".into(),
                        status: if *ready { "True" } else { "False" }.into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            });
        }
        Edit::RemoveNode(node) => m.remove_node(&format!("n{node}")),
        Edit::Config(c) => m.set_config(configs[*c].clone()),
        Edit::Live(l) => {
            *live = (0..NODES).filter(|i| l[*i]).map(|i| format!("n{i}")).collect();
        }
    }
}

/// A model with every node Ready and live, configuration 0, and no Services.
fn start(configs: &[ValidConfig]) -> (ClusterModel, BTreeSet<String>) {
    let mut m = ClusterModel::new(DEFAULT_LB_CLASS);
    let mut live = BTreeSet::new();
    m.set_config(configs[0].clone());
    for node in 0..NODES {
        let e = Edit::Node { node, ready: true, excluded: false, cordoned: false, rack_a: node % 2 == 0 };
        apply(&mut m, &mut live, configs, &e);
    }
    apply(&mut m, &mut live, configs, &Edit::Live(vec![true; NODES]));
    (m, live)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    /// After any sequence of model edits, the incremental plan equals the plan from scratch.
    #[test]
    fn incremental_plan_equals_plan_from_scratch(edits in prop::collection::vec(edit(), 1..40)) {
        let configs = configs();
        let (mut m, mut live) = start(&configs);
        let mut planner = Planner::new();
        planner.plan(&mut m, ME, &live);
        // The same edits reaching a second model as whole new models (a re-read static file).
        let mut replaced = m.clone();
        let mut replaced_planner = Planner::new();
        replaced_planner.plan(&mut replaced, ME, &live);
        for (i, e) in edits.iter().enumerate() {
            apply(&mut m, &mut live, &configs, e);
            let incremental = planner.plan(&mut m, ME, &live).clone();
            let scratch = plan(&m, ME, &live);
            prop_assert_eq!(&incremental, &scratch, "after edit {} {:?}", i, e);
            let mut fresh = m.clone();
            fresh.mark_all_changed();
            replaced.replace_with(fresh);
            prop_assert_eq!(replaced_planner.plan(&mut replaced, ME, &live), &scratch, "replaced, after edit {} {:?}", i, e);
        }
    }
}

#[test]
fn a_change_recomputes_only_the_services_it_touches() {
    let configs = configs();
    let (mut m, mut live) = start(&configs);
    for svc in 0..6 {
        let e = Edit::Service { svc, ips: vec![svc % IPS.len()], local: true, app_a: true, lb: true };
        apply(&mut m, &mut live, &configs, &e);
    }
    let mut planner = Planner::new();
    planner.plan(&mut m, ME, &live);
    assert_eq!(planner.recomputed(), 6, "the first plan computes everything");
    planner.plan(&mut m, ME, &live);
    assert_eq!(planner.recomputed(), 0, "nothing changed");

    apply(&mut m, &mut live, &configs, &Edit::Slice { slice: 0, svc: 2, eps: vec![(0, 0)] });
    let a = planner.plan(&mut m, ME, &live).clone();
    assert_eq!(planner.recomputed(), 1, "one EndpointSlice: its Service only");
    assert!(a.l2.contains_key(&IPS[2].parse::<IpAddr>().unwrap()), "the only endpoint's node owns it: {a:?}");

    // The slice moves to another Service: both are recomputed.
    apply(&mut m, &mut live, &configs, &Edit::Slice { slice: 0, svc: 3, eps: vec![(0, 0)] });
    planner.plan(&mut m, ME, &live);
    assert_eq!(planner.recomputed(), 2);

    // The same object again (a resync) changes nothing.
    apply(&mut m, &mut live, &configs, &Edit::Slice { slice: 0, svc: 3, eps: vec![(0, 0)] });
    apply(&mut m, &mut live, &configs, &Edit::Config(0));
    let e = Edit::Node { node: 1, ready: true, excluded: false, cordoned: false, rack_a: false };
    apply(&mut m, &mut live, &configs, &e);
    planner.plan(&mut m, ME, &live);
    assert_eq!(planner.recomputed(), 0, "resyncs of unchanged objects recompute nothing");

    // A node, the configuration or the live set: everything.
    let e = Edit::Node { node: 1, ready: false, excluded: false, cordoned: false, rack_a: false };
    apply(&mut m, &mut live, &configs, &e);
    planner.plan(&mut m, ME, &live);
    assert_eq!(planner.recomputed(), 6);
    apply(&mut m, &mut live, &configs, &Edit::Config(1));
    planner.plan(&mut m, ME, &live);
    assert_eq!(planner.recomputed(), 6);
    live.remove("n3");
    planner.plan(&mut m, ME, &live);
    assert_eq!(planner.recomputed(), 6);

    // A whole new model (a re-read static file) that differs in one Service.
    let mut fresh = m.clone();
    let e = Edit::Service { svc: 4, ips: vec![3], local: false, app_a: true, lb: true };
    apply(&mut fresh, &mut live, &configs, &e);
    fresh.mark_all_changed();
    m.replace_with(fresh);
    planner.plan(&mut m, ME, &live);
    assert_eq!(planner.recomputed(), 1, "only the Service that differs");
}

/// The bulk plan of thousands of Services (a static file; enough for it to be built on
/// several threads) equals the plan built up one
/// batch of Services at a time, with Services sharing addresses (many holders, made
/// from one) and some holding none.
#[test]
fn bulk_plan_equals_the_plan_built_batch_by_batch() {
    let configs = configs();
    for config in 0..configs.len() {
        let (mut m, mut live) = start(&configs);
        apply(&mut m, &mut live, &configs, &Edit::Config(config));
        let mut planner = Planner::new();
        planner.plan(&mut m, ME, &live);
        let services = 3000;
        for batch in (0..services).collect::<Vec<_>>().chunks(100) {
            for &svc in batch {
                let ips = (0..svc % 3).map(|k| (svc + k) % IPS.len()).collect();
                let e = Edit::Service { svc, ips, local: svc % 5 == 0, app_a: svc % 2 == 0, lb: true };
                apply(&mut m, &mut live, &configs, &e);
            }
            planner.plan(&mut m, ME, &live);
            assert_eq!(planner.recomputed(), batch.len(), "the batch only, on the incremental path");
        }
        let built = planner.plan(&mut m, ME, &live).clone();
        let routes = built.bgp.values().any(|r| !r.is_empty());
        assert!(routes || !built.l2.is_empty(), "config {config}: something is announced: {built:?}");
        assert_eq!(plan(&m, ME, &live), built, "config {config}");
    }
}
