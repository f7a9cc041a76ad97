//! The committed CRDs match the types, and every schema is structural.

use std::path::PathBuf;

use serde_json::Value;

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds")
}

#[test]
fn manifests_are_up_to_date() {
    let files = ferrolb_api::crd_files().unwrap();
    let mut stale = Vec::new();
    for (name, content) in &files {
        match std::fs::read_to_string(crd_dir().join(name)) {
            Ok(on_disk) if &on_disk == content => {}
            _ => stale.push(name.clone()),
        }
    }
    let mut extra: Vec<String> = std::fs::read_dir(crd_dir())
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".yaml") && !files.iter().any(|(f, _)| f == n))
                .collect()
        })
        .unwrap_or_default();
    stale.append(&mut extra);
    assert!(
        stale.is_empty(),
        "manifests/crds/ is stale ({stale:?}); regenerate with `{}` (and delete files it does not write)",
        ferrolb_api::REGENERATE
    );
}

/// Checks the structural-schema rules the apiserver enforces that derived schemas can break.
fn check_structural(path: &str, schema: &Value, problems: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else {
        problems.push(format!("{path}: schema is not an object"));
        return;
    };
    for banned in [
        "$ref",
        "definitions",
        "$defs",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "x-kubernetes-preserve-unknown-fields",
    ] {
        if obj.contains_key(banned) {
            problems.push(format!("{path}: has {banned}"));
        }
    }
    match obj.get("type").and_then(Value::as_str) {
        None => problems.push(format!("{path}: no type")),
        Some("object") => {
            for (k, v) in obj.get("properties").and_then(Value::as_object).into_iter().flatten() {
                check_structural(&format!("{path}.{k}"), v, problems);
            }
            if let Some(ap) = obj.get("additionalProperties") {
                check_structural(&format!("{path}[*]"), ap, problems);
            }
        }
        Some("array") => match obj.get("items") {
            Some(items) => check_structural(&format!("{path}[]"), items, problems),
            None => problems.push(format!("{path}: array without items")),
        },
        Some(_) => {}
    }
    if let Some(fmt) = obj.get("format").and_then(Value::as_str)
        && !["int32", "int64", "date-time", "byte", "double"].contains(&fmt)
    {
        problems.push(format!("{path}: format {fmt} unknown to Kubernetes"));
    }
}

#[test]
fn every_schema_is_structural_cluster_scoped_with_status() {
    for crd in ferrolb_api::crds() {
        let name = crd.metadata.name.clone().unwrap();
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(v.served && v.storage);
        assert!(
            v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some(),
            "{name}: status subresource"
        );
        let expected_scope = if crd.spec.names.kind == "ServiceAnnouncement" {
            "Namespaced" // owned by a namespaced Service; see announcement.rs
        } else {
            "Cluster"
        };
        assert_eq!(crd.spec.scope, expected_scope, "{name}");
        let schema =
            serde_json::to_value(v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).unwrap())
                .unwrap();
        let mut problems = Vec::new();
        check_structural(&name, &schema, &mut problems);
        assert!(problems.is_empty(), "{problems:#?}");
        let props = &schema["properties"];
        assert!(props["status"]["properties"]["conditions"].is_object(), "{name}");
    }
}

#[test]
fn api_field_names_are_as_documented() {
    let crds = ferrolb_api::crds();
    let spec_of = |kind: &str| {
        let crd = crds.iter().find(|c| c.spec.names.kind == kind).unwrap();
        let schema = serde_json::to_value(
            crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap(),
        )
        .unwrap();
        schema["properties"]["spec"]["properties"].as_object().unwrap().keys().cloned().collect::<Vec<_>>()
    };
    for (kind, fields) in [
        ("IPAddressPool", &["addresses", "autoAssign", "avoidBuggyIPs", "serviceAllocation"][..]),
        (
            "BGPPeer",
            &[
                "myASN",
                "peerASN",
                "dynamicASN",
                "peerAddress",
                "interface",
                "peerPort",
                "sourceAddress",
                "routerID",
                "holdTime",
                "keepaliveTime",
                "connectTime",
                "passive",
                "ebgpMultiHop",
                "ttlSecurity",
                "passwordSecret",
                "passwordFile",
                "bfdProfile",
                "gracefulRestart",
                "addressFamilies",
                "nodeSelectors",
            ][..],
        ),
        (
            "BGPAdvertisement",
            &[
                "ipAddressPools",
                "ipAddressPoolSelectors",
                "serviceSelectors",
                "nodeSelectors",
                "peers",
                "aggregationLength",
                "aggregationLengthV6",
                "localPref",
                "communities",
                "linkBandwidth",
            ][..],
        ),
        (
            "L2Advertisement",
            &[
                "ipAddressPools",
                "ipAddressPoolSelectors",
                "serviceSelectors",
                "nodeSelectors",
                "interfaces",
                "mode",
                "nodePreferences",
            ][..],
        ),
        (
            "BFDProfile",
            &["receiveInterval", "transmitInterval", "detectMultiplier", "passiveMode", "minimumTtl"][..],
        ),
        (
            "ControlPlaneVIP",
            &[
                "address",
                "port",
                "mode",
                "interface",
                "members",
                "membershipPort",
                "membershipKeyFile",
                "healthCheck",
                "bgp",
            ][..],
        ),
        ("ServiceAnnouncement", &["node", "service", "protocol", "addresses", "interfaces", "peers"][..]),
    ] {
        let mut have = spec_of(kind);
        have.sort();
        let mut want: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(have, want, "{kind}");
    }
}

/// Names other resources in the clusters ferrolb runs in already answer to. A CRD short
/// name that another resource also has makes `kubectl get NAME` pick one of the two
/// (by group priority), so users may see the other project's objects and not ours.
const TAKEN_NAMES: &[(&str, &str)] = &[
    ("ippool", "Cilium CiliumLoadBalancerIPPool short name; Calico IPPool singular"),
    ("ippools", "Cilium CiliumLoadBalancerIPPool short name; Calico IPPool plural"),
    ("lbippool", "Cilium CiliumLoadBalancerIPPool short name"),
    ("lbippools", "Cilium CiliumLoadBalancerIPPool short name"),
    ("bgpp", "Cilium CiliumBGPPeeringPolicy short name"),
    ("bgppeer", "MetalLB and Calico BGPPeer singular"),
    ("bgppeers", "MetalLB and Calico BGPPeer plural"),
    ("ipaddresspool", "MetalLB IPAddressPool singular"),
    ("ipaddresspools", "MetalLB IPAddressPool plural"),
    ("bgpadvertisement", "MetalLB BGPAdvertisement singular"),
    ("bgpadvertisements", "MetalLB BGPAdvertisement plural"),
    ("l2advertisement", "MetalLB L2Advertisement singular"),
    ("l2advertisements", "MetalLB L2Advertisement plural"),
    ("bfdprofile", "MetalLB BFDProfile singular"),
    ("bfdprofiles", "MetalLB BFDProfile plural"),
    ("community", "MetalLB Community singular"),
    ("eip", "Antrea ExternalIPPool short name"),
    ("svc", "kubectl: services"),
    ("ep", "kubectl: endpoints"),
    ("ev", "kubectl: events"),
    ("ns", "kubectl: namespaces"),
    ("no", "kubectl: nodes"),
    ("po", "kubectl: pods"),
    ("netpol", "kubectl: networkpolicies"),
];

/// `kubectl get ferrolb` lists every kind, and no short name is another resource's.
#[test]
fn every_crd_is_in_the_ferrolb_category_and_its_short_names_are_ferrolbs_own() {
    for crd in ferrolb_api::crds() {
        let names = &crd.spec.names;
        let categories = names.categories.clone().unwrap_or_default();
        assert!(categories.iter().any(|c| c == "ferrolb"), "{}: categories {categories:?}", names.kind);
        let short = names.short_names.clone().unwrap_or_default();
        assert!(!short.is_empty(), "{}: no short name", names.kind);
        for s in &short {
            if let Some((_, whose)) = TAKEN_NAMES.iter().find(|(t, _)| t == s) {
                panic!("{}: short name {s:?} is taken ({whose})", names.kind);
            }
            // One prefix for all: nothing else uses it, and users can guess the names.
            assert!(s.starts_with("fl"), "{}: short name {s:?} lacks the fl prefix", names.kind);
        }
    }
}
