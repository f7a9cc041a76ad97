//! BGPPeers (timers, families, graceful restart, duplicate sessions) and BGPAdvertisements.

use std::collections::BTreeSet;
use std::net::IpAddr;

use kube::ResourceExt;

use super::check::Check;
use super::{Origin, ValidationError, kind};
use crate::crd::{BgpAdvertisement, BgpPeer};

/// Two BGPPeers for the same router and the same nodes would open two sessions from one
/// node to one router, which the router treats as a collision (RFC 4271 §6.8).
pub(super) fn check_duplicate_sessions(peers: &[BgpPeer], errors: &mut Vec<ValidationError>) {
    for (i, a) in peers.iter().enumerate() {
        for b in &peers[..i] {
            let addr = |p: &BgpPeer| match &p.spec.peer_address {
                Some(a) => {
                    let t = a.trim();
                    t.parse::<IpAddr>().map_or_else(|_| t.to_owned(), |ip| ip.to_string())
                }
                None => p.spec.peer_location(),
            };
            let same_router = addr(a) == addr(b) && a.spec.peer_port == b.spec.peer_port;
            if same_router && a.spec.node_selectors == b.spec.node_selectors {
                errors.push(ValidationError {
                    kind: kind::BGP_PEER,
                    name: a.name_any(),
                    field: "spec.peerAddress".into(),
                    problem: format!(
                        "BGPPeer {:?} already peers with {} port {} from the same nodes",
                        b.name_any(),
                        a.spec.peer_location(),
                        a.spec.peer_port
                    ),
                    fix: "merge the two BGPPeers, or give them disjoint nodeSelectors".into(),
                });
            }
        }
    }
}

pub(super) fn check_peer(c: &mut Check<'_>, peer: &BgpPeer, bfd_names: &BTreeSet<String>, origin: Origin) {
    let spec = &peer.spec;
    for (field, asn) in [("spec.myASN", Some(spec.my_asn)), ("spec.peerASN", spec.peer_asn)] {
        if asn == Some(0) {
            c.err(field, "AS number 0 is reserved (RFC 7607)", "use 1..4294967295");
        }
    }
    match (spec.peer_asn, spec.dynamic_asn) {
        (Some(_), Some(_)) => c.err(
            "spec.dynamicASN",
            "peerASN and dynamicASN are both set",
            "set one: peerASN for a router of a known AS, or dynamicASN to learn it from the router",
        ),
        (None, None) => c.err(
            "spec.peerASN",
            "neither peerASN nor dynamicASN is set",
            "set peerASN to the router's AS, or dynamicASN: internal or external",
        ),
        _ => {}
    }
    if spec.peer_port == 0 {
        c.err("spec.peerPort", "port 0 is not a port", "use 1..65535, usually 179");
    }
    let peer_ip = match (&spec.peer_address, &spec.interface) {
        (Some(a), None) => c.ip("spec.peerAddress", a),
        (None, Some(i)) => {
            super::l2::check_interface(c, "spec.interface", i);
            None
        }
        (Some(_), Some(_)) => {
            c.err(
                "spec.interface",
                "peerAddress and interface are both set",
                "set one: peerAddress for a router at a known address, or interface for unnumbered peering",
            );
            None
        }
        (None, None) => {
            c.err(
                "spec.peerAddress",
                "neither peerAddress nor interface is set",
                "set peerAddress to the router's address, or interface to peer unnumbered over that link",
            );
            None
        }
    };
    if let Some(src) = &spec.source_address
        && let Some(src_ip) = c.ip("spec.sourceAddress", src)
        && let Some(peer_ip) = peer_ip
        && src_ip.is_ipv4() != peer_ip.is_ipv4()
    {
        c.err(
            "spec.sourceAddress",
            format!("{src} and peerAddress {peer_ip} are of different families"),
            "use a source address of the peer's family",
        );
    }
    if let Some(id) = &spec.router_id
        && id.parse::<std::net::Ipv4Addr>().is_err()
    {
        c.err(
            "spec.routerID",
            format!("{id:?} is not an IPv4 address"),
            "write the BGP identifier as an IPv4 address, or omit it to use the node's",
        );
    }
    let hold = c.duration("spec.holdTime", &spec.hold_time);
    if let Some(hold) = hold {
        let secs = hold.std().as_secs_f64();
        if secs != 0.0 && secs < 3.0 {
            c.err(
                "spec.holdTime",
                format!("{:?} is not allowed: RFC 4271 hold time is 0 or at least 3s", spec.hold_time),
                "set holdTime to 3s..65535s, or 0s (no keepalives) together with bfdProfile",
            );
        } else if secs == 0.0 && spec.bfd_profile.is_none() {
            // RFC 4271 §6.2 allows 0, but then no keepalive and no hold timer notice a
            // dead router: only BFD would.
            c.err(
                "spec.holdTime",
                "0s turns off keepalives and the hold timer, so a dead router would never be noticed",
                "set holdTime to 3s..65535s (e.g. 90s), or set bfdProfile so BFD watches the session",
            );
        } else if secs > 65535.0 {
            c.err(
                "spec.holdTime",
                format!("{:?} exceeds the 65535s BGP allows", spec.hold_time),
                "set holdTime to 65535s or less",
            );
        } else if hold.std().subsec_nanos() != 0 {
            c.err(
                "spec.holdTime",
                format!("{:?} is not whole seconds, which BGP carries", spec.hold_time),
                "round holdTime to whole seconds",
            );
        }
    }
    if let Some(k) = &spec.keepalive_time
        && let Some(keep) = c.duration("spec.keepaliveTime", k)
        && let Some(hold) = hold
        && keep > hold
    {
        c.err(
            "spec.keepaliveTime",
            format!("{k:?} is longer than holdTime {:?}", spec.hold_time),
            "set keepaliveTime to at most holdTime (usually holdTime/3), or omit it",
        );
    }
    if spec.ttl_security && spec.ebgp_multi_hop {
        c.err(
            "spec.ttlSecurity",
            "ttlSecurity (RFC 5082) accepts only a directly connected router, which contradicts ebgpMultiHop",
            "set ebgpMultiHop: false for a directly connected router, or ttlSecurity: false for a multihop one",
        );
    }
    if let Some(d) = c.duration("spec.connectTime", &spec.connect_time)
        && d.std().is_zero()
    {
        c.err("spec.connectTime", "0 would retry in a busy loop", "use e.g. 5s");
    }
    if let Some(secret) = &spec.password_secret {
        if spec.password_file.is_some() {
            c.err(
                "spec.passwordSecret",
                "passwordSecret and passwordFile are both set",
                "keep one: passwordSecret in a cluster, passwordFile in static files and checkpoints",
            );
        }
        for (f, v) in [("name", &secret.name), ("namespace", &secret.namespace), ("key", &secret.key)] {
            if v.is_empty() {
                c.err(
                    format!("spec.passwordSecret.{f}"),
                    format!("passwordSecret.{f} is empty"),
                    format!("set the Secret's {f}"),
                );
            }
        }
    }
    match origin {
        Origin::Cluster if spec.password_file.is_some() && spec.password_secret.is_none() => c.err(
            "spec.passwordFile",
            "passwordFile is read only from static files and checkpoints",
            "in a cluster, put the password in a Secret and set passwordSecret",
        ),
        Origin::File if spec.password_secret.is_some() && spec.password_file.is_none() => c.err(
            "spec.passwordSecret",
            "a static file or checkpoint has no apiserver to read the Secret from",
            "write the password to a file readable only by ferrolb and set passwordFile",
        ),
        _ => {}
    }
    if let Some(file) = &spec.password_file
        && !file.starts_with('/')
    {
        c.err(
            "spec.passwordFile",
            format!("{file:?} is not an absolute path"),
            "write an absolute path, e.g. /etc/ferrolb/bgp-password",
        );
    }
    if let Some(bfd) = &spec.bfd_profile
        && !bfd_names.contains(bfd)
    {
        c.err(
            "spec.bfdProfile",
            format!("no BFDProfile is named {bfd:?}"),
            "create the BFDProfile or correct the name",
        );
    }
    if let Some(gr) = &spec.graceful_restart
        && let Some(t) = c.duration("spec.gracefulRestart.restartTime", &gr.restart_time)
        && t.std().as_secs() > 4095
    {
        c.err(
            "spec.gracefulRestart.restartTime",
            format!("{:?} exceeds the 4095s RFC 4724 allows", gr.restart_time),
            "use at most 4095s",
        );
    }
    if spec.address_families.is_empty() {
        c.err(
            "spec.addressFamilies",
            "no address family is enabled",
            "list ipv4-unicast and/or ipv6-unicast, or omit the field for both",
        );
    }
    let mut seen = BTreeSet::new();
    for (i, af) in spec.address_families.iter().enumerate() {
        if !seen.insert(*af) {
            c.err(
                format!("spec.addressFamilies[{i}]"),
                "address family listed twice",
                "list each family once",
            );
        }
    }
    c.selectors("spec.nodeSelectors", &spec.node_selectors);
}

pub(super) fn check_bgp_advertisement(
    c: &mut Check<'_>,
    adv: &BgpAdvertisement,
    pools: &BTreeSet<String>,
    peers: &BTreeSet<String>,
) {
    let spec = &adv.spec;
    c.references("spec.ipAddressPools", &spec.ip_address_pools, pools, "IPAddressPool");
    c.references("spec.peers", &spec.peers, peers, "BGPPeer");
    c.selectors("spec.ipAddressPoolSelectors", &spec.ip_address_pool_selectors);
    c.selectors("spec.serviceSelectors", &spec.service_selectors);
    c.selectors("spec.nodeSelectors", &spec.node_selectors);
    if let Err(problem) = spec.link_bandwidth() {
        c.err(
            "spec.linkBandwidth",
            problem,
            "write endpoints (weights follow each node's serving endpoints) or a rate in bits/s from 1M, such as 10G",
        );
    }
    if !(0..=32).contains(&spec.aggregation_length) {
        c.err(
            "spec.aggregationLength",
            format!("{} is not an IPv4 prefix length", spec.aggregation_length),
            "use 0..32 (32 announces each address alone)",
        );
    }
    if !(0..=128).contains(&spec.aggregation_length_v6) {
        c.err(
            "spec.aggregationLengthV6",
            format!("{} is not an IPv6 prefix length", spec.aggregation_length_v6),
            "use 0..128 (128 announces each address alone)",
        );
    }
    c.communities("spec.communities", &spec.communities);
}
