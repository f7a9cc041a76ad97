//! `kubectl ferrolb` on the real kube-apiserver (v1.37) with nothing but the shipped
//! `ferrolb-viewer` ClusterRole: a ServiceAccount bound to it (the role comes from
//! `manifests/base/viewer-rbac.yaml`, installed with the base overlay), its token in a
//! kubeconfig as a user has one, and the built plugin binary. Every command succeeds and
//! shows the objects; the audit log holds no refused request of the viewer; the same
//! token is refused every write. A rule missing from the role fails this test.
//!
//! The real controller assigns the address, writes the pool's counters, the Valid
//! conditions and the Events; the ServiceAnnouncement is written as a speaker writes it
//! (no router runs here, so no speaker announces).
//!
//! Needs `target/kube/current/ferrolb-kube` and the debug ferrolb binaries, including
//! `kubectl-ferrolb` (testbed/test.sh builds them first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ferrolb_api::IpAddressPool;
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb};
use ferrolb_lab::kubeapi::Objects as _;
use ferrolb_lab::speaker::yaml;
use ferrolb_lab::{Lab, LabConfig, addressing, binary, wait};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(60);
/// The workload's namespace.
const NS: &str = "shop";
/// Where the viewer's ServiceAccount lives.
const VIEWER_NS: &str = "observers";
const VIEWER: &str = "viewer";

/// A pool, a peer, an advertisement, and a LoadBalancer Service for the controller.
fn configuration() -> String {
    yaml::stream(&[
        yaml::pool("public", &["203.0.113.0/28"]),
        yaml::peer(
            "router-v4",
            addressing::NODE_ASN,
            addressing::ROUTER_ASN,
            addressing::ROUTER_V4.into(),
            &[],
        ),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n"),
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {NS}}}\n\
             spec: {{type: LoadBalancer, selector: {{app: web}}, ports: [{{port: 80, protocol: TCP}}]}}\n"
        ),
    ])
}

/// A ServiceAccount bound to the shipped ClusterRole, as an operator binds a person.
fn viewer_binding() -> String {
    yaml::stream(&[
        format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {VIEWER_NS}}}\n"),
        format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {VIEWER}, namespace: {VIEWER_NS}}}\n"
        ),
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: ferrolb-viewer-test}}\n\
             roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: ferrolb-viewer}}\n\
             subjects: [{{kind: ServiceAccount, name: {VIEWER}, namespace: {VIEWER_NS}}}]\n"
        ),
    ])
}

/// What node1's speaker writes when it sends `web`'s address to `router-v4`.
fn announcement(cluster: &Cluster, address: &str) -> String {
    let uid = cluster.kubectl(&["get", "svc", "-n", NS, "web", "-o", "jsonpath={.metadata.uid}"]).unwrap();
    format!(
        "apiVersion: ferrolb.io/v1alpha1\nkind: ServiceAnnouncement\nmetadata:\n  name: web-node1-bgp\n  namespace: {NS}\n  \
         ownerReferences: [{{apiVersion: v1, kind: Service, name: web, uid: {uid}}}]\n\
         spec: {{node: node1, service: {{namespace: {NS}, name: web}}, protocol: BGP, addresses: [\"{address}\"], peers: [router-v4]}}\n"
    )
}

/// Runs the plugin with `kubeconfig`; its stdout, or a panic with everything it printed.
fn plugin(kubeconfig: &Path, args: &[&str]) -> String {
    let bin = binary::workspace("kubectl-ferrolb", "debug").unwrap();
    let out = Command::new(&bin).arg("--kubeconfig").arg(kubeconfig).args(args).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && !stderr.to_lowercase().contains("forbidden"),
        "kubectl ferrolb {} as the viewer: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        args.join(" "),
        out.status
    );
    println!("$ kubectl ferrolb {}\n{stdout}{stderr}", args.join(" "));
    stdout.into_owned()
}

fn assert_shows(what: &str, out: &str, wants: &[&str]) {
    for want in wants {
        assert!(out.contains(want), "{what} does not show {want:?}:\n{out}");
    }
}

/// The viewer's requests in the audit log: (verb, resource, decision).
fn viewer_requests(cluster: &Cluster) -> Vec<(String, String, String)> {
    let user = format!("system:serviceaccount:{VIEWER_NS}:{VIEWER}");
    cluster
        .audit()
        .into_iter()
        .filter(|r| r.user == user && r.stage == "ResponseComplete")
        .map(|r| (r.verb, r.resource, r.decision))
        .collect()
}

/// Whether `result` is the apiserver's 403.
fn forbidden<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(s)) if s.code == 403)
}

#[test]
fn the_kubectl_plugin_reads_everything_with_the_viewer_role_and_writes_nothing() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    ferrolb::install(&cluster, "l2-bgp").unwrap();
    cluster.kubectl_stdin(&["apply", "-f", "-"], &configuration()).unwrap();
    cluster.kubectl_stdin(&["apply", "-f", "-"], &viewer_binding()).unwrap();
    let _controller = ferrolb::start_controller(&lab, &cluster, 1, "controller-a", &[]).unwrap();

    let address = ferrolb::wait_jsonpath(
        &cluster,
        &["svc", "-n", NS, "web"],
        "{.status.loadBalancer.ingress[0].ip}",
        T,
        |s| !s.is_empty(),
    )
    .unwrap();
    ferrolb::wait_jsonpath(&cluster, &["ipaddresspool", "public"], "{.status.assignedIPv4}", T, |s| s == "1")
        .unwrap();
    ferrolb::wait_jsonpath(
        &cluster,
        &["bgppeer", "router-v4"],
        "{.status.conditions[?(@.type==\"Valid\")].status}",
        T,
        |s| s == "True",
    )
    .unwrap();
    cluster.kubectl_stdin(&["apply", "-f", "-"], &announcement(&cluster, &address)).unwrap();

    // The plugin runs on the host, as a person would, through the host's forwarder.
    let server = format!("https://{}", cluster.host_addr());
    let conf = cluster.token_kubeconfig_for(VIEWER_NS, VIEWER, &server).unwrap();

    let status = plugin(&conf, &["status", "-A"]);
    assert_shows("status -A", &status, &[NS, "web", &address, "public", "BGP", "node1", "router-v4"]);
    let pools = plugin(&conf, &["pools"]);
    assert_shows("pools", &pools, &["public", "IPv4", "True"]);
    let pools_json: Value = serde_json::from_str(&plugin(&conf, &["pools", "-o", "json"])).unwrap();
    assert_eq!(pools_json[0]["assigned"], 1, "{pools_json}");
    let peers = plugin(&conf, &["peers"]);
    assert_shows(
        "peers",
        &peers,
        &["node1", "node2", "router-v4", &addressing::ROUTER_V4.to_string(), &address],
    );
    let explain = plugin(&conf, &["explain", "-n", NS, "web"]);
    assert_shows("explain", &explain, &[&address, "node1", "router-v4"]);

    // The apiserver agrees: it saw the viewer's reads and refused none.
    let reads = wait::until_value(
        "the viewer's reads in the audit log",
        T,
        || Ok(viewer_requests(&cluster)),
        |r| {
            ["services", "serviceannouncements", "ipaddresspools", "bgppeers", "nodes", "pods", "events"]
                .iter()
                .all(|res| r.iter().any(|(_, got, _)| got == res))
        },
    )
    .unwrap();
    let refused: Vec<_> = reads.iter().filter(|(.., decision)| decision != "allow").collect();
    assert!(refused.is_empty(), "the viewer was refused: {refused:?}");

    // The same token writes nothing.
    let viewer = cluster.client_for(&conf).unwrap();
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "sneaky", "namespace": NS},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}
    }))
    .unwrap();
    let pool: IpAddressPool = serde_json::from_value(json!({
        "apiVersion": "ferrolb.io/v1alpha1", "kind": "IPAddressPool",
        "metadata": {"name": "sneaky"}, "spec": {"addresses": ["198.51.100.0/28"]}
    }))
    .unwrap();
    let pp = PostParams::default();
    let r = cluster.block_on(Api::<Service>::namespaced(viewer.clone(), NS).create(&pp, &svc));
    assert!(forbidden(r), "the viewer created a Service");
    let r = cluster.block_on(Api::<IpAddressPool>::all(viewer.clone()).create(&pp, &pool));
    assert!(forbidden(r), "the viewer created an IPAddressPool");
    let r = cluster
        .block_on(Api::<IpAddressPool>::all(viewer).delete("public", &kube::api::DeleteParams::default()));
    assert!(forbidden(r), "the viewer deleted an IPAddressPool");
}
