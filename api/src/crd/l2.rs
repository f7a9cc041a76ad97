//! L2Advertisement: announce pool addresses by ARP/NDP.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::selector::selectors_match;

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
    /// Nodes to prefer, with weights: a node's preference is the sum of the weights of
    /// the entries that select it. Only the live eligible nodes of the highest preference
    /// are elected (or, active-active, serve); the others take over when none is left.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_preferences: Vec<NodePreference>,
}

/// One `spec.nodePreferences` entry: nodes it selects gain its weight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePreference {
    /// The nodes this entry prefers.
    pub node_selector: LabelSelector,
    /// 1..100, default 1; weights of the entries selecting a node add up.
    #[serde(default = "one")]
    #[schemars(schema_with = "super::defaults::weight_schema")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

impl L2AdvertisementSpec {
    /// A node's preference for this advertisement's addresses: the sum of the weights of
    /// the `nodePreferences` entries that select its labels (0 when none does).
    pub fn preference(&self, labels: &impl crate::selector::Labels) -> u32 {
        self.node_preferences
            .iter()
            .filter(|p| selectors_match(std::slice::from_ref(&p.node_selector), labels))
            .map(|p| p.weight)
            .sum()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preference_adds_the_weights_of_the_entries_that_select_the_node() {
        let spec: L2AdvertisementSpec = serde_json::from_value(serde_json::json!({
            "nodePreferences": [
                {"nodeSelector": {"matchLabels": {"rack": "r1"}}, "weight": 50},
                {"nodeSelector": {"matchLabels": {"disk": "ssd"}}},
            ]
        }))
        .unwrap_or_default();
        let labels = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<String, String>>()
        };
        assert_eq!(spec.node_preferences.len(), 2, "weight defaults to 1");
        assert_eq!(spec.preference(&labels(&[("rack", "r1"), ("disk", "ssd")])), 51);
        assert_eq!(spec.preference(&labels(&[("rack", "r1")])), 50);
        assert_eq!(spec.preference(&labels(&[("disk", "ssd")])), 1);
        assert_eq!(spec.preference(&labels(&[("rack", "r2")])), 0);
        assert_eq!(L2AdvertisementSpec::default().preference(&labels(&[("rack", "r1")])), 0);
    }
}
