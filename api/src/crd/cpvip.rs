//! ControlPlaneVIP: the apiserver virtual IP announced by bootstrap.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defaults;

/// Spec of a ControlPlaneVIP.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "ferrolb.io",
    version = "v1alpha1",
    kind = "ControlPlaneVIP",
    root = "ControlPlaneVip",
    plural = "controlplanevips",
    shortname = "flcpvip",
    category = "ferrolb",
    status = "ControlPlaneVipStatus",
    derive = "PartialEq",
    doc = "The kube-apiserver virtual IP, announced by ferrolb-bootstrap on control-plane nodes.",
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.address"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "Owner", type_ = "string", json_path = ".status.owner"),
    printcolumn(name = "Announcing", type_ = "string", json_path = ".status.announcing", priority = 1),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneVipSpec {
    /// The virtual IP, IPv4 or IPv6.
    pub address: String,
    /// The apiserver port behind the VIP.
    #[serde(default = "defaults::apiserver_port")]
    #[schemars(schema_with = "defaults::port_schema")]
    pub port: u16,
    /// How the VIP is announced.
    #[serde(default)]
    pub mode: VipMode,
    /// L2: interface to announce on; default the one whose subnet holds the address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// Control-plane nodes; the L2 election happens among them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<ControlPlaneVipMember>,
    /// UDP port of bootstrap membership (not the speakers' 7946).
    #[serde(default = "defaults::membership_port")]
    #[schemars(schema_with = "defaults::port_schema")]
    pub membership_port: u16,
    /// File holding the bootstrap membership key.
    #[serde(default = "defaults::membership_key_file")]
    pub membership_key_file: String,
    /// Health check of the local apiserver gating the announcement.
    #[serde(default)]
    pub health_check: HealthCheck,
    /// BGP mode settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp: Option<ControlPlaneVipBgp>,
}

impl ControlPlaneVipSpec {
    /// An L2 VIP with no members yet and every other field at its default.
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            port: defaults::apiserver_port(),
            mode: VipMode::L2,
            interface: None,
            members: Vec::new(),
            membership_port: defaults::membership_port(),
            membership_key_file: defaults::membership_key_file(),
            health_check: HealthCheck::default(),
            bgp: None,
        }
    }
}

/// How a ControlPlaneVIP is announced.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum VipMode {
    /// ARP / NDP from one elected member.
    #[default]
    L2,
    /// BGP from every healthy member.
    #[serde(rename = "BGP")]
    Bgp,
}

/// A control-plane node taking part in the VIP.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct ControlPlaneVipMember {
    /// Node name.
    pub name: String,
    /// Node address used for membership traffic.
    pub address: String,
}

/// Health check of the local apiserver.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// URL probed; http or https.
    #[serde(default = "defaults::health_url")]
    pub url: String,
    /// Time between probes.
    #[serde(default = "defaults::health_period")]
    pub interval: String,
    /// Probe timeout.
    #[serde(default = "defaults::health_period")]
    pub timeout: String,
    /// Consecutive failures before the node stops announcing.
    #[serde(default = "defaults::failure_threshold")]
    pub failure_threshold: i32,
    /// CA bundle verifying the apiserver's certificate.
    #[serde(default = "defaults::ca_file")]
    pub ca_file: String,
    /// Skip certificate verification; allowed only for loopback URLs.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

impl Default for HealthCheck {
    fn default() -> Self {
        Self {
            url: defaults::health_url(),
            interval: defaults::health_period(),
            timeout: defaults::health_period(),
            failure_threshold: defaults::failure_threshold(),
            ca_file: defaults::ca_file(),
            insecure_skip_verify: false,
        }
    }
}

/// BGP settings of a ControlPlaneVIP.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct ControlPlaneVipBgp {
    /// BGPPeer names; they are included in the checkpoint.
    #[serde(default)]
    pub peers: Vec<String>,
    /// Communities attached to the VIP route.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub communities: Vec<String>,
}

/// Observed state of a ControlPlaneVIP.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneVipStatus {
    /// `Valid` and other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::defaults::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// L2: the node holding the VIP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// BGP: nodes announcing the VIP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub announcing: Vec<String>,
}

impl HealthCheck {
    /// Parsed `interval`.
    pub fn interval(&self) -> Result<crate::duration::Duration, crate::duration::DurationError> {
        self.interval.parse()
    }

    /// Parsed `timeout`.
    pub fn timeout(&self) -> Result<crate::duration::Duration, crate::duration::DurationError> {
        self.timeout.parse()
    }
}
