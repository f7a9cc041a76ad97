//! Address families and address ranges (CIDRs and `first-last` spans), as u128 bounds.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use thiserror::Error;

/// An IP address family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    /// The family of an address.
    pub fn of(ip: &IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    /// The other family.
    pub fn other(self) -> Family {
        match self {
            Family::V4 => Family::V6,
            Family::V6 => Family::V4,
        }
    }

    fn bits(self) -> u8 {
        match self {
            Family::V4 => 32,
            Family::V6 => 128,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        })
    }
}

/// An address as its family and a u128, so IPv6 arithmetic never materialises addresses.
pub(crate) fn to_u128(ip: IpAddr) -> (Family, u128) {
    match ip {
        IpAddr::V4(a) => (Family::V4, u128::from(u32::from(a))),
        IpAddr::V6(a) => (Family::V6, u128::from(a)),
    }
}

/// Inverse of [`to_u128`]; IPv4 values always come from IPv4 bounds, so they fit in 32 bits.
pub(crate) fn from_u128(family: Family, v: u128) -> IpAddr {
    match family {
        Family::V4 => IpAddr::V4(Ipv4Addr::from(u32::try_from(v).unwrap_or(u32::MAX))),
        Family::V6 => IpAddr::V6(Ipv6Addr::from(v)),
    }
}

/// A contiguous, inclusive span of addresses of one family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AddrRange {
    first: IpAddr,
    last: IpAddr,
}

/// Why a pool address string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RangeError {
    /// Neither an address, a CIDR nor a range.
    #[error("{0:?} is not an IP address, a CIDR (192.0.2.0/24) or a range (192.0.2.10-192.0.2.20)")]
    Syntax(String),
    /// Prefix longer than the family allows.
    #[error("{input:?}: prefix length {prefix} is longer than {max}, the maximum for {family}")]
    PrefixTooLong {
        /// What the user wrote.
        input: String,
        /// The prefix length given.
        prefix: u8,
        /// The family's maximum prefix length.
        max: u8,
        /// The address family.
        family: Family,
    },
    /// CIDR with bits set after the prefix: almost always a typo, so refuse rather than guess.
    #[error("{input:?} has host bits set; write the network as {network}/{prefix}")]
    HostBits {
        /// What the user wrote.
        input: String,
        /// The network address the prefix implies.
        network: IpAddr,
        /// The prefix length given.
        prefix: u8,
    },
    /// `first-last` with one IPv4 and one IPv6 end.
    #[error("range {first}-{last} mixes IPv4 and IPv6")]
    MixedFamilies {
        /// First address.
        first: IpAddr,
        /// Last address.
        last: IpAddr,
    },
    /// `first-last` with last < first.
    #[error("range {first}-{last} ends before it starts")]
    Reversed {
        /// First address.
        first: IpAddr,
        /// Last address.
        last: IpAddr,
    },
}

impl AddrRange {
    /// The range `first..=last`; both ends must be of one family and in order.
    pub fn new(first: IpAddr, last: IpAddr) -> Result<Self, RangeError> {
        if Family::of(&first) != Family::of(&last) {
            return Err(RangeError::MixedFamilies { first, last });
        }
        if last < first {
            return Err(RangeError::Reversed { first, last });
        }
        Ok(AddrRange { first, last })
    }

    /// The range covered by `network/prefix`; host bits must be zero.
    pub fn cidr(network: IpAddr, prefix: u8) -> Result<Self, RangeError> {
        let (family, v) = to_u128(network);
        let input = format!("{network}/{prefix}");
        let max = family.bits();
        if prefix > max {
            return Err(RangeError::PrefixTooLong { input, prefix, max, family });
        }
        let host_bits = u32::from(max - prefix);
        // checked_shr(128) is None: a full-length prefix has no host bits.
        let host_mask = u128::MAX.checked_shr(128 - host_bits).unwrap_or(0);
        if v & host_mask != 0 {
            return Err(RangeError::HostBits { input, network: from_u128(family, v & !host_mask), prefix });
        }
        Ok(AddrRange { first: network, last: from_u128(family, v | host_mask) })
    }

    /// A range holding one address.
    pub fn single(ip: IpAddr) -> Self {
        AddrRange { first: ip, last: ip }
    }

    /// The lowest address.
    pub fn first(&self) -> IpAddr {
        self.first
    }

    /// The highest address.
    pub fn last(&self) -> IpAddr {
        self.last
    }

    /// The address family.
    pub fn family(&self) -> Family {
        Family::of(&self.first)
    }

    /// Whether `ip` lies in the range.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.first <= *ip && *ip <= self.last
    }

    /// Family and inclusive u128 bounds.
    pub(crate) fn bounds(&self) -> (Family, u128, u128) {
        let (family, first) = to_u128(self.first);
        let (_, last) = to_u128(self.last);
        (family, first, last)
    }
}

impl FromStr for AddrRange {
    type Err = RangeError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let syntax = || RangeError::Syntax(s.to_owned());
        if let Some((addr, prefix)) = s.split_once('/') {
            let addr: IpAddr = addr.trim().parse().map_err(|_| syntax())?;
            let prefix: u8 = prefix.trim().parse().map_err(|_| syntax())?;
            return AddrRange::cidr(addr, prefix);
        }
        if let Some((first, last)) = s.split_once('-') {
            let first: IpAddr = first.trim().parse().map_err(|_| syntax())?;
            let last: IpAddr = last.trim().parse().map_err(|_| syntax())?;
            return AddrRange::new(first, last);
        }
        let ip: IpAddr = s.parse().map_err(|_| syntax())?;
        Ok(AddrRange::single(ip))
    }
}

impl fmt::Display for AddrRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (family, first, last) = self.bounds();
        let span = last - first;
        // Print as a CIDR when the span is exactly one aligned prefix, as the user most likely wrote it.
        if span.checked_add(1).is_some_and(u128::is_power_of_two) && first & span == 0 {
            let prefix = u32::from(family.bits()) - (span.count_ones());
            return write!(f, "{}/{}", self.first, prefix);
        }
        if first == 0 && last == u128::MAX {
            return write!(f, "{}/0", self.first);
        }
        write!(f, "{}-{}", self.first, self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrolb_testkit::ip;

    #[test]
    fn parses_cidr_range_and_single() {
        let r: AddrRange = "192.0.2.0/24".parse().unwrap();
        assert_eq!((r.first(), r.last()), (ip("192.0.2.0"), ip("192.0.2.255")));
        let r: AddrRange = "198.51.100.10 - 198.51.100.20".parse().unwrap();
        assert_eq!((r.first(), r.last()), (ip("198.51.100.10"), ip("198.51.100.20")));
        let r: AddrRange = "2001:db8::/64".parse().unwrap();
        assert_eq!(r.last(), ip("2001:db8::ffff:ffff:ffff:ffff"));
        let r: AddrRange = "::/0".parse().unwrap();
        assert_eq!(r.bounds(), (Family::V6, 0, u128::MAX));
        let r: AddrRange = "0.0.0.0/0".parse().unwrap();
        assert_eq!(r.last(), ip("255.255.255.255"));
        let r: AddrRange = "192.0.2.7".parse().unwrap();
        assert_eq!(r.first(), r.last());
        let r: AddrRange = "192.0.2.7/32".parse().unwrap();
        assert_eq!(r.first(), r.last());
    }

    #[test]
    fn rejects_bad_input_with_the_fix() {
        let e = "192.0.2.5/24".parse::<AddrRange>().unwrap_err();
        assert_eq!(e.to_string(), "\"192.0.2.5/24\" has host bits set; write the network as 192.0.2.0/24");
        assert!(matches!("192.0.2.0/33".parse::<AddrRange>(), Err(RangeError::PrefixTooLong { .. })));
        assert!(matches!("192.0.2.9-192.0.2.1".parse::<AddrRange>(), Err(RangeError::Reversed { .. })));
        assert!(matches!(
            "192.0.2.1-2001:db8::1".parse::<AddrRange>(),
            Err(RangeError::MixedFamilies { .. })
        ));
        assert!(matches!("lan".parse::<AddrRange>(), Err(RangeError::Syntax(_))));
    }

    #[test]
    fn displays_as_written() {
        for s in ["192.0.2.0/24", "2001:db8::/120", "192.0.2.10-192.0.2.20", "::/0", "192.0.2.7/32"] {
            assert_eq!(s.parse::<AddrRange>().unwrap().to_string(), s);
        }
    }
}
