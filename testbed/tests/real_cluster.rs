//! The real control plane itself (`ferrolb-testbed cluster up|down`) and ferrolb's
//! install on it: kube-apiserver v1.37 answering through the host's loopback, nothing
//! left behind by `down`, and every overlay of `manifests/` applied for real — CRDs
//! Established, the examples accepted, and the objects read back as written.
//!
//! Needs `target/kube/current/ferrolb-kube` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb, kube_binary};
use ferrolb_lab::{Lab, LabConfig, netns};
use serde_json::Value;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kubectl(kubeconfig: &str, args: &[&str]) -> String {
    run(Command::new(kube_binary().unwrap()).arg("kubectl").args(args).env("KUBECONFIG", kubeconfig))
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { continue };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) && e.file_name() != std::process::id().to_string().as_str() {
            found.push(format!("{}: {text}", e.file_name().to_string_lossy()));
        }
    }
    found
}

#[test]
fn cluster_up_serves_v1_37_on_loopback_and_down_leaves_nothing() {
    let name = format!("t{}", std::process::id());
    let bin = env!("CARGO_BIN_EXE_ferrolb-testbed");
    let up = run(Command::new(bin).args(["cluster", "up", "--name", &name, "--nodes", "2"]));
    let last = up.lines().last().unwrap();
    let kubeconfig = last.strip_prefix("export KUBECONFIG=").unwrap_or_else(|| panic!("last line: {last}"));
    let pid: i32 = std::fs::read_to_string(format!("/tmp/ferrolb-testbed/clusters/{name}/serve.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let version: Value = serde_json::from_str(&kubectl(kubeconfig, &["version", "-o", "json"])).unwrap();
    let server = version["serverVersion"]["gitVersion"].as_str().unwrap();
    assert!(server.starts_with("v1.37."), "server version {server}");
    assert_eq!(kubectl(kubeconfig, &["get", "--raw", "/readyz"]).trim(), "ok");
    // The apiserver lives in a node namespace; the host reaches it over loopback only.
    let server_url = kubectl(kubeconfig, &["config", "view", "-o", "jsonpath={.clusters[0].cluster.server}"]);
    assert!(server_url.starts_with("https://127.0.0.1:"), "{server_url}");
    let nodes = kubectl(kubeconfig, &["get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"]);
    assert_eq!(nodes, "node1 node2");
    let ours = format!("{}{pid}x", netns::PREFIX);
    let lab_dirs: Vec<String> = netns::list_ours()
        .into_iter()
        .filter(|n| n.starts_with(&ours))
        .filter_map(|n| n.split_once('-').map(|(id, _)| format!("/tmp/ferrolb-testbed/{id}")))
        .collect();
    assert!(!lab_dirs.is_empty(), "the cluster's lab namespaces exist while it is up");
    assert!(!processes_mentioning(&lab_dirs[0]).is_empty(), "control-plane processes run from the lab dir");

    run(Command::new(bin).args(["cluster", "down", "--name", &name]));
    assert!(!netns::pid_alive(pid), "cluster serve {pid} still runs");
    let left: Vec<String> = netns::list_ours().into_iter().filter(|n| n.starts_with(&ours)).collect();
    assert!(left.is_empty(), "namespaces left: {left:?}");
    assert!(
        processes_mentioning(&lab_dirs[0]).is_empty(),
        "processes left: {:?}",
        processes_mentioning(&lab_dirs[0])
    );
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(&ours), "mounts left: {mounts}");
    assert!(!Path::new(&lab_dirs[0]).exists(), "{} left", lab_dirs[0]);
    assert!(!Path::new(&format!("/tmp/ferrolb-testbed/clusters/{name}")).exists());
}

/// Every field of `want` is in `got` with the same value (the server may add defaults).
fn assert_subset(want: &Value, got: &Value, at: &str) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                let sub = g.get(k).unwrap_or_else(|| panic!("{at}.{k} missing from the served object"));
                assert_subset(v, sub, &format!("{at}.{k}"));
            }
        }
        (Value::Array(w), Value::Array(g)) => {
            assert_eq!(w.len(), g.len(), "{at}: {want} vs {got}");
            for (i, (a, b)) in w.iter().zip(g).enumerate() {
                assert_subset(a, b, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(want, got, "{at}"),
    }
}

#[test]
fn every_overlay_installs_for_real_and_the_examples_round_trip() {
    let examples = ferrolb::manifests_dir().join("examples");
    for overlay in ["l2", "bgp", "l2-bgp"] {
        let lab = Lab::up(LabConfig::nodes(1)).unwrap();
        let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
        let out = ferrolb::install(&cluster, overlay).unwrap();
        for kind in
            ["customresourcedefinition", "clusterrole", "daemonset.apps/ferrolb-speaker", "deployment.apps"]
        {
            assert!(out.contains(kind), "{overlay}: {kind} not applied:\n{out}");
        }
        let established = cluster
            .kubectl(&["get", "crd", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Established\")].status}{\"\\n\"}{end}"])
            .unwrap();
        let ferrolb_crds: Vec<&str> = established.lines().filter(|l| l.contains(".ferrolb.io=")).collect();
        assert_eq!(ferrolb_crds.len(), ferrolb_testbed_crd_count(), "{established}");
        assert!(ferrolb_crds.iter().all(|l| l.ends_with("=True")), "{established}");

        // The documented examples apply as they are …
        cluster.kubectl(&["apply", "-f", &examples.display().to_string()]).unwrap();
        // … and read back with every field as written.
        let local: Value = serde_json::from_str(
            &cluster
                .kubectl(&["apply", "--dry-run=client", "-o", "json", "-f", &examples.display().to_string()])
                .unwrap(),
        )
        .unwrap();
        let items = local["items"].as_array().cloned().unwrap_or_else(|| vec![local.clone()]);
        assert!(items.len() >= 8, "{overlay}: examples hold {} objects", items.len());
        for item in items {
            let kind = item["kind"].as_str().unwrap();
            let name = item["metadata"]["name"].as_str().unwrap();
            let resource = match group(&item) {
                g if g.is_empty() => kind.to_string(),
                g => format!("{kind}.{g}"),
            };
            let mut args = vec!["get".to_string(), resource, name.to_string(), "-o".into(), "json".into()];
            if let Some(ns) = item["metadata"]["namespace"].as_str() {
                args.extend(["-n".into(), ns.into()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let served: Value = serde_json::from_str(&cluster.kubectl(&args).unwrap()).unwrap();
            for field in ["spec", "data", "stringData"] {
                // The apiserver turns a Secret's stringData into data.
                if item[field].is_null() || (kind == "Secret" && field == "stringData") {
                    continue;
                }
                assert_subset(&item[field], &served[field], &format!("{overlay}: {kind}/{name}.{field}"));
            }
        }
        // Unknown fields are refused, not dropped: the schemas are structural.
        let bad = "apiVersion: ferrolb.io/v1alpha1\nkind: IPAddressPool\nmetadata: {name: typo}\nspec: {adresses: [192.0.2.0/24]}\n";
        let err = cluster.kubectl_stdin(&["apply", "--validate=strict", "-f", "-"], bad).unwrap_err();
        assert!(err.to_string().contains("adresses"), "{err}");
        drop(cluster);
        drop(lab);
    }
}

fn ferrolb_testbed_crd_count() -> usize {
    ferrolb_api::crd::crds().len()
}

/// The API group of `item` (empty for the core group).
fn group(item: &Value) -> String {
    let api_version = item["apiVersion"].as_str().unwrap();
    api_version.split_once('/').map(|(g, _)| g.to_string()).unwrap_or_default()
}

#[test]
fn the_kubelet_stand_in_gives_the_real_endpointslice_controller_ready_endpoints() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    let objects = "\
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {type: ClusterIP, selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: gated, namespace: default, labels: {app: web}}
spec:
  nodeName: node1
  readinessGates: [{conditionType: example.com/gate}]
  containers: [{name: c, image: example.invalid/c}]
---
apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: default, labels: {app: web}}
spec:
  nodeName: node2
  terminationGracePeriodSeconds: 2
  containers: [{name: c, image: example.invalid/c}]
";
    cluster.kubectl_stdin(&["apply", "-f", "-"], objects).unwrap();
    let endpoints = |c: &Cluster| {
        c.kubectl(&[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "jsonpath={range .items[?(@.addressType==\"IPv4\")].endpoints[*]}{.nodeName}:{.addresses[0]}:{.conditions.ready}:{.conditions.terminating} {end}",
        ])
    };
    let t = Duration::from_secs(30);
    // Ready follows the readiness gate; addresses are the node's (no CNI in the lab).
    ferrolb_lab::wait::until_value(
        "gated not ready, plain ready",
        t,
        || endpoints(&cluster),
        |s| s.contains("node1:192.0.2.11:false:false") && s.contains("node2:192.0.2.12:true:false"),
    )
    .unwrap();
    cluster
        .kubectl(&[
            "patch",
            "pod",
            "gated",
            "--subresource=status",
            "--type=strategic",
            "-p",
            r#"{"status":{"conditions":[{"type":"example.com/gate","status":"True"}]}}"#,
        ])
        .unwrap();
    ferrolb_lab::wait::until_value(
        "gated ready",
        t,
        || endpoints(&cluster),
        |s| s.contains("node1:192.0.2.11:true:false"),
    )
    .unwrap();
    // Deleting: terminating for the grace period, then gone.
    cluster.kubectl(&["delete", "pod", "plain", "--wait=false"]).unwrap();
    ferrolb_lab::wait::until_value(
        "plain terminating",
        t,
        || endpoints(&cluster),
        |s| s.contains("node2:192.0.2.12:false:true"),
    )
    .unwrap();
    ferrolb_lab::wait::until_value("plain gone", t, || endpoints(&cluster), |s| !s.contains("node2"))
        .unwrap();
}
