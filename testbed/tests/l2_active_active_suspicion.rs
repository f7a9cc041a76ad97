//! A heartbeat suspicion moves no active-active bucket, with real speakers in the lab.
//!
//! A node hears the L2 heartbeats of the single-owner addresses' owners it is successor
//! of, and nobody else does: when they stop, it alone suspects the owner and takes those
//! addresses over within tens of milliseconds. Had it also spread the active-active
//! addresses without the owner, it would take buckets the owner still serves, and both
//! would answer a new flow's SYN: the client resets the connection (CI saw it in
//! `real_circle`, when a busy node's beats came late). So the beats of one owner are
//! dropped on its successor only, SWIM still flowing: the successor takes the
//! single-owner address over, and its share of the active-active buckets stays as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::time::{Duration, Instant};

use ferrolb_lab::speaker::{Speaker, diag, node_metric, write_membership_key, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use ferrolb_proto::election;

const METRICS_PORT: u16 = 9473;
const NODES: usize = 3;

/// A counter or gauge of node `i`'s speaker (0 when absent).
fn sample(lab: &Lab, i: usize, name: &str) -> f64 {
    node_metric(lab, i, METRICS_PORT, name).unwrap_or(0.0)
}

#[test]
fn a_heartbeat_suspicion_takes_over_single_addresses_but_moves_no_bucket() {
    let lab = Lab::up(LabConfig::nodes(NODES)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let (shared, single) = (addressing::lan_v4(0xd4), addressing::lan_v4(0x96));
    let mut objs: Vec<String> = (1..=NODES).map(yaml::node).collect();
    objs.push(yaml::pool("lan", &["192.0.2.200-192.0.2.250"]));
    objs.push(yaml::l2_advertisement("lan", &["ipAddressPools: [lan]", "mode: ActiveActive"]));
    objs.push(yaml::pool("single", &["192.0.2.150-192.0.2.160"]));
    objs.push(yaml::l2_advertisement("single", &["ipAddressPools: [single]"]));
    objs.push(yaml::service("web", &[shared]));
    objs.push(yaml::service("one", &[single]));
    let file = yaml::stream(&objs);
    let speakers = Speaker::start_l2_metered(&lab, NODES, &file, &key, METRICS_PORT).unwrap();
    let logs = || diag(&lab, &speakers.iter().collect::<Vec<_>>());

    let names: Vec<String> = (1..=NODES).map(addressing::node_name).collect();
    let owner = election::owner(single, names.iter().map(String::as_str)).unwrap().to_owned();
    let successor = election::owner(single, names.iter().map(String::as_str).filter(|n| **n != owner))
        .unwrap()
        .to_owned();
    let index = |name: &str| names.iter().position(|n| n == name).unwrap() + 1;
    let (x, y) = (index(&owner), index(&successor));
    let buckets = format!("ferrolb_l2_active_active_buckets{{address=\"{shared}\"}}");
    let share = |b: f64| (b - 256.0 / NODES as f64).abs() <= 1.0;
    let settled =
        wait::until("every node owns its share of the buckets, the successor hears beats", T, || {
            let shares: Vec<f64> = (1..=NODES).map(|i| sample(&lab, i, &buckets)).collect();
            let beats = sample(&lab, y, "ferrolb_membership_heartbeats_received_total");
            Ok((shares.iter().all(|b| share(*b)) && beats > 0.0).then_some(shares))
        });
    let shares = settled.unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    println!("{single} owned by {owner}, successor {successor}; buckets of {shared}: {shares:?}");

    // The owner's beats (datagrams "FLBH…") are dropped on its successor; SWIM ("FLBM…") flows.
    let source = addressing::node_v4(x).to_string();
    let rules = [
        vec!["add", "table", "inet", "cut"],
        vec!["add", "chain", "inet", "cut", "input", "{ type filter hook input priority -400; }"],
        vec!["add", "rule", "inet", "cut", "input", "ip", "saddr", &source, "meta", "l4proto", "udp"],
    ];
    let ns = &lab.nodes()[y - 1];
    for r in &rules[..2] {
        ns.exec(&[&["nft"][..], r].concat()).unwrap();
    }
    let mut drop = rules[2].clone();
    drop.extend(["@th,64,32", "0x464c4248", "counter", "drop"]);
    ns.exec(&[&["nft"][..], &drop].concat()).unwrap();

    // The successor suspects the owner and takes the single address over; for the
    // suspicion's hold (3 s) its buckets of the shared address stay its share.
    let suspicions = "ferrolb_membership_heartbeat_suspicions_total";
    let suspected = wait::until("the successor suspects the owner", T, || {
        Ok((sample(&lab, y, suspicions) > 0.0).then_some(()))
    });
    suspected.unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let took = "ferrolb_l2_ownership_changes_total{change=\"acquired\",reason=\"heartbeat_missed\"}";
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < Duration::from_millis(1500) {
        seen.push((sample(&lab, y, took), sample(&lab, y, &buckets)));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(seen.iter().any(|(t, _)| *t > 0.0), "{successor} never took {single} over: {seen:?}\n{}", logs());
    assert!(
        seen.iter().all(|(_, b)| share(*b)),
        "{successor}'s buckets of {shared} while it suspected {owner} (acquired, buckets): {seen:?}\n{}",
        logs()
    );
    for i in 1..=NODES {
        assert!(share(sample(&lab, i, &buckets)), "node{i}'s buckets of {shared}\n{}", logs());
    }
}

const T: Duration = Duration::from_secs(60);
