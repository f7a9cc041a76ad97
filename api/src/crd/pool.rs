//! IPAddressPool: the addresses ferrolb may hand to Services.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defaults;

/// Spec of an IPAddressPool.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "ferrolb.io",
    version = "v1alpha1",
    kind = "IPAddressPool",
    root = "IpAddressPool",
    plural = "ipaddresspools",
    shortname = "flpool",
    category = "ferrolb",
    status = "IpAddressPoolStatus",
    derive = "PartialEq",
    doc = "Addresses ferrolb may assign to LoadBalancer Services.",
    printcolumn(name = "Auto Assign", type_ = "boolean", json_path = ".spec.autoAssign"),
    printcolumn(name = "Avoid Buggy IPs", type_ = "boolean", json_path = ".spec.avoidBuggyIPs"),
    printcolumn(name = "Assigned IPv4", type_ = "integer", json_path = ".status.assignedIPv4"),
    printcolumn(name = "Available IPv4", type_ = "integer", json_path = ".status.availableIPv4"),
    printcolumn(name = "Assigned IPv6", type_ = "integer", json_path = ".status.assignedIPv6", priority = 1),
    printcolumn(
        name = "Available IPv6",
        type_ = "integer",
        json_path = ".status.availableIPv6",
        priority = 1
    ),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct IpAddressPoolSpec {
    /// CIDRs (`203.0.113.0/24`) or inclusive ranges (`198.51.100.10-198.51.100.20`).
    pub addresses: Vec<String>,
    /// When false, the pool is used only by Services that ask for it explicitly.
    #[serde(default = "defaults::auto_assign")]
    pub auto_assign: bool,
    /// Skip addresses ending in .0 and .255 (some clients drop them).
    #[serde(default, rename = "avoidBuggyIPs")]
    pub avoid_buggy_ips: bool,
    /// Which Services may use this pool, and its priority among matching pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_allocation: Option<ServiceAllocation>,
}

/// Restricts a pool to some Services and orders pools.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAllocation {
    /// Lower wins among pools that match a Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Namespaces whose Services may use the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces (by label) whose Services may use the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespace_selectors: Vec<LabelSelector>,
    /// Services (by label) that may use the pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
}

/// Observed state of an IPAddressPool, written by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IpAddressPoolStatus {
    /// `Valid` and other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::defaults::conditions_schema")]
    pub conditions: Vec<Condition>,
    /// IPv4 addresses assigned to Services.
    #[serde(default, rename = "assignedIPv4")]
    pub assigned_ipv4: i64,
    /// IPv6 addresses assigned to Services.
    #[serde(default, rename = "assignedIPv6")]
    pub assigned_ipv6: i64,
    /// IPv4 addresses still free.
    #[serde(default, rename = "availableIPv4")]
    pub available_ipv4: i64,
    /// IPv6 addresses still free (saturates at 2^63-1).
    #[serde(default, rename = "availableIPv6")]
    pub available_ipv6: i64,
}

impl ServiceAllocation {
    /// Whether a Service may use the pool: every non-empty list must match (namespaces by
    /// name, namespaces by label, the Service by label).
    pub fn allows(
        &self,
        namespace: &str,
        namespace_labels: &std::collections::BTreeMap<String, String>,
        service_labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace))
            && crate::selector::selectors_match(&self.namespace_selectors, namespace_labels)
            && crate::selector::selectors_match(&self.service_selectors, service_labels)
    }
}

impl IpAddressPoolSpec {
    /// A pool of these entries with every other field at its default.
    pub fn new<S: Into<String>>(addresses: impl IntoIterator<Item = S>) -> Self {
        Self {
            addresses: addresses.into_iter().map(Into::into).collect(),
            auto_assign: defaults::auto_assign(),
            avoid_buggy_ips: false,
            service_allocation: None,
        }
    }

    /// Usable (IPv4, IPv6) address counts, honouring `avoidBuggyIPs`, for the status
    /// fields; saturating. Fails on the first bad entry.
    pub fn capacity(&self) -> Result<(u128, u128), crate::address::AddressError> {
        let (mut v4, mut v6) = (0u128, 0u128);
        for r in self.ranges()? {
            let skip = if self.avoid_buggy_ips { r.buggy_count() } else { 0 };
            let n = r.len().saturating_sub(skip);
            if r.is_ipv4() {
                v4 = v4.saturating_add(n);
            } else {
                v6 = v6.saturating_add(n);
            }
        }
        Ok((v4, v6))
    }

    /// The parsed `addresses`, in order; fails on the first bad entry.
    pub fn ranges(&self) -> Result<Vec<crate::address::AddressRange>, crate::address::AddressError> {
        self.addresses.iter().map(|a| crate::address::AddressRange::parse(a)).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn capacity() {
        let mut spec = IpAddressPoolSpec::new(["192.0.2.0/24", "2001:db8::/120", "::/0"]);
        assert_eq!(spec.capacity().unwrap(), (256, u128::MAX));
        spec.avoid_buggy_ips = true;
        spec.addresses.truncate(2);
        assert_eq!(spec.capacity().unwrap(), (254, 256));
    }

    #[test]
    fn service_allocation_allows() {
        let none = BTreeMap::new();
        let team_a: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        assert!(ServiceAllocation::default().allows("x", &none, &none));
        let by_ns = ServiceAllocation { namespaces: vec!["team-a".into()], ..Default::default() };
        assert!(by_ns.allows("team-a", &none, &none));
        assert!(!by_ns.allows("team-b", &none, &none));
        let by_label = ServiceAllocation {
            namespaces: vec!["team-a".into()],
            service_selectors: vec![LabelSelector {
                match_labels: Some(team_a.clone()),
                match_expressions: None,
            }],
            ..Default::default()
        };
        assert!(by_label.allows("team-a", &none, &team_a));
        assert!(!by_label.allows("team-a", &none, &none), "both lists must match");
    }
}
