//! The real `ferrolb-speaker --static` with L2 announcements: membership between the
//! nodes' speakers, one owner per address answering ARP and NDP, failover when the
//! owner dies, make-before-break handover on SIGTERM, a joining node taking only the
//! addresses it wins, and a wrong membership key changing nothing.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

use ferrolb_lab::addressing::{lan_v4 as v4, owner};
use ferrolb_lab::client::{self, ArpProbes, ProbeStream};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::Spawn;
use ferrolb_lab::speaker::{Speaker, write_membership_key, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use ferrolb_proto::membership::claim::ALONE_WAIT;
use ferrolb_proto::membership::{HeartbeatConfig, Timings};

const T: Duration = Duration::from_secs(30);

/// Nodes 1..=n, the L2 pool, one L2Advertisement and a Service holding `vips`.
fn static_file(n: usize, vips: &[IpAddr]) -> String {
    let mut objs: Vec<String> = (1..=n).map(yaml::node).collect();
    objs.push(yaml::pool("lan", &["192.0.2.200-192.0.2.250", "2001:db8::200-2001:db8::250"]));
    objs.push(yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]));
    objs.push(yaml::service("web", vips));
    yaml::stream(&objs)
}

/// Pings `vip` until the client's neighbour entry holds node `i`'s MAC.
fn wait_resolved(lab: &Lab, vip: IpAddr, i: usize) {
    let r = client::wait_resolved(lab.client(), "eth0", vip, &addressing::node_mac(i), T);
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(30));
}

fn neighbour_mac(lab: &Lab, vip: IpAddr) -> Option<String> {
    client::neighbour(lab.client(), "eth0", vip).unwrap().and_then(|n| n.mac)
}

fn prefix(vip: IpAddr) -> String {
    format!("{vip}/{}", if vip.is_ipv4() { 32 } else { 128 })
}

fn del_vip_on_lo(ns: &Netns, vip: IpAddr) {
    ns.ip(&["addr", "del", &prefix(vip), "dev", "lo"]).unwrap();
}

/// A two-node lab, its L2 pair ([`addressing::l2_vip_pair`]) on both nodes' `lo`, a speaker
/// on each, and the pair's owner.
fn owned_pair() -> (Lab, [IpAddr; 2], Vec<Speaker>, usize) {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let (vips, o) = addressing::l2_vip_pair();
    let speakers = two_speakers(&lab, &vips, &key);
    (lab, vips, speakers, o)
}

/// Two nodes with both VIPs on `lo` and a speaker each; both VIPs resolved to the owner.
fn two_speakers(lab: &Lab, vips: &[IpAddr], key: &Path) -> Vec<Speaker> {
    for n in lab.nodes() {
        for v in vips {
            lab.add_vip_on_lo(n, *v).unwrap();
        }
    }
    let file = static_file(2, vips);
    let speakers =
        vec![Speaker::start_l2(lab, 1, &file, key).unwrap(), Speaker::start_l2(lab, 2, &file, key).unwrap()];
    for v in vips {
        wait_resolved(lab, *v, owner(*v, &[1, 2]));
    }
    speakers
}

/// The link-layer addresses `vip` took in the client's neighbour table, in order, from
/// the output of `ip monitor neigh`.
fn macs_seen(monitor: &str, vip: IpAddr) -> Vec<String> {
    let prefix = format!("{vip} ");
    monitor
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "lladdr").nth(1).map(str::to_owned))
        .collect()
}

/// Exactly one MAC, the owner's, answers ARP and NDP; SIGTERM of the owner (three
/// times) hands both addresses over without losing a single 10 ms probe, even though
/// the old owner stops accepting the addresses right after it exits. The owner of
/// trials 2 and 3 took the addresses back less than a second before its SIGTERM, so its
/// own takeover announcements were still pending: once the successor has announced, the
/// client's entry must never move back to the old owner (it did, for up to a second,
/// and a probe sent in that window to a node that had stopped answering was lost).
#[test]
fn one_owner_answers_and_sigterm_hands_over_without_loss() {
    let (lab, [a, b], mut speakers, o) = owned_pair();
    let other = 3 - o;
    assert_eq!(lab.arp_answers(a, 3).unwrap(), BTreeSet::from([addressing::node_mac(o)]), "{}", lab.logs(30));
    assert_eq!(lab.ndp_answers(b).unwrap(), BTreeSet::from([addressing::node_mac(o)]), "{}", lab.logs(30));

    for trial in 1..=3 {
        let p4 = ProbeStream::start(lab.client(), a, Duration::from_millis(10)).unwrap();
        let p6 = ProbeStream::start(lab.client(), b, Duration::from_millis(10)).unwrap();
        for p in [&p4, &p6] {
            p.wait_answered(30, T).unwrap();
        }
        let monitor = lab
            .spawn(
                lab.client(),
                Spawn::new(format!("neigh-monitor-{trial}"), &["stdbuf", "-oL", "ip", "monitor", "neigh"]),
            )
            .unwrap();
        // Listening (line-buffered: its output is a file) once it reports a marker entry,
        // an unused LAN address, rewritten until it does: the monitor subscribes a moment
        // after it starts.
        let mut flip = 0u8;
        wait::until_holds("the neighbour monitor listening", T, || {
            flip ^= 1;
            let mac = format!("00:00:5e:00:53:f{flip}");
            let marker =
                ["neigh", "replace", "192.0.2.254", "lladdr", &mac, "dev", "eth0", "nud", "permanent"];
            lab.client().ip(&marker).is_ok() && monitor.logs().contains("192.0.2.254 ")
        })
        .unwrap();
        lab.client().ip(&["neigh", "del", "192.0.2.254", "dev", "eth0"]).unwrap();
        let code = speakers[o - 1].terminate(Duration::from_secs(15));
        assert_eq!(code, Some(0), "SIGTERM exits 0\n{}", speakers[o - 1].logs());
        // The node stops serving the addresses at once: a client still sending to it
        // would lose probes from here on.
        del_vip_on_lo(lab.node(o), a);
        del_vip_on_lo(lab.node(o), b);
        for p in [&p4, &p6] {
            p.wait_answered(30, T).unwrap();
        }
        for (name, p) in [("IPv4", p4), ("IPv6", p6)] {
            let r = p.stop(Duration::from_millis(100));
            println!("SIGTERM trial {trial} {name}: {} probes, {} lost, gaps {:?}", r.sent, r.lost(), r.gaps);
            assert_eq!(r.lost(), 0, "trial {trial} {name}: make before break\n{}", lab.logs(40));
        }
        for v in [a, b] {
            assert_eq!(neighbour_mac(&lab, v), Some(addressing::node_mac(other)), "{v} moved to node{other}");
        }
        let mut monitor = monitor;
        monitor.kill();
        let seen = monitor.logs();
        for v in [a, b] {
            let macs = macs_seen(&seen, v);
            let (old, new) = (addressing::node_mac(o), addressing::node_mac(other));
            let moved = macs.iter().position(|m| *m == new);
            assert!(moved.is_some(), "trial {trial}: {v} never moved to node{other}: {macs:?}\n{seen}");
            let back = moved.and_then(|i| macs.iter().skip(i).position(|m| *m == old));
            assert_eq!(
                back, None,
                "trial {trial}: {v} moved back to the old owner node{o}: {macs:?}\n{seen}"
            );
        }
        assert!(speakers[o - 1].logs().contains("left membership"), "{}", speakers[o - 1].logs());
        // Back to two nodes: the owner returns and takes its addresses back.
        lab.add_vip_on_lo(lab.node(o), a).unwrap();
        lab.add_vip_on_lo(lab.node(o), b).unwrap();
        speakers[o - 1].restart().unwrap();
        for v in [a, b] {
            client::wait_neighbour_mac(lab.client(), "eth0", v, &addressing::node_mac(o), T).unwrap();
        }
    }
    // The other node answers on for the join grace (make before break), then only the
    // owner does.
    let only_o = BTreeSet::from([addressing::node_mac(o)]);
    wait::until_value(
        "the returned owner alone answering ARP",
        T,
        || lab.arp_answers(a, 2),
        |m| *m == only_o,
    )
    .unwrap();
    wait::until_value("the returned owner alone answering NDP", T, || lab.ndp_answers(b), |m| *m == only_o)
        .unwrap();
}

/// Probes the VIPs while `fail` runs; waits until the survivor answers both again.
fn failover(lab: &Lab, what: &str, vips: [IpAddr; 2], survivor: usize, fail: impl FnOnce()) {
    let reports = client::probe_across(lab.client(), &vips, T, fail);
    let reports = reports.unwrap_or_else(|e| panic!("{what}: {e:?}\n{}", lab.logs(40)));
    for (v, r) in vips.iter().zip(reports) {
        println!("{what} {v}: {} probes, {} lost, outage {:?}", r.sent, r.lost(), r.max_outage());
        assert_eq!(
            neighbour_mac(lab, *v),
            Some(addressing::node_mac(survivor)),
            "{what}: {v} moved to node{survivor}"
        );
    }
}

/// The owner SIGKILLed with its link cut, then (restored) its link cut alone: the
/// client's probes resume through the other node each time, and it is the successor
/// that noticed the missed heartbeats and took over, each time, not SWIM (which needs
/// several probe periods).
#[test]
fn owner_failure_moves_the_addresses_to_the_survivor() {
    let (lab, [a, b], mut speakers, o) = owned_pair();
    let other = 3 - o;
    let node = lab.node(o).clone();

    let missed = format!("no heartbeat from node{o}");
    let victim = &mut speakers[o - 1];
    failover(&lab, "SIGKILL + link down", [a, b], other, || {
        victim.kill();
        node.ip(&["link", "set", "eth0", "down"]).unwrap();
    });
    let logs = speakers[other - 1].logs();
    assert_eq!(logs.matches(missed.as_str()).count(), 1, "{logs}");
    node.ip(&["link", "set", "eth0", "up"]).unwrap();
    speakers[o - 1].restart().unwrap();
    for v in [a, b] {
        client::wait_neighbour_mac(lab.client(), "eth0", v, &addressing::node_mac(o), T).unwrap();
    }
    // Back to one owner: the survivor let go of what the restarted node owns again (a
    // suspicion left behind once kept it claiming, and the next failure went unseen).
    wait_owners(&lab, &[a], &[1, 2]);

    failover(&lab, "link down", [a, b], other, || {
        node.ip(&["link", "set", "eth0", "down"]).unwrap();
    });
    node.ip(&["link", "set", "eth0", "up"]).unwrap();
    let logs = speakers[other - 1].logs();
    assert_eq!(logs.matches(missed.as_str()).count(), 2, "{logs}");
}

/// A starved successor does not cause a failover: the successor gets no CPU at all
/// (SIGSTOP) for 150 ms, seven times the heartbeat silence that makes it suspect the
/// owner, while the owner keeps beating; once it runs again it reads the queued
/// beats (and knows its own tick came late) before it judges, so it suspects nobody and
/// the addresses stay where they are.
#[test]
fn a_starved_successor_takes_nothing_over() {
    const STARVED: Duration = Duration::from_millis(150);
    let heartbeats = HeartbeatConfig::default();
    assert!(STARVED > heartbeats.silence() * 5, "a starvation the successor could sleep through");
    let (lab, [a, b], speakers, o) = owned_pair();
    let successor = &speakers[2 - o];
    // Watching the owner: without its beats this test would prove nothing.
    successor.wait_log(&format!("hearing heartbeats from node{o}"), T).unwrap();
    let mark = successor.logs().len();
    for _ in 0..3 {
        signal(successor, "STOP");
        std::thread::sleep(STARVED); // the input: how long the successor gets no CPU
        signal(successor, "CONT");
        // Past the longest silence a watch may stretch to: a suspicion would be logged.
        let since = || Ok(successor.logs().get(mark..).unwrap_or_default().to_string());
        wait::stays("the successor suspects nobody", heartbeats.max_silence, since, |s| {
            !s.contains("stopped sending heartbeats") && !s.contains("now owns the address")
        })
        .unwrap();
    }
    for v in [a, b] {
        assert_eq!(neighbour_mac(&lab, v), Some(addressing::node_mac(o)), "{v} stays with node{o}");
    }
}

/// Sends `signal` (STOP, CONT) to a speaker.
fn signal(s: &Speaker, signal: &str) {
    let pid = s.pid().expect("the speaker runs").to_string();
    let status = std::process::Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap();
    assert!(status.success());
}

/// A false suspicion heals at once: the owner gets no CPU until the client follows the
/// successor (past the 20 ms heartbeat silence, short of SWIM's detection), so its successor takes the addresses
/// over and the client follows; the owner, running again, reads the successor's
/// "took over" notice and announces its addresses again while the successor, hearing
/// its beats, lets go. Without the notice the client would keep sending to the
/// successor until its neighbour entry went stale (tens of seconds).
///
/// The successor lets go as soon as the beats resume, not after the join grace of a
/// member that left and came back: the owner never stopped answering, and every
/// moment the successor keeps the addresses, both answer for them.
#[test]
fn a_falsely_suspected_owner_takes_its_addresses_back_at_once() {
    let (lab, [a, b], speakers, o) = owned_pair();
    let (owner_s, successor) = (&speakers[o - 1], &speakers[2 - o]);
    successor.wait_log(&format!("hearing heartbeats from node{o}"), T).unwrap();
    let mark = successor.logs().len();
    signal(owner_s, "STOP");
    let r = client::wait_neighbour_mac(lab.client(), "eth0", a, &addressing::node_mac(3 - o), T);
    signal(owner_s, "CONT");
    r.unwrap();
    owner_s.wait_log("took over its addresses; announcing them again", T).unwrap();
    successor.wait_log("ended (beats_resumed)", T).unwrap();
    successor.wait_log("no longer owns the address", T).unwrap();
    let since = successor.logs().get(mark..).unwrap_or_default().to_string();
    assert!(since.contains(&format!("node{o} sends heartbeats again")), "{since}");
    assert!(!since.contains("joined membership"), "let go only after the join grace\n{since}");
    for v in [a, b] {
        client::wait_neighbour_mac(lab.client(), "eth0", v, &addressing::node_mac(o), Duration::from_secs(5))
            .unwrap();
    }
}

fn wait_owners(lab: &Lab, vips: &[IpAddr], members: &[usize]) {
    for v in vips {
        let want = BTreeSet::from([addressing::node_mac(owner(*v, members))]);
        let r = wait::until_value(
            &format!("{v} answered by its owner only"),
            T,
            || Ok(lab.arp_answers(*v, 1).unwrap()),
            |m| *m == want,
        );
        assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    }
}

/// Starts node `i`'s speaker with the shipped defaults: the exact counts of ownership
/// changes below also prove that no false suspicion moved anything.
fn start_member(lab: &Lab, i: usize, file: &str, key: &Path) -> Speaker {
    Speaker::start_l2(lab, i, file, key).unwrap()
}

/// A third speaker with the wrong key changes nothing; with the right key it takes
/// exactly the addresses election gives it, and the others release only those.
#[test]
fn joining_speaker_takes_only_what_it_wins_and_a_wrong_key_changes_nothing() {
    let lab = Lab::up(LabConfig::nodes(3)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let vips: Vec<IpAddr> = (201..=208).map(v4).collect();
    let file = static_file(3, &vips);
    let mut s = [start_member(&lab, 1, &file, &key), start_member(&lab, 2, &file, &key)];
    wait_owners(&lab, &vips, &[1, 2]);

    // node3 with another key: the others never see it, it claims nothing. (What node1 and
    // node2 logged before node3 started is not about it.)
    let key3 = lab.subdir("node3-key").unwrap().join("membership.key");
    std::fs::write(&key3, "a-different-key-of-at-least-32-characters\n").unwrap();
    let before: Vec<usize> = s.iter().map(|sp| sp.logs().len()).collect();
    let mut s3 = start_member(&lab, 3, &file, &key3);
    s3.wait_log("the membership key differs", T).unwrap();
    // Past the moment a node that settled alone claims (join_timeout, then ALONE_WAIT).
    let lone_claim = Timings::default().join_timeout + ALONE_WAIT;
    let since = |i: usize| s[i].logs().get(before[i]..).unwrap_or_default().to_owned();
    let logs = || Ok([since(0), since(1), s3.logs()]);
    wait::stays("node3 unseen and claiming nothing", lone_claim, logs, |[l1, l2, l3]| {
        [l1, l2].iter().all(|l| !l.contains("node3 joined membership") && !l.contains("no longer owns"))
            && !l3.contains("this node now owns")
    })
    .unwrap();
    wait_owners(&lab, &vips, &[1, 2]);

    // The right key: node3 joins and wins its share. Make before break: a client
    // resolving an address node3 wins is answered at every moment (a request every
    // 10 ms).
    std::fs::write(&key3, std::fs::read_to_string(&key).unwrap()).unwrap();
    let marks: Vec<usize> = s.iter().map(|sp| sp.logs().len()).collect();
    let won: Vec<IpAddr> = vips.iter().copied().filter(|v| owner(*v, &[1, 2, 3]) == 3).collect();
    assert!(!won.is_empty(), "the VIP set must give node3 something to win");
    let senders: Vec<Ipv4Addr> = (150..200).map(|k| Ipv4Addr::new(192, 0, 2, k)).collect();
    let IpAddr::V4(won_v4) = won[0] else { panic!("{} is not IPv4", won[0]) };
    let arp = ArpProbes::start(lab.client(), "eth0", won_v4, Duration::from_millis(10), &senders).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    s3.restart().unwrap();
    wait_owners(&lab, &vips, &[1, 2, 3]);
    std::thread::sleep(Duration::from_millis(300));
    let arp = arp.stop().unwrap();
    println!("ARP for {} while node3 joined: {arp:?}", won[0]);
    assert!(arp.unanswered.is_empty(), "{arp:?}\n{}", lab.logs(40));
    assert_eq!(arp.owners.last(), Some(&addressing::node_mac(3)), "{arp:?}");
    assert!(arp.owners.len() >= 2, "{arp:?}");
    for (i, sp) in s.iter_mut().enumerate() {
        let lost =
            vips.iter().filter(|v| owner(**v, &[1, 2]) == i + 1 && owner(**v, &[1, 2, 3]) == 3).count();
        let logs = sp.logs();
        let since = logs.get(marks[i]..).unwrap_or_default();
        assert_eq!(since.matches("no longer owns the address").count(), lost, "node{}:\n{since}", i + 1);
        assert_eq!(since.matches("now owns the address").count(), 0, "node{}:\n{since}", i + 1);
        assert!(since.contains("node3 joined membership"), "{since}");
        // A joining member may have claimed addresses while it thought the others dead:
        // every owner re-sends its gratuitous announcements.
        assert!(since.contains("re-announcing the addresses this node still owns"), "{since}");
    }
    assert_eq!(s3.logs().matches("this node now owns the address").count(), won.len(), "{}", s3.logs());
}

/// The successor changes under a live owner (node3 joins and becomes the successor of
/// an address the owner keeps): the owner stops beating its former successor and tells
/// it so, and the former successor never suspects it. Before `Release` it did, 20 ms
/// later, in every such change (seen in the rolling upgrade of `real_circle`), and
/// elected without a live owner.
#[test]
fn a_new_successor_is_no_death_of_the_owner() {
    let lab = Lab::up(LabConfig::nodes(3)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    // An address whose owner is the same with and without node3, and whose successor
    // becomes node3 when it joins.
    let vip = (200..=250)
        .map(v4)
        .find(|v| {
            let o = owner(*v, &[1, 2]);
            let rest: Vec<usize> = [1, 2, 3].into_iter().filter(|n| *n != o).collect();
            owner(*v, &[1, 2, 3]) == o && owner(*v, &rest) == 3
        })
        .expect("the pool holds an address whose successor becomes node3");
    let (o, former) = (owner(vip, &[1, 2]), 3 - owner(vip, &[1, 2]));
    let file = static_file(3, &[vip]);
    let s = [start_member(&lab, 1, &file, &key), start_member(&lab, 2, &file, &key)];
    wait_owners(&lab, &[vip], &[1, 2]);
    let watcher = &s[former - 1];
    watcher.wait_log(&format!("hearing heartbeats from node{o}"), T).unwrap();
    let s3 = start_member(&lab, 3, &file, &key);
    s3.wait_log(&format!("hearing heartbeats from node{o}"), T).unwrap();
    watcher.wait_log(&format!("node{o} no longer beats this node"), T).unwrap();
    // Past the longest silence a watch may stretch to: a watch left behind would fire.
    let suspected = format!("no heartbeat from node{o}");
    let logs = || Ok(watcher.logs());
    wait::stays("the former successor suspects nothing", HeartbeatConfig::default().max_silence, logs, |l| {
        !l.contains(&suspected) && !l.contains("now owns the address")
    })
    .unwrap();
    wait_owners(&lab, &[vip], &[1, 2, 3]);
    let logs = watcher.logs();
    assert!(!logs.contains(&suspected), "{logs}");
    assert!(!logs.contains("now owns the address"), "{logs}");
}
