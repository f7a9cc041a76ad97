//! A node its peers declared down serves none of its active-active buckets once it learns
//! so, until they count it again, with real speakers in the lab.
//!
//! A speaker that gets no CPU for longer than SWIM's suspicion (a starved node) is
//! declared down by the others, who spread its buckets among themselves; the kernel
//! still filters by its last table meanwhile, which nothing in user space can help.
//! When it runs again it is told it is down and rejoins with a renewed identity: the
//! others count it as a joiner, for their join grace. Were it to keep electing itself,
//! it would take the new flows of its old buckets beside their new owners for that
//! grace, and each such flow's SYN would be answered twice (CI saw the resets in
//! `real_circle`). So it counts itself as a joiner too: its share drops to nothing, and
//! comes back when the others hand the buckets back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferrolb_lab::speaker::{Speaker, diag, node_metric, write_membership_key, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const METRICS_PORT: u16 = 9474;
const NODES: usize = 3;
/// How long the frozen speaker gets no CPU: well past SWIM's declaring it down.
const FROZEN: Duration = Duration::from_secs(4);
const T: Duration = Duration::from_secs(60);

/// A gauge of node `i`'s speaker (None when its metrics do not answer).
fn sample(lab: &Lab, i: usize, name: &str) -> Option<f64> {
    node_metric(lab, i, METRICS_PORT, name)
}

/// Sends `signal` (STOP, CONT) to a speaker.
fn signal(s: &Speaker, signal: &str) {
    let pid = s.pid().expect("the speaker runs").to_string();
    let status = std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap();
    assert!(status.success());
}

/// Three speakers serving one active-active address, each owning its third of the
/// buckets; and the address.
fn settled_lab() -> (Lab, Vec<Speaker>, IpAddr) {
    let lab = Lab::up(LabConfig::nodes(NODES)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let shared = addressing::lan_v4(0xd4);
    let mut objs: Vec<String> = (1..=NODES).map(yaml::node).collect();
    objs.push(yaml::pool("lan", &["192.0.2.200-192.0.2.250"]));
    objs.push(yaml::l2_advertisement("lan", &["ipAddressPools: [lan]", "mode: ActiveActive"]));
    objs.push(yaml::service("web", &[shared]));
    let file = yaml::stream(&objs);
    let speakers = Speaker::start_l2_metered(&lab, NODES, &file, &key, METRICS_PORT).unwrap();
    let settled = wait::until("every node owns its share of the buckets", T, || {
        let s = shares(&lab, shared, &[1, 2, 3]);
        Ok(s.iter().all(|b| near(*b, THIRD)).then_some(s))
    });
    let s = settled.unwrap_or_else(|e| panic!("{e}\n{}", diag(&lab, &speakers.iter().collect::<Vec<_>>())));
    println!("buckets of {shared}: {s:?}");
    (lab, speakers, shared)
}

/// The buckets of `shared` each of `nodes` serves (None where its metrics do not answer).
fn shares(lab: &Lab, shared: IpAddr, nodes: &[usize]) -> Vec<Option<f64>> {
    let name = format!("ferrolb_l2_active_active_buckets{{address=\"{shared}\"}}");
    nodes.iter().map(|i| sample(lab, *i, &name)).collect()
}

fn near(b: Option<f64>, want: f64) -> bool {
    b.is_some_and(|b| (b - want).abs() <= 1.0)
}

const THIRD: f64 = 256.0 / NODES as f64;

#[test]
fn a_node_declared_down_takes_no_bucket_until_it_is_counted_again() {
    let (lab, speakers, shared) = settled_lab();
    let logs = || diag(&lab, &speakers.iter().collect::<Vec<_>>());
    let shares = |nodes: &[usize]| shares(&lab, shared, nodes);

    // node1 gets no CPU: the others declare it down and take its buckets.
    let frozen = &speakers[0];
    signal(frozen, "STOP");
    let t = Instant::now();
    let taken = wait::until("node2 and node3 spread the buckets between them", T, || {
        let s = shares(&[2, 3]);
        Ok(s.iter().all(|b| near(*b, 128.0)).then_some(s))
    });
    if let Err(e) = taken {
        signal(frozen, "CONT");
        panic!("{e}\n{}", logs());
    }
    std::thread::sleep(FROZEN.saturating_sub(t.elapsed()));
    let mark = frozen.logs().len();
    signal(frozen, "CONT");

    // Running again, node1 is told it is down and rejoins; until the others count it,
    // it serves none of its buckets.
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < Duration::from_secs(5) {
        seen.push((start.elapsed().as_millis(), shares(&[1, 2, 3])));
        std::thread::sleep(Duration::from_millis(20));
    }
    let since = frozen.logs().get(mark..).unwrap_or_default().to_string();
    assert!(since.contains("this node was declared down and rejoined"), "{since}\n{}", logs());
    // Until it hears so (a probe round), node1 still serves its share, as it did frozen;
    // from then on it serves none while node2 and node3 hold all 256.
    let Some(dropped) = seen.iter().position(|(_, s)| s[0] == Some(0.0)) else {
        panic!("node1 never dropped its share (ms since SIGCONT, buckets of node1..3): {seen:?}\n{}", logs());
    };
    println!("node1 served none of its buckets {} ms after SIGCONT", seen[dropped].0);
    let overlaps: Vec<_> = seen[dropped..]
        .iter()
        .filter(|(_, s)| s[0].is_some_and(|b| b > 0.0) && s[1..].iter().all(|b| near(*b, 128.0)))
        .collect();
    assert!(
        overlaps.is_empty(),
        "node1 served buckets again while node2 and node3 still held all 256: {overlaps:?}\nall samples: \
         {seen:?}\n{}",
        logs()
    );
    let back = wait::until("every node owns its share again", T, || {
        let s = shares(&[1, 2, 3]);
        Ok(s.iter().all(|b| near(*b, THIRD)).then_some(s))
    });
    back.unwrap_or_else(|e| panic!("{e}\n{}", logs()));
}

/// A partition renews identities on both sides as it heals, each told it is down by a
/// member it had declared down itself: that says nothing about what its own side counts.
/// So nobody stands back: node2 and node3 keep their halves until node1 counts again.
/// (Stood back, each would count only the other for the grace, and nobody would take new
/// flows.) Meanwhile, as before, node1 serves all 256 buckets beside them
/// (README-l2.md, "A membership partition on one segment").
#[test]
fn a_healing_partition_renews_identities_without_anyone_standing_back() {
    let (lab, speakers, shared) = settled_lab();
    let logs = || diag(&lab, &speakers.iter().collect::<Vec<_>>());
    let shares = |nodes: &[usize]| shares(&lab, shared, nodes);
    let ns = &lab.nodes()[0];
    let nft = |args: &[&str]| ns.exec(&[&["nft"][..], args].concat()).unwrap();
    nft(&["add", "table", "inet", "cut"]);
    for (chain, hook) in [("in", "input"), ("out", "output")] {
        nft(&[
            "add",
            "chain",
            "inet",
            "cut",
            chain,
            &format!("{{ type filter hook {hook} priority -400; }}"),
        ]);
        nft(&["add", "rule", "inet", "cut", chain, "udp", "dport", "7946", "drop"]);
    }
    let split = wait::until("node1 alone serves 256 buckets, node2 and node3 128 each", T, || {
        let s = shares(&[1, 2, 3]);
        Ok((near(s[0], 256.0) && near(s[1], 128.0) && near(s[2], 128.0)).then_some(s))
    });
    split.unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    let marks: Vec<usize> = speakers.iter().map(|s| s.logs().len()).collect();
    nft(&["delete", "table", "inet", "cut"]);
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        let s = shares(&[1, 2, 3]);
        let healed = s.iter().all(|b| near(*b, THIRD));
        seen.push((start.elapsed().as_millis(), s));
        if healed {
            break;
        }
        assert!(start.elapsed() < T, "not healed: {seen:?}\n{}", logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    let emptied: Vec<_> = seen.iter().filter(|(_, s)| s[1] == Some(0.0) || s[2] == Some(0.0)).collect();
    assert!(
        emptied.is_empty(),
        "node2 or node3 served no bucket as the partition healed: {emptied:?}\n{}",
        logs()
    );
    let since: Vec<String> = speakers
        .iter()
        .zip(&marks)
        .map(|(s, m)| s.logs().get(*m..).unwrap_or_default().to_string())
        .collect();
    let renewed = since.iter().filter(|l| l.contains("told this identity is down")).count();
    println!("{renewed} of {NODES} speakers renewed their identity as the partition healed");
    assert!(renewed >= 2, "both sides renew as a partition heals\n{}", logs());
    for (i, l) in since.iter().enumerate() {
        assert!(!l.contains("this node was declared down and rejoined"), "node{} stood back:\n{l}", i + 1);
    }
}
