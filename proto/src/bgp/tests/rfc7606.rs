//! RFC 7606 completeness, byte by byte: attribute flags (§3 c), attribute list framing
//! (§4), NLRI that cannot be located (§3 last paragraph, §5.2) and the per-attribute
//! rules of §7 that the decoder applies.
use super::codec::{NH, ORIGIN, PATH, dec, update_with_attrs};
use crate::bgp::error::subcode;
use crate::bgp::*;
use bytes::Bytes;

const NLRI: [u8; 4] = [24, 198, 51, 100];

/// MP_REACH_NLRI value: IPv6 unicast, next hop 2001:db8::1, NLRI 2001:db8:1::/48.
fn mp_reach_value() -> Vec<u8> {
    let mut v = vec![0, 2, 1, 16, 0x20, 0x01, 0x0d, 0xb8];
    v.extend_from_slice(&[0; 11]);
    v.push(1);
    v.extend_from_slice(&[0, 48, 0x20, 0x01, 0x0d, 0xb8, 0, 1]);
    v
}

fn attr(flags: u8, type_code: u8, value: &[u8]) -> Vec<u8> {
    let mut a = vec![flags, type_code, value.len() as u8];
    a.extend_from_slice(value);
    a
}

fn update(attrs: &[u8], nlri: &[u8]) -> Update {
    match dec(&update_with_attrs(attrs, nlri)) {
        Ok(Message::Update(u)) => u,
        other => panic!("expected an UPDATE, got {other:?}"),
    }
}

fn reset(attrs: &[u8], nlri: &[u8]) -> DecodeError {
    let e = dec(&update_with_attrs(attrs, nlri)).expect_err("session reset");
    assert_eq!(e.action, ErrorAction::SessionReset, "{e:?}");
    e
}

#[test]
fn conflicting_optional_or_transitive_bits_make_the_attribute_malformed() {
    // §3 (c): treat-as-withdraw, with Attribute Flags Error and the attribute as data.
    let others = |rest: &[&[u8]]| rest.concat();
    let cases = [
        ("ORIGIN marked optional", attr(0xc0, 1, &[0]), others(&[&PATH, &NH])),
        ("AS_PATH not transitive", attr(0x00, 2, &PATH[3..]), others(&[&ORIGIN, &NH])),
        ("NEXT_HOP marked optional", attr(0xc0, 3, &NH[3..]), others(&[&ORIGIN, &PATH])),
        ("MED marked transitive", attr(0xc0, 4, &[0, 0, 0, 7]), others(&[&ORIGIN, &PATH, &NH])),
        ("LOCAL_PREF not transitive", attr(0x00, 5, &[0, 0, 0, 100]), others(&[&ORIGIN, &PATH, &NH])),
        ("COMMUNITIES not transitive", attr(0x80, 8, &[0xfc, 0, 0, 100]), others(&[&ORIGIN, &PATH, &NH])),
        (
            "LARGE_COMMUNITY not optional",
            attr(0x40, 32, &[0, 0, 0xfc, 0, 0, 0, 0, 1, 0, 0, 0, 2]),
            others(&[&ORIGIN, &PATH, &NH]),
        ),
    ];
    for (what, bad, rest) in cases {
        let attrs = [&bad[..], &rest].concat();
        let u = update(&attrs, &NLRI);
        assert!(u.treat_as_withdraw, "{what}: {u:?}");
        assert_eq!(u.nlri.len(), 1, "{what}: the NLRI is still located");
        let e = &u.errors[0];
        assert_eq!(
            (e.code, e.subcode, e.action),
            (3, subcode::ATTRIBUTE_FLAGS_ERROR, ErrorAction::TreatAsWithdraw)
        );
        assert_eq!(e.data, Bytes::from(bad), "{what}: RFC 4271 §6.3 data is the attribute");
    }

    // Attributes whose malformation §7 handles by attribute-discard keep that handling.
    let aggregator = [0, 0, 0xfd, 0xe8, 192, 0, 2, 1];
    for (what, bad) in [
        ("ATOMIC_AGGREGATE marked optional", attr(0xc0, 6, &[])),
        ("AGGREGATOR not optional", attr(0x40, 7, &aggregator)),
        ("AS4_PATH not transitive", attr(0x80, 17, &PATH[3..])),
    ] {
        let attrs = [&ORIGIN[..], &PATH, &NH, &bad].concat();
        let u = update(&attrs, &NLRI);
        assert!(!u.treat_as_withdraw, "{what}: {u:?}");
        assert_eq!(
            (u.errors[0].subcode, u.errors[0].action),
            (subcode::ATTRIBUTE_FLAGS_ERROR, ErrorAction::AttributeDiscard),
            "{what}"
        );
        assert!(
            !u.attributes.atomic_aggregate
                && u.attributes.aggregator.is_none()
                && u.attributes.as4_path.is_none()
        );
    }

    // MP_REACH/MP_UNREACH: their NLRI cannot be trusted, so the session is reset (§7.11, §7.12).
    for (what, bad) in [
        ("MP_REACH_NLRI marked transitive", attr(0xc0, 14, &mp_reach_value())),
        ("MP_UNREACH_NLRI not optional", attr(0x40, 15, &[0, 2, 1])),
    ] {
        let e = reset(&[&ORIGIN[..], &PATH, &bad].concat(), &[]);
        assert_eq!((e.code, e.subcode), (3, subcode::ATTRIBUTE_FLAGS_ERROR), "{what}");
        assert_eq!(e.data, Bytes::from(bad), "{what}");
    }
}

#[test]
fn only_the_optional_and_transitive_bits_are_checked() {
    // Extended length on a short attribute, Partial on an optional transitive one, low bits.
    let attrs =
        [&[0x50, 1, 0, 1, 0][..], &PATH, &NH, &attr(0xe0, 8, &[0xfc, 0, 0, 100]), &attr(0x4f, 6, &[])]
            .concat();
    let u = update(&attrs, &NLRI);
    assert!(u.errors.is_empty(), "{u:?}");
    assert_eq!(u.attributes.origin, Some(Origin::Igp));
    assert_eq!(u.attributes.communities, vec![Community::new(64512, 100)]);
    assert!(u.attributes.atomic_aggregate);
}

#[test]
fn truncated_attribute_header_is_treat_as_withdraw() {
    // §4, second case: fewer than 3 (4 with Extended Length) octets left for a header.
    for tail in [&[0x40][..], &[0x40, 5], &[0x50, 8, 0]] {
        let attrs = [&ORIGIN[..], &PATH, &NH, tail].concat();
        let u = update(&attrs, &NLRI);
        assert!(u.treat_as_withdraw, "{tail:?}: {u:?}");
        // The Total Path Attribute Length still delimits the NLRI.
        assert_eq!(u.nlri, vec!["198.51.100.0/24".parse().unwrap()], "{tail:?}");
        assert_eq!(u.errors[0].subcode, subcode::MALFORMED_ATTRIBUTE_LIST, "{tail:?}");
    }
}

#[test]
fn mp_attribute_overrunning_the_attribute_list_resets_the_session() {
    // §4 first case would be treat-as-withdraw, but the NLRI inside the MP attribute
    // cannot be located (§3 last paragraph, §5.2): session reset, Attribute Length Error.
    let mut reach = vec![0x80, 14, 40];
    reach.extend_from_slice(&mp_reach_value());
    let e = reset(&[&ORIGIN[..], &PATH, &reach].concat(), &[]);
    assert_eq!((e.code, e.subcode), (3, subcode::ATTRIBUTE_LENGTH_ERROR));
    assert_eq!(e.data, Bytes::from(reach.clone()), "data is the attribute as received");
    // Even with IPv4 NLRI located beside it: the IPv6 NLRI are lost.
    let e = reset(&[&ORIGIN[..], &PATH, &NH, &reach].concat(), &NLRI);
    assert_eq!((e.code, e.subcode), (3, subcode::ATTRIBUTE_LENGTH_ERROR));
    // Extended length, and MP_UNREACH_NLRI.
    let mut ext = vec![0x90, 14, 0x01, 0x00];
    ext.extend_from_slice(&mp_reach_value());
    reset(&[&ORIGIN[..], &PATH, &ext].concat(), &[]);
    let e = reset(&[0x80, 15, 10, 0, 2, 1, 64, 0x20, 0x01], &[]);
    assert_eq!((e.code, e.subcode), (3, subcode::ATTRIBUTE_LENGTH_ERROR));
    // A truncated header that names an MP attribute loses its NLRI too.
    let e = reset(&[&ORIGIN[..], &PATH, &NH, &[0x80, 14]].concat(), &NLRI);
    assert_eq!((e.code, e.subcode), (3, subcode::MALFORMED_ATTRIBUTE_LIST));

    // Any other attribute overrunning the list stays treat-as-withdraw (§4).
    let u = update(&[&ORIGIN[..], &PATH, &NH, &[0xc0, 8, 9, 0xfc, 0, 0, 100]].concat(), &NLRI);
    assert!(u.treat_as_withdraw);
    assert_eq!(u.errors[0].subcode, subcode::ATTRIBUTE_LENGTH_ERROR);
}

#[test]
fn mp_attribute_overrunning_itself_resets_with_the_attribute_as_data() {
    // §7.11: a prefix running past the end of MP_REACH_NLRI; RFC 4271 §6.3 data.
    let mut v = mp_reach_value();
    v.truncate(v.len() - 7);
    v.extend_from_slice(&[64, 0x20, 0x01]);
    let bad = attr(0x80, 14, &v);
    let e = reset(&[&ORIGIN[..], &PATH, &bad].concat(), &[]);
    assert_eq!((e.code, e.subcode), (3, subcode::OPTIONAL_ATTRIBUTE_ERROR));
    assert_eq!(e.data, Bytes::from(bad));
    // §7.12: the same in MP_UNREACH_NLRI, and a next hop length past the end.
    let bad = attr(0x80, 15, &[0, 2, 1, 64, 0x20, 0x01]);
    assert_eq!(reset(&bad, &[]).data, Bytes::from(bad));
    let bad = attr(0x80, 14, &[0, 2, 1, 32, 0x20, 0x01, 0x0d, 0xb8]);
    assert_eq!(reset(&[&ORIGIN[..], &PATH, &bad].concat(), &[]).subcode, subcode::OPTIONAL_ATTRIBUTE_ERROR);
}

#[test]
fn errors_in_an_update_without_reachable_nlri_reset_the_session() {
    // §5.2: attributes other than MP_UNREACH_NLRI but no NLRI located, and an error
    // stronger than attribute-discard: the NLRI may not have been parsed right.
    let withdrawn_only = |attrs: &[u8]| {
        let mut body = vec![0, 4, 24, 198, 51, 100];
        body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        body.extend_from_slice(attrs);
        super::codec::msg((19 + body.len()) as u16, 2, &body)
    };
    let e = dec(&withdrawn_only(&[&[0x40, 1, 1, 5][..], &PATH].concat())).expect_err("reset");
    assert_eq!((e.code, e.subcode, e.action), (3, subcode::INVALID_ORIGIN, ErrorAction::SessionReset));
    let e = reset(&[&ORIGIN[..], &PATH, &[0x40]].concat(), &[]);
    assert_eq!((e.code, e.subcode), (3, subcode::MALFORMED_ATTRIBUTE_LIST));

    // Attribute-discard errors do not count, nor does an MP_UNREACH_NLRI-only UPDATE.
    let u = update(&[&[0x40, 6, 1, 0][..], &[0x80, 15, 3, 0, 2, 1]].concat(), &[]);
    assert_eq!(u.errors[0].action, ErrorAction::AttributeDiscard);
    assert_eq!(u.attributes.mp_unreach.as_ref().map(|m| m.family), Some(Family::IPV6_UNICAST));
    // NLRI located in MP_REACH_NLRI: treat-as-withdraw, as for the NLRI field.
    let u = update(&[&[0x40, 1, 1, 5][..], &PATH, &attr(0x80, 14, &mp_reach_value())].concat(), &[]);
    assert!(u.treat_as_withdraw);
    assert_eq!(u.announced().count(), 1);
}

#[test]
fn extended_communities_of_a_bad_length_are_treat_as_withdraw() {
    // §7.14: a non-zero multiple of 8.
    for value in [&[][..], &[0, 4, 0xfc, 0, 0x4c, 0xee, 0x6b][..]] {
        let bad = attr(0xc0, 16, value);
        let u = update(&[&ORIGIN[..], &PATH, &NH, &bad].concat(), &NLRI);
        assert!(u.treat_as_withdraw, "{value:?}: {u:?}");
        assert_eq!(u.errors[0].subcode, subcode::OPTIONAL_ATTRIBUTE_ERROR);
    }
    let u = update(&[&ORIGIN[..], &PATH, &NH, &attr(0x80, 16, &[0; 8])].concat(), &NLRI);
    assert_eq!(u.errors[0].subcode, subcode::ATTRIBUTE_FLAGS_ERROR, "EXTENDED COMMUNITIES not transitive");
}

#[test]
fn empty_communities_attribute_is_treat_as_withdraw() {
    // §7.8: COMMUNITIES is malformed unless its length is a non-zero multiple of 4 (§4:
    // only AS_PATH and ATOMIC_AGGREGATE may be empty).
    let u = update(&[&ORIGIN[..], &PATH, &NH, &[0xc0, 8, 0]].concat(), &NLRI);
    assert!(u.treat_as_withdraw, "{u:?}");
    assert_eq!(u.errors[0].subcode, subcode::OPTIONAL_ATTRIBUTE_ERROR);
}
