#![allow(clippy::unwrap_used, clippy::expect_used, clippy::needless_range_loop)]

use super::*;
use crate::model::tests::{FIXTURE, fixture_model, model_of};
use ferrolb_testkit::ip;
use proptest::prelude::*;

fn all_live(m: &ClusterModel) -> BTreeSet<String> {
    m.nodes.keys().cloned().collect()
}

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

#[test]
fn cluster_policy_announces_every_address_to_every_selected_peer() {
    let m = fixture_model();
    let a = plan(&m, "node1", &all_live(&m));
    // node1 (rack a) peers with both routers; node2 only with router-a.
    assert_eq!(a.bgp.keys().collect::<Vec<_>>(), vec!["router-a", "router-ibgp"]);
    let ebgp = &a.bgp["router-a"];
    assert_eq!(
        ebgp.keys().copied().collect::<Vec<_>>(),
        vec![net("203.0.113.10/32"), net("203.0.113.20/32"), net("2001:db8:3::10/128")],
        "203.0.113.20 (Local) is draining on node1"
    );
    let attrs = &ebgp[&net("203.0.113.10/32")];
    assert_eq!(attrs.communities, BTreeSet::from([(64512 << 16) | 100]));
    assert_eq!(attrs.large_communities, BTreeSet::from([(64512, 1, 2)]));
    assert_eq!(attrs.local_pref, None, "LOCAL_PREF is iBGP only");
    assert_eq!(a.bgp["router-ibgp"][&net("203.0.113.10/32")].local_pref, Some(150));

    let b = plan(&m, "node2", &all_live(&m));
    assert_eq!(b.bgp.keys().collect::<Vec<_>>(), vec!["router-a"]);
}

#[test]
fn local_policy_announces_only_where_an_endpoint_serves() {
    let m = fixture_model();
    let n1 = plan(&m, "node1", &all_live(&m));
    let n2 = plan(&m, "node2", &all_live(&m));
    // node1's only endpoint is serving and terminating: it drains instead of withdrawing.
    let drained = &n1.bgp["router-a"][&net("203.0.113.20/32")];
    assert!(drained.draining && drained.communities.contains(&GRACEFUL_SHUTDOWN));
    assert!(n1.draining[&ip("203.0.113.20")].contains("terminating"));
    assert!(n2.bgp_addresses().contains(&net("203.0.113.20/32")));
    assert!(!n2.draining.contains_key(&ip("203.0.113.20")));
    assert!(!n2.withdrawn.contains_key(&ip("203.0.113.20")));
    // Once the endpoint is gone, node1 withdraws.
    let gone = FIXTURE.replace(
        "- {addresses: [10.0.0.2], nodeName: node1, conditions: {ready: false, serving: true, terminating: true}}\n",
        "",
    );
    let m = model_of(&gone);
    let n1 = plan(&m, "node1", &all_live(&m));
    assert!(!n1.bgp_addresses().contains(&net("203.0.113.20/32")));
    let why = &n1.withdrawn[&ip("203.0.113.20")];
    assert!(why.contains("no serving endpoint on node node1 (externalTrafficPolicy Local)"), "{why}");
    // Terminating but no longer serving: withdrawn too.
    let not_serving =
        FIXTURE.replace("serving: true, terminating: true", "serving: false, terminating: true");
    let m = model_of(&not_serving);
    assert!(!plan(&m, "node1", &all_live(&m)).bgp_addresses().contains(&net("203.0.113.20/32")));
}

#[test]
fn draining_adds_graceful_shutdown_and_local_pref_zero_on_ibgp_only() {
    let m = fixture_model();
    let a = plan(&m, "node1", &all_live(&m));
    let p = net("203.0.113.20/32");
    let ebgp = &a.bgp["router-a"][&p];
    let ibgp = &a.bgp["router-ibgp"][&p];
    assert_eq!(ebgp.local_pref, None, "LOCAL_PREF is iBGP only");
    assert_eq!(ibgp.local_pref, Some(0));
    assert!(
        ibgp.communities.contains(&GRACEFUL_SHUTDOWN) && ibgp.communities.contains(&((64512 << 16) | 100))
    );
    // The non-draining service keeps its attributes.
    let web = &a.bgp["router-ibgp"][&net("203.0.113.10/32")];
    assert!(!web.draining && web.local_pref == Some(150) && !web.communities.contains(&GRACEFUL_SHUTDOWN));
}

#[test]
fn a_cordoned_or_tainted_node_drains_every_address() {
    for extra in
        ["spec: {unschedulable: true}\n", "spec: {taints: [{key: ferrolb.io/drain, effect: NoSchedule}]}\n"]
    {
        let text = FIXTURE.replacen(
            "metadata: {name: node1, labels: {rack: a}}\n",
            &format!("metadata: {{name: node1, labels: {{rack: a}}}}\n{extra}"),
            1,
        );
        let m = model_of(&text);
        let a = plan(&m, "node1", &all_live(&m));
        assert!(!a.bgp_addresses().is_empty());
        for routes in a.bgp.values() {
            for attrs in routes.values() {
                assert!(attrs.draining && attrs.communities.contains(&GRACEFUL_SHUTDOWN), "{extra}");
            }
        }
        assert!(a.draining.contains_key(&ip("203.0.113.10")), "{extra}");
        assert!(a.draining[&ip("203.0.113.10")].contains("node node1"), "{extra}");
        let b = plan(&m, "node2", &all_live(&m));
        assert!(b.draining.is_empty(), "another node's cordon does not drain node2");
    }
}

#[test]
fn expired_drains_are_withdrawn_and_drain_all_marks_everything() {
    let m = fixture_model();
    let mut a = plan(&m, "node1", &all_live(&m));
    a.expire_drains(&BTreeSet::from([ip("203.0.113.20")]), std::time::Duration::from_secs(3));
    assert!(!a.bgp_addresses().contains(&net("203.0.113.20/32")));
    assert!(a.withdrawn[&ip("203.0.113.20")].contains("--drain-max-delay"));
    assert!(a.bgp_addresses().contains(&net("203.0.113.10/32")), "a non-draining address stays");
    a.drain_all("SIGTERM");
    assert!(a.draining.contains_key(&ip("203.0.113.10")));
    assert_eq!(a.bgp["router-ibgp"][&net("203.0.113.10/32")].local_pref, Some(0));
    assert!(a.bgp["router-a"][&net("203.0.113.10/32")].communities.contains(&GRACEFUL_SHUTDOWN));
}

#[test]
fn an_aggregate_drains_only_when_every_address_behind_it_drains() {
    let text = FIXTURE.replace(
        "  ipAddressPools: [public]\n  localPref: 150",
        "  ipAddressPools: [public]\n  aggregationLength: 24\n  localPref: 150",
    );
    let m = model_of(&text);
    let a = plan(&m, "node1", &all_live(&m));
    let agg = &a.bgp["router-a"][&net("203.0.113.0/24")];
    assert!(!agg.draining && !agg.communities.contains(&GRACEFUL_SHUTDOWN));
    assert!(a.draining.is_empty());
}

#[test]
fn aggregation_length_and_advertisement_peers_apply() {
    let text = FIXTURE.replace(
        "  ipAddressPools: [public]\n  localPref: 150",
        "  ipAddressPools: [public]\n  peers: [router-a]\n  aggregationLength: 24\n  aggregationLengthV6: 64\n  localPref: 150",
    );
    let m = model_of(&text);
    let a = plan(&m, "node1", &all_live(&m));
    assert_eq!(
        a.bgp["router-a"].keys().copied().collect::<Vec<_>>(),
        vec![net("203.0.113.0/24"), net("2001:db8:3::/64")]
    );
    assert!(a.bgp["router-ibgp"].is_empty(), "peers: [router-a] leaves the other peer out");
}

#[test]
fn excluded_node_announces_nothing_and_says_why() {
    let text = FIXTURE.replace(
        "labels: {rack: a}}",
        "labels: {rack: a, node.kubernetes.io/exclude-from-external-load-balancers: \"\"}}",
    );
    let m = model_of(&text);
    let a = plan(&m, "node1", &all_live(&m));
    assert!(a.bgp_addresses().is_empty());
    assert!(a.withdrawn[&ip("203.0.113.10")].contains("exclude-from-external-load-balancers"));
}

#[test]
fn unknown_node_announces_nothing() {
    let m = fixture_model();
    let a = plan(&m, "node9", &all_live(&m));
    assert!(a.bgp_addresses().is_empty());
    assert!(a.withdrawn[&ip("203.0.113.10")].contains("node node9 is not in the model"));
}

#[test]
fn addresses_outside_every_pool_or_advertisement_are_withdrawn_with_a_reason() {
    let text = FIXTURE.replace("{ip: 203.0.113.10}", "{ip: 198.51.100.7}").replace(
        "kind: L2Advertisement\nmetadata: {name: lan}\nspec: {ipAddressPools: [lan], interfaces: [eth0]}",
        "kind: L2Advertisement\nmetadata: {name: lan}\nspec: {ipAddressPoolSelectors: [{matchLabels: {no: match}}], interfaces: [eth0]}",
    );
    let text = text
        + "---\napiVersion: v1\nkind: Service\nmetadata: {name: lan-svc, namespace: default}\nspec: {type: LoadBalancer}\nstatus: {loadBalancer: {ingress: [{ip: 192.0.2.201}]}}\n";
    let m = model_of(&text);
    let a = plan(&m, "node1", &all_live(&m));
    assert!(a.withdrawn[&ip("198.51.100.7")].contains("is in no IPAddressPool"));
    let why = &a.withdrawn[&ip("192.0.2.201")];
    assert!(why.contains("no BGPAdvertisement or L2Advertisement selects pool lan"), "{why}");
}

const L2_SVC: &str = "---\napiVersion: v1\nkind: Service\nmetadata: {name: lan-svc, namespace: default}\nspec: {type: LoadBalancer}\nstatus: {loadBalancer: {ingress: [{ip: 192.0.2.201}]}}\n";

#[test]
fn l2_owner_is_the_elected_live_candidate() {
    let m = model_of(&(FIXTURE.to_string() + L2_SVC));
    let vip = ip("192.0.2.201");
    let live = all_live(&m);
    let owner = election::owner(vip, ["node1", "node2"]).unwrap().to_string();
    let other = if owner == "node1" { "node2" } else { "node1" };
    let a = plan(&m, &owner, &live);
    assert_eq!(a.l2.get(&vip), Some(&vec!["eth0".to_string()]));
    let b = plan(&m, other, &live);
    assert!(!b.l2.contains_key(&vip));
    assert!(b.withdrawn[&vip].contains(&format!("owned by node {owner}")), "{:?}", b.withdrawn);
    // The owner leaves membership: the other node takes over.
    let live2: BTreeSet<String> = [other.to_string()].into();
    assert_eq!(plan(&m, other, &live2).l2.get(&vip), Some(&vec!["eth0".to_string()]));
}

#[test]
fn an_address_no_node_can_own_is_counted_on_every_node() {
    let m = model_of(&(FIXTURE.to_string() + L2_SVC));
    let vip = ip("192.0.2.201");
    assert!(plan(&m, "node1", &all_live(&m)).l2_unowned.is_empty());
    let mut down = m.clone();
    for n in down.nodes.values_mut() {
        n.ready = false;
    }
    for me in ["node1", "node2"] {
        assert_eq!(plan(&down, me, &all_live(&down)).l2_unowned, BTreeSet::from([vip]), "{me}");
    }
    // Nobody live in membership: the same.
    assert_eq!(plan(&m, "node1", &BTreeSet::new()).l2_unowned, BTreeSet::from([vip]));
    // A Local Service with no serving endpoint anywhere is the application's state.
    let local = l2_local(GONE, GONE);
    let a = plan(&local, "node1", &all_live(&local));
    assert!(!a.l2.contains_key(&ip("192.0.2.202")));
    assert!(a.l2_unowned.is_empty(), "{:?}", a.l2_unowned);
}

#[test]
fn l2_skips_nodes_that_are_not_ready() {
    let m = model_of(&(FIXTURE.to_string() + L2_SVC));
    let vip = ip("192.0.2.201");
    let owner = election::owner(vip, ["node1", "node2"]).unwrap().to_string();
    let other = if owner == "node1" { "node2" } else { "node1" };
    let mut m2 = m.clone();
    m2.nodes.get_mut(&owner).unwrap().ready = false;
    assert!(plan(&m2, other, &all_live(&m2)).l2.contains_key(&vip));
    assert!(!plan(&m2, &owner, &all_live(&m2)).l2.contains_key(&vip));
}

proptest! {
    /// Whatever the node set, liveness and endpoints: at most one node owns each L2
    /// address, exactly one when a candidate exists; every address is either announced
    /// or carries a reason on every node; BGP with policy Local goes only where an
    /// endpoint serves.
    #[test]
    fn every_address_is_announced_or_explained_and_l2_has_one_owner(
        ready in prop::collection::vec(any::<bool>(), 4),
        live in prop::collection::vec(any::<bool>(), 4),
        eps in prop::collection::vec(any::<bool>(), 4),
        local in any::<bool>(),
        last in 200u8..=250,
    ) {
        let mut m = fixture_model();
        m.nodes.clear();
        for i in 0..4 {
            m.nodes.insert(format!("n{i}"), crate::model::NodeInfo { ready: ready[i], ..Default::default() });
        }
        let vip = IpAddr::from([192, 0, 2, last]);
        let key = ServiceKey { namespace: "default".into(), name: "p".into() };
        m.services.insert(key.clone(), ServiceInfo {
            ingress: vec![vip, ip("203.0.113.44")],
            traffic_policy: if local { TrafficPolicy::Local } else { TrafficPolicy::Cluster },
            ..Default::default()
        });
        let per_node = (0..4).filter(|i| eps[*i]).map(|i| (format!("n{i}").into(), crate::model::EndpointCounts { ready: 1, serving: 1, terminating: 0, serving_terminating: 0 })).collect();
        m.endpoint_slices.insert(key, vec![crate::model::Slice { name: "s".into(), per_node, ..Default::default() }]);
        let live_set: BTreeSet<String> = (0..4).filter(|i| live[*i]).map(|i| format!("n{i}")).collect();
        let mut owners = 0;
        for i in 0..4 {
            let me = format!("n{i}");
            let a = plan(&m, &me, &live_set);
            for addr in [vip, ip("203.0.113.44")] {
                let announced = a.l2.contains_key(&addr) || a.bgp_addresses().contains(&IpNet::from(addr));
                prop_assert!(announced != a.withdrawn.contains_key(&addr), "{me} {addr}: {a:?}");
            }
            owners += usize::from(a.l2.contains_key(&vip));
            let bgp = a.bgp_addresses().contains(&net("203.0.113.44/32"));
            prop_assert_eq!(bgp, !local || eps[i]);
        }
        let candidates = (0..4).filter(|i| ready[*i] && live[*i] && (!local || eps[*i])).count();
        prop_assert_eq!(owners, usize::from(candidates > 0));
    }

    #[test]
    fn draining_is_announced_with_graceful_shutdown_and_never_also_withdrawn(
        // Per endpoint on node1: (ready, serving, terminating).
        conds in prop::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 0..4),
        other_ready in any::<bool>(),
        cordoned in any::<bool>(),
    ) {
        let mut m = fixture_model();
        if let Some(n) = m.nodes.get_mut("node1") {
            n.draining = cordoned.then(|| "node node1 is cordoned".to_string());
        }
        let key = ServiceKey { namespace: "default".into(), name: "local".into() };
        let mut c = crate::model::EndpointCounts::default();
        for (r, s, t) in &conds {
            c.ready += u32::from(*r);
            c.serving += u32::from(*s);
            c.terminating += u32::from(*t);
            c.serving_terminating += u32::from(*s && *t);
        }
        let other = crate::model::EndpointCounts { ready: u32::from(other_ready), serving: u32::from(other_ready), ..Default::default() };
        let per_node = Box::new([("node1".into(), c), ("node2".into(), other)]);
        m.endpoint_slices.insert(key, vec![crate::model::Slice { name: "s".into(), per_node, ..Default::default() }]);
        let a = plan(&m, "node1", &all_live(&m));
        let vip = ip("203.0.113.20");
        let p = net("203.0.113.20/32");
        let announced = a.bgp_addresses().contains(&p);
        prop_assert!(announced != a.withdrawn.contains_key(&vip), "{a:?}");
        prop_assert!(!a.draining.contains_key(&vip) || announced);
        let all_terminating = c.serving_terminating > 0 && c.serving <= c.serving_terminating;
        let serving_normally = !all_terminating && m.serving_nodes(&ServiceKey { namespace: "default".into(), name: "local".into() }).contains("node1");
        prop_assert_eq!(announced, all_terminating || serving_normally);
        prop_assert_eq!(a.draining.contains_key(&vip), announced && (all_terminating || cordoned));
        for (peer, routes) in &a.bgp {
            if let Some(attrs) = routes.get(&p) {
                let drains = a.draining.contains_key(&vip);
                prop_assert_eq!(attrs.draining, drains);
                prop_assert_eq!(attrs.communities.contains(&GRACEFUL_SHUTDOWN), drains);
                if a.ibgp.contains(peer) {
                    prop_assert_eq!(attrs.local_pref, Some(if drains { 0 } else { 150 }));
                } else {
                    prop_assert_eq!(attrs.local_pref, None);
                }
            }
        }
    }
}

/// A Local L2 Service with one endpoint per node, in the given conditions.
fn l2_local(cond1: &str, cond2: &str) -> ClusterModel {
    let text = format!(
        "{FIXTURE}---\napiVersion: v1\nkind: Service\nmetadata: {{name: lan-local, namespace: default}}\nspec: {{type: LoadBalancer, externalTrafficPolicy: Local}}\nstatus: {{loadBalancer: {{ingress: [{{ip: 192.0.2.202}}]}}}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: lan-local-1, namespace: default, labels: {{kubernetes.io/service-name: lan-local}}}}\naddressType: IPv4\nendpoints:\n- {{addresses: [10.0.0.1], nodeName: node1, conditions: {cond1}}}\n- {{addresses: [10.0.0.2], nodeName: node2, conditions: {cond2}}}\n"
    );
    model_of(&text)
}

const READY: &str = "{ready: true}";
const TERMINATING: &str = "{ready: false, serving: true, terminating: true}";
const GONE: &str = "{ready: false, serving: false, terminating: true}";

#[test]
fn an_l2_owner_whose_endpoints_terminate_hands_over_before_it_stops() {
    let vip = ip("192.0.2.202");
    let m = l2_local(READY, READY);
    let live = all_live(&m);
    let owner = election::owner(vip, ["node1", "node2"]).unwrap();
    let other = if owner == "node1" { "node2" } else { "node1" };
    assert!(plan(&m, owner, &live).l2.contains_key(&vip));
    assert!(!plan(&m, owner, &live).l2_draining.contains_key(&vip));

    // The owner's only endpoint turns terminating: it leaves the candidates, so the
    // other node is elected and announces; the old owner keeps answering, marked as
    // handing over to it.
    let (c1, c2) = if owner == "node1" { (TERMINATING, READY) } else { (READY, TERMINATING) };
    let m = l2_local(c1, c2);
    let old = plan(&m, owner, &live);
    assert_eq!(old.l2.get(&vip), Some(&vec!["eth0".to_string()]), "still answering: {old:?}");
    let why = &old.l2_draining[&vip];
    assert!(why.contains("terminating") && why.contains(&format!("to node {other}")), "{why}");
    assert!(!old.withdrawn.contains_key(&vip));
    let new = plan(&m, other, &live);
    assert!(new.l2.contains_key(&vip) && new.l2_draining.is_empty(), "the successor owns it: {new:?}");

    // The endpoint stops serving: no handover left, the old owner stops answering.
    let (c1, c2) = if owner == "node1" { (GONE, READY) } else { (READY, GONE) };
    let m = l2_local(c1, c2);
    let old = plan(&m, owner, &live);
    assert!(!old.l2.contains_key(&vip) && old.l2_draining.is_empty(), "{old:?}");
    assert!(old.withdrawn[&vip].contains(&format!("owned by node {other}")), "{old:?}");
}

#[test]
fn a_node_that_did_not_own_the_address_has_nothing_to_hand_over() {
    let vip = ip("192.0.2.202");
    let owner = election::owner(vip, ["node1", "node2"]).unwrap();
    let other = if owner == "node1" { "node2" } else { "node1" };
    // The non-owner's endpoint terminates: it never answered, and still does not.
    let (c1, c2) = if other == "node1" { (TERMINATING, READY) } else { (READY, TERMINATING) };
    let m = l2_local(c1, c2);
    let a = plan(&m, other, &all_live(&m));
    assert!(!a.l2.contains_key(&vip) && a.l2_draining.is_empty(), "{a:?}");
    // Not live (left membership): no handover either, the successor has taken over.
    let (c1, c2) = if owner == "node1" { (TERMINATING, READY) } else { (READY, TERMINATING) };
    let m = l2_local(c1, c2);
    let live: BTreeSet<String> = [other.to_string()].into();
    assert!(plan(&m, owner, &live).l2_draining.is_empty());
    // The only other node with an endpoint is not live: nobody could take over, so the
    // owner keeps the address (its endpoint still serves) instead of breaking.
    let live: BTreeSet<String> = [owner.to_string()].into();
    let a = plan(&m, owner, &live);
    assert!(a.l2.contains_key(&vip) && a.l2_draining.is_empty(), "{a:?}");
    assert!(!plan(&m, other, &live).l2.contains_key(&vip));
}

/// The owner names its successor (the node elected when it leaves the candidates), and
/// beats it; a node handing the address over, or owning nothing, beats nobody; a Local
/// Service's successor is a node with a serving endpoint, not merely the next node.
#[test]
fn an_l2_owner_beats_the_node_elected_after_it() {
    let vip = ip("192.0.2.202");
    let m = l2_local(READY, READY);
    let live = all_live(&m);
    let owner = election::owner(vip, ["node1", "node2"]).unwrap();
    let other = if owner == "node1" { "node2" } else { "node1" };
    let a = plan(&m, owner, &live);
    assert_eq!(a.l2_successors.get(&vip), Some(&vec![other.to_string()]), "{a:?}");
    assert_eq!(a.heartbeat_targets(), BTreeSet::from([other.to_string()]));
    assert!(plan(&m, other, &live).heartbeat_targets().is_empty());
    // The other node's endpoint stops serving: nobody could take over, nobody is beaten.
    let (c1, c2) = if other == "node1" { (GONE, READY) } else { (READY, GONE) };
    let a = plan(&l2_local(c1, c2), owner, &live);
    assert!(a.l2.contains_key(&vip) && a.heartbeat_targets().is_empty(), "{a:?}");
    // The owner hands over: it answers during the grace but beats nobody for it.
    let (c1, c2) = if owner == "node1" { (TERMINATING, READY) } else { (READY, TERMINATING) };
    let a = plan(&l2_local(c1, c2), owner, &live);
    assert!(a.l2_draining.contains_key(&vip) && a.heartbeat_targets().is_empty(), "{a:?}");
}

fn active_active(mut m: ClusterModel) -> ClusterModel {
    for ad in m.l2_advertisements.values_mut() {
        ad.spec.mode = ferrolb_api::L2Mode::ActiveActive;
    }
    m
}

#[test]
fn an_active_active_address_is_served_by_every_eligible_node() {
    let m = active_active(model_of(&(FIXTURE.to_string() + L2_SVC)));
    let vip = ip("192.0.2.201");
    let both = vec!["node1".to_string(), "node2".to_string()];
    for me in ["node1", "node2"] {
        let p = plan(&m, me, &all_live(&m));
        assert_eq!(p.l2.get(&vip), Some(&vec!["eth0".to_string()]), "{me}");
        assert_eq!(p.l2_active_active.get(&vip), Some(&both), "{me}");
        assert!(
            p.l2_successors.is_empty() && p.heartbeat_targets().is_empty(),
            "{me}: no single owner, no heartbeat"
        );
    }
    // A node membership lost is no longer among the nodes it is spread over.
    let live: BTreeSet<String> = ["node2".to_string()].into();
    assert_eq!(plan(&m, "node2", &live).l2_active_active[&vip], vec!["node2".to_string()]);
    assert!(!plan(&m, "node1", &live).l2_active_active.contains_key(&vip));
    // Single-owner addresses stay out of the map.
    assert!(
        plan(&model_of(&(FIXTURE.to_string() + L2_SVC)), "node1", &all_live(&m)).l2_active_active.is_empty()
    );
}

/// A member whose heartbeats stopped, as the successor that watches it plans: left out
/// of single-owner elections at once, kept in active-active spreads (only SWIM, which
/// every node hears alike, moves buckets: two owners of one would both answer a SYN).
#[test]
fn a_heartbeat_suspect_is_left_out_of_single_owner_elections_only() {
    let vip = ip("192.0.2.201");
    for aa in [false, true] {
        let m = model_of(&(FIXTURE.to_string() + L2_SVC));
        let m = if aa { active_active(m) } else { m };
        let owner = election::owner(vip, ["node1", "node2"]).unwrap();
        let other = if owner == "node1" { "node2" } else { "node1" };
        let (live, suspected) = (all_live(&m), BTreeSet::from([owner.to_string()]));
        let mut planner = Planner::new();
        let before = planner.update(&m, Changes::default(), other, &live, &BTreeSet::new()).clone();
        // No change of the model: the suspicion alone plans again.
        let during = planner.update(&m, Changes::default(), other, &live, &suspected).clone();
        if aa {
            let both = vec!["node1".to_string(), "node2".to_string()];
            assert_eq!(during.l2_active_active.get(&vip), Some(&both), "active-active, {owner} suspected");
            assert_eq!(during, before, "active-active: a suspicion changes nothing");
        } else {
            assert!(!before.l2.contains_key(&vip), "{before:?}");
            assert_eq!(during.l2.get(&vip), Some(&vec!["eth0".to_string()]), "the successor takes over");
        }
        let after = planner.update(&m, Changes::default(), other, &live, &BTreeSet::new()).clone();
        assert_eq!(after, before, "its beats resume: {other} lets go");
    }
}

#[test]
fn an_active_active_local_address_skips_nodes_without_a_serving_endpoint() {
    let vip = ip("192.0.2.202");
    let m = active_active(l2_local(READY, GONE));
    let n1 = plan(&m, "node1", &all_live(&m));
    assert_eq!(n1.l2_active_active.get(&vip), Some(&vec!["node1".to_string()]));
    let n2 = plan(&m, "node2", &all_live(&m));
    assert!(!n2.l2.contains_key(&vip) && !n2.l2_active_active.contains_key(&vip));
    assert!(
        n2.withdrawn[&vip].contains("served active-active by 1 node(s), not by node node2"),
        "{:?}",
        n2.withdrawn
    );
}

/// The model with every L2Advertisement preferring the nodes of `rack` by `weight`.
fn prefer_rack(mut m: ClusterModel, rack: &str, weight: u32) -> ClusterModel {
    let selector: ferrolb_api::NodePreference = serde_json::from_value(
        serde_json::json!({"nodeSelector": {"matchLabels": {"rack": rack}}, "weight": weight}),
    )
    .unwrap();
    for ad in m.l2_advertisements.values_mut() {
        ad.spec.node_preferences.push(selector.clone());
    }
    m
}

#[test]
fn a_preferred_node_owns_the_address_and_the_other_takes_over_without_it() {
    let vip = ip("192.0.2.201");
    let m = model_of(&(FIXTURE.to_string() + L2_SVC));
    let scored = election::owner(vip, ["node1", "node2"]).unwrap();
    // Prefer the node the score alone would not elect.
    let (preferred, rack, other) =
        if scored == "node1" { ("node2", "b", "node1") } else { ("node1", "a", "node2") };
    let m = prefer_rack(m, rack, 10);
    let live = all_live(&m);
    let p = plan(&m, preferred, &live);
    assert_eq!(p.l2.get(&vip), Some(&vec!["eth0".to_string()]));
    assert_eq!(p.l2_successors[&vip], vec![other.to_string()], "the unpreferred node stands by");
    let o = plan(&m, other, &live);
    assert!(o.withdrawn[&vip].contains(&format!("owned by node {preferred}")), "{:?}", o.withdrawn);
    // Failover kept: the preferred node leaves membership, the other serves.
    let without: BTreeSet<String> = [other.to_string()].into();
    assert!(plan(&m, other, &without).l2.contains_key(&vip));
    // A preference both nodes share leaves the score to elect.
    let both = prefer_rack(m, if rack == "a" { "b" } else { "a" }, 10);
    assert!(plan(&both, scored, &live).l2.contains_key(&vip));
}

#[test]
fn an_active_active_address_is_served_by_the_preferred_nodes_only() {
    let vip = ip("192.0.2.201");
    let m = prefer_rack(active_active(model_of(&(FIXTURE.to_string() + L2_SVC))), "b", 5);
    let live = all_live(&m);
    assert_eq!(plan(&m, "node2", &live).l2_active_active.get(&vip), Some(&vec!["node2".to_string()]));
    assert!(!plan(&m, "node1", &live).l2_active_active.contains_key(&vip));
    // The preferred node gone, the others serve.
    let without: BTreeSet<String> = ["node1".to_string()].into();
    assert_eq!(plan(&m, "node1", &without).l2_active_active.get(&vip), Some(&vec!["node1".to_string()]));
}

#[test]
fn link_bandwidth_follows_the_nodes_serving_endpoints_under_local_only() {
    let two_on_node2 = FIXTURE.replace(
        "- {addresses: [10.0.0.1], nodeName: node2, conditions: {ready: true}}\n",
        "- {addresses: [10.0.0.1], nodeName: node2, conditions: {ready: true}}\n- {addresses: [10.0.0.3], nodeName: node2, conditions: {ready: true}}\n",
    );
    let with = |value: &str| {
        let mut m = model_of(&two_on_node2);
        for ad in m.bgp_advertisements.values_mut() {
            ad.spec.link_bandwidth = Some(value.into());
        }
        m
    };
    let bandwidth = |m: &ClusterModel, me: &str, prefix: &str| {
        plan(m, me, &all_live(m)).bgp["router-a"].get(&net(prefix)).map(|a| a.link_bandwidth)
    };
    let m = with("endpoints");
    assert_eq!(bandwidth(&m, "node2", "203.0.113.20/32"), Some(Some(2_000_000_000)), "two endpoints");
    assert_eq!(bandwidth(&m, "node1", "203.0.113.20/32"), Some(Some(1_000_000_000)), "one, terminating");
    assert_eq!(bandwidth(&m, "node2", "203.0.113.10/32"), Some(None), "Cluster: equal weights");
    let m = with("10G");
    assert_eq!(bandwidth(&m, "node2", "203.0.113.10/32"), Some(Some(10_000_000_000)));
    assert_eq!(bandwidth(&model_of(&two_on_node2), "node2", "203.0.113.20/32"), Some(None), "not asked for");
}
