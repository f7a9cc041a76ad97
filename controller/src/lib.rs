//! ferrolb controller: assigns LoadBalancer Service addresses from pools.
pub mod ipam;
pub mod migrate;
