//! The Helm chart's life on the real control plane (issue #42): `helm install` creates
//! every object it renders (and its notes call the placeholder image out); `helm
//! upgrade` with changed values applies them (the apiserver's own RBAC then grants the
//! new Secret); new CRDs apply as the README says; a bad value is refused before
//! anything changes; `helm uninstall` removes everything but the CRDs and the
//! operator's objects; the chart installs again over the kept CRDs and over what
//! `kubectl apply -k` installed, once the README's adoption commands ran.
//! (The end-to-end checks run on a helm install in real_e2e.rs; the speakers' image
//! upgrade by `helm upgrade` on real kubelets in real_circle.rs.)
//!
//! Needs `target/kube/current/{ferrolb-kube,helm}` (testbed/kube/build.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use ferrolb_cluster::ferrolb::NAMESPACE;
use ferrolb_cluster::{Cluster, ClusterConfig, helm};
use ferrolb_lab::{Lab, LabConfig};
use serde_json::Value;

/// The release's manifest as helm keeps it.
fn manifest(cluster: &Cluster) -> String {
    cluster.helm(&["get", "manifest", helm::RELEASE, "--namespace", NAMESPACE]).unwrap()
}

/// How many objects `manifest` holds, and which of them exist (`kind/name`, one
/// `kubectl get -f -` for all).
fn present(cluster: &Cluster, manifest: &str) -> (usize, Vec<String>) {
    let objects = ferrolb_api::json_documents(manifest).unwrap().len();
    assert!(objects > 15, "the release holds {objects} objects");
    let out =
        cluster.kubectl_stdin(&["get", "-f", "-", "--ignore-not-found", "-o", "name"], manifest).unwrap();
    (objects, out.lines().map(str::to_owned).collect())
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
    let started = std::time::Instant::now();
    let phase = |what: &str| println!("{:6.1} s  {what}", started.elapsed().as_secs_f64());
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    phase("control plane up");

    // Install: every object the release renders is there.
    let out = helm::install(&cluster, &[]).unwrap();
    assert!(out.contains("STATUS: deployed"), "{out}");
    // The notes call the placeholder image out: nothing would start.
    assert!(out.contains("WARNING: image.repository is the placeholder"), "{out}");
    let (objects, found) = present(&cluster, &manifest(&cluster));
    assert_eq!(found.len(), objects, "installed but absent: of {objects}, only {found:?}");
    assert!(speaker_may_read(&cluster, "bgp-auth"));
    assert!(!speaker_may_read(&cluster, "edge-auth"));
    assert_eq!(jsonpath(&cluster, &["deployment", "ferrolb-controller"], "{.spec.replicas}"), "2");
    phase("installed");
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

    phase("upgraded");
    // New CRDs on upgrade, as the README says (Helm never upgrades them): Helm created
    // them, so a server-side apply must take their fields over.
    let crds = helm::chart_dir().join("crds").display().to_string();
    let err = cluster.kubectl(&["apply", "--server-side", "-f", &crds]).unwrap_err().to_string();
    assert!(err.contains("conflict with \"helm\""), "{err}");
    cluster.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", &crds]).unwrap();

    phase("CRDs applied");
    // A bad value: refused by the schema, naming it; nothing changes.
    let err = helm::upgrade(&cluster, &["controller.replicas=0"]).unwrap_err().to_string();
    assert!(err.contains("/controller/replicas"), "{err}");
    let status = cluster.helm(&["status", helm::RELEASE, "--namespace", NAMESPACE, "-o", "json"]).unwrap();
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["version"], 2, "a refused upgrade made a revision: {status}");
    assert_eq!(jsonpath(&cluster, &["deployment", "ferrolb-controller"], "{.spec.replicas}"), "3");

    phase("refused");
    // Uninstall: every object of the release is gone; the CRDs and the pool stay.
    let release = manifest(&cluster);
    cluster.helm(&["uninstall", helm::RELEASE, "--namespace", NAMESPACE, "--wait"]).unwrap();
    let (_, left) = present(&cluster, &release);
    assert!(left.is_empty(), "left after helm uninstall: {left:?}");
    for crd in ferrolb_api::crd::crds() {
        let name = crd.metadata.name.unwrap();
        let found = cluster.kubectl(&["get", "crd", &name, "--ignore-not-found", "-o", "name"]).unwrap();
        assert!(!found.trim().is_empty(), "helm uninstall removed CRD {name}");
    }
    let pool =
        cluster.kubectl(&["get", "ipaddresspool", "kept", "--ignore-not-found", "-o", "name"]).unwrap();
    assert!(!pool.trim().is_empty(), "helm uninstall removed the operator's IPAddressPool");

    phase("uninstalled");
    // An operator moving from kustomize: `kubectl apply -k` first; Helm refuses to take
    // over what it did not create until the README's two commands mark it as the
    // release's; then the chart installs over it (and over the kept CRDs).
    ferrolb_cluster::ferrolb::install(&cluster, "l2-bgp").unwrap();
    let err = helm::install(&cluster, &[]).unwrap_err().to_string();
    assert!(err.contains("cannot be imported into the current release"), "{err}");
    phase("kustomize install refused by helm");
    helm::adopt(&cluster, &[]).unwrap();
    let out = helm::install(&cluster, &["image.repository=registry.example/ferrolb"]).unwrap();
    assert!(out.contains("STATUS: deployed") && !out.contains("WARNING"), "{out}");
    let (objects, found) = present(&cluster, &manifest(&cluster));
    assert_eq!(found.len(), objects, "reinstalled but absent: of {objects}, only {found:?}");
    phase("adopted and installed again");
}
