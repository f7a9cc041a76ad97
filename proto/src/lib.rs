//! ferrolb's protocols, without Kubernetes: BGP-4 ([`bgp`]), BFD ([`bfd`]), ARP/NDP
//! announcements ([`l2`]), SWIM membership ([`membership`]) and the L2 owner election
//! ([`election`]). The speaker and ferrolb-bootstrap drive them; the fuzz targets
//! (`proto/fuzz`) feed their decoders. Nothing here knows Kubernetes: the BGPPeer and
//! BFDProfile resources become these protocols' settings in `ferrolb_api::settings`,
//! and what every binary runs besides (the metrics endpoint, build info, accept
//! back-off) is `ferrolb-runtime`'s.
//!
//! # One sans-IO shape
//!
//! The protocol state machines own no socket, task or clock and are driven the way quinn
//! drives QUIC: the caller passes time in and polls work out. `handle(now, input)` feeds
//! one input (a received packet or message, a timer firing, a command) at instant `now`;
//! `poll_transmit()` returns the next packet or message to send until `None`;
//! `poll_timeout()` says when the machine next wants `handle(now, Input::Timeout)`,
//! `None` if it waits for nothing; `poll_event()` returns what happened for the driver
//! (a state change, a connection to open or close, a session up or down) until `None`.
//! A driver loops: wait for a packet or the earliest `poll_timeout`, call `handle`, then
//! drain `poll_transmit` and `poll_event`. [`bfd::Session`], [`bgp::fsm::Fsm`] and
//! [`bgp::session::machine::Machine`] (the FSM with the RIB-Out: UPDATEs and
//! ROUTE-REFRESH answers leave through its `poll_transmit` like every other message)
//! speak all four, and their tokio drivers, [`bfd::driver`] and [`bgp::session`], are
//! thin loops of that kind; tests drive the same machines with a fake clock and no
//! sockets. Every machine takes `std::time::Instant`; drivers wait for `poll_timeout`
//! with the one helper [`time::sleep_until`]. Smaller pieces use the part they need, in
//! the same words: the membership [`membership::auth::Keyring`] (`handle_timeout(now)`
//! for its only input, the clock; `poll_timeout`, `poll_event`),
//! [`membership::join_grace::JoinGrace`] (`poll_timeout`) and
//! [`membership::claim::Rule`] (`handle` returns its verdict, which its caller
//! needs at once; `poll_event`).
//! SWIM itself is foca's sans-IO core, run by [`membership::Membership`]; the ARP/NDP
//! codecs are sans-IO and the [`l2::L2Announcer`] responder tasks answer with them.
//! The binaries' own timers are spelled the same way: ferrolb-bootstrap's health gate
//! (`handle`, `poll_transmit` for the next probe, `poll_timeout`, `poll_event`), its
//! BGP drain and L2 holder, and the speaker's drain timers (`handle`, `poll_timeout`).
pub mod bfd;
pub mod bgp;
pub mod diff;
pub mod election;
pub mod l2;
pub mod membership;
pub mod nftables;
pub mod time;
