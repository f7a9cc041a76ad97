//! ferrolb on the real control plane, as an operator installs it: `kubectl apply -k`
//! of an overlay from `manifests/`, then the controller and the speakers as processes
//! in their node namespaces, each with a kubeconfig holding its own ServiceAccount's
//! token (TokenRequest) — never the admin's — so RBAC is part of every test.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::BoundObjectReference;

use super::Cluster;
use ferrolb_lab::process::{Proc, Spawn};
use ferrolb_lab::speaker::start_kube;
use ferrolb_lab::{Error, Lab, addressing, binary, wait};

/// The namespace the manifests install into.
pub const NAMESPACE: &str = "ferrolb-system";
/// The controller's ServiceAccount.
pub const CONTROLLER_SA: &str = "ferrolb-controller";
/// The speakers' ServiceAccount.
pub const SPEAKER_SA: &str = "ferrolb-speaker";
/// Where a controller serves its metrics, on its node's address (the manifests' port).
pub const CONTROLLER_METRICS_PORT: u16 = 7472;

/// `manifests/` of this workspace.
pub fn manifests_dir() -> PathBuf {
    ferrolb_lab::binary::workspace_root().join("manifests")
}

/// `kubectl apply -k manifests/overlays/<overlay>`, then waits until every ferrolb CRD
/// is Established. Returns kubectl's output.
pub fn install(cluster: &Cluster, overlay: &str) -> Result<String, Error> {
    let dir = manifests_dir().join("overlays").join(overlay);
    let out = cluster.kubectl(&["apply", "--server-side", "-k", &dir.display().to_string()])?;
    wait_crds(cluster)?;
    Ok(out)
}

/// Waits until every ferrolb CRD is Established.
pub(crate) fn wait_crds(cluster: &Cluster) -> Result<(), Error> {
    let crds: Vec<String> = ferrolb_api::crd::crds()
        .iter()
        .filter_map(|c| c.metadata.name.as_ref().map(|n| format!("crd/{n}")))
        .collect();
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    args.extend(crds.iter().map(String::as_str));
    cluster.kubectl(&args)?;
    Ok(())
}

/// A kubeconfig for a ferrolb ServiceAccount, pointing at apiserver `server_node` from the lab.
pub fn kubeconfig(cluster: &Cluster, service_account: &str, server_node: usize) -> Result<PathBuf, Error> {
    cluster.token_kubeconfig(NAMESPACE, service_account, server_node)
}

/// Starts the debug `ferrolb-controller` on node `i` with a fresh token of the controller
/// ServiceAccount (leader election on, identity = `tag`); `extra` flags appended.
pub fn start_controller(
    lab: &Lab,
    cluster: &Cluster,
    i: usize,
    tag: &str,
    extra: &[&str],
) -> Result<Proc, Error> {
    let conf = kubeconfig(cluster, CONTROLLER_SA, 1)?;
    start_controller_with(lab, i, tag, &conf, extra)
}

/// Like [`start_controller`] with a kubeconfig made beforehand: a kubelet restarts a
/// container with the token it already has, while the apiserver may be down.
pub fn start_controller_with(
    lab: &Lab,
    i: usize,
    tag: &str,
    kubeconfig: &Path,
    extra: &[&str],
) -> Result<Proc, Error> {
    let bin = binary::workspace("ferrolb-controller", "debug")?;
    lab.spawn(lab.node(i), controller_spawn(&bin, kubeconfig, i, tag, extra))
}

/// How [`start_controller_with`] starts `bin` on node `i`: for a caller running another
/// build (e.g. a release one) with `lab.spawn(lab.node(i), …)`.
pub fn controller_spawn(bin: &Path, kubeconfig: &Path, i: usize, tag: &str, extra: &[&str]) -> Spawn {
    let bin = bin.display().to_string();
    let conf = kubeconfig.display().to_string();
    let metrics = SocketAddr::new(addressing::node_v4(i).into(), CONTROLLER_METRICS_PORT).to_string();
    let mut argv = vec![
        bin.as_str(),
        "--kubeconfig",
        &conf,
        "--namespace",
        NAMESPACE,
        "--leader-elect",
        "--identity",
        tag,
        "--metrics-addr",
        &metrics,
    ];
    argv.extend_from_slice(extra);
    Spawn::new(tag.to_string(), &argv).env("RUST_LOG", "info,ferrolb_controller=debug")
}

/// A kubeconfig for the speaker of node `i`, pointing at apiserver `server_node`: the
/// speaker ServiceAccount's token bound to node `i`'s Node. A speaker pod's token is
/// bound to the pod instead; either way the apiserver names node `i` in the request's
/// user, which the speaker's own-node admission policy requires
/// (manifests/base/speaker-own-node.yaml) — and the lab's speakers run as processes,
/// with no pod to bind to.
pub fn speaker_kubeconfig(cluster: &Cluster, i: usize, server_node: usize) -> Result<PathBuf, Error> {
    let node = BoundObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(addressing::node_name(i)),
        uid: None,
    };
    cluster.bound_token_kubeconfig(NAMESPACE, SPEAKER_SA, &node, &cluster.lab_server(server_node))
}

/// Starts the debug `ferrolb-speaker` on node `i` with the speaker ServiceAccount's
/// token, bound to node `i` ([`speaker_kubeconfig`]).
pub fn start_speaker(
    lab: &Lab,
    cluster: &Cluster,
    i: usize,
    tag: &str,
    metrics: Option<SocketAddr>,
) -> Result<Proc, Error> {
    let conf = speaker_kubeconfig(cluster, i, 1)?;
    start_kube(lab, &conf, i, tag, metrics)
}

/// Waits until `kubectl get <what> -o jsonpath=<path>` prints something `ok` accepts;
/// returns that output.
pub fn wait_jsonpath(
    cluster: &Cluster,
    what: &[&str],
    path: &str,
    timeout: Duration,
    ok: impl Fn(&str) -> bool,
) -> Result<String, Error> {
    let mut args: Vec<&str> = vec!["get"];
    args.extend_from_slice(what);
    let jp = format!("jsonpath={path}");
    args.extend_from_slice(&["-o", &jp]);
    wait::until_value(&format!("kubectl {}", args.join(" ")), timeout, || cluster.kubectl(&args), |s| ok(s))
}
