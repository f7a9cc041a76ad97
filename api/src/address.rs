//! Pool address entries: CIDRs and inclusive `a-b` ranges.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

/// An inclusive address range of one family, parsed from a pool entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AddressRange {
    /// First address.
    pub first: IpAddr,
    /// Last address (inclusive).
    pub last: IpAddr,
}

/// Why a pool entry did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// Neither a CIDR nor a range.
    #[error("{0:?} is neither a CIDR (203.0.113.0/24) nor a range (198.51.100.10-198.51.100.20)")]
    Malformed(String),
    /// A CIDR with host bits set, which usually hides a typo.
    #[error("{given:?} has host bits set; write {network}")]
    HostBits {
        /// The entry.
        given: String,
        /// The network it probably means.
        network: IpNet,
    },
    /// `a-b` with a > b.
    #[error("range {0:?} ends before it starts; write the lower address first")]
    Reversed(String),
    /// `a-b` with one IPv4 and one IPv6 end.
    #[error("range {0:?} mixes IPv4 and IPv6; use one family per entry")]
    MixedFamilies(String),
}

impl AddressRange {
    /// Parses a pool entry.
    pub fn parse(entry: &str) -> Result<Self, AddressError> {
        let s = entry.trim();
        if s.contains('/') {
            let net: IpNet = s.parse().map_err(|_| AddressError::Malformed(entry.to_owned()))?;
            if net.trunc() != net {
                return Err(AddressError::HostBits { given: entry.to_owned(), network: net.trunc() });
            }
            return Ok(Self { first: net.network(), last: net.broadcast() });
        }
        if let Some((a, b)) = s.split_once('-') {
            let first: IpAddr = a.trim().parse().map_err(|_| AddressError::Malformed(entry.to_owned()))?;
            let last: IpAddr = b.trim().parse().map_err(|_| AddressError::Malformed(entry.to_owned()))?;
            if first.is_ipv4() != last.is_ipv4() {
                return Err(AddressError::MixedFamilies(entry.to_owned()));
            }
            if first > last {
                return Err(AddressError::Reversed(entry.to_owned()));
            }
            return Ok(Self { first, last });
        }
        // A bare address is a one-address pool; users write it for a single VIP.
        let one: IpAddr = s.parse().map_err(|_| AddressError::Malformed(entry.to_owned()))?;
        Ok(Self { first: one, last: one })
    }

    /// True for IPv4 ranges.
    pub fn is_ipv4(&self) -> bool {
        self.first.is_ipv4()
    }

    /// Whether two ranges share an address.
    pub fn overlaps(&self, other: &Self) -> bool {
        self.is_ipv4() == other.is_ipv4() && self.first <= other.last && other.first <= self.last
    }

    /// Whether `ip` lies in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.is_ipv4() && self.first <= ip && ip <= self.last
    }

    /// Number of addresses, saturating at `u128::MAX`.
    pub fn len(&self) -> u128 {
        to_u128(self.last).saturating_sub(to_u128(self.first)).saturating_add(1)
    }

    /// IPv4 addresses ending in .0 or .255 in the range (0 for IPv6), for `avoidBuggyIPs`.
    pub fn buggy_count(&self) -> u128 {
        if !self.is_ipv4() {
            return 0;
        }
        let (first, last) = (to_u128(self.first), to_u128(self.last));
        // Numbers in 0..=n with the given last octet.
        let upto = |n: u128, octet: u128| if n >= octet { (n - octet) / 256 + 1 } else { 0 };
        let count = |octet: u128| upto(last, octet) - first.checked_sub(1).map_or(0, |f| upto(f, octet));
        count(0) + count(255)
    }

    /// Never true: a range holds at least one address.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl fmt::Display for AddressRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cidr_range_and_single() {
        let r = AddressRange::parse("203.0.113.0/24").unwrap();
        assert_eq!(r.first.to_string(), "203.0.113.0");
        assert_eq!(r.last.to_string(), "203.0.113.255");
        assert_eq!(r.len(), 256);
        let r = AddressRange::parse("198.51.100.10-198.51.100.20").unwrap();
        assert_eq!(r.len(), 11);
        let r = AddressRange::parse("2001:db8:3::/120").unwrap();
        assert_eq!(r.len(), 256);
        assert!(!r.is_ipv4());
        assert_eq!(AddressRange::parse("192.0.2.7").unwrap().len(), 1);
    }

    #[test]
    fn rejects_bad_entries() {
        assert!(matches!(AddressRange::parse("198.51.100.20-198.51.100.10"), Err(AddressError::Reversed(_))));
        assert!(matches!(AddressRange::parse("192.0.2.1-2001:db8::1"), Err(AddressError::MixedFamilies(_))));
        assert!(matches!(AddressRange::parse("203.0.113.5/24"), Err(AddressError::HostBits { .. })));
        assert!(matches!(AddressRange::parse("203.0.113.0/33"), Err(AddressError::Malformed(_))));
        assert!(matches!(AddressRange::parse("bogus"), Err(AddressError::Malformed(_))));
    }

    #[test]
    fn buggy_addresses() {
        let count = |s: &str| AddressRange::parse(s).unwrap().buggy_count();
        assert_eq!(count("192.0.2.0/24"), 2);
        assert_eq!(count("10.0.0.0/16"), 512);
        assert_eq!(count("192.0.2.1-192.0.2.254"), 0);
        assert_eq!(count("192.0.2.255-192.0.3.0"), 2);
        assert_eq!(count("0.0.0.0/32"), 1);
        assert_eq!(count("2001:db8::/120"), 0);
    }

    #[test]
    fn overlap_is_per_family() {
        let a = AddressRange::parse("10.0.0.0/24").unwrap();
        let b = AddressRange::parse("10.0.0.200-10.0.1.5").unwrap();
        let c = AddressRange::parse("10.0.1.0/24").unwrap();
        assert!(a.overlaps(&b));
        assert!(!a.overlaps(&c));
        let v6 = AddressRange::parse("::/96").unwrap();
        assert!(!a.overlaps(&v6));
    }
}
