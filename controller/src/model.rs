//! The edge between Kubernetes objects and the pure IPAM: every Service, Namespace and
//! IPAddressPool field the allocator needs is read here and nowhere else.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ferrolb_api::{
    ANNOTATION_ADDRESS_POOL, ANNOTATION_ALLOW_SHARED_IP, ANNOTATION_IP_ALLOCATED_FROM_POOL,
    ANNOTATION_LOAD_BALANCER_IPS, IpAddressPool, SERVICE_ANNOTATIONS, parse_load_balancer_ips,
    service_annotation,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::ResourceExt;

use crate::ipam::{
    AddrRange, Assigned, Family, FamilyPolicy, LabelSelector, Operator, Placement, PoolSpec, Protocol,
    Requirement, ServiceAllocation, ServiceKey, ServiceRequest, TrafficPolicy,
};

/// Whether a Service is ours, someone else's, or not a load balancer at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `type: LoadBalancer` with no class or with our `--lb-class`.
    Served,
    /// `type: LoadBalancer` with another class: never touched.
    Foreign,
    /// Not `type: LoadBalancer`.
    NotLoadBalancer,
}

/// How the controller classifies a Service for `--lb-class`.
pub fn classify(svc: &Service, lb_class: &str) -> Class {
    let Some(spec) = &svc.spec else {
        return Class::NotLoadBalancer;
    };
    if spec.type_.as_deref() != Some("LoadBalancer") {
        return Class::NotLoadBalancer;
    }
    match spec.load_balancer_class.as_deref() {
        None => Class::Served,
        Some(c) if c == lb_class => Class::Served,
        Some(_) => Class::Foreign,
    }
}

/// Annotation kubectl apply keeps a whole copy of the object in; nothing here reads it.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Cuts a Service down to what the controller reads, before the watch cache keeps it:
/// with 100k Services the cache is most of the controller's memory, and most of a Service
/// is fields it never reads (managedFields above all). Kept, and only kept: the metadata of
/// object references and Events (name, namespace, uid, resourceVersion, generation), the
/// creation time, labels and annotations (but kubectl's last-applied copy) for the
/// request; the spec fields of [`classify`] and [`service_request`]; the whole status
/// (ingress and conditions, which reconcile compares and rewrites). The watch events the
/// cache is fed from are trimmed alike (their reader needs names only). A reader of
/// another field must keep it here (`trimmed_keeps_what_the_controller_reads` checks the
/// present readers).
pub fn trim_for_cache(svc: &mut Service) {
    let full = std::mem::take(svc);
    let m = full.metadata;
    let annotations = m.annotations.map(|mut a| {
        a.remove(LAST_APPLIED);
        a
    });
    let spec = full.spec.map(|s| k8s_openapi::api::core::v1::ServiceSpec {
        type_: s.type_,
        load_balancer_class: s.load_balancer_class,
        load_balancer_ip: s.load_balancer_ip,
        ip_families: s.ip_families,
        ip_family_policy: s.ip_family_policy,
        ports: s.ports.map(|ports| {
            ports
                .into_iter()
                .map(|p| k8s_openapi::api::core::v1::ServicePort {
                    port: p.port,
                    protocol: p.protocol,
                    ..Default::default()
                })
                .collect()
        }),
        external_traffic_policy: s.external_traffic_policy,
        selector: s.selector,
        ..Default::default()
    });
    *svc = Service {
        metadata: meta::ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            creation_timestamp: m.creation_timestamp,
            labels: m.labels,
            annotations,
            ..Default::default()
        },
        spec,
        status: full.status,
    };
}

/// The Service's namespace/name.
pub fn service_key(svc: &Service) -> ServiceKey {
    ServiceKey::new(svc.namespace().unwrap_or_default(), svc.name_any())
}

/// A Service whose request cannot be built; the message names the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// `ferrolb.io/loadBalancerIPs` (or MetalLB's spelling) does not parse.
    #[error("service {service}: annotation {annotation}: {source}")]
    LoadBalancerIps {
        /// The Service.
        service: ServiceKey,
        /// The spelling that was read.
        annotation: &'static str,
        /// Why.
        source: ferrolb_api::LoadBalancerIpsError,
    },
    /// `spec.loadBalancerIP` is not an address.
    #[error(
        "service {service}: spec.loadBalancerIP {value:?} is not an IP address; write e.g. 203.0.113.10 or use the {ANNOTATION_LOAD_BALANCER_IPS} annotation"
    )]
    LoadBalancerIp {
        /// The Service.
        service: ServiceKey,
        /// The value.
        value: String,
    },
}

/// Maps a Service and its namespace's labels onto what the allocator needs. The
/// annotations are read in ferrolb's spelling or MetalLB's ([`SERVICE_ANNOTATIONS`]).
pub fn service_request(
    svc: &Service,
    namespace_labels: &BTreeMap<String, String>,
) -> Result<ServiceRequest, RequestError> {
    let key = service_key(svc);
    let annotations = svc.annotations();
    let spec = svc.spec.clone().unwrap_or_default();
    let requested =
        match service_annotation(annotations, ANNOTATION_LOAD_BALANCER_IPS) {
            Some(a) => parse_load_balancer_ips(a.value).map_err(|source| RequestError::LoadBalancerIps {
                service: key.clone(),
                annotation: a.key,
                source,
            })?,
            None => match spec.load_balancer_ip.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
                Some(v) => vec![v.parse::<IpAddr>().map_err(|_| RequestError::LoadBalancerIp {
                    service: key.clone(),
                    value: v.to_owned(),
                })?],
                None => Vec::new(),
            },
        };
    let text = |k: &str| {
        service_annotation(annotations, k).map(|a| a.value.trim().to_owned()).filter(|v| !v.is_empty())
    };
    Ok(ServiceRequest {
        namespace_labels: namespace_labels.clone(),
        service_labels: svc.labels().clone(),
        families: family_policy(&spec),
        requested,
        pool: text(ANNOTATION_ADDRESS_POOL),
        sharing_key: text(ANNOTATION_ALLOW_SHARED_IP),
        ports: spec
            .ports
            .iter()
            .flatten()
            .map(|p| (protocol(p.protocol.as_deref()), u16::try_from(p.port).unwrap_or(0)))
            .collect(),
        traffic_policy: match spec.external_traffic_policy.as_deref() {
            Some("Local") => TrafficPolicy::Local,
            _ => TrafficPolicy::Cluster,
        },
        backend_key: spec.selector.as_ref().filter(|s| !s.is_empty()).map(|s| {
            // BTreeMap iterates sorted, so equal selectors give equal keys.
            s.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
        }),
        created: svc.metadata.creation_timestamp.as_ref().map_or(0, |t| t.0.as_second()),
        key,
    })
}

/// For crash recovery: the request as well as it can be read. A Service whose requested
/// addresses no longer parse still holds what its status says.
pub fn replay_request(svc: &Service, namespace_labels: &BTreeMap<String, String>) -> ServiceRequest {
    match service_request(svc, namespace_labels) {
        Ok(r) => r,
        Err(_) => {
            let mut lenient = svc.clone();
            if let Some(a) = lenient.metadata.annotations.as_mut() {
                for (key, metallb) in
                    SERVICE_ANNOTATIONS.iter().filter(|(k, _)| *k == ANNOTATION_LOAD_BALANCER_IPS)
                {
                    for k in std::iter::once(key).chain(metallb) {
                        a.remove(*k);
                    }
                }
            }
            if let Some(s) = lenient.spec.as_mut() {
                s.load_balancer_ip = None;
            }
            // Cannot fail: both fallible fields are gone.
            service_request(&lenient, namespace_labels)
                .unwrap_or_else(|_| ServiceRequest { key: service_key(svc), ..ServiceRequest::default() })
        }
    }
}

/// The note of the one Event saying which MetalLB spellings a Service's annotations are
/// read in (and which lose to another spelling); `None` when it uses none. It depends on
/// the annotation keys only, so a new note means the set of spellings changed.
pub fn metallb_note(svc: &Service) -> Option<String> {
    let annotations = svc.annotations();
    let (mut read, mut ignored) = (Vec::new(), Vec::new());
    for (key, _) in SERVICE_ANNOTATIONS {
        let Some(a) = service_annotation(annotations, key) else { continue };
        if a.is_metallb() {
            read.push(format!("{} as {key}", a.key));
        }
        ignored.extend(a.shadowed.iter().map(|s| format!("{s} ({} is set and wins)", a.key)));
    }
    let mut parts = Vec::new();
    if !read.is_empty() {
        parts.push(format!(
            "reads MetalLB's annotation {}: MetalLB's spelling is accepted for migration; rename it to the \
             ferrolb.io one (`ferrolb-controller migrate-from-metallb` converts it)",
            read.join(", ")
        ));
    }
    if !ignored.is_empty() {
        parts.push(format!("ignores {}", ignored.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn protocol(p: Option<&str>) -> Protocol {
    match p {
        Some("UDP") => Protocol::Udp,
        Some("SCTP") => Protocol::Sctp,
        _ => Protocol::Tcp,
    }
}

fn family_policy(spec: &k8s_openapi::api::core::v1::ServiceSpec) -> FamilyPolicy {
    let primary = match spec.ip_families.as_ref().and_then(|f| f.first()).map(String::as_str) {
        Some("IPv6") => Family::V6,
        _ => Family::V4,
    };
    match spec.ip_family_policy.as_deref() {
        Some("PreferDualStack") => FamilyPolicy::PreferDualStack(primary),
        Some("RequireDualStack") => FamilyPolicy::RequireDualStack(primary),
        _ => FamilyPolicy::SingleStack(primary),
    }
}

/// Addresses in `status.loadBalancer.ingress` (hostnames and junk ignored).
pub fn ingress_ips(svc: &Service) -> Vec<IpAddr> {
    svc.status
        .iter()
        .flat_map(|s| s.load_balancer.iter())
        .flat_map(|lb| lb.ingress.iter().flatten())
        .filter_map(|i| i.ip.as_deref().and_then(|ip| ip.parse().ok()))
        .collect()
}

/// The `ferrolb.io/ip-allocated-from-pool` value for these addresses: the pools they are
/// attributed to, comma-separated (one in the common case); `None` when every address is orphaned.
pub fn pool_annotation(assigned: &[Assigned]) -> Option<String> {
    let mut pools: Vec<&str> = Vec::new();
    for a in assigned {
        if let Placement::Pool(p) = &a.placement
            && !pools.contains(&p.as_str())
        {
            pools.push(p);
        }
    }
    (!pools.is_empty()).then(|| pools.join(","))
}

/// The annotation as the Service carries it now.
pub fn current_pool_annotation(svc: &Service) -> Option<&str> {
    svc.annotations().get(ANNOTATION_IP_ALLOCATED_FROM_POOL).map(String::as_str)
}

/// Maps a validated IPAddressPool onto the allocator's spec. Only called on pools that
/// passed the validator, so a parse failure here is reported rather than expected.
pub fn pool_spec(pool: &IpAddressPool) -> Result<PoolSpec, String> {
    let name = pool.name_any();
    let ranges = pool
        .spec
        .addresses
        .iter()
        .enumerate()
        .map(|(i, a)| {
            a.parse::<AddrRange>().map_err(|e| format!("IPAddressPool/{name}: spec.addresses[{i}]: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let allocation = pool.spec.service_allocation.as_ref().map(|sa| ServiceAllocation {
        priority: sa.priority,
        namespaces: sa.namespaces.iter().cloned().collect(),
        namespace_selectors: sa.namespace_selectors.iter().map(selector).collect(),
        service_selectors: sa.service_selectors.iter().map(selector).collect(),
    });
    Ok(PoolSpec {
        name,
        ranges,
        auto_assign: pool.spec.auto_assign,
        avoid_buggy_ips: pool.spec.avoid_buggy_ips,
        allocation,
    })
}

fn selector(s: &meta::LabelSelector) -> LabelSelector {
    LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|e| {
                let values: BTreeSet<String> = e.values.iter().flatten().cloned().collect();
                Requirement {
                    key: e.key.clone(),
                    op: match e.operator.as_str() {
                        "In" => Operator::In(values),
                        "NotIn" => Operator::NotIn(values),
                        "Exists" => Operator::Exists,
                        // The validator rejects other operators before we get here.
                        _ => Operator::DoesNotExist,
                    },
                }
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn svc(annotations: &[(&str, &str)], spec: ServiceSpec) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("team-a".into()),
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            spec: Some(ServiceSpec { type_: Some("LoadBalancer".into()), ..spec }),
            status: None,
        }
    }

    #[test]
    fn classes() {
        let mut s = svc(&[], ServiceSpec::default());
        assert_eq!(classify(&s, "ferrolb.io/lb"), Class::Served);
        s.spec.as_mut().unwrap().load_balancer_class = Some("ferrolb.io/lb".into());
        assert_eq!(classify(&s, "ferrolb.io/lb"), Class::Served);
        s.spec.as_mut().unwrap().load_balancer_class = Some("other.io/lb".into());
        assert_eq!(classify(&s, "ferrolb.io/lb"), Class::Foreign);
        s.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert_eq!(classify(&s, "ferrolb.io/lb"), Class::NotLoadBalancer);
    }

    #[test]
    fn request_fields() {
        let s = svc(
            &[(ANNOTATION_LOAD_BALANCER_IPS, "192.0.2.5, 2001:db8::5"), (ANNOTATION_ALLOW_SHARED_IP, "k")],
            ServiceSpec {
                ip_family_policy: Some("RequireDualStack".into()),
                ip_families: Some(vec!["IPv6".into(), "IPv4".into()]),
                load_balancer_ip: Some("192.0.2.99".into()),
                ports: Some(vec![ServicePort {
                    port: 53,
                    protocol: Some("UDP".into()),
                    ..Default::default()
                }]),
                selector: Some(
                    [("b".to_string(), "2".to_string()), ("a".to_string(), "1".to_string())].into(),
                ),
                external_traffic_policy: Some("Local".into()),
                ..Default::default()
            },
        );
        let r = service_request(&s, &BTreeMap::new()).unwrap();
        assert_eq!(r.key, ServiceKey::new("team-a", "web"));
        assert_eq!(r.families, FamilyPolicy::RequireDualStack(Family::V6));
        assert_eq!(r.requested.len(), 2, "the annotation wins over spec.loadBalancerIP");
        assert_eq!(r.sharing_key.as_deref(), Some("k"));
        assert_eq!(r.ports, vec![(Protocol::Udp, 53)]);
        assert_eq!(r.backend_key.as_deref(), Some("a=1,b=2"));
        assert_eq!(r.traffic_policy, TrafficPolicy::Local);

        let s = svc(&[], ServiceSpec { load_balancer_ip: Some("192.0.2.99".into()), ..Default::default() });
        let r = service_request(&s, &BTreeMap::new()).unwrap();
        assert_eq!(r.requested, vec!["192.0.2.99".parse::<IpAddr>().unwrap()]);
        assert_eq!(r.families, FamilyPolicy::SingleStack(Family::V4));
    }

    #[test]
    fn bad_requests_name_the_field() {
        let s = svc(&[(ANNOTATION_LOAD_BALANCER_IPS, "nope")], ServiceSpec::default());
        let e = service_request(&s, &BTreeMap::new()).unwrap_err().to_string();
        assert!(e.contains("team-a/web") && e.contains(ANNOTATION_LOAD_BALANCER_IPS), "{e}");
        assert!(replay_request(&s, &BTreeMap::new()).requested.is_empty());
        let s = svc(&[], ServiceSpec { load_balancer_ip: Some("x".into()), ..Default::default() });
        let e = service_request(&s, &BTreeMap::new()).unwrap_err().to_string();
        assert!(e.contains("spec.loadBalancerIP"), "{e}");
    }

    #[test]
    fn metallb_spellings_are_read_and_named_in_the_note() {
        let s = svc(
            &[
                ("metallb.universe.tf/loadBalancerIPs", "192.0.2.7"),
                ("metallb.io/address-pool", "lan"),
                ("metallb.universe.tf/address-pool", "old"),
                (ANNOTATION_ALLOW_SHARED_IP, "k"),
                ("metallb.io/allow-shared-ip", "other"),
            ],
            ServiceSpec::default(),
        );
        let r = service_request(&s, &BTreeMap::new()).unwrap();
        assert_eq!(r.requested, vec!["192.0.2.7".parse::<IpAddr>().unwrap()]);
        assert_eq!((r.pool.as_deref(), r.sharing_key.as_deref()), (Some("lan"), Some("k")));
        let note = metallb_note(&s).unwrap();
        assert_eq!(
            note,
            "reads MetalLB's annotation metallb.universe.tf/loadBalancerIPs as ferrolb.io/loadBalancerIPs, \
             metallb.io/address-pool as ferrolb.io/address-pool: MetalLB's spelling is accepted for migration; \
             rename it to the ferrolb.io one (`ferrolb-controller migrate-from-metallb` converts it); ignores \
             metallb.universe.tf/address-pool (metallb.io/address-pool is set and wins), metallb.io/allow-shared-ip \
             (ferrolb.io/allow-shared-ip is set and wins)"
        );
        assert_eq!(metallb_note(&svc(&[(ANNOTATION_ADDRESS_POOL, "lan")], ServiceSpec::default())), None);
        // A bad MetalLB value is reported under its own name, and replay ignores it.
        let s = svc(&[("metallb.io/loadBalancerIPs", "nope")], ServiceSpec::default());
        let e = service_request(&s, &BTreeMap::new()).unwrap_err().to_string();
        assert!(e.contains("annotation metallb.io/loadBalancerIPs: \"nope\" is not an IP address"), "{e}");
        assert!(replay_request(&s, &BTreeMap::new()).requested.is_empty());
    }

    #[test]
    fn annotation_lists_pools_once() {
        let a = |ip: &str, p: Placement| Assigned { addr: ip.parse().unwrap(), placement: p };
        let both =
            [a("192.0.2.1", Placement::Pool("v4".into())), a("2001:db8::1", Placement::Pool("v6".into()))];
        assert_eq!(pool_annotation(&both).as_deref(), Some("v4,v6"));
        let orphan = [a("192.0.2.1", Placement::Orphaned(crate::ipam::OrphanReason::NotInAnyPool))];
        assert_eq!(pool_annotation(&orphan), None);
    }

    /// A Service as the apiserver serves it, with every field the controller reads set to
    /// something other than its default, and the fields it never reads.
    fn served(spec_ip: bool) -> Service {
        let mut annotations = serde_json::json!({
            "metallb.io/address-pool": "lan",
            "ferrolb.io/allow-shared-ip": "k",
            "ferrolb.io/ip-allocated-from-pool": "lan",
            "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"v1\",\"kind\":\"Service\"}",
        });
        if !spec_ip {
            annotations["ferrolb.io/loadBalancerIPs"] = "192.0.2.7,2001:db8::7".into();
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "web",
                "namespace": "team-a",
                "uid": "0b3f1c1e-7d2a-4c1b-9a57-3b1f4bb1c0de",
                "resourceVersion": "4711",
                "generation": 3,
                "creationTimestamp": "2026-01-02T03:04:05Z",
                "labels": {"app": "web", "tier": "front"},
                "annotations": annotations,
                "finalizers": ["service.kubernetes.io/load-balancer-cleanup"],
                "managedFields": [{
                    "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-01-02T03:04:05Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:spec": {"f:type": {}, "f:ports": {"k:{\"port\":80,\"protocol\":\"UDP\"}": {".": {}}}}},
                }],
            },
            "spec": {
                "type": "LoadBalancer",
                "loadBalancerClass": "ferrolb.io/lb",
                "loadBalancerIP": if spec_ip { "192.0.2.9" } else { "" },
                "ipFamilies": ["IPv6", "IPv4"],
                "ipFamilyPolicy": "RequireDualStack",
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353, "nodePort": 30053},
                    {"name": "web", "port": 80, "protocol": "TCP", "targetPort": "http", "appProtocol": "http"},
                ],
                "externalTrafficPolicy": "Local",
                "healthCheckNodePort": 31000,
                "selector": {"app": "web"},
                "clusterIP": "10.96.0.10",
                "clusterIPs": ["10.96.0.10", "fd00::10"],
                "sessionAffinity": "None",
                "internalTrafficPolicy": "Cluster",
                "allocateLoadBalancerNodePorts": true,
            },
            "status": {
                "loadBalancer": {"ingress": [
                    {"ip": "2001:db8::7", "ipMode": "VIP"},
                    {"ip": "192.0.2.7", "ipMode": "Proxy"},
                    {"hostname": "lb.example"},
                ]},
                "conditions": [{
                    "type": "ferrolb.io/AddressInPool", "status": "False", "reason": "Orphaned",
                    "message": "address 192.0.2.7: in no pool", "observedGeneration": 2,
                    "lastTransitionTime": "2026-01-02T03:04:06Z",
                }],
            },
        }))
        .unwrap()
    }

    #[test]
    fn trimmed_keeps_what_the_controller_reads() {
        use kube::Resource;

        let ns_labels: BTreeMap<String, String> = [("team".to_string(), "a".to_string())].into();
        for spec_ip in [false, true] {
            let full = served(spec_ip);
            let mut trimmed = full.clone();
            trim_for_cache(&mut trimmed);
            // Every reader of a cached Service sees the same thing.
            assert_eq!(classify(&trimmed, "ferrolb.io/lb"), classify(&full, "ferrolb.io/lb"));
            assert_eq!(classify(&trimmed, "other.io/lb"), classify(&full, "other.io/lb"));
            assert_eq!(service_key(&trimmed), service_key(&full));
            let request = service_request(&full, &ns_labels).unwrap();
            assert_eq!(service_request(&trimmed, &ns_labels).unwrap(), request);
            assert_eq!(replay_request(&trimmed, &ns_labels), replay_request(&full, &ns_labels));
            assert_eq!(ingress_ips(&trimmed), ingress_ips(&full));
            assert_eq!(metallb_note(&trimmed), metallb_note(&full));
            assert_eq!(current_pool_annotation(&trimmed), current_pool_annotation(&full));
            assert_eq!(trimmed.object_ref(&()), full.object_ref(&()));
            assert_eq!(crate::context::versioned_ref(&trimmed), crate::context::versioned_ref(&full));
            assert_eq!(trimmed.metadata.generation, full.metadata.generation);
            assert_eq!(trimmed.status, full.status);
            // The fixture exercises what it claims to: nothing above compares defaults.
            assert_eq!(request.families, FamilyPolicy::RequireDualStack(Family::V6));
            assert_eq!(request.traffic_policy, TrafficPolicy::Local);
            assert_eq!(request.ports, vec![(Protocol::Udp, 53), (Protocol::Tcp, 80)]);
            assert!(
                request.backend_key.is_some() && request.created > 0 && !request.service_labels.is_empty()
            );
            assert_eq!(request.requested.len(), if spec_ip { 1 } else { 2 });
            assert!(metallb_note(&full).is_some());
            // And what nobody reads is gone.
            assert_eq!(trimmed.metadata.managed_fields, None);
            assert_eq!(trimmed.metadata.finalizers, None);
            assert!(!trimmed.annotations().contains_key(LAST_APPLIED));
            let spec = trimmed.spec.as_ref().unwrap();
            assert_eq!((spec.cluster_ip.as_ref(), spec.session_affinity.as_ref()), (None, None));
            assert!(spec.ports.iter().flatten().all(|p| p.name.is_none() && p.target_port.is_none()));
        }
    }
}
