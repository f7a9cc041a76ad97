//! Path attributes (RFC 4271 §4.3, §5): ORIGIN, AS_PATH, NEXT_HOP, MED, LOCAL_PREF,
//! ATOMIC_AGGREGATE, AGGREGATOR, COMMUNITIES (RFC 1997), MP_REACH/MP_UNREACH (RFC 4760),
//! EXTENDED COMMUNITIES (RFC 4360), AS4_PATH (RFC 6793), LARGE_COMMUNITIES (RFC 8092),
//! and unknown ones kept raw.
mod as_path;
mod community;
mod mp;

pub use as_path::{AS_TRANS, AsPath, AsSegment};
pub use community::{Community, ExtendedCommunity, LargeCommunity};
pub use mp::{MpNextHop, MpReach, MpUnreach};

use super::error::{DecodeError, ErrorAction, subcode};
use super::reader::Reader;
use bytes::{BufMut, Bytes, BytesMut};
use std::net::Ipv4Addr;

/// Attribute flag bits (RFC 4271 §4.3).
pub mod flag {
    /// Optional.
    pub const OPTIONAL: u8 = 0x80;
    /// Transitive.
    pub const TRANSITIVE: u8 = 0x40;
    /// Partial.
    pub const PARTIAL: u8 = 0x20;
    /// Extended length (2-octet length).
    pub const EXTENDED: u8 = 0x10;
}

/// Attribute type codes.
pub mod attr_type {
    /// ORIGIN.
    pub const ORIGIN: u8 = 1;
    /// AS_PATH.
    pub const AS_PATH: u8 = 2;
    /// NEXT_HOP.
    pub const NEXT_HOP: u8 = 3;
    /// MULTI_EXIT_DISC.
    pub const MED: u8 = 4;
    /// LOCAL_PREF.
    pub const LOCAL_PREF: u8 = 5;
    /// ATOMIC_AGGREGATE.
    pub const ATOMIC_AGGREGATE: u8 = 6;
    /// AGGREGATOR.
    pub const AGGREGATOR: u8 = 7;
    /// COMMUNITIES.
    pub const COMMUNITIES: u8 = 8;
    /// MP_REACH_NLRI.
    pub const MP_REACH: u8 = 14;
    /// MP_UNREACH_NLRI.
    pub const MP_UNREACH: u8 = 15;
    /// EXTENDED COMMUNITIES.
    pub const EXTENDED_COMMUNITIES: u8 = 16;
    /// AS4_PATH.
    pub const AS4_PATH: u8 = 17;
    /// LARGE_COMMUNITY.
    pub const LARGE_COMMUNITIES: u8 = 32;
}

/// ORIGIN values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// Learned from an interior protocol.
    Igp = 0,
    /// Learned from EGP.
    Egp = 1,
    /// Learned some other way.
    Incomplete = 2,
}
/// AGGREGATOR: AS and address of the aggregating speaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Aggregator {
    /// AS (AS_TRANS from a 2-octet speaker for 4-octet ASes).
    pub asn: u32,
    /// BGP identifier of the aggregator.
    pub address: Ipv4Addr,
}

/// An attribute we do not interpret, preserved as raw bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RawAttribute {
    /// Optional, transitive and partial bits as received (extended length is recomputed on encode).
    pub flags: u8,
    /// Type code.
    pub type_code: u8,
    /// Value.
    pub value: Bytes,
}

/// The path attributes of an UPDATE.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PathAttributes {
    /// ORIGIN.
    pub origin: Option<Origin>,
    /// AS_PATH.
    pub as_path: Option<AsPath>,
    /// NEXT_HOP (IPv4 NLRI only).
    pub next_hop: Option<Ipv4Addr>,
    /// MULTI_EXIT_DISC.
    pub med: Option<u32>,
    /// LOCAL_PREF (iBGP only).
    pub local_pref: Option<u32>,
    /// ATOMIC_AGGREGATE present.
    pub atomic_aggregate: bool,
    /// AGGREGATOR.
    pub aggregator: Option<Aggregator>,
    /// COMMUNITIES.
    pub communities: Vec<Community>,
    /// EXTENDED COMMUNITIES.
    pub extended_communities: Vec<ExtendedCommunity>,
    /// LARGE_COMMUNITY.
    pub large_communities: Vec<LargeCommunity>,
    /// AS4_PATH (only between a 4-octet and a 2-octet speaker).
    pub as4_path: Option<AsPath>,
    /// MP_REACH_NLRI.
    pub mp_reach: Option<MpReach>,
    /// MP_UNREACH_NLRI.
    pub mp_unreach: Option<MpUnreach>,
    /// Unknown optional transitive attributes (and MP attributes of other families).
    pub unknown: Vec<RawAttribute>,
}

fn put_attr(out: &mut BytesMut, flags: u8, type_code: u8, value: &[u8]) {
    let flags = flags & !flag::EXTENDED;
    if value.len() > 255 {
        out.put_u8(flags | flag::EXTENDED);
        out.put_u8(type_code);
        out.put_u16(value.len().min(0xffff) as u16);
    } else {
        out.put_u8(flags);
        out.put_u8(type_code);
        out.put_u8(value.len() as u8);
    }
    out.put_slice(value.get(..value.len().min(0xffff)).unwrap_or_default());
}

/// Result of decoding an attribute list: attributes plus the non-fatal errors met.
#[derive(Debug, Default)]
pub(crate) struct DecodedAttributes {
    pub(crate) attrs: PathAttributes,
    pub(crate) errors: Vec<DecodeError>,
    /// The list held (or began) an attribute other than MP_UNREACH_NLRI (RFC 7606 §5.2).
    pub(crate) other_than_mp_unreach: bool,
}

impl DecodedAttributes {
    /// Records a non-fatal error; a session-resetting one is returned instead.
    fn push_error(&mut self, e: DecodeError) -> Result<(), DecodeError> {
        if e.action == ErrorAction::SessionReset {
            return Err(e);
        }
        self.errors.push(e);
        Ok(())
    }
}

impl PathAttributes {
    /// Appends the attribute list; `four_octet` selects the AS_PATH encoding (RFC 6793).
    pub fn encode(&self, four_octet: bool, out: &mut BytesMut) {
        let mut v = BytesMut::with_capacity(64);
        if let Some(o) = self.origin {
            put_attr(out, flag::TRANSITIVE, attr_type::ORIGIN, &[o as u8]);
        }
        if let Some(p) = &self.as_path {
            p.encode_value(four_octet, &mut v);
            put_attr(out, flag::TRANSITIVE, attr_type::AS_PATH, &v);
            v.clear();
        }
        if let Some(nh) = self.next_hop {
            put_attr(out, flag::TRANSITIVE, attr_type::NEXT_HOP, &nh.octets());
        }
        if let Some(m) = self.med {
            put_attr(out, flag::OPTIONAL, attr_type::MED, &m.to_be_bytes());
        }
        if let Some(l) = self.local_pref {
            put_attr(out, flag::TRANSITIVE, attr_type::LOCAL_PREF, &l.to_be_bytes());
        }
        if self.atomic_aggregate {
            put_attr(out, flag::TRANSITIVE, attr_type::ATOMIC_AGGREGATE, &[]);
        }
        if let Some(a) = self.aggregator {
            if four_octet {
                v.put_u32(a.asn);
            } else {
                v.put_u16(if a.asn > 0xffff { AS_TRANS as u16 } else { a.asn as u16 });
            }
            v.put_slice(&a.address.octets());
            put_attr(out, flag::OPTIONAL | flag::TRANSITIVE, attr_type::AGGREGATOR, &v);
            v.clear();
        }
        if !self.communities.is_empty() {
            for c in &self.communities {
                v.put_u32(c.0);
            }
            put_attr(out, flag::OPTIONAL | flag::TRANSITIVE, attr_type::COMMUNITIES, &v);
            v.clear();
        }
        if let Some(mp) = &self.mp_reach {
            mp.encode_value(&mut v);
            put_attr(out, flag::OPTIONAL, attr_type::MP_REACH, &v);
            v.clear();
        }
        if let Some(mp) = &self.mp_unreach {
            mp.encode_value(&mut v);
            put_attr(out, flag::OPTIONAL, attr_type::MP_UNREACH, &v);
            v.clear();
        }
        if !self.extended_communities.is_empty() {
            for c in &self.extended_communities {
                v.put_slice(&c.0);
            }
            put_attr(out, flag::OPTIONAL | flag::TRANSITIVE, attr_type::EXTENDED_COMMUNITIES, &v);
            v.clear();
        }
        if let Some(p) = &self.as4_path {
            p.encode_value(true, &mut v);
            put_attr(out, flag::OPTIONAL | flag::TRANSITIVE, attr_type::AS4_PATH, &v);
            v.clear();
        }
        if !self.large_communities.is_empty() {
            for c in &self.large_communities {
                v.put_u32(c.global);
                v.put_u32(c.local1);
                v.put_u32(c.local2);
            }
            put_attr(out, flag::OPTIONAL | flag::TRANSITIVE, attr_type::LARGE_COMMUNITIES, &v);
            v.clear();
        }
        for u in &self.unknown {
            put_attr(out, u.flags, u.type_code, &u.value);
        }
    }

    /// Decodes an attribute list, applying RFC 7606 per attribute.
    ///
    /// Returns `Err` only for errors that reset the session; lesser errors are listed
    /// in `errors` and the offending attribute is left out.
    pub(crate) fn decode(buf: Bytes, four_octet: bool) -> Result<DecodedAttributes, DecodeError> {
        let mut r = Reader::new(buf);
        let mut out = DecodedAttributes::default();
        let mut seen = [false; 256];
        while !r.is_empty() {
            let start = r.clone();
            let flags = r.u8().unwrap_or(0); // The loop runs while bytes remain.
            let type_code = r.u8();
            let is_mp = matches!(type_code, Some(attr_type::MP_REACH | attr_type::MP_UNREACH));
            out.other_than_mp_unreach |= type_code != Some(attr_type::MP_UNREACH);
            let len =
                if flags & flag::EXTENDED != 0 { r.u16().map(usize::from) } else { r.u8().map(usize::from) };
            let (Some(type_code), Some(len)) = (type_code, len) else {
                // RFC 7606 §4: too few octets left for a header is treat-as-withdraw, the
                // NLRI field being delimited by the Total Path Attribute Length; but an MP
                // attribute cut here takes its NLRI with it (§3, last paragraph).
                let e = DecodeError::withdraw(
                    subcode::MALFORMED_ATTRIBUTE_LIST,
                    Bytes::new(),
                    "truncated attribute header",
                );
                let e = if is_mp { e.handled_as(ErrorAction::SessionReset) } else { e };
                return out.push_error(e).map(|()| out);
            };
            let Some(value) = r.take(len) else {
                // RFC 7606 §4: the attribute overruns the list: treat-as-withdraw, unless it is
                // MP_REACH/MP_UNREACH, whose NLRI can then not be located (§3, §5.2).
                let e = DecodeError::withdraw(
                    subcode::ATTRIBUTE_LENGTH_ERROR,
                    start.clone().rest(),
                    "attribute overruns attribute list",
                );
                let e = if is_mp { e.handled_as(ErrorAction::SessionReset) } else { e };
                return out.push_error(e).map(|()| out);
            };
            let hdr_len = if flags & flag::EXTENDED != 0 { 4 } else { 3 };
            let raw = {
                let mut s = start;
                s.take(hdr_len + len).unwrap_or_default()
            };
            let idx = usize::from(type_code);
            if seen.get(idx).copied().unwrap_or(false) {
                // RFC 7606 §3(g): keep the first, except for MP attributes.
                if is_mp {
                    return Err(DecodeError::reset(
                        super::error::code::UPDATE_MESSAGE,
                        subcode::MALFORMED_ATTRIBUTE_LIST,
                        Bytes::new(),
                        "duplicate MP_REACH/MP_UNREACH attribute",
                    ));
                }
                continue;
            }
            if let Some(s) = seen.get_mut(idx) {
                *s = true;
            }
            if let Err(e) = out.attrs.decode_one(flags, type_code, value, raw, four_octet) {
                out.push_error(e)?;
            }
        }
        Ok(out)
    }

    fn decode_one(
        &mut self,
        flags: u8,
        type_code: u8,
        value: Bytes,
        raw: Bytes,
        four_octet: bool,
    ) -> Result<(), DecodeError> {
        let optional = flags & flag::OPTIONAL != 0;
        if let Some(want) = expected_flags(type_code)
            && flags & (flag::OPTIONAL | flag::TRANSITIVE) != want
        {
            // RFC 7606 §3(c): conflicting Optional/Transitive bits make the attribute
            // malformed, handled as §7 says for that attribute.
            let e = DecodeError::withdraw(
                subcode::ATTRIBUTE_FLAGS_ERROR,
                raw,
                "attribute flags conflict with the attribute type",
            );
            return Err(e.handled_as(malformed_action(type_code)));
        }
        let len = value.len();
        let mut v = Reader::new(value.clone());
        let len_err = |raw: &Bytes| {
            DecodeError::withdraw(subcode::ATTRIBUTE_LENGTH_ERROR, raw.clone(), "bad attribute length")
        };
        match type_code {
            attr_type::ORIGIN => {
                if len != 1 {
                    return Err(len_err(&raw));
                }
                self.origin = Some(match v.u8() {
                    Some(0) => Origin::Igp,
                    Some(1) => Origin::Egp,
                    Some(2) => Origin::Incomplete,
                    _ => {
                        return Err(DecodeError::withdraw(subcode::INVALID_ORIGIN, raw, "invalid ORIGIN"));
                    }
                });
            }
            attr_type::AS_PATH => {
                let p = AsPath::decode_value(value, four_octet).ok_or_else(|| {
                    DecodeError::withdraw(subcode::MALFORMED_AS_PATH, Bytes::new(), "malformed AS_PATH")
                })?;
                self.as_path = Some(p);
            }
            attr_type::NEXT_HOP => {
                let a = v.u32().filter(|_| len == 4).ok_or_else(|| len_err(&raw))?;
                self.next_hop = Some(Ipv4Addr::from(a));
            }
            attr_type::MED => {
                self.med = Some(v.u32().filter(|_| len == 4).ok_or_else(|| len_err(&raw))?);
            }
            attr_type::LOCAL_PREF => {
                self.local_pref = Some(v.u32().filter(|_| len == 4).ok_or_else(|| len_err(&raw))?);
            }
            attr_type::ATOMIC_AGGREGATE => {
                if len != 0 {
                    // RFC 7606 §7.6.
                    return Err(DecodeError::discard(
                        subcode::ATTRIBUTE_LENGTH_ERROR,
                        raw,
                        "bad ATOMIC_AGGREGATE length",
                    ));
                }
                self.atomic_aggregate = true;
            }
            attr_type::AGGREGATOR => {
                let want = if four_octet { 8 } else { 6 };
                if len != want {
                    // RFC 7606 §7.7.
                    return Err(DecodeError::discard(
                        subcode::ATTRIBUTE_LENGTH_ERROR,
                        raw,
                        "bad AGGREGATOR length",
                    ));
                }
                let asn = if four_octet { v.u32() } else { v.u16().map(u32::from) };
                if let (Some(asn), Some(a)) = (asn, v.u32()) {
                    self.aggregator = Some(Aggregator { asn, address: Ipv4Addr::from(a) });
                }
            }
            attr_type::COMMUNITIES => {
                community_list(len, 4, &raw, "COMMUNITIES length not a non-zero multiple of 4")?;
                while let Some(c) = v.u32() {
                    self.communities.push(Community(c));
                }
            }
            attr_type::EXTENDED_COMMUNITIES => {
                community_list(len, 8, &raw, "EXTENDED COMMUNITIES length not a non-zero multiple of 8")?;
                for c in value.chunks_exact(8) {
                    let mut octets = [0u8; 8];
                    octets.copy_from_slice(c);
                    self.extended_communities.push(ExtendedCommunity(octets));
                }
            }
            attr_type::LARGE_COMMUNITIES => {
                community_list(len, 12, &raw, "LARGE_COMMUNITY length not a non-zero multiple of 12")?;
                while let (Some(global), Some(local1), Some(local2)) = (v.u32(), v.u32(), v.u32()) {
                    self.large_communities.push(LargeCommunity { global, local1, local2 });
                }
            }
            attr_type::AS4_PATH => match AsPath::decode_value(value, true) {
                Some(p) => self.as4_path = Some(p),
                // RFC 6793 §6 / RFC 7606 §7.2: discard a malformed AS4_PATH.
                None => {
                    return Err(DecodeError::discard(
                        subcode::MALFORMED_AS_PATH,
                        Bytes::new(),
                        "malformed AS4_PATH",
                    ));
                }
            },
            // MP attributes of other families are kept as they came, flags and all.
            attr_type::MP_REACH => match MpReach::decode_value(value.clone(), &raw)? {
                Some(mp) => self.mp_reach = Some(mp),
                None => self.unknown.push(RawAttribute { flags, type_code, value }),
            },
            attr_type::MP_UNREACH => match MpUnreach::decode_value(value.clone(), &raw)? {
                Some(mp) => self.mp_unreach = Some(mp),
                None => self.unknown.push(RawAttribute { flags, type_code, value }),
            },
            _ if !optional => {
                return Err(DecodeError::reset(
                    super::error::code::UPDATE_MESSAGE,
                    subcode::UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE,
                    raw,
                    "unrecognized well-known attribute",
                ));
            }
            // Unknown optional non-transitive: quietly ignored (RFC 4271 §5).
            _ if flags & flag::TRANSITIVE == 0 => {}
            _ => self.unknown.push(RawAttribute {
                // Keep only the meaningful bits: extended length is recomputed on encode
                // and the low four bits are ignored on receipt (RFC 4271 §4.3).
                flags: flags & (flag::OPTIONAL | flag::TRANSITIVE | flag::PARTIAL),
                type_code,
                value,
            }),
        }
        Ok(())
    }

    /// The AS path to use for a route from a 2-octet speaker, merging AS4_PATH (RFC 6793 §4.2.3).
    pub fn effective_as_path(&self) -> Option<AsPath> {
        match (&self.as_path, &self.as4_path) {
            (Some(p), Some(p4)) => Some(p.merge_as4(p4)),
            (p, _) => p.clone(),
        }
    }

    /// Adds AS4_PATH when sending a 4-octet AS_PATH to a 2-octet speaker (RFC 6793 §4.2.2).
    pub fn prepare_for_two_octet_peer(&mut self) {
        if let Some(p) = &self.as_path
            && p.has_four_octet()
        {
            self.as4_path = Some(p.clone());
        }
    }
}

/// A list of communities (RFC 7606 §7.8, §7.14; RFC 8092 §11) is malformed, treat-as-withdraw,
/// unless its length is a non-zero multiple of the community's size.
fn community_list(len: usize, unit: usize, raw: &Bytes, what: &'static str) -> Result<(), DecodeError> {
    if len.is_multiple_of(unit) && len > 0 {
        return Ok(());
    }
    Err(DecodeError::withdraw(subcode::OPTIONAL_ATTRIBUTE_ERROR, raw.clone(), what))
}

/// The Optional and Transitive bits a recognised attribute must carry (RFC 4271 §5, RFC 4760 §3-4,
/// RFC 4360 §2, RFC 6793 §3, RFC 8092 §3); `None` for attributes we do not recognise.
fn expected_flags(type_code: u8) -> Option<u8> {
    use attr_type::*;
    let (o, t) = (flag::OPTIONAL, flag::TRANSITIVE);
    match type_code {
        ORIGIN | AS_PATH | NEXT_HOP | LOCAL_PREF | ATOMIC_AGGREGATE => Some(t),
        MED | MP_REACH | MP_UNREACH => Some(o),
        AGGREGATOR | COMMUNITIES | EXTENDED_COMMUNITIES | AS4_PATH | LARGE_COMMUNITIES => Some(o | t),
        _ => None,
    }
}

/// How a malformed recognised attribute is handled (RFC 7606 §7).
fn malformed_action(type_code: u8) -> ErrorAction {
    match type_code {
        // §7.6, §7.7; RFC 6793 §6 for AS4_PATH.
        attr_type::ATOMIC_AGGREGATE | attr_type::AGGREGATOR | attr_type::AS4_PATH => {
            ErrorAction::AttributeDiscard
        }
        // §7.11, §7.12: no AFI/SAFI disable here.
        attr_type::MP_REACH | attr_type::MP_UNREACH => ErrorAction::SessionReset,
        _ => ErrorAction::TreatAsWithdraw,
    }
}
