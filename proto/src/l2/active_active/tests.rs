#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::nft::{ruleset, tables};
use super::*;
use crate::nftables::decode::ChainInfo;
use crate::nftables::{Expr, Set, Table, Verdict};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node{i}")).collect()
}

fn counts(owners: &[usize], n: usize) -> Vec<usize> {
    (0..n).map(|i| owners.iter().filter(|&&o| o == i).count()).collect()
}

#[test]
fn the_virtual_mac_is_local_unicast_and_pinned() {
    for a in ["192.0.2.50", "2001:db8::50", "198.51.100.7"] {
        let m = virtual_mac(ip(a));
        assert_eq!(m[0] & 0b11, 0b10, "{a}: locally administered unicast");
    }
    assert_ne!(virtual_mac(ip("192.0.2.50")), virtual_mac(ip("192.0.2.51")));
    // Changing these splits an address between speakers of two versions.
    let golden = (virtual_mac(ip("192.0.2.50")), seed(ip("192.0.2.50")), seed(ip("2001:db8::50")));
    assert_eq!(golden, GOLDEN);
}
const GOLDEN: (Mac, u32, u32) = ([0x02, 0x1b, 0x85, 0x7b, 0x5a, 0xd9], 0x99f3_7094, 0x7c90_ca1c);

#[test]
fn every_node_gets_its_share_whatever_the_order() {
    for n in 1..=7 {
        let nodes = names(n);
        for last in 0..40u8 {
            let a = IpAddr::from([192, 0, 2, last]);
            let o = owners(a, &nodes);
            assert_eq!(o.len(), BUCKETS);
            for c in counts(&o, n) {
                assert!(c == BUCKETS / n || c == BUCKETS / n + 1, "{a} over {n}: {:?}", counts(&o, n));
            }
            let mut reversed = nodes.clone();
            reversed.reverse();
            let r = owners(a, &reversed);
            let by_name = |o: &[usize], ns: &[String]| o.iter().map(|&i| ns[i].clone()).collect::<Vec<_>>();
            assert_eq!(by_name(&o, &nodes), by_name(&r, &reversed));
        }
    }
    assert!(owners(ip("192.0.2.1"), &Vec::<String>::new()).is_empty());
}

/// Buckets that changed owner between two node sets, not counting those of `gone`.
fn moved_between(a: IpAddr, before: &[String], after: &[String], gone: &str) -> (usize, usize) {
    let (o1, o2) = (owners(a, before), owners(a, after));
    let mut forced = 0;
    let mut extra = 0;
    for b in 0..BUCKETS {
        let (x, y) = (&before[o1[b]], &after[o2[b]]);
        if x == gone || y == gone {
            forced += usize::from(x != y);
        } else if x != y {
            extra += 1;
        }
    }
    (forced, extra)
}

#[test]
fn a_membership_change_moves_few_buckets_besides_its_own() {
    let mut extra_total = 0;
    let mut worst = 0;
    for last in 0..50u8 {
        let a = IpAddr::from([192, 0, 2, last]);
        let three = names(3);
        let two = vec!["node1".to_string(), "node3".to_string()];
        // A node dies: its buckets move; between survivors, few.
        let (forced, extra) = moved_between(a, &three, &two, "node2");
        assert!((85..=86).contains(&forced), "{a}: {forced} buckets of the dead node");
        extra_total += extra;
        worst = worst.max(extra);
        // A node joins: it takes its share, mostly from everyone.
        let four = names(4);
        let (forced, extra) = moved_between(a, &three, &four, "node4");
        assert_eq!(forced, 64, "{a}");
        extra_total += extra;
        worst = worst.max(extra);
    }
    // Plain rendezvous would move none; bounded loads move a few to keep the balance.
    assert!(worst <= 20, "at worst {worst} of {BUCKETS} buckets moved between nodes that stayed");
    assert!(extra_total <= 100 * 5, "{extra_total} moved in 100 changes");
}

fn desired(pairs: &[(&str, &[&str])]) -> Input {
    Input::Desired(pairs.iter().map(|(a, ns)| (ip(a), ns.iter().map(|n| n.to_string()).collect())).collect())
}

fn states(s: &Spread, a: &str) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for b in &s.addresses()[&ip(a)].buckets {
        let k = match b {
            Bucket::Mine => "mine",
            Bucket::NotMine => "not mine",
            Bucket::Acquiring(_) => "acquiring",
            Bucket::Draining(_) => "draining",
        };
        *m.entry(k).or_default() += 1;
    }
    m
}

const GRACE: Duration = Duration::from_secs(60);

#[test]
fn a_new_address_is_acquired_through_the_grace() {
    // This node may have just become eligible: the others may hold flows of it.
    let t0 = Instant::now();
    let mut s = Spread::new("node1", GRACE);
    s.handle(t0, desired(&[("192.0.2.50", &["node1", "node2"])]));
    assert_eq!(states(&s, "192.0.2.50"), BTreeMap::from([("acquiring", 128), ("not mine", 128)]));
    assert_eq!(s.poll_timeout(), Some(t0 + GRACE));
    s.handle(t0 + GRACE, Input::Timeout);
    assert_eq!(states(&s, "192.0.2.50"), BTreeMap::from([("mine", 128), ("not mine", 128)]));
    assert_eq!(s.poll_timeout(), None);
}

fn settled(me: &str, pairs: &[(&str, &[&str])]) -> (Spread, Instant) {
    let t0 = Instant::now();
    let mut s = Spread::new(me, GRACE);
    s.handle(t0, desired(pairs));
    s.handle(t0 + GRACE, Input::Timeout);
    assert_eq!(s.poll_timeout(), None);
    (s, t0 + GRACE)
}

#[test]
fn buckets_that_change_owner_go_through_the_grace_on_both_sides() {
    let all: &[&str] = &["node1", "node2", "node3"];
    let (mut n1, t) = settled("node1", &[("192.0.2.50", all)]);
    let (mut n2, _) = settled("node2", &[("192.0.2.50", all)]);
    let before = n2.addresses()[&ip("192.0.2.50")].clone();
    // node1 dies: node2 acquires what it wins of node1's buckets, keeps its own.
    n2.handle(t, desired(&[("192.0.2.50", &["node2", "node3"])]));
    let after = &n2.addresses()[&ip("192.0.2.50")];
    assert_eq!(after.owned(), 128);
    for (b, (x, y)) in before.buckets.iter().zip(&after.buckets).enumerate() {
        match (x, y) {
            (Bucket::Mine, Bucket::Mine) | (Bucket::NotMine, Bucket::NotMine | Bucket::Acquiring(_)) => {}
            (Bucket::Mine, Bucket::Draining(_)) => {} // rebalanced to node3: kept while established
            other => panic!("bucket {b}: {other:?}"),
        }
    }
    // node1 comes back: node2 drains what returns to node1, node1 acquires it.
    n2.handle(t + GRACE, Input::Timeout);
    n2.handle(t + GRACE, desired(&[("192.0.2.50", all)]));
    n1.handle(t + GRACE, desired(&[("192.0.2.50", all)]));
    let (a1, a2) = (&n1.addresses()[&ip("192.0.2.50")], &n2.addresses()[&ip("192.0.2.50")]);
    for b in 0..BUCKETS {
        assert!(!(a1.buckets[b].owned() && a2.buckets[b].owned()), "bucket {b} owned twice");
        if let Bucket::Draining(_) = a2.buckets[b] {
            assert!(a1.buckets[b] == Bucket::Mine || !a1.buckets[b].owned() || a1.buckets[b].in_transition());
        }
    }
    assert!(states(&n2, "192.0.2.50").contains_key("draining"));
}

#[test]
fn an_address_that_leaves_drains_and_then_goes() {
    let (mut s, t) = settled("node1", &[("192.0.2.50", &["node1", "node2"])]);
    s.handle(t, Input::Desired(BTreeMap::new()));
    assert_eq!(states(&s, "192.0.2.50"), BTreeMap::from([("draining", 128), ("not mine", 128)]));
    assert!(s.addresses()[&ip("192.0.2.50")].nodes.is_empty());
    s.handle(t + GRACE - Duration::from_millis(1), Input::Timeout);
    assert!(s.addresses().contains_key(&ip("192.0.2.50")));
    s.handle(t + GRACE, Input::Timeout);
    assert!(s.addresses().is_empty());
    // A node not eligible (Local, no endpoint) owns nothing.
    let (s, _) = settled("node9", &[("192.0.2.50", &["node1", "node2"])]);
    assert_eq!(s.addresses()[&ip("192.0.2.50")].owned(), 0);
}

fn set<'a>(t: &'a Table, name: &str) -> &'a Set {
    t.sets.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no set {name}: {t:?}"))
}

fn goto(chain: &str) -> Option<Verdict> {
    Some(Verdict::Goto(chain.into()))
}

#[test]
fn the_tables_drop_what_is_not_mine_and_conntrack_only_transitions() {
    assert_eq!(tables(&Spread::new("node1", GRACE), &BTreeSet::new()), (None, None));

    let (mut s, t) = settled("node1", &[("192.0.2.50", &["node1", "node2"]), ("2001:db8::50", &["node1"])]);
    let devs = BTreeSet::from(["eth0".to_string()]);
    let (netdev, inet) = tables(&s, &devs);
    let netdev = netdev.unwrap();
    assert_eq!(netdev.chains[0].hook.as_ref().unwrap().device.as_deref(), Some("eth0"));
    assert!(set(&netdev, "vmacs").elements.contains(&(virtual_mac(ip("192.0.2.50")).to_vec(), None)));
    let inet = inet.unwrap();
    assert_eq!(set(&inet, "addresses4").elements, vec![(vec![192, 0, 2, 50], goto("a_192_0_2_50"))]);
    assert_eq!(set(&inet, "addresses6").elements[0].1, goto("a_2001_db8__50"));
    // Only the buckets that are not mine are in the map: the rest fall through, kept.
    let not_mine = &set(&inet, "a_192_0_2_50").elements;
    assert_eq!(not_mine.len(), 128);
    assert!(not_mine.iter().all(|(_, v)| *v == goto("n_192_0_2_50")));
    // The only node of the v6 address owns it all.
    assert!(set(&inet, "a_2001_db8__50").elements.is_empty());
    // The flow hash is the address's: its seed, 256 buckets, over source address and port.
    let hash = inet.rules.iter().find(|r| r.chain == "a_192_0_2_50").unwrap();
    assert!(hash.exprs.contains(&Expr::Jhash {
        sreg: crate::nftables::REG32_00,
        len: 8,
        modulus: 256,
        seed: seed(ip("192.0.2.50")),
        dreg: crate::nftables::REG_1
    }));
    // Packets to the address that nothing took here are not routed back to the segment.
    assert_eq!(set(&inet, "served4").elements, vec![(vec![192, 0, 2, 50], None)]);
    assert!(!set(&inet, "served6").map);
    let forward = inet.chains.iter().find(|c| c.name == "forward").unwrap();
    assert_eq!(forward.hook.as_ref().map(|h| h.number), Some(2), "the forward hook");
    // Nothing in transition: the grace chain dispatches nothing.
    assert!(!inet.sets.iter().any(|s| s.name.starts_with("grace") || s.name.starts_with("g_")));

    s.handle(t, desired(&[("192.0.2.50", &["node2"])]));
    let inet = tables(&s, &devs).1.unwrap();
    assert_eq!(set(&inet, "grace4").elements, vec![(vec![192, 0, 2, 50], goto("g_192_0_2_50"))]);
    let grace = &set(&inet, "g_192_0_2_50").elements;
    assert_eq!(grace.len(), 128);
    assert!(grace.iter().all(|(_, v)| *v == goto("draining")));
    // Without an interface, no netdev table; the batch still replaces both.
    assert!(tables(&s, &BTreeSet::new()).0.is_none());
    let b = ruleset(&s, &BTreeSet::new());
    assert_eq!(b.describe(1), "add table netdev ferrolb");
    assert_eq!(b.describe(2), "delete table netdev ferrolb");
}

#[test]
fn a_table_left_by_a_previous_run_drains_until_the_first_plan() {
    let (s, _) = settled("node1", &[("192.0.2.50", &["node1", "node2"]), ("2001:db8::50", &["node1"])]);
    let chains: Vec<ChainInfo> = tables(&s, &BTreeSet::new())
        .1
        .unwrap()
        .chains
        .into_iter()
        .map(|c| ChainInfo { name: c.name, device: None })
        .collect();
    let mut found = nft::addresses_in(&chains);
    found.sort();
    assert_eq!(found, vec![ip("192.0.2.50"), ip("2001:db8::50")]);

    let t = Instant::now();
    let mut fresh = Spread::new("node1", GRACE);
    fresh.adopt(t, found);
    assert_eq!(fresh.poll_timeout(), Some(t + GRACE));
    assert_eq!(states(&fresh, "192.0.2.50"), BTreeMap::from([("draining", 256)]));
    // The first plan: this node's buckets are acquired, the others keep draining.
    fresh.handle(t, desired(&[("192.0.2.50", &["node1", "node2"])]));
    assert_eq!(states(&fresh, "192.0.2.50"), BTreeMap::from([("acquiring", 128), ("draining", 128)]));
    assert_eq!(states(&fresh, "2001:db8::50"), BTreeMap::from([("draining", 256)]));
    fresh.handle(t + GRACE, Input::Timeout);
    assert_eq!(states(&fresh, "192.0.2.50"), BTreeMap::from([("mine", 128), ("not mine", 128)]));
    assert!(!fresh.addresses().contains_key(&ip("2001:db8::50")), "drained, then gone");
}

#[test]
fn a_node_that_joins_takes_no_bucket_until_the_others_count_it() {
    let hold = Duration::from_secs(1);
    let t = Instant::now();
    let both: &[&str] = &["node1", "node2"];
    let mut joiner = Spread::new("node2", GRACE).with_join_hold(hold);
    // Before it is among the address's nodes, no hold runs.
    joiner.handle(t, desired(&[("192.0.2.50", &["node1"])]));
    assert_eq!(joiner.poll_timeout(), None);
    let t = t + Duration::from_secs(5);
    joiner.handle(t, desired(&[("192.0.2.50", both)]));
    assert_eq!(states(&joiner, "192.0.2.50"), BTreeMap::from([("not mine", 256)]));
    assert_eq!(joiner.poll_timeout(), Some(t + hold));
    // A plan within the hold changes nothing; the hold's end acquires through the grace.
    joiner.handle(t + hold / 2, desired(&[("192.0.2.50", both)]));
    assert_eq!(states(&joiner, "192.0.2.50"), BTreeMap::from([("not mine", 256)]));
    joiner.handle(t + hold, Input::Timeout);
    assert_eq!(states(&joiner, "192.0.2.50"), BTreeMap::from([("acquiring", 128), ("not mine", 128)]));
    assert_eq!(joiner.poll_timeout(), Some(t + hold + GRACE));
    // The hold runs once: a node that joins later is the others' business.
    joiner.handle(t + hold + GRACE, Input::Timeout);
    joiner.handle(t + hold + GRACE, desired(&[("192.0.2.50", &["node1", "node2", "node3"])]));
    let owned = joiner.addresses()[&ip("192.0.2.50")].owned();
    assert!(owned == 85 || owned == 86, "owned {owned}: the share of three, at once");
}
