//! What the allocator hands back: held addresses and their pool (or why none), the
//! outcome of replaying a Service's status, and attributions moved by a pool change.

use std::net::IpAddr;

use thiserror::Error;

use crate::ipam::ShareRefusal;
use crate::ipam::service::ServiceKey;

/// An address held by a Service and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    /// The address.
    pub addr: IpAddr,
    /// The pool it belongs to, or why it belongs to none.
    pub placement: Placement,
}

/// Which pool an address is attributed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The address is in this pool (for `ferrolb.io/ip-allocated-from-pool`).
    Pool(String),
    /// The address is in no pool; the Service keeps it and the controller reports why.
    Orphaned(OrphanReason),
}

/// Why a held address is in no pool.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OrphanReason {
    /// Its pool was deleted and no other pool holds it.
    #[error(
        "pool {pool} was deleted and no other pool contains the address; the service keeps it until its request changes"
    )]
    PoolDeleted {
        /// The deleted pool.
        pool: String,
    },
    /// Its pool was edited to exclude it and no other pool holds it.
    #[error(
        "pool {pool} no longer contains the address and no other pool does; the service keeps it until its request changes"
    )]
    PoolShrunk {
        /// The edited pool.
        pool: String,
    },
    /// Replayed from Service status while no pool holds it.
    #[error("the address is not in any pool; the service keeps it until its request changes")]
    NotInAnyPool,
}

/// A Service that lost an address while status was replayed, to be re-allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    /// The Service that lost all its addresses.
    pub service: ServiceKey,
    /// The disputed address.
    pub addr: IpAddr,
    /// The older Service that keeps it.
    pub kept_by: ServiceKey,
    /// Why they may not share.
    pub reason: ShareRefusal,
}

/// The result of replaying one Service's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// What the Service now holds.
    pub addrs: Vec<Assigned>,
    /// Younger Services that held the same addresses and lost them.
    pub evicted: Vec<Evicted>,
}

/// A held address whose pool attribution changed after a pool change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The Service holding it.
    pub service: ServiceKey,
    /// The address.
    pub addr: IpAddr,
    /// The new attribution.
    pub placement: Placement,
}
