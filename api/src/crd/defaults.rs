//! Defaults of API.md, as functions so serde and schemars (the CRD `default:`) share them.

/// `IPAddressPool.spec.autoAssign`.
pub fn auto_assign() -> bool {
    true
}
/// `BGPPeer.spec.peerPort`.
pub fn peer_port() -> u16 {
    179
}
/// `BGPPeer.spec.holdTime`.
pub fn hold_time() -> String {
    "90s".into()
}
/// `BGPPeer.spec.connectTime`.
pub fn connect_time() -> String {
    "5s".into()
}
/// `BGPPeer.spec.gracefulRestart.restartTime`.
pub fn restart_time() -> String {
    "120s".into()
}
/// `BGPAdvertisement.spec.aggregationLength`.
pub fn aggregation_length() -> i32 {
    32
}
/// `BGPAdvertisement.spec.aggregationLengthV6`.
pub fn aggregation_length_v6() -> i32 {
    128
}
/// `BFDProfile.spec.receiveInterval` and `transmitInterval`.
pub fn bfd_interval() -> String {
    "300ms".into()
}
/// `BFDProfile.spec.detectMultiplier`.
pub fn detect_multiplier() -> i32 {
    3
}
/// `BFDProfile.spec.minimumTtl`.
pub fn minimum_ttl() -> i32 {
    254
}
/// `ControlPlaneVIP.spec.port`.
pub fn apiserver_port() -> u16 {
    6443
}
/// `ControlPlaneVIP.spec.membershipPort`: not 7946, speakers use it on the same nodes.
pub fn membership_port() -> u16 {
    7947
}
/// `ControlPlaneVIP.spec.membershipKeyFile`.
pub fn membership_key_file() -> String {
    "/etc/ferrolb/bootstrap-membership.key".into()
}
/// `ControlPlaneVIP.spec.healthCheck.url`.
pub fn health_url() -> String {
    "https://127.0.0.1:6443/readyz".into()
}
/// `ControlPlaneVIP.spec.healthCheck.interval` and `timeout`.
pub fn health_period() -> String {
    "1s".into()
}
/// `ControlPlaneVIP.spec.healthCheck.failureThreshold`.
pub fn failure_threshold() -> i32 {
    3
}
/// `ControlPlaneVIP.spec.healthCheck.caFile`.
pub fn ca_file() -> String {
    "/etc/kubernetes/pki/ca.crt".into()
}
/// `BGPPeer.spec.addressFamilies`.
pub fn address_families() -> Vec<super::AddressFamily> {
    vec![super::AddressFamily::Ipv4Unicast, super::AddressFamily::Ipv6Unicast]
}
/// `true`, for flags whose default is on.
pub fn yes() -> bool {
    true
}

/// Schema of TCP/UDP port fields: Kubernetes knows no `uint16` format, so say int32 1..65535.
pub fn port_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535})
}

/// Schema of AS numbers: 1..=4294967295 (0 is reserved, RFC 7607), as int64.
pub fn asn_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "format": "int64", "minimum": 1, "maximum": 4294967295u64})
}

/// Schema of LOCAL_PREF: 0..=4294967295, as int64.
pub fn u32_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "format": "int64", "minimum": 0, "maximum": 4294967295u64})
}

/// Schema of a preference weight: 1..100, as Kubernetes' scheduling preferences.
pub fn weight_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "format": "int32", "minimum": 1, "maximum": 100, "default": 1})
}

/// Schema of `status.conditions`: a list map keyed by `type`, so server-side apply merges
/// conditions written by different managers instead of replacing the whole list.
pub fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema =
        generator.subschema_for::<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert("x-kubernetes-list-map-keys".into(), serde_json::json!(["type"]));
    schema
}
