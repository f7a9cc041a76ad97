//! The edge between Kubernetes objects and the pure IPAM: every Service, Namespace and
//! IPAddressPool field the allocator needs is read here and nowhere else.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_api::{
    ANNOTATION_ADDRESS_POOL, ANNOTATION_ALLOW_SHARED_IP, ANNOTATION_LOAD_BALANCER_IPS, IpAddressPool,
    SERVICE_ANNOTATIONS, parse_load_balancer_ips, service_annotation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::ResourceExt;

use crate::ipam::{
    AddrRange, Assigned, LabelSelector, Operator, Placement, PoolSpec, Requirement, ServiceAllocation,
    ServiceKey, ServiceRequest,
};

mod cached;
pub use cached::{
    CachedNamespace, CachedService, Ingress, LoadBalancerSpec, WatchedService, service_reference,
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
pub fn classify(svc: &CachedService, lb_class: &str) -> Class {
    let Some(spec) = &svc.load_balancer else {
        return Class::NotLoadBalancer;
    };
    match spec.class.as_deref() {
        None => Class::Served,
        Some(c) if c == lb_class => Class::Served,
        Some(_) => Class::Foreign,
    }
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
    svc: &CachedService,
    namespace_labels: &Arc<BTreeMap<String, String>>,
) -> Result<ServiceRequest, RequestError> {
    let key = svc.key.clone();
    let annotations = &svc.annotations;
    let default = LoadBalancerSpec::default();
    let spec = svc.load_balancer.as_ref().unwrap_or(&default);
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
        service_labels: svc.labels.clone(),
        families: spec.families,
        requested,
        pool: text(ANNOTATION_ADDRESS_POOL),
        sharing_key: text(ANNOTATION_ALLOW_SHARED_IP),
        ports: spec.ports.to_vec(),
        traffic_policy: spec.traffic_policy,
        backend_key: spec.backend_key.as_deref().map(str::to_owned),
        created: svc.created,
        key,
    })
}

/// For crash recovery: the request as well as it can be read. A Service whose requested
/// addresses no longer parse still holds what its status says.
pub fn replay_request(
    svc: &CachedService,
    namespace_labels: &Arc<BTreeMap<String, String>>,
) -> ServiceRequest {
    match service_request(svc, namespace_labels) {
        Ok(r) => r,
        Err(_) => {
            let mut lenient = svc.clone();
            for (key, metallb) in
                SERVICE_ANNOTATIONS.iter().filter(|(k, _)| *k == ANNOTATION_LOAD_BALANCER_IPS)
            {
                for k in std::iter::once(key).chain(metallb) {
                    lenient.annotations.remove(*k);
                }
            }
            if let Some(s) = lenient.load_balancer.as_mut() {
                s.load_balancer_ip = None;
            }
            // Cannot fail: both fallible fields are gone.
            service_request(&lenient, namespace_labels)
                .unwrap_or_else(|_| ServiceRequest { key: svc.key.clone(), ..ServiceRequest::default() })
        }
    }
}

/// The note of the one Event saying which MetalLB spellings a Service's annotations are
/// read in (and which lose to another spelling); `None` when it uses none. It depends on
/// the annotation keys only, so a new note means the set of spellings changed.
pub fn metallb_note(svc: &CachedService) -> Option<String> {
    let annotations = &svc.annotations;
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

/// Addresses in `status.loadBalancer.ingress` (hostnames and junk ignored).
pub fn ingress_ips(svc: &CachedService) -> Vec<IpAddr> {
    svc.ingress.iter().filter_map(|i| i.ip).collect()
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
pub fn current_pool_annotation(svc: &CachedService) -> Option<&str> {
    svc.allocated_from.as_deref()
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
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::ipam::{Family, FamilyPolicy, Protocol, TrafficPolicy};

    fn svc(annotations: &[(&str, &str)], spec: ServiceSpec) -> CachedService {
        cached(annotations, ServiceSpec { type_: Some("LoadBalancer".into()), ..spec })
    }

    fn cached(annotations: &[(&str, &str)], spec: ServiceSpec) -> CachedService {
        CachedService::from(Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("team-a".into()),
                annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        })
    }

    #[test]
    fn classes() {
        let class =
            |c: &str| svc(&[], ServiceSpec { load_balancer_class: Some(c.into()), ..Default::default() });
        assert_eq!(classify(&svc(&[], ServiceSpec::default()), "ferrolb.io/lb"), Class::Served);
        assert_eq!(classify(&class("ferrolb.io/lb"), "ferrolb.io/lb"), Class::Served);
        assert_eq!(classify(&class("other.io/lb"), "ferrolb.io/lb"), Class::Foreign);
        let cluster_ip = ServiceSpec { type_: Some("ClusterIP".into()), ..Default::default() };
        assert_eq!(classify(&cached(&[], cluster_ip), "ferrolb.io/lb"), Class::NotLoadBalancer);
        let no_spec = CachedService::from(Service::default());
        assert_eq!(classify(&no_spec, "ferrolb.io/lb"), Class::NotLoadBalancer);
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
        let r = service_request(&s, &Arc::default()).unwrap();
        assert_eq!(r.key, ServiceKey::new("team-a", "web"));
        assert_eq!(r.families, FamilyPolicy::RequireDualStack(Family::V6));
        assert_eq!(r.requested.len(), 2, "the annotation wins over spec.loadBalancerIP");
        assert_eq!(r.sharing_key.as_deref(), Some("k"));
        assert_eq!(r.ports, vec![(Protocol::Udp, 53)]);
        assert_eq!(r.backend_key.as_deref(), Some("a=1,b=2"));
        assert_eq!(r.traffic_policy, TrafficPolicy::Local);

        let s = svc(&[], ServiceSpec { load_balancer_ip: Some("192.0.2.99".into()), ..Default::default() });
        let r = service_request(&s, &Arc::default()).unwrap();
        assert_eq!(r.requested, vec!["192.0.2.99".parse::<IpAddr>().unwrap()]);
        assert_eq!(r.families, FamilyPolicy::SingleStack(Family::V4));
    }

    #[test]
    fn bad_requests_name_the_field() {
        let s = svc(&[(ANNOTATION_LOAD_BALANCER_IPS, "nope")], ServiceSpec::default());
        let e = service_request(&s, &Arc::default()).unwrap_err().to_string();
        assert!(e.contains("team-a/web") && e.contains(ANNOTATION_LOAD_BALANCER_IPS), "{e}");
        assert!(replay_request(&s, &Arc::default()).requested.is_empty());
        let s = svc(&[], ServiceSpec { load_balancer_ip: Some("x".into()), ..Default::default() });
        let e = service_request(&s, &Arc::default()).unwrap_err().to_string();
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
        let r = service_request(&s, &Arc::default()).unwrap();
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
        let e = service_request(&s, &Arc::default()).unwrap_err().to_string();
        assert!(e.contains("annotation metallb.io/loadBalancerIPs: \"nope\" is not an IP address"), "{e}");
        assert!(replay_request(&s, &Arc::default()).requested.is_empty());
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
    fn the_cache_keeps_what_the_controller_reads() {
        use kube::Resource;

        let ns_labels: Arc<BTreeMap<String, String>> =
            Arc::new([("team".to_string(), "a".to_string())].into());
        for spec_ip in [false, true] {
            let full = served(spec_ip);
            let cached = CachedService::from(full.clone());
            // The watch decodes the same, and keeps the resourceVersion it resumes from.
            let watched = WatchedService::from(full.clone());
            assert_eq!(watched.service, cached);
            assert_eq!(watched.metadata.resource_version.as_deref(), Some("4711"));
            // Every reader of a cached Service sees what the API object says.
            assert_eq!(classify(&cached, "ferrolb.io/lb"), Class::Served);
            assert_eq!(classify(&cached, "other.io/lb"), Class::Foreign);
            assert_eq!(cached.key, ServiceKey::new("team-a", "web"));
            let request = service_request(&cached, &ns_labels).unwrap();
            let requested: Vec<IpAddr> = if spec_ip {
                vec!["192.0.2.9".parse().unwrap()]
            } else {
                vec!["192.0.2.7".parse().unwrap(), "2001:db8::7".parse().unwrap()]
            };
            assert_eq!(
                request,
                ServiceRequest {
                    key: ServiceKey::new("team-a", "web"),
                    namespace_labels: ns_labels.clone(),
                    service_labels: Arc::new(full.labels().clone()),
                    families: FamilyPolicy::RequireDualStack(Family::V6),
                    requested,
                    pool: Some("lan".into()),
                    sharing_key: Some("k".into()),
                    ports: vec![(Protocol::Udp, 53), (Protocol::Tcp, 80)],
                    traffic_policy: TrafficPolicy::Local,
                    backend_key: Some("app=web".into()),
                    created: full.metadata.creation_timestamp.as_ref().unwrap().0.as_second(),
                }
            );
            assert_eq!(replay_request(&cached, &ns_labels), request);
            // The labels are shared, not copied: with the namespace, and with the cache.
            assert!(Arc::ptr_eq(&request.namespace_labels, &ns_labels));
            assert!(Arc::ptr_eq(&request.service_labels, &cached.labels));
            let ips: Vec<IpAddr> = vec!["2001:db8::7".parse().unwrap(), "192.0.2.7".parse().unwrap()];
            assert_eq!(ingress_ips(&cached), ips);
            // Only the first entry is as the controller writes it (the second is Proxy).
            let written: Vec<bool> = cached.ingress.iter().map(|i| i.as_written).collect();
            assert_eq!(written, [true, false, false]);
            assert!(
                metallb_note(&cached).unwrap().contains("metallb.io/address-pool as ferrolb.io/address-pool")
            );
            assert_eq!(current_pool_annotation(&cached), Some("lan"));
            assert_eq!(cached.object_ref(), full.object_ref(&()));
            assert_eq!(cached.versioned_ref(), crate::context::versioned_ref(&full));
            assert_eq!(cached.generation, Some(3));
            assert_eq!(Some(&cached.conditions), full.status.as_ref().unwrap().conditions.as_ref());
            // And of the annotations, only those read are kept.
            let kept: Vec<&str> = cached.annotations.keys().map(String::as_str).collect();
            let mut expected = vec!["ferrolb.io/allow-shared-ip", "metallb.io/address-pool"];
            if !spec_ip {
                expected.insert(1, "ferrolb.io/loadBalancerIPs");
            }
            assert_eq!(kept, expected);
        }
    }

    #[test]
    fn an_ingress_entry_not_in_the_controllers_form_is_not_as_written() {
        let with = |ingress: serde_json::Value| -> CachedService {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "team-a"},
                "spec": {"type": "LoadBalancer"},
                "status": {"loadBalancer": {"ingress": [ingress]}},
            }))
            .unwrap()
        };
        let v6: IpAddr = "2001:db8::7".parse().unwrap();
        let entry = with(serde_json::json!({"ip": "2001:db8::7", "ipMode": "VIP"})).ingress[0];
        assert_eq!(entry, Ingress { ip: Some(v6), as_written: true });
        for other in [
            serde_json::json!({"ip": "2001:DB8::7", "ipMode": "VIP"}),
            serde_json::json!({"ip": "2001:db8::7"}),
            serde_json::json!({"ip": "2001:db8::7", "ipMode": "VIP", "hostname": "lb.example"}),
        ] {
            assert_eq!(
                with(other.clone()).ingress[0],
                Ingress { ip: Some(v6), as_written: false },
                "{other}"
            );
        }
        assert_eq!(
            with(serde_json::json!({"hostname": "lb.example"})).ingress[0],
            Ingress { ip: None, as_written: false }
        );
    }
}
