//! IPv6 neighbour unreachability detection where kube-proxy DNATs the service address
//! (issue: production conditions, point 7). A client re-checking a cached entry sends an
//! NS unicast to the service address at the owner's MAC; the address is configured on no
//! interface of the node (kube-proxy's iptables and nftables modes, the default), so the
//! kernel never delivers that NS to a raw ICMPv6 socket. Before, the client's entry went
//! FAILED and its traffic waited for a multicast re-resolution (MetalLB #2920); the
//! speaker now reads NS frames off the interface and answers it.
//!
//! Needs `target/debug/ferrolb-speaker` and `nft` (testbed/prereqs.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferrolb_lab::addressing::{self, node_v6, owner};
use ferrolb_lab::client::neighbour;
use ferrolb_lab::netns::Netns;
use ferrolb_lab::speaker::{Speaker, write_membership_key, yaml};
use ferrolb_lab::{Lab, LabConfig, wait};

const T: Duration = Duration::from_secs(30);

fn run(ns: &Netns, argv: &[&str]) {
    let out = ns.exec_output(argv).unwrap();
    assert!(out.status.success(), "{argv:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// kube-proxy's nftables mode in short: the service address is DNATed to a backend on
/// the node, and put on no interface.
fn dnat(ns: &Netns, vip: IpAddr, to: std::net::Ipv6Addr) {
    let rule = format!(
        "add table ip6 flbkp ; add chain ip6 flbkp pre {{ type nat hook prerouting priority -100 ; }} ; \
         add rule ip6 flbkp pre ip6 daddr {vip} tcp dport 80 dnat to [{to}]:8080"
    );
    run(ns, &["nft", &rule]);
}

/// One unanswered packet to `vip` from the client: enough to move a STALE entry on.
fn poke(lab: &Lab, vip: IpAddr) {
    let _ = lab.client().exec_output(&["ping", "-6", "-c", "1", "-W", "1", &vip.to_string()]);
}

#[test]
fn a_client_rechecking_a_dnated_ipv6_address_is_answered_by_unicast() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let ([_, vip], _) = addressing::l2_vip_pair();
    assert!(vip.is_ipv6());
    for i in [1, 2] {
        dnat(lab.node(i), vip, node_v6(i));
    }
    let mut objs: Vec<String> = (1..=2).map(yaml::node).collect();
    objs.push(yaml::pool("lan", &["2001:db8::200-2001:db8::2ff"]));
    objs.push(yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]));
    objs.push(yaml::service("web", &[vip]));
    let file = yaml::stream(&objs);
    let speakers: Vec<Speaker> = (1..=2).map(|i| Speaker::start_l2(&lab, i, &file, &key).unwrap()).collect();
    let o = owner(vip, &[1, 2]);
    let mac = addressing::node_mac(o);
    let r = wait::until_value(
        &format!("{vip} answered by node{o} alone"),
        T,
        || lab.ndp_answers(vip),
        |m| *m == BTreeSet::from([mac.clone()]),
    );
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(30));

    // The client resolves it (multicast NS), then holds a STALE entry, as after a while
    // without traffic.
    let dev = "eth0";
    poke(&lab, vip);
    wait::until("the client resolved the VIP", T, || {
        Ok(neighbour(lab.client(), dev, vip)?.filter(|n| n.mac.as_deref() == Some(mac.as_str())).map(|_| ()))
    })
    .unwrap();
    run(
        lab.client(),
        &["ip", "-6", "neigh", "change", &vip.to_string(), "lladdr", &mac, "dev", dev, "nud", "stale"],
    );

    // Traffic: STALE → DELAY → PROBE, unicast NS to the owner's MAC. Answered, the entry
    // is REACHABLE again; unanswered, it goes FAILED after three probes.
    let t = Instant::now();
    poke(&lab, vip);
    let mut seen = Vec::new();
    let state = wait::until_value(
        "the client's entry leaves DELAY/PROBE",
        T,
        || {
            let st = neighbour(lab.client(), dev, vip)?.map(|n| n.state).unwrap_or_default();
            if seen.last() != Some(&st) {
                seen.push(st.clone());
            }
            Ok(st)
        },
        |st| st.iter().any(|s| s == "REACHABLE" || s == "FAILED" || s == "INCOMPLETE"),
    )
    .unwrap();
    println!("{vip}: the client's entry went {seen:?} in {:?}", t.elapsed());
    let logs: String = speakers.iter().map(Speaker::logs).collect();
    assert_eq!(state, ["REACHABLE"], "the unicast NS went unanswered: {seen:?}\n{logs}");
    // Only a probe answered makes a DELAY entry REACHABLE here: the ping went unanswered,
    // so no upper layer confirmed anything (the PROBE state lasts a millisecond).
    assert!(seen.iter().any(|s| s.iter().any(|x| x == "DELAY")), "the entry never left STALE: {seen:?}");
}
