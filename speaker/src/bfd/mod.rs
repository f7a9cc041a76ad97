//! Bidirectional Forwarding Detection: RFC 5880 asynchronous mode over RFC 5881 single
//! hop, so a BGP session can be torn down within milliseconds of its path failing.
//!
//! * [`packet`]: the Control packet codec (`ControlPacket::decode` / `encode`).
//! * [`session`]: the sans-IO state machine, `Session::handle(now, Input)` +
//!   `poll_transmit()` / `poll_timeout()` / `poll_event()`.
//! * [`driver`]: tokio sockets and tasks (RFC 5881), `Bfd::spawn(BfdConfig) -> BfdHandle`
//!   whose `state()` is a `watch::Receiver<BfdState>`; [`driver::session_config`] maps a
//!   BFDProfile.
//! * [`metrics`]: `ferrolb_bfd_session_up{peer}`, `ferrolb_bfd_state_transitions_total`.
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
