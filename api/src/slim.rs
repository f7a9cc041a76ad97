//! Watched objects deserialized with only what ferrolb reads of them ([`Slim`]), so that a
//! watch of every object of a kind holds no more than that, even for a moment.
//!
//! Most of what the apiserver sends is what no load balancer reads: `managedFields` (a tree
//! of JSON per writer, parsed into a map per field), annotations such as kubectl's
//! last-applied configuration, a Service's ports and cluster addresses, an EndpointSlice's
//! ports, zones and hints, a Node's images and `nodeInfo`. Parsed whole and cut after, all
//! of it went through the heap for each object of a list page (500) and each watch event
//! (three a Service created), and glibc kept much of what was freed (the controller's Nodes:
//! [`facts_node`](crate::facts_node)). Here serde skips the rest as it reads it.
//!
//! A `Slim<K>` is watched as a `K` (the same URL, kind and version); what each kind keeps
//! is its [`ReadSlim`] implementation, lenient where the API is strict: a field missing
//! fails no watch of every object.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ObjectReference, Service};
use k8s_openapi::api::core::v1::{ServiceSpec, ServiceStatus};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

/// A `K` holding only what its [`ReadSlim`] reads.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Slim<K>(pub K);

impl<K> Slim<K> {
    /// The object.
    pub fn into_inner(self) -> K {
        self.0
    }
}

/// How a kind is read into a [`Slim`]: the fields ferrolb reads, every other one skipped.
pub trait ReadSlim: Sized {
    /// Reads one object, skipping what is not kept.
    fn read_slim<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
}

impl<'de, K: ReadSlim> Deserialize<'de> for Slim<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::read_slim(d).map(Slim)
    }
}

/// `K`'s API, kind and metadata: a watch of `Slim<K>` is a watch of the `K`s.
impl<K: kube::Resource<DynamicType = ()>> kube::Resource for Slim<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// What is kept of any object's metadata: identity, uid (owner references, Event
/// targets), resourceVersion (a watch resumes from it) and labels.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
}

/// An object as most kinds are written: metadata, then a spec and a status of which each
/// kind names what it reads.
#[derive(Deserialize)]
pub(crate) struct Object<S, T> {
    #[serde(default)]
    pub(crate) metadata: Meta,
    pub(crate) spec: Option<S>,
    pub(crate) status: Option<T>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> ObjectMeta {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            labels: m.labels,
            ..ObjectMeta::default()
        }
    }
}

/// A Service as a load balancer reads it ([`ServiceFields`](crate::ServiceFields)): type,
/// class, traffic policy, selector and the ingress addresses; no ports, cluster addresses
/// or annotations.
impl ReadSlim for Service {
    fn read_slim<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Spec {
            #[serde(rename = "type")]
            type_: Option<String>,
            load_balancer_class: Option<String>,
            external_traffic_policy: Option<String>,
            selector: Option<BTreeMap<String, String>>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Status {
            load_balancer: Option<Balancer>,
        }
        #[derive(Deserialize)]
        struct Balancer {
            ingress: Option<Vec<Ingress>>,
        }
        #[derive(Deserialize)]
        struct Ingress {
            ip: Option<String>,
        }
        let Object { metadata, spec, status } = Object::<Spec, Status>::deserialize(d)?;
        let ingress = |i: Ingress| LoadBalancerIngress { ip: i.ip, ..LoadBalancerIngress::default() };
        Ok(Service {
            metadata: metadata.into(),
            spec: spec.map(|s| ServiceSpec {
                type_: s.type_,
                load_balancer_class: s.load_balancer_class,
                external_traffic_policy: s.external_traffic_policy,
                selector: s.selector,
                ..ServiceSpec::default()
            }),
            status: status.map(|s| ServiceStatus {
                load_balancer: s.load_balancer.map(|b| LoadBalancerStatus {
                    ingress: b.ingress.map(|is| is.into_iter().map(ingress).collect()),
                }),
                ..ServiceStatus::default()
            }),
        })
    }
}

/// An EndpointSlice as a speaker reads it: its labels (the Service it belongs to), address
/// type and, per endpoint, the addresses, conditions, node and target; no ports, zones or
/// hints.
impl ReadSlim for EndpointSlice {
    fn read_slim<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct ReadEndpoint {
            addresses: Option<Vec<String>>,
            conditions: Option<EndpointConditions>,
            node_name: Option<String>,
            target_ref: Option<ObjectReference>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Read {
            #[serde(default)]
            metadata: Meta,
            address_type: Option<String>,
            endpoints: Option<Vec<ReadEndpoint>>,
        }
        let Read { metadata, address_type, endpoints } = Read::deserialize(d)?;
        let endpoint = |e: ReadEndpoint| Endpoint {
            addresses: e.addresses.unwrap_or_default(),
            conditions: e.conditions,
            node_name: e.node_name,
            target_ref: e.target_ref,
            ..Endpoint::default()
        };
        Ok(EndpointSlice {
            metadata: metadata.into(),
            address_type: address_type.unwrap_or_default(),
            endpoints: endpoints.unwrap_or_default().into_iter().map(endpoint).collect(),
            ports: None,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use kube::Resource;
    use serde_json::json;

    use super::*;
    use crate::ServiceFields;

    /// A Service as kubectl and the controller leave it: most of it no load balancer reads.
    fn written_service() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop", "uid": "uid-web", "resourceVersion": "9",
                "labels": {"app": "web"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:ports": {}}}}]},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": "ferrolb.io/lb", "externalTrafficPolicy": "Local",
                "selector": {"app": "web"}, "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}],
                "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"},
            "status": {"loadBalancer": {"ingress": [
                {"ip": "203.0.113.10", "ipMode": "VIP", "ports": [{"port": 80, "protocol": "TCP"}]},
                {"hostname": "lb.example"}]}}
        })
    }

    #[test]
    fn a_slim_service_reads_as_the_whole_one_and_keeps_nothing_else() {
        let whole: Service = serde_json::from_value(written_service()).unwrap();
        let Slim(slim) = serde_json::from_value::<Slim<Service>>(written_service()).unwrap();
        assert_eq!(ServiceFields::of(&slim), ServiceFields::of(&whole));
        assert_eq!(ServiceFields::of(&slim).ingress.len(), 1);
        assert_eq!(slim.metadata.uid, whole.metadata.uid);
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("9"));
        assert_eq!((slim.metadata.annotations, slim.metadata.managed_fields), (None, None));
        let spec = slim.spec.unwrap();
        assert_eq!((spec.ports, spec.cluster_ip), (None, None));
        assert_eq!(Slim::<Service>::url_path(&(), Some("shop")), Service::url_path(&(), Some("shop")));
    }

    #[test]
    fn a_slim_slice_keeps_its_endpoints_and_drops_ports_zones_and_hints() {
        let written = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-abcde", "namespace": "shop", "resourceVersion": "5",
                "labels": {"kubernetes.io/service-name": "web"},
                "managedFields": [{"manager": "kube-controller-manager", "fieldsType": "FieldsV1", "fieldsV1": {}}]},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "node1", "zone": "z1",
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "shop", "uid": "p0"},
                "hints": {"forZones": [{"name": "z1"}]}}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        });
        let whole: EndpointSlice = serde_json::from_value(written.clone()).unwrap();
        let Slim(slim) = serde_json::from_value::<Slim<EndpointSlice>>(written).unwrap();
        let kept = Endpoint { zone: None, hints: None, ..whole.endpoints[0].clone() };
        assert_eq!(slim.endpoints, vec![kept]);
        assert_eq!((slim.address_type.as_str(), slim.ports), ("IPv4", None));
        assert_eq!(slim.metadata.labels, whole.metadata.labels);
        assert_eq!(slim.metadata.managed_fields, None);
        // The apiserver writes an empty slice's endpoints as null.
        let empty = json!({"metadata": {"name": "e"}, "addressType": "IPv4", "endpoints": null});
        assert!(serde_json::from_value::<Slim<EndpointSlice>>(empty).unwrap().0.endpoints.is_empty());
    }
}
