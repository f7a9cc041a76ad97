//! ServiceAnnouncement: what one speaker announces for one Service (observability).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Spec of a ServiceAnnouncement, written by speakers.
// Namespaced, unlike the other kinds: it carries an owner reference to its Service, and
// Kubernetes garbage-collects only dependents in the owner's namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "ferrolb.io",
    version = "v1alpha1",
    kind = "ServiceAnnouncement",
    plural = "serviceannouncements",
    shortname = "flsvcann",
    category = "ferrolb",
    namespaced,
    status = "ServiceAnnouncementStatus",
    derive = "PartialEq",
    doc = "What one node announces for one Service; written by ferrolb-speaker.",
    printcolumn(name = "Service", type_ = "string", json_path = ".spec.service.name"),
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.node"),
    printcolumn(name = "Protocol", type_ = "string", json_path = ".spec.protocol"),
    printcolumn(name = "Addresses", type_ = "string", json_path = ".spec.addresses"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAnnouncementSpec {
    /// Announcing node.
    pub node: String,
    /// Announced Service.
    pub service: ServiceRef,
    /// How it is announced.
    pub protocol: AnnouncementProtocol,
    /// Announced addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// L2: interfaces answering for the addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<String>,
    /// BGP: BGPPeer names the addresses are sent to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
}

/// A Service by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct ServiceRef {
    /// Service namespace.
    pub namespace: String,
    /// Service name.
    pub name: String,
}

/// Announcement protocol.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum AnnouncementProtocol {
    /// ARP / NDP.
    #[default]
    L2,
    /// BGP.
    #[serde(rename = "BGP")]
    Bgp,
}

/// Observed state of a ServiceAnnouncement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAnnouncementStatus {
    /// `Valid` and other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::defaults::conditions_schema")]
    pub conditions: Vec<Condition>,
}
