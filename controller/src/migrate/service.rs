//! MetalLB's Service annotations (`metallb.universe.tf/…` and `metallb.io/…`) as
//! ferrolb's (`ferrolb.io/…`).
//!
//! A converted Service holds only its name, namespace and the ferrolb annotations, so
//! applying it (`kubectl apply --server-side`) adds them and changes nothing else.

use std::collections::BTreeMap;

use ferrolb_api::{
    ANNOTATION_LOAD_BALANCER_IPS, DEFAULT_LOAD_BALANCER_CLASS, SERVICE_ANNOTATIONS, parse_load_balancer_ips,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::fields::{Report, describe};

const PREFIXES: [&str; 2] = ["metallb.universe.tf/", "metallb.io/"];

pub(super) fn convert(doc: &Value, report: &mut Report) -> Option<Service> {
    let object = describe(doc);
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    let annotations = doc["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
    for (key, value) in &annotations {
        let Some(suffix) = PREFIXES.iter().find_map(|p| key.strip_prefix(p)) else {
            continue;
        };
        let field = format!("metadata.annotations[{key}]");
        let value = value.as_str().unwrap_or_default().trim();
        // The runtime reads the same spellings (`SERVICE_ANNOTATIONS`); here they are renamed.
        let target = match SERVICE_ANNOTATIONS.iter().find(|(_, metallb)| metallb.contains(&key.as_str())) {
            Some((ANNOTATION_LOAD_BALANCER_IPS, _)) => match parse_load_balancer_ips(value) {
                Ok(ips) => {
                    let list: Vec<String> = ips.iter().map(ToString::to_string).collect();
                    Some((ANNOTATION_LOAD_BALANCER_IPS, list.join(",")))
                }
                Err(e) => {
                    report.push(&object, &field, e.to_string());
                    None
                }
            },
            Some((target, _)) => Some((*target, value.to_owned())),
            None if suffix == "ip-allocated-from-pool" => {
                report.push(
                    &object,
                    &field,
                    "written by MetalLB's controller; ferrolb-controller writes ferrolb.io/ip-allocated-from-pool \
                     itself",
                );
                None
            }
            None => {
                report.push(&object, &field, "not a MetalLB annotation ferrolb has an equivalent for");
                None
            }
        };
        if let Some((target, value)) = target {
            match out.get(target) {
                Some(old) if *old != value => report.push(
                    &object,
                    field,
                    format!(
                        "conflicts with another MetalLB annotation that set {target} to {old:?}; kept that"
                    ),
                ),
                _ => {
                    out.insert(target.to_owned(), value);
                }
            }
        }
    }
    // MetalLB honours the deprecated spec.loadBalancerIP; ferrolb reads the annotation.
    if let Some(ip) = doc["spec"]["loadBalancerIP"].as_str().filter(|s| !s.is_empty())
        && !out.contains_key(ANNOTATION_LOAD_BALANCER_IPS)
    {
        out.insert(ANNOTATION_LOAD_BALANCER_IPS.to_owned(), ip.to_owned());
    }
    if let Some(class) = doc["spec"]["loadBalancerClass"].as_str()
        && class != DEFAULT_LOAD_BALANCER_CLASS
    {
        report.push(
            &object,
            "spec.loadBalancerClass",
            format!(
                "ferrolb serves Services with no class or the one it runs with, and the field is immutable: \
                 start ferrolb-controller with --lb-class={class}, or recreate the Service without it"
            ),
        );
    }
    if out.is_empty() {
        return None;
    }
    let meta = &doc["metadata"];
    Some(Service {
        metadata: ObjectMeta {
            name: meta["name"].as_str().map(str::to_owned),
            namespace: Some(meta["namespace"].as_str().unwrap_or("default").to_owned()),
            annotations: Some(out),
            ..ObjectMeta::default()
        },
        ..Service::default()
    })
}
