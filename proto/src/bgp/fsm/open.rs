//! The OPEN exchange as functions of the peer's configuration: checking the peer's
//! OPEN (RFC 4271 §6.2), negotiating the session's parameters, and building our OPEN.
use super::config::PeerConfig;
use super::events::{ConnId, Negotiated};
use crate::bgp::capability::{Capability, GrFamily, GracefulRestart, NextHopFamily};
use crate::bgp::error::{code, subcode};
use crate::bgp::message::{Notification, Open};
use crate::bgp::nlri::Family;
use bytes::Bytes;

/// Checks the peer's OPEN (RFC 4271 §6.2); returns the NOTIFICATION to send if it is bad.
pub(super) fn check_open(config: &PeerConfig, open: &Open) -> Result<(), (Notification, &'static str)> {
    let notif = |sub: u8, data: Bytes| Notification { code: code::OPEN_MESSAGE, subcode: sub, data };
    if !config.accepts(open.asn()) {
        return Err((
            notif(subcode::BAD_PEER_AS, Bytes::copy_from_slice(&open.my_as.to_be_bytes())),
            "bad peer AS",
        ));
    }
    let id = open.bgp_id;
    if id.is_unspecified() || (!config.is_ebgp() && id == config.router_id) {
        return Err((notif(subcode::BAD_BGP_IDENTIFIER, Bytes::new()), "bad BGP identifier"));
    }
    // RFC 4271 §6.2: hold time 1 or 2 seconds MUST be rejected.
    if open.hold_time == 1 || open.hold_time == 2 {
        return Err((notif(subcode::UNACCEPTABLE_HOLD_TIME, Bytes::new()), "unacceptable hold time"));
    }
    // RFC 4271 §6.2 lets us reject on the hold time: 0 would leave a dead peer
    // unnoticed unless BFD watches the session.
    if config.hold_time.min(open.hold_time) == 0 && !config.allow_zero_hold_time {
        return Err((
            notif(subcode::UNACCEPTABLE_HOLD_TIME, Bytes::new()),
            "unacceptable hold time 0 (no keepalives) without BFD",
        ));
    }
    Ok(())
}

/// What our configuration and the peer's (checked) OPEN agree on, for a session on `conn`.
pub(super) fn negotiate(config: &PeerConfig, open: &Open, conn: ConnId) -> Negotiated {
    let hold_time = config.hold_time.min(open.hold_time);
    let keepalive_time = if hold_time == 0 {
        0
    } else {
        // Never above a third of the hold time (RFC 4271 §10), never 0, whatever the config says.
        let cap = (hold_time / 3).max(1);
        config.keepalive_time.unwrap_or(cap).clamp(1, cap)
    };
    let theirs = open.families();
    let families = config.families.iter().filter(|f| theirs.contains(f)).copied().collect();
    Negotiated {
        peer_as: open.asn(),
        peer_id: open.bgp_id,
        hold_time,
        keepalive_time,
        four_octet_as: open.four_octet_as().is_some(),
        families,
        route_refresh: open.capabilities.contains(&Capability::RouteRefresh),
        ipv4_over_ipv6: config.extended_next_hop
            && open.capabilities.iter().any(
                |c| matches!(c, Capability::ExtendedNextHop(t) if t.contains(&NextHopFamily::IPV4_OVER_IPV6)),
            ),
        peer_graceful_restart: open.capabilities.iter().find_map(|c| match c {
            Capability::GracefulRestart(g) => Some(g.clone()),
            _ => None,
        }),
        conn,
    }
}

/// The OPEN we send: multiprotocol per family, route refresh, extended next hop when
/// configured, 4-octet AS, and GR.
pub(super) fn our_open(config: &PeerConfig) -> Open {
    let mut caps: Vec<Capability> = config.families.iter().map(|f| Capability::Multiprotocol(*f)).collect();
    caps.push(Capability::RouteRefresh);
    if config.extended_next_hop && config.families.contains(&Family::IPV4_UNICAST) {
        caps.push(Capability::ExtendedNextHop(vec![NextHopFamily::IPV4_OVER_IPV6]));
    }
    if let Some(gr) = &config.graceful_restart {
        caps.push(Capability::GracefulRestart(GracefulRestart {
            restarting: gr.restarting,
            restart_time: gr.restart_time.min(4095),
            families: config
                .families
                .iter()
                .map(|f| GrFamily { family: *f, forwarding_preserved: gr.forwarding_preserved })
                .collect(),
        }));
    }
    Open::new(config.local_as, config.hold_time, config.router_id, caps)
}
