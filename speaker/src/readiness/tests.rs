#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::*;
use crate::announce::bgp::BgpAnnounced;
use crate::model::tests::model_of;
use crate::plan;
use ferrolb_lab::fixtures::SHOP;
use ferrolb_testkit::ip;

/// The readiness gate's cluster ([`SHOP`]) plus node2, the Cluster Services `web`
/// (with a hand-made EndpointSlice `manual-1`) and `fresh` (no address yet).
const EXTRA: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node2}
status:
  conditions: [{type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 192.0.2.12}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {type: LoadBalancer, selector: {app: web}}
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}
---
apiVersion: v1
kind: Service
metadata: {name: fresh, namespace: default}
spec: {type: LoadBalancer, selector: {app: fresh}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: manual-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints:
- {addresses: [10.0.0.9], nodeName: node1, conditions: {ready: true}}
"#;

fn fixture() -> String {
    format!("{SHOP}---{EXTRA}")
}

/// A pod on `node` with `labels`, the gate, and ContainersReady as given.
pub(crate) fn pod(name: &str, node: &str, app: &str, pod_ip: &str, containers_ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}, "resourceVersion": "1"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "i"}],
            "readinessGates": [{"conditionType": CONDITION_TYPE}],
        },
        "status": {
            "podIP": pod_ip,
            "conditions": [
                {"type": "ContainersReady", "status": if containers_ready { "True" } else { "False" }},
                {"type": "Ready", "status": "False"},
            ],
        },
    }))
    .unwrap()
}

fn gated(p: &Pod) -> GatedPod {
    GatedPod::from_pod(p).expect("carries the gate")
}

fn announced_bgp(prefixes: &[&str], peer: &str) -> Announced {
    let mut b = BgpAnnounced::default();
    b.by_peer.insert(peer.into(), prefixes.iter().map(|p| p.parse::<ipnet::IpNet>().unwrap()).collect());
    Announced::from_parts(&b, None)
}

fn eval(
    model: &ClusterModel,
    plan: &Plan,
    announced: &Announced,
    remote: &RemoteAnnounced,
    p: &GatedPod,
) -> GateCondition {
    desired(p, &Inputs { model, me: "node1", plan, announced, remote })
}

#[test]
fn pods_without_the_gate_are_not_ours_and_gated_pods_are_read_fully() {
    let mut plain = pod("a", "node1", "web", "10.0.0.1", true);
    plain.spec.as_mut().unwrap().readiness_gates = Some(vec![k8s_openapi::api::core::v1::PodReadinessGate {
        condition_type: "example.com/other".into(),
    }]);
    assert_eq!(GatedPod::from_pod(&plain), None);
    let mut p = pod("b", "node1", "web", "10.0.0.2", true);
    p.spec
        .as_mut()
        .unwrap()
        .readiness_gates
        .as_mut()
        .unwrap()
        .push(k8s_openapi::api::core::v1::PodReadinessGate { condition_type: "example.com/other".into() });
    let g = gated(&p);
    assert_eq!(g.key, PodKey { namespace: "default".into(), name: "b".into() });
    assert_eq!((g.node.as_str(), g.ips.clone()), ("node1", vec![ip("10.0.0.2")]));
    assert!(g.containers_ready && !g.terminating && g.current.is_none());
    assert!(!g.other_gates_ready, "example.com/other has no True condition");
    assert!(!g.only_gate_pending());
}

#[test]
fn local_service_is_true_only_once_this_node_really_announces_it() {
    let model = model_of(&fixture());
    let p = gated(&pod("shop-0", "node1", "shop", "10.0.0.5", true));
    let none = RemoteAnnounced::default();
    // Another node announcing a Local Service brings this pod nothing.
    let mut remote = RemoteAnnounced::default();
    remote.addresses.insert(ip("203.0.113.20"), ["node2".to_string()].into());

    let c = eval(&model, &Plan::default(), &Announced::default(), &remote, &p);
    assert!(!c.status);
    assert_eq!(c.reason, reason::NOT_ANNOUNCED);
    assert!(c.message.contains("default/shop: 203.0.113.20 is not announced by node node1"), "{}", c.message);

    // Planned (the session is not up yet): pending, not True.
    let planned = plan::plan(&model, "node1", &BTreeSet::new());
    let mut model2 = model.clone();
    apply_gate_pending(&mut model2, std::slice::from_ref(&p), "node1");
    let planned2 = plan::plan(&model2, "node1", &BTreeSet::new());
    assert!(!planned.bgp_addresses().contains(&"203.0.113.20/32".parse().unwrap()));
    assert!(planned2.bgp_addresses().contains(&"203.0.113.20/32".parse().unwrap()));
    let c = eval(&model2, &planned2, &Announced::default(), &none, &p);
    assert_eq!((c.status, c.reason.as_str()), (false, reason::ANNOUNCEMENT_PENDING));
    assert!(c.message.contains("BGP UPDATE"), "{}", c.message);

    // Sent on an Established session: True, naming the peer.
    let c = eval(&model2, &planned2, &announced_bgp(&["203.0.113.20/32"], "router-a"), &none, &p);
    assert_eq!((c.status, c.reason.as_str()), (true, reason::ANNOUNCED));
    assert!(c.message.contains("203.0.113.20 announced by node node1 by BGP to router-a"), "{}", c.message);
    // An aggregate covering the address counts as well.
    let c = eval(&model2, &planned2, &announced_bgp(&["203.0.113.0/24"], "router-a"), &none, &p);
    assert!(c.status);
}

#[test]
fn cluster_service_counts_any_node_and_says_why_not() {
    let model = model_of(&fixture());
    let p = gated(&pod("web-0", "node1", "web", "10.0.0.7", true));
    let plan = Plan::default();
    let mut remote = RemoteAnnounced::default();
    let c = eval(&model, &plan, &Announced::default(), &remote, &p);
    assert_eq!((c.status, c.reason.as_str()), (false, reason::NOT_ANNOUNCED));
    assert!(c.message.contains("203.0.113.10 is not announced by any node"), "{}", c.message);
    remote.addresses.insert(ip("203.0.113.10"), ["node2".to_string()].into());
    let c = eval(&model, &plan, &Announced::default(), &remote, &p);
    assert_eq!((c.status, c.reason.as_str()), (true, reason::ANNOUNCED));
    assert!(c.message.contains("announced by node node2"), "{}", c.message);
    // L2 on this node.
    let mut l2 = ferrolb_proto::l2::L2Status::default();
    l2.addresses.insert(
        ip("203.0.113.10"),
        ferrolb_proto::l2::AddressStatus { gratuitous_sent: true, ..Default::default() },
    );
    let a = Announced::from_parts(&BgpAnnounced::default(), Some(&l2));
    let c = eval(&model, &plan, &a, &RemoteAnnounced::default(), &p);
    assert!(c.status && c.message.contains("by ARP/NDP"), "{c:?}");
    // Owned but the gratuitous announcement not sent: pending.
    l2.addresses.insert(ip("203.0.113.10"), ferrolb_proto::l2::AddressStatus::default());
    let a = Announced::from_parts(&BgpAnnounced::default(), Some(&l2));
    let mut planned = Plan::default();
    planned.l2.insert(ip("203.0.113.10"), vec![]);
    let c = eval(&model, &planned, &a, &RemoteAnnounced::default(), &p);
    assert_eq!((c.status, c.reason.as_str()), (false, reason::ANNOUNCEMENT_PENDING));
    assert!(c.message.contains("gratuitous"), "{}", c.message);
}

#[test]
fn backing_comes_from_selectors_slices_or_addresses() {
    let model = model_of(&fixture());
    let plan = Plan::default();
    let none = RemoteAnnounced::default();
    // Selected by a Service without an address yet.
    let p = gated(&pod("fresh-0", "node1", "fresh", "10.0.0.3", true));
    let c = eval(&model, &plan, &Announced::default(), &none, &p);
    assert_eq!((c.status, c.reason.as_str()), (false, reason::ADDRESS_PENDING));
    assert!(c.message.contains("default/fresh"), "{}", c.message);
    // Backs nothing: nothing to wait for.
    let p = gated(&pod("lonely", "node1", "nothing", "10.0.0.4", true));
    let c = eval(&model, &plan, &Announced::default(), &none, &p);
    assert_eq!((c.status, c.reason.as_str()), (true, reason::NO_LOAD_BALANCER_SERVICE));
    // A hand-made slice without targetRef names the pod by its address.
    let p = gated(&pod("manual", "node1", "nothing", "10.0.0.9", true));
    assert_eq!(services_of(&p, &model).iter().map(|k| &*k.name).collect::<Vec<_>>(), ["web"]);
    // By targetRef, even without matching labels.
    let p = gated(&pod("shop-0", "node1", "relabelled", "10.9.9.9", true));
    assert_eq!(services_of(&p, &model).iter().map(|k| &*k.name).collect::<Vec<_>>(), ["shop"]);
}

/// The Local chicken-and-egg: the gated pod's endpoint is not ready, yet its node
/// must plan the announcement, and keep it while the gate is True but the slice
/// lags; not when the containers are not ready or the pod terminates.
#[test]
fn pods_waiting_only_for_the_gate_count_as_serving_on_their_own_node() {
    let base = model_of(&fixture());
    let vip: ipnet::IpNet = "203.0.113.20/32".parse().unwrap();
    let announces =
        |m: &ClusterModel, me: &str| plan::plan(m, me, &BTreeSet::new()).bgp_addresses().contains(&vip);
    assert!(!announces(&base, "node1"), "no serving endpoint without the rule");

    let mut ready = pod("shop-0", "node1", "shop", "10.0.0.5", true);
    let mut m = base.clone();
    let shop = ServiceKey { namespace: "default".into(), name: "shop".into() };
    assert_eq!(apply_gate_pending(&mut m, &[gated(&ready)], "node1"), BTreeSet::from([shop.clone()]));
    assert!(announces(&m, "node1"));
    assert!(!announces(&m, "node2"), "only for the pod's own node");
    assert!(apply_gate_pending(&mut m, &[gated(&ready)], "node1").is_empty(), "unchanged");
    // The gate turned True, the EndpointSlice has not caught up: still counted.
    ready.status.as_mut().unwrap().conditions.as_mut().unwrap().push(
        k8s_openapi::api::core::v1::PodCondition {
            type_: CONDITION_TYPE.into(),
            status: "True".into(),
            ..Default::default()
        },
    );
    assert!(apply_gate_pending(&mut m, &[gated(&ready)], "node1").is_empty());
    assert!(announces(&m, "node1"));
    // Other speakers do not count this node's pods.
    let mut other = base.clone();
    assert!(apply_gate_pending(&mut other, &[gated(&ready)], "node2").is_empty());

    let not_ready = pod("shop-0", "node1", "shop", "10.0.0.5", false);
    assert_eq!(apply_gate_pending(&mut m, &[gated(&not_ready)], "node1"), BTreeSet::from([shop.clone()]));
    assert!(!announces(&m, "node1"), "containers not ready: not counted");
    let mut leaving = pod("shop-0", "node1", "shop", "10.0.0.5", true);
    leaving.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    assert!(apply_gate_pending(&mut m, &[gated(&leaving)], "node1").is_empty());
    assert!(!announces(&m, "node1"), "terminating: not counted");
}

/// L2 owners are elected by every node from the same endpoints: a count only the
/// pod's node sees must not make it a candidate (two owners).
#[test]
fn gate_pending_never_touches_l2_elections_or_cluster_services() {
    let l2 = format!(
        "{}---\napiVersion: ferrolb.io/v1alpha1\nkind: L2Advertisement\nmetadata: {{name: lan}}\nspec: {{ipAddressPools: [public]}}\n",
        fixture()
    );
    let mut m = model_of(&l2);
    let shop = ServiceKey { namespace: "default".into(), name: "shop".into() };
    assert!(m.l2_selects(&shop));
    let p = gated(&pod("shop-0", "node1", "shop", "10.0.0.5", true));
    assert!(apply_gate_pending(&mut m, &[p], "node1").is_empty());
    let live: BTreeSet<String> = ["node1".to_string(), "node2".to_string()].into();
    let l2_plan = plan::plan(&m, "node1", &live);
    assert!(!l2_plan.l2.contains_key(&ip("203.0.113.20")), "node1 is no L2 candidate: {l2_plan:?}");
    assert!(l2_plan.withdrawn[&ip("203.0.113.20")].contains("no eligible live node"), "{l2_plan:?}");
    // Without the L2Advertisement the same pod counts.
    let m2 = model_of(&fixture());
    assert!(!m2.l2_selects(&shop));
    let p = gated(&pod("shop-0", "node1", "shop", "10.0.0.5", true));
    assert!(gate_pending(std::slice::from_ref(&p), &m2, "node1").contains_key(&shop));
    // Cluster Services are announced without endpoints: nothing to count.
    let mut m = model_of(&fixture());
    let mut slices = m.endpoint_slices[&shop].clone();
    for ep in slices.iter_mut().flat_map(|s| s.endpoints.iter_mut()) {
        ep.pod = Some("web-0".into());
    }
    let web = ServiceKey { namespace: "default".into(), name: "web".into() };
    m.endpoint_slices.insert(web.clone(), slices);
    let w = gated(&pod("web-0", "node1", "web", "10.0.0.5", true));
    assert!(!gate_pending(&[w], &m, "node1").contains_key(&web));
}

#[test]
fn remote_announcements_leave_out_this_node() {
    let sa = |node: &str, addr: &str| {
        ServiceAnnouncement::new(
            &format!("web-{node}"),
            ferrolb_api::ServiceAnnouncementSpec {
                node: node.into(),
                addresses: vec![addr.into(), "not-an-ip".into()],
                ..Default::default()
            },
        )
    };
    let items = [sa("node1", "203.0.113.10"), sa("node2", "203.0.113.10"), sa("node3", "203.0.113.11")];
    let r = RemoteAnnounced::from_service_announcements(&items, "node1");
    assert_eq!(r.addresses.len(), 2);
    assert_eq!(r.addresses[&ip("203.0.113.10")], BTreeSet::from(["node2".to_string()]));
}

#[test]
fn keep_true_holds_only_true_pods_back_from_false() {
    let mut was_true = gated(&pod("a", "node1", "web", "10.0.0.1", true));
    was_true.current = Some(GateCondition::new(true, reason::ANNOUNCED, "m".into()));
    let was_false = gated(&pod("b", "node1", "web", "10.0.0.2", true));
    let pending = GateCondition::new(false, reason::ANNOUNCEMENT_PENDING, "p".into());
    let mut desired =
        BTreeMap::from([(was_true.key.clone(), pending.clone()), (was_false.key.clone(), pending.clone())]);
    keep_true(&mut desired, &[was_true.clone(), was_false.clone()]);
    assert_eq!(desired[&was_true.key], *was_true.current.as_ref().unwrap());
    assert_eq!(desired[&was_false.key], pending);
}

#[test]
fn long_messages_are_cut_on_a_character_boundary() {
    let c = GateCondition::new(false, reason::NOT_ANNOUNCED, "é".repeat(MAX_MESSAGE));
    assert!(c.message.len() <= MAX_MESSAGE && c.message.ends_with("..."));
}
