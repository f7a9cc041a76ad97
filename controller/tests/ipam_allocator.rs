//! One test per allocation rule of `ferrolb_controller::ipam` (see docs/ipam.md).

// Test helpers outside #[test] fns are not covered by allow-unwrap-in-tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::net::IpAddr;

use ferrolb_controller::ipam::*;
use ferrolb_testkit::ip;

fn pool(name: &str, ranges: &[&str]) -> PoolSpec {
    PoolSpec::new(name, ranges.iter().map(|r| r.parse().unwrap()).collect())
}

/// Fixture builder for requests: `svc("ns", "name").ports(&[80]).shared("k")`.
fn svc(ns: &str, name: &str) -> ServiceRequest {
    ServiceRequest::new(ns, name)
}

trait Build {
    fn ports(self, p: &[u16]) -> Self;
    fn shared(self, k: &str) -> Self;
    fn want(self, addrs: &[&str]) -> Self;
    fn in_pool(self, p: &str) -> Self;
    fn fam(self, f: FamilyPolicy) -> Self;
    fn local(self, backends: &str) -> Self;
    fn created(self, t: i64) -> Self;
    fn label(self, k: &str, v: &str) -> Self;
    fn ns_label(self, k: &str, v: &str) -> Self;
}

impl Build for ServiceRequest {
    fn ports(mut self, p: &[u16]) -> Self {
        self.ports = p.iter().map(|&p| (Protocol::Tcp, p)).collect();
        self
    }
    fn shared(mut self, k: &str) -> Self {
        self.sharing_key = Some(k.into());
        self
    }
    fn want(mut self, addrs: &[&str]) -> Self {
        self.requested = addrs.iter().map(|a| ip(a)).collect();
        if self.requested.len() == 2 {
            self.families = FamilyPolicy::RequireDualStack(Family::of(&self.requested[0]));
        } else if let Some(a) = self.requested.first() {
            self.families = FamilyPolicy::SingleStack(Family::of(a));
        }
        self
    }
    fn in_pool(mut self, p: &str) -> Self {
        self.pool = Some(p.into());
        self
    }
    fn fam(mut self, f: FamilyPolicy) -> Self {
        self.families = f;
        self
    }
    fn local(mut self, backends: &str) -> Self {
        self.traffic_policy = TrafficPolicy::Local;
        self.backend_key = Some(backends.into());
        self
    }
    fn created(mut self, t: i64) -> Self {
        self.created = t;
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        std::sync::Arc::make_mut(&mut self.service_labels).insert(k.into(), v.into());
        self
    }
    fn ns_label(mut self, k: &str, v: &str) -> Self {
        std::sync::Arc::make_mut(&mut self.namespace_labels).insert(k.into(), v.into());
        self
    }
}

fn addrs(a: &[Assigned]) -> Vec<IpAddr> {
    a.iter().map(|a| a.addr).collect()
}

fn pools_of(a: &[Assigned]) -> Vec<String> {
    a.iter()
        .map(|a| match &a.placement {
            Placement::Pool(p) => p.clone(),
            Placement::Orphaned(r) => format!("orphan: {r}"),
        })
        .collect()
}

fn key(ns: &str, name: &str) -> ServiceKey {
    ServiceKey::new(ns, name)
}

// ---- requested addresses --------------------------------------------------------------

#[test]
fn requested_address_must_be_in_a_pool() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/29"]));
    let got = a.allocate(svc("ns", "web").want(&["192.0.2.5"])).unwrap();
    assert_eq!(addrs(&got), vec![ip("192.0.2.5")]);
    assert_eq!(pools_of(&got), vec!["lan"]);

    let e = a.allocate(svc("ns", "x").want(&["192.0.2.7"]).in_pool("wan")).unwrap_err();
    assert_eq!(e.to_string(), "pool wan does not exist");
    let e = a.allocate(svc("ns", "x").want(&["203.0.113.5"])).unwrap_err();
    assert_eq!(e.to_string(), "address 203.0.113.5 is not in any pool");
    a.set_pool(pool("wan", &["203.0.113.0/24"]));
    let e = a.allocate(svc("ns", "x").want(&["192.0.2.7"]).in_pool("wan")).unwrap_err();
    assert_eq!(e.to_string(), "address 192.0.2.7 is not in pool wan");
}

#[test]
fn requested_address_used_by_a_non_sharer_is_refused_with_the_holder() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["203.0.113.0/24"]));
    a.allocate(svc("team-a", "web").want(&["203.0.113.5"]).shared("a").ports(&[80])).unwrap();
    let e = a.allocate(svc("team-b", "api").want(&["203.0.113.5"]).shared("b").ports(&[443])).unwrap_err();
    assert_eq!(
        e.to_string(),
        "requested address 203.0.113.5 is used by svc team-a/web and sharing keys differ"
    );
}

#[test]
fn requested_addresses_must_fit_the_family_policy() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/24", "2001:db8::/120"]));
    let r = svc("ns", "x").want(&["2001:db8::5"]).fam(FamilyPolicy::SingleStack(Family::V4));
    assert!(matches!(a.allocate(r), Err(AllocError::FamilyMismatch { .. })));
    let r = svc("ns", "x").want(&["192.0.2.1", "192.0.2.2"]);
    assert!(matches!(a.allocate(r), Err(AllocError::FamilyMismatch { .. })));
    // Dual-stack request: primary family first whatever the annotation order.
    let r =
        svc("ns", "x").want(&["192.0.2.1", "2001:db8::5"]).fam(FamilyPolicy::RequireDualStack(Family::V6));
    assert_eq!(addrs(&a.allocate(r).unwrap()), vec![ip("2001:db8::5"), ip("192.0.2.1")]);
}

// ---- pool choice -----------------------------------------------------------------------

#[test]
fn auto_assign_takes_the_lowest_address_of_the_first_pool_by_name() {
    let mut a = Allocator::new();
    a.set_pool(pool("b-pool", &["198.51.100.0/30"]));
    a.set_pool(pool("a-pool", &["203.0.113.8/30"]));
    let mut manual = pool("0-manual", &["192.0.2.0/24"]);
    manual.auto_assign = false;
    a.set_pool(manual);
    let got: Vec<IpAddr> = (0..6).map(|i| a.allocate(svc("ns", &format!("s{i}"))).unwrap()[0].addr).collect();
    let want: Vec<IpAddr> =
        ["203.0.113.8", "203.0.113.9", "203.0.113.10", "203.0.113.11", "198.51.100.0", "198.51.100.1"]
            .iter()
            .map(|s| ip(s))
            .collect();
    assert_eq!(got, want);
    // The autoAssign: false pool is reachable only by annotation or requested address.
    let got = a.allocate(svc("ns", "m").in_pool("0-manual")).unwrap();
    assert_eq!(addrs(&got), vec![ip("192.0.2.0")]);
    let got = a.allocate(svc("ns", "n").want(&["192.0.2.9"])).unwrap();
    assert_eq!(pools_of(&got), vec!["0-manual"]);
}

#[test]
fn exhaustion_names_the_pool_and_family() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/31"]));
    a.allocate(svc("ns", "a")).unwrap();
    a.allocate(svc("ns", "b")).unwrap();
    let e = a.allocate(svc("ns", "c")).unwrap_err();
    assert_eq!(e.to_string(), "pool lan is exhausted for IPv4");
    let e = a.allocate(svc("ns", "c").in_pool("lan")).unwrap_err();
    assert_eq!(e.to_string(), "pool lan is exhausted for IPv4");
    let e = a.allocate(svc("ns", "d").fam(FamilyPolicy::SingleStack(Family::V6))).unwrap_err();
    assert_eq!(e.to_string(), "no pool available to service ns/d has IPv6 addresses");
    assert!(a.assignment(&key("ns", "c")).is_none());
}

#[test]
fn service_allocation_namespaces_selectors_and_priority() {
    let mut a = Allocator::new();
    let restricted = |name: &str, range: &str, prio: Option<i32>| {
        let mut p = pool(name, &[range]);
        p.allocation = Some(ServiceAllocation {
            priority: prio,
            namespaces: ["team-a".to_string()].into(),
            ..Default::default()
        });
        p
    };
    a.set_pool(restricted("a-low", "192.0.2.0/30", Some(20)));
    a.set_pool(restricted("b-high", "198.51.100.0/30", Some(10)));
    a.set_pool(restricted("c-unset", "203.0.113.0/30", None));
    // Lowest priority first, unset last.
    let got = a.allocate(svc("team-a", "web")).unwrap();
    assert_eq!(pools_of(&got), vec!["b-high"]);
    let e = a.allocate(svc("team-b", "web")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "no pool allows namespace team-b (service team-b/web); set autoAssign or serviceAllocation on a pool, or annotate the service with ferrolb.io/address-pool"
    );
    let e = a.allocate(svc("team-b", "web").in_pool("a-low")).unwrap_err();
    assert_eq!(e.to_string(), "pool a-low does not allow service team-b/web (serviceAllocation)");
    // Matching pools are tried before unrestricted ones, and fall through when full.
    a.set_pool(pool("0-open", &["198.18.0.0/30"]));
    for i in 0..11 {
        a.allocate(svc("team-a", &format!("s{i}"))).unwrap();
    }
    let got = a.allocate(svc("team-a", "last")).unwrap();
    assert_eq!(pools_of(&got), vec!["0-open"]);
    let got = a.allocate(svc("team-b", "web")).unwrap();
    assert_eq!(pools_of(&got), vec!["0-open"]);
}

#[test]
fn service_allocation_label_selectors() {
    let mut a = Allocator::new();
    let mut p = pool("prod", &["192.0.2.0/30"]);
    p.allocation = Some(ServiceAllocation {
        priority: Some(1),
        namespace_selectors: vec![LabelSelector {
            match_labels: [("env".to_string(), "prod".to_string())].into(),
            ..Default::default()
        }],
        service_selectors: vec![LabelSelector {
            match_expressions: vec![Requirement { key: "public".into(), op: Operator::Exists }],
            ..Default::default()
        }],
        ..Default::default()
    });
    a.set_pool(p);
    a.set_pool(pool("rest", &["198.51.100.0/30"]));
    let r = svc("ns", "a").ns_label("env", "prod").label("public", "yes");
    assert_eq!(pools_of(&a.allocate(r).unwrap()), vec!["prod"]);
    let r = svc("ns", "b").ns_label("env", "prod");
    assert_eq!(pools_of(&a.allocate(r).unwrap()), vec!["rest"]);
    let r = svc("ns", "c").label("public", "yes");
    assert_eq!(pools_of(&a.allocate(r).unwrap()), vec!["rest"]);
}

#[test]
fn avoid_buggy_ips_never_hands_out_dot_zero_or_dot_255() {
    let mut a = Allocator::new();
    let mut p = pool("lan", &["198.18.0.0/23"]);
    p.avoid_buggy_ips = true;
    a.set_pool(p);
    let mut got = BTreeSet::new();
    for i in 0..508 {
        got.insert(a.allocate(svc("ns", &format!("s{i}"))).unwrap()[0].addr);
    }
    assert!(a.allocate(svc("ns", "full")).is_err());
    for bad in ["198.18.0.0", "198.18.0.255", "198.18.1.0", "198.18.1.255"] {
        assert!(!got.contains(&ip(bad)));
    }
    let e = a.allocate(svc("ns", "x").want(&["198.18.1.0"])).unwrap_err();
    assert_eq!(e.to_string(), "address 198.18.1.0 ends in .0 or .255 and pool lan sets avoidBuggyIPs");
}

// ---- dual stack --------------------------------------------------------------------------

#[test]
fn require_dual_stack_prefers_one_pool_then_combines_pools() {
    let mut a = Allocator::new();
    a.set_pool(pool("a-v4", &["192.0.2.0/30"]));
    a.set_pool(pool("b-dual", &["198.51.100.0/30", "2001:db8:1::/126"]));
    a.set_pool(pool("c-v6", &["2001:db8:2::/126"]));
    let r = svc("ns", "a").fam(FamilyPolicy::RequireDualStack(Family::V6));
    let got = a.allocate(r).unwrap();
    assert_eq!(addrs(&got), vec![ip("2001:db8:1::"), ip("198.51.100.0")]);
    assert_eq!(pools_of(&got), vec!["b-dual", "b-dual"]);
    // Once b-dual has no IPv6 left, the families come from different pools.
    for i in 0..3 {
        a.allocate(
            svc("ns", &format!("v6-{i}")).in_pool("b-dual").fam(FamilyPolicy::SingleStack(Family::V6)),
        )
        .unwrap();
    }
    let got = a.allocate(svc("ns", "b").fam(FamilyPolicy::RequireDualStack(Family::V4))).unwrap();
    assert_eq!(pools_of(&got), vec!["a-v4", "c-v6"]);
}

#[test]
fn require_dual_stack_is_all_or_nothing_and_prefer_takes_what_it_can() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/30"]));
    let e = a.allocate(svc("ns", "req").fam(FamilyPolicy::RequireDualStack(Family::V4))).unwrap_err();
    assert_eq!(e.to_string(), "no pool available to service ns/req has IPv6 addresses");
    assert_eq!(a.pool_stats("lan").unwrap().v4.assigned, 0, "nothing half-allocated");
    let got = a.allocate(svc("ns", "pref").fam(FamilyPolicy::PreferDualStack(Family::V6))).unwrap();
    assert_eq!(addrs(&got), vec![ip("192.0.2.0")]);
    let got = a.allocate(svc("ns", "v6").fam(FamilyPolicy::SingleStack(Family::V6)));
    assert!(got.is_err());
}

#[test]
fn ipv6_slash_64_allocates_without_materialising_and_stats_exceed_u64() {
    let mut a = Allocator::new();
    a.set_pool(pool("v6", &["2001:db8::/64", "2001:db8:1::/56"]));
    let f = FamilyPolicy::SingleStack(Family::V6);
    let got = a.allocate(svc("ns", "a").fam(f)).unwrap();
    assert_eq!(addrs(&got), vec![ip("2001:db8::")]);
    let s = a.pool_stats("v6").unwrap().v6;
    assert_eq!(s.capacity, (1u128 << 64) + (1u128 << 72));
    assert_eq!(s.assigned, 1);
    assert_eq!(s.available, s.capacity - 1);
    assert_eq!(u64::try_from(s.available).unwrap_or(u64::MAX), u64::MAX);
}

// ---- sharing -------------------------------------------------------------------------------

#[test]
fn sharers_join_one_address_and_it_is_freed_with_the_last_one() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/29"]));
    let x = a.allocate(svc("ns", "http").shared("web").ports(&[80])).unwrap();
    let y = a.allocate(svc("ns", "https").shared("web").ports(&[443])).unwrap();
    assert_eq!(addrs(&x), addrs(&y), "same key, different ports: shared");
    let z = a.allocate(svc("ns", "http2").shared("web").ports(&[80])).unwrap();
    assert_ne!(addrs(&x), addrs(&z), "port clash: a different address");
    let w = a.allocate(svc("ns", "other").shared("db").ports(&[5432])).unwrap();
    assert_ne!(addrs(&x), addrs(&w), "different key: a different address");
    assert_eq!(a.pool_stats("lan").unwrap().v4.assigned, 3);
    assert!(a.release(&key("ns", "http")));
    assert_eq!(a.pool_stats("lan").unwrap().v4.assigned, 3, "https still holds it");
    assert!(a.release(&key("ns", "https")));
    assert_eq!(a.pool_stats("lan").unwrap().v4.assigned, 2);
    assert!(!a.release(&key("ns", "https")));
}

#[test]
fn local_traffic_sharers_need_the_same_backends() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/29"]));
    let x = a.allocate(svc("ns", "a").shared("k").ports(&[80]).local("app=web")).unwrap();
    let y = a.allocate(svc("ns", "b").shared("k").ports(&[81])).unwrap();
    assert_ne!(addrs(&x), addrs(&y), "Cluster + Local with unknown backends");
    let z = a.allocate(svc("ns", "c").shared("k").ports(&[82]).local("app=web")).unwrap();
    assert_eq!(addrs(&x), addrs(&z));
    let e =
        a.allocate(svc("ns", "d").shared("k").ports(&[83]).local("app=db").want(&["192.0.2.0"])).unwrap_err();
    assert!(matches!(e, AllocError::InUse { reason: ShareRefusal::BackendsDiffer, .. }), "{e}");
}

// ---- updates ---------------------------------------------------------------------------------

#[test]
fn updates_keep_addresses_that_still_fit_and_move_those_that_do_not() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/29"]));
    a.set_pool(pool("wan", &["203.0.113.0/29"]));
    let first = a.allocate(svc("ns", "a").shared("k").ports(&[80])).unwrap();
    let b = a.allocate(svc("ns", "b").shared("k").ports(&[443])).unwrap();
    assert_eq!(addrs(&first), addrs(&b));
    // Relabel / add an unrelated port: same address.
    let again = a.allocate(svc("ns", "b").shared("k").ports(&[443, 8443]).label("x", "y")).unwrap();
    assert_eq!(addrs(&again), addrs(&b));
    // Now clashing with a: moves.
    let moved = a.allocate(svc("ns", "b").shared("k").ports(&[80])).unwrap();
    assert_ne!(addrs(&moved), addrs(&first));
    // Pool annotation changed: moves to that pool.
    let moved = a.allocate(svc("ns", "b").shared("k").ports(&[80]).in_pool("wan")).unwrap();
    assert_eq!(pools_of(&moved), vec!["wan"]);
    // A change that cannot be satisfied keeps the old address and reports why.
    let e = a.allocate(svc("ns", "b").want(&["198.51.100.1"])).unwrap_err();
    assert_eq!(e, AllocError::NotInAnyPool { addr: ip("198.51.100.1") });
    assert_eq!(addrs(a.assignment(&key("ns", "b")).unwrap()), addrs(&moved));
}

// ---- crash recovery ------------------------------------------------------------------------

#[test]
fn replay_resolves_conflicts_by_age_whatever_the_order() {
    for older_first in [true, false] {
        let mut a = Allocator::new();
        a.set_pool(pool("lan", &["192.0.2.0/29"]));
        let old = svc("ns", "zz-old").created(100);
        let young = svc("ns", "aa-young").created(200);
        let addr = [ip("192.0.2.3")];
        if older_first {
            a.assign_existing(old, &addr).unwrap();
            let e = a.assign_existing(young, &addr).unwrap_err();
            assert_eq!(
                e.to_string(),
                "address 192.0.2.3 is also held by the older svc ns/zz-old, which keeps it: both services need the same ferrolb.io/allow-shared-ip key to share an address"
            );
        } else {
            a.assign_existing(young, &addr).unwrap();
            let r = a.assign_existing(old, &addr).unwrap();
            assert_eq!(r.evicted.len(), 1);
            assert_eq!(r.evicted[0].service, key("ns", "aa-young"));
            assert_eq!(r.evicted[0].kept_by, key("ns", "zz-old"));
        }
        assert_eq!(a.holders(ip("192.0.2.3")).collect::<Vec<_>>(), vec![&key("ns", "zz-old")]);
        assert!(a.assignment(&key("ns", "aa-young")).is_none());
        // Same age: namespace/name decides.
        let mut a = Allocator::new();
        a.assign_existing(svc("ns", "b"), &addr).unwrap();
        a.assign_existing(svc("ns", "a"), &addr).unwrap();
        assert_eq!(a.holders(addr[0]).collect::<Vec<_>>(), vec![&key("ns", "a")]);
    }
}

#[test]
fn replay_then_allocate_never_reuses_replayed_addresses() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/30"]));
    a.assign_existing(svc("ns", "a").shared("k").ports(&[80]), &[ip("192.0.2.0")]).unwrap();
    a.assign_existing(svc("ns", "b").shared("k").ports(&[443]), &[ip("192.0.2.0")]).unwrap();
    a.assign_existing(svc("ns", "c"), &[ip("192.0.2.1")]).unwrap();
    let s = a.pool_stats("lan").unwrap().v4;
    assert_eq!((s.assigned, s.available), (2, 2));
    assert_eq!(addrs(&a.allocate(svc("ns", "d")).unwrap()), vec![ip("192.0.2.2")]);
    // Replay is idempotent and allocate confirms what replay recorded.
    a.assign_existing(svc("ns", "c"), &[ip("192.0.2.1")]).unwrap();
    assert_eq!(addrs(&a.allocate(svc("ns", "c")).unwrap()), vec![ip("192.0.2.1")]);
}

// ---- pool changes --------------------------------------------------------------------------

#[test]
fn removed_pool_orphans_held_addresses_which_stay_until_the_request_changes() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/30"]));
    a.set_pool(pool("wan", &["203.0.113.0/30"]));
    a.allocate(svc("ns", "a").in_pool("lan")).unwrap();
    let moves = a.remove_pool("lan");
    assert_eq!(moves.len(), 1);
    assert_eq!(moves[0].placement, Placement::Orphaned(OrphanReason::PoolDeleted { pool: "lan".into() }));
    assert_eq!(a.orphans().count(), 1);
    // The same request keeps the orphaned address: no silent traffic loss.
    let got = a.allocate(svc("ns", "a").in_pool("lan")).unwrap();
    assert_eq!(addrs(&got), vec![ip("192.0.2.0")]);
    // The pool coming back adopts it and does not hand it out again.
    let moves = a.set_pool(pool("lan", &["192.0.2.0/30"]));
    assert_eq!(moves[0].placement, Placement::Pool("lan".into()));
    assert_eq!(a.allocate(svc("ns", "b").in_pool("lan")).unwrap()[0].addr, ip("192.0.2.1"));
    // Gone again, then the user changes the request: a new address from a live pool.
    a.remove_pool("lan");
    let got = a.allocate(svc("ns", "a").in_pool("wan")).unwrap();
    assert_eq!(pools_of(&got), vec!["wan"]);
    assert_eq!(a.orphans().count(), 1, "ns/b is still orphaned");
}

#[test]
fn shrunk_pool_orphans_only_what_left_it_and_overlaps_adopt() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/29"]));
    for i in 0..6 {
        a.allocate(svc("ns", &format!("s{i}"))).unwrap();
    }
    // s4 and s5 hold .4 and .5; a second pool covers .5.
    a.set_pool(pool("other", &["192.0.2.5/32"]));
    let moves = a.set_pool(pool("lan", &["192.0.2.0/30"]));
    let mut moves: Vec<_> = moves.into_iter().map(|m| (m.service.name().to_owned(), m.placement)).collect();
    moves.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        moves,
        vec![
            ("s4".into(), Placement::Orphaned(OrphanReason::PoolShrunk { pool: "lan".into() })),
            ("s5".into(), Placement::Pool("other".into())),
        ]
    );
    let s = a.pool_stats("lan").unwrap().v4;
    assert_eq!((s.capacity, s.assigned, s.available), (4, 4, 0));
    assert_eq!(a.pool_stats("other").unwrap().v4.available, 0);
}

#[test]
fn auto_assign_toggled_off_keeps_existing_and_stops_new() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/30"]));
    a.allocate(svc("ns", "a")).unwrap();
    let mut off = pool("lan", &["192.0.2.0/30"]);
    off.auto_assign = false;
    assert!(a.set_pool(off).is_empty());
    assert_eq!(addrs(&a.allocate(svc("ns", "a")).unwrap()), vec![ip("192.0.2.0")]);
    assert!(matches!(a.allocate(svc("ns", "b")), Err(AllocError::NoPoolAllows { .. })));
    assert_eq!(a.pool_stats("lan").unwrap().v4.assigned, 1);
}

#[test]
fn replay_eviction_frees_all_of_the_losers_addresses_and_orphans_unknown_ones() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/30", "2001:db8::/126"]));
    let dual = FamilyPolicy::RequireDualStack(Family::V4);
    a.assign_existing(svc("ns", "young").fam(dual).created(9), &[ip("2001:db8::1"), ip("192.0.2.1")])
        .unwrap();
    let r = a.assign_existing(svc("ns", "old").created(1), &[ip("192.0.2.1")]).unwrap();
    assert_eq!(r.evicted.len(), 1);
    assert_eq!(a.pool_stats("lan").unwrap().v6.assigned, 0, "the loser's IPv6 address is free again");
    // The loser is re-allocated by the next reconcile, around the winner.
    let got = a.allocate(svc("ns", "young").fam(dual).created(9)).unwrap();
    assert_eq!(addrs(&got), vec![ip("192.0.2.0"), ip("2001:db8::")]);
    // Status naming an address outside every pool is kept, flagged.
    let r = a.assign_existing(svc("ns", "lost"), &[ip("198.51.100.7")]).unwrap();
    assert_eq!(r.addrs[0].placement, Placement::Orphaned(OrphanReason::NotInAnyPool));
    assert_eq!(
        OrphanReason::NotInAnyPool.to_string(),
        "the address is not in any pool; the service keeps it until its request changes"
    );
    assert_eq!(addrs(&a.allocate(svc("ns", "lost")).unwrap()), vec![ip("198.51.100.7")]);
}

#[test]
fn reallocation_keeps_old_addresses_that_still_qualify() {
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/29", "2001:db8::/126"]));
    a.allocate(svc("ns", "first")).unwrap();
    a.allocate(svc("ns", "web")).unwrap();
    a.release(&key("ns", "first"));
    // SingleStack -> RequireDualStack: 192.0.2.1 stays although 192.0.2.0 is free.
    let got = a.allocate(svc("ns", "web").fam(FamilyPolicy::RequireDualStack(Family::V4))).unwrap();
    assert_eq!(addrs(&got), vec![ip("192.0.2.1"), ip("2001:db8::")]);
    // Status replayed with one family of a RequireDualStack Service: complete it, keep the other.
    let mut b = Allocator::new();
    b.set_pool(pool("lan", &["192.0.2.0/29", "2001:db8::/126"]));
    let dual = svc("ns", "web").fam(FamilyPolicy::RequireDualStack(Family::V4));
    b.assign_existing(dual.clone(), &[ip("192.0.2.5")]).unwrap();
    assert_eq!(addrs(&b.allocate(dual).unwrap()), vec![ip("192.0.2.5"), ip("2001:db8::")]);
}

#[test]
fn addresses_are_listed_primary_family_first_even_after_ipfamilies_reorder() {
    // Found by the property tests: replay and the keep-on-update path used address order.
    let mut a = Allocator::new();
    a.set_pool(pool("lan", &["192.0.2.0/30", "2001:db8::/126"]));
    let v6_first = svc("ns", "web").fam(FamilyPolicy::PreferDualStack(Family::V6));
    let got = a.allocate(v6_first.clone()).unwrap();
    assert_eq!(addrs(&got), vec![ip("2001:db8::"), ip("192.0.2.0")]);
    let v4_first = svc("ns", "web").fam(FamilyPolicy::PreferDualStack(Family::V4));
    let got = a.allocate(v4_first).unwrap();
    assert_eq!(addrs(&got), vec![ip("192.0.2.0"), ip("2001:db8::")], "same addresses, reordered");
    let r = a.assign_existing(v6_first, &[ip("192.0.2.0"), ip("2001:db8::")]).unwrap();
    assert_eq!(addrs(&r.addrs), vec![ip("2001:db8::"), ip("192.0.2.0")]);
}
