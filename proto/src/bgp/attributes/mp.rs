//! MP_REACH_NLRI and MP_UNREACH_NLRI for IPv4/IPv6 unicast (RFC 4760, next hops after
//! RFC 2545, IPv4 routes with an IPv6 next hop after RFC 8950): the types and their
//! value encoding.
use crate::bgp::error::{DecodeError, code, subcode};
use crate::bgp::nlri::{Family, decode_prefixes, encode_prefix};
use crate::bgp::reader::Reader;
use bytes::{BufMut, Bytes, BytesMut};
use ipnet::IpNet;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Next hop carried in MP_REACH_NLRI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MpNextHop {
    /// IPv4 next hop (4 octets).
    V4(Ipv4Addr),
    /// IPv6 global next hop, with the optional link-local one (16 or 32 octets, RFC 2545 §3).
    V6 {
        /// Global address.
        global: Ipv6Addr,
        /// Link-local address, when the peer shares a link.
        link_local: Option<Ipv6Addr>,
    },
}

/// MP_REACH_NLRI for IPv4/IPv6 unicast (RFC 4760 §3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MpReach {
    /// AFI/SAFI.
    pub family: Family,
    /// Next hop.
    pub next_hop: MpNextHop,
    /// Reachable prefixes.
    pub nlri: Vec<IpNet>,
}

/// MP_UNREACH_NLRI (RFC 4760 §4); empty `withdrawn` is End-of-RIB (RFC 4724 §2).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MpUnreach {
    /// AFI/SAFI.
    pub family: Family,
    /// Withdrawn prefixes.
    pub withdrawn: Vec<IpNet>,
}

impl MpReach {
    /// Appends the attribute's value, without the attribute header.
    pub(super) fn encode_value(&self, out: &mut BytesMut) {
        out.put_u16(self.family.afi);
        out.put_u8(self.family.safi);
        match self.next_hop {
            MpNextHop::V4(a) => {
                out.put_u8(4);
                out.put_slice(&a.octets());
            }
            MpNextHop::V6 { global, link_local: None } => {
                out.put_u8(16);
                out.put_slice(&global.octets());
            }
            MpNextHop::V6 { global, link_local: Some(ll) } => {
                out.put_u8(32);
                out.put_slice(&global.octets());
                out.put_slice(&ll.octets());
            }
        }
        out.put_u8(0); // Reserved.
        for p in &self.nlri {
            encode_prefix(p, out);
        }
    }

    /// Decodes the attribute's value; `Ok(None)` for a family other than IPv4/IPv6
    /// unicast, which the caller keeps raw. `raw` (the whole attribute) goes into the error.
    pub(super) fn decode_value(value: Bytes, raw: &Bytes) -> Result<Option<MpReach>, DecodeError> {
        // RFC 7606 §7.11: a malformed MP_REACH resets the session (we do not do AFI/SAFI
        // disable).
        let bad = || malformed(raw, "malformed MP_REACH_NLRI");
        let mut r = Reader::new(value);
        let Some(family) = unicast_family(&mut r).ok_or_else(bad)? else { return Ok(None) };
        let nh_len = r.u8().ok_or_else(bad)?;
        let nh = r.take(usize::from(nh_len)).ok_or_else(bad)?;
        let next_hop = match (family.afi, nh.len()) {
            (1, 4) => MpNextHop::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&nh[..]).map_err(|_| bad())?)),
            // RFC 8950 §4: IPv4 routes may carry an IPv6 next hop, of the same two forms.
            (1 | 2, 16) => MpNextHop::V6 {
                global: Ipv6Addr::from(<[u8; 16]>::try_from(&nh[..]).map_err(|_| bad())?),
                link_local: None,
            },
            (1 | 2, 32) => {
                let g = nh.get(..16).ok_or_else(bad)?;
                let l = nh.get(16..).ok_or_else(bad)?;
                MpNextHop::V6 {
                    global: Ipv6Addr::from(<[u8; 16]>::try_from(g).map_err(|_| bad())?),
                    link_local: Some(Ipv6Addr::from(<[u8; 16]>::try_from(l).map_err(|_| bad())?)),
                }
            }
            _ => return Err(bad()),
        };
        let _reserved = r.u8().ok_or_else(bad)?;
        let nlri = decode_prefixes(&mut r, family.afi == 2).map_err(|_| bad())?;
        Ok(Some(MpReach { family, next_hop, nlri }))
    }
}

impl MpUnreach {
    /// Appends the attribute's value, without the attribute header.
    pub(super) fn encode_value(&self, out: &mut BytesMut) {
        out.put_u16(self.family.afi);
        out.put_u8(self.family.safi);
        for p in &self.withdrawn {
            encode_prefix(p, out);
        }
    }

    /// Decodes the attribute's value, as [`MpReach::decode_value`] does.
    pub(super) fn decode_value(value: Bytes, raw: &Bytes) -> Result<Option<MpUnreach>, DecodeError> {
        // RFC 7606 §7.12, as for MP_REACH.
        let bad = || malformed(raw, "malformed MP_UNREACH_NLRI");
        let mut r = Reader::new(value);
        let Some(family) = unicast_family(&mut r).ok_or_else(bad)? else { return Ok(None) };
        let withdrawn = decode_prefixes(&mut r, family.afi == 2).map_err(|_| bad())?;
        Ok(Some(MpUnreach { family, withdrawn }))
    }
}

/// The AFI/SAFI that opens both attributes' values: `None` when it is cut short,
/// `Some(None)` for a family other than IPv4/IPv6 unicast (kept raw by the caller).
fn unicast_family(r: &mut Reader) -> Option<Option<Family>> {
    let family = Family { afi: r.u16()?, safi: r.u8()? };
    Some((family == Family::IPV4_UNICAST || family == Family::IPV6_UNICAST).then_some(family))
}

/// A malformed MP attribute: the session resets, and the Optional Attribute Error
/// carries the whole attribute `raw` (RFC 4271 §6.3).
fn malformed(raw: &Bytes, what: &'static str) -> DecodeError {
    DecodeError::reset(code::UPDATE_MESSAGE, subcode::OPTIONAL_ATTRIBUTE_ERROR, raw.clone(), what)
}
