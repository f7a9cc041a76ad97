//! ferrolb's BFD (proto/src/bfd, run as `proto/examples/bfd-peer.rs` in a node
//! namespace) against BIRD 2's and FRR's: sessions come up over IPv4 (active) and IPv6
//! (passive), a cut link is detected by both sides, the sessions recover, and packets
//! that did not come with TTL / hop limit 255 are dropped (RFC 5881 §5).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::IpAddr;
use std::time::Duration;

use ferrolb_bench::bfd::BfdPeer;
use ferrolb_lab::routers::{self, BfdSpec, Bird, Frr, Router, RouterSpec};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const T: Duration = Duration::from_secs(30);
const INTERVAL: Duration = Duration::from_millis(100);

fn spec() -> RouterSpec {
    let nodes: Vec<IpAddr> = vec![addressing::node_v4(1).into(), addressing::node_v6(1).into()];
    RouterSpec::default().bfd(BfdSpec { interval: INTERVAL, ..BfdSpec::lan(&nodes) })
}

fn peers(lab: &Lab) -> (BfdPeer, BfdPeer) {
    let v4 = (addressing::node_v4(1).into(), addressing::ROUTER_V4.into());
    let v6 = (addressing::node_v6(1).into(), addressing::ROUTER_V6.into());
    let p4 = BfdPeer::start(lab, lab.node(1), "bfd-v4", v4, INTERVAL, 3, false).unwrap();
    // Passive: silent until the router's first packet (BFDProfile passiveMode).
    let p6 = BfdPeer::start(lab, lab.node(1), "bfd-v6", v6, INTERVAL, 3, true).unwrap();
    (p4, p6)
}

fn comes_up_detects_a_cut_and_recovers(lab: &Lab, router: &dyn Router) {
    let (p4, p6) = peers(lab);
    let nodes: [IpAddr; 2] = [addressing::node_v4(1).into(), addressing::node_v6(1).into()];
    for (p, n) in [(&p4, nodes[0]), (&p6, nodes[1])] {
        p.wait_state("Up", T).unwrap();
        routers::wait_bfd(router, n, "up", T).unwrap();
    }
    // The switch port goes down: the node keeps its addresses, nothing gets through.
    lab.switch().ip(&["link", "set", "n1", "down"]).unwrap();
    for (p, n) in [(&p4, nodes[0]), (&p6, nodes[1])] {
        let down = p.wait_state("Down", T).unwrap();
        assert_eq!((down.diag.as_str(), down.downs), ("control detection time expired", 1));
        routers::wait_bfd(router, n, "down", T).unwrap();
    }
    lab.switch().ip(&["link", "set", "n1", "up"]).unwrap();
    for (p, n) in [(&p4, nodes[0]), (&p6, nodes[1])] {
        p.wait_state("Up", T).unwrap();
        routers::wait_bfd(router, n, "up", T).unwrap();
    }
}

#[test]
fn bfd_with_bird_comes_up_detects_a_cut_link_and_recovers() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let bird = Bird::start(&lab, &spec()).unwrap();
    comes_up_detects_a_cut_and_recovers(&lab, &bird);
}

#[test]
fn bfd_with_frr_comes_up_detects_a_cut_link_and_recovers() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let frr = Frr::start(&lab, &spec()).unwrap();
    comes_up_detects_a_cut_and_recovers(&lab, &frr);
}

/// From r1, a Control packet in state Init with TTL 254, then one in state Down with TTL
/// 255. Were the first accepted, the passive session would go straight to Up (and then
/// ignore the second, its Your Discriminator being 0); dropped, the session goes to Init.
#[test]
fn bfd_drops_packets_whose_ttl_or_hop_limit_is_not_255() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let (_p4, _p6) = (
        BfdPeer::start(
            &lab,
            lab.node(1),
            "bfd-v4",
            (addressing::node_v4(1).into(), addressing::ROUTER_V4.into()),
            INTERVAL,
            3,
            true,
        )
        .unwrap(),
        BfdPeer::start(
            &lab,
            lab.node(1),
            "bfd-v6",
            (addressing::node_v6(1).into(), addressing::ROUTER_V6.into()),
            INTERVAL,
            3,
            true,
        )
        .unwrap(),
    );
    let script = format!(
        r#"
import socket, struct
def pkt(state):
    return struct.pack("!BBBBIIIII", 0x20, state << 6, 3, 24, 7, 0, 1000000, 1000000, 0)
for fam, src, dst, level, opt in [
    (socket.AF_INET, "{r4}", "{n4}", socket.IPPROTO_IP, socket.IP_TTL),
    (socket.AF_INET6, "{r6}", "{n6}", socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS),
]:
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.bind((src, 49200))
    s.setsockopt(level, opt, 254)
    s.sendto(pkt(2), (dst, 3784))
    s.setsockopt(level, opt, 255)
    s.sendto(pkt(1), (dst, 3784))
"#,
        r4 = addressing::ROUTER_V4,
        n4 = addressing::node_v4(1),
        r6 = addressing::ROUTER_V6,
        n6 = addressing::node_v6(1),
    );
    lab.router().exec(&["python3", "-c", &script]).unwrap();
    for p in [&_p4, &_p6] {
        let first = wait::until("a first state change", T, || Ok(p.states().first().cloned())).unwrap();
        assert_eq!(first.state, "Init", "{:?}", p.states());
    }
}
