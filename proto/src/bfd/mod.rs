//! Bidirectional Forwarding Detection: RFC 5880 asynchronous mode over RFC 5881 single
//! hop, so a BGP session can be torn down within milliseconds of its path failing.
//!
//! * [`packet`]: the Control packet codec (`ControlPacket::decode` / `encode`).
//! * [`session`]: the sans-IO state machine, `Session::handle(now, Input)` +
//!   `poll_transmit()` / `poll_timeout()` / `poll_event()`.
//! * [`driver`]: tokio sockets and tasks (RFC 5881), `Bfd::spawn(BfdConfig) -> BfdHandle`
//!   whose `state()` is a `watch::Receiver<BfdState>`. `ferrolb_api::settings::bfd_session_config`
//!   (feature `settings`) maps a BFDProfile to a [`SessionConfig`].
//! * [`metrics`]: `ferrolb_bfd_session_up{peer}`, `ferrolb_bfd_state_transitions_total`.
//!
//! Wiring a BGP peer with `bfdProfile: NAME` (RFC 5882 §4.3: BFD Down tears BGP down):
//!
//! ```no_run
//! # async fn demo(session: ferrolb_proto::bfd::SessionConfig) -> anyhow::Result<()> {
//! use ferrolb_proto::bfd::{Bfd, BfdConfig};
//! let bfd = Bfd::new(None); // one per process; pass Some(BfdMetrics::register(..))
//! let cfg = BfdConfig::new("192.0.2.11".parse()?, "192.0.2.1".parse()?, session);
//! let handle = bfd.spawn(cfg)?; // keep it as long as the BGP peer exists
//! let mut state = handle.state();
//! let mut seen = *state.borrow_and_update();
//! while state.changed().await.is_ok() {
//!     let now = *state.borrow_and_update();
//!     if now.downs > seen.downs {
//!         // Close the BGP connection at once, without waiting for the hold timer, and
//!         // keep it from re-establishing until `now.is_up()` again.
//!     }
//!     seen = now;
//! }
//! # Ok(()) }
//! ```
pub mod driver;
pub mod metrics;
pub mod packet;
pub mod session;

pub use driver::{Bfd, BfdConfig, BfdHandle, BfdState};
pub use metrics::BfdMetrics;
pub use packet::{ControlPacket, DecodeError, Diagnostic, State};
pub use session::{Event, Input, Session, SessionConfig, Timers};

#[cfg(test)]
mod tests;
