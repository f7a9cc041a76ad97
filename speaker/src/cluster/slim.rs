//! What the speaker keeps of a watched object: the fields its model reads, and nothing of
//! the rest (managedFields, annotations, a Node's images and capacity, a Service's ports,
//! an EndpointSlice's ports and hints). Nodes, Services and EndpointSlices are read as
//! [`Slim`](ferrolb_api::Slim) objects, the rest skipped as it is parsed; a Node is cut
//! further here (its conditions but Ready and NetworkUnavailable, its addresses but
//! InternalIP). A list of 5 000 Nodes or 10 000 Services is held whole until it completes,
//! and what a burst of whole objects fragmented stayed in the speaker's RSS after it was
//! freed (glibc returns it only partly).
//!
//! The model reads each kind through `ClusterModel::upsert_*`; a test feeds whole objects
//! and what the speaker keeps of them to two models and compares them, so a field the
//! model starts reading that is not kept fails it.

use ferrolb_api::{FactsNode, Slim};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Identity, labels and the uid (owner references and Event targets); no annotations,
/// managedFields or server-set times.
fn meta(m: ObjectMeta) -> ObjectMeta {
    ObjectMeta { name: m.name, namespace: m.namespace, uid: m.uid, labels: m.labels, ..ObjectMeta::default() }
}

/// A Node: labels, cordon and taints, conditions Ready and NetworkUnavailable (type and
/// status), InternalIP addresses.
pub fn node(n: Node) -> Node {
    let spec =
        n.spec.map(|s| NodeSpec { unschedulable: s.unschedulable, taints: s.taints, ..NodeSpec::default() });
    let status = n.status.map(|s| NodeStatus {
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| c.type_ == "Ready" || c.type_ == "NetworkUnavailable")
                .map(|c| NodeCondition { type_: c.type_, status: c.status, ..NodeCondition::default() })
                .collect()
        }),
        addresses: s
            .addresses
            .map(|a| a.into_iter().filter(|a| a.type_ == "InternalIP").collect::<Vec<NodeAddress>>()),
        ..NodeStatus::default()
    });
    Node { metadata: meta(n.metadata), spec, status }
}

/// A Node deserialized as its facts read it ([`FactsNode`]: no managedFields, images or
/// nodeInfo are parsed), cut further by [`node`].
pub fn facts_node(Slim(n): FactsNode) -> Node {
    node(n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;

    use super::*;
    use crate::model::ClusterModel;

    /// A Node as a kubelet writes it: most of it is of no use to a speaker.
    fn full_node(name: &str, ready: &str, cordoned: bool) -> serde_json::Value {
        json!({
            "metadata": {"name": name, "uid": "u-1", "resourceVersion": "77",
                "labels": {"kubernetes.io/hostname": name, "rack": "a"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock"},
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {}, "f:images": {}}}}]},
            "spec": {"podCIDR": "10.244.1.0/24", "unschedulable": cordoned,
                "taints": [{"key": "ferrolb.io/drain", "effect": "NoSchedule"}, {"key": "other", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                    {"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "kubelet is posting ready status",
                     "lastHeartbeatTime": "2026-11-29T07:00:00Z", "lastTransitionTime": "2026-11-29T06:00:00Z"},
                    {"type": "NetworkUnavailable", "status": "False"}],
                "addresses": [{"type": "InternalIP", "address": "192.0.2.11"}, {"type": "InternalIP", "address": "2001:db8::11"},
                    {"type": "Hostname", "address": name}, {"type": "ExternalIP", "address": "198.51.100.7"}],
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
                "allocatable": {"cpu": "2", "memory": "7Gi", "pods": "110"},
                "images": [{"names": ["registry.k8s.io/pause@sha256:0123", "registry.k8s.io/pause:3.10"], "sizeBytes": 320_000}],
                "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1", "osImage": "Debian",
                    "containerRuntimeVersion": "containerd://2.0", "kubeletVersion": "v1.33.0", "kubeProxyVersion": "",
                    "operatingSystem": "linux", "architecture": "amd64"}}
        })
    }

    fn full_service(name: &str, class: Option<&str>, policy: &str) -> serde_json::Value {
        json!({
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "resourceVersion": "9",
                "labels": {"app": name, "tier": "web"},
                "annotations": {"ferrolb.io/address-pool": "public", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": class, "externalTrafficPolicy": policy,
                "selector": {"app": name}, "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}],
                "sessionAffinity": "None", "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "PreferDualStack"},
            "status": {"loadBalancer": {"ingress": [
                {"ip": "203.0.113.10", "ipMode": "VIP", "ports": [{"port": 80, "protocol": "TCP"}]},
                {"ip": "2001:db8:1::10"}, {"hostname": "lb.example"}]},
                "conditions": [{"type": "Ready", "status": "True", "reason": "x", "message": "", "lastTransitionTime": "2026-11-29T07:00:00Z"}]}
        })
    }

    fn full_slice(name: &str, service: &str) -> serde_json::Value {
        json!({
            "metadata": {"name": name, "namespace": "shop", "uid": "s-1", "generateName": format!("{service}-"),
                "labels": {"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
                "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-29T07:00:00Z"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": service, "uid": "x"}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}]},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.1"], "nodeName": "node1", "zone": "z1", "hostname": "web-0",
                 "conditions": {"ready": true, "serving": true, "terminating": false},
                 "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "shop", "uid": "p0"},
                 "hints": {"forZones": [{"name": "z1"}]}},
                {"addresses": ["10.0.0.2"], "nodeName": "node2",
                 "conditions": {"ready": false, "serving": true, "terminating": true},
                 "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "shop", "uid": "p1"}},
                {"addresses": ["10.0.0.3"], "conditions": {}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"}]
        })
    }

    /// `o` read as a `T`.
    fn read<T: serde::de::DeserializeOwned>(o: &serde_json::Value) -> T {
        serde_json::from_value(o.clone()).unwrap()
    }

    /// Two models, one fed the objects as the apiserver sends them and one fed what
    /// the speaker keeps of them, must not differ in anything the speaker reads.
    #[test]
    fn a_model_fed_slim_objects_equals_one_fed_whole_objects() {
        let nodes = [
            full_node("node1", "True", false),
            full_node("node2", "False", true),
            full_node("node3", "True", false),
        ];
        let services = [
            full_service("web", None, "Local"),
            full_service("api", Some("ferrolb.io/lb"), "Cluster"),
            full_service("other", Some("example.com/lb"), "Cluster"),
        ];
        let slices = [full_slice("web-abcde", "web"), full_slice("api-fghij", "api")];
        let mut whole = ClusterModel::default();
        whole.lb_class = "ferrolb.io/lb".into();
        let mut kept = whole.clone();
        for n in &nodes {
            whole.upsert_node(&read(n));
            kept.upsert_node(&facts_node(read(n)));
        }
        for s in &services {
            whole.upsert_service(&read(s));
            kept.upsert_service(&read::<Slim<Service>>(s).0);
        }
        for e in &slices {
            whole.upsert_endpoint_slice(&read(e));
            kept.upsert_endpoint_slice(&read::<Slim<EndpointSlice>>(e).0);
        }
        assert_eq!(kept, whole);
        // Not vacuous: the model read what the slim objects kept.
        assert_eq!(whole.nodes.len(), 3);
        assert_eq!(whole.services.len(), 2);
        assert!(whole.nodes["node2"].draining.is_some());
        assert_eq!(whole.nodes["node1"].addresses.len(), 2);
        assert_eq!(whole.endpoint_slices.values().flat_map(|s| crate::model::endpoint_refs(s)).count(), 6);
    }

    /// What goes: the bulk of each object.
    #[test]
    fn slim_objects_drop_what_no_speaker_reads() {
        let n = facts_node(read(&full_node("node1", "True", false)));
        assert_eq!(n.metadata.managed_fields, None);
        assert_eq!(n.metadata.annotations, None);
        let status = n.status.unwrap();
        assert_eq!((status.images, status.node_info, status.capacity), (None, None, None));
        assert_eq!(status.conditions.unwrap().len(), 2);
        assert_eq!(status.addresses.unwrap().len(), 2);
        let s: Slim<Service> = read(&full_service("web", None, "Local"));
        assert_eq!((s.0.spec.unwrap().ports, s.0.metadata.annotations), (None, None));
        let e: Slim<EndpointSlice> = read(&full_slice("web-abcde", "web"));
        assert_eq!((e.0.ports, e.0.metadata.owner_references), (None, None));
        assert!(e.0.endpoints.iter().all(|ep| ep.hints.is_none() && ep.zone.is_none()));
        // Smaller by most of it (as JSON, a fair proxy of the heap it takes).
        let whole = full_node("node1", "True", false);
        let (before, after) =
            (whole.to_string().len(), serde_json::to_vec(&facts_node(read(&whole))).unwrap().len());
        assert!(before > 3 * after, "{before} vs {after}");
    }
}
