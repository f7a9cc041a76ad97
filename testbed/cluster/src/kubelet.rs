//! The testbed as the lab's kubelet: it registers the lab nodes as Ready Nodes and, for
//! every pod bound to one of them, writes the status a kubelet would — `Running`, the
//! node's addresses as pod IPs (as for a hostNetwork pod: no CNI runs in the lab), and a
//! `Ready` condition that holds only while every readiness gate is True — so the real
//! EndpointSlice controller lists the pod as an endpoint. A pod being deleted is
//! removed after its grace period, as a kubelet does once its containers stopped.
//!
//! It does not run containers; a test starts whatever must answer in the node's
//! namespace itself.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use ferrolb_lab::Error;

/// A node the testbed registers and acts for.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Node name (`node1`, …).
    pub name: String,
    /// InternalIP addresses (IPv4 first).
    pub ips: Vec<IpAddr>,
    /// Labelled `node-role.kubernetes.io/control-plane`.
    pub control_plane: bool,
}

const MANAGER: &str = "ferrolb-testbed-kubelet";
/// The longest a deleted pod keeps terminating here, whatever its grace period.
const MAX_GRACE: u64 = 30;

/// Creates (or updates) each Node with its labels, then its status: addresses and a
/// Ready condition.
pub async fn register_nodes(client: &kube::Client, nodes: &[NodeInfo]) -> Result<(), Error> {
    let api: Api<Node> = Api::all(client.clone());
    let pp = PatchParams::apply(MANAGER).force();
    for n in nodes {
        let mut labels = json!({
            "kubernetes.io/hostname": n.name,
            "kubernetes.io/os": "linux",
        });
        if n.control_plane {
            labels["node-role.kubernetes.io/control-plane"] = json!("");
        }
        let node =
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n.name, "labels": labels}});
        api.patch(&n.name, &pp, &Patch::Apply(&node))
            .await
            .map_err(|e| Error::Parse(format!("registering Node {}: {e}", n.name)))?;
        let mut addresses: Vec<serde_json::Value> =
            n.ips.iter().map(|ip| json!({"type": "InternalIP", "address": ip.to_string()})).collect();
        addresses.push(json!({"type": "Hostname", "address": n.name}));
        let now = Timestamp::now().to_string();
        let status = json!({"status": {
            "addresses": addresses,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "ferrolb-testbed acts as this node's kubelet",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
        }});
        api.patch_status(&n.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(|e| Error::Parse(format!("writing Node {} status: {e}", n.name)))?;
    }
    Ok(())
}

/// Watches every pod and acts as the kubelet of `nodes` until aborted.
pub async fn run(client: kube::Client, nodes: Vec<NodeInfo>) {
    let pods: Api<Pod> = Api::all(client.clone());
    let deleting: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut stream = watcher(pods, watcher::Config::default()).default_backoff().applied_objects().boxed();
    while let Some(ev) = stream.next().await {
        let Ok(pod) = ev else { continue };
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else { continue };
        let Some(node) = nodes.iter().find(|n| n.name == node) else { continue };
        if pod.metadata.deletion_timestamp.is_some() {
            finish_deletion(&client, &pod, &deleting);
            continue;
        }
        if let Some(status) = desired_status(&pod, node) {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            // Strategic merge: conditions merge by type, so the readiness gates'
            // conditions that others write stay as they are.
            if let Err(e) = api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&status)).await
            {
                eprintln!("testbed kubelet: pod {ns}/{name} status: {e}");
            }
        }
    }
}

/// The status patch that makes `pod` look as its kubelet would report it, or `None`
/// when it already does.
pub fn desired_status(pod: &Pod, node: &NodeInfo) -> Option<serde_json::Value> {
    let status = pod.status.clone().unwrap_or_default();
    let conditions = status.conditions.clone().unwrap_or_default();
    let gates: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .map(|g| g.iter().map(|g| g.condition_type.clone()).collect())
        .unwrap_or_default();
    let pending: Vec<&String> =
        gates.iter().filter(|g| !conditions.iter().any(|c| &c.type_ == *g && c.status == "True")).collect();
    let ready = pending.is_empty();
    let ips: Vec<String> = node.ips.iter().map(IpAddr::to_string).collect();
    let current_ready = conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status == "True");
    let up_to_date = status.phase.as_deref() == Some("Running")
        && status.pod_ip.as_deref() == ips.first().map(String::as_str)
        && current_ready == Some(ready);
    if up_to_date {
        return None;
    }
    let now = Timestamp::now().to_string();
    let cond = |t: &str, ok: bool| {
        let mut c =
            json!({"type": t, "status": if ok { "True" } else { "False" }, "lastTransitionTime": now});
        if !ok {
            c["reason"] = json!("ReadinessGatesNotReady");
            c["message"] = json!(format!(
                "corresponding condition of pod readiness gate {} does not exist or is not True",
                pending.iter().map(|g| format!("\"{g}\"")).collect::<Vec<_>>().join(", ")
            ));
        }
        c
    };
    let start = status.start_time.map(|t| t.0.to_string()).unwrap_or_else(|| now.clone());
    Some(json!({"status": {
        "phase": "Running",
        "hostIP": ips.first(),
        "hostIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
        "podIP": ips.first(),
        "podIPs": ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>(),
        "startTime": start,
        "conditions": [
            cond("PodReadyToStartContainers", true),
            cond("Initialized", true),
            cond("ContainersReady", true),
            cond("PodScheduled", true),
            cond("Ready", ready),
        ],
    }}))
}

/// Deletes `pod` for good once its grace period is over (once per pod).
fn finish_deletion(client: &kube::Client, pod: &Pod, deleting: &Arc<Mutex<HashSet<String>>>) {
    let Some(uid) = pod.metadata.uid.clone() else { return };
    let first = deleting.lock().map(|mut d| d.insert(uid.clone())).unwrap_or(false);
    if !first {
        return;
    }
    let grace = pod.metadata.deletion_grace_period_seconds.and_then(|g| u64::try_from(g).ok()).unwrap_or(0);
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let deleting = deleting.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(grace.min(MAX_GRACE))).await;
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
            ..Default::default()
        };
        let _ = api.delete(&name, &dp).await;
        if let Ok(mut d) = deleting.lock() {
            d.remove(&uid);
        }
    });
}
