//! ferrolb speaker: decides which addresses this node announces and announces them
//! by BGP and/or ARP/NDP, driving the protocols of `ferrolb-proto`.
//!
//! Data flow: [`model`] (a plain snapshot, from a static file or the API) →
//! [`plan::plan`] (pure) → announcers ([`announce::bgp`], [`announce::l2`]); [`run`]
//! is the event loop that drives them.
pub mod announce;
pub mod cluster;
pub mod error;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod readiness;
pub mod run;
