//! ControlPlaneVIPs: the address (unique, never in a pool), members, mode, health check.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use kube::ResourceExt;

use super::check::Check;
use super::l2::check_interface;
use super::pool::PoolRange;
use super::{ValidationError, kind};
use crate::crd::{ControlPlaneVip, VipMode};
use crate::selector::is_dns_subdomain;

/// The apiserver VIP must be unique and must never be handed to a Service.
pub(super) fn check_vip_addresses(
    vips: &[ControlPlaneVip],
    ranges: &[PoolRange],
    errors: &mut Vec<ValidationError>,
) {
    let mut seen: BTreeMap<IpAddr, String> = BTreeMap::new();
    for vip in vips {
        let Ok(ip) = vip.spec.address.trim().parse::<IpAddr>() else {
            continue; // reported by check_vip
        };
        let name = vip.name_any();
        let mut c = Check::new(kind::CONTROL_PLANE_VIP, vip, errors);
        if let Some(other) = seen.insert(ip, name.clone()) {
            c.err(
                "spec.address",
                format!("ControlPlaneVIP {other:?} has the same address {ip}"),
                "use one ControlPlaneVIP per address",
            );
        }
        for r in ranges.iter().filter(|r| r.range.contains(ip)) {
            c.err(
                "spec.address",
                format!(
                    "{ip} is in IPAddressPool {:?} (spec.addresses[{}]), so a Service could get it",
                    r.pool, r.index
                ),
                "remove the VIP from the pool, or pick a VIP outside every pool",
            );
        }
    }
}

pub(super) fn check_vip(c: &mut Check<'_>, vip: &ControlPlaneVip, peers: &BTreeSet<String>) {
    let spec = &vip.spec;
    let vip_ip = c.ip("spec.address", &spec.address);
    if spec.port == 0 {
        c.err("spec.port", "port 0 is not a port", "use the apiserver port, usually 6443");
    }
    if spec.membership_port == 0 {
        c.err("spec.membershipPort", "port 0 is not a port", "use 7947");
    }
    if spec.membership_port == crate::crd::SPEAKER_MEMBERSHIP_PORT {
        c.err(
            "spec.membershipPort",
            "7946 is the speakers' membership port, and both run on control-plane nodes",
            "use 7947",
        );
    }
    if !spec.membership_key_file.starts_with('/') {
        c.err(
            "spec.membershipKeyFile",
            format!("{:?} is not an absolute path", spec.membership_key_file),
            "write an absolute path",
        );
    }
    if let Some(ifname) = &spec.interface {
        check_interface(c, "spec.interface", ifname);
    }
    let mut member_names = BTreeMap::new();
    for (i, m) in spec.members.iter().enumerate() {
        if !is_dns_subdomain(&m.name) {
            c.err(
                format!("spec.members[{i}].name"),
                format!("{:?} is not a node name", m.name),
                "write the node's name",
            );
        }
        if let Some(first) = member_names.insert(m.name.clone(), i) {
            c.err(
                format!("spec.members[{i}].name"),
                format!("{:?} is already spec.members[{first}]", m.name),
                "list each node once",
            );
        }
        c.ip(&format!("spec.members[{i}].address"), &m.address);
    }
    match spec.mode {
        VipMode::L2 => {
            if spec.members.is_empty() {
                c.err(
                    "spec.members",
                    "L2 mode elects the VIP owner among members, and there are none",
                    "list the control-plane nodes with their addresses",
                );
            }
        }
        VipMode::Bgp => match &spec.bgp {
            Some(bgp) if !bgp.peers.is_empty() => {}
            _ => c.err(
                "spec.bgp.peers",
                "BGP mode needs at least one peer",
                "list BGPPeer names in spec.bgp.peers",
            ),
        },
    }
    if let Some(bgp) = &spec.bgp {
        c.references("spec.bgp.peers", &bgp.peers, peers, "BGPPeer");
        c.communities("spec.bgp.communities", &bgp.communities);
    }
    let hc = &spec.health_check;
    match url_host(&hc.url) {
        None => c.err(
            "spec.healthCheck.url",
            format!("{:?} is not an http(s) URL", hc.url),
            "write e.g. https://127.0.0.1:6443/readyz",
        ),
        Some(host) => {
            if hc.insecure_skip_verify && !is_loopback_host(host) {
                c.err(
                    "spec.healthCheck.insecureSkipVerify",
                    format!("certificate checks may be skipped only for loopback URLs, and {host:?} is not loopback"),
                    "probe https://127.0.0.1:6443/readyz, or keep verification with caFile",
                );
            }
        }
    }
    let interval = c.duration("spec.healthCheck.interval", &hc.interval);
    let timeout = c.duration("spec.healthCheck.timeout", &hc.timeout);
    for (field, d) in [("spec.healthCheck.interval", interval), ("spec.healthCheck.timeout", timeout)] {
        if d.is_some_and(|d| d.std().is_zero()) {
            c.err(field, "must be more than 0", "use e.g. 1s");
        }
    }
    if hc.failure_threshold < 1 {
        c.err(
            "spec.healthCheck.failureThreshold",
            format!("{} is less than 1", hc.failure_threshold),
            "use e.g. 3",
        );
    }
    if !hc.insecure_skip_verify && hc.url.starts_with("https://") && !hc.ca_file.starts_with('/') {
        c.err(
            "spec.healthCheck.caFile",
            format!("{:?} is not an absolute path", hc.ca_file),
            "write an absolute path, e.g. /etc/kubernetes/pki/ca.crt",
        );
    }
    if let Some(ip) = vip_ip
        && let Some(m) = spec.members.iter().position(|m| m.address.trim().parse() == Ok(ip))
    {
        c.err(
            "spec.address",
            format!("the VIP {ip} is also the address of spec.members[{m}]"),
            "use an unused address for the VIP",
        );
    }
}

/// Host part of an http(s) URL, without brackets or port.
pub(super) fn url_host(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.split(':').next()?,
    };
    (!host.is_empty()).then_some(host)
}

pub(super) fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}
