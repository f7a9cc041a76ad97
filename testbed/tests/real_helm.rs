//! The Helm chart's life on the real control plane (issue #42): `helm install` creates
//! every object it renders (and its notes call the placeholder image out); `helm
//! upgrade` with changed values applies them (the apiserver's own RBAC then grants the
//! new Secret); a bad value is refused before anything changes; `helm uninstall` removes everything but the CRDs and the
//! operator's objects; the chart installs again over the kept CRDs.
//! (The end-to-end checks run on a helm install in real_e2e.rs; the speakers' image
//! upgrade by `helm upgrade` on real kubelets in real_circle.rs.)
//!
//! Needs `target/kube/current/{ferrolb-kube,helm}` (testbed/kube/build.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use ferrolb_cluster::ferrolb::NAMESPACE;
use ferrolb_cluster::{Cluster, ClusterConfig, helm};
use ferrolb_lab::{Lab, LabConfig};
use serde_json::Value;

/// (resource for kubectl, namespace, name) of every object of the release's manifest.
fn release_objects(cluster: &Cluster) -> Vec<(String, Option<String>, String)> {
    let manifest = cluster.helm(&["get", "manifest", helm::RELEASE, "--namespace", NAMESPACE]).unwrap();
    let objects: Vec<(String, Option<String>, String)> = ferrolb_api::json_documents(&manifest)
        .unwrap()
        .into_iter()
        .map(|o| {
            let kind = o["kind"].as_str().unwrap().to_owned();
            let resource = match o["apiVersion"].as_str().unwrap().split_once('/') {
                Some((group, version)) => format!("{kind}.{version}.{group}"),
                None => kind,
            };
            let ns = o["metadata"]["namespace"].as_str().map(str::to_owned);
            (resource, ns, o["metadata"]["name"].as_str().unwrap().to_owned())
        })
        .collect();
    assert!(objects.len() > 15, "the release holds {} objects", objects.len());
    objects
}

/// Whether `kubectl get` finds the object.
fn exists(cluster: &Cluster, (resource, ns, name): &(String, Option<String>, String)) -> bool {
    let mut args = vec!["get", resource.as_str(), name.as_str(), "--ignore-not-found", "-o", "name"];
    if let Some(ns) = ns {
        args.extend(["--namespace", ns.as_str()]);
    }
    !cluster.kubectl(&args).unwrap().trim().is_empty()
}

/// Whether the speaker's ServiceAccount may read Secret `name` (the apiserver's RBAC).
fn speaker_may_read(cluster: &Cluster, name: &str) -> bool {
    let who = format!("--as=system:serviceaccount:{NAMESPACE}:ferrolb-speaker");
    let what = format!("secrets/{name}");
    match cluster.kubectl(&["auth", "can-i", "get", &what, "--namespace", NAMESPACE, &who]) {
        Ok(out) => out.trim() == "yes",
        Err(e) => {
            // "no" is exit status 1 (on stdout); anything else is a failure to ask.
            assert!(e.to_string().contains("exit status: 1"), "kubectl auth can-i: {e}");
            false
        }
    }
}

fn jsonpath(cluster: &Cluster, what: &[&str], path: &str) -> String {
    let jp = format!("jsonpath={path}");
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend(["--namespace", NAMESPACE, "-o", &jp]);
    cluster.kubectl(&args).unwrap()
}

#[test]
fn install_upgrade_refuse_uninstall_and_install_again() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();

    // Install: every object the release renders is there.
    let out = helm::install(&cluster, &[]).unwrap();
    assert!(out.contains("STATUS: deployed"), "{out}");
    // The notes call the placeholder image out: nothing would start.
    assert!(out.contains("WARNING: image.repository is the placeholder"), "{out}");
    let objects = release_objects(&cluster);
    let missing: Vec<_> = objects.iter().filter(|o| !exists(&cluster, o)).collect();
    assert!(missing.is_empty(), "installed but absent: {missing:?}");
    assert!(speaker_may_read(&cluster, "bgp-auth"));
    assert!(!speaker_may_read(&cluster, "edge-auth"));
    assert_eq!(jsonpath(&cluster, &["deployment", "ferrolb-controller"], "{.spec.replicas}"), "2");
    // An operator's object, to outlive the release.
    cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            "apiVersion: ferrolb.io/v1alpha1\nkind: IPAddressPool\nmetadata: {name: kept}\nspec: {addresses: [192.0.2.64/28]}\n",
        )
        .unwrap();

    // Upgrade with changed values: applied, and the apiserver's RBAC follows.
    let out = helm::upgrade(&cluster, &["bgp.passwordSecrets={bgp-auth,edge-auth}", "controller.replicas=3"])
        .unwrap();
    assert!(out.contains("REVISION: 2"), "{out}");
    assert!(speaker_may_read(&cluster, "edge-auth"), "the upgrade's Role does not grant edge-auth");
    assert_eq!(jsonpath(&cluster, &["deployment", "ferrolb-controller"], "{.spec.replicas}"), "3");

    // A bad value: refused by the schema, naming it; nothing changes.
    let err = helm::upgrade(&cluster, &["controller.replicas=0"]).unwrap_err().to_string();
    assert!(err.contains("/controller/replicas"), "{err}");
    let status = cluster.helm(&["status", helm::RELEASE, "--namespace", NAMESPACE, "-o", "json"]).unwrap();
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["version"], 2, "a refused upgrade made a revision: {status}");
    assert_eq!(jsonpath(&cluster, &["deployment", "ferrolb-controller"], "{.spec.replicas}"), "3");

    // Uninstall: every object of the release is gone; the CRDs and the pool stay.
    let objects = release_objects(&cluster);
    cluster.helm(&["uninstall", helm::RELEASE, "--namespace", NAMESPACE, "--wait"]).unwrap();
    let left: Vec<_> = objects.iter().filter(|o| exists(&cluster, o)).collect();
    assert!(left.is_empty(), "left after helm uninstall: {left:?}");
    for crd in ferrolb_api::crd::crds() {
        let name = crd.metadata.name.unwrap();
        let found = cluster.kubectl(&["get", "crd", &name, "--ignore-not-found", "-o", "name"]).unwrap();
        assert!(!found.trim().is_empty(), "helm uninstall removed CRD {name}");
    }
    let pool =
        cluster.kubectl(&["get", "ipaddresspool", "kept", "--ignore-not-found", "-o", "name"]).unwrap();
    assert!(!pool.trim().is_empty(), "helm uninstall removed the operator's IPAddressPool");

    // Installed again over the kept CRDs (helm skips them): the whole release again.
    let out = helm::install(&cluster, &["image.repository=registry.example/ferrolb"]).unwrap();
    assert!(out.contains("STATUS: deployed") && !out.contains("WARNING"), "{out}");
    let missing: Vec<_> = release_objects(&cluster).into_iter().filter(|o| !exists(&cluster, o)).collect();
    assert!(missing.is_empty(), "reinstalled but absent: {missing:?}");
}
