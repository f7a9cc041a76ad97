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
