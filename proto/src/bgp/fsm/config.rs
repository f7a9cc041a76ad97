//! What configures one peer's [`Fsm`](super::Fsm): ASes, identifier, timers, families,
//! graceful restart.
use crate::bgp::nlri::Family;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Graceful restart as the restarting speaker (RFC 4724).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GracefulRestartConfig {
    /// Seconds the peer should keep our routes after the session drops (at most 4095).
    pub restart_time: u16,
    /// Set the R-bit in the next OPEN: this process has just restarted.
    pub restarting: bool,
    /// Set the F-bit: forwarding state survived the restart.
    pub forwarding_preserved: bool,
}

/// Per-peer session parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// Our AS.
    pub local_as: u32,
    /// The AS the peer must announce in its OPEN.
    pub peer_as: PeerAs,
    /// Our BGP identifier.
    pub router_id: Ipv4Addr,
    /// Proposed hold time in seconds (0, or at least 3; 0 only with `allow_zero_hold_time`).
    pub hold_time: u16,
    /// Accept a negotiated hold time of 0 (no keepalives, no hold timer): only when
    /// something else, BFD, notices a dead peer. Otherwise an OPEN that would make it 0
    /// is refused with Unacceptable Hold Time.
    pub allow_zero_hold_time: bool,
    /// Keepalive interval in seconds; `None` means a third of the negotiated hold time.
    pub keepalive_time: Option<u16>,
    /// First reconnect delay (ConnectRetryTime); doubled after each failure.
    pub connect_retry: Duration,
    /// Upper bound of the reconnect delay.
    pub connect_retry_max: Duration,
    /// A session up this long resets the reconnect backoff.
    pub stable_time: Duration,
    /// Never connect; wait for the peer (RFC 4271 §8.1.1 PassiveTcpEstablishment).
    pub passive: bool,
    /// Families to offer with the multiprotocol capability.
    pub families: Vec<Family>,
    /// Offer IPv4 routes with an IPv6 next hop (RFC 8950's capability): a session over an
    /// IPv6 link-local address (unnumbered peering) has no IPv4 next hop to give.
    pub extended_next_hop: bool,
    /// Graceful restart capability to advertise, if any.
    pub graceful_restart: Option<GracefulRestartConfig>,
}

impl PeerConfig {
    /// Defaults from API.md: hold 90 s, keepalive hold/3, retry 5 s doubling to 120 s, both families.
    pub fn new(local_as: u32, peer_as: u32, router_id: Ipv4Addr) -> Self {
        Self {
            local_as,
            peer_as: PeerAs::Fixed(peer_as),
            router_id,
            hold_time: 90,
            allow_zero_hold_time: false,
            keepalive_time: None,
            connect_retry: Duration::from_secs(5),
            connect_retry_max: Duration::from_secs(120),
            stable_time: Duration::from_secs(60),
            passive: false,
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
            extended_next_hop: false,
            graceful_restart: None,
        }
    }

    /// True when the peer is in another AS.
    pub fn is_ebgp(&self) -> bool {
        match self.peer_as {
            PeerAs::Fixed(a) => a != self.local_as,
            PeerAs::Internal => false,
            PeerAs::External => true,
        }
    }

    /// Whether a peer announcing `asn` in its OPEN is the one configured.
    pub fn accepts(&self, asn: u32) -> bool {
        match self.peer_as {
            PeerAs::Fixed(a) => asn == a,
            PeerAs::Internal => asn == self.local_as,
            PeerAs::External => asn != self.local_as,
        }
    }
}

/// The AS a peer must be in: a given one, or (dynamic ASN) ours or any other, learned
/// from its OPEN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerAs {
    /// Exactly this AS.
    Fixed(u32),
    /// Our own AS: an iBGP session.
    Internal,
    /// Any AS but ours: an eBGP session.
    External,
}

impl std::fmt::Display for PeerAs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PeerAs::Fixed(a) => write!(f, "{a}"),
            PeerAs::Internal => f.write_str("internal"),
            PeerAs::External => f.write_str("external"),
        }
    }
}
