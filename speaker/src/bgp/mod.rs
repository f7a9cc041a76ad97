//! Sans-IO BGP-4 core (codec, FSM, adj-RIB-out) and its tokio session driver.
pub mod attributes;
pub mod capability;
pub mod error;
pub mod fsm;
pub mod message;
pub mod nlri;
pub mod rib_out;
pub mod session;
pub mod socket;

pub use attributes::{
    AsPath, AsSegment, Community, LargeCommunity, MpNextHop, Origin, PathAttributes,
};
pub use capability::{Capability, GracefulRestart};
pub use error::{DecodeError, ErrorAction};
pub use message::{DecodeContext, EncodeContext, Message, Notification, Open, Update};
pub use nlri::Family;

#[cfg(test)]
mod tests;
