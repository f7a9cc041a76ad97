//! GTSM (RFC 5082, BGPPeer `ttlSecurity`) against BIRD 2 with `ttl security on`: the
//! real `ferrolb-speaker` binary sends TTL / hop limit 255 on the sessions it opens and
//! those it accepts, and drops a peer one routed hop away (TTL 254).
//!
//! Evidence that packets were refused rather than not sent: the kernel's
//! `TcpExtTCPMinTTLDrop` counter of the namespace whose socket dropped them, or the
//! speaker's log line naming the SYN's TTL.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::time::Duration;

use ferrolb_lab::addressing::{node_ip as v4, node_ip6 as v6};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::strip_ansi;
use ferrolb_lab::routers::{self, Bird, Router, RouterSpec};
use ferrolb_lab::speaker::{Speaker, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const T: Duration = Duration::from_secs(30);

fn min_ttl_drops(ns: &Netns) -> u64 {
    ns.tcp_ext_counter("TCPMinTTLDrop").unwrap()
}

/// Waits until `ns` has dropped at least `n` more segments for their TTL than `before`.
fn wait_min_ttl_drops(lab: &Lab, ns: &Netns, before: u64, n: u64) {
    let r = wait::until_value(
        &format!("{n} segments dropped below the minimum TTL in {}", ns.name()),
        T,
        || ns.tcp_ext_counter("TCPMinTTLDrop"),
        |d| *d >= before + n,
    );
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
}

/// `BGP state:` of every BGP protocol BIRD runs (dynamic ones included).
fn bird_states(bird: &Bird) -> Vec<String> {
    let text = bird.birdc("show protocols all").unwrap();
    text.lines().filter_map(|l| l.trim().strip_prefix("BGP state:")).map(|s| s.trim().to_string()).collect()
}

/// A service on 203.0.113.10 / 2001:db8:3::10 and `peers`, for node 1.
fn static_file(peers: Vec<String>) -> String {
    let mut objs = vec![
        yaml::node(1),
        yaml::pool("public", &[addressing::BGP_POOL_V4, "2001:db8:3::/120"]),
        yaml::service("web", &[addressing::bgp_vip_v4(10), addressing::bgp_vip_v6(0x10)]),
    ];
    objs.extend(peers);
    objs.push(yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]));
    yaml::stream(&objs)
}

/// Node 1's eBGP peers: the lab router over IPv4 and over IPv6 transport.
fn router_peers(extra: &[&str]) -> Vec<String> {
    let fams = [
        ("router-v4", addressing::ROUTER_V4.into(), "ipv4-unicast"),
        ("router-v6", addressing::ROUTER_V6.into(), "ipv6-unicast"),
    ];
    fams.iter()
        .map(|(name, addr, fam)| {
            let families = format!("addressFamilies: [{fam}]");
            let mut e = vec![families.as_str()];
            e.extend_from_slice(extra);
            yaml::peer(name, addressing::NODE_ASN, addressing::ROUTER_ASN, *addr, &e)
        })
        .collect()
}

fn gtsm_router() -> RouterSpec {
    RouterSpec { ttl_security: true, ..RouterSpec::default() }
}

/// Both families come up with BIRD, and the routes arrive in its table.
fn assert_up_with_routes(lab: &Lab, bird: &Bird) {
    let r = routers::wait_established(bird, &[v4(1), v6(1)], T);
    assert!(r.is_ok(), "{r:?}: {:?}\n{}", bird_states(bird), lab.logs(40));
    for (prefix, nh) in [("203.0.113.10/32", v4(1)), ("2001:db8:3::10/128", v6(1))] {
        let r = routers::wait_rib(bird, prefix, &[nh], T);
        assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    }
}

/// (a) The speaker connects to BIRD (passive, `ttl security on`) over IPv4 and IPv6:
/// its SYN and OPEN carry TTL / hop limit 255, and BIRD's SYN-ACK (255) passes its
/// own minimum.
#[test]
fn gtsm_session_to_bird_comes_up_and_carries_the_routes() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let bird = Bird::start(&lab, &gtsm_router()).unwrap();
    let _speaker = Speaker::start(&lab, 1, &static_file(router_peers(&["ttlSecurity: true"]))).unwrap();
    assert_up_with_routes(&lab, &bird);
}

/// (a) BIRD connects to the passive speaker: the listener's SYN-ACK and the accepted
/// connection carry 255, and the accepted connection takes BIRD's 255.
#[test]
fn gtsm_session_accepted_from_bird_comes_up() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let spec =
        RouterSpec { ranges: Vec::new(), neighbors: vec![v4(1), v6(1)], active: true, ..gtsm_router() };
    let bird = Bird::start(&lab, &spec).unwrap();
    let file = static_file(router_peers(&["ttlSecurity: true", "passive: true"]));
    let _speaker = Speaker::start(&lab, 1, &file).unwrap();
    assert_up_with_routes(&lab, &bird);
}

/// (b) Without ttlSecurity the speaker sends eBGP packets with TTL 1: BIRD's kernel
/// drops them on the connection BIRD accepted, and the session never comes up.
#[test]
fn bird_with_ttl_security_refuses_a_speaker_without_it() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let before = min_ttl_drops(lab.router());
    let bird = Bird::start(&lab, &gtsm_router()).unwrap();
    let speaker = Speaker::start(&lab, 1, &static_file(router_peers(&[]))).unwrap();
    // Our OPEN and its retransmissions, for both sessions, dropped by BIRD's sockets.
    wait_min_ttl_drops(&lab, lab.router(), before, 4);
    assert_eq!(bird.established().unwrap(), Default::default(), "{:?}", bird_states(&bird));
    let states = bird_states(&bird);
    assert!(!states.is_empty() && states.iter().all(|s| s != "Established"), "{states:?}");
    assert!(!strip_ansi(&speaker.logs()).contains("to=Established"), "{}", speaker.logs());
}

/// (c) BIRD one routed hop away (in the client namespace, behind r1), `multihop 2`
/// with `ttl security on`, so it sends 255 and accepts 254: its packets reach the node
/// with TTL 254, below the speaker's minimum, so the session never comes up; with
/// ttlSecurity off (ebgpMultiHop instead) the same path comes up at once.
#[test]
fn gtsm_refuses_a_router_one_hop_away() {
    let (lab, bird) = far_bird(false);
    let before = min_ttl_drops(lab.node(1));
    let speaker = Speaker::start(&lab, 1, &far_peer(&["ttlSecurity: true"])).unwrap();
    // The speaker connects; BIRD's SYN-ACK arrives with 254 and its SYN retransmissions
    // are dropped by the connecting socket.
    wait_min_ttl_drops(&lab, lab.node(1), before, 2);
    assert!(bird.established().unwrap().is_empty(), "{:?}", bird_states(&bird));
    assert!(bird_states(&bird).iter().all(|s| s != "Established"));
    assert!(!strip_ansi(&speaker.logs()).contains("to=Established"), "{}", speaker.logs());

    // The control: the same path, our minimum TTL off, comes up.
    speaker.replace_file(&far_peer(&["ebgpMultiHop: true"])).unwrap();
    let r = routers::wait_established(&bird, &[v4(1)], T);
    assert!(r.is_ok(), "{r:?}: {:?}\n{}", bird_states(&bird), lab.logs(40));
}

/// (c) The same far BIRD connecting to the passive speaker: the listener accepts the
/// connection (it serves peers without GTSM too), then the speaker checks the SYN's
/// TTL, finds 254 and closes it.
#[test]
fn gtsm_refuses_a_connection_from_a_router_one_hop_away() {
    let (lab, bird) = far_bird(true);
    let speaker = Speaker::start(&lab, 1, &far_peer(&["ttlSecurity: true", "passive: true"])).unwrap();
    let r = speaker.wait_log("its SYN arrived with TTL 254", T);
    assert!(r.is_ok(), "{r:?}: {:?}\n{}", bird_states(&bird), lab.logs(40));
    assert!(bird.established().unwrap().is_empty(), "{:?}", bird_states(&bird));
    assert!(!strip_ansi(&speaker.logs()).contains("to=Established"), "{}", speaker.logs());
}

/// A lab whose BIRD (GTSM on, `multihop 2`; connecting when `active`) runs in the
/// client namespace, one routed hop from node 1.
fn far_bird(active: bool) -> (Lab, Bird) {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    far_router_route(&lab);
    let spec = RouterSpec {
        ranges: Vec::new(),
        neighbors: vec![v4(1)],
        multihop: Some(2),
        active,
        router_id: addressing::CLIENT_LINK_V4,
        ..gtsm_router()
    };
    let bird = Bird::start_in(&lab, lab.client(), "bird-far", &spec).unwrap();
    (lab, bird)
}

/// Node 1's static file peering with the far BIRD (IPv4 only), plus `extra` fields.
fn far_peer(extra: &[&str]) -> String {
    let mut fields = vec!["addressFamilies: [ipv4-unicast]"];
    fields.extend_from_slice(extra);
    static_file(vec![yaml::peer(
        "far",
        addressing::NODE_ASN,
        addressing::ROUTER_ASN,
        addressing::CLIENT_LINK_V4.into(),
        &fields,
    )])
}

/// The client reaches node 1 through r1 (one routed hop) instead of the shared LAN,
/// both ways: node 1 already routes the link subnet via r1.
fn far_router_route(lab: &Lab) {
    let node = format!("{}/32", addressing::node_v4(1));
    lab.client().ip(&["route", "add", &node, "via", &addressing::ROUTER_LINK_V4.to_string()]).unwrap();
}
