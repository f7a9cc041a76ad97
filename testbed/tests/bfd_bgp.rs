//! BFD tears BGP down at once (RFC 5882 §4.3): two nodes run `ferrolb-speaker --static`
//! with a BGPPeer naming a BFDProfile (100 ms × 3, hold time 90 s) towards a router
//! running BFD on its BGP neighbours; a Service (policy Cluster) is announced from
//! both. Cutting node1's switch port leaves the router's kernel route with node2 as
//! the only next hop long before the hold time (the time taken is printed, not
//! asserted), node1's speaker logs BFD down and the BGP reset; restoring the port
//! brings both paths back.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferrolb_lab::addressing::node_ip as v4;
use ferrolb_lab::routers::{self, BfdSpec, Bird, Frr, Router, RouterSpec};
use ferrolb_lab::speaker::{Speaker, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const T: Duration = Duration::from_secs(30);
const HOLD: u16 = 90;

fn router_spec() -> RouterSpec {
    let nodes = [v4(1), v4(2)];
    let mut spec =
        RouterSpec::default().bfd(BfdSpec { interval: Duration::from_millis(100), ..BfdSpec::lan(&nodes) });
    spec.hold_time = Some(HOLD);
    spec
}

fn static_file(vip: IpAddr) -> String {
    let profile = "apiVersion: ferrolb.io/v1alpha1\nkind: BFDProfile\nmetadata: {name: fast}\nspec: {transmitInterval: 100ms, receiveInterval: 100ms, detectMultiplier: 3}\n";
    let hold = format!("holdTime: {HOLD}s");
    let peer = yaml::peer(
        "router",
        addressing::NODE_ASN,
        addressing::ROUTER_ASN,
        addressing::ROUTER_V4.into(),
        &["addressFamilies: [ipv4-unicast]", &hold, "bfdProfile: fast"],
    );
    yaml::stream(&[
        yaml::node(1),
        yaml::node(2),
        yaml::pool("public", &[addressing::BGP_POOL_V4]),
        yaml::service("web", &[vip]),
        peer,
        profile.to_string(),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
    ])
}

fn cut_link_drops_the_path_before_the_hold_time(lab: &Lab, router: &dyn Router, bfd: &str) {
    let vip = addressing::bgp_vip_v4(20);
    let prefix = format!("{vip}/32");
    let file = static_file(vip);
    let s1 = Speaker::start(lab, 1, &file).unwrap();
    let s2 = Speaker::start(lab, 2, &file).unwrap();
    let r = routers::wait_established(router, &[v4(1), v4(2)], T);
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    for n in [v4(1), v4(2)] {
        routers::wait_bfd(router, n, "up", T).unwrap();
    }
    routers::wait_kernel_route(router.netns(), &prefix, &[v4(1), v4(2)], T).unwrap();
    s1.wait_log("starting BFD session", T).unwrap();

    // node1's switch port goes down: the node keeps its addresses, nothing gets through.
    lab.switch().ip(&["link", "set", "n1", "down"]).unwrap();
    let cut = Instant::now();
    let r = routers::wait_kernel_route(router.netns(), &prefix, &[v4(2)], T);
    let took = cut.elapsed();
    assert!(r.is_ok(), "{r:?}\n{}\n{}", s1.logs(), lab.logs(40));
    println!(
        "{}: link cut -> kernel route {prefix} via node2 only after {} ms (BFD {bfd}; BGP hold time {HOLD} s)",
        router.kind(),
        took.as_millis()
    );
    // Down, or gone with the dynamic neighbour that registered it (FRR).
    wait::until("router's BFD session with node1 no longer up", T, || {
        Ok((router.bfd_sessions()?.get(&v4(1)).map(String::as_str) != Some("up")).then_some(()))
    })
    .unwrap();
    // node1's speaker saw BFD fail and reset its BGP session (Cease / BFD Down).
    s1.wait_log("BFD session down: tearing the BGP session down now", T).unwrap();
    s1.wait_log("BFD down: resetting the BGP session now", T).unwrap();
    assert!(!router.established().unwrap().contains(&v4(1)));
    assert!(router.established().unwrap().contains(&v4(2)), "node2's session stays up");

    lab.switch().ip(&["link", "set", "n1", "up"]).unwrap();
    s1.wait_log("BFD session up: BGP may reconnect", T).unwrap();
    routers::wait_bfd(router, v4(1), "up", T).unwrap();
    let r = routers::wait_established(router, &[v4(1), v4(2)], T);
    assert!(r.is_ok(), "{r:?}\n{}", s1.logs());
    routers::wait_kernel_route(router.netns(), &prefix, &[v4(1), v4(2)], T).unwrap();
    assert!(!s2.logs().contains("BFD session down"), "{}", s2.logs());
}

#[test]
fn bfd_down_withdraws_node_path_from_bird_before_hold_time() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let bird = Bird::start(&lab, &router_spec()).unwrap();
    cut_link_drops_the_path_before_the_hold_time(&lab, &bird, "100 ms x 3");
}

#[test]
fn bfd_down_withdraws_node_path_from_frr_before_hold_time() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    // No static bfdd peers: bgpd's `neighbor SPEAKERS bfd profile ferrolb` makes the
    // sessions (100 ms x 3); a static peer as well would be a second, conflicting one.
    let mut spec = router_spec();
    if let Some(b) = spec.bfd.as_mut() {
        b.neighbors.clear();
    }
    // Configured neighbours: their BFD sessions outlive the BGP sessions (those of a
    // listen range come and go with the TCP connection, so a held-down BGP session
    // would never see BFD Up again).
    spec.ranges.clear();
    spec.neighbors = vec![v4(1), v4(2)];
    let frr = Frr::start(&lab, &spec).unwrap();
    cut_link_drops_the_path_before_the_hold_time(&lab, &frr, "100 ms x 3");
}
