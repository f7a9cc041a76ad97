//! Per-pool statistics: capacity, assigned and available addresses per family.

use crate::ipam::range::Family;

/// Assigned and available addresses of one family in one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FamilyStats {
    /// Usable addresses (saturates at u128::MAX, only reachable with `::/0`).
    pub capacity: u128,
    /// Addresses in use by at least one Service (a shared address counts once).
    pub assigned: u128,
    /// Addresses free; convert with `u64::try_from(..).unwrap_or(u64::MAX)` for status.
    pub available: u128,
}

/// Per-family statistics of one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// IPv4.
    pub v4: FamilyStats,
    /// IPv6.
    pub v6: FamilyStats,
}

impl PoolStats {
    /// The statistics of one family.
    pub fn family(&self, family: Family) -> FamilyStats {
        match family {
            Family::V4 => self.v4,
            Family::V6 => self.v6,
        }
    }
}
