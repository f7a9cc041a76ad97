//! Membership across lab nodes (separate network namespaces, a real bridge): join,
//! wrong key, partition and rejoin, crash, graceful leave.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrolb_lab::netns::Netns;
use ferrolb_lab::runtime::{NsRuntime, block_on};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use ferrolb_proto::membership::MembershipKey;
use ferrolb_proto::membership::auth::DropReason;
use ferrolb_proto::membership::{
    DEFAULT_PORT, Membership, MembershipConfig, MembershipHandle, MembershipMetrics, Seed,
};

const T: Duration = Duration::from_secs(20);
const KEY: &str = "lab-membership-key-0123456789abcdef";

struct Member {
    handle: Option<MembershipHandle>,
    metrics: MembershipMetrics,
    rt: Option<NsRuntime>,
}

fn addr(i: usize, port: u16) -> SocketAddr {
    SocketAddr::new(addressing::node_v4(i).into(), port)
}

fn seeds(n: usize) -> Vec<Seed> {
    (1..=n).map(|i| Seed { name: addressing::node_name(i), addr: addr(i, DEFAULT_PORT) }).collect()
}

fn member(ns: &Netns, name: &str, me: SocketAddr, seeds: Vec<Seed>, key: &str) -> Member {
    let metrics = MembershipMetrics::default();
    let m = metrics.clone();
    let mut cfg = MembershipConfig::new(name, me, seeds, MembershipKey::parse(key).unwrap());
    cfg.bind = me;
    let (handle, rt) = NsRuntime::start(ns, move || Membership::spawn(cfg, m).unwrap()).unwrap();
    Member { handle: Some(handle), metrics, rt: Some(rt) }
}

fn live(m: &Member) -> BTreeSet<String> {
    m.handle.as_ref().map(|h| h.live().borrow().clone()).unwrap_or_default()
}

fn set(names: &[usize]) -> BTreeSet<String> {
    names.iter().map(|i| addressing::node_name(*i)).collect()
}

/// Waits until every listed member sees exactly `want`; returns how long it took.
fn wait_all(members: &[&Member], want: &BTreeSet<String>, what: &str) -> Duration {
    let t = Instant::now();
    wait::until_value(
        what,
        T,
        || Ok(members.iter().map(|m| live(m)).collect::<Vec<_>>()),
        |v| v.iter().all(|s| s == want),
    )
    .unwrap();
    t.elapsed()
}

#[test]
fn members_see_each_other_and_converge_after_failures() {
    let lab = Lab::up(LabConfig::nodes(3)).unwrap();
    let n1 = member(lab.node(1), "node1", addr(1, DEFAULT_PORT), seeds(3), KEY);
    let n2 = member(lab.node(2), "node2", addr(2, DEFAULT_PORT), seeds(3), KEY);
    let mut n3 = member(lab.node(3), "node3", addr(3, DEFAULT_PORT), seeds(3), KEY);
    let joined = wait_all(&[&n1, &n2, &n3], &set(&[1, 2, 3]), "all three live everywhere");
    println!("three members live everywhere after {joined:?}");

    // A member with the wrong key (on node3, another port: no Node's membership address)
    // changes nothing; its datagrams are dropped before they are opened. (One on a
    // Node's address: `membership_loopback.rs`.)
    let intruder =
        member(lab.node(3), "intruder", addr(3, 7999), seeds(3), "wrong-key-wrong-key-wrong-key-0123");
    wait::until_value(
        "the intruder's packets dropped",
        T,
        || Ok(n1.metrics.dropped(DropReason::UnknownSource)),
        |d| *d >= 3,
    )
    .unwrap();
    for m in [&n1, &n2, &n3] {
        assert!(!live(m).contains("intruder"), "a member with the wrong key must never be seen live");
    }
    assert_eq!(live(&intruder), BTreeSet::from(["intruder".to_string()]));
    drop(intruder);

    // Partition node3 (link down), then heal: one consistent live set again.
    lab.node(3).ip(&["link", "set", "eth0", "down"]).unwrap();
    let t = wait_all(&[&n1, &n2], &set(&[1, 2]), "node3 dropped after partition");
    println!("partitioned node3 dropped after {t:?}");
    wait_all(&[&n3], &set(&[3]), "node3 alone");
    lab.node(3).ip(&["link", "set", "eth0", "up"]).unwrap();
    let t = wait_all(&[&n1, &n2, &n3], &set(&[1, 2, 3]), "node3 rejoined");
    println!("healed partition converged after {t:?}");

    // Crash node2 (its runtime and sockets vanish, no goodbye).
    let t0 = Instant::now();
    let mut n2 = n2;
    n2.rt.take().unwrap().stop();
    n2.handle = None;
    wait_all(&[&n1, &n3], &set(&[1, 3]), "crashed node2 dropped");
    println!("crashed member dropped after {:?}", t0.elapsed());

    // Graceful leave of node3: dropped at once.
    let t0 = Instant::now();
    block_on(n3.handle.take().unwrap().leave()).unwrap();
    wait_all(&[&n1], &set(&[1]), "node3 left");
    println!("graceful leave seen after {:?}", t0.elapsed());
    assert_eq!(n1.metrics.size(), 1);
}
