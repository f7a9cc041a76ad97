//! Hold time 0 against a real peer: ExaBGP proposes `hold-time 0` (no keepalives, no
//! hold timer), and the `ferrolb-speaker` binary, with no BFD for the peer, refuses it
//! with NOTIFICATION OPEN Message Error / Unacceptable Hold Time and never reaches
//! Established.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::time::Duration;

use ferrolb_lab::process::strip_ansi;
use ferrolb_lab::routers::exabgp::Record;
use ferrolb_lab::routers::{ExaBgp, ExaNeighbor};
use ferrolb_lab::speaker::{Speaker, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const T: Duration = Duration::from_secs(30);

#[test]
fn zero_hold_time_from_a_peer_is_refused_without_bfd() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let mut n = ExaNeighbor::passive(addressing::CLIENT_V4, 1, addressing::ROUTER_ASN, addressing::NODE_ASN);
    n.hold_time = Some(0);
    let peer = ExaBgp::start(&lab, lab.client(), "peer", &[n]).unwrap();
    let file = yaml::stream(&[
        yaml::node(1),
        yaml::peer("exabgp", addressing::NODE_ASN, addressing::ROUTER_ASN, addressing::CLIENT_V4.into(), &[]),
    ]);
    let speaker = Speaker::start(&lab, 1, &file).unwrap();
    // Refused on the first OPEN and again after the reconnect (connectTime 1s).
    let r = wait::until_value(
        "two Unacceptable Hold Time NOTIFICATIONs",
        T,
        || Ok(peer.notifications()),
        |n| n.len() >= 2,
    );
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    assert!(peer.notifications().iter().all(|n| *n == (2, 6)), "{:?}", peer.notifications());
    assert!(
        !peer.records().iter().any(|r| matches!(r, Record::State { state, .. } if state == "up")),
        "{:?}",
        peer.records()
    );
    let logs = strip_ansi(&speaker.logs());
    assert!(logs.contains("unacceptable hold time 0"), "{logs}");
    assert!(!logs.contains("to=Established"), "{logs}");
}
