//! Pools: their spec, who may use them, and their free addresses per family.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::intervals::IntervalSet;
use super::range::{AddrRange, Family, from_u128, to_u128};
use super::selector::LabelSelector;
use super::service::ServiceRequest;

/// An IPAddressPool, as the allocator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// The pool name.
    pub name: String,
    /// CIDRs and ranges, IPv4 and IPv6; overlaps are merged.
    pub ranges: Vec<AddrRange>,
    /// Whether Services without a pool annotation or requested address may get addresses here.
    pub auto_assign: bool,
    /// Never hand out IPv4 addresses ending in .0 or .255.
    pub avoid_buggy_ips: bool,
    /// Which Services may use the pool, and its priority among matching pools.
    pub allocation: Option<ServiceAllocation>,
}

impl PoolSpec {
    /// An autoAssign pool over `ranges` with no restrictions.
    pub fn new(name: impl Into<String>, ranges: Vec<AddrRange>) -> Self {
        PoolSpec { name: name.into(), ranges, auto_assign: true, avoid_buggy_ips: false, allocation: None }
    }
}

/// `spec.serviceAllocation`: every non-empty criterion must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceAllocation {
    /// Lower wins among matching pools; unset sorts after every set priority.
    pub priority: Option<i32>,
    /// Namespaces allowed; empty means any.
    pub namespaces: BTreeSet<String>,
    /// The namespace's labels must match one of these; empty means any.
    pub namespace_selectors: Vec<LabelSelector>,
    /// The Service's labels must match one of these; empty means any.
    pub service_selectors: Vec<LabelSelector>,
}

impl ServiceAllocation {
    /// Whether the Service is allowed by this serviceAllocation.
    pub fn matches(&self, req: &ServiceRequest) -> bool {
        (self.namespaces.is_empty() || self.namespaces.contains(req.key.namespace()))
            && (self.namespace_selectors.is_empty()
                || self.namespace_selectors.iter().any(|s| s.matches(&req.namespace_labels)))
            && (self.service_selectors.is_empty()
                || self.service_selectors.iter().any(|s| s.matches(&req.service_labels)))
    }
}

/// Maps addresses to a dense index space. With avoidBuggyIPs the IPv4 addresses ending in
/// .0 and .255 have no index, so the free set never holds them and needs no skipping logic:
/// 254 usable addresses per /24, index = (a >> 8) * 254 + (a & 0xff) - 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Codec {
    skip_buggy: bool,
}

impl Codec {
    fn index(self, v: u128) -> Option<u128> {
        if !self.skip_buggy {
            return Some(v);
        }
        let low = v & 0xff;
        if low == 0 || low == 0xff {
            return None;
        }
        Some((v >> 8) * 254 + low - 1)
    }

    fn addr(self, i: u128) -> u128 {
        if !self.skip_buggy {
            return i;
        }
        ((i / 254) << 8) | (i % 254 + 1)
    }

    /// Index bounds of the usable addresses in `first..=last`, if any.
    fn index_range(self, first: u128, last: u128) -> Option<(u128, u128)> {
        if !self.skip_buggy {
            return Some((first, last));
        }
        let lo = match first & 0xff {
            0 => first + 1,
            0xff => first.checked_add(2)?,
            _ => first,
        };
        let hi = match last & 0xff {
            0xff => last - 1,
            0 => last.checked_sub(2)?,
            _ => last,
        };
        if lo > hi {
            return None;
        }
        Some((self.index(lo)?, self.index(hi)?))
    }
}

/// One family's part of a pool: its addresses and those still free, in index space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FamilySpace {
    family: Family,
    codec: Codec,
    members: IntervalSet,
    free: IntervalSet,
}

impl FamilySpace {
    fn new(family: Family, skip_buggy: bool) -> Self {
        FamilySpace {
            family,
            codec: Codec { skip_buggy },
            members: IntervalSet::default(),
            free: IntervalSet::default(),
        }
    }

    fn add_range(&mut self, first: u128, last: u128) {
        if let Some((lo, hi)) = self.codec.index_range(first, last) {
            self.members.insert(lo, hi);
            self.free.insert(lo, hi);
        }
    }

    fn index_of(&self, ip: IpAddr) -> Option<u128> {
        let (family, v) = to_u128(ip);
        if family != self.family {
            return None;
        }
        self.codec.index(v).filter(|&i| self.members.contains(i))
    }

    /// Number of usable addresses.
    pub(crate) fn capacity(&self) -> u128 {
        self.members.len()
    }

    /// Number of usable addresses not in use.
    pub(crate) fn available(&self) -> u128 {
        self.free.len()
    }

    /// The lowest free address: O(log n).
    pub(crate) fn first_free(&self) -> Option<IpAddr> {
        self.free.first().map(|i| from_u128(self.family, self.codec.addr(i)))
    }
}

/// A pool with its allocation state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pool {
    pub(crate) spec: PoolSpec,
    v4: FamilySpace,
    v6: FamilySpace,
}

impl Pool {
    /// A pool with every usable address free.
    pub(crate) fn new(spec: PoolSpec) -> Self {
        let mut v4 = FamilySpace::new(Family::V4, spec.avoid_buggy_ips);
        // avoidBuggyIPs is about IPv4 firmware bugs; IPv6 has no broadcast address.
        let mut v6 = FamilySpace::new(Family::V6, false);
        for r in &spec.ranges {
            let (family, first, last) = r.bounds();
            match family {
                Family::V4 => v4.add_range(first, last),
                Family::V6 => v6.add_range(first, last),
            }
        }
        Pool { spec, v4, v6 }
    }

    pub(crate) fn space(&self, family: Family) -> &FamilySpace {
        match family {
            Family::V4 => &self.v4,
            Family::V6 => &self.v6,
        }
    }

    fn space_mut(&mut self, family: Family) -> &mut FamilySpace {
        match family {
            Family::V4 => &mut self.v4,
            Family::V6 => &mut self.v6,
        }
    }

    /// Whether `ip` is one of the pool's usable addresses.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        self.space(Family::of(&ip)).index_of(ip).is_some()
    }

    /// Whether `ip` lies in the pool's ranges at all (even if avoidBuggyIPs excludes it).
    pub(crate) fn covers(&self, ip: IpAddr) -> bool {
        self.spec.ranges.iter().any(|r| r.contains(&ip))
    }

    /// Marks `ip` in use; no-op if it is not a usable address of the pool.
    pub(crate) fn take(&mut self, ip: IpAddr) {
        let space = self.space_mut(Family::of(&ip));
        if let Some(i) = space.index_of(ip) {
            space.free.remove(i);
        }
    }

    /// Marks `ip` free again; no-op if it is not a usable address of the pool.
    pub(crate) fn give_back(&mut self, ip: IpAddr) {
        let space = self.space_mut(Family::of(&ip));
        if let Some(i) = space.index_of(ip) {
            space.free.insert(i, i);
        }
    }

    /// Whether the Service passes the pool's serviceAllocation (pools without one allow all).
    pub(crate) fn allows(&self, req: &ServiceRequest) -> bool {
        self.spec.allocation.as_ref().is_none_or(|a| a.matches(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buggy_codec_is_a_bijection_on_usable_addresses() {
        let c = Codec { skip_buggy: true };
        let mut expected = 0;
        for v in 0u128..2048 {
            match c.index(v) {
                Some(i) => {
                    assert_eq!(i, expected);
                    assert_eq!(c.addr(i), v);
                    expected += 1;
                }
                None => assert!(v & 0xff == 0 || v & 0xff == 0xff),
            }
        }
        assert_eq!(c.index_range(0, 255), Some((0, 253)));
        assert_eq!(c.index_range(255, 256), None);
        assert_eq!(c.index_range(0xffff_ffff, 0xffff_ffff), None);
        assert_eq!(c.index_range(0, 0), None);
    }

    #[test]
    fn avoid_buggy_ips_skips_dot_zero_and_dot_255_only_for_ipv4() {
        let mut spec =
            PoolSpec::new("p", vec!["198.18.0.0/23".parse().unwrap(), "2001:db8::/120".parse().unwrap()]);
        spec.avoid_buggy_ips = true;
        let p = Pool::new(spec);
        assert_eq!(p.space(Family::V4).capacity(), 508);
        assert_eq!(p.space(Family::V6).capacity(), 256);
        assert!(!p.contains("198.18.0.255".parse().unwrap()));
        assert!(!p.contains("198.18.1.0".parse().unwrap()));
        assert!(p.covers("198.18.1.0".parse().unwrap()));
        assert!(p.contains("2001:db8::ff".parse().unwrap()));
        assert_eq!(p.space(Family::V4).first_free(), Some("198.18.0.1".parse().unwrap()));
    }
}
