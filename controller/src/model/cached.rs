//! The Service as the controller's watch cache keeps it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_api::{ANNOTATION_IP_ALLOCATED_FROM_POOL, SERVICE_ANNOTATIONS};
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Service, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::Deserialize;

use crate::ipam::{Family, FamilyPolicy, Protocol, ServiceKey, TrafficPolicy};

/// A Service cut down to what the controller reads, in compact form. With 100k Services
/// the cache is most of the controller's memory, and a `k8s_openapi` Service, even with
/// every unread field dropped, costs about 2 KB: an 824-byte struct, a 544-byte B-tree
/// leaf for a single annotation, a heap string for every enum-like field. Not even an
/// `ObjectMeta` (360 bytes, most of them fields never read) is kept: this one costs a
/// fraction of that, and its key is the one the cache, the queue and the allocator share.
///
/// It is decoded from the API's JSON as a whole Service and converted at once
/// ([`From<Service>`]); it is only read, never written back. Kept: what object references
/// and Events need (namespace/name, uid, resourceVersion, generation), the creation time
/// and labels, of the annotations only those the request reads (in every spelling, see
/// [`SERVICE_ANNOTATIONS`]) and the one the controller writes; the spec of a
/// `type: LoadBalancer` Service as the request needs it; the status's ingress and
/// conditions, which reconcile compares and rewrites.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "Service")]
pub struct CachedService {
    /// `namespace/name`.
    pub key: ServiceKey,
    /// `metadata.uid`.
    pub uid: Option<Box<str>>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<Box<str>>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `metadata.creationTimestamp`, in seconds since the epoch (0 when unset).
    pub created: i64,
    /// The annotations the request reads (not `allocated_from`).
    pub annotations: BTreeMap<String, String>,
    /// `metadata.labels`, shared with the allocation request built from them.
    pub labels: Arc<BTreeMap<String, String>>,
    /// `ferrolb.io/ip-allocated-from-pool`, kept apart from the map: in the common case it
    /// is a Service's only annotation the controller reads, and a map of one costs 544 bytes.
    pub allocated_from: Option<Box<str>>,
    /// The spec, when `type: LoadBalancer`.
    pub load_balancer: Option<LoadBalancerSpec>,
    /// `status.loadBalancer.ingress`.
    pub ingress: Box<[Ingress]>,
    /// `status.conditions`, every one (a write of ours replaces the whole list).
    pub conditions: Vec<Condition>,
}

/// A reference to the Service of `key`, without its uid (for a Service not in the cache).
pub fn service_reference(key: &ServiceKey) -> ObjectReference {
    ObjectReference {
        api_version: Some(<Service as k8s_openapi::Resource>::API_VERSION.into()),
        kind: Some(<Service as k8s_openapi::Resource>::KIND.into()),
        namespace: Some(key.namespace().to_owned()),
        name: Some(key.name().to_owned()),
        ..Default::default()
    }
}

impl CachedService {
    /// A reference to the Service, as kube's `Resource::object_ref` makes it.
    pub fn object_ref(&self) -> ObjectReference {
        ObjectReference { uid: self.uid.as_deref().map(str::to_owned), ..service_reference(&self.key) }
    }

    /// A reference to this version of the Service (see [`crate::context::versioned_ref`]).
    pub fn versioned_ref(&self) -> ObjectReference {
        ObjectReference {
            resource_version: self.resource_version.as_deref().map(str::to_owned),
            ..self.object_ref()
        }
    }
}

/// A Service as the watch decodes it: the cached form, and the one field of metadata the
/// watch itself reads (the resourceVersion it resumes from). Every page of a list holds
/// up to 500 of these at once.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(from = "Service")]
pub struct WatchedService {
    /// Only `resourceVersion`.
    pub metadata: ObjectMeta,
    /// The Service.
    pub service: CachedService,
}

impl From<Service> for WatchedService {
    fn from(svc: Service) -> Self {
        let metadata =
            ObjectMeta { resource_version: svc.metadata.resource_version.clone(), ..Default::default() };
        WatchedService { metadata, service: svc.into() }
    }
}

/// A Namespace as the controller's watch cache keeps it: its labels, in one map that
/// every allocation request of a Service in it shares.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "Namespace")]
pub struct CachedNamespace {
    /// Name, uid and resourceVersion. Not the labels: see `labels`.
    pub metadata: ObjectMeta,
    /// `metadata.labels`.
    pub labels: Arc<BTreeMap<String, String>>,
}

impl From<Namespace> for CachedNamespace {
    fn from(ns: Namespace) -> Self {
        let m = ns.metadata;
        CachedNamespace {
            metadata: ObjectMeta {
                name: m.name,
                uid: m.uid,
                resource_version: m.resource_version,
                ..Default::default()
            },
            labels: Arc::new(m.labels.unwrap_or_default()),
        }
    }
}

/// What the controller reads of a `type: LoadBalancer` Service's spec.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadBalancerSpec {
    /// `spec.loadBalancerClass`.
    pub class: Option<Box<str>>,
    /// `spec.loadBalancerIP`, as written.
    pub load_balancer_ip: Option<Box<str>>,
    /// `spec.ipFamilyPolicy` with `spec.ipFamilies[0]` as the primary family.
    pub families: FamilyPolicy,
    /// `spec.ports`: (protocol, port).
    pub ports: Box<[(Protocol, u16)]>,
    /// `spec.externalTrafficPolicy`.
    pub traffic_policy: TrafficPolicy,
    /// `spec.selector` in canonical form (`a=1,b=2`), when not empty.
    pub backend_key: Option<Box<str>>,
}

/// One `status.loadBalancer.ingress` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ingress {
    /// Its `ip`, when that is an address.
    pub ip: Option<IpAddr>,
    /// Whether the entry is exactly what the controller writes for `ip`: the address in
    /// canonical form, `ipMode: VIP`, no hostname.
    pub as_written: bool,
}

impl From<Service> for CachedService {
    fn from(svc: Service) -> Self {
        let m = svc.metadata;
        let mut annotations = m.annotations.unwrap_or_default();
        let allocated_from =
            annotations.remove(ANNOTATION_IP_ALLOCATED_FROM_POOL).map(String::into_boxed_str);
        let read: BTreeMap<String, String> = annotations
            .into_iter()
            .filter(|(k, _)| {
                SERVICE_ANNOTATIONS.iter().any(|(key, metallb)| key == k || metallb.contains(&k.as_str()))
            })
            .collect();
        let status = svc.status.unwrap_or_default();
        CachedService {
            key: ServiceKey::new(m.namespace.unwrap_or_default(), m.name.unwrap_or_default()),
            uid: m.uid.map(String::into_boxed_str),
            resource_version: m.resource_version.map(String::into_boxed_str),
            generation: m.generation,
            created: m.creation_timestamp.map_or(0, |t| t.0.as_second()),
            annotations: read,
            labels: Arc::new(m.labels.unwrap_or_default()),
            allocated_from,
            load_balancer: svc.spec.filter(|s| s.type_.as_deref() == Some("LoadBalancer")).map(spec),
            ingress: status
                .load_balancer
                .and_then(|lb| lb.ingress)
                .unwrap_or_default()
                .into_iter()
                .map(|i| {
                    let ip = i.ip.as_deref().and_then(|s| s.parse::<IpAddr>().ok());
                    let canonical = ip.is_some_and(|a| i.ip.as_deref() == Some(a.to_string().as_str()));
                    Ingress {
                        ip,
                        as_written: canonical && i.ip_mode.as_deref() == Some("VIP") && i.hostname.is_none(),
                    }
                })
                .collect(),
            conditions: status.conditions.unwrap_or_default(),
        }
    }
}

fn spec(s: ServiceSpec) -> LoadBalancerSpec {
    let primary = match s.ip_families.as_ref().and_then(|f| f.first()).map(String::as_str) {
        Some("IPv6") => Family::V6,
        _ => Family::V4,
    };
    LoadBalancerSpec {
        class: s.load_balancer_class.map(String::into_boxed_str),
        load_balancer_ip: s.load_balancer_ip.map(String::into_boxed_str),
        families: match s.ip_family_policy.as_deref() {
            Some("PreferDualStack") => FamilyPolicy::PreferDualStack(primary),
            Some("RequireDualStack") => FamilyPolicy::RequireDualStack(primary),
            _ => FamilyPolicy::SingleStack(primary),
        },
        ports: s
            .ports
            .iter()
            .flatten()
            .map(|p| {
                let protocol = match p.protocol.as_deref() {
                    Some("UDP") => Protocol::Udp,
                    Some("SCTP") => Protocol::Sctp,
                    _ => Protocol::Tcp,
                };
                (protocol, u16::try_from(p.port).unwrap_or(0))
            })
            .collect(),
        traffic_policy: match s.external_traffic_policy.as_deref() {
            Some("Local") => TrafficPolicy::Local,
            _ => TrafficPolicy::Cluster,
        },
        // BTreeMap iterates sorted, so equal selectors give equal keys.
        backend_key: s.selector.filter(|s| !s.is_empty()).map(|s| {
            s.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",").into_boxed_str()
        }),
    }
}

/// Makes a cached type stand for its API kind, whose JSON it is decoded from: the watch
/// lists and watches that kind.
macro_rules! stands_for {
    ($cached:ty, $kind:ty) => {
        impl k8s_openapi::Resource for $cached {
            const API_VERSION: &'static str = <$kind as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$kind as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$kind as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$kind as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str = <$kind as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$kind as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::Metadata for $cached {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

stands_for!(WatchedService, Service);
stands_for!(CachedNamespace, Namespace);
