//! Sans-IO BGP-4 core (codec, FSM, adj-RIB-out) and its tokio session driver.
//!
//! * [`message`], [`attributes`], [`capability`], [`nlri`]: the codec
//!   (`Message::decode(&mut buf, &DecodeContext)`, `Message::encode(&mut out, &EncodeContext)`).
//! * [`fsm`]: RFC 4271 §8 state machine, `Fsm::handle(now, Input)`, drained by
//!   `poll_transmit()`, `poll_event()` and `poll_timeout()`.
//! * [`rib_out`]: per-peer Adj-RIB-Out, `RibOut::sync(&desired) -> Vec<Update>`.
//! * [`session`], [`socket`]: the tokio driver, the listener, TCP MD5 and TTL.
//! * [`unnumbered`]: the router on a link found by its router advertisements.
//!
//! Running a session:
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use ferrolb_proto::bgp::fsm::PeerConfig;
//! use ferrolb_proto::bgp::session::{self, Listener, Routes, SessionConfig};
//! use ferrolb_proto::bgp::socket::Password;
//! use ferrolb_proto::bgp::{Community, PathAttributes};
//! use std::sync::Arc;
//!
//! let peer = PeerConfig::new(64513, 64512, "192.0.2.11".parse().unwrap());
//! let mut cfg = SessionConfig::new(peer, "192.0.2.1:179".parse().unwrap());
//! cfg.local_addr = Some("192.0.2.11".parse().unwrap());
//! cfg.password = Some(Password::new("from-the-secret"));
//! let handle = session::spawn(cfg.clone());
//! // Passive peers (or collisions) need the listener; one per address, shared by peers.
//! let listener = Listener::bind("0.0.0.0:179".parse().unwrap())?;
//! listener.add_peer(&handle, cfg.password.as_ref())?;
//!
//! let attrs = Arc::new(PathAttributes { communities: vec![Community::new(64512, 100)], ..Default::default() });
//! let mut routes = Routes::new();
//! routes.insert("203.0.113.10/32".parse().unwrap(), attrs);
//! handle.set_desired(routes);
//! let up = handle.status().is_up();
//! # let _ = up;
//! handle.shutdown(2).await; // Cease / administrative shutdown
//! # Ok(()) }
//! ```
pub mod attributes;
pub mod capability;
pub mod error;
pub mod fsm;
pub mod message;
pub mod nlri;
mod reader;
pub mod rib_out;
pub mod session;
pub mod socket;
pub mod unnumbered;

pub use attributes::{
    AsPath, AsSegment, Community, ExtendedCommunity, LargeCommunity, MpNextHop, Origin, PathAttributes,
};
pub use capability::{Capability, GracefulRestart, NextHopFamily};
pub use error::{DecodeError, ErrorAction};
pub use message::{DecodeContext, EncodeContext, Message, Notification, Open, Update};
pub use nlri::Family;

#[cfg(test)]
mod tests;
