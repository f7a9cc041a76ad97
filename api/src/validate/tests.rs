//! One test per rule: each starts from a valid config, breaks one thing, and expects
//! exactly that field to be reported.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use kube::ResourceExt;

use super::*;
use crate::crd::*;
use crate::duration::Duration;

fn pool(name: &str, addresses: &[&str]) -> IpAddressPool {
    IpAddressPool::new(name, IpAddressPoolSpec::new(addresses.iter().copied()))
}

fn peer(name: &str) -> BgpPeer {
    BgpPeer::new(name, BgpPeerSpec::new(64513, 64512, "192.0.2.1"))
}

fn bfd(name: &str) -> BfdProfile {
    BfdProfile::new(name, BfdProfileSpec::default())
}

fn bgp_adv(name: &str) -> BgpAdvertisement {
    BgpAdvertisement::new(
        name,
        BgpAdvertisementSpec {
            ip_address_pools: vec!["public".into()],
            peers: vec!["router-a".into()],
            communities: vec!["64512:100".into(), "large:64512:1:2".into(), "no-export".into()],
            ..Default::default()
        },
    )
}

fn l2_adv(name: &str) -> L2Advertisement {
    L2Advertisement::new(
        name,
        L2AdvertisementSpec {
            ip_address_pools: vec!["lan".into()],
            interfaces: vec!["eth0".into()],
            ..Default::default()
        },
    )
}

fn vip(name: &str) -> ControlPlaneVip {
    let spec: ControlPlaneVipSpec = serde_json::from_value(serde_json::json!({
        "address": "192.0.2.100",
        "members": [{"name": "cp1", "address": "192.0.2.11"}, {"name": "cp2", "address": "192.0.2.12"}],
        "bgp": {"peers": ["router-a"]}
    }))
    .unwrap();
    ControlPlaneVip::new(name, spec)
}

/// A config that passes; every test breaks one thing in it.
fn good() -> Config {
    let mut p = peer("router-a");
    p.spec.bfd_profile = Some("fast".into());
    Config {
        pools: vec![
            pool("public", &["203.0.113.0/24", "2001:db8:3::/120"]),
            pool("lan", &["198.51.100.10-198.51.100.20"]),
        ],
        peers: vec![p],
        bgp_advertisements: vec![bgp_adv("public")],
        l2_advertisements: vec![l2_adv("lan")],
        bfd_profiles: vec![bfd("fast")],
        control_plane_vips: vec![vip("apiserver")],
    }
}

/// Asserts the only errors are on `field` of `kind/name`, and returns them.
#[track_caller]
fn only_errors(config: Config, kind: &str, name: &str, field: &str) -> Vec<ValidationError> {
    let errors = validate(&config, Origin::Cluster);
    assert!(!errors.is_empty(), "expected an error on {kind}/{name} {field}");
    for e in &errors {
        assert_eq!((e.kind, e.name.as_str(), e.field.as_str()), (kind, name, field), "unexpected error: {e}");
        assert!(!e.fix.is_empty());
    }
    errors
}

fn selector(key: &str, op: &str, values: &[&str]) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|s| s.to_string()).collect()),
        }]),
        match_labels: None,
    }
}

#[test]
fn good_config_is_valid() {
    let errors = validate(&good(), Origin::Cluster);
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(good().validate(Origin::Cluster).is_ok());
}

#[test]
fn constructors_match_serde_defaults() {
    let decoded: BgpPeerSpec = serde_json::from_value(serde_json::json!({
        "myASN": 64513, "peerASN": 64512, "peerAddress": "192.0.2.1"
    }))
    .unwrap();
    assert_eq!(decoded, BgpPeerSpec::new(64513, 64512, "192.0.2.1"));
    let decoded: IpAddressPoolSpec =
        serde_json::from_value(serde_json::json!({"addresses": ["192.0.2.0/24"]})).unwrap();
    assert_eq!(decoded, IpAddressPoolSpec::new(["192.0.2.0/24"]));
    let decoded: ControlPlaneVipSpec =
        serde_json::from_value(serde_json::json!({"address": "192.0.2.100"})).unwrap();
    assert_eq!(decoded, ControlPlaneVipSpec::new("192.0.2.100"));
    let decoded: BfdProfileSpec = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!(decoded, BfdProfileSpec::default());
    let decoded: BgpAdvertisementSpec = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!(decoded, BgpAdvertisementSpec::default());
}

#[test]
fn defaults_apply() {
    let p = peer("x");
    assert_eq!(p.spec.peer_port, 179);
    assert_eq!(p.spec.hold_time().unwrap(), Duration::from_secs(90));
    assert_eq!(p.spec.keepalive_time().unwrap(), Duration::from_secs(30));
    assert_eq!(p.spec.connect_time().unwrap(), Duration::from_secs(5));
    assert_eq!(p.spec.address_families.len(), 2);
    let b = BfdProfileSpec::default();
    assert_eq!((b.transmit_interval.as_str(), b.detect_multiplier), ("300ms", 3));
    let v = vip("v");
    assert_eq!(v.spec.membership_port, 7947);
    assert_eq!(v.spec.port, 6443);
    assert_eq!(v.spec.mode, VipMode::L2);
    assert_eq!(v.spec.health_check, HealthCheck::default());
    assert_eq!(v.spec.health_check.failure_threshold, 3);
    let pool: IpAddressPoolSpec = serde_json::from_value(serde_json::json!({"addresses": []})).unwrap();
    assert!(pool.auto_assign);
    let adv: BgpAdvertisementSpec = serde_json::from_value(serde_json::json!({})).unwrap();
    assert_eq!((adv.aggregation_length, adv.aggregation_length_v6), (32, 128));
}

#[test]
fn malformed_cidr() {
    let mut c = good();
    c.pools[0].spec.addresses[1] = "2001:db8:3::/129".into();
    let e = only_errors(c, "IPAddressPool", "public", "spec.addresses[1]");
    assert!(e[0].problem.contains("2001:db8:3::/129"));
}

#[test]
fn cidr_with_host_bits() {
    let mut c = good();
    c.pools[0].spec.addresses[0] = "203.0.113.7/24".into();
    let e = only_errors(c, "IPAddressPool", "public", "spec.addresses[0]");
    assert!(e[0].problem.contains("203.0.113.0/24"), "{}", e[0]);
}

#[test]
fn reversed_range() {
    let mut c = good();
    c.pools[1].spec.addresses[0] = "198.51.100.20-198.51.100.10".into();
    only_errors(c, "IPAddressPool", "lan", "spec.addresses[0]");
}

#[test]
fn mixed_family_range() {
    let mut c = good();
    c.pools[1].spec.addresses[0] = "198.51.100.10-2001:db8::1".into();
    let e = only_errors(c, "IPAddressPool", "lan", "spec.addresses[0]");
    assert!(e[0].problem.contains("mixes IPv4 and IPv6"));
}

#[test]
fn empty_pool() {
    let mut c = good();
    c.pools[1].spec.addresses.clear();
    only_errors(c, "IPAddressPool", "lan", "spec.addresses");
}

#[test]
fn overlapping_pools_reported_on_both() {
    let mut c = good();
    c.pools[1].spec.addresses.push("203.0.113.128/25".into());
    let errors = validate(&c, Origin::Cluster);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(
        errors
            .iter()
            .any(|e| e.name == "lan" && e.field == "spec.addresses[1]" && e.problem.contains("\"public\""))
    );
    assert!(errors.iter().any(|e| e.name == "public" && e.field == "spec.addresses[0]"));
}

#[test]
fn overlap_within_one_pool() {
    let mut c = good();
    c.pools[1].spec.addresses.push("198.51.100.15".into());
    let errors = validate(&c, Origin::Cluster);
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors.iter().all(|e| e.name == "lan" && e.problem.contains("same pool")));
}

#[test]
fn adjacent_pools_do_not_overlap() {
    let mut c = good();
    c.pools[1].spec.addresses.push("203.0.114.0/24".into());
    c.pools[1].spec.addresses.push("2001:db8:3::100/120".into());
    assert!(validate(&c, Origin::Cluster).is_empty());
}

#[test]
fn bad_namespace_in_service_allocation() {
    let mut c = good();
    c.pools[0].spec.service_allocation =
        Some(ServiceAllocation { namespaces: vec!["Team_A".into()], ..Default::default() });
    only_errors(c, "IPAddressPool", "public", "spec.serviceAllocation.namespaces[0]");
}

#[test]
fn unknown_pool_in_bgp_advertisement() {
    let mut c = good();
    c.bgp_advertisements[0].spec.ip_address_pools.push("nope".into());
    let e = only_errors(c, "BGPAdvertisement", "public", "spec.ipAddressPools[1]");
    assert!(e[0].problem.contains("\"nope\""));
}

#[test]
fn unknown_pool_in_l2_advertisement() {
    let mut c = good();
    c.l2_advertisements[0].spec.ip_address_pools = vec!["nope".into()];
    only_errors(c, "L2Advertisement", "lan", "spec.ipAddressPools[0]");
}

#[test]
fn unknown_peer_in_bgp_advertisement() {
    let mut c = good();
    c.bgp_advertisements[0].spec.peers = vec!["router-b".into()];
    only_errors(c, "BGPAdvertisement", "public", "spec.peers[0]");
}

#[test]
fn unknown_bfd_profile() {
    let mut c = good();
    c.bfd_profiles.clear();
    only_errors(c, "BGPPeer", "router-a", "spec.bfdProfile");
}

#[test]
fn unknown_peer_in_control_plane_vip() {
    let mut c = good();
    c.control_plane_vips[0].spec.bgp =
        Some(ControlPlaneVipBgp { peers: vec!["router-z".into()], communities: vec![] });
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.bgp.peers[0]");
}

#[test]
fn bad_communities() {
    for bad in ["65536:1", "64512", "large:1:2", "no-exports"] {
        let mut c = good();
        c.bgp_advertisements[0].spec.communities.push(bad.into());
        let e = only_errors(c, "BGPAdvertisement", "public", "spec.communities[3]");
        assert!(e[0].problem.contains(bad));
    }
    let mut c = good();
    c.control_plane_vips[0].spec.bgp =
        Some(ControlPlaneVipBgp { peers: vec!["router-a".into()], communities: vec!["x:y".into()] });
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.bgp.communities[0]");
}

#[test]
fn asn_zero() {
    let mut c = good();
    c.peers[0].spec.my_asn = 0;
    only_errors(c.clone(), "BGPPeer", "router-a", "spec.myASN");
    c.peers[0].spec.my_asn = u32::MAX;
    c.peers[0].spec.peer_asn = Some(0);
    only_errors(c, "BGPPeer", "router-a", "spec.peerASN");
}

#[test]
fn asn_out_of_range_is_a_decode_error() {
    let r: Result<BgpPeerSpec, _> = serde_json::from_value(serde_json::json!({
        "myASN": 4294967296u64, "peerASN": 1, "peerAddress": "192.0.2.1"
    }));
    assert!(r.is_err());
}

#[test]
fn port_zero() {
    let mut c = good();
    c.peers[0].spec.peer_port = 0;
    only_errors(c, "BGPPeer", "router-a", "spec.peerPort");
    let mut c = good();
    c.control_plane_vips[0].spec.port = 0;
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.port");
}

#[test]
fn bad_peer_address() {
    let mut c = good();
    c.peers[0].spec.peer_address = Some("router.example".into());
    only_errors(c, "BGPPeer", "router-a", "spec.peerAddress");
}

/// Unnumbered: an interface instead of an address, never both, never neither.
#[test]
fn peer_address_or_interface() {
    let mut c = good();
    c.peers[0].spec.peer_address = None;
    c.peers[0].spec.interface = Some("eth0".into());
    assert!(validate(&c, Origin::Cluster).is_empty(), "BFD on the link too");
    c.peers[0].spec.interface = Some("eth/0".into());
    only_errors(c.clone(), "BGPPeer", "router-a", "spec.interface");
    c.peers[0].spec.interface = None;
    only_errors(c.clone(), "BGPPeer", "router-a", "spec.peerAddress");
    c.peers[0].spec.peer_address = Some("192.0.2.1".into());
    c.peers[0].spec.interface = Some("eth0".into());
    only_errors(c, "BGPPeer", "router-a", "spec.interface");
}

#[test]
fn source_address_family_mismatch() {
    let mut c = good();
    c.peers[0].spec.source_address = Some("2001:db8::1".into());
    only_errors(c, "BGPPeer", "router-a", "spec.sourceAddress");
}

#[test]
fn router_id_must_be_ipv4() {
    let mut c = good();
    c.peers[0].spec.router_id = Some("2001:db8::1".into());
    only_errors(c, "BGPPeer", "router-a", "spec.routerID");
}

#[test]
fn bad_durations() {
    let mut c = good();
    c.peers[0].spec.hold_time = "90".into();
    only_errors(c, "BGPPeer", "router-a", "spec.holdTime");
    let mut c = good();
    c.peers[0].spec.connect_time = "soon".into();
    only_errors(c, "BGPPeer", "router-a", "spec.connectTime");
    let mut c = good();
    c.bfd_profiles[0].spec.receive_interval = "-1s".into();
    only_errors(c, "BFDProfile", "fast", "spec.receiveInterval");
}

#[test]
fn hold_time_one_or_two_seconds() {
    for hold in ["1s", "2s", "2500ms"] {
        let mut c = good();
        c.peers[0].spec.hold_time = hold.into();
        let e = only_errors(c, "BGPPeer", "router-a", "spec.holdTime");
        assert!(e[0].problem.contains("RFC 4271"));
    }
    for ok in ["0s", "3s", "65535s"] {
        let mut c = good();
        c.peers[0].spec.hold_time = ok.into();
        c.peers[0].spec.keepalive_time = Some("0s".into());
        assert!(validate(&c, Origin::Cluster).is_empty(), "{ok}");
    }
}

#[test]
fn zero_hold_time_only_with_bfd() {
    let mut c = good();
    c.peers[0].spec.hold_time = "0s".into();
    c.peers[0].spec.keepalive_time = Some("0s".into());
    assert!(validate(&c, Origin::Cluster).is_empty(), "0s with bfdProfile");
    c.peers[0].spec.bfd_profile = None;
    let e = only_errors(c, "BGPPeer", "router-a", "spec.holdTime");
    assert!(e[0].problem.contains("never be noticed"), "{}", e[0].problem);
    assert!(e[0].fix.contains("bfdProfile"), "{}", e[0].fix);
}

#[test]
fn ttl_security_is_for_directly_connected_routers() {
    let mut c = good();
    c.peers[0].spec.ttl_security = true;
    assert!(validate(&c, Origin::Cluster).is_empty(), "eBGP, single hop");
    c.peers[0].spec.peer_asn = Some(c.peers[0].spec.my_asn);
    assert!(validate(&c, Origin::Cluster).is_empty(), "iBGP, directly connected");
    c.peers[0].spec.ebgp_multi_hop = true;
    let e = only_errors(c, "BGPPeer", "router-a", "spec.ttlSecurity");
    assert!(e[0].problem.contains("ebgpMultiHop"), "{}", e[0].problem);
}

#[test]
fn hold_time_too_long_or_fractional() {
    let mut c = good();
    c.peers[0].spec.hold_time = "65536s".into();
    only_errors(c, "BGPPeer", "router-a", "spec.holdTime");
    let mut c = good();
    c.peers[0].spec.hold_time = "3500ms".into();
    only_errors(c, "BGPPeer", "router-a", "spec.holdTime");
}

#[test]
fn keepalive_longer_than_hold() {
    let mut c = good();
    c.peers[0].spec.keepalive_time = Some("91s".into());
    only_errors(c.clone(), "BGPPeer", "router-a", "spec.keepaliveTime");
    c.peers[0].spec.keepalive_time = Some("90s".into());
    assert!(validate(&c, Origin::Cluster).is_empty());
}

#[test]
fn both_password_sources() {
    let mut c = good();
    c.peers[0].spec.password_secret = Some(SecretKeyRef {
        name: "bgp-auth".into(),
        namespace: "ferrolb-system".into(),
        key: "password".into(),
    });
    assert!(validate(&c, Origin::Cluster).is_empty());
    c.peers[0].spec.password_file = Some("/etc/ferrolb/bgp-password".into());
    only_errors(c, "BGPPeer", "router-a", "spec.passwordSecret");
}

#[test]
fn password_source_must_fit_the_origin() {
    let mut c = good();
    c.peers[0].spec.password_file = Some("/etc/ferrolb/bgp-password".into());
    only_errors(c.clone(), "BGPPeer", "router-a", "spec.passwordFile");
    assert!(validate(&c, Origin::File).is_empty());
    let mut c = good();
    c.peers[0].spec.password_secret = Some(SecretKeyRef {
        name: "bgp-auth".into(),
        namespace: "ferrolb-system".into(),
        key: "password".into(),
    });
    let e = validate(&c, Origin::File);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(e[0].field, "spec.passwordSecret");
}

#[test]
fn checkpoint_subset_for_a_vip() {
    let mut c = good();
    c.peers.push(peer("router-b"));
    let cp = c.for_control_plane_vip("apiserver").unwrap();
    assert_eq!(cp.control_plane_vips.len(), 1);
    assert_eq!(cp.peers.len(), 1);
    assert_eq!(cp.peers[0].name_any(), "router-a");
    assert_eq!(cp.bfd_profiles.len(), 1);
    assert!(cp.pools.is_empty() && cp.bgp_advertisements.is_empty());
    assert!(validate(&cp, Origin::File).is_empty());
    assert!(c.for_control_plane_vip("other").is_none());
}

#[test]
fn password_secret_incomplete_and_relative_file() {
    let mut c = good();
    c.peers[0].spec.password_secret = Some(SecretKeyRef {
        name: "bgp-auth".into(),
        namespace: "ferrolb-system".into(),
        key: String::new(),
    });
    only_errors(c, "BGPPeer", "router-a", "spec.passwordSecret.key");
    let mut c = good();
    c.peers[0].spec.password_file = Some("bgp-password".into());
    let e = validate(&c, Origin::File);
    assert_eq!(e.len(), 1, "{e:#?}");
    assert_eq!(e[0].field, "spec.passwordFile");
}

#[test]
fn graceful_restart_time_limit() {
    let mut c = good();
    c.peers[0].spec.graceful_restart = Some(GracefulRestart { enabled: true, restart_time: "4096s".into() });
    only_errors(c, "BGPPeer", "router-a", "spec.gracefulRestart.restartTime");
}

#[test]
fn address_families_empty_or_repeated() {
    let mut c = good();
    c.peers[0].spec.address_families.clear();
    only_errors(c, "BGPPeer", "router-a", "spec.addressFamilies");
    let mut c = good();
    c.peers[0].spec.address_families = vec![AddressFamily::Ipv4Unicast; 2];
    only_errors(c, "BGPPeer", "router-a", "spec.addressFamilies[1]");
}

#[test]
fn aggregation_length_out_of_range() {
    let mut c = good();
    c.bgp_advertisements[0].spec.aggregation_length = 33;
    only_errors(c, "BGPAdvertisement", "public", "spec.aggregationLength");
    let mut c = good();
    c.bgp_advertisements[0].spec.aggregation_length_v6 = -1;
    only_errors(c, "BGPAdvertisement", "public", "spec.aggregationLengthV6");
}

#[test]
fn label_selector_syntax() {
    let mut c = good();
    c.peers[0].spec.node_selectors = vec![selector("bad key!", "Exists", &[])];
    only_errors(c, "BGPPeer", "router-a", "spec.nodeSelectors[0].matchExpressions[0].key");
    let mut c = good();
    c.bgp_advertisements[0].spec.service_selectors = vec![selector("app", "Equals", &["x"])];
    only_errors(c, "BGPAdvertisement", "public", "spec.serviceSelectors[0].matchExpressions[0].operator");
    let mut c = good();
    c.l2_advertisements[0].spec.node_selectors = vec![selector("app", "In", &[])];
    only_errors(c, "L2Advertisement", "lan", "spec.nodeSelectors[0].matchExpressions[0].values");
    let mut c = good();
    c.l2_advertisements[0].spec.ip_address_pool_selectors = vec![LabelSelector {
        match_labels: Some([("tier".to_string(), "not ok".to_string())].into()),
        match_expressions: None,
    }];
    only_errors(c, "L2Advertisement", "lan", "spec.ipAddressPoolSelectors[0].matchLabels[\"tier\"]");
}

#[test]
fn bad_interface_name() {
    let mut c = good();
    c.l2_advertisements[0].spec.interfaces.push("a-very-long-interface".into());
    only_errors(c, "L2Advertisement", "lan", "spec.interfaces[1]");
}

#[test]
fn bfd_ranges() {
    let mut c = good();
    c.bfd_profiles[0].spec.transmit_interval = "5ms".into();
    only_errors(c, "BFDProfile", "fast", "spec.transmitInterval");
    let mut c = good();
    c.bfd_profiles[0].spec.detect_multiplier = 1;
    only_errors(c, "BFDProfile", "fast", "spec.detectMultiplier");
    let mut c = good();
    c.bfd_profiles[0].spec.minimum_ttl = 255;
    only_errors(c, "BFDProfile", "fast", "spec.minimumTtl");
}

#[test]
fn duplicate_and_missing_names() {
    let mut c = good();
    c.pools.push(pool("lan", &["192.0.2.200/32"]));
    only_errors(c, "IPAddressPool", "lan", "metadata.name");
    let mut c = good();
    c.bfd_profiles[0].metadata.name = Some("Fast".into());
    c.peers[0].spec.bfd_profile = Some("Fast".into());
    only_errors(c, "BFDProfile", "Fast", "metadata.name");
}

#[test]
fn insecure_skip_verify_only_for_loopback() {
    let mut c = good();
    c.control_plane_vips[0].spec.health_check.insecure_skip_verify = true;
    assert!(validate(&c, Origin::Cluster).is_empty());
    for url in ["https://[::1]:6443/readyz", "https://localhost:6443/readyz"] {
        c.control_plane_vips[0].spec.health_check.url = url.into();
        assert!(validate(&c, Origin::Cluster).is_empty(), "{url}");
    }
    c.control_plane_vips[0].spec.health_check.url = "https://192.0.2.11:6443/readyz".into();
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.healthCheck.insecureSkipVerify");
}

#[test]
fn health_check_fields() {
    let mut c = good();
    c.control_plane_vips[0].spec.health_check.url = "ftp://x".into();
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.healthCheck.url");
    let mut c = good();
    c.control_plane_vips[0].spec.health_check.interval = "0s".into();
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.healthCheck.interval");
    let mut c = good();
    c.control_plane_vips[0].spec.health_check.failure_threshold = 0;
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.healthCheck.failureThreshold");
}

#[test]
fn vip_members_and_modes() {
    let mut c = good();
    c.control_plane_vips[0].spec.members.clear();
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.members");
    let mut c = good();
    c.control_plane_vips[0].spec.mode = VipMode::Bgp;
    c.control_plane_vips[0].spec.bgp = None;
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.bgp.peers");
    let mut c = good();
    c.control_plane_vips[0].spec.members[1].name = "cp1".into();
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.members[1].name");
    let mut c = good();
    c.control_plane_vips[0].spec.members[1].address = "nope".into();
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.members[1].address");
    let mut c = good();
    c.control_plane_vips[0].spec.address = "192.0.2.11".into();
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.address");
    let mut c = good();
    c.control_plane_vips[0].spec.membership_port = 7946;
    only_errors(c, "ControlPlaneVIP", "apiserver", "spec.membershipPort");
}

#[test]
fn errors_display_kind_name_field_and_fix() {
    let mut c = good();
    c.peers[0].spec.hold_time = "2s".into();
    let e = c.validate(Origin::Cluster).unwrap_err();
    let text = e[0].to_string();
    assert!(text.starts_with("BGPPeer/router-a: spec.holdTime: "), "{text}");
    assert!(text.contains("fix: set holdTime to 3s..65535s"), "{text}");
}

#[test]
fn condition_from_errors() {
    use k8s_openapi::jiff::Timestamp;
    let t0 = Time(Timestamp::from_second(1).unwrap());
    let t1 = Time(Timestamp::from_second(2).unwrap());
    let mut c = good();
    c.peers[0].spec.hold_time = "2s".into();
    let errors = validate(&c, Origin::Cluster);
    let bad = valid_condition(errors_for(&errors, "BGPPeer", "router-a"), Some(4), t0.clone());
    assert_eq!((bad.status.as_str(), bad.reason.as_str()), ("False", "Invalid"));
    assert!(bad.message.contains("spec.holdTime"));
    assert_eq!(bad.observed_generation, Some(4));
    let ok = valid_condition(errors_for(&errors, "IPAddressPool", "lan"), Some(1), t0.clone());
    assert_eq!(ok.status, "True");

    let mut conditions = vec![];
    set_condition(&mut conditions, bad.clone());
    let mut again = bad.clone();
    again.last_transition_time = t1.clone();
    set_condition(&mut conditions, again);
    assert_eq!(conditions.len(), 1);
    assert_eq!(conditions[0].last_transition_time, t0, "same status keeps the time");
    let mut flipped = ok;
    flipped.last_transition_time = t1.clone();
    set_condition(&mut conditions, flipped);
    assert_eq!(conditions[0].last_transition_time, t1);
    assert_eq!(conditions[0].status, "True");
}

#[test]
fn duplicate_sessions() {
    let mut c = good();
    let mut twin = c.peers[0].clone();
    twin.metadata.name = Some("router-a2".into());
    c.peers.push(twin.clone());
    let e = only_errors(c.clone(), "BGPPeer", "router-a2", "spec.peerAddress");
    assert!(e[0].problem.contains("\"router-a\""));
    c.peers[1].spec.node_selectors = vec![selector("rack", "In", &["r1"])];
    assert!(validate(&c, Origin::Cluster).is_empty());
    c.peers[1].spec.node_selectors.clear();
    c.peers[1].spec.peer_port = 1179;
    assert!(validate(&c, Origin::Cluster).is_empty());
}

#[test]
fn vip_address_in_a_pool_or_repeated() {
    let mut c = good();
    c.control_plane_vips[0].spec.address = "203.0.113.5".into();
    let e = only_errors(c, "ControlPlaneVIP", "apiserver", "spec.address");
    assert!(e[0].problem.contains("\"public\""), "{}", e[0]);
    let mut c = good();
    let mut twin = c.control_plane_vips[0].clone();
    twin.metadata.name = Some("apiserver2".into());
    c.control_plane_vips.push(twin);
    only_errors(c, "ControlPlaneVIP", "apiserver2", "spec.address");
}

#[test]
fn node_preferences_are_checked() {
    let preference = |sel: LabelSelector, weight: u32| NodePreference { node_selector: sel, weight };
    let mut c = good();
    c.l2_advertisements[0].spec.node_preferences = vec![preference(selector("rack", "In", &["r1"]), 100)];
    assert_eq!(validate(&c, Origin::Cluster), vec![]);
    c.l2_advertisements[0].spec.node_preferences.push(preference(selector("rack", "In", &["r2"]), 101));
    only_errors(c, "L2Advertisement", "lan", "spec.nodePreferences[1].weight");
    let mut c = good();
    c.l2_advertisements[0].spec.node_preferences = vec![preference(selector("rack", "In", &[]), 10)];
    only_errors(
        c,
        "L2Advertisement",
        "lan",
        "spec.nodePreferences[0].nodeSelector.matchExpressions[0].values",
    );
}

#[test]
fn exactly_one_of_peer_asn_and_dynamic_asn() {
    let mut c = good();
    c.peers[0].spec.peer_asn = None;
    only_errors(c.clone(), "BGPPeer", "router-a", "spec.peerASN");
    c.peers[0].spec.dynamic_asn = Some(DynamicAsn::External);
    assert_eq!(validate(&c, Origin::Cluster), vec![]);
    c.peers[0].spec.peer_asn = Some(64512);
    only_errors(c, "BGPPeer", "router-a", "spec.dynamicASN");
}

#[test]
fn link_bandwidth_is_endpoints_or_a_rate() {
    for (value, want) in [
        ("endpoints", Some(LinkBandwidth::Endpoints)),
        ("10G", Some(LinkBandwidth::Fixed(10_000_000_000))),
        ("1M", Some(LinkBandwidth::Fixed(1_000_000))),
        ("2500000", Some(LinkBandwidth::Fixed(2_500_000))),
        ("1000T", Some(LinkBandwidth::Fixed(1_000_000_000_000_000))),
        ("999K", None),
        ("1001T", None),
        ("10g", None),
        ("1.5G", None),
        ("+5G", None),
        ("", None),
        ("99999999999999999999T", None),
    ] {
        let mut c = good();
        c.bgp_advertisements[0].spec.link_bandwidth = Some(value.into());
        assert_eq!(c.bgp_advertisements[0].spec.link_bandwidth().ok().flatten(), want, "{value:?}");
        if want.is_some() {
            assert_eq!(validate(&c, Origin::Cluster), vec![], "{value:?}");
        } else {
            only_errors(c, "BGPAdvertisement", "public", "spec.linkBandwidth");
        }
    }
}
