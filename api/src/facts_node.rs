//! A Node as its facts read it ([`Slim`]): watched as a `Node`, but deserialized with only
//! what [`NodeFacts::of`](crate::NodeFacts::of) reads.
//!
//! Most of a Node's bytes are what no fact is made of: `managedFields` (a tree of JSON per
//! writer, parsed into a map per field), the images a kubelet reports (up to 50, each with
//! its names), `nodeInfo`, annotations, capacity. The controller, which watches every Node
//! of an L2 cluster to publish their facts, parsed all of it for each Node of a list page
//! (500 Nodes) and for each kubelet's status write (at 5 000 nodes, about 20 a second),
//! only to keep the facts: at 5 000 Nodes its RSS was 73.0 MiB, of which 15.6 MiB live heap,
//! the rest freed memory glibc kept. Here the rest is skipped as it is read (RSS 39.7 MiB;
//! `bench scale --l2`, BENCHMARKS.md); the speaker's Node watch reads Nodes so too.

use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};
use serde::{Deserialize, Deserializer};

use crate::slim::{Object, ReadSlim, Slim};

/// A [`Node`] holding only its name, uid, resourceVersion, labels, `spec.unschedulable`,
/// taints' keys, effects and values, conditions' types and statuses, and addresses.
pub type FactsNode = Slim<Node>;

/// A Node as its facts read it.
impl ReadSlim for Node {
    fn read_slim<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Spec {
            unschedulable: Option<bool>,
            taints: Option<Vec<ReadTaint>>,
        }
        #[derive(Deserialize)]
        struct ReadTaint {
            #[serde(default)]
            key: String,
            #[serde(default)]
            effect: String,
            value: Option<String>,
        }
        #[derive(Deserialize)]
        struct Status {
            conditions: Option<Vec<Condition>>,
            addresses: Option<Vec<NodeAddress>>,
        }
        #[derive(Deserialize)]
        struct Condition {
            #[serde(rename = "type", default)]
            type_: String,
            #[serde(default)]
            status: String,
        }
        let Object { metadata: m, spec, status } = Object::<Spec, Status>::deserialize(d)?;
        Ok(Node {
            metadata: m.into(),
            spec: spec.map(|s| NodeSpec {
                unschedulable: s.unschedulable,
                taints: s.taints.map(|ts| {
                    let taint = |t: ReadTaint| Taint {
                        key: t.key,
                        effect: t.effect,
                        value: t.value,
                        time_added: None,
                    };
                    ts.into_iter().map(taint).collect()
                }),
                ..Default::default()
            }),
            status: status.map(|s| NodeStatus {
                conditions: s.conditions.map(|cs| {
                    let condition = |c: Condition| NodeCondition {
                        type_: c.type_,
                        status: c.status,
                        ..Default::default()
                    };
                    cs.into_iter().map(condition).collect()
                }),
                addresses: s.addresses,
                ..Default::default()
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use kube::Resource;
    use serde_json::json;

    use super::*;
    use crate::NodeFacts;

    /// A Node as a kubelet writes it, cordoned, with a drain taint, managedFields and images.
    fn written() -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "n1",
                "uid": "u-1",
                "resourceVersion": "42",
                "labels": {"kubernetes.io/hostname": "n1", "zone": "a"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": [{
                    "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-12-02T10:00:00Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}}}}}
                }]
            },
            "spec": {
                "podCIDR": "10.244.1.0/24",
                "unschedulable": true,
                "taints": [{"key": "ferrolb.io/drain", "effect": "NoSchedule", "timeAdded": "2026-12-02T10:00:00Z"}]
            },
            "status": {
                "capacity": {"cpu": "2", "memory": "4Gi"},
                "conditions": [
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-02T10:00:00Z", "reason": "KubeletReady"},
                    {"type": "NetworkUnavailable", "status": "False"}
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "192.0.2.7"},
                    {"type": "Hostname", "address": "n1"}
                ],
                "images": [{"names": ["registry.example/app@sha256:00", "registry.example/app:v1"], "sizeBytes": 1000}],
                "nodeInfo": {"kubeletVersion": "v1.37.0", "machineID": "m", "systemUUID": "s", "bootID": "b",
                             "kernelVersion": "6", "osImage": "Debian", "containerRuntimeVersion": "containerd://2",
                             "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
            }
        })
    }

    #[test]
    fn the_facts_read_the_same_from_a_slim_node_and_the_rest_is_not_kept() {
        let full: Node = serde_json::from_value(written()).unwrap();
        let slim: FactsNode = serde_json::from_value(written()).unwrap();
        assert_eq!(NodeFacts::of(&slim.0), NodeFacts::of(&full));
        assert!(NodeFacts::of(&slim.0).draining.is_some());
        assert_eq!(slim.meta().resource_version.as_deref(), Some("42"));
        assert_eq!(slim.0.metadata.managed_fields, None);
        assert_eq!(slim.0.metadata.annotations, None);
        let status = slim.0.status.as_ref().unwrap();
        assert_eq!((status.images.as_ref(), status.node_info.as_ref()), (None, None));
        assert_eq!(status.conditions.as_ref().unwrap()[0].last_heartbeat_time, None);
        // The same object on the wire, so the same API.
        assert_eq!(FactsNode::url_path(&(), None), Node::url_path(&(), None));
        assert_eq!(FactsNode::api_version(&()), "v1");
    }

    #[test]
    fn a_node_without_spec_or_status_reads_as_an_unready_node() {
        let slim: FactsNode = serde_json::from_value(json!({"metadata": {"name": "n2"}})).unwrap();
        let facts = NodeFacts::of(&slim.0);
        assert!(!facts.ready && facts.addresses.is_empty() && facts.draining.is_none());
    }
}
