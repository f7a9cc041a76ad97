//! ferrolb speaker: decides which addresses this node announces and announces them
//! by BGP and/or ARP/NDP. Its protocol modules are reused by `ferrolb-bootstrap`.
//!
//! Data flow: [`model`] (a plain snapshot, from a static file or the API) →
//! [`plan::plan`] (pure) → announcers ([`announce::bgp`]).
pub mod accept;
pub mod announce;
pub mod bfd;
pub mod bgp;
pub mod cluster;
pub mod election;
pub mod http;
pub mod l2;
pub mod membership;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod readiness;
pub mod speaker;
