//! RFC 7606 against a real peer: ExaBGP sends the `ferrolb-speaker` binary UPDATEs
//! carrying raw attributes (`attribute [ code flags value ]`). Treat-as-withdraw and
//! attribute-discard keep the session Established and the speaker's own routes at the
//! peer; session-reset cases end it with the NOTIFICATION RFC 7606 calls for, and the
//! session comes back.
//!
//! ExaBGP 4.2 frames every attribute it sends itself (the length always matches the
//! value, the Total Path Attribute Length matches the list) and has no command for raw
//! messages, so a truncated attribute header (§4) and an MP_REACH_NLRI overrunning the
//! attribute list (§5.2) are covered by the byte-level tests in
//! `proto/src/bgp/tests/rfc7606.rs` only.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::IpAddr;
use std::time::Duration;

use ferrolb_lab::routers::exabgp::Record;
use ferrolb_lab::routers::{ExaBgp, ExaNeighbor, Router};
use ferrolb_lab::speaker::{Speaker, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const T: Duration = Duration::from_secs(30);

/// IPv6 unicast MP_REACH_NLRI value: next hop 2001:db8::1, NLRI 2001:db8:1::/48.
const MP_REACH: &str = "0x0002011020010db8000000000000000000000001003020010db80001";
/// The same with a /64 whose prefix runs past the end of the attribute.
const MP_REACH_OVERRUN: &str = "0x0002011020010db800000000000000000000000100402001";

fn ups(peer: &ExaBgp) -> usize {
    peer.records().iter().filter(|r| matches!(r, Record::State { state, .. } if state == "up")).count()
}

/// Times `prefix` was announced to the peer.
fn announced(peer: &ExaBgp, prefix: &str) -> usize {
    peer.records()
        .iter()
        .filter(|r| matches!(r, Record::Update(u) if u.announced.iter().any(|(p, _)| p == prefix)))
        .count()
}

/// Announces `198.51.100.0/24` to the speaker with `attribute` added.
fn send(peer: &ExaBgp, attribute: &str) {
    let cmd = format!(
        "announce route 198.51.100.0/24 next-hop {} attribute [ {attribute} ]",
        addressing::CLIENT_V4
    );
    peer.command(&cmd, T).unwrap();
}

#[test]
fn malformed_updates_from_exabgp_are_handled_per_rfc7606() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let node: IpAddr = addressing::node_v4(1).into();
    // The peer sits on the client's LAN address, iBGP, passive; what it sends through
    // the API is sent once, not again on the next session.
    let mut n = ExaNeighbor::recorder(1);
    n.adj_rib_out = false;
    let peer = ExaBgp::start(&lab, lab.client(), "peer", &[n]).unwrap();

    let vip = addressing::bgp_vip_v4(10);
    let vip_prefix = format!("{vip}/32");
    let file = yaml::stream(&[
        yaml::node(1),
        yaml::pool("public", &[addressing::BGP_POOL_V4]),
        yaml::service("web", &[vip]),
        yaml::peer(
            "exabgp",
            addressing::ROUTER_ASN,
            addressing::ROUTER_ASN,
            addressing::CLIENT_V4.into(),
            &[],
        ),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
    ]);
    let speaker = Speaker::start(&lab, 1, &file).unwrap();
    let first = peer.wait_record(
        "the speaker's route at the peer",
        T,
        |r| matches!(r, Record::Update(u) if u.announced.iter().any(|(p, _)| *p == vip_prefix)),
    );
    assert!(first.is_ok(), "{first:?}\n{}", lab.logs(40));

    // §3 (c): ORIGIN marked optional → treat-as-withdraw; AGGREGATOR not marked optional
    // → attribute-discard (§7.7). The log line proves the UPDATE was processed.
    for (attribute, handled) in [
        ("0x01 0xc0 0x00", "(NOTIFICATION 3/4, TreatAsWithdraw)"),
        ("0x07 0x40 0x0000fc00c0000264", "(NOTIFICATION 3/4, AttributeDiscard)"),
    ] {
        send(&peer, attribute);
        speaker.wait_log(&format!("attribute flags conflict with the attribute type {handled}"), T).unwrap();
        // No timer: a NOTIFICATION or a reset would reach the peer within the margin.
        let what = format!("{attribute}: no NOTIFICATION, the session stays up");
        let seen = || Ok((peer.notifications(), ups(&peer)));
        wait::stays(&what, Duration::ZERO, seen, |(n, up)| n.is_empty() && *up == 1).unwrap();
        assert!(peer.established().unwrap().contains(&node), "{attribute}");
        assert_eq!(announced(&peer, &vip_prefix), 1, "{attribute}: the speaker's route stayed");
        assert!(peer.rib().unwrap().iter().any(|p| p.prefix == vip_prefix), "{attribute}");
    }

    // Session resets: MP_REACH_NLRI marked transitive (§3 c, §7.11: Attribute Flags
    // Error), and one whose NLRI overruns it (§7.11: Optional Attribute Error).
    for (i, (attribute, expected)) in
        [(format!("0x0e 0xc0 {MP_REACH}"), (3, 4)), (format!("0x0e 0x80 {MP_REACH_OVERRUN}"), (3, 9))]
            .into_iter()
            .enumerate()
    {
        send(&peer, &attribute);
        let notified = peer.wait_record(
            "the speaker's NOTIFICATION",
            T,
            |r| matches!(r, Record::Notification { code, subcode, .. } if (*code, *subcode) == expected),
        );
        assert!(notified.is_ok(), "{attribute}: {notified:?}\n{}", lab.logs(40));
        assert_eq!(peer.notifications().len(), i + 1, "{attribute}: one NOTIFICATION each");
        let line = format!("sent NOTIFICATION UPDATE message error ({}/{})", expected.0, expected.1);
        speaker.wait_log(&line, T).unwrap();
        // The session comes back (the speaker reconnects) and the route is sent again.
        let back = wait::until("the session back with the route", T, || {
            Ok((ups(&peer) == i + 2 && announced(&peer, &vip_prefix) == i + 2).then_some(()))
        });
        assert!(back.is_ok(), "{attribute}: {back:?}\n{}", lab.logs(40));
    }
    assert!(peer.established().unwrap().contains(&node));
}
