//! What goes into and comes out of the [`Fsm`](super::Fsm): its [`Input`]s, the
//! [`Transmit`]s and [`Event`]s it hands back, and the states and parameters they carry.
use crate::bgp::capability::GracefulRestart;
use crate::bgp::error::DecodeError;
use crate::bgp::message::{Message, Notification};
use crate::bgp::nlri::Family;
use std::net::Ipv4Addr;

/// Identifies one TCP connection; chosen by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// FSM states (RFC 4271 §8.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Refusing connections; waiting for a start (or the reconnect delay).
    Idle,
    /// Waiting for our outgoing TCP connection.
    Connect,
    /// Waiting for the peer to connect to us.
    Active,
    /// OPEN sent, waiting for the peer's.
    OpenSent,
    /// OPENs exchanged, waiting for KEEPALIVE.
    OpenConfirm,
    /// Session up.
    Established,
}

/// Inputs to [`Fsm::handle`](super::Fsm::handle), after the RFC 4271 §8.1 events.
// Messages dominate; boxing them would allocate per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Event 1: start the session.
    ManualStart,
    /// Event 2: stop the session, sending Cease with this subcode (RFC 4486).
    ManualStop {
        /// Cease subcode, e.g. 2 (administrative shutdown).
        subcode: u8,
    },
    /// The instant of [`Fsm::poll_timeout`](super::Fsm::poll_timeout) has come: every
    /// timer due fires (events 9, 10, 11: ConnectRetryTimer, HoldTimer, KeepaliveTimer).
    Timeout,
    /// Event 16: our outgoing connection is up.
    TcpCrAcked(ConnId),
    /// Event 17: the peer connected to us.
    TcpConnectionConfirmed(ConnId),
    /// Event 18: a connection failed or closed.
    TcpConnectionFails(ConnId),
    /// Events 19, 25, 26, 27: a message arrived.
    Message(ConnId, Message),
    /// Events 21, 22, 28: a message could not be decoded.
    MessageError(ConnId, DecodeError),
}

/// What the peer and we agreed on when the session came up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The peer's AS.
    pub peer_as: u32,
    /// The peer's BGP identifier.
    pub peer_id: Ipv4Addr,
    /// Negotiated hold time in seconds (0: no keepalives, no hold timer).
    pub hold_time: u16,
    /// Keepalive interval in seconds (0 when hold time is 0).
    pub keepalive_time: u16,
    /// Both sides support 4-octet AS numbers.
    pub four_octet_as: bool,
    /// Families both sides support.
    pub families: Vec<Family>,
    /// The peer supports ROUTE-REFRESH.
    pub route_refresh: bool,
    /// Both sides offered IPv4 unicast routes with an IPv6 next hop (RFC 8950).
    pub ipv4_over_ipv6: bool,
    /// The peer's graceful restart capability.
    pub peer_graceful_restart: Option<GracefulRestart>,
    /// The connection the session runs on.
    pub conn: ConnId,
}

/// Why a session went down or a connection attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DownReason {
    /// Stopped on request.
    #[error("stopped locally ({0})")]
    ManualStop(Notification),
    /// No message from the peer within the hold time.
    #[error("hold timer expired")]
    HoldTimerExpired,
    /// The peer sent a NOTIFICATION.
    #[error("peer sent NOTIFICATION {0}")]
    NotificationReceived(Notification),
    /// We sent a NOTIFICATION because of the peer's message.
    #[error("sent NOTIFICATION {0}: {1}")]
    NotificationSent(Notification, &'static str),
    /// The TCP connection failed or closed.
    #[error("TCP connection failed or closed")]
    ConnectionFailed,
}

/// A message to send, from [`Fsm::poll_transmit`](super::Fsm::poll_transmit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The connection to write it on.
    pub conn: ConnId,
    /// The message.
    pub message: Message,
}

/// What the driver must do or know, from [`Fsm::poll_event`](super::Fsm::poll_event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Open an outgoing TCP connection (dropping any attempt in progress).
    Connect,
    /// Close a connection, after writing what [`Fsm::poll_transmit`](super::Fsm::poll_transmit)
    /// gave for it.
    Close(ConnId),
    /// The state changed; `reason` says why, for the one log line per change.
    StateChanged {
        /// Previous state.
        from: State,
        /// New state.
        to: State,
        /// Why.
        reason: String,
    },
    /// The session reached Established.
    SessionUp(Negotiated),
    /// The session left Established.
    SessionDown(DownReason),
}
