//! ferrolb's protocols, without Kubernetes: BGP-4 ([`bgp`]), BFD ([`bfd`]), ARP/NDP
//! announcements ([`l2`]), SWIM membership ([`membership`]) and the L2 owner election
//! ([`election`]). The speaker and ferrolb-bootstrap drive them; the fuzz targets
//! (`proto/fuzz`) feed their decoders. With feature `crd`, [`crd`] translates the
//! BGPPeer and BFDProfile resources into their settings.
//!
//! # One sans-IO shape
//!
//! Every state machine here owns no socket, task or clock and is driven the way quinn
//! drives QUIC: the caller passes time in and polls work out. `handle(now, input)` feeds
//! one input (a received packet, a timer firing, a command) at instant `now`;
//! `poll_transmit()` returns the next bytes or message to send until `None`;
//! `poll_timeout()` says when the machine next wants `handle` called with a timer
//! input, `None` if it waits for nothing; `poll_event()` returns what happened for the
//! application (a state change, a route to withdraw) until `None`. A driver loops:
//! wait for a packet or the earliest `poll_timeout`, call `handle`, then drain
//! `poll_transmit` and `poll_event`. Tests drive the same machines with a fake clock
//! and no sockets. The tokio drivers ([`bgp::session`], [`bfd::driver`],
//! [`membership::Membership`], [`l2::L2Announcer`]) are thin loops of that kind.
pub mod accept;
pub mod bfd;
pub mod bgp;
#[cfg(feature = "crd")]
pub mod crd;
pub mod election;
pub mod http;
pub mod l2;
pub mod membership;
