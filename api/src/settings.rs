//! The one translation of the CRDs into protocol settings (feature `settings`, which
//! pulls `ferrolb-proto`): BGPPeer → BGP session config and its router-id default,
//! BFDProfile → BFD session config. The speaker and ferrolb-bootstrap both use it, so a
//! field means the same in both.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::Duration;

use ferrolb_proto::bfd::{SessionConfig as BfdSessionConfig, Timers};
use ferrolb_proto::bgp::Family;
use ferrolb_proto::bgp::fsm::{GracefulRestartConfig, PeerAs, PeerConfig};
use ferrolb_proto::bgp::session::SessionConfig;
use ferrolb_proto::bgp::socket::Password;

use crate::crd::{AddressFamily, BfdProfile, BgpPeerSpec, DynamicAsn};

/// Why a BGPPeer cannot get a session on this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("BGPPeer/{peer}: {field}: {problem}; {fix}")]
pub struct PeerError {
    /// The BGPPeer.
    pub peer: String,
    /// The field at fault.
    pub field: &'static str,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub fix: &'static str,
}

/// The router id of BGPPeer `name`: `spec.routerID`, else the node's IPv4 address
/// (`node_v4`), else an IPv4 `spec.sourceAddress`. `node` names the node in errors
/// ("node worker-1", "this member").
pub fn router_id(
    name: &str,
    spec: &BgpPeerSpec,
    node_v4: Option<Ipv4Addr>,
    node: &str,
) -> Result<Ipv4Addr, PeerError> {
    let err =
        |problem: String, fix| PeerError { peer: name.to_owned(), field: "spec.routerID", problem, fix };
    match &spec.router_id {
        Some(r) => r.trim().parse().map_err(|_| {
            err(format!("{r:?} is not an IPv4 address"), "write an IPv4 address such as 192.0.2.11")
        }),
        None => {
            let src_v4 = spec.source_address.as_deref().and_then(|s| s.trim().parse::<Ipv4Addr>().ok());
            node_v4.or(src_v4).ok_or_else(|| {
                err(
                    format!("{node} has no IPv4 address to default to, and spec.sourceAddress is not IPv4"),
                    "set spec.routerID to an IPv4 address",
                )
            })
        }
    }
}

/// What the node running a session brings to it: its BGP identifier, its next hops
/// (IPv4, IPv6), and for an unnumbered peer the router found on the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSide {
    /// The BGP identifier.
    pub router_id: Ipv4Addr,
    /// Next hop of IPv4 routes on a session over IPv6.
    pub next_hop_v4: Option<Ipv4Addr>,
    /// Next hop of IPv6 routes on a session over IPv4.
    pub next_hop_v6: Option<Ipv6Addr>,
    /// `spec.interface`: the router's link-local address found there, the link's index
    /// as its scope.
    pub found: Option<SocketAddrV6>,
}

/// The session config of BGPPeer `name` on the node `node`. `restarting`: the first
/// OPEN of a new process (RFC 4724 §4.1). `bfd`: this process runs a BFD session for the
/// peer (only then may the hold time be 0).
pub fn peer_session_config(
    name: &str,
    spec: &BgpPeerSpec,
    password: Option<Password>,
    node: NodeSide,
    restarting: bool,
    bfd: bool,
) -> Result<SessionConfig, PeerError> {
    let NodeSide { router_id, next_hop_v4, next_hop_v6, found } = node;
    let err = |field, problem: String, fix| PeerError { peer: name.to_owned(), field, problem, fix };
    let peer_ip: IpAddr = match (&spec.peer_address, &spec.interface, found) {
        (Some(a), _, _) => a.parse().map_err(|_| {
            err("spec.peerAddress", format!("{a:?} is not an IP address"), "write an IPv4 or IPv6 address")
        })?,
        (None, Some(_), Some(at)) => IpAddr::V6(*at.ip()),
        (None, Some(i), None) => {
            return Err(err(
                "spec.interface",
                format!("no router found on {i} yet (no router advertisement heard)"),
                "check that the router runs BGP unnumbered on that link and sends router advertisements",
            ));
        }
        (None, None, _) => {
            return Err(err(
                "spec.peerAddress",
                "neither peerAddress nor interface is set".into(),
                "set peerAddress to the router's address, or interface for unnumbered peering",
            ));
        }
    };
    let secs = |d: Result<crate::duration::Duration, crate::duration::DurationError>, field| {
        d.map(|d| d.0).map_err(|e| err(field, e.to_string(), "write a duration such as 90s"))
    };
    let hold = secs(spec.hold_time(), "spec.holdTime")?;
    let keepalive = secs(spec.keepalive_time(), "spec.keepaliveTime")?;
    let connect = secs(spec.connect_time(), "spec.connectTime")?;
    let mut peer = PeerConfig::new(spec.my_asn, 0, router_id);
    peer.peer_as = match (spec.peer_asn, spec.dynamic_asn) {
        (Some(asn), _) => PeerAs::Fixed(asn),
        (None, Some(DynamicAsn::Internal)) => PeerAs::Internal,
        (None, Some(DynamicAsn::External)) => PeerAs::External,
        (None, None) => {
            return Err(err(
                "spec.peerASN",
                "neither peerASN nor dynamicASN is set".into(),
                "set peerASN to the router's AS, or dynamicASN: internal or external",
            ));
        }
    };
    peer.hold_time = u16::try_from(hold.as_secs()).unwrap_or(u16::MAX);
    // Hold time 0 leaves a dead peer to BFD: only where this process runs BFD for the
    // session (ferrolb-bootstrap runs none).
    peer.allow_zero_hold_time = bfd;
    if peer.hold_time == 0 && !peer.allow_zero_hold_time {
        return Err(err(
            "spec.holdTime",
            "0s turns off keepalives and the hold timer, and no BFD session watches this peer here".into(),
            "set holdTime to 3s..65535s, or 0s only with a bfdProfile on a speaker (ferrolb-bootstrap runs no BFD)",
        ));
    }
    peer.keepalive_time = Some(u16::try_from(keepalive.as_secs()).unwrap_or(u16::MAX));
    peer.connect_retry = connect.max(Duration::from_millis(100));
    peer.connect_retry_max = peer.connect_retry.max(Duration::from_secs(120));
    peer.passive = spec.passive;
    peer.families = spec
        .address_families
        .iter()
        .map(|f| match f {
            AddressFamily::Ipv4Unicast => Family::IPV4_UNICAST,
            AddressFamily::Ipv6Unicast => Family::IPV6_UNICAST,
        })
        .collect();
    if let Some(gr) = spec.graceful_restart.as_ref().filter(|g| g.enabled) {
        let t = secs(gr.restart_time(), "spec.gracefulRestart.restartTime")?;
        peer.graceful_restart = Some(GracefulRestartConfig {
            restart_time: u16::try_from(t.as_secs()).unwrap_or(4095).min(4095),
            // RFC 4724 §4.1: the first OPEN of a new process announces the restart;
            // the FSM clears the bit once the session is up. The node keeps forwarding
            // (the addresses live on the node, not in this process).
            restarting,
            forwarding_preserved: true,
        });
    }
    // Unnumbered: IPv4 routes go with the IPv6 next hop of the link (RFC 8950).
    peer.extended_next_hop = spec.interface.is_some();
    let peer_addr = match found.filter(|_| spec.peer_address.is_none()) {
        Some(at) => SocketAddr::V6(SocketAddrV6::new(*at.ip(), spec.peer_port, 0, at.scope_id())),
        None => SocketAddr::new(peer_ip, spec.peer_port),
    };
    let mut cfg = SessionConfig::new(peer, peer_addr);
    if let Some(src) = &spec.source_address {
        cfg.local_addr = Some(src.parse().map_err(|_| {
            err(
                "spec.sourceAddress",
                format!("{src:?} is not an IP address"),
                "write one of this node's addresses",
            )
        })?);
    }
    cfg.ebgp_multihop = spec.ebgp_multi_hop;
    cfg.ttl_security = spec.ttl_security;
    cfg.password = password;
    // The connection's local address is the next hop of its own family; the other
    // family's next hop comes from the node's addresses.
    // Unnumbered, the link holds no IPv4 address of this node: IPv4 routes take the
    // connection's IPv6 link-local one.
    if peer_ip.is_ipv4() {
        cfg.export.next_hop_v6 = next_hop_v6;
    } else if spec.interface.is_none() {
        cfg.export.next_hop_v4 = next_hop_v4;
    }
    Ok(cfg)
}

/// A BFDProfile that cannot be used; names the object, the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("BFDProfile/{profile}: {field}: {reason}")]
pub struct ProfileError {
    /// The profile's name.
    pub profile: String,
    /// Field path (`spec.transmitInterval`).
    pub field: &'static str,
    /// What is wrong and what to write instead.
    pub reason: String,
}

/// The session parameters of a BFDProfile: `transmitInterval` → DesiredMinTxInterval,
/// `receiveInterval` → RequiredMinRxInterval, `detectMultiplier` → DetectMult,
/// `passiveMode` → the Passive role. `minimumTtl` is for multi-hop sessions only:
/// single-hop sessions always require TTL 255 (RFC 5881 §5).
pub fn bfd_session_config(profile: &BfdProfile) -> Result<BfdSessionConfig, ProfileError> {
    let name = profile.metadata.name.clone().unwrap_or_default();
    let spec = &profile.spec;
    let err = |field, reason: String| ProfileError { profile: name.clone(), field, reason };
    let interval = |field: &'static str,
                    d: Result<crate::duration::Duration, crate::duration::DurationError>| {
        let d = d.map_err(|e| err(field, format!("{e}; write a duration such as 300ms")))?.std();
        if !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&d) {
            return Err(err(field, format!("{d:?} is outside 10ms..60s; pick a value in that range")));
        }
        Ok(d)
    };
    let desired_min_tx = interval("spec.transmitInterval", spec.transmit_interval())?;
    let required_min_rx = interval("spec.receiveInterval", spec.receive_interval())?;
    let detect_mult = u8::try_from(spec.detect_multiplier).ok().filter(|m| *m >= 2).ok_or_else(|| {
        err("spec.detectMultiplier", format!("{} is outside 2..=255", spec.detect_multiplier))
    })?;
    Ok(BfdSessionConfig {
        timers: Timers { desired_min_tx, required_min_rx, detect_mult },
        passive: spec.passive_mode,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crd::BfdProfileSpec;

    fn profile(f: impl FnOnce(&mut BfdProfileSpec)) -> BfdProfile {
        let mut spec = BfdProfileSpec::default();
        f(&mut spec);
        BfdProfile::new("fast", spec)
    }

    #[test]
    fn profile_defaults_map_to_300ms_times_3_active() {
        let c = bfd_session_config(&profile(|_| {})).unwrap();
        assert_eq!(c, BfdSessionConfig::default());
        assert_eq!(c.timers.desired_min_tx, Duration::from_millis(300));
        assert!(!c.passive);
    }

    #[test]
    fn profile_fields_map_to_rfc_variables() {
        let c = bfd_session_config(&profile(|s| {
            s.transmit_interval = "50ms".into();
            s.receive_interval = "1s".into();
            s.detect_multiplier = 5;
            s.passive_mode = true;
            s.minimum_ttl = 10; // multi-hop only: ignored
        }))
        .unwrap();
        let t = Timers {
            desired_min_tx: Duration::from_millis(50),
            required_min_rx: Duration::from_secs(1),
            detect_mult: 5,
        };
        assert_eq!(c, BfdSessionConfig { timers: t, passive: true });
    }

    #[test]
    fn bad_profiles_name_object_field_and_fix() {
        let e = bfd_session_config(&profile(|s| s.transmit_interval = "fast".into())).unwrap_err();
        assert_eq!((e.profile.as_str(), e.field), ("fast", "spec.transmitInterval"));
        assert!(e.to_string().starts_with("BFDProfile/fast: spec.transmitInterval:"), "{e}");
        let e = bfd_session_config(&profile(|s| s.receive_interval = "5ms".into())).unwrap_err();
        assert_eq!(e.field, "spec.receiveInterval");
        let e = bfd_session_config(&profile(|s| s.detect_multiplier = 256)).unwrap_err();
        assert_eq!(e.field, "spec.detectMultiplier");
        let e = bfd_session_config(&profile(|s| s.detect_multiplier = 1)).unwrap_err();
        assert_eq!(e.field, "spec.detectMultiplier");
    }
}
