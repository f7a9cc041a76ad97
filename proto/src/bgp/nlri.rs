//! Prefix (NLRI) encoding shared by the NLRI fields and MP_REACH/MP_UNREACH (RFC 4271 §4.3).
use super::reader::Reader;
use bytes::{BufMut, BytesMut};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Address family identifier + subsequent address family identifier (RFC 4760).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Family {
    /// AFI (1 = IPv4, 2 = IPv6).
    pub afi: u16,
    /// SAFI (1 = unicast).
    pub safi: u8,
}

impl Family {
    /// IPv4 unicast.
    pub const IPV4_UNICAST: Family = Family { afi: 1, safi: 1 };
    /// IPv6 unicast.
    pub const IPV6_UNICAST: Family = Family { afi: 2, safi: 1 };

    /// The unicast family of a prefix.
    pub fn of(prefix: &IpNet) -> Family {
        match prefix {
            IpNet::V4(_) => Family::IPV4_UNICAST,
            IpNet::V6(_) => Family::IPV6_UNICAST,
        }
    }
}

/// Bytes a prefix takes on the wire: length octet plus significant octets.
pub fn prefix_wire_len(prefix: &IpNet) -> usize {
    1 + usize::from(prefix.prefix_len()).div_ceil(8)
}

/// Appends one prefix in RFC 4271 length+prefix form.
pub fn encode_prefix(prefix: &IpNet, out: &mut BytesMut) {
    let len = prefix.prefix_len();
    let n = usize::from(len).div_ceil(8);
    out.put_u8(len);
    match prefix {
        IpNet::V4(p) => out.put_slice(p.addr().octets().get(..n).unwrap_or_default()),
        IpNet::V6(p) => out.put_slice(p.addr().octets().get(..n).unwrap_or_default()),
    }
}

/// Why a prefix list could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadPrefix;

/// Reads prefixes of one family until the reader is empty.
pub(crate) fn decode_prefixes(r: &mut Reader, v6: bool) -> Result<Vec<IpNet>, BadPrefix> {
    let mut out = Vec::new();
    while !r.is_empty() {
        let len = r.u8().ok_or(BadPrefix)?;
        let max = if v6 { 128 } else { 32 };
        if len > max {
            return Err(BadPrefix);
        }
        let n = usize::from(len).div_ceil(8);
        let bytes = r.take(n).ok_or(BadPrefix)?;
        if v6 {
            let mut a = [0u8; 16];
            a.get_mut(..n).ok_or(BadPrefix)?.copy_from_slice(&bytes);
            let net = Ipv6Net::new(Ipv6Addr::from(a), len).map_err(|_| BadPrefix)?;
            out.push(IpNet::V6(net));
        } else {
            let mut a = [0u8; 4];
            a.get_mut(..n).ok_or(BadPrefix)?.copy_from_slice(&bytes);
            let net = Ipv4Net::new(Ipv4Addr::from(a), len).map_err(|_| BadPrefix)?;
            out.push(IpNet::V4(net));
        }
    }
    Ok(out)
}
