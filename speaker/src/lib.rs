//! ferrolb speaker: decides which addresses this node announces and announces them
//! by BGP and/or ARP/NDP. Its protocol modules are reused by `ferrolb-bootstrap`.
pub mod bfd;
pub mod bgp;
pub mod election;
pub mod l2;
pub mod membership;
