//! BGP messages (RFC 4271 §4): OPEN, UPDATE, NOTIFICATION, KEEPALIVE, and
//! ROUTE-REFRESH (RFC 2918), with their encoders and never-panicking decoders.
use super::attributes::{AS_TRANS, MpUnreach, PathAttributes, attr_type};
use super::capability::Capability;
use super::error::{DecodeError, ErrorAction, code, subcode};
use super::nlri::{Family, decode_prefixes, encode_prefix};
use super::reader::Reader;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use ipnet::{IpNet, Ipv4Net};
use std::net::Ipv4Addr;

/// Largest BGP message without RFC 8654 extended messages.
pub const MAX_MESSAGE_LEN: usize = 4096;
/// Length of the fixed header (marker, length, type).
pub const HEADER_LEN: usize = 19;

/// Message type codes.
pub mod msg_type {
    /// OPEN.
    pub const OPEN: u8 = 1;
    /// UPDATE.
    pub const UPDATE: u8 = 2;
    /// NOTIFICATION.
    pub const NOTIFICATION: u8 = 3;
    /// KEEPALIVE.
    pub const KEEPALIVE: u8 = 4;
    /// ROUTE-REFRESH.
    pub const ROUTE_REFRESH: u8 = 5;
}

/// Session properties that change how messages are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeContext {
    /// Both sides advertised the 4-octet AS capability: AS_PATH carries 4-octet ASNs.
    pub four_octet_as: bool,
}

impl Default for DecodeContext {
    fn default() -> Self {
        Self { four_octet_as: true }
    }
}

/// Session properties that change how messages are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeContext {
    /// Both sides advertised the 4-octet AS capability.
    pub four_octet_as: bool,
}

impl Default for EncodeContext {
    fn default() -> Self {
        Self { four_octet_as: true }
    }
}

/// OPEN message (RFC 4271 §4.2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Open {
    /// Version, always 4 when we send.
    pub version: u8,
    /// The 2-octet "My Autonomous System" field (AS_TRANS for 4-octet ASes).
    pub my_as: u16,
    /// Proposed hold time in seconds.
    pub hold_time: u16,
    /// BGP identifier.
    pub bgp_id: Ipv4Addr,
    /// Capabilities, in the order received.
    pub capabilities: Vec<Capability>,
}

impl Open {
    /// Builds an OPEN for `asn`, adding the 4-octet AS capability (RFC 6793 §3).
    pub fn new(asn: u32, hold_time: u16, bgp_id: Ipv4Addr, mut capabilities: Vec<Capability>) -> Self {
        capabilities.retain(|c| !matches!(c, Capability::FourOctetAs(_)));
        capabilities.push(Capability::FourOctetAs(asn));
        let my_as = u16::try_from(asn).unwrap_or(AS_TRANS as u16);
        Self { version: 4, my_as, hold_time, bgp_id, capabilities }
    }

    /// The sender's AS: from the 4-octet AS capability when present.
    pub fn asn(&self) -> u32 {
        self.four_octet_as().unwrap_or(u32::from(self.my_as))
    }

    /// The AS carried by the 4-octet AS capability, if advertised.
    pub fn four_octet_as(&self) -> Option<u32> {
        self.capabilities.iter().find_map(|c| match c {
            Capability::FourOctetAs(a) => Some(*a),
            _ => None,
        })
    }

    /// Families advertised with the multiprotocol capability; IPv4 unicast when none (RFC 4760 §8).
    pub fn families(&self) -> Vec<Family> {
        let v: Vec<Family> = self
            .capabilities
            .iter()
            .filter_map(|c| match c {
                Capability::Multiprotocol(f) => Some(*f),
                _ => None,
            })
            .collect();
        if v.is_empty() { vec![Family::IPV4_UNICAST] } else { v }
    }

    fn encode_body(&self, out: &mut BytesMut) {
        out.put_u8(self.version);
        out.put_u16(self.my_as);
        out.put_u16(self.hold_time);
        out.put_slice(&self.bgp_id.octets());
        let mut caps = BytesMut::new();
        for c in &self.capabilities {
            c.encode(&mut caps);
        }
        if caps.is_empty() {
            out.put_u8(0);
        } else {
            // One Capabilities optional parameter (type 2) holding every capability,
            // so at most 253 bytes of capabilities (no RFC 9072 extended parameters).
            let caps = caps.get(..caps.len().min(253)).unwrap_or_default();
            out.put_u8(caps.len() as u8 + 2);
            out.put_u8(2);
            out.put_u8(caps.len() as u8);
            out.put_slice(caps);
        }
    }

    fn decode_body(mut r: Reader) -> Result<Open, DecodeError> {
        let short = || {
            DecodeError::reset(
                code::MESSAGE_HEADER,
                subcode::BAD_MESSAGE_LENGTH,
                Bytes::new(),
                "OPEN too short",
            )
        };
        let version = r.u8().ok_or_else(short)?;
        if version != 4 {
            // RFC 4271 §6.2: data is the largest supported version.
            return Err(DecodeError::reset(
                code::OPEN_MESSAGE,
                subcode::UNSUPPORTED_VERSION,
                Bytes::from_static(&[0, 4]),
                "unsupported BGP version",
            ));
        }
        let my_as = r.u16().ok_or_else(short)?;
        let hold_time = r.u16().ok_or_else(short)?;
        let bgp_id = Ipv4Addr::from(r.u32().ok_or_else(short)?);
        let opt_len = r.u8().ok_or_else(short)?;
        let bad_params =
            || DecodeError::reset(code::OPEN_MESSAGE, 0, Bytes::new(), "malformed optional parameters");
        if usize::from(opt_len) != r.remaining() {
            return Err(bad_params());
        }
        let mut params = Reader::new(r.rest());
        let mut capabilities = Vec::new();
        while !params.is_empty() {
            let t = params.u8().ok_or_else(bad_params)?;
            let l = params.u8().ok_or_else(bad_params)?;
            let v = params.take(usize::from(l)).ok_or_else(bad_params)?;
            if t != 2 {
                return Err(DecodeError::reset(
                    code::OPEN_MESSAGE,
                    subcode::UNSUPPORTED_OPTIONAL_PARAMETER,
                    Bytes::new(),
                    "unsupported optional parameter",
                ));
            }
            let mut cr = Reader::new(v);
            while !cr.is_empty() {
                capabilities.push(Capability::decode(&mut cr).ok_or_else(|| {
                    DecodeError::reset(code::OPEN_MESSAGE, 0, Bytes::new(), "malformed capability")
                })?);
            }
        }
        Ok(Open { version, my_as, hold_time, bgp_id, capabilities })
    }
}

/// UPDATE message (RFC 4271 §4.3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Update {
    /// Withdrawn IPv4 prefixes.
    pub withdrawn: Vec<Ipv4Net>,
    /// Path attributes, including MP_REACH/MP_UNREACH for IPv6.
    pub attributes: PathAttributes,
    /// Reachable IPv4 prefixes.
    pub nlri: Vec<Ipv4Net>,
    /// RFC 7606: an attribute was malformed so every prefix of this UPDATE is withdrawn.
    pub treat_as_withdraw: bool,
    /// RFC 7606 errors that did not reset the session (for logging).
    pub errors: Vec<DecodeError>,
}

impl Update {
    /// End-of-RIB marker for a family (RFC 4724 §2).
    pub fn end_of_rib(family: Family) -> Update {
        let mut u = Update::default();
        if family != Family::IPV4_UNICAST {
            u.attributes.mp_unreach = Some(MpUnreach { family, withdrawn: Vec::new() });
        }
        u
    }

    /// The family this UPDATE marks End-of-RIB for, if it is such a marker.
    pub fn end_of_rib_family(&self) -> Option<Family> {
        if !self.withdrawn.is_empty() || !self.nlri.is_empty() {
            return None;
        }
        let a = &self.attributes;
        if *a == PathAttributes::default() {
            return Some(Family::IPV4_UNICAST);
        }
        match &a.mp_unreach {
            Some(u)
                if u.withdrawn.is_empty()
                    && PathAttributes { mp_unreach: None, ..a.clone() } == PathAttributes::default() =>
            {
                Some(u.family)
            }
            _ => None,
        }
    }

    /// Every prefix announced, IPv4 NLRI and MP_REACH.
    pub fn announced(&self) -> impl Iterator<Item = IpNet> + '_ {
        self.nlri
            .iter()
            .map(|p| IpNet::V4(*p))
            .chain(self.attributes.mp_reach.iter().flat_map(|m| m.nlri.iter().copied()))
    }

    /// Every prefix withdrawn, IPv4 field and MP_UNREACH.
    pub fn withdrawn_prefixes(&self) -> impl Iterator<Item = IpNet> + '_ {
        self.withdrawn
            .iter()
            .map(|p| IpNet::V4(*p))
            .chain(self.attributes.mp_unreach.iter().flat_map(|m| m.withdrawn.iter().copied()))
    }

    fn encode_body(&self, ctx: &EncodeContext, out: &mut BytesMut) {
        let mut w = BytesMut::new();
        for p in &self.withdrawn {
            encode_prefix(&IpNet::V4(*p), &mut w);
        }
        out.put_u16(w.len().min(0xffff) as u16);
        out.put_slice(&w);
        w.clear();
        self.attributes.encode(ctx.four_octet_as, &mut w);
        out.put_u16(w.len().min(0xffff) as u16);
        out.put_slice(&w);
        for p in &self.nlri {
            encode_prefix(&IpNet::V4(*p), out);
        }
    }

    fn decode_body(mut r: Reader, ctx: &DecodeContext) -> Result<Update, DecodeError> {
        let list = || {
            DecodeError::reset(
                code::UPDATE_MESSAGE,
                subcode::MALFORMED_ATTRIBUTE_LIST,
                Bytes::new(),
                "bad UPDATE lengths",
            )
        };
        let wlen = r.u16().ok_or_else(list)?;
        let w = r.take(usize::from(wlen)).ok_or_else(list)?;
        let alen = r.u16().ok_or_else(list)?;
        let a = r.take(usize::from(alen)).ok_or_else(list)?;
        let network = || {
            DecodeError::reset(
                code::UPDATE_MESSAGE,
                subcode::INVALID_NETWORK_FIELD,
                Bytes::new(),
                "invalid NLRI field",
            )
        };
        let v4 = |v: Vec<IpNet>| {
            v.into_iter()
                .filter_map(|p| match p {
                    IpNet::V4(p) => Some(p),
                    IpNet::V6(_) => None,
                })
                .collect::<Vec<_>>()
        };
        let withdrawn = v4(decode_prefixes(&mut Reader::new(w), false).map_err(|_| network())?);
        let nlri = v4(decode_prefixes(&mut r, false).map_err(|_| network())?);
        let decoded = PathAttributes::decode(a, ctx.four_octet_as)?;
        let mut u = Update {
            withdrawn,
            attributes: decoded.attrs,
            nlri,
            treat_as_withdraw: false,
            errors: decoded.errors,
        };
        // RFC 4271 §6.3 / RFC 7606 §3(d): mandatory attributes when reachability is announced.
        let attrs = &u.attributes;
        let mut missing = None;
        if !u.nlri.is_empty() || attrs.mp_reach.is_some() {
            if attrs.origin.is_none() {
                missing = Some(attr_type::ORIGIN);
            } else if attrs.as_path.is_none() {
                missing = Some(attr_type::AS_PATH);
            } else if !u.nlri.is_empty() && attrs.next_hop.is_none() {
                missing = Some(attr_type::NEXT_HOP);
            }
        }
        if let Some(t) = missing
            && !u.errors.iter().any(|e| e.action == ErrorAction::TreatAsWithdraw)
        {
            u.errors.push(DecodeError::withdraw(
                subcode::MISSING_WELL_KNOWN_ATTRIBUTE,
                Bytes::copy_from_slice(&[t]),
                "missing well-known attribute",
            ));
        }
        // RFC 7606 §5.2: with attributes other than MP_UNREACH_NLRI but no reachable NLRI
        // located, an error stronger than attribute-discard may hide misparsed NLRI.
        let reach_located = !u.nlri.is_empty()
            || u.attributes.mp_reach.is_some()
            || u.attributes.unknown.iter().any(|a| a.type_code == attr_type::MP_REACH);
        if !reach_located
            && decoded.other_than_mp_unreach
            && let Some(e) = u.errors.iter().find(|e| e.action > ErrorAction::AttributeDiscard)
        {
            return Err(e.clone().handled_as(ErrorAction::SessionReset));
        }
        u.treat_as_withdraw = u.errors.iter().any(|e| e.action == ErrorAction::TreatAsWithdraw);
        Ok(u)
    }
}

/// NOTIFICATION message (RFC 4271 §4.5).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Notification {
    /// Error code.
    pub code: u8,
    /// Error subcode.
    pub subcode: u8,
    /// Data.
    pub data: Bytes,
}

impl From<&DecodeError> for Notification {
    /// The NOTIFICATION to send for a decode error (its code, subcode and data).
    fn from(e: &DecodeError) -> Self {
        Notification { code: e.code, subcode: e.subcode, data: e.data.clone() }
    }
}

impl Notification {
    /// A Cease NOTIFICATION with the given subcode (RFC 4486).
    pub fn cease(subcode: u8) -> Self {
        Self { code: code::CEASE, subcode, data: Bytes::new() }
    }
}

impl std::fmt::Display for Notification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.code {
            code::MESSAGE_HEADER => "message header error",
            code::OPEN_MESSAGE => "OPEN message error",
            code::UPDATE_MESSAGE => "UPDATE message error",
            code::HOLD_TIMER_EXPIRED => "hold timer expired",
            code::FSM => "FSM error",
            code::CEASE => "cease",
            _ => "unknown error",
        };
        write!(f, "{name} ({}/{})", self.code, self.subcode)
    }
}

/// ROUTE-REFRESH message (RFC 2918 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteRefresh {
    /// Family to re-advertise.
    pub family: Family,
    /// Reserved octet (RFC 7313 uses it as a subtype).
    pub subtype: u8,
}

/// A BGP message.
// UPDATE dominates traffic; boxing it would add an allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Message {
    /// OPEN.
    Open(Open),
    /// UPDATE.
    Update(Update),
    /// NOTIFICATION.
    Notification(Notification),
    /// KEEPALIVE.
    Keepalive,
    /// ROUTE-REFRESH.
    RouteRefresh(RouteRefresh),
}

/// Length of the complete message at the start of `buf`, once its header is there.
///
/// Returns `Ok(None)` when fewer than 19 bytes are buffered; errors on a bad marker or length.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, DecodeError> {
    let Some(hdr) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    check_header(hdr).map(Some)
}

fn check_header(hdr: &[u8]) -> Result<usize, DecodeError> {
    if hdr.get(..16).is_none_or(|m| m.iter().any(|b| *b != 0xff)) {
        return Err(DecodeError::reset(
            code::MESSAGE_HEADER,
            subcode::CONNECTION_NOT_SYNCHRONIZED,
            Bytes::new(),
            "bad marker",
        ));
    }
    let (Some(hi), Some(lo), Some(t)) = (hdr.get(16), hdr.get(17), hdr.get(18)) else {
        return Err(DecodeError::reset(
            code::MESSAGE_HEADER,
            subcode::BAD_MESSAGE_LENGTH,
            Bytes::new(),
            "short header",
        ));
    };
    let len = usize::from(u16::from_be_bytes([*hi, *lo]));
    let min = match *t {
        msg_type::OPEN => 29,
        msg_type::UPDATE => 23,
        msg_type::NOTIFICATION => 21,
        msg_type::KEEPALIVE => 19,
        msg_type::ROUTE_REFRESH => 23,
        _ => {
            return Err(DecodeError::reset(
                code::MESSAGE_HEADER,
                subcode::BAD_MESSAGE_TYPE,
                Bytes::copy_from_slice(&[*t]),
                "bad message type",
            ));
        }
    };
    let exact = matches!(*t, msg_type::KEEPALIVE | msg_type::ROUTE_REFRESH);
    if len < min || len > MAX_MESSAGE_LEN || (exact && len != min) {
        // RFC 4271 §6.1: data is the erroneous length field.
        return Err(DecodeError::reset(
            code::MESSAGE_HEADER,
            subcode::BAD_MESSAGE_LENGTH,
            Bytes::copy_from_slice(&[*hi, *lo]),
            "bad message length",
        ));
    }
    Ok(len)
}

impl Message {
    /// Decodes one complete message from the front of `buf`, consuming it.
    pub fn decode(buf: &mut impl Buf, ctx: &DecodeContext) -> Result<Message, DecodeError> {
        let mut hdr = [0u8; HEADER_LEN];
        if buf.remaining() < HEADER_LEN {
            return Err(DecodeError::reset(
                code::MESSAGE_HEADER,
                subcode::BAD_MESSAGE_LENGTH,
                Bytes::new(),
                "truncated header",
            ));
        }
        buf.copy_to_slice(&mut hdr);
        let len = check_header(&hdr)?;
        let body_len = len - HEADER_LEN;
        if buf.remaining() < body_len {
            return Err(DecodeError::reset(
                code::MESSAGE_HEADER,
                subcode::BAD_MESSAGE_LENGTH,
                Bytes::new(),
                "truncated message",
            ));
        }
        let mut r = Reader::new(buf.copy_to_bytes(body_len));
        match hdr.get(18).copied().unwrap_or(0) {
            msg_type::OPEN => Open::decode_body(r).map(Message::Open),
            msg_type::UPDATE => Update::decode_body(r, ctx).map(Message::Update),
            msg_type::NOTIFICATION => {
                let code = r.u8().unwrap_or(0);
                let subcode = r.u8().unwrap_or(0);
                Ok(Message::Notification(Notification { code, subcode, data: r.rest() }))
            }
            msg_type::KEEPALIVE => Ok(Message::Keepalive),
            _ => {
                let afi = r.u16().unwrap_or(0);
                let subtype = r.u8().unwrap_or(0);
                let safi = r.u8().unwrap_or(0);
                Ok(Message::RouteRefresh(RouteRefresh { family: Family { afi, safi }, subtype }))
            }
        }
    }

    /// Appends the encoded message to `out`.
    pub fn encode(&self, out: &mut BytesMut, ctx: &EncodeContext) {
        let start = out.len();
        out.put_slice(&[0xff; 16]);
        out.put_u16(0); // Length, patched below.
        match self {
            Message::Open(o) => {
                out.put_u8(msg_type::OPEN);
                o.encode_body(out);
            }
            Message::Update(u) => {
                out.put_u8(msg_type::UPDATE);
                u.encode_body(ctx, out);
            }
            Message::Notification(n) => {
                out.put_u8(msg_type::NOTIFICATION);
                out.put_u8(n.code);
                out.put_u8(n.subcode);
                // Keep the message within 4096 bytes whatever the data.
                out.put_slice(n.data.get(..n.data.len().min(MAX_MESSAGE_LEN - 21)).unwrap_or_default());
            }
            Message::Keepalive => out.put_u8(msg_type::KEEPALIVE),
            Message::RouteRefresh(rr) => {
                out.put_u8(msg_type::ROUTE_REFRESH);
                out.put_u16(rr.family.afi);
                out.put_u8(rr.subtype);
                out.put_u8(rr.family.safi);
            }
        }
        let len = (out.len() - start).min(0xffff) as u16;
        if let Some(l) = out.get_mut(start + 16..start + 18) {
            l.copy_from_slice(&len.to_be_bytes());
        }
    }

    /// Encodes into a fresh buffer.
    pub fn to_bytes(&self, ctx: &EncodeContext) -> Bytes {
        let mut b = BytesMut::with_capacity(64);
        self.encode(&mut b, ctx);
        b.freeze()
    }
}
