//! A membership-only partition heals on the wire (issue: production conditions, point 1).
//! The real `ferrolb-speaker --static` in L2 mode on node1 and node2, shipped defaults:
//! UDP between the two is dropped (nftables in node1's namespace) while the LAN still
//! carries ARP, so each declares the other dead and claims its addresses. Address
//! conflict detection must leave one MAC per address within a bounded time (printed;
//! the goal is well under 2 s), where before both answered until the cut ended; once
//! UDP flows again each address is its elected owner's alone.
//!
//! Needs `target/debug/ferrolb-speaker` and `nft` (testbed/prereqs.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ferrolb_testbed::client::ArpProbes;
use ferrolb_testbed::netns::Netns;
use ferrolb_testbed::plan::{node_v4, owner};
use ferrolb_testbed::speaker::{Speaker, diag, write_membership_key, yaml};
use ferrolb_testbed::{Lab, LabConfig, plan, wait};

const T: Duration = Duration::from_secs(30);
/// How long the membership port stays cut.
const CUT: Duration = Duration::from_secs(10);
/// Two MACs on one address for longer than this after the cut fails the test: the time
/// SWIM takes to declare the other side dead (about a second), a conflict detector's
/// probe of a freshly claimed address (`ferrolb_proto::l2::conflict::FRESH`) and its
/// confirmation.
const BOUND: Duration = Duration::from_secs(4);

fn nft(ns: &Netns, rule: &str) {
    let argv: Vec<&str> = std::iter::once("nft").chain(rule.split_whitespace()).collect();
    let out = ns.exec_output(&argv).unwrap();
    assert!(out.status.success(), "nft {rule}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Two VIPs: node1 owns the first, node2 the second, when both are live.
fn vips() -> [Ipv4Addr; 2] {
    [1, 2].map(|n| match plan::l2_vip_of(n, &[1, 2]) {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => panic!("{a} is not IPv4"),
    })
}

#[test]
fn a_membership_only_partition_leaves_one_mac_per_address() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let vips = vips();
    let all: Vec<IpAddr> = vips.iter().map(|v| IpAddr::V4(*v)).collect();
    let file = yaml::l2_file(&[1, 2], &all);
    let speakers: Vec<Speaker> = (1..=2).map(|i| Speaker::start_l2(&lab, i, &file, &key).unwrap()).collect();
    let diag = || diag(&lab, &speakers.iter().collect::<Vec<_>>());
    for v in &all {
        let want = BTreeSet::from([plan::node_mac(owner(*v, &[1, 2]))]);
        let r = wait::until_value(
            &format!("{v} answered by its owner alone"),
            T,
            || Ok(lab.arp_answers(*v, 1).unwrap()),
            |m| *m == want,
        );
        assert!(r.is_ok(), "{r:?}\n{}", diag());
    }

    // A request every 10 ms for each VIP, from before the cut until after the heal.
    let senders: Vec<Ipv4Addr> = (150..200).map(|k| Ipv4Addr::new(192, 0, 2, k)).collect();
    let iv = Duration::from_millis(10);
    let probes: Vec<ArpProbes> =
        vips.iter().map(|v| ArpProbes::start(lab.client(), "eth0", *v, iv, &senders).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let n1 = lab.node(1);
    let peer = node_v4(2);
    nft(n1, "add table inet flbtest");
    nft(n1, "add chain inet flbtest in { type filter hook input priority 0 ; }");
    nft(n1, "add chain inet flbtest out { type filter hook output priority 0 ; }");
    nft(n1, &format!("add rule inet flbtest in ip saddr {peer} meta l4proto udp drop"));
    nft(n1, &format!("add rule inet flbtest out ip daddr {peer} meta l4proto udp drop"));
    let cut_at = started.elapsed() + Duration::from_millis(500);
    for s in &speakers {
        s.wait_log("membership changed", T).unwrap();
    }
    std::thread::sleep(CUT.saturating_sub(started.elapsed()));
    nft(n1, "delete table inet flbtest");
    let healed_at = started.elapsed() + Duration::from_millis(500);
    std::thread::sleep(Duration::from_secs(6));
    let reports: Vec<_> = probes.into_iter().map(|p| p.stop().unwrap()).collect();

    let logs = diag();
    for (v, r) in vips.iter().zip(&reports) {
        // Times from the probes' start (500 ms before the cut).
        let during: Vec<Duration> =
            r.answered_twice_at.iter().copied().filter(|t| *t >= cut_at && *t < healed_at).collect();
        let window = match (during.first(), during.last()) {
            (Some(a), Some(b)) => *b - *a + iv,
            _ => Duration::ZERO,
        };
        let after = r.answered_twice_at.iter().filter(|t| **t >= healed_at).count();
        println!(
            "{v}: {} of {} requests answered by two MACs during the {CUT:?} cut, within {window:?} \
             (goal well under 2 s); {after} after the heal; unanswered {}; owners {:?}",
            during.len(),
            r.sent,
            r.unanswered.len(),
            r.owners
        );
        assert!(
            during.last().is_none_or(|t| *t - cut_at < BOUND),
            "{v}: two MACs answered {:?} after the cut began: {r:?}\n{logs}",
            during.last().map(|t| *t - cut_at)
        );
        assert_eq!(
            r.owners.last(),
            Some(&plan::node_mac(owner(IpAddr::V4(*v), &[1, 2]))),
            "{v}: its elected owner alone answers after the heal: {r:?}\n{logs}"
        );
    }
    assert!(logs.contains("L2 address conflict"), "the speakers saw no conflict: was the cut made?\n{logs}");
}
