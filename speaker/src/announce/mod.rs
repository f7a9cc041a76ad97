//! Announcers: take the plan's desired set and converge to it.
//!
//! [`bgp`] owns the BGP sessions. The L2 responder (ARP/NDP) consumes
//! [`crate::plan::Announcements::l2`] and lives with the L2 module.
pub mod bgp;
