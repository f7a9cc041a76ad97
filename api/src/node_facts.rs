//! What an L2 election needs of a Node, apart from the Node: its **facts**.
//!
//! Every speaker of an L2 cluster elects among every node, so it must know every node's
//! labels (nodeSelectors, nodePreferences), readiness and InternalIP addresses. Watching
//! every Node for them costs nodes squared: each kubelet rewrites its Node's status at
//! least every 5 minutes, and each such write went to every speaker (at 5 000 nodes, 17
//! events a second to each, 83 000 a second from the apiserver; `bench scale --l2`),
//! though almost none changes a fact. So the controller, which watches the Nodes once,
//! publishes each node's facts as a ConfigMap of its own in its namespace
//! ([`NodeFacts::config_map`]), written only when a fact changes, and the speakers watch
//! those.
//!
//! [`NodeFacts::of`] is the one reading of a Node, for the controller that publishes and
//! for the speaker that reads its own Node (or every Node, where no facts are published).

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{Deserialize, Serialize};

/// Node taints that start a drain (besides `spec.unschedulable`, a cordon): ferrolb's
/// own, for operators, and the one the cluster autoscaler sets before deleting a node.
pub const DRAIN_TAINTS: [&str; 2] = ["ferrolb.io/drain", "ToBeDeletedByClusterAutoscaler"];

/// The label every facts ConfigMap carries, with [`NODE_FACTS_COMPONENT`]: what the
/// speakers' watch selects.
pub const NODE_FACTS_LABEL: &str = "app.kubernetes.io/component";
/// The value of [`NODE_FACTS_LABEL`].
pub const NODE_FACTS_COMPONENT: &str = "node-facts";
/// The name of the ConfigMap (with the same label) that says every Node's facts are
/// published: written once each Node's are, deleted before any is. A speaker without it
/// watches every Node instead, rather than elect among the few nodes it would know of.
pub const COMPLETE_NAME: &str = "node-facts";
/// The data key holding the Node's name.
pub const NODE_KEY: &str = "node";
/// The data key holding the facts, as JSON.
pub const FACTS_KEY: &str = "facts";

/// Every ConfigMap name starts so ([`config_map_name`]).
const NAME_PREFIX: &str = "node-facts.";
/// The longest name of a ConfigMap (a DNS subdomain).
const NAME_MAX: usize = 253;

/// What a speaker's plan reads of a Node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFacts {
    /// `metadata.labels`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Condition Ready is True.
    #[serde(default)]
    pub ready: bool,
    /// Condition NetworkUnavailable is True.
    #[serde(default)]
    pub network_unavailable: bool,
    /// The InternalIP addresses of `status.addresses`, in their order.
    #[serde(default)]
    pub addresses: Vec<IpAddr>,
    /// Why the node drains (cordoned by `spec.unschedulable`, or a [`DRAIN_TAINTS`]
    /// taint), if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining: Option<String>,
}

impl NodeFacts {
    /// The facts of `node`.
    pub fn of(node: &Node) -> NodeFacts {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let status = node.status.as_ref();
        let cond = |t: &str| {
            status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == t))
                .is_some_and(|c| c.status == "True")
        };
        let addresses = status
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect();
        let spec = node.spec.as_ref();
        let taint = spec
            .and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .find(|t| DRAIN_TAINTS.contains(&t.key.as_str()));
        let draining = if spec.and_then(|s| s.unschedulable) == Some(true) {
            Some(format!("node {name} is cordoned (spec.unschedulable)"))
        } else {
            taint.map(|t| format!("node {name} carries the taint {}", t.key))
        };
        NodeFacts {
            labels: node.metadata.labels.clone().unwrap_or_default(),
            ready: cond("Ready"),
            network_unavailable: cond("NetworkUnavailable"),
            addresses,
            draining,
        }
    }

    /// The ConfigMap publishing these facts of Node `node` in `namespace`, owned by the
    /// Node of that `uid` (so that Kubernetes deletes it with the Node).
    pub fn config_map(&self, node: &str, uid: Option<&str>, namespace: &str) -> ConfigMap {
        let name = node.to_owned();
        let owner = uid.map(|uid| OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: name.clone(),
            uid: uid.into(),
            ..Default::default()
        });
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(config_map_name(&name)),
                namespace: Some(namespace.into()),
                labels: Some(labels()),
                owner_references: owner.map(|o| vec![o]),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                (NODE_KEY.to_owned(), name),
                // A struct of strings, maps and addresses always serializes.
                (FACTS_KEY.to_owned(), serde_json::to_string(self).unwrap_or_default()),
            ])),
            ..Default::default()
        }
    }

    /// The uid of the Node that owns `cm`, if a Node does.
    pub fn owner_uid(cm: &ConfigMap) -> Option<&str> {
        let owners = cm.metadata.owner_references.as_deref().unwrap_or_default();
        owners.iter().find(|o| o.kind == "Node" && o.api_version == "v1").map(|o| o.uid.as_str())
    }

    /// The node and facts a ConfigMap publishes, or why it publishes none.
    pub fn from_config_map(cm: &ConfigMap) -> Result<(String, NodeFacts), String> {
        let what = || format!("ConfigMap {}", cm.metadata.name.as_deref().unwrap_or_default());
        let data = cm.data.as_ref();
        let field = |key: &str| {
            data.and_then(|d| d.get(key)).ok_or_else(|| format!("{}: no data key {key:?}", what()))
        };
        let node = field(NODE_KEY)?.clone();
        let facts = serde_json::from_str(field(FACTS_KEY)?)
            .map_err(|e| format!("{}: data key {FACTS_KEY:?}: {e}", what()))?;
        Ok((node, facts))
    }
}

/// The ConfigMap named [`COMPLETE_NAME`] in `namespace`.
pub fn complete_config_map(namespace: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(COMPLETE_NAME.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "published".to_owned(),
            "every Node's facts, by ferrolb-controller (the ConfigMaps node-facts.<node>)".to_owned(),
        )])),
        ..Default::default()
    }
}

/// The label selector of every facts ConfigMap, [`COMPLETE_NAME`]'s too.
pub fn selector() -> String {
    format!("{NODE_FACTS_LABEL}={NODE_FACTS_COMPONENT}")
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        (NODE_FACTS_LABEL.to_owned(), NODE_FACTS_COMPONENT.to_owned()),
        ("app.kubernetes.io/part-of".to_owned(), "ferrolb".to_owned()),
    ])
}

/// The name of the ConfigMap of `node`'s facts: `node-facts.` and the node's name (a DNS
/// subdomain, as a node's name is); a name too long for that keeps its start and ends in
/// a hash of the whole, so that two long names never share one.
pub fn config_map_name(node: &str) -> String {
    if NAME_PREFIX.len() + node.len() <= NAME_MAX {
        return format!("{NAME_PREFIX}{node}");
    }
    // FNV-1a: stable across versions and platforms, as a name must be.
    let hash =
        node.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let mut keep = NAME_MAX - NAME_PREFIX.len() - 17;
    while !node.is_char_boundary(keep) {
        keep -= 1;
    }
    let start = node[..keep].trim_end_matches(['.', '-']);
    format!("{NAME_PREFIX}{start}.{hash:016x}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};

    use super::*;

    fn node(name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some("u-1".into()),
                labels: Some(BTreeMap::from([("zone".to_owned(), "a".to_owned())])),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress { type_: "Hostname".into(), address: name.into() },
                    NodeAddress { type_: "InternalIP".into(), address: "192.0.2.7".into() },
                    NodeAddress { type_: "InternalIP".into(), address: "2001:db8::7".into() },
                ]),
                conditions: Some(vec![
                    NodeCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() },
                    NodeCondition {
                        type_: "NetworkUnavailable".into(),
                        status: "False".into(),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_node_reads_as_its_labels_conditions_internal_addresses_and_drain() {
        let mut n = node("n1");
        let f = NodeFacts::of(&n);
        assert_eq!(f.labels["zone"], "a");
        assert!(f.ready && !f.network_unavailable);
        assert_eq!(f.addresses, ["192.0.2.7".parse::<IpAddr>().unwrap(), "2001:db8::7".parse().unwrap()]);
        assert_eq!(f.draining, None);

        n.spec.as_mut().unwrap().taints =
            Some(vec![Taint { key: "ToBeDeletedByClusterAutoscaler".into(), ..Default::default() }]);
        assert_eq!(
            NodeFacts::of(&n).draining.as_deref(),
            Some("node n1 carries the taint ToBeDeletedByClusterAutoscaler")
        );
        n.spec.as_mut().unwrap().unschedulable = Some(true);
        assert_eq!(NodeFacts::of(&n).draining.as_deref(), Some("node n1 is cordoned (spec.unschedulable)"));

        // A heartbeat (a new lastHeartbeatTime) is no fact.
        let before = NodeFacts::of(&n);
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_heartbeat_time =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
        assert_eq!(NodeFacts::of(&n), before);
    }

    #[test]
    fn a_config_map_carries_the_facts_back_and_is_owned_by_its_node() {
        let n = node("n1");
        let f = NodeFacts::of(&n);
        let cm = f.config_map("n1", n.metadata.uid.as_deref(), "ferrolb-system");
        assert_eq!(cm.metadata.name.as_deref(), Some("node-facts.n1"));
        assert_eq!(cm.metadata.labels.as_ref().unwrap()[NODE_FACTS_LABEL], NODE_FACTS_COMPONENT);
        let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()), ("Node", "n1", "u-1"));
        assert_eq!(NodeFacts::owner_uid(&cm), Some("u-1"));
        assert_eq!(NodeFacts::from_config_map(&cm).unwrap(), ("n1".to_owned(), f));

        let mut broken = cm.clone();
        broken.data.as_mut().unwrap().insert(FACTS_KEY.into(), "{".into());
        let e = NodeFacts::from_config_map(&broken).unwrap_err();
        assert!(e.starts_with("ConfigMap node-facts.n1: data key \"facts\": "), "{e}");
        broken.data.as_mut().unwrap().remove(NODE_KEY);
        assert_eq!(
            NodeFacts::from_config_map(&broken).unwrap_err(),
            "ConfigMap node-facts.n1: no data key \"node\""
        );
    }

    #[test]
    fn long_node_names_get_distinct_names_within_the_limit() {
        let a = format!("{}.a", "x".repeat(250));
        let b = format!("{}.b", "x".repeat(250));
        let (na, nb) = (config_map_name(&a), config_map_name(&b));
        assert_ne!(na, nb);
        for n in [&na, &nb] {
            assert!(n.len() <= NAME_MAX, "{}", n.len());
            assert!(n.starts_with("node-facts.xxx"));
            assert!(!n.contains(".."));
        }
        let dotted = format!("{}.{}", "x".repeat(224), "y".repeat(30));
        assert!(!config_map_name(&dotted).contains(".."), "{}", config_map_name(&dotted));
        assert_eq!(config_map_name(&"y".repeat(242)), format!("node-facts.{}", "y".repeat(242)));
    }
}
