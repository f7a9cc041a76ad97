//! Property tests: random Service and pool histories never break the allocator's promises.

// Test helpers outside #[test] fns are not covered by allow-unwrap-in-tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ferrolb_controller::ipam::*;
use proptest::prelude::*;

const POOLS: usize = 3;
const SERVICES: usize = 8;

/// A small address universe that crosses a /24 boundary, so avoidBuggyIPs matters.
fn v4(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_00f0 + n)) // 198.18.0.240 + n
}

fn v6(n: u32) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(n)))
}

fn range() -> impl Strategy<Value = AddrRange> {
    prop_oneof![
        (0u32..40, 0u32..12).prop_map(|(s, l)| AddrRange::new(v4(s), v4(s + l)).unwrap()),
        (0u32..40, 0u32..8).prop_map(|(s, l)| AddrRange::new(v6(s), v6(s + l)).unwrap()),
    ]
}

fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![(0u32..54).prop_map(v4), (0u32..50).prop_map(v6)]
}

fn pool_spec(slot: usize) -> impl Strategy<Value = PoolSpec> {
    (
        prop::collection::vec(range(), 1..4),
        prop::bool::weighted(0.8),
        any::<bool>(),
        prop::option::weighted(
            0.3,
            (prop::option::of(0i32..3), prop::sample::subsequence(vec!["a", "b"], 0..=2)),
        ),
    )
        .prop_map(move |(ranges, auto_assign, avoid_buggy_ips, allocation)| PoolSpec {
            name: format!("p{slot}"),
            ranges,
            auto_assign,
            avoid_buggy_ips,
            allocation: allocation.map(|(priority, ns)| ServiceAllocation {
                priority,
                namespaces: ns.into_iter().map(str::to_owned).collect(),
                ..Default::default()
            }),
        })
}

fn family_policy() -> impl Strategy<Value = FamilyPolicy> {
    let fam = prop_oneof![Just(Family::V4), Just(Family::V6)];
    (0u8..3, fam).prop_map(|(k, f)| match k {
        0 => FamilyPolicy::SingleStack(f),
        1 => FamilyPolicy::PreferDualStack(f),
        _ => FamilyPolicy::RequireDualStack(f),
    })
}

fn request(slot: usize) -> impl Strategy<Value = ServiceRequest> {
    (
        family_policy(),
        prop::option::weighted(0.25, prop::collection::vec(address(), 1..3)),
        prop::option::weighted(0.2, 0..POOLS),
        prop::option::weighted(0.6, 0u8..2),
        prop::sample::subsequence(vec![53u16, 80, 443], 1..=2),
        any::<bool>(),
        0u8..2,
        0i64..3,
    )
        .prop_map(move |(families, requested, pool, key, ports, local, backend, created)| {
            let mut r =
                ServiceRequest::new(if slot.is_multiple_of(2) { "a" } else { "b" }, format!("s{slot}"));
            r.families = families;
            r.requested = requested.unwrap_or_default();
            r.pool = pool.map(|p| format!("p{p}"));
            r.sharing_key = key.map(|k| format!("k{k}"));
            r.ports = ports.into_iter().map(|p| (Protocol::Tcp, p)).collect();
            if local {
                r.traffic_policy = TrafficPolicy::Local;
            }
            r.backend_key = Some(format!("app{backend}"));
            r.created = created;
            r
        })
}

#[derive(Debug, Clone)]
enum Op {
    Upsert(ServiceRequest),
    Delete(usize),
    SetPool(PoolSpec),
    RemovePool(usize),
    /// The controller restarts: a fresh allocator is rebuilt from the pools and status.
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..SERVICES).prop_flat_map(request).prop_map(Op::Upsert),
        2 => (0..SERVICES).prop_map(Op::Delete),
        2 => (0..POOLS).prop_flat_map(pool_spec).prop_map(Op::SetPool),
        1 => (0..POOLS).prop_map(Op::RemovePool),
        1 => Just(Op::Restart),
    ]
}

/// What the test believes: the request each holding Service was last granted, and the pools.
#[derive(Default)]
struct Model {
    reqs: BTreeMap<ServiceKey, ServiceRequest>,
    pools: BTreeMap<String, PoolSpec>,
}

type Outcome = Result<Vec<Assigned>, AllocError>;

fn apply(a: &mut Allocator, m: &mut Model, op: &Op) -> Option<Outcome> {
    match op {
        Op::Upsert(r) => {
            let out = a.allocate(r.clone());
            if let Ok(got) = &out {
                m.reqs.insert(r.key.clone(), r.clone());
                // Every address granted lies in a pool that admits the Service (the annotated
                // one if set), unless it is an orphan the Service was allowed to keep.
                for x in got {
                    if matches!(x.placement, Placement::Orphaned(_)) {
                        continue;
                    }
                    let admits = |p: &PoolSpec| {
                        usable(p).contains(&x.addr)
                            && p.allocation.as_ref().is_none_or(|al| {
                                al.namespaces.is_empty() || al.namespaces.contains(r.key.namespace())
                            })
                    };
                    let ok = match &r.pool {
                        Some(q) => m.pools.get(q).is_some_and(admits),
                        None => m.pools.values().any(admits),
                    };
                    assert!(ok, "{} got {} from a pool that does not admit it", r.key, x.addr);
                }
            }
            return Some(out);
        }
        Op::Delete(s) => {
            let key = ServiceKey::new(if s.is_multiple_of(2) { "a" } else { "b" }, format!("s{s}"));
            assert_eq!(a.release(&key), m.reqs.remove(&key).is_some());
        }
        Op::SetPool(p) => {
            a.set_pool(p.clone());
            m.pools.insert(p.name.clone(), p.clone());
        }
        Op::RemovePool(p) => {
            a.remove_pool(&format!("p{p}"));
            m.pools.remove(&format!("p{p}"));
        }
        Op::Restart => {
            let before = addrs_of(a);
            *a = replay(a, m);
            // A valid state replays with no conflicts and no change of holdings.
            assert_eq!(before, addrs_of(a));
        }
    }
    None
}

/// Rebuilds an allocator as the controller does on start: pools, then every status.
fn replay(a: &Allocator, m: &Model) -> Allocator {
    let mut c = Allocator::new();
    for spec in m.pools.values() {
        c.set_pool(spec.clone());
    }
    for (key, addrs) in addrs_of(a) {
        let r = c.assign_existing(m.reqs[&key].clone(), &addrs).unwrap();
        assert!(r.evicted.is_empty(), "{:?}", r.evicted);
    }
    c
}

/// Every usable address of a pool spec, by brute force (the universe is tiny).
fn usable(p: &PoolSpec) -> BTreeSet<IpAddr> {
    let mut out = BTreeSet::new();
    for n in 0u32..60 {
        for addr in [v4(n), v6(n)] {
            let buggy = match addr {
                IpAddr::V4(a) => p.avoid_buggy_ips && matches!(a.octets()[3], 0 | 255),
                IpAddr::V6(_) => false,
            };
            if !buggy && p.ranges.iter().any(|r| r.contains(&addr)) {
                out.insert(addr);
            }
        }
    }
    out
}

/// The sharing rule written out again independently, so a bug in the library's own rule
/// cannot hide itself from these tests.
fn may_share(x: &ServiceRequest, y: &ServiceRequest) -> bool {
    let same_key = x.sharing_key.is_some() && x.sharing_key == y.sharing_key;
    let ports_disjoint = x.ports.iter().all(|p| !y.ports.contains(p));
    let any_local = x.traffic_policy == TrafficPolicy::Local || y.traffic_policy == TrafficPolicy::Local;
    let same_backends = x.backend_key.is_some() && x.backend_key == y.backend_key;
    same_key && ports_disjoint && (!any_local || same_backends)
}

fn check(a: &Allocator, m: &Model) -> Result<(), TestCaseError> {
    let held: BTreeMap<&ServiceKey, &[Assigned]> = a.services().collect();
    prop_assert_eq!(held.keys().copied().collect::<Vec<_>>(), m.reqs.keys().collect::<Vec<_>>());
    let mut by_addr: BTreeMap<IpAddr, Vec<&ServiceKey>> = BTreeMap::new();
    for (key, addrs) in &held {
        let req = &m.reqs[*key];
        let fams: Vec<Family> = addrs.iter().map(|x| Family::of(&x.addr)).collect();
        let distinct: BTreeSet<Family> = fams.iter().copied().collect();
        prop_assert_eq!(distinct.len(), fams.len(), "{} holds two of one family", key);
        match req.families {
            FamilyPolicy::SingleStack(f) => prop_assert_eq!(&fams, &vec![f]),
            FamilyPolicy::PreferDualStack(_) => prop_assert!(!fams.is_empty()),
            FamilyPolicy::RequireDualStack(_) => prop_assert_eq!(fams.len(), 2),
        }
        if !req.requested.is_empty() {
            let want: BTreeSet<IpAddr> = req.requested.iter().copied().collect();
            let have: BTreeSet<IpAddr> = addrs.iter().map(|x| x.addr).collect();
            prop_assert_eq!(want, have);
        }
        for x in addrs.iter() {
            by_addr.entry(x.addr).or_default().push(key);
            match &x.placement {
                Placement::Pool(p) => {
                    prop_assert!(
                        m.pools.get(p).is_some_and(|s| usable(s).contains(&x.addr)),
                        "{} not in {}",
                        x.addr,
                        p
                    )
                }
                Placement::Orphaned(_) => {
                    prop_assert!(
                        m.pools.values().all(|s| !usable(s).contains(&x.addr)),
                        "orphan {} is in a pool",
                        x.addr
                    )
                }
            }
        }
    }
    // Never one address for two Services that may not share it.
    for (addr, keys) in &by_addr {
        prop_assert_eq!(a.holders(*addr).collect::<Vec<_>>(), keys.clone());
        for (i, x) in keys.iter().enumerate() {
            for y in &keys[i + 1..] {
                prop_assert!(may_share(&m.reqs[*x], &m.reqs[*y]), "{} and {} may not share {}", x, y, addr);
            }
        }
    }
    // Statistics always equal a recount.
    for (name, spec) in &m.pools {
        let stats = a.pool_stats(name).unwrap();
        for family in [Family::V4, Family::V6] {
            let mine: Vec<IpAddr> = usable(spec).into_iter().filter(|x| Family::of(x) == family).collect();
            let used = mine.iter().filter(|x| by_addr.contains_key(x)).count() as u128;
            let s = stats.family(family);
            prop_assert_eq!(
                (s.capacity, s.assigned, s.available),
                (mine.len() as u128, used, mine.len() as u128 - used),
                "{} {}",
                name,
                family
            );
        }
    }
    prop_assert_eq!(
        a.pool_names().collect::<Vec<_>>(),
        m.pools.keys().map(String::as_str).collect::<Vec<_>>()
    );
    Ok(())
}

fn addrs_of(a: &Allocator) -> BTreeMap<ServiceKey, Vec<IpAddr>> {
    a.services().map(|(k, v)| (k.clone(), v.iter().map(|x| x.addr).collect())).collect()
}

proptest! {
    // No regression file: this branch may only add tests/ipam_*.rs; the bugs these
    // properties found are pinned by named tests in ipam_allocator.rs instead.
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn histories_keep_every_promise(ops in prop::collection::vec(op(), 1..60)) {
        let mut a = Allocator::new();
        let mut m = Model::default();
        let mut outcomes = Vec::new();
        for op in &ops {
            let before = addrs_of(&a);
            outcomes.push(apply(&mut a, &mut m, op));
            check(&a, &m)?;
            // Only the Service an operation is about may change addresses: pool edits
            // never yank one, and nobody is moved to make room for someone else.
            let after = addrs_of(&a);
            let target = match op {
                Op::Upsert(r) => Some(r.key.clone()),
                Op::Delete(s) => Some(ServiceKey::new(if s.is_multiple_of(2) { "a" } else { "b" }, format!("s{s}"))),
                Op::SetPool(_) | Op::RemovePool(_) | Op::Restart => None,
            };
            for key in before.keys().chain(after.keys()) {
                if Some(key) != target.as_ref() {
                    prop_assert_eq!(before.get(key), after.get(key), "{:?} moved {}", op, key);
                }
            }
        }

        // Determinism: the same history gives the same state and the same answers.
        let mut b = Allocator::new();
        let mut mb = Model::default();
        let again: Vec<_> = ops.iter().map(|op| apply(&mut b, &mut mb, op)).collect();
        prop_assert_eq!(&outcomes, &again);
        prop_assert_eq!(&a, &b);

        // Crash recovery: replaying status into a fresh allocator gives the same holdings
        // with no conflicts, and the same answers to the same next requests.
        let mut c = replay(&a, &m);
        prop_assert_eq!(addrs_of(&a), addrs_of(&c));
        for req in m.reqs.values() {
            let x = a.allocate(req.clone()).map(|v| v.into_iter().map(|x| x.addr).collect::<Vec<_>>());
            let y = c.allocate(req.clone()).map(|v| v.into_iter().map(|x| x.addr).collect::<Vec<_>>());
            prop_assert_eq!(x, y);
        }
        prop_assert_eq!(addrs_of(&a), addrs_of(&c));

        // No leaks: once every Service is gone, every pool is fully available again.
        let keys: Vec<ServiceKey> = m.reqs.keys().cloned().collect();
        for key in &keys {
            prop_assert!(a.release(key));
            m.reqs.remove(key);
            check(&a, &m)?;
        }
        for name in m.pools.keys() {
            let s = a.pool_stats(name).unwrap();
            prop_assert_eq!((s.v4.assigned, s.v6.assigned), (0, 0));
            prop_assert_eq!((s.v4.available, s.v6.available), (s.v4.capacity, s.v6.capacity));
        }
        // ...and the allocator is indistinguishable from one that only ever saw the pools.
        let mut fresh = Allocator::new();
        for spec in m.pools.values() {
            fresh.set_pool(spec.clone());
        }
        prop_assert_eq!(&a, &fresh);
    }

    #[test]
    fn replay_in_any_order_keeps_the_oldest_claimant(
        claims in prop::collection::vec((0..SERVICES, prop::option::of(0u8..2), 0i64..4, 0u32..4), 1..12),
    ) {
        // Services claim overlapping addresses in status (e.g. written by two controllers).
        let reqs: Vec<(ServiceRequest, IpAddr)> = claims
            .iter()
            .enumerate()
            .map(|(i, &(slot, key, created, n))| {
                let mut r = ServiceRequest::new("ns", format!("s{slot}-{i}"));
                r.sharing_key = key.map(|k| format!("k{k}"));
                r.ports = vec![(Protocol::Tcp, 80 + (i as u16 % 2))];
                r.created = created;
                (r, v4(n))
            })
            .collect();
        let replay = |order: &[usize]| {
            let mut a = Allocator::new();
            a.set_pool(PoolSpec::new("p", vec![AddrRange::new(v4(0), v4(10)).unwrap()]));
            for &i in order {
                let _ = a.assign_existing(reqs[i].0.clone(), &[reqs[i].1]);
            }
            a
        };
        let forward: Vec<usize> = (0..reqs.len()).collect();
        let backward: Vec<usize> = forward.iter().rev().copied().collect();
        let (f, b) = (replay(&forward), replay(&backward));
        for a in [&f, &b] {
            let held: BTreeMap<ServiceKey, Vec<IpAddr>> = addrs_of(a);
            let by_key: BTreeMap<&ServiceKey, &ServiceRequest> = reqs.iter().map(|(r, _)| (&r.key, r)).collect();
            for (_, addr) in &reqs {
                let holders: Vec<&ServiceKey> = a.holders(*addr).collect();
                for (i, x) in holders.iter().enumerate() {
                    for y in &holders[i + 1..] {
                        prop_assert!(may_share(by_key[x], by_key[y]));
                    }
                }
                // The oldest claimant of an address always keeps it.
                let oldest = reqs.iter().filter(|(_, x)| x == addr).map(|(r, _)| (r.created, &r.key)).min().unwrap();
                prop_assert_eq!(held.get(oldest.1), Some(&vec![*addr]));
            }
        }
    }
}
