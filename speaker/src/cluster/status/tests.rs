#![allow(clippy::unwrap_used)]
use super::desired::covered;
use super::*;
use crate::model::ClusterModel;
use crate::plan::diff::PlanChange;
use crate::plan::{PeerRoutes, Plan, RouteAttrs};
use ferrolb_api::AnnouncementProtocol;

#[test]
fn the_plan_becomes_one_object_per_service_and_protocol_with_owner_and_reasons() {
    let text = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {type: LoadBalancer}\nstatus: {loadBalancer: {ingress: [{ip: 203.0.113.10}, {ip: 192.0.2.200}]}}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: down, namespace: shop}\nspec: {type: LoadBalancer}\nstatus: {loadBalancer: {ingress: [{ip: 203.0.113.11}]}}\n";
    let stream = ferrolb_api::parse_stream("s.yaml", text).unwrap();
    let model = ClusterModel::from_stream(stream, "s.yaml", crate::model::DEFAULT_LB_CLASS).unwrap();
    let mut plan = Plan::default();
    let routes = PeerRoutes::unit("203.0.113.10/32".parse().unwrap(), RouteAttrs::default());
    plan.bgp.insert("router-a".into(), routes);
    plan.bgp.insert("router-b".into(), PeerRoutes::new());
    plan.l2.insert("192.0.2.200".parse().unwrap(), vec!["eth1".into()]);
    plan.withdrawn.insert("203.0.113.11".parse().unwrap(), "no serving endpoint".into());
    let key = |n: &str| ServiceKey { namespace: "shop".into(), name: n.into() };
    let uids = BTreeMap::from([(key("web"), "uid-web".into()), (key("down"), "uid-down".into())]);
    let d = desired(&model, &plan, &uids);
    let objects: Vec<ServiceAnnouncement> = d
        .iter()
        .flat_map(|(k, s)| {
            s.objects.iter().map(|r| r.object(k, &object_name(&k.name, "node1", r.protocol), "node1"))
        })
        .collect();
    let names: Vec<&str> = objects.iter().map(|o| o.metadata.name.as_deref().unwrap()).collect();
    assert_eq!(names, vec!["web-node1-bgp", "web-node1-l2"]);
    let bgp = &objects[0];
    assert_eq!(bgp.spec.addresses, vec!["203.0.113.10"]);
    assert_eq!(bgp.spec.peers, vec!["router-a"], "only peers that get the prefix");
    assert!(bgp.spec.interfaces.is_empty());
    assert_eq!(
        (bgp.spec.node.as_str(), bgp.spec.service.namespace.as_str(), bgp.spec.service.name.as_str()),
        ("node1", "shop", "web")
    );
    let owner = &bgp.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("Service", "web", "uid-web"));
    assert_eq!(bgp.metadata.namespace.as_deref(), Some("shop"));
    assert_eq!(bgp.metadata.labels.as_ref().unwrap()[NODE_LABEL], "node1");
    let l2 = &objects[1];
    assert_eq!(
        (l2.spec.protocol, l2.spec.interfaces.clone(), l2.spec.peers.clone(), l2.spec.addresses.clone()),
        (AnnouncementProtocol::L2, vec!["eth1".to_owned()], Vec::new(), vec!["192.0.2.200".to_owned()])
    );
    assert_eq!(d[&key("down")].reason.as_deref(), Some("203.0.113.11: no serving endpoint"));
    assert!(d[&key("down")].objects.is_empty());
    // One owner for L2 (its Events say who); every node at once when active-active.
    assert!(!d[&key("web")].shared);
    plan.l2_active_active.insert("192.0.2.200".parse().unwrap(), vec!["node1".into(), "node2".into()]);
    assert!(desired(&model, &plan, &uids)[&key("web")].shared);
    // Without a uid (not seen in the API) no object can be owned: none is written.
    let d = desired(&model, &plan, &BTreeMap::new());
    assert!(d.is_empty());
}

/// The writer keeps a record of what the API returns and compares it with the wanted one:
/// an object it wrote reads back as the record it came from, and one whose owner
/// reference someone changed, or whose spec it would not write, does not (so it is
/// written again).
#[test]
fn an_object_written_reads_back_as_its_record_and_a_changed_one_does_not() {
    let record = Record {
        protocol: AnnouncementProtocol::Bgp,
        addresses: ["203.0.113.10".parse().unwrap(), "2001:db8::10".parse().unwrap()].into(),
        via: Interner::default().names(&["router-a", "router-b"]),
        owner: "uid-web".into(),
    };
    let svc = ServiceKey { namespace: "shop".into(), name: "web".into() };
    let mut obj = record.object(&svc, "web-node1-bgp", "node1");
    obj.metadata.uid = Some("sa-uid".into());
    obj.metadata.resource_version = Some("42".into());
    assert_eq!(Record::of(obj.clone()), record);
    let changed = |f: &dyn Fn(&mut ServiceAnnouncement)| {
        let mut o = obj.clone();
        f(&mut o);
        Record::of(o)
    };
    assert_eq!(
        &*changed(&|o| o.metadata.owner_references.as_mut().unwrap()[0].controller = Some(true)).owner,
        ""
    );
    assert_ne!(changed(&|o| o.metadata.owner_references = None), record);
    // Text that parses to the same address but is not what the speaker writes.
    assert_eq!(&*changed(&|o| o.spec.addresses[1] = "2001:DB8::10".into()).owner, "");
    assert_eq!(&*changed(&|o| o.spec.addresses[0] = "not an address".into()).owner, "");
    // Interfaces on a BGP object: the speaker writes none.
    assert_eq!(&*changed(&|o| o.spec.interfaces = vec!["eth1".into()]).owner, "");
    assert_ne!(changed(&|o| o.spec.peers.pop().map(drop).unwrap_or_default()), record);
}

/// Equal peer lists are one allocation however many statuses hold them; a list nobody
/// holds any more is forgotten.
#[test]
fn equal_name_lists_are_shared_and_unused_ones_forgotten() {
    let mut names = Interner::default();
    let a = names.names(&["router-a", "router-b"]);
    let b = names.names(&["router-a".to_owned(), "router-b".to_owned()]);
    assert!(Arc::ptr_eq(&a, &b));
    assert!(!Arc::ptr_eq(&a, &names.names(&["router-b", "router-a"])), "order is kept");
    drop((a, b));
    let c = names.names(&["router-c"]);
    assert_eq!(names.names(&["router-a", "router-b"]).len(), 2, "made again when asked again");
    assert_eq!(Arc::strong_count(&c), 2, "the interner and c");
}

/// Services `names` in namespace `shop`, `web-i` at 203.0.113.i.
fn model_of(names: &[usize]) -> ClusterModel {
    let text: String = names
        .iter()
        .map(|i| format!("---\napiVersion: v1\nkind: Service\nmetadata: {{name: web-{i}, namespace: shop}}\nspec: {{type: LoadBalancer}}\nstatus: {{loadBalancer: {{ingress: [{{ip: 203.0.113.{i}}}]}}}}\n"))
        .collect();
    let stream = ferrolb_api::parse_stream("s.yaml", &text).unwrap();
    ClusterModel::from_stream(stream, "s.yaml", crate::model::DEFAULT_LB_CLASS).unwrap()
}

fn web(i: usize) -> ServiceKey {
    ServiceKey { namespace: "shop".into(), name: format!("web-{i}").into() }
}

/// A plan announcing `hosts` (203.0.113.i/32) and `aggregates` to router-a.
fn plan_of(hosts: &[usize], aggregates: &[&str]) -> Plan {
    let mut routes: PeerRoutes = hosts
        .iter()
        .map(|i| (format!("203.0.113.{i}/32").parse::<ipnet::IpNet>().unwrap(), RouteAttrs::default()))
        .collect();
    routes.extend(aggregates.iter().map(|a| (a.parse::<ipnet::IpNet>().unwrap(), RouteAttrs::default())));
    let mut plan = Plan::default();
    plan.bgp.insert("router-a".into(), routes);
    plan
}

/// Applies `u` to `view` (what the writer would hold).
fn absorb(view: &mut BTreeMap<ServiceKey, Shown>, u: Update) -> Vec<ServiceKey> {
    if u.complete {
        view.clear();
    }
    let keys: Vec<ServiceKey> = u.services.keys().cloned().collect();
    for (k, s) in u.services {
        match s {
            Some(s) => view.insert(k, Shown::clone(&s)),
            None => view.remove(&k),
        };
    }
    keys
}

/// The tracker names exactly the Services a plan or the model changed, and what it says
/// adds up to the whole desired set computed from scratch.
#[test]
fn the_tracker_names_only_the_services_whose_status_changed() {
    let model = model_of(&[1, 2, 3, 40, 41]);
    let mut uids: BTreeMap<ServiceKey, Arc<str>> =
        model.services.keys().map(|k| (k.clone(), format!("uid-{}", k.name).into())).collect();
    let (mut t, mut view) = (Tracker::default(), BTreeMap::new());
    let none = crate::model::Changes::none();
    let scratch = |plan: &Plan, uids: &BTreeMap<ServiceKey, Arc<str>>| desired(&model, plan, uids);
    let mut step =
        |t: &mut Tracker, old: &Plan, new: &Plan, uids: &BTreeMap<ServiceKey, Arc<str>>, changed| {
            let said = t
                .update(&model, &PlanChange::between(old, new), uids, changed)
                .map(|u| (u.complete, absorb(&mut view, u)));
            assert_eq!(view, scratch(new, uids), "the tracker's sum differs from the whole set");
            said.map(|(complete, keys)| {
                assert_eq!(complete, keys.len() == 5, "only the first is complete");
                keys
            })
        };
    // The first plan: every Service, and said to be complete.
    let p1 = plan_of(&[1, 2, 3, 40, 41], &[]);
    assert_eq!(step(&mut t, &Plan::default(), &p1, &uids, &none).map(|k| k.len()), Some(5));
    assert_eq!(step(&mut t, &p1, &p1.clone(), &uids, &none), None, "nothing changed, nothing said");
    // web-2 withdrawn with a reason: web-2 alone.
    let mut p2 = plan_of(&[1, 3, 40, 41], &[]);
    p2.withdrawn.insert("203.0.113.2".parse().unwrap(), "no serving endpoint".into());
    assert_eq!(step(&mut t, &p1, &p2, &uids, &none), Some(vec![web(2)]));
    // An aggregate covering 203.0.113.32/27 replaces two host routes: the Services under it.
    let p3 = {
        let mut p = plan_of(&[1, 3], &["203.0.113.32/27"]);
        p.withdrawn = p2.withdrawn.clone();
        p
    };
    assert_eq!(step(&mut t, &p2, &p3, &uids, &none), None, "covered the same: no change shown");
    let p4 = {
        let mut p = plan_of(&[1, 3], &[]);
        p.withdrawn = p2.withdrawn.clone();
        p
    };
    assert_eq!(step(&mut t, &p3, &p4, &uids, &none), Some(vec![web(40), web(41)]));
    // A Service recreated under its name (new uid, same plan): that Service.
    uids.insert(web(3), "uid-again".into());
    let changed = crate::model::Changes { all: false, services: BTreeSet::from([web(3)]) };
    assert_eq!(step(&mut t, &p4, &p4.clone(), &uids, &changed), Some(vec![web(3)]));
    // web-1 answered for by ARP too, then by every node at once: that Service each time.
    let mut p5 = p4.clone();
    p5.l2.insert("203.0.113.1".parse().unwrap(), vec!["eth1".into()]);
    assert_eq!(step(&mut t, &p4, &p5, &uids, &none), Some(vec![web(1)]));
    let mut p6 = p5.clone();
    p6.l2_active_active.insert("203.0.113.1".parse().unwrap(), vec!["node1".into()]);
    assert_eq!(step(&mut t, &p5, &p6, &uids, &none), Some(vec![web(1)]));
}

#[test]
fn host_routes_and_aggregates_cover_an_address() {
    let routes: PeerRoutes = [
        ("203.0.113.0/24".parse::<ipnet::IpNet>().unwrap(), RouteAttrs::default()),
        ("2001:db8:3::10/128".parse().unwrap(), RouteAttrs::default()),
    ]
    .into_iter()
    .collect();
    assert!(covered(&routes, "203.0.113.77".parse().unwrap()));
    assert!(covered(&routes, "2001:db8:3::10".parse().unwrap()));
    assert!(!covered(&routes, "2001:db8:3::11".parse().unwrap()));
    assert!(!covered(&routes, "198.51.100.1".parse().unwrap()));
}

#[test]
fn names_are_valid_unique_and_at_most_63_characters() {
    assert_eq!(object_name("web", "node1", AnnouncementProtocol::Bgp), "web-node1-bgp");
    let long_node = "a-very-long-node-name.with.dots.example.invalid.cluster.local.region";
    let a = object_name("service-with-a-long-name", long_node, AnnouncementProtocol::L2);
    let b = object_name("service-with-a-long-name", &format!("{long_node}2"), AnnouncementProtocol::L2);
    assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
    assert_ne!(a, b);
    assert!(a.starts_with("service-with-a-long-name-a-very"), "{a}");
    assert!(!a.contains("--") && a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
}

#[test]
fn a_flapping_service_gets_a_burst_then_one_event_per_refill() {
    let mut l = EventLimiter::default();
    let k = ServiceKey { namespace: "default".into(), name: "web".into() };
    let other = ServiceKey { namespace: "default".into(), name: "db".into() };
    let t0 = Instant::now();
    let allowed = (0..10).filter(|i| l.allow(&k, t0 + Duration::from_millis(100 * i))).count();
    assert_eq!(allowed, EVENT_BURST as usize);
    assert!(l.allow(&other, t0), "buckets are per Service");
    assert!(!l.allow(&k, t0 + Duration::from_secs(5)));
    assert!(l.allow(&k, t0 + EVENT_REFILL + Duration::from_secs(1)));
    assert!(!l.allow(&k, t0 + EVENT_REFILL + Duration::from_secs(2)));
}

/// A burst of Services (10 000 created at once) costs a speaker a burst of Events and
/// then one a second, not an Event each.
#[test]
fn many_services_at_once_get_a_burst_of_events_in_all_then_one_a_second() {
    let mut l = EventLimiter::default();
    let t0 = Instant::now();
    let key = |i: usize| ServiceKey { namespace: "bulk".into(), name: format!("svc-{i}").into() };
    let allowed = (0..10_000).filter(|i| l.allow(&key(*i), t0)).count();
    assert_eq!(allowed, EVENTS_BURST as usize);
    let later = t0 + EVENTS_REFILL * 5;
    let allowed = (10_000..20_000).filter(|i| l.allow(&key(*i), later)).count();
    assert_eq!(allowed, 5, "one more a second");
}

#[test]
fn buckets_are_forgotten_once_refilled() {
    let mut l = EventLimiter::with_total(u32::MAX, Duration::from_secs(1));
    let t0 = Instant::now();
    let key = |i: usize| ServiceKey { namespace: "churn".into(), name: format!("svc-{i}").into() };
    for i in 0..10_000 {
        assert!(l.allow(&key(i), t0));
    }
    let busy = key(0);
    while l.allow(&busy, t0) {}
    l.prune(t0 + EVENT_REFILL * 2);
    assert_eq!(l.len(), 1, "only the emptied bucket is still refilling");
    l.prune(t0 + EVENT_REFILL * (EVENT_BURST + 1));
    assert!(l.is_empty(), "{} buckets left", l.len());
}
