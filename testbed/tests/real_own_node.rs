//! A speaker writes only for its own node, on the real control plane (kube-apiserver
//! v1.37) with the manifests applied as an operator does: the admission policy
//! `ferrolb-speaker-own-node` (manifests/base/speaker-own-node.yaml) refuses a token
//! bound to the speaker pod on node2 every write of node1's ServiceAnnouncements and of
//! the status of a pod on node1, allows the same writes for node2, refuses a speaker
//! token that names no node, and leaves everyone else's writes alone.
//!
//! RBAC alone grants all of it (one ServiceAccount for every speaker): without the
//! policy each refused write below returns 200.
//!
//! Needs `target/kube/current/ferrolb-kube` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::time::Duration;

use ferrolb_api::ServiceAnnouncement;
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::kubeapi::Objects as _;
use ferrolb_lab::{Lab, LabConfig, wait};
use k8s_openapi::api::authentication::v1::BoundObjectReference;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);
const NS: &str = "own-node";
const GATE: &str = "ferrolb.io/load-balancer-ready";
/// The speaker's field manager and node label (speaker/src/cluster/status/mod.rs).
const MANAGER: &str = "ferrolb-speaker";
const NODE_LABEL: &str = "ferrolb.io/node";

/// What the apiserver answered a write: `Ok` or (HTTP code, message).
type Answer = Result<(), (u16, String)>;

fn answer<T>(r: Result<T, kube::Error>) -> Answer {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message.clone())),
        Err(e) => panic!("the write did not reach the apiserver: {e}"),
    }
}

/// A ServiceAnnouncement as a speaker writes it: `spec.node` and the node label.
fn announcement(name: &str, node: &str, label: &str, address: &str) -> Value {
    json!({
        "apiVersion": "ferrolb.io/v1alpha1",
        "kind": "ServiceAnnouncement",
        "metadata": {"name": name, "namespace": NS, "labels": {NODE_LABEL: label}},
        "spec": {
            "node": node,
            "service": {"namespace": NS, "name": "web"},
            "protocol": "BGP",
            "addresses": [address],
            "peers": ["router-a"],
        },
    })
}

/// The ServiceAnnouncement write of a speaker: server-side apply, forced.
fn apply(cluster: &Cluster, client: &kube::Client, obj: &Value, dry_run: bool) -> Answer {
    let api: Api<ServiceAnnouncement> = Api::namespaced(client.clone(), NS);
    let name = obj["metadata"]["name"].as_str().unwrap();
    let mut pp = PatchParams::apply(MANAGER).force();
    pp.dry_run = dry_run;
    answer(cluster.block_on(api.patch(name, &pp, &Patch::Apply(obj))))
}

fn delete(cluster: &Cluster, client: &kube::Client, name: &str) -> Answer {
    let api: Api<ServiceAnnouncement> = Api::namespaced(client.clone(), NS);
    answer(cluster.block_on(api.delete(name, &DeleteParams::default())))
}

/// The readiness gate's condition on pod `name`, by a patch of `pods/status`. The
/// speaker sends a merge patch; a strategic one keeps the conditions the testbed's
/// kubelet wrote, and admission sees the same request (an UPDATE of pods/status).
fn set_gate(cluster: &Cluster, client: &kube::Client, name: &str) -> Answer {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let patch = json!({"status": {"conditions": [{
        "type": GATE, "status": "True", "reason": "Announced",
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }]}});
    let pp = PatchParams { field_manager: Some(MANAGER.into()), ..PatchParams::default() };
    answer(cluster.block_on(api.patch_status(name, &pp, &Patch::Strategic(&patch))))
}

fn gate_status(cluster: &Cluster, pod: &str) -> String {
    let path = format!("jsonpath={{.status.conditions[?(@.type==\"{GATE}\")].status}}");
    cluster.kubectl(&["get", "pod", "-n", NS, pod, "-o", &path]).unwrap()
}

fn exists(cluster: &Cluster, name: &str) -> bool {
    cluster.kubectl(&["get", "serviceannouncement", "-n", NS, name, "-o", "name"]).is_ok()
}

/// Asserts that `got` is the policy's refusal, naming everything in `names`.
fn assert_refused(what: &str, got: Answer, names: &[&str]) {
    match got {
        Err((403, msg)) => {
            assert!(msg.contains("ferrolb-speaker-own-node"), "{what}: refused, not by the policy: {msg}");
            for n in names {
                assert!(msg.contains(n), "{what}: the refusal should name {n:?}: {msg}");
            }
        }
        other => panic!("{what}: want 403 from the own-node policy, got {other:?}"),
    }
}

fn pod(name: &str, namespace: &str, node: &str, service_account: Option<&str>) -> String {
    let sa = service_account.map(|s| format!("\n  serviceAccountName: {s}")).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  nodeName: {node}{sa}\n  \
         readinessGates: [{{conditionType: {GATE}}}]\n  containers: [{{name: c, image: example.invalid/c}}]\n"
    )
}

#[test]
fn a_speaker_token_writes_only_its_own_nodes_announcements_and_pods() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    ferrolb::install(&cluster, "bgp").unwrap();
    let objects = [
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"),
        pod("web-1", NS, "node1", None),
        pod("web-2", NS, "node2", None),
        // node2's speaker pod, as the DaemonSet would run it there.
        pod("speaker-node2", ferrolb::NAMESPACE, "node2", Some(ferrolb::SPEAKER_SA)),
    ];
    cluster.kubectl_stdin(&["apply", "-f", "-"], &objects.join("---\n")).unwrap();

    // Credentials as the kubelet mounts them into node2's speaker pod: a token bound to
    // the pod, which the apiserver turns into a user naming node2.
    let server = format!("https://{}", cluster.host_addr());
    let uid = cluster
        .kubectl(&["get", "pod", "-n", ferrolb::NAMESPACE, "speaker-node2", "-o", "jsonpath={.metadata.uid}"])
        .unwrap();
    let speaker_pod = BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some("speaker-node2".into()),
        uid: Some(uid),
    };
    let conf = cluster
        .bound_token_kubeconfig(ferrolb::NAMESPACE, ferrolb::SPEAKER_SA, &speaker_pod, &server)
        .unwrap();
    let node2 = cluster.client_for(&conf).unwrap();

    // The policy is in force once the apiserver refuses a dry run of the first write.
    let foreign = announcement("web-node1-bgp", "node1", "node1", "203.0.113.1");
    let in_force =
        wait::until("the own-node policy refuses node2's speaker node1's ServiceAnnouncement", T, || {
            let refused = apply(&cluster, &node2, &foreign, true).err();
            Ok(refused.filter(|(code, msg)| *code == 403 && msg.contains("ferrolb-speaker-own-node")))
        });
    assert!(in_force.is_ok(), "without the own-node policy the apiserver accepts the write: {in_force:?}");
    // The apiserver type-checked every expression against Pod and ServiceAnnouncement:
    // a misspelt field would be a warning here and a refusal of every speaker write.
    let checked = ferrolb::wait_jsonpath(
        &cluster,
        &["validatingadmissionpolicy", "ferrolb-speaker-own-node"],
        "{.metadata.generation}={.status.observedGeneration} {.status.typeChecking}",
        T,
        |s| s.split_once(' ').is_some_and(|(g, _)| g.split_once('=').is_some_and(|(a, b)| a == b)),
    )
    .unwrap();
    assert!(!checked.contains("expressionWarnings"), "the policy's expressions: {checked}");

    // ServiceAnnouncements: node1's are refused, whichever way they are written.
    assert_refused(
        "create node1's announcement",
        apply(&cluster, &node2, &foreign, false),
        &["node2", "\"node1\"", "ServiceAnnouncement own-node/web-node1-bgp"],
    );
    assert!(!exists(&cluster, "web-node1-bgp"));
    // The policy matches the speaker only: the admin writes node1's announcement.
    cluster.apply(&foreign).unwrap();
    let moved = announcement("web-node1-bgp", "node1", "node1", "203.0.113.99");
    assert_refused("update node1's announcement", apply(&cluster, &node2, &moved, false), &["\"node1\""]);
    let taken = announcement("web-node1-bgp", "node2", "node2", "203.0.113.1");
    assert_refused("take node1's announcement over", apply(&cluster, &node2, &taken, false), &["\"node1\""]);
    assert_refused("delete node1's announcement", delete(&cluster, &node2, "web-node1-bgp"), &["\"node1\""]);
    let stored = cluster
        .kubectl(&[
            "get",
            "serviceannouncement",
            "-n",
            NS,
            "web-node1-bgp",
            "-o",
            "jsonpath={.spec.node} {.spec.addresses}",
        ])
        .unwrap();
    assert_eq!(stored, "node1 [\"203.0.113.1\"]", "node1's announcement must be as the admin wrote it");
    // Its own node's: allowed, but only under its own node label.
    let own = announcement("web-node2-bgp", "node2", "node2", "203.0.113.1");
    assert_eq!(apply(&cluster, &node2, &own, false), Ok(()), "node2's speaker writes node2's announcement");
    let relabelled = announcement("web-node2-bgp", "node2", "node1", "203.0.113.1");
    assert_refused(
        "label its announcement as node1's",
        apply(&cluster, &node2, &relabelled, false),
        &["ferrolb.io/node=node2"],
    );
    assert_eq!(delete(&cluster, &node2, "web-node2-bgp"), Ok(()), "node2's speaker deletes its own");

    // Pod readiness: only pods on node2.
    assert_refused(
        "the gate of a pod on node1",
        set_gate(&cluster, &node2, "web-1"),
        &["node2", "Pod own-node/web-1"],
    );
    assert_eq!(set_gate(&cluster, &node2, "web-2"), Ok(()), "node2's speaker sets the gate of node2's pod");
    assert_eq!(gate_status(&cluster, "web-2"), "True");
    assert_eq!(gate_status(&cluster, "web-1"), "", "the refused patch must not have landed");

    // A speaker token that names no node (no bound pod): refused everything, with the fix.
    let legacy = cluster
        .client_for(&cluster.token_kubeconfig_for(ferrolb::NAMESPACE, ferrolb::SPEAKER_SA, &server).unwrap())
        .unwrap();
    let fix = ["names no node", "projected ServiceAccount token"];
    assert_refused("an announcement with no node in the token", apply(&cluster, &legacy, &own, false), &fix);
    assert_refused("a pod's gate with no node in the token", set_gate(&cluster, &legacy, "web-2"), &fix);

    // The lab runs its speakers as processes with a token bound to their Node
    // (ferrolb::speaker_kubeconfig): the policy takes that node name the same way.
    let node1_ref = BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some("node1".into()),
        uid: None,
    };
    let node1 = cluster
        .client_for(
            &cluster
                .bound_token_kubeconfig(ferrolb::NAMESPACE, ferrolb::SPEAKER_SA, &node1_ref, &server)
                .unwrap(),
        )
        .unwrap();
    assert_eq!(
        apply(&cluster, &node1, &moved, false),
        Ok(()),
        "node1's speaker updates node1's announcement"
    );
    assert_eq!(
        delete(&cluster, &node1, "web-node1-bgp"),
        Ok(()),
        "node1's speaker deletes node1's announcement"
    );
    assert_refused(
        "node1's speaker, node2's pod",
        set_gate(&cluster, &node1, "web-2"),
        &["node1", "\"node2\""],
    );
}
