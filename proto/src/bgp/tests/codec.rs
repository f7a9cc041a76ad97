//! Golden byte vectors hand-derived from the RFCs, both directions, plus round trips
//! and a cross-check against netgauze-bgp-pkt.
use crate::bgp::attributes::{AS_TRANS, Aggregator, MpReach, RawAttribute};
use crate::bgp::capability::GrFamily;
use crate::bgp::error::{code, subcode};
use crate::bgp::message::{RouteRefresh, frame_len};
use crate::bgp::*;
use bytes::{Bytes, BytesMut};
use ipnet::{IpNet, Ipv4Net};
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

const M: [u8; 16] = [0xff; 16];

pub(super) fn msg(len: u16, typ: u8, body: &[u8]) -> Vec<u8> {
    let mut v = M.to_vec();
    v.extend_from_slice(&len.to_be_bytes());
    v.push(typ);
    v.extend_from_slice(body);
    assert_eq!(v.len(), usize::from(len), "test vector length");
    v
}

fn enc(m: &Message) -> Vec<u8> {
    m.to_bytes(&EncodeContext::default()).to_vec()
}

pub(super) fn dec(b: &[u8]) -> Result<Message, DecodeError> {
    let mut buf = Bytes::copy_from_slice(b);
    Message::decode(&mut buf, &DecodeContext::default())
}

fn both_ways(m: &Message, wire: &[u8]) {
    assert_eq!(enc(m), wire, "encode");
    assert_eq!(&dec(wire).expect("decode"), m, "decode");
}

fn p4(s: &str) -> Ipv4Net {
    s.parse().expect("prefix")
}

#[test]
fn keepalive_golden() {
    both_ways(&Message::Keepalive, &msg(19, 4, &[]));
}

#[test]
fn notification_golden() {
    // Cease / Administrative Shutdown (RFC 4486), no data.
    both_ways(&Message::Notification(Notification::cease(2)), &msg(21, 3, &[6, 2]));
}

#[test]
fn route_refresh_golden() {
    // RFC 2918 §3: AFI 2, reserved 0, SAFI 1.
    let rr = Message::RouteRefresh(RouteRefresh { family: Family::IPV6_UNICAST, subtype: 0 });
    both_ways(&rr, &msg(23, 5, &[0, 2, 0, 1]));
}

#[test]
fn open_with_capabilities_golden() {
    let caps = vec![
        Capability::Multiprotocol(Family::IPV4_UNICAST),
        Capability::Multiprotocol(Family::IPV6_UNICAST),
        Capability::RouteRefresh,
        Capability::GracefulRestart(GracefulRestart {
            restarting: true,
            restart_time: 120,
            families: vec![GrFamily { family: Family::IPV4_UNICAST, forwarding_preserved: true }],
        }),
    ];
    let open = Message::Open(Open::new(65001, 90, Ipv4Addr::new(192, 0, 2, 1), caps));
    #[rustfmt::skip]
    let body = [
        4, 0xfd, 0xe9, 0, 90, 192, 0, 2, 1, // version, AS 65001, hold 90, id
        30, 2, 28,                          // opt params len, type 2 (capabilities), len
        1, 4, 0, 1, 0, 1,                   // MP IPv4 unicast
        1, 4, 0, 2, 0, 1,                   // MP IPv6 unicast
        2, 0,                               // route refresh
        64, 6, 0x80, 120, 0, 1, 1, 0x80,    // GR: R-bit, 120 s, IPv4 unicast with F-bit
        65, 4, 0, 0, 0xfd, 0xe9,            // 4-octet AS 65001
    ];
    both_ways(&open, &msg(59, 1, &body));
}

/// RFC 8950 §3: NLRI AFI, NLRI SAFI (two octets), next hop AFI. FRR's OPEN to an
/// unnumbered neighbour carries exactly this tuple.
#[test]
fn extended_next_hop_capability_golden() {
    let caps = vec![Capability::ExtendedNextHop(vec![NextHopFamily::IPV4_OVER_IPV6])];
    let open = Message::Open(Open::new(65001, 90, Ipv4Addr::new(192, 0, 2, 1), caps));
    #[rustfmt::skip]
    let body = [
        4, 0xfd, 0xe9, 0, 90, 192, 0, 2, 1,
        16, 2, 14,
        5, 6, 0, 1, 0, 1, 0, 2,             // IPv4 unicast over an IPv6 next hop
        65, 4, 0, 0, 0xfd, 0xe9,
    ];
    both_ways(&open, &msg(45, 1, &body));
    // A tuple whose SAFI does not fit an octet names no family we know: kept as sent, so
    // it re-encodes the same (the fuzzer found the skipped tuple's changed re-encoding).
    let wire = Bytes::from_static(&[5, 12, 0, 1, 1, 0, 0, 2, 0, 2, 0, 1, 0, 2]);
    let cap = Capability::decode(&mut crate::bgp::reader::Reader::new(wire.clone())).unwrap();
    let odd = NextHopFamily { afi: 1, safi: 256, next_hop_afi: 2 };
    let v6 = NextHopFamily { afi: 2, safi: 1, next_hop_afi: 2 };
    assert_eq!(cap, Capability::ExtendedNextHop(vec![odd, v6]));
    let mut again = BytesMut::new();
    cap.encode(&mut again);
    assert_eq!(again.freeze(), wire);
    // Not a whole number of tuples: malformed.
    let mut r = crate::bgp::reader::Reader::new(Bytes::from_static(&[5, 4, 0, 1, 0, 1]));
    assert_eq!(Capability::decode(&mut r), None);
}

/// RFC 8950 §4: IPv4 NLRI in MP_REACH_NLRI with an IPv6 next hop of 16 or 32 octets.
#[test]
fn ipv4_routes_with_an_ipv6_next_hop_both_ways() {
    let ll: std::net::Ipv6Addr = "fe80::1".parse().unwrap();
    for link_local in [None, Some(ll)] {
        let u = Update {
            attributes: PathAttributes {
                origin: Some(Origin::Igp),
                as_path: Some(AsPath::sequence(vec![65001])),
                mp_reach: Some(MpReach {
                    family: Family::IPV4_UNICAST,
                    next_hop: MpNextHop::V6 { global: "2001:db8::1".parse().unwrap(), link_local },
                    nlri: vec!["192.0.2.200/32".parse().unwrap()],
                }),
                ..PathAttributes::default()
            },
            ..Update::default()
        };
        let m = Message::Update(u.clone());
        let wire = enc(&m);
        let Ok(Message::Update(back)) = dec(&wire) else { panic!("not an UPDATE") };
        assert_eq!(back, u);
        assert_eq!(back.announced().collect::<Vec<_>>(), vec!["192.0.2.200/32".parse::<IpNet>().unwrap()]);
    }
}

#[test]
fn open_four_octet_as_uses_as_trans() {
    let open = Open::new(4_200_000_000, 90, Ipv4Addr::new(192, 0, 2, 1), vec![]);
    assert_eq!(u32::from(open.my_as), AS_TRANS);
    #[rustfmt::skip]
    let body = [4, 0x5b, 0xa0, 0, 90, 192, 0, 2, 1, 8, 2, 6, 65, 4, 0xfa, 0x56, 0xea, 0x00];
    let m = Message::Open(open);
    both_ways(&m, &msg(37, 1, &body));
    let Ok(Message::Open(o)) = dec(&msg(37, 1, &body)) else { panic!("not an OPEN") };
    assert_eq!(o.asn(), 4_200_000_000);
    assert_eq!(o.families(), vec![Family::IPV4_UNICAST], "no MP capability means IPv4 unicast");
}

fn sample_v4_update() -> Update {
    Update {
        attributes: PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(AsPath::sequence(vec![65001])),
            next_hop: Some(Ipv4Addr::new(192, 0, 2, 1)),
            communities: vec![Community::new(64512, 100), Community::NO_EXPORT],
            large_communities: vec![LargeCommunity { global: 64512, local1: 1, local2: 2 }],
            ..Default::default()
        },
        nlri: vec![p4("198.51.100.0/24"), p4("203.0.113.7/32")],
        ..Default::default()
    }
}

#[test]
fn update_with_communities_golden() {
    #[rustfmt::skip]
    let body = [
        0, 0,                                   // no withdrawn routes
        0, 46,                                  // attribute length
        0x40, 1, 1, 0,                          // ORIGIN IGP
        0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe9,     // AS_PATH: AS_SEQUENCE [65001], 4-octet
        0x40, 3, 4, 192, 0, 2, 1,               // NEXT_HOP
        0xc0, 8, 8, 0xfc, 0, 0, 100, 0xff, 0xff, 0xff, 0x01, // COMMUNITIES 64512:100 NO_EXPORT
        0xc0, 32, 12, 0, 0, 0xfc, 0, 0, 0, 0, 1, 0, 0, 0, 2, // LARGE_COMMUNITY 64512:1:2
        24, 198, 51, 100,                       // 198.51.100.0/24
        32, 203, 0, 113, 7,                     // 203.0.113.7/32
    ];
    both_ways(&Message::Update(sample_v4_update()), &msg(78, 2, &body));
}

#[test]
fn link_bandwidth_extended_community_golden() {
    // RFC 10005 §3: type 0x00 (two-octet AS, transitive), sub-type 0x04, AS 64513, then
    // 125 000 000 bytes/s (1 Gbit/s) as an IEEE single: 0x4cee6b28.
    let lbw = ExtendedCommunity::link_bandwidth(64513, 125_000_000.0);
    assert_eq!(lbw.0, [0x00, 0x04, 0xfc, 0x01, 0x4c, 0xee, 0x6b, 0x28]);
    assert_eq!(lbw.as_link_bandwidth(), Some(125_000_000.0));
    let mut non_transitive = lbw;
    non_transitive.0[0] = 0x40;
    assert_eq!(non_transitive.as_link_bandwidth(), Some(125_000_000.0), "RFC 10005 ignores the bit");
    assert_eq!(ExtendedCommunity([0, 2, 0xfc, 1, 0, 0, 0, 1]).as_link_bandwidth(), None, "a route target");
    let mut u = sample_v4_update();
    u.attributes.large_communities.clear();
    u.attributes.communities.clear();
    u.attributes.extended_communities = vec![lbw];
    #[rustfmt::skip]
    let body = [
        0, 0,                                   // no withdrawn routes
        0, 31,                                  // attribute length
        0x40, 1, 1, 0,                          // ORIGIN IGP
        0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe9,     // AS_PATH: AS_SEQUENCE [65001], 4-octet
        0x40, 3, 4, 192, 0, 2, 1,               // NEXT_HOP
        0xc0, 16, 8, 0x00, 0x04, 0xfc, 0x01, 0x4c, 0xee, 0x6b, 0x28, // EXTENDED COMMUNITIES
        24, 198, 51, 100,                       // 198.51.100.0/24
        32, 203, 0, 113, 7,                     // 203.0.113.7/32
    ];
    both_ways(&Message::Update(u), &msg(63, 2, &body));
}

#[test]
fn update_ipv6_mp_reach_with_link_local_golden() {
    let global: Ipv6Addr = "2001:db8::1".parse().expect("addr");
    let ll: Ipv6Addr = "fe80::1".parse().expect("addr");
    let u = Update {
        attributes: PathAttributes {
            origin: Some(Origin::Igp),
            as_path: Some(AsPath::sequence(vec![65001])),
            mp_reach: Some(MpReach {
                family: Family::IPV6_UNICAST,
                next_hop: MpNextHop::V6 { global, link_local: Some(ll) },
                nlri: vec!["2001:db8:1::/48".parse().expect("prefix")],
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut body = vec![0, 0, 0, 4 + 9 + 3 + 44, 0x40, 1, 1, 0, 0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe9];
    body.extend_from_slice(&[0x80, 14, 44, 0, 2, 1, 32]);
    body.extend_from_slice(&global.octets());
    body.extend_from_slice(&ll.octets());
    body.extend_from_slice(&[0, 48, 0x20, 0x01, 0x0d, 0xb8, 0, 1]);
    both_ways(&Message::Update(u), &msg(19 + 4 + 60, 2, &body));
}

#[test]
fn end_of_rib_golden() {
    let v4 = Message::Update(Update::end_of_rib(Family::IPV4_UNICAST));
    both_ways(&v4, &msg(23, 2, &[0, 0, 0, 0]));
    let v6 = Message::Update(Update::end_of_rib(Family::IPV6_UNICAST));
    both_ways(&v6, &msg(29, 2, &[0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1]));
    let Ok(Message::Update(u)) = dec(&msg(29, 2, &[0, 0, 0, 6, 0x80, 15, 3, 0, 2, 1])) else { panic!() };
    assert_eq!(u.end_of_rib_family(), Some(Family::IPV6_UNICAST));
    assert_eq!(sample_v4_update().end_of_rib_family(), None);
}

#[test]
fn two_octet_peer_gets_as_trans_and_as4_path() {
    let mut a = PathAttributes {
        origin: Some(Origin::Igp),
        as_path: Some(AsPath::sequence(vec![4_200_000_000, 65001])),
        ..Default::default()
    };
    a.prepare_for_two_octet_peer();
    let u = Message::Update(Update { attributes: a, ..Default::default() });
    let wire = u.to_bytes(&EncodeContext { four_octet_as: false });
    #[rustfmt::skip]
    let body = [
        0, 0, 0, 4 + 9 + 13,
        0x40, 1, 1, 0,
        0x40, 2, 6, 2, 2, 0x5b, 0xa0, 0xfd, 0xe9,                       // AS_TRANS 65001
        0xc0, 17, 10, 2, 2, 0xfa, 0x56, 0xea, 0x00, 0, 0, 0xfd, 0xe9,   // AS4_PATH
    ];
    assert_eq!(wire.to_vec(), msg(19 + 4 + 26, 2, &body));
    let mut b = wire.clone();
    let Ok(Message::Update(d)) = Message::decode(&mut b, &DecodeContext { four_octet_as: false }) else {
        panic!("decode")
    };
    assert_eq!(d.attributes.as_path, Some(AsPath::sequence(vec![AS_TRANS, 65001])));
    assert_eq!(d.attributes.effective_as_path(), Some(AsPath::sequence(vec![4_200_000_000, 65001])));
}

#[test]
fn header_errors_carry_rfc4271_notification_data() {
    let mut bad_marker = msg(19, 4, &[]);
    bad_marker[3] = 0;
    let e = dec(&bad_marker).expect_err("bad marker");
    assert_eq!((e.code, e.subcode), (code::MESSAGE_HEADER, subcode::CONNECTION_NOT_SYNCHRONIZED));

    let mut long = M.to_vec();
    long.extend_from_slice(&[0x10, 0x01, 2]);
    let e = dec(&long).expect_err("too long");
    assert_eq!((e.code, e.subcode, &e.data[..]), (1, 2, &[0x10, 0x01][..]));
    assert_eq!(frame_len(&long).expect_err("frame").subcode, subcode::BAD_MESSAGE_LENGTH);

    let e = dec(&msg(19, 7, &[])).expect_err("type");
    assert_eq!((e.code, e.subcode, &e.data[..]), (1, 3, &[7][..]));

    // KEEPALIVE must be exactly 19 bytes.
    let e = dec(&msg(20, 4, &[0])).expect_err("keepalive len");
    assert_eq!((e.code, e.subcode), (1, 2));
    assert_eq!(frame_len(&msg(19, 4, &[])[..10]).expect("partial"), None);
}

#[test]
fn open_errors() {
    let e = dec(&msg(29, 1, &[3, 0, 1, 0, 90, 1, 2, 3, 4, 0])).expect_err("version");
    assert_eq!((e.code, e.subcode, &e.data[..]), (2, 1, &[0, 4][..]));
    assert_eq!(e.action, ErrorAction::SessionReset);
    let e = dec(&msg(32, 1, &[4, 0, 1, 0, 90, 1, 2, 3, 4, 3, 9, 1, 0])).expect_err("param");
    assert_eq!((e.code, e.subcode), (2, subcode::UNSUPPORTED_OPTIONAL_PARAMETER));
}

pub(super) fn update_with_attrs(attrs: &[u8], nlri: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 0];
    body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
    body.extend_from_slice(attrs);
    body.extend_from_slice(nlri);
    msg((19 + body.len()) as u16, 2, &body)
}

pub(super) const ORIGIN: [u8; 4] = [0x40, 1, 1, 0];
pub(super) const PATH: [u8; 9] = [0x40, 2, 6, 2, 1, 0, 0, 0xfd, 0xe9];
pub(super) const NH: [u8; 7] = [0x40, 3, 4, 192, 0, 2, 1];

#[test]
fn rfc7606_classification() {
    // Invalid ORIGIN value: treat-as-withdraw, session stays.
    let attrs = [&[0x40, 1, 1, 5][..], &PATH, &NH].concat();
    let Ok(Message::Update(u)) = dec(&update_with_attrs(&attrs, &[24, 198, 51, 100])) else { panic!() };
    assert!(u.treat_as_withdraw);
    assert_eq!(u.errors[0].subcode, subcode::INVALID_ORIGIN);

    // Bad ATOMIC_AGGREGATE length: attribute-discard, route still usable.
    let attrs = [&ORIGIN[..], &PATH, &NH, &[0x40, 6, 1, 0]].concat();
    let Ok(Message::Update(u)) = dec(&update_with_attrs(&attrs, &[24, 198, 51, 100])) else { panic!() };
    assert!(!u.treat_as_withdraw);
    assert!(!u.attributes.atomic_aggregate);
    assert_eq!(u.errors[0].action, ErrorAction::AttributeDiscard);

    // Missing NEXT_HOP with NLRI: treat-as-withdraw with the type code as data.
    let attrs = [&ORIGIN[..], &PATH].concat();
    let Ok(Message::Update(u)) = dec(&update_with_attrs(&attrs, &[24, 198, 51, 100])) else { panic!() };
    assert!(u.treat_as_withdraw);
    assert_eq!(
        (u.errors[0].subcode, &u.errors[0].data[..]),
        (subcode::MISSING_WELL_KNOWN_ATTRIBUTE, &[3][..])
    );

    // Prefix length 33: invalid network field, session reset.
    let attrs = [&ORIGIN[..], &PATH, &NH].concat();
    let e = dec(&update_with_attrs(&attrs, &[33, 1, 2, 3, 4, 5])).expect_err("nlri");
    assert_eq!((e.code, e.subcode, e.action), (3, subcode::INVALID_NETWORK_FIELD, ErrorAction::SessionReset));

    // Truncated MP_REACH: session reset.
    let e = dec(&update_with_attrs(&[0x80, 14, 3, 0, 2, 1], &[])).expect_err("mp");
    assert_eq!(e.action, ErrorAction::SessionReset);

    // Unknown well-known attribute: session reset with 3/2.
    let e = dec(&update_with_attrs(&[0x40, 99, 0], &[])).expect_err("well-known");
    assert_eq!((e.code, e.subcode), (3, subcode::UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE));
}

#[test]
fn unknown_optional_transitive_is_preserved() {
    let attrs = [&ORIGIN[..], &PATH, &NH, &[0xc0, 99, 3, 1, 2, 3], &[0x80, 98, 1, 7]].concat();
    let wire = update_with_attrs(&attrs, &[24, 198, 51, 100]);
    let Ok(Message::Update(u)) = dec(&wire) else { panic!() };
    // The optional non-transitive one (98) is dropped, the transitive one kept verbatim.
    assert_eq!(
        u.attributes.unknown,
        vec![RawAttribute { flags: 0xc0, type_code: 99, value: Bytes::from_static(&[1, 2, 3]) }]
    );
    let re = enc(&Message::Update(u));
    let expected =
        update_with_attrs(&[&ORIGIN[..], &PATH, &NH, &[0xc0, 99, 3, 1, 2, 3]].concat(), &[24, 198, 51, 100]);
    assert_eq!(re, expected);
}

// ---- property tests -------------------------------------------------------

fn arb_v4() -> impl Strategy<Value = Ipv4Net> {
    // Unicast only: netgauze rightly rejects multicast in unicast NLRI.
    (0u32..0xe000_0000, 0u8..=32).prop_map(|(a, l)| Ipv4Net::new(Ipv4Addr::from(a), l).expect("len").trunc())
}

fn arb_v6() -> impl Strategy<Value = IpNet> {
    (0u128..(0xffu128 << 120), 0u8..=128)
        .prop_map(|(a, l)| IpNet::V6(ipnet::Ipv6Net::new(Ipv6Addr::from(a), l).expect("len").trunc()))
}

fn arb_path() -> impl Strategy<Value = AsPath> {
    prop::collection::vec(
        (any::<bool>(), prop::collection::vec(any::<u32>(), 1..6))
            .prop_map(|(set, v)| if set { AsSegment::Set(v) } else { AsSegment::Sequence(v) }),
        0..4,
    )
    .prop_map(|segments| AsPath { segments })
}

fn arb_attrs() -> impl Strategy<Value = PathAttributes> {
    (
        (arb_path(), prop::option::of(any::<u32>()), prop::option::of(any::<u32>()), any::<bool>()),
        prop::option::of((any::<u32>(), any::<u32>())),
        prop::collection::vec(any::<u32>().prop_map(Community), 0..5),
        prop::collection::vec((any::<u32>(), any::<u32>(), any::<u32>()), 0..4),
        prop::collection::vec(any::<[u8; 8]>().prop_map(ExtendedCommunity), 0..4),
        prop::collection::btree_map(100u8..=200, prop::collection::vec(any::<u8>(), 0..40), 0..3),
        prop::option::of(prop_oneof![
            (any::<u32>(), prop::collection::vec(arb_v4(), 0..20)).prop_map(|(nh, p)| MpReach {
                family: Family::IPV4_UNICAST,
                next_hop: MpNextHop::V4(Ipv4Addr::from(nh)),
                nlri: p.into_iter().map(IpNet::V4).collect()
            }),
            (any::<u128>(), prop::option::of(any::<u128>()), prop::collection::vec(arb_v6(), 0..20))
                .prop_map(|(g, l, p)| MpReach {
                    family: Family::IPV6_UNICAST,
                    next_hop: MpNextHop::V6 { global: Ipv6Addr::from(g), link_local: l.map(Ipv6Addr::from) },
                    nlri: p
                }),
            // RFC 8950: IPv4 routes with an IPv6 next hop.
            (any::<u128>(), prop::option::of(any::<u128>()), prop::collection::vec(arb_v4(), 0..20))
                .prop_map(|(g, l, p)| MpReach {
                    family: Family::IPV4_UNICAST,
                    next_hop: MpNextHop::V6 { global: Ipv6Addr::from(g), link_local: l.map(Ipv6Addr::from) },
                    nlri: p.into_iter().map(IpNet::V4).collect()
                }),
        ]),
        prop::option::of(prop::collection::vec(arb_v6(), 0..20)),
    )
        .prop_map(
            |((path, med, lp, atomic), aggr, communities, large, extended, unknown, mp_reach, unreach)| {
                PathAttributes {
                    origin: Some(Origin::Incomplete),
                    as_path: Some(path),
                    next_hop: Some(Ipv4Addr::new(192, 0, 2, 1)),
                    med,
                    local_pref: lp,
                    atomic_aggregate: atomic,
                    aggregator: aggr.map(|(asn, a)| Aggregator { asn, address: Ipv4Addr::from(a) }),
                    communities,
                    extended_communities: extended,
                    large_communities: large
                        .into_iter()
                        .map(|(global, local1, local2)| LargeCommunity { global, local1, local2 })
                        .collect(),
                    as4_path: None,
                    mp_reach,
                    mp_unreach: unreach.map(|w| crate::bgp::attributes::MpUnreach {
                        family: Family::IPV6_UNICAST,
                        withdrawn: w,
                    }),
                    unknown: unknown
                        .into_iter()
                        .map(|(t, v)| RawAttribute { flags: 0xc0, type_code: t, value: Bytes::from(v) })
                        .collect(),
                }
            },
        )
}

fn arb_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        Just(Message::Keepalive),
        (any::<u8>(), any::<u8>(), prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(c, s, d)| {
            Message::Notification(Notification { code: c, subcode: s, data: Bytes::from(d) })
        }),
        (any::<u16>(), any::<u8>(), any::<u8>()).prop_map(|(afi, subtype, safi)| {
            Message::RouteRefresh(RouteRefresh { family: Family { afi, safi }, subtype })
        }),
        (any::<u32>(), any::<u16>(), 1u32..0xe000_0000, any::<bool>(), 0u16..4096, any::<bool>()).prop_map(
            |(asn, hold, id, r, t, f)| {
                let caps = vec![
                    Capability::Multiprotocol(Family::IPV6_UNICAST),
                    Capability::RouteRefresh,
                    Capability::GracefulRestart(GracefulRestart {
                        restarting: r,
                        restart_time: t,
                        families: vec![GrFamily { family: Family::IPV6_UNICAST, forwarding_preserved: f }],
                    }),
                    Capability::ExtendedNextHop(vec![NextHopFamily::IPV4_OVER_IPV6]),
                    Capability::Unknown { code: 200, value: Bytes::from_static(&[1, 2]) },
                ];
                Message::Open(Open::new(asn, hold, Ipv4Addr::from(id), caps))
            }
        ),
        (prop::collection::vec(arb_v4(), 0..30), arb_attrs(), prop::collection::vec(arb_v4(), 0..30))
            .prop_map(|(withdrawn, attributes, nlri)| Message::Update(Update {
                withdrawn,
                attributes,
                nlri,
                ..Default::default()
            })),
    ]
}

proptest! {
    #[test]
    fn encode_decode_round_trip(m in arb_message()) {
        let wire = enc(&m);
        prop_assert!(wire.len() <= 4096);
        let mut b = Bytes::from(wire.clone());
        let d = Message::decode(&mut b, &DecodeContext::default());
        prop_assert_eq!(d, Ok(m));
        prop_assert_eq!(b.len(), 0);
    }

    #[test]
    fn decode_never_panics(data in prop::collection::vec(any::<u8>(), 0..600), typ in 1u8..=5) {
        // Arbitrary bodies behind a valid header reach every body decoder.
        let mut v = M.to_vec();
        v.extend_from_slice(&((19 + data.len()) as u16).to_be_bytes());
        v.push(typ);
        v.extend_from_slice(&data);
        for four in [true, false] {
            let _ = Message::decode(&mut Bytes::from(v.clone()), &DecodeContext { four_octet_as: four });
            let _ = Message::decode(&mut Bytes::from(data.clone()), &DecodeContext { four_octet_as: four });
        }
    }

    /// An independent codec parses what we encode, and writes back the same bytes.
    #[test]
    fn netgauze_agrees(m in arb_message()) {
        use netgauze_bgp_pkt::BgpMessage;
        use netgauze_bgp_pkt::wire::deserializer::BgpParsingContext;
        use netgauze_parse_utils::reader::SliceReader;
        use netgauze_parse_utils::traits::ParseFromWithOneInput;
        use netgauze_parse_utils::WritablePdu;
        // netgauze validates semantics we do not (e.g. notification codes, refresh subtypes).
        let checkable = match &m {
            Message::Notification(n) => (1..=6).contains(&n.code) && n.subcode <= 3 && n.data.is_empty(),
            Message::RouteRefresh(r) => r.family == Family::IPV6_UNICAST && r.subtype == 0,
            Message::Open(o) => o.hold_time != 1 && o.hold_time != 2,
            _ => true,
        };
        prop_assume!(checkable);
        let wire = enc(&m);
        let mut ctx = BgpParsingContext::default();
        let parsed = BgpMessage::parse(&mut SliceReader::new(&wire), &mut ctx);
        prop_assert!(parsed.is_ok(), "netgauze rejected {:?}: {:?}", m, parsed);
        let parsed = parsed.expect("checked");
        let mut back: Vec<u8> = Vec::new();
        prop_assert!(parsed.write(&mut back).is_ok());
        prop_assert_eq!(back, wire);
        if let (Message::Update(u), BgpMessage::Update(n)) = (&m, &parsed) {
            prop_assert_eq!(u.nlri.len(), n.nlri().len());
            prop_assert_eq!(u.withdrawn.len(), n.withdraw_routes().len());
        }
    }
}

#[test]
fn encode_into_existing_buffer_appends() {
    let mut b = BytesMut::from(&b"xx"[..]);
    Message::Keepalive.encode(&mut b, &EncodeContext::default());
    assert_eq!(b.len(), 21);
    assert_eq!(&b[2..], &msg(19, 4, &[])[..]);
}

#[test]
fn fuzz_seed_corpus_decodes() {
    // The committed seeds are valid messages; a decoder change that rejects one fails here.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/bgp_decode");
    let seeds = [
        "keepalive",
        "notification_cease",
        "route_refresh_v6",
        "open_caps",
        "open_as4",
        "update_communities",
        "update_v6_ll",
        "eor_v4",
        "eor_v6",
        "update_unknown_attr",
        "withdraw_v4",
        "stream",
    ];
    for name in seeds {
        let data = std::fs::read(dir.join(name)).expect("seed file");
        let mut b = Bytes::from(data);
        while !b.is_empty() {
            let m = Message::decode(&mut b, &DecodeContext::default());
            assert!(m.is_ok(), "seed {name}: {m:?}");
        }
    }
    let data = std::fs::read(dir.join("update_as4_path")).expect("seed file");
    assert!(Message::decode(&mut Bytes::from(data), &DecodeContext { four_octet_as: false }).is_ok());
}

#[test]
fn unknown_attribute_flags_are_normalised() {
    // Found by the fuzzer: extended-length and low bits made re-encoding differ.
    let attrs = [&ORIGIN[..], &PATH, &[0xf6, 255, 0, 0]].concat();
    let Ok(Message::Update(u)) = dec(&update_with_attrs(&attrs, &[])) else { panic!() };
    assert_eq!(u.attributes.unknown[0].flags, 0xe0);
    let again = dec(&enc(&Message::Update(u.clone())));
    assert_eq!(again, Ok(Message::Update(u)));
}
