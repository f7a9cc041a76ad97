//! Allocation failures and the reasons behind them, worded for Events and conditions.

use std::fmt;
use std::net::IpAddr;

use thiserror::Error;

use super::range::Family;
use super::service::{ServiceKey, ShareRefusal};

/// Why an address could not be allocated or kept.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AllocError {
    /// A requested address lies outside every pool.
    #[error("address {addr} is not in any pool")]
    NotInAnyPool {
        /// The address.
        addr: IpAddr,
    },
    /// A requested address lies outside the annotated pool.
    #[error("address {addr} is not in pool {pool}")]
    NotInPool {
        /// The address.
        addr: IpAddr,
        /// The pool.
        pool: String,
    },
    /// A requested address ends in .0 or .255 and its pool sets avoidBuggyIPs.
    #[error("address {addr} ends in .0 or .255 and pool {pool} sets avoidBuggyIPs")]
    BuggyAddress {
        /// The address.
        addr: IpAddr,
        /// The pool.
        pool: String,
    },
    /// The `ferrolb.io/address-pool` annotation names no pool.
    #[error("pool {pool} does not exist")]
    UnknownPool {
        /// The pool named.
        pool: String,
    },
    /// The pool's serviceAllocation excludes the Service.
    #[error("pool {pool} does not allow service {service} (serviceAllocation)")]
    PoolNotAllowed {
        /// The pool.
        pool: String,
        /// The Service.
        service: ServiceKey,
    },
    /// No pool may be used for automatic allocation by this Service.
    #[error(
        "no pool allows namespace {namespace} (service {service}); set autoAssign or serviceAllocation on a pool, or annotate the service with ferrolb.io/address-pool"
    )]
    NoPoolAllows {
        /// The Service's namespace.
        namespace: String,
        /// The Service.
        service: ServiceKey,
    },
    /// Every candidate pool is full (or lacks the family).
    #[error("{} exhausted for {family}", PoolList(pools))]
    Exhausted {
        /// The pools tried, in order.
        pools: Vec<String>,
        /// The family.
        family: Family,
    },
    /// No candidate pool has addresses of the family at all.
    #[error("no pool available to service {service} has {family} addresses")]
    NoPoolForFamily {
        /// The Service.
        service: ServiceKey,
        /// The family.
        family: Family,
    },
    /// The requested addresses do not fit the Service's ipFamilyPolicy.
    #[error(
        "requested addresses {} do not fit the service's ipFamilyPolicy/ipFamilies ({policy})",
        AddrList(requested)
    )]
    FamilyMismatch {
        /// The requested addresses.
        requested: Vec<IpAddr>,
        /// The policy, as the user wrote it.
        policy: String,
    },
    /// A requested address is held by a Service it may not share with.
    #[error("requested address {addr} is used by svc {holder} and {reason}")]
    InUse {
        /// The address.
        addr: IpAddr,
        /// A current holder.
        holder: ServiceKey,
        /// Why they may not share.
        reason: ShareRefusal,
    },
    /// Crash recovery: an older Service holds the address and they may not share.
    #[error("address {addr} is also held by the older svc {holder}, which keeps it: {reason}")]
    Conflict {
        /// The address.
        addr: IpAddr,
        /// The Service that keeps it.
        holder: ServiceKey,
        /// Why they may not share.
        reason: ShareRefusal,
    },
}

struct PoolList<'a>(&'a [String]);

impl fmt::Display for PoolList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [] => f.write_str("no pool is"),
            [one] => write!(f, "pool {one} is"),
            many => write!(f, "pools {} are", many.join(", ")),
        }
    }
}

struct AddrList<'a>(&'a [IpAddr]);

impl fmt::Display for AddrList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}
