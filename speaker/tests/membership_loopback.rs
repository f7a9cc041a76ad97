//! Membership instances on loopback in one process: join, crash, leave, wrong key.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use ferrolb_api::MembershipKey;
use ferrolb_speaker::membership::auth::DropReason;
use ferrolb_speaker::membership::{Membership, MembershipConfig, MembershipHandle, MembershipMetrics, Seed};
use tokio::sync::watch;

const KEY: &str = "loopback-test-key-0123456789abcdef";

fn free_port() -> u16 {
    let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    s.local_addr().unwrap().port()
}

fn start(name: &str, me: SocketAddr, seeds: &[Seed], key: &str) -> (MembershipHandle, MembershipMetrics) {
    let mut cfg = MembershipConfig::new(name, me, seeds.to_vec(), MembershipKey::parse(key).unwrap());
    cfg.bind = me;
    let metrics = MembershipMetrics::default();
    (Membership::spawn(cfg, metrics.clone()).unwrap(), metrics)
}

async fn wait_live(rx: &mut watch::Receiver<BTreeSet<String>>, want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    let ok = tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|s| *s == want)).await.is_ok();
    assert!(ok, "live set never became {want:?}; last {:?}", *rx.borrow());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_crash_leave_and_ignore_a_wrong_key() {
    let addrs: Vec<SocketAddr> =
        (0..4).map(|_| SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()))).collect();
    let seeds: Vec<Seed> =
        ["a", "b", "c"].iter().zip(&addrs).map(|(n, a)| Seed { name: n.to_string(), addr: *a }).collect();
    let (a, ma) = start("a", addrs[0], &seeds, KEY);
    let (b, _) = start("b", addrs[1], &seeds, KEY);
    let (c, _) = start("c", addrs[2], &seeds, KEY);
    let (mut la, mut lb) = (a.live(), b.live());
    wait_live(&mut la, &["a", "b", "c"]).await;
    wait_live(&mut lb, &["a", "b", "c"]).await;
    for h in [&a, &b, &c] {
        let ok = tokio::time::timeout(Duration::from_secs(5), h.settled().wait_for(|s| *s)).await.is_ok();
        assert!(ok, "joined members are settled");
    }

    // An intruder with the wrong key, seeded with everyone: nothing changes, drops counted.
    let (x, _) = start("x", addrs[3], &seeds, "a-wrong-key-that-is-long-enough-000");
    let mut lx = x.live();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!la.borrow().contains("x"), "a member with the wrong key must never be seen live");
    assert_eq!(*lx.borrow_and_update(), BTreeSet::from(["x".to_string()]));
    assert!(ma.dropped(DropReason::Unauthenticated) > 0, "the intruder's packets must be counted");
    assert!(*x.settled().borrow(), "a node nobody answers settles alone after join_timeout");
    x.abort();

    // Graceful leave: dropped at once (no suspicion timeout).
    let t = std::time::Instant::now();
    c.leave().await;
    wait_live(&mut la, &["a", "b"]).await;
    println!("graceful leave seen after {:?}", t.elapsed());

    // A crash: detected by probing.
    let t = std::time::Instant::now();
    b.abort();
    wait_live(&mut la, &["a"]).await;
    println!("crash detected after {:?}", t.elapsed());
    assert_eq!(ma.size(), 1);
    a.leave().await;
}
