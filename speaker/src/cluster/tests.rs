//! The feed: watcher updates → the same model the static file gives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::model::DEFAULT_LB_CLASS;
use crate::model::tests::{FIXTURE, fixture_model};
use ferrolb_api::node_facts::{self, NodeFacts};
use ferrolb_api::{Object, parse_stream};

/// The fixture's objects as complete lists per kind, as watchers deliver them, each
/// object carrying server-set metadata and (for config kinds) status the speaker must ignore.
fn listed() -> Vec<Update> {
    let s = parse_stream("static.yaml", FIXTURE).unwrap();
    let mut nodes = Vec::new();
    let mut services = Vec::new();
    let mut slices = Vec::new();
    let mut pools = Vec::new();
    let mut peers = Vec::new();
    let mut bgp = Vec::new();
    let mut l2 = Vec::new();
    let server_meta = |m: &mut ObjectMeta, i: usize| {
        m.uid = Some(format!("uid-{i}"));
        m.resource_version = Some(format!("{}", 100 + i));
        m.generation = Some(1);
    };
    for (i, (_, o)) in s.objects.iter().enumerate() {
        match o.clone() {
            Object::Node(mut n) => {
                server_meta(&mut n.metadata, i);
                nodes.push(*n);
            }
            Object::Service(mut v) => {
                server_meta(&mut v.metadata, i);
                services.push(*v);
            }
            Object::EndpointSlice(mut e) => {
                server_meta(&mut e.metadata, i);
                slices.push(*e);
            }
            Object::IpAddressPool(mut p) => {
                server_meta(&mut p.metadata, i);
                p.status = Some(ferrolb_api::IpAddressPoolStatus { assigned_ipv4: 7, ..Default::default() });
                pools.push(*p);
            }
            Object::BgpPeer(mut p) => {
                server_meta(&mut p.metadata, i);
                peers.push(*p);
            }
            Object::BgpAdvertisement(mut a) => {
                server_meta(&mut a.metadata, i);
                bgp.push(*a);
            }
            Object::L2Advertisement(mut a) => {
                server_meta(&mut a.metadata, i);
                l2.push(*a);
            }
            _ => {}
        }
    }
    vec![
        Update::Node(Change::Listed(nodes)),
        Update::Service(Change::Listed(services)),
        Update::EndpointSlice(Change::Listed(slices)),
        Update::Pool(Change::Listed(pools)),
        Update::Peer(Change::Listed(peers)),
        Update::BgpAdvertisement(Change::Listed(bgp)),
        Update::L2Advertisement(Change::Listed(l2)),
        Update::BfdProfile(Change::Listed(Vec::new())),
        // No controller publishes the Nodes' facts here: every Node is watched.
        Update::NodeFacts(Change::Listed(Vec::new())),
    ]
}

fn synced_feed() -> (Feed, ClusterModel) {
    let mut feed = Feed::default();
    let mut model = ClusterModel::new(DEFAULT_LB_CLASS);
    for u in listed() {
        assert!(!feed.synced());
        feed.apply(&mut model, u);
    }
    assert!(feed.synced());
    (feed, model)
}

fn svc_key(name: &str) -> ServiceKey {
    ServiceKey { namespace: "default".into(), name: name.into() }
}

#[test]
fn complete_lists_give_the_static_files_model_and_sync() {
    let (feed, model) = synced_feed();
    assert_eq!(model, fixture_model());
    assert!(feed.uids.contains_key(&svc_key("web")));
}

#[test]
fn watch_errors_and_empty_partial_relists_change_nothing() {
    let (mut feed, mut model) = synced_feed();
    let before = model.clone();
    let failed = Update::WatchFailed { kind: "Service", error: "503 Service Unavailable".into() };
    assert_eq!(feed.apply(&mut model, failed), Applied::default());
    assert_eq!(model, before);
}

#[test]
fn a_relist_removes_exactly_what_is_gone() {
    let (mut feed, mut model) = synced_feed();
    let all = listed();
    let Update::Service(Change::Listed(services)) = &all[1] else { panic!() };
    let Update::Node(Change::Listed(nodes)) = &all[0] else { panic!() };
    let web_only: Vec<Service> =
        services.iter().filter(|s| s.metadata.name.as_deref() == Some("web")).cloned().collect();
    let applied = feed.apply(&mut model, Update::Service(Change::Listed(web_only)));
    assert!(applied.changed);
    assert_eq!(model.services.keys().cloned().collect::<Vec<_>>(), vec![svc_key("web")]);
    assert!(!feed.uids.contains_key(&svc_key("local")));
    // The same list again is no change; nor is a Node list with the same content.
    let web_only: Vec<Service> =
        services.iter().filter(|s| s.metadata.name.as_deref() == Some("web")).cloned().collect();
    assert!(!feed.apply(&mut model, Update::Service(Change::Listed(web_only))).changed);
    assert!(!feed.apply(&mut model, Update::Node(Change::Listed(nodes.clone()))).changed);
    // A deleted slice leaves its Service without endpoints.
    let Update::EndpointSlice(Change::Listed(slices)) = &all[2] else { panic!() };
    let gone = Update::EndpointSlice(Change::Delete(Box::new(slices[0].clone())));
    assert!(feed.apply(&mut model, gone).changed);
    assert!(model.endpoint_slices.is_empty());
}

#[test]
fn a_node_heartbeat_or_a_pool_status_write_is_no_change() {
    let (mut feed, mut model) = synced_feed();
    let all = listed();
    let Update::Node(Change::Listed(nodes)) = &all[0] else { panic!() };
    let mut n = nodes[0].clone();
    n.metadata.resource_version = Some("999".into());
    assert!(!feed.apply(&mut model, Update::Node(Change::Apply(Box::new(n.clone())))).changed);
    n.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(crate::model::EXCLUDE_LABEL.into(), String::new());
    assert!(feed.apply(&mut model, Update::Node(Change::Apply(Box::new(n)))).changed);
    assert!(model.nodes["node1"].excluded);

    let Update::Pool(Change::Listed(pools)) = &all[3] else { panic!() };
    let mut p = pools[0].clone();
    p.status = Some(ferrolb_api::IpAddressPoolStatus { assigned_ipv4: 8, ..Default::default() });
    p.metadata.resource_version = Some("1000".into());
    let a = feed.apply(&mut model, Update::Pool(Change::Apply(Box::new(p))));
    assert_eq!(a, Applied::default());
}

#[test]
fn an_invalid_configuration_keeps_the_last_good_one_and_names_object_and_field() {
    let (mut feed, mut model) = synced_feed();
    let before = model.clone();
    let all = listed();
    let Update::Peer(Change::Listed(peers)) = &all[4] else { panic!() };
    let mut bad = peers[0].clone();
    bad.spec.hold_time = "2s".into();
    let a = feed.apply(&mut model, Update::Peer(Change::Apply(Box::new(bad))));
    assert!(!a.changed && !a.config_applied);
    let errors = a.config_rejected.expect("rejected");
    assert_eq!(
        (errors[0].kind, errors[0].name.as_str(), errors[0].field.as_str()),
        ("BGPPeer", "router-a", "spec.holdTime")
    );
    assert_eq!(model, before, "the last good configuration stays");
    // Fixing it applies the fixed set.
    let mut good = peers[0].clone();
    good.spec.hold_time = "9s".into();
    let a = feed.apply(&mut model, Update::Peer(Change::Apply(Box::new(good))));
    assert!(a.changed && a.config_applied);
    assert_eq!(model.peers["router-a"].spec.hold_time, "9s");
}

#[test]
fn deletions_reach_the_incremental_planner() {
    let (mut feed, mut model) = synced_feed();
    let all = listed();
    let Update::Service(Change::Listed(services)) = &all[1] else { panic!() };
    let Update::Node(Change::Listed(nodes)) = &all[0] else { panic!() };
    let _ = model.take_changes();
    let web = services.iter().find(|s| s.metadata.name.as_deref() == Some("web")).cloned().unwrap();
    assert!(feed.apply(&mut model, Update::Service(Change::Delete(Box::new(web)))).changed);
    let changes = model.take_changes();
    assert!(changes.services.contains(&svc_key("web")), "a deleted Service is replanned: {changes:?}");
    assert!(feed.apply(&mut model, Update::Node(Change::Delete(Box::new(nodes[0].clone())))).changed);
    assert!(model.take_changes().all, "a deleted Node replans everything");
}

#[test]
fn a_failing_watch_retries_within_seconds_however_long_the_outage() {
    use kube::runtime::utils::Backoff;
    let mut b = WatchBackoff::default();
    let delays: Vec<Duration> = b.by_ref().take(50).collect();
    let cap = WatchBackoff::MAX.mul_f64(1.5);
    assert!(delays.iter().all(|d| *d <= cap), "{delays:?}");
    assert!(delays[0] >= WatchBackoff::MIN && delays[0] <= WatchBackoff::MIN.mul_f64(1.5), "{delays:?}");
    // Doubling until the cap: the tenth delay is there.
    assert!(delays[9] >= WatchBackoff::MAX, "{delays:?}");
    b.reset();
    assert!(b.next().is_some_and(|d| d <= WatchBackoff::MIN.mul_f64(1.5)));
}

#[test]
fn the_first_retries_of_a_large_cluster_spread_over_seconds() {
    assert!(relist_spread(3) < Duration::from_millis(10));
    let spread = relist_spread(5000);
    assert_eq!(spread, Duration::from_secs(10));
    // 1 000 speakers' first retries after an apiserver restart: spread over the window,
    // about a tenth in each tenth of it (counted, not timed).
    let mut per_second = [0u32; 12];
    for _ in 0..1000 {
        let d = WatchBackoff::for_nodes(5000).next().unwrap();
        per_second[usize::try_from(d.as_secs()).unwrap().min(11)] += 1;
    }
    assert!(per_second[1..10].iter().all(|n| (50..=150).contains(n)), "{per_second:?}");
    assert_eq!(per_second[11], 0, "past MIN × 1.5 + the spread: {per_second:?}");
    // The spread is for the first retry only: the next ones double as before.
    let mut b = WatchBackoff::for_nodes(5000);
    b.next();
    assert!(b.next().is_some_and(|d| d <= WatchBackoff::MIN.mul_f64(3.0)));
}

/// Every map keyed by a Service shares the strings of the model's key (one allocation per
/// Service name and per namespace, not two per map), and the uids are those of served
/// Services only. The heap budget (`tests/heap_per_service.rs`) counts what this saves.
#[test]
fn the_keys_of_every_map_share_the_models_strings() {
    let (mut feed, mut model) = synced_feed();
    let web = model.services.get_key_value(&svc_key("web")).unwrap().0.clone();
    // Service `local` has an EndpointSlice in the fixture.
    let local = model.services.get_key_value(&svc_key("local")).unwrap().0;
    let (in_slices, _) = model.endpoint_slices.get_key_value(&svc_key("local")).unwrap();
    let (in_uids, _) = feed.uids.get_key_value(&svc_key("local")).unwrap();
    for other in [in_slices, in_uids] {
        assert!(Arc::ptr_eq(&local.name, &other.name) && Arc::ptr_eq(&local.namespace, &other.namespace));
    }
    let namespaces: Vec<&Arc<str>> = model.services.keys().map(|k| &k.namespace).collect();
    assert!(
        namespaces.len() > 1 && namespaces.windows(2).all(|w| Arc::ptr_eq(w[0], w[1])),
        "one namespace string"
    );
    // A Service applied later takes its namespace's string too.
    let svc: Service = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "late", "namespace": "default", "uid": "u-late"},
        "spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.99"}]}}}),
    )
    .unwrap();
    feed.apply(&mut model, Update::Service(Change::Apply(Box::new(svc))));
    let (late, _) = feed.uids.get_key_value(&svc_key("late")).unwrap();
    assert!(Arc::ptr_eq(&late.namespace, &web.namespace));
    assert!(Arc::ptr_eq(&late.name, &model.services.get_key_value(&svc_key("late")).unwrap().0.name));
    // A Service the model does not serve keeps no uid.
    let plain: Service = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "plain", "namespace": "default", "uid": "u-plain"},
        "spec": {"type": "ClusterIP"}}),
    )
    .unwrap();
    feed.apply(&mut model, Update::Service(Change::Apply(Box::new(plain))));
    assert!(!feed.uids.contains_key(&svc_key("plain")));
}

/// The fixture's lists without its L2Advertisements, this node's own Node listed alone
/// (as the watch of [`NodeScope::Own`] lists it), and the other Nodes.
fn listed_without_l2(me: &str) -> (Vec<Update>, Vec<Node>) {
    let mut all = listed();
    let Update::Node(Change::Listed(nodes)) = all.remove(0) else { panic!() };
    let own: Vec<Node> = nodes.iter().filter(|n| n.metadata.name.as_deref() == Some(me)).cloned().collect();
    assert_eq!(own.len(), 1, "the fixture has {me}");
    for u in &mut all {
        if let Update::L2Advertisement(Change::Listed(l2)) = u {
            assert!(!l2.is_empty(), "the fixture has L2Advertisements");
            l2.clear();
        }
    }
    all.insert(0, Update::OwnNode(Change::Listed(own)));
    (all, nodes)
}

fn l2_advertisements() -> Vec<L2Advertisement> {
    listed()
        .into_iter()
        .find_map(|u| match u {
            Update::L2Advertisement(Change::Listed(l2)) => Some(l2),
            _ => None,
        })
        .unwrap()
}

#[test]
fn without_l2_the_feed_syncs_on_its_own_node_alone() {
    let mut feed = Feed::default();
    let mut model = ClusterModel::new(DEFAULT_LB_CLASS);
    assert_eq!(feed.node_scope(), None, "unknown until the L2Advertisements are listed");
    let (updates, _) = listed_without_l2("node1");
    for u in updates {
        feed.apply(&mut model, u);
    }
    assert_eq!(feed.node_scope(), Some(NodeScope::Own));
    assert!(feed.synced() && !feed.every_node());
    assert_eq!(model.nodes.keys().collect::<Vec<_>>(), ["node1"]);
    // It cannot count the Nodes: its relists spread as a large cluster's.
    assert_eq!(feed.cluster_size(&model), UNCOUNTED_CLUSTER);
    assert_eq!(relist_spread(UNCOUNTED_CLUSTER), Duration::from_secs(10));
}

/// An L2Advertisement created on a BGP-only cluster: every Node is wanted, and the model
/// is not synced (nothing is planned) until every Node is listed: an election among this
/// node alone would claim every address. A list of its own Node only, from the watch
/// being replaced, neither syncs nor drops the others.
#[test]
fn an_l2_advertisement_widens_the_node_scope_and_waits_for_every_node() {
    let mut feed = Feed::default();
    let mut model = ClusterModel::new(DEFAULT_LB_CLASS);
    let (updates, nodes) = listed_without_l2("node1");
    for u in updates {
        feed.apply(&mut model, u);
    }
    let own: Vec<Node> = model
        .nodes
        .keys()
        .filter_map(|k| nodes.iter().find(|n| n.metadata.name.as_ref() == Some(k)).cloned())
        .collect();
    let ad = l2_advertisements().remove(0);
    feed.apply(&mut model, Update::L2Advertisement(Change::Apply(Box::new(ad))));
    assert_eq!(feed.node_scope(), None, "unknown until the published facts are listed");
    assert_eq!(feed.unsynced(), ["Node"]);
    // An event before the list (of a watch stopped meanwhile) says nothing.
    let complete = node_facts::complete_config_map("ferrolb-system");
    feed.apply(&mut model, Update::NodeFacts(Change::Apply(Box::new(complete))));
    assert_eq!(feed.node_scope(), None);
    // A facts watch that fails (e.g. refused by an older Role) leaves every Node watched.
    let refused = Update::WatchFailed { kind: "NodeFacts", error: "403 Forbidden".into() };
    feed.apply(&mut model, refused);
    assert_eq!(feed.node_scope(), Some(NodeScope::All));
    feed.apply(&mut model, Update::NodeFacts(Change::Listed(Vec::new())));
    assert_eq!(feed.node_scope(), Some(NodeScope::All), "no facts published");
    assert_eq!(feed.unsynced(), ["Node"]);
    assert!(!feed.apply(&mut model, Update::OwnNode(Change::Listed(own))).changed);
    assert_eq!(feed.unsynced(), ["Node"], "its own Node listed is not every Node");
    assert!(feed.apply(&mut model, Update::Node(Change::Listed(nodes.clone()))).changed);
    assert!(feed.synced() && feed.every_node());
    assert_eq!(model.nodes.len(), nodes.len());
}

/// The last L2Advertisement deleted: its own Node is enough from then on; the model
/// holds every Node until that watch lists it, and stays synced meanwhile.
#[test]
fn the_last_l2_advertisement_gone_narrows_the_node_scope_without_a_pause() {
    let (mut feed, mut model) = synced_feed();
    assert_eq!(feed.node_scope(), Some(NodeScope::All));
    assert_eq!(feed.cluster_size(&model), model.nodes.len());
    feed.apply(&mut model, Update::L2Advertisement(Change::Listed(Vec::new())));
    assert_eq!(feed.node_scope(), Some(NodeScope::Own));
    assert!(feed.synced() && feed.every_node());
    let Update::Node(Change::Listed(nodes)) = listed().remove(0) else { panic!() };
    let own: Vec<Node> = nodes.into_iter().filter(|n| n.metadata.name.as_deref() == Some("node2")).collect();
    assert!(feed.apply(&mut model, Update::OwnNode(Change::Listed(own))).changed);
    assert!(feed.synced() && !feed.every_node());
    assert_eq!(model.nodes.keys().collect::<Vec<_>>(), ["node2"]);
}

/// The fixture's lists as a speaker of an L2 cluster gets them where the controller
/// publishes the Nodes' facts: its own Node listed alone, the facts of every Node, and
/// (when `complete`) the word that all are published; and the Nodes.
fn listed_with_facts(me: &str, complete: bool) -> (Vec<Update>, Vec<Node>) {
    let mut all = listed();
    let Update::Node(Change::Listed(nodes)) = all.remove(0) else { panic!() };
    let own: Vec<Node> = nodes.iter().filter(|n| n.metadata.name.as_deref() == Some(me)).cloned().collect();
    let mut facts: Vec<ConfigMap> = nodes.iter().map(|n| facts_of(n, "")).collect();
    if complete {
        facts.push(node_facts::complete_config_map("ferrolb-system"));
    }
    *all.last_mut().unwrap() = Update::NodeFacts(Change::Listed(facts));
    all.push(Update::OwnNode(Change::Listed(own)));
    (all, nodes)
}

/// The facts ConfigMap of `n`, with the label `zone=<zone>` added unless empty.
fn facts_of(n: &Node, zone: &str) -> ConfigMap {
    let mut f = NodeFacts::of(n);
    if !zone.is_empty() {
        f.labels.insert("zone".into(), zone.into());
    }
    f.config_map(n.metadata.name.as_deref().unwrap(), n.metadata.uid.as_deref(), "ferrolb-system")
}

/// With every Node's facts published, a speaker of an L2 cluster holds every node as
/// when it watches every Node, from its own Node and the others' facts; a change of the
/// facts changes the model, facts of its own node do not (its Node is watched).
#[test]
fn published_facts_take_the_place_of_every_node() {
    let (whole_feed, whole) = synced_feed();
    assert_eq!(whole_feed.node_scope(), Some(NodeScope::All));
    let mut feed = Feed::default();
    let mut model = ClusterModel::new(DEFAULT_LB_CLASS);
    let (updates, nodes) = listed_with_facts("node1", true);
    for u in updates {
        feed.apply(&mut model, u);
    }
    assert_eq!(feed.node_scope(), Some(NodeScope::Facts));
    assert!(feed.synced() && feed.every_node());
    assert_eq!(model.nodes, whole.nodes, "the same nodes as from every Node");
    assert_eq!(feed.cluster_size(&model), nodes.len());

    let other = nodes.iter().find(|n| n.metadata.name.as_deref() == Some("node2")).unwrap();
    assert!(feed.apply(&mut model, Update::NodeFacts(Change::Apply(Box::new(facts_of(other, "b"))))).changed);
    assert_eq!(model.nodes["node2"].labels.get("zone"), Some("b"));
    let me = nodes.iter().find(|n| n.metadata.name.as_deref() == Some("node1")).unwrap();
    let mine = facts_of(me, "b");
    assert!(!feed.apply(&mut model, Update::NodeFacts(Change::Apply(Box::new(mine)))).changed);
    assert_eq!(model.nodes["node1"].labels.get("zone"), None, "its own Node says so");
    assert!(feed.apply(&mut model, Update::NodeFacts(Change::Delete(Box::new(facts_of(other, ""))))).changed);
    assert!(!model.nodes.contains_key("node2"));
    // A Node list from the watch of every Node being replaced changes nothing.
    assert!(!feed.apply(&mut model, Update::Node(Change::Listed(nodes.clone()))).changed);
    assert!(!model.nodes.contains_key("node2"));
}

/// Facts not (or no longer) said to be complete are not elected from: every Node is
/// watched, and nothing is planned until they are listed.
#[test]
fn facts_not_all_published_leave_every_node_watched() {
    let mut feed = Feed::default();
    let mut model = ClusterModel::new(DEFAULT_LB_CLASS);
    let (mut updates, nodes) = listed_with_facts("node1", false);
    updates.pop();
    for u in updates {
        feed.apply(&mut model, u);
    }
    assert_eq!(feed.node_scope(), Some(NodeScope::All));
    assert_eq!(feed.unsynced(), ["Node"]);
    feed.apply(&mut model, Update::Node(Change::Listed(nodes.clone())));
    assert!(feed.synced());
    // Said complete: its own Node is listed again (the watch replaced), then synced.
    let complete = node_facts::complete_config_map("ferrolb-system");
    feed.apply(&mut model, Update::NodeFacts(Change::Apply(Box::new(complete.clone()))));
    assert_eq!(feed.node_scope(), Some(NodeScope::Facts));
    assert!(feed.synced(), "every Node is more than enough meanwhile");
    let own: Vec<Node> =
        nodes.iter().filter(|n| n.metadata.name.as_deref() == Some("node1")).cloned().collect();
    feed.apply(&mut model, Update::OwnNode(Change::Listed(own)));
    assert!(feed.synced() && feed.every_node());
    assert_eq!(model.nodes.len(), nodes.len());
    // No longer complete (a controller retracting them): every Node again.
    feed.apply(&mut model, Update::NodeFacts(Change::Delete(Box::new(complete))));
    assert_eq!(feed.node_scope(), Some(NodeScope::All));
    assert_eq!(feed.unsynced(), ["Node"]);
}
