//! The one validator: every component runs user configuration through [`validate`].
//!
//! Errors name the object (kind/name), the field path and the fix. They quote the
//! offending value except where it could be secret; no field of these kinds holds a
//! secret value (passwords live in Secrets or files, referenced by name or path).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::ops::Deref;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::ResourceExt;

use crate::address::AddressRange;
use crate::community::Community;
use crate::crd::{
    BfdProfile, BgpAdvertisement, BgpPeer, CONDITION_VALID, ControlPlaneVip, IpAddressPool, L2Advertisement,
    VipMode,
};
use crate::duration::Duration;
use crate::selector::{check_selector, is_dns_subdomain};

/// Kind names as users see them, used in errors.
pub mod kind {
    /// IPAddressPool.
    pub const IP_ADDRESS_POOL: &str = "IPAddressPool";
    /// BGPPeer.
    pub const BGP_PEER: &str = "BGPPeer";
    /// BGPAdvertisement.
    pub const BGP_ADVERTISEMENT: &str = "BGPAdvertisement";
    /// L2Advertisement.
    pub const L2_ADVERTISEMENT: &str = "L2Advertisement";
    /// BFDProfile.
    pub const BFD_PROFILE: &str = "BFDProfile";
    /// ControlPlaneVIP.
    pub const CONTROL_PLANE_VIP: &str = "ControlPlaneVIP";
}

/// Every ferrolb object that configures announcements, validated together.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// IPAddressPools.
    pub pools: Vec<IpAddressPool>,
    /// BGPPeers.
    pub peers: Vec<BgpPeer>,
    /// BGPAdvertisements.
    pub bgp_advertisements: Vec<BgpAdvertisement>,
    /// L2Advertisements.
    pub l2_advertisements: Vec<L2Advertisement>,
    /// BFDProfiles.
    pub bfd_profiles: Vec<BfdProfile>,
    /// ControlPlaneVIPs.
    pub control_plane_vips: Vec<ControlPlaneVip>,
}

/// Where a configuration comes from; a few rules differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Objects read from the Kubernetes API.
    Cluster,
    /// A static file or a bootstrap checkpoint: no apiserver to read Secrets from.
    File,
}

/// A [`Config`] that passed [`validate`]; only this type should drive announcements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ValidConfig(Config);

impl ValidConfig {
    /// The validated objects.
    pub fn into_inner(self) -> Config {
        self.0
    }
}

impl Deref for ValidConfig {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl Config {
    /// What a bootstrap checkpoint holds: the named ControlPlaneVIP and the BGPPeers and
    /// BFDProfiles it refers to (unknown references are left for [`validate`] to report).
    pub fn for_control_plane_vip(&self, name: &str) -> Option<Config> {
        let vip = self.control_plane_vips.iter().find(|v| v.name_any() == name)?;
        let peer_names: BTreeSet<&str> =
            vip.spec.bgp.iter().flat_map(|b| b.peers.iter().map(String::as_str)).collect();
        let peers: Vec<BgpPeer> =
            self.peers.iter().filter(|p| peer_names.contains(p.name_any().as_str())).cloned().collect();
        let bfd_names: BTreeSet<&str> = peers.iter().filter_map(|p| p.spec.bfd_profile.as_deref()).collect();
        let bfd_profiles =
            self.bfd_profiles.iter().filter(|b| bfd_names.contains(b.name_any().as_str())).cloned().collect();
        Some(Config { control_plane_vips: vec![vip.clone()], peers, bfd_profiles, ..Config::default() })
    }

    /// Validates the whole set; all errors at once, so users fix them in one go.
    pub fn validate(self, origin: Origin) -> Result<ValidConfig, Vec<ValidationError>> {
        let errors = validate(&self, origin);
        if errors.is_empty() { Ok(ValidConfig(self)) } else { Err(errors) }
    }
}

/// One problem in one field of one object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// Kind, e.g. `BGPPeer`.
    pub kind: &'static str,
    /// Object name.
    pub name: String,
    /// Field path, e.g. `spec.addresses[2]`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}: {}: {}; fix: {}", self.kind, self.name, self.field, self.problem, self.fix)
    }
}

/// Errors about one object.
pub fn errors_for<'a>(
    errors: &'a [ValidationError],
    kind: &'a str,
    name: &'a str,
) -> impl Iterator<Item = &'a ValidationError> + 'a {
    errors.iter().filter(move |e| e.kind == kind && e.name == name)
}

/// The `Valid` condition for one object, from its errors (see [`errors_for`]).
pub fn valid_condition<'a>(
    errors: impl IntoIterator<Item = &'a ValidationError>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    let messages: Vec<String> =
        errors.into_iter().map(|e| format!("{}: {}; fix: {}", e.field, e.problem, e.fix)).collect();
    let (status, reason, message) = if messages.is_empty() {
        ("True", "Valid", "configuration is valid".to_owned())
    } else {
        ("False", "Invalid", messages.join("\n"))
    };
    Condition {
        type_: CONDITION_VALID.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation,
        last_transition_time: now,
    }
}

/// Sets `new` in `conditions`, keeping the old transition time when the status did not change.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            if old.status == new.status {
                new.last_transition_time = old.last_transition_time.clone();
            }
            *old = new;
        }
        None => conditions.push(new),
    }
}

/// Validates every object and every reference between them.
pub fn validate(config: &Config, origin: Origin) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    let pool_names = names(&config.pools, kind::IP_ADDRESS_POOL, &mut errors);
    let peer_names = names(&config.peers, kind::BGP_PEER, &mut errors);
    let bfd_names = names(&config.bfd_profiles, kind::BFD_PROFILE, &mut errors);
    names(&config.bgp_advertisements, kind::BGP_ADVERTISEMENT, &mut errors);
    names(&config.l2_advertisements, kind::L2_ADVERTISEMENT, &mut errors);
    names(&config.control_plane_vips, kind::CONTROL_PLANE_VIP, &mut errors);

    let mut ranges = Vec::new();
    for pool in &config.pools {
        let mut c = Check::new(kind::IP_ADDRESS_POOL, pool, &mut errors);
        check_pool(&mut c, pool, &mut ranges);
    }
    check_overlaps(&ranges, &mut errors);
    check_duplicate_sessions(&config.peers, &mut errors);
    check_vip_addresses(&config.control_plane_vips, &ranges, &mut errors);
    for peer in &config.peers {
        let mut c = Check::new(kind::BGP_PEER, peer, &mut errors);
        check_peer(&mut c, peer, &bfd_names, origin);
    }
    for adv in &config.bgp_advertisements {
        let mut c = Check::new(kind::BGP_ADVERTISEMENT, adv, &mut errors);
        check_bgp_advertisement(&mut c, adv, &pool_names, &peer_names);
    }
    for adv in &config.l2_advertisements {
        let mut c = Check::new(kind::L2_ADVERTISEMENT, adv, &mut errors);
        check_l2_advertisement(&mut c, adv, &pool_names);
    }
    for bfd in &config.bfd_profiles {
        let mut c = Check::new(kind::BFD_PROFILE, bfd, &mut errors);
        check_bfd(&mut c, bfd);
    }
    for vip in &config.control_plane_vips {
        let mut c = Check::new(kind::CONTROL_PLANE_VIP, vip, &mut errors);
        check_vip(&mut c, vip, &peer_names);
    }
    errors
}

/// Collects names, reporting missing, malformed and duplicate ones.
fn names<K: ResourceExt>(
    objects: &[K],
    kind: &'static str,
    errors: &mut Vec<ValidationError>,
) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for o in objects {
        let name = o.name_any();
        let mut c = Check::new(kind, o, errors);
        if name.is_empty() {
            c.err("metadata.name", "the object has no name", "set metadata.name");
        } else if !is_dns_subdomain(&name) {
            c.err(
                "metadata.name",
                format!("{name:?} is not a valid name"),
                "use lowercase letters, digits, '-' and '.', at most 253 characters",
            );
        }
        if !seen.insert(name.clone()) {
            c.err(
                "metadata.name",
                format!("another {kind} is also named {name:?}"),
                "give every object of a kind its own name",
            );
        }
    }
    seen
}

/// Error sink for one object.
struct Check<'a> {
    kind: &'static str,
    name: String,
    errors: &'a mut Vec<ValidationError>,
}

impl<'a> Check<'a> {
    fn new<K: ResourceExt>(kind: &'static str, obj: &K, errors: &'a mut Vec<ValidationError>) -> Self {
        Self { kind, name: obj.name_any(), errors }
    }

    fn err(&mut self, field: impl Into<String>, problem: impl Into<String>, fix: impl Into<String>) {
        self.errors.push(ValidationError {
            kind: self.kind,
            name: self.name.clone(),
            field: field.into(),
            problem: problem.into(),
            fix: fix.into(),
        });
    }

    fn duration(&mut self, field: &str, value: &str) -> Option<Duration> {
        match value.parse::<Duration>() {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(field, e.to_string(), "write a duration such as \"90s\", \"1m\" or \"300ms\"");
                None
            }
        }
    }

    fn selectors(&mut self, field: &str, selectors: &[LabelSelector]) {
        for (i, sel) in selectors.iter().enumerate() {
            for (sub, problem, fix) in check_selector(sel) {
                self.err(format!("{field}[{i}]{sub}"), problem, fix);
            }
        }
    }

    fn communities(&mut self, field: &str, communities: &[String]) {
        for (i, s) in communities.iter().enumerate() {
            if let Err(e) = s.parse::<Community>() {
                self.err(
                    format!("{field}[{i}]"),
                    e.to_string(),
                    "write e.g. \"64512:100\", \"large:64512:1:2\" or \"no-export\"",
                );
            }
        }
    }

    fn references(&mut self, field: &str, refs: &[String], known: &BTreeSet<String>, target: &str) {
        for (i, r) in refs.iter().enumerate() {
            if !known.contains(r) {
                self.err(
                    format!("{field}[{i}]"),
                    format!("no {target} is named {r:?}"),
                    format!("create the {target} or correct the name"),
                );
            }
        }
    }

    fn ip(&mut self, field: &str, value: &str) -> Option<IpAddr> {
        match value.trim().parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.err(
                    field,
                    format!("{value:?} is not an IP address"),
                    "write an IPv4 (192.0.2.1) or IPv6 (2001:db8::1) address",
                );
                None
            }
        }
    }
}

/// A parsed pool range with where it came from, for the overlap check.
struct PoolRange {
    pool: String,
    index: usize,
    range: AddressRange,
}

fn check_pool(c: &mut Check<'_>, pool: &IpAddressPool, ranges: &mut Vec<PoolRange>) {
    let spec = &pool.spec;
    if spec.addresses.is_empty() {
        c.err("spec.addresses", "the pool has no addresses", "list at least one CIDR or range");
    }
    for (i, entry) in spec.addresses.iter().enumerate() {
        match AddressRange::parse(entry) {
            Ok(range) => ranges.push(PoolRange { pool: c.name.clone(), index: i, range }),
            Err(e) => c.err(
                format!("spec.addresses[{i}]"),
                e.to_string(),
                "write a CIDR (203.0.113.0/24) or a range (198.51.100.10-198.51.100.20)",
            ),
        }
    }
    if let Some(alloc) = &spec.service_allocation {
        for (i, ns) in alloc.namespaces.iter().enumerate() {
            if !is_dns_subdomain(ns) || ns.len() > 63 || ns.contains('.') {
                c.err(
                    format!("spec.serviceAllocation.namespaces[{i}]"),
                    format!("{ns:?} is not a namespace name"),
                    "use lowercase letters, digits and '-', at most 63 characters",
                );
            }
        }
        c.selectors("spec.serviceAllocation.namespaceSelectors", &alloc.namespace_selectors);
        c.selectors("spec.serviceAllocation.serviceSelectors", &alloc.service_selectors);
    }
}

/// Reports every pair of overlapping entries, within a pool or across pools, on both sides.
fn check_overlaps(ranges: &[PoolRange], errors: &mut Vec<ValidationError>) {
    let mut sorted: Vec<&PoolRange> = ranges.iter().collect();
    sorted.sort_by_key(|r| (r.range.is_ipv4(), r.range.first, r.range.last));
    for (i, a) in sorted.iter().enumerate() {
        for b in sorted.iter().skip(i + 1) {
            if b.range.is_ipv4() != a.range.is_ipv4() || b.range.first > a.range.last {
                break;
            }
            for (me, other) in [(a, b), (b, a)] {
                let where_other = if me.pool == other.pool {
                    format!("spec.addresses[{}] of the same pool", other.index)
                } else {
                    format!("IPAddressPool {:?} (spec.addresses[{}])", other.pool, other.index)
                };
                errors.push(ValidationError {
                    kind: kind::IP_ADDRESS_POOL,
                    name: me.pool.clone(),
                    field: format!("spec.addresses[{}]", me.index),
                    problem: format!("{} overlaps {} in {}", me.range, other.range, where_other),
                    fix: "make pools and their entries disjoint".into(),
                });
            }
        }
    }
}

/// Two BGPPeers for the same router and the same nodes would open two sessions from one
/// node to one router, which the router treats as a collision (RFC 4271 §6.8).
fn check_duplicate_sessions(peers: &[BgpPeer], errors: &mut Vec<ValidationError>) {
    for (i, a) in peers.iter().enumerate() {
        for b in &peers[..i] {
            let addr = |p: &BgpPeer| {
                let t = p.spec.peer_address.trim();
                t.parse::<IpAddr>().map_or_else(|_| t.to_owned(), |ip| ip.to_string())
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
                        a.spec.peer_address,
                        a.spec.peer_port
                    ),
                    fix: "merge the two BGPPeers, or give them disjoint nodeSelectors".into(),
                });
            }
        }
    }
}

/// The apiserver VIP must be unique and must never be handed to a Service.
fn check_vip_addresses(vips: &[ControlPlaneVip], ranges: &[PoolRange], errors: &mut Vec<ValidationError>) {
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

fn check_peer(c: &mut Check<'_>, peer: &BgpPeer, bfd_names: &BTreeSet<String>, origin: Origin) {
    let spec = &peer.spec;
    for (field, asn) in [("spec.myASN", spec.my_asn), ("spec.peerASN", spec.peer_asn)] {
        if asn == 0 {
            c.err(field, "AS number 0 is reserved (RFC 7607)", "use 1..4294967295");
        }
    }
    if spec.peer_port == 0 {
        c.err("spec.peerPort", "port 0 is not a port", "use 1..65535, usually 179");
    }
    let peer_ip = c.ip("spec.peerAddress", &spec.peer_address);
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
        && id.trim().parse::<std::net::Ipv4Addr>().is_err()
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

fn check_bgp_advertisement(
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

fn check_l2_advertisement(c: &mut Check<'_>, adv: &L2Advertisement, pools: &BTreeSet<String>) {
    let spec = &adv.spec;
    c.references("spec.ipAddressPools", &spec.ip_address_pools, pools, "IPAddressPool");
    c.selectors("spec.ipAddressPoolSelectors", &spec.ip_address_pool_selectors);
    c.selectors("spec.serviceSelectors", &spec.service_selectors);
    c.selectors("spec.nodeSelectors", &spec.node_selectors);
    for (i, ifname) in spec.interfaces.iter().enumerate() {
        check_interface(c, &format!("spec.interfaces[{i}]"), ifname);
    }
}

/// Linux interface names: 1..=15 bytes, no '/', no whitespace, not "." or "..".
fn check_interface(c: &mut Check<'_>, field: &str, name: &str) {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name != "."
        && name != ".."
        && !name.chars().any(|ch| ch == '/' || ch == ':' || ch.is_whitespace());
    if !ok {
        c.err(
            field,
            format!("{name:?} is not an interface name"),
            "write a Linux interface name such as eth0 (1 to 15 characters, no '/', ':' or spaces)",
        );
    }
}

fn check_bfd(c: &mut Check<'_>, bfd: &BfdProfile) {
    let spec = &bfd.spec;
    for (field, value) in
        [("spec.receiveInterval", &spec.receive_interval), ("spec.transmitInterval", &spec.transmit_interval)]
    {
        if let Some(d) = c.duration(field, value)
            && !(Duration::from_millis(10)..=Duration::from_secs(60)).contains(&d)
        {
            c.err(field, format!("{value:?} is outside 10ms..60s"), "use e.g. 300ms");
        }
    }
    if !(2..=255).contains(&spec.detect_multiplier) {
        c.err("spec.detectMultiplier", format!("{} is outside 2..255", spec.detect_multiplier), "use e.g. 3");
    }
    if !(1..=254).contains(&spec.minimum_ttl) {
        c.err(
            "spec.minimumTtl",
            format!("{} is outside 1..254", spec.minimum_ttl),
            "use 254 for single-hop sessions",
        );
    }
}

fn check_vip(c: &mut Check<'_>, vip: &ControlPlaneVip, peers: &BTreeSet<String>) {
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
fn url_host(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.split(':').next()?,
    };
    (!host.is_empty()).then_some(host)
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests;
