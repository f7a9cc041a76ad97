//! One conversion per MetalLB kind. Field semantics follow MetalLB's metallb.io API
//! (v1beta1, and v1beta2 for BGPPeer).

use std::collections::BTreeMap;
use std::net::IpAddr;

use ferrolb_api::{
    AddressError, AddressFamily, AddressRange, BfdProfile, BfdProfileSpec, BgpAdvertisement,
    BgpAdvertisementSpec, BgpPeer, BgpPeerSpec, Community, Duration, DynamicAsn, GracefulRestart,
    IpAddressPool, IpAddressPoolSpec, L2Advertisement, L2AdvertisementSpec, ServiceAllocation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;
use serde_json::Value;

use super::fields::{Report, Spec, metadata};
use super::secrets::Passwords;

/// Namespace MetalLB runs in unless told otherwise.
pub(super) const METALLB_NAMESPACE: &str = "metallb-system";

fn name(doc: &Value) -> String {
    doc["metadata"]["name"].as_str().unwrap_or_default().to_owned()
}

/// Adds a Community object's `spec.communities` entries to `aliases`.
pub(super) fn community_aliases(doc: &Value, aliases: &mut BTreeMap<String, String>, report: &mut Report) {
    #[derive(Deserialize)]
    struct Alias {
        name: String,
        value: String,
    }
    let mut spec = Spec::new(doc, report);
    let entries: Vec<Value> = spec.take("communities").unwrap_or_default();
    for (i, entry) in entries.into_iter().enumerate() {
        match serde_json::from_value::<Alias>(entry) {
            Ok(a) => {
                aliases.insert(a.name, a.value);
            }
            Err(e) => spec.unconverted(
                format!("spec.communities[{i}]"),
                format!("not a {{name, value}} alias ({e}); advertisements using it are reported too"),
            ),
        }
    }
    spec.finish();
}

pub(super) fn pool(doc: &Value, report: &mut Report) -> Option<IpAddressPool> {
    let mut s = Spec::new(doc, report);
    let entries: Vec<String> = s.take("addresses").unwrap_or_default();
    let mut addresses = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        // MetalLB allows blanks around the dash of a range.
        let entry: String = entry.split_whitespace().collect();
        match AddressRange::parse(&entry) {
            Ok(_) => addresses.push(entry),
            // MetalLB reads 192.0.2.7/24 as the whole /24, as Go's net.ParseCIDR does.
            Err(AddressError::HostBits { network, .. }) => addresses.push(network.to_string()),
            Err(e) => s.unconverted(format!("spec.addresses[{i}]"), e.to_string()),
        }
    }
    let auto_assign = s.take::<bool>("autoAssign");
    let avoid_buggy_ips = s.take::<bool>("avoidBuggyIPs").unwrap_or(false);
    let service_allocation = s.take_raw("serviceAllocation").and_then(|raw| {
        for key in raw.as_object().into_iter().flat_map(|m| m.keys()) {
            if !["priority", "namespaces", "namespaceSelectors", "serviceSelectors"].contains(&key.as_str()) {
                s.unconverted(format!("spec.serviceAllocation.{key}"), "not a field this converter knows");
            }
        }
        match serde_json::from_value::<ServiceAllocation>(raw) {
            Ok(a) => Some(a),
            Err(e) => {
                s.unconverted("spec.serviceAllocation", format!("cannot be read ({e})"));
                None
            }
        }
    });
    if addresses.is_empty() {
        s.unconverted("spec.addresses", "no address could be converted; the IPAddressPool was not converted");
        s.finish();
        return None;
    }
    s.finish();
    let mut spec = IpAddressPoolSpec::new(addresses);
    if let Some(a) = auto_assign {
        spec.auto_assign = a;
    }
    spec.avoid_buggy_ips = avoid_buggy_ips;
    spec.service_allocation = service_allocation;
    let mut out = IpAddressPool::new(&name(doc), spec);
    out.metadata = metadata(doc);
    Some(out)
}

pub(super) fn l2_advertisement(doc: &Value, report: &mut Report) -> Option<L2Advertisement> {
    let mut s = Spec::new(doc, report);
    let spec = L2AdvertisementSpec {
        ip_address_pools: s.take("ipAddressPools").unwrap_or_default(),
        ip_address_pool_selectors: s.take("ipAddressPoolSelectors").unwrap_or_default(),
        service_selectors: s.take("serviceSelectors").unwrap_or_default(),
        node_selectors: s.take("nodeSelectors").unwrap_or_default(),
        interfaces: s.take("interfaces").unwrap_or_default(),
        // MetalLB has only one mode: one node answers per address.
        mode: ferrolb_api::L2Mode::SingleOwner,
        // MetalLB has no node preference (its #2797 asks for one).
        node_preferences: Vec::new(),
    };
    s.finish();
    let mut out = L2Advertisement::new(&name(doc), spec);
    out.metadata = metadata(doc);
    Some(out)
}

pub(super) fn bgp_advertisement(
    doc: &Value,
    aliases: &BTreeMap<String, String>,
    report: &mut Report,
) -> Option<BgpAdvertisement> {
    let mut s = Spec::new(doc, report);
    let mut spec = BgpAdvertisementSpec {
        ip_address_pools: s.take("ipAddressPools").unwrap_or_default(),
        ip_address_pool_selectors: s.take("ipAddressPoolSelectors").unwrap_or_default(),
        service_selectors: s.take("serviceSelectors").unwrap_or_default(),
        node_selectors: s.take("nodeSelectors").unwrap_or_default(),
        peers: s.take("peers").unwrap_or_default(),
        local_pref: s.take("localPref"),
        ..BgpAdvertisementSpec::default()
    };
    if let Some(l) = s.take("aggregationLength") {
        spec.aggregation_length = l;
    }
    if let Some(l) = s.take("aggregationLengthV6") {
        spec.aggregation_length_v6 = l;
    }
    let communities: Vec<String> = s.take("communities").unwrap_or_default();
    for (i, c) in communities.iter().enumerate() {
        let value = aliases.get(c).unwrap_or(c);
        match value.parse::<Community>() {
            Ok(parsed) => spec.communities.push(parsed.to_string()),
            Err(_) => s.unconverted(
                format!("spec.communities[{i}]"),
                format!(
                    "{c:?} is neither a community (64512:100, large:64512:1:2) nor an alias of a Community \
                     object in the input; add the Community object or write the value"
                ),
            ),
        }
    }
    s.finish();
    let mut out = BgpAdvertisement::new(&name(doc), spec);
    out.metadata = metadata(doc);
    Some(out)
}

pub(super) fn bgp_peer(doc: &Value, passwords: &mut Passwords, report: &mut Report) -> Option<BgpPeer> {
    #[derive(Deserialize)]
    struct SecretReference {
        name: String,
        namespace: Option<String>,
    }
    let mut s = Spec::new(doc, report);
    let mut whole = true; // false once a field makes the peer unsafe to convert
    let my_asn = s.take::<u32>("myASN");
    let peer_asn = s.take::<u32>("peerASN");
    let peer_address = s.take::<String>("peerAddress");
    let mut spec = BgpPeerSpec::new(
        my_asn.unwrap_or(0),
        peer_asn.unwrap_or(0),
        peer_address.clone().unwrap_or_default(),
    );
    if let Some(p) = s.take("peerPort") {
        spec.peer_port = p;
    }
    spec.source_address = s.take("sourceAddress");
    spec.router_id = s.take::<String>("routerID").filter(|r| !r.is_empty());
    for (key, slot) in [("holdTime", &mut spec.hold_time), ("connectTime", &mut spec.connect_time)] {
        if let Some(d) = take_duration(&mut s, key) {
            *slot = d;
        }
    }
    spec.keepalive_time = take_duration(&mut s, "keepaliveTime");
    spec.ebgp_multi_hop = s.take("ebgpMultiHop").unwrap_or(false);
    spec.bfd_profile = s.take::<String>("bfdProfile").filter(|b| !b.is_empty());
    spec.node_selectors = s.take::<Vec<LabelSelector>>("nodeSelectors").unwrap_or_default();
    if s.take::<bool>("enableGracefulRestart") == Some(true) {
        spec.graceful_restart = Some(GracefulRestart::default());
    }
    let secret = s.take::<SecretReference>("passwordSecret");
    let password = s.take::<String>("password").filter(|p| !p.is_empty());
    if secret.is_some() && password.is_some() {
        // The password itself is never printed.
        s.unconverted(
            "spec.password",
            "set as well as spec.passwordSecret, which MetalLB rejects; the Secret is used",
        );
    }
    // MetalLB's Secret lives in MetalLB's namespace, which the speaker cannot read: the
    // BGPPeer names a copy in ferrolb's.
    spec.password_secret = match (secret, password) {
        (Some(r), _) => {
            let ns = r.namespace.unwrap_or_else(|| namespace(doc));
            Some(passwords.copied(&name(doc), &ns, &r.name, s.report()))
        }
        (None, Some(p)) => Some(passwords.inline(&name(doc), p)),
        (None, None) => None,
    };
    // disableMP: MetalLB announces only the peer address's family on the session.
    if s.take::<bool>("disableMP") == Some(true) {
        match peer_address.as_deref().and_then(|a| a.trim().parse::<IpAddr>().ok()) {
            Some(IpAddr::V4(_)) => spec.address_families = vec![AddressFamily::Ipv4Unicast],
            Some(IpAddr::V6(_)) => spec.address_families = vec![AddressFamily::Ipv6Unicast],
            None => {}
        }
    }
    // dualStackAddressFamily: both families on one session, which is ferrolb's default.
    s.take::<bool>("dualStackAddressFamily");
    if let Some(vrf) = s.take::<String>("vrf").filter(|v| !v.is_empty()) {
        whole = false;
        s.unconverted(
            "spec.vrf",
            format!(
                "ferrolb peers from the node's default VRF only, not {vrf:?}; the BGPPeer was not converted"
            ),
        );
    }
    // BGP unnumbered: the same field, the router found on that link.
    let interface = s.take::<String>("interface").filter(|v| !v.is_empty());
    if let Some(ifname) = &interface {
        if peer_address.is_some() {
            whole = false;
            s.unconverted(
                "spec.interface",
                format!(
                    "set as well as spec.peerAddress, which MetalLB rejects: peer with the router at \
                     peerAddress, or unnumbered over {ifname}? the BGPPeer was not converted"
                ),
            );
        }
        spec.peer_address = None;
        spec.interface = interface.clone();
    }
    let dynamic_asn = s.take::<String>("dynamicASN").filter(|v| !v.is_empty());
    match dynamic_asn.as_deref() {
        None => {}
        Some("internal") => spec.dynamic_asn = Some(DynamicAsn::Internal),
        Some("external") => spec.dynamic_asn = Some(DynamicAsn::External),
        Some(other) => {
            whole = false;
            s.unconverted(
                "spec.dynamicASN",
                format!("{other:?} is neither internal nor external; the BGPPeer was not converted"),
            );
        }
    }
    if spec.dynamic_asn.is_some() {
        // MetalLB refuses both; ferrolb's dynamicASN stands instead of peerASN.
        spec.peer_asn = None;
    }
    for (field, missing) in [
        ("spec.myASN", my_asn.is_none()),
        ("spec.peerASN", peer_asn.is_none() && dynamic_asn.is_none()),
        ("spec.peerAddress", peer_address.is_none() && interface.is_none()),
    ] {
        if missing {
            whole = false;
            s.unconverted(field, "missing, and ferrolb requires it; the BGPPeer was not converted");
        }
    }
    s.finish();
    if !whole {
        return None;
    }
    let mut out = BgpPeer::new(&name(doc), spec);
    out.metadata = metadata(doc);
    Some(out)
}

fn namespace(doc: &Value) -> String {
    doc["metadata"]["namespace"].as_str().unwrap_or(METALLB_NAMESPACE).to_owned()
}

/// A Go duration (metav1.Duration), kept as written when ferrolb reads it.
fn take_duration(s: &mut Spec<'_>, key: &str) -> Option<String> {
    let d = s.take::<String>(key)?;
    match d.parse::<Duration>() {
        Ok(_) => Some(d),
        Err(e) => {
            s.unconverted(format!("spec.{key}"), e.to_string());
            None
        }
    }
}

pub(super) fn bfd_profile(doc: &Value, report: &mut Report) -> Option<BfdProfile> {
    let mut s = Spec::new(doc, report);
    let mut spec = BfdProfileSpec::default();
    // MetalLB writes intervals as whole milliseconds.
    for (key, slot) in
        [("receiveInterval", &mut spec.receive_interval), ("transmitInterval", &mut spec.transmit_interval)]
    {
        if let Some(ms) = s.take::<u32>(key) {
            *slot = format!("{ms}ms");
        }
    }
    if let Some(m) = s.take("detectMultiplier") {
        spec.detect_multiplier = m;
    }
    if let Some(t) = s.take("minimumTtl") {
        spec.minimum_ttl = t;
    }
    spec.passive_mode = s.take("passiveMode").unwrap_or(false);
    let echo = s.take::<bool>("echoMode").unwrap_or(false);
    let echo_interval = s.take::<u32>("echoInterval");
    if echo {
        s.unconverted("spec.echoMode", "ferrolb's BFD has no echo mode; sessions use control packets only");
        if echo_interval.is_some() {
            s.unconverted("spec.echoInterval", "ferrolb's BFD has no echo mode");
        }
    }
    s.finish();
    let mut out = BfdProfile::new(&name(doc), spec);
    out.metadata = metadata(doc);
    Some(out)
}
