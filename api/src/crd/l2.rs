//! L2Advertisement: announce pool addresses by ARP/NDP.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of an L2Advertisement.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "ferrolb.io",
    version = "v1alpha1",
    kind = "L2Advertisement",
    plural = "l2advertisements",
    shortname = "fll2adv",
    category = "ferrolb",
    status = "L2AdvertisementStatus",
    derive = "PartialEq",
    doc = "Announces addresses of some pools on the local segment (ARP / NDP).",
    printcolumn(name = "Pools", type_ = "string", json_path = ".spec.ipAddressPools"),
    printcolumn(name = "Interfaces", type_ = "string", json_path = ".spec.interfaces"),
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct L2AdvertisementSpec {
    /// Pools by name; with no pools and no pool selectors, every pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pools: Vec<String>,
    /// Pools by label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Only Services matching one of these; default all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
    /// Only nodes matching one of these announce; default all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// Interfaces to answer on; default every up, non-loopback, non-bridge-port interface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
    /// `SingleOwner` (default): one elected node answers for each address.
    /// `ActiveActive`: every eligible node receives the address's traffic through a
    /// shared virtual MAC and keeps the flows that hash to it.
    #[serde(default, skip_serializing_if = "L2Mode::is_single_owner")]
    pub mode: L2Mode,
}

/// How an L2Advertisement's addresses are served.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum L2Mode {
    /// One elected node answers ARP/NDP for the address and receives all its traffic.
    #[default]
    SingleOwner,
    /// Every eligible node answers with the address's shared virtual MAC, receives every
    /// frame sent to it, and keeps, in the kernel, only the flows whose bucket it owns.
    ActiveActive,
}

impl L2Mode {
    /// True for the default mode (left out when serialized).
    pub fn is_single_owner(&self) -> bool {
        *self == L2Mode::SingleOwner
    }
}

/// Observed state of an L2Advertisement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct L2AdvertisementStatus {
    /// `Valid` and other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::defaults::conditions_schema")]
    pub conditions: Vec<Condition>,
}
