//! IP address management: pure allocation of LoadBalancer addresses from pools.
//!
//! No Kubernetes types and no I/O: the controller maps Services and IPAddressPools onto
//! [`ServiceRequest`] and [`PoolSpec`], replays existing status with
//! [`Allocator::assign_existing`], then calls [`Allocator::allocate`] /
//! [`Allocator::release`] and the pool methods. Rules and choices: `docs/ipam.md`.

#![warn(missing_docs)]

mod allocator;
mod error;
mod intervals;
mod pool;
mod range;
mod selector;
mod service;

pub use allocator::{
    Allocator, Assigned, Evicted, FamilyStats, Moved, OrphanReason, Placement, PoolStats, Replayed,
};
pub use error::AllocError;
pub use pool::{PoolSpec, ServiceAllocation};
pub use range::{AddrRange, Family, RangeError};
pub use selector::{LabelSelector, Operator, Requirement};
pub use service::{FamilyPolicy, Protocol, ServiceKey, ServiceRequest, ShareRefusal, TrafficPolicy};
