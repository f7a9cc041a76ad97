//! BFDProfile: fast failure detection settings shared by BGP peers.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defaults;

/// Spec of a BFDProfile.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "ferrolb.io",
    version = "v1alpha1",
    kind = "BFDProfile",
    root = "BfdProfile",
    plural = "bfdprofiles",
    shortname = "flbfd",
    category = "ferrolb",
    status = "BfdProfileStatus",
    derive = "PartialEq",
    doc = "BFD timers that BGPPeers refer to by name.",
    printcolumn(name = "Receive", type_ = "string", json_path = ".spec.receiveInterval"),
    printcolumn(name = "Transmit", type_ = "string", json_path = ".spec.transmitInterval"),
    printcolumn(name = "Multiplier", type_ = "integer", json_path = ".spec.detectMultiplier"),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct BfdProfileSpec {
    /// Slowest rate at which we want to receive control packets (10ms..60s).
    #[serde(default = "defaults::bfd_interval")]
    pub receive_interval: String,
    /// Fastest rate at which we send control packets (10ms..60s).
    #[serde(default = "defaults::bfd_interval")]
    pub transmit_interval: String,
    /// Packets missed before the session is declared down (2..=255).
    #[serde(default = "defaults::detect_multiplier")]
    pub detect_multiplier: i32,
    /// Wait for the peer to start the session instead of sending first.
    #[serde(default)]
    pub passive_mode: bool,
    /// Minimum incoming TTL for multi-hop sessions (1..=254).
    #[serde(default = "defaults::minimum_ttl")]
    pub minimum_ttl: i32,
}

impl Default for BfdProfileSpec {
    fn default() -> Self {
        Self {
            receive_interval: defaults::bfd_interval(),
            transmit_interval: defaults::bfd_interval(),
            detect_multiplier: defaults::detect_multiplier(),
            passive_mode: false,
            minimum_ttl: defaults::minimum_ttl(),
        }
    }
}

/// Observed state of a BFDProfile.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BfdProfileStatus {
    /// `Valid` and other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::defaults::conditions_schema")]
    pub conditions: Vec<Condition>,
}

impl BfdProfileSpec {
    /// Parsed `receiveInterval`.
    pub fn receive_interval(&self) -> Result<crate::duration::Duration, crate::duration::DurationError> {
        self.receive_interval.parse()
    }

    /// Parsed `transmitInterval`.
    pub fn transmit_interval(&self) -> Result<crate::duration::Duration, crate::duration::DurationError> {
        self.transmit_interval.parse()
    }
}
