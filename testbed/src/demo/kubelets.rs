//! `demo --kubelets`: the kubeadm recipe of the README, run on real nodes. Three
//! control-plane nodes run a real kube-apiserver each and, on their real kubelets, the
//! `ferrolb-bootstrap` static pod printed by `ferrolb-bootstrap manifest`, from
//! ferrolb's image imported into their containerd; the worker's kubelet knows the
//! apiserver only as `https://<VIP>:6443`. Until the static pods are in the control
//! planes' manifests folders the worker cannot register (its kubelet is seen failing to
//! reach the VIP first); once they are, the VIP comes up from the checkpoints and the
//! worker registers through it. Then ferrolb is installed from `manifests/` (overlay
//! l2-bgp, the image name rewritten to the imported one): the real scheduler places the
//! speaker DaemonSet and the controller Deployment, the kubelets run them with their
//! ServiceAccounts' projected tokens; LoadBalancer Services get addresses of an L2 pool
//! and of a BGP pool (BIRD on the router), and the client reaches their pod.
//!
//! Then the speaker DaemonSet's image tag changes to a second archive's and the real
//! DaemonSet controller rolls it node by node while the client opens a TCP connection to
//! the L2 and the BGP Service every 10 ms ([`Upgrade`]). Last, the whole lab loses power
//! and cold-starts (every etcd, apiserver, containerd, kubelet and kube-proxy started at
//! once from the disk alone): the time to each milestone is printed and returned.
//!
//! Every step that does not hold is an error; `testbed/tests/real_circle.rs` runs this
//! and asserts on the returned [`Report`]. Needs `target/kube/current/ferrolb-kube`
//! (testbed/kube/build.sh), the debug binaries the image holds, containerd, runc and a C
//! compiler (testbed/prereqs.sh).

mod active_active;
mod cold_start;
mod install;
mod upgrade;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde_json::Value;

use super::Timeline;
use ferrolb_cluster::vip::{Bootstrap, vip_server};
use ferrolb_cluster::{Cluster, ClusterConfig, ferrolb, node_ready};
use ferrolb_lab::client;
use ferrolb_lab::kubeapi::Objects;
use ferrolb_lab::routers::{Bird, RouterSpec};
use ferrolb_lab::{Error, Lab, LabConfig, addressing, wait};
use ferrolb_release::image::{self, Dockerfile};

pub use active_active::{ActiveActive, CONNECTIONS};
use cold_start::cold_start;
use install::install;
use upgrade::upgrade;
pub use upgrade::{AA_PROBE, ARP_PROBE, ARP_SENDERS, PROBE, SpeakerPod, Upgrade};

/// Control-plane nodes: node1..node3.
pub const CONTROL_PLANES: usize = 3;
/// Nodes; the last one is the worker.
pub const NODES: usize = 4;
/// The worker.
pub const WORKER: usize = 4;
/// Pod starts and registrations: generous for four nodes on a loaded 2-core machine.
const T: Duration = Duration::from_secs(240);
/// The image everything starts from.
pub const IMAGE: &str = "localhost/ferrolb:circle";
/// The speaker DaemonSet's image after the upgrade: a second archive, another tag.
pub const IMAGE_NEXT: &str = "localhost/ferrolb:circle-next";

/// What the demo measured.
#[derive(Debug)]
pub struct Report {
    /// Bytes of each image archive.
    pub image_bytes: u64,
    /// One address served by every node.
    pub active_active: ActiveActive,
    /// The speaker DaemonSet's rolling upgrade.
    pub upgrade: Upgrade,
    /// Time from power-on to each cold-start milestone, in order.
    pub cold_start: Vec<(String, Duration)>,
}

fn check(cond: bool, what: impl FnOnce() -> String) -> Result<(), Error> {
    if cond { Ok(()) } else { Err(Error::Check(what())) }
}

/// Control-plane nodes holding the VIP on eth0.
pub fn holders(lab: &Lab) -> Vec<usize> {
    let needle = format!(" {}/32 ", ferrolb_cluster::VIP_V4);
    (1..=CONTROL_PLANES)
        .filter(|i| {
            lab.node(*i).ip(&["-o", "addr", "show", "dev", "eth0"]).is_ok_and(|out| out.contains(&needle))
        })
        .collect()
}

/// The peers of the worker's established connections to port 6443.
fn worker_apiserver_peers(lab: &Lab) -> Result<Vec<String>, Error> {
    let out = lab.node(WORKER).exec(&["ss", "-Htn", "state", "established", "( dport = :6443 )"])?;
    Ok(out.lines().filter_map(|l| l.split_whitespace().last()).map(str::to_owned).collect())
}

fn kubectl_json(cluster: &Cluster, args: &[&str]) -> Result<Value, Error> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let text = cluster.kubectl(&all)?;
    serde_json::from_str(&text).map_err(|e| Error::Parse(format!("kubectl {}: {e}", args.join(" "))))
}

/// Whether a pod is Running with condition Ready.
pub fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// The speaker pods' label selector.
const SPEAKERS: &str = "app.kubernetes.io/component=speaker";

/// What the client's path to a Service address looks like, for a failure message.
pub fn diagnose(lab: &Lab, cluster: &Cluster, a: IpAddr) -> String {
    let mut out = String::new();
    for args in [
        &["get", "pods", "-A", "-o", "wide"][..],
        &["get", "endpointslices", "-n", "default", "-o", "yaml"][..],
        &["get", "serviceannouncements", "-A", "-o", "wide"][..],
    ] {
        out.push_str(&format!(
            "$ kubectl {}\n{}\n",
            args.join(" "),
            cluster.kubectl(args).unwrap_or_else(|e| e.to_string())
        ));
    }
    out.push_str(&format!("client neighbours: {:?}\n", lab.client().exec(&["ip", "neigh"])));
    out.push_str(&format!("ARP answers for {a}: {:?}\n", client::arp_responders(lab.client(), "eth0", a, 2)));
    out.push_str(&format!("router routes: {:?}\n", lab.router().exec(&["ip", "route"])));
    for (i, ns) in lab.nodes().iter().enumerate() {
        let nat = ns.exec(&["iptables-save", "-t", "nat"]).unwrap_or_default();
        let rules: Vec<&str> =
            nat.lines().filter(|l| l.contains(&a.to_string()) || l.contains("KUBE-SEP")).collect();
        out.push_str(&format!(
            "node{}: routes {:?}\nnat rules {rules:#?}\n",
            i + 1,
            ns.exec(&["ip", "route"])
        ));
    }
    out
}

/// The first IPv4 address of a Service's ingress list.
fn first_v4(ingress: &str) -> Result<IpAddr, Error> {
    ingress
        .split_whitespace()
        .filter_map(|a| a.parse().ok())
        .find(IpAddr::is_ipv4)
        .ok_or_else(|| Error::Check(format!("no IPv4 address in the ingress {ingress:?}")))
}

/// Waits for a Service's ingress addresses.
fn wait_ingress(cluster: &Cluster, name: &str) -> Result<String, Error> {
    ferrolb::wait_jsonpath(
        cluster,
        &["service", "-n", "default", name],
        "{.status.loadBalancer.ingress[*].ip}",
        T,
        |s| !s.is_empty(),
    )
}

/// Waits until the client gets the backend's /metrics from `a`:80.
fn reach(lab: &Lab, cluster: &Cluster, a: IpAddr, what: &str) -> Result<(), Error> {
    let body = wait::until(&format!("the client reaching {a}:80{what}"), T, || {
        Ok(client::http_get(lab.client(), SocketAddr::new(a, 80), "/metrics", Duration::from_secs(2)).ok())
    })
    .map_err(|e| Error::Check(format!("{e}\n{}", diagnose(lab, cluster, a))))?;
    check(body.contains("ferrolb_build_info"), || format!("{a}:80/metrics: {body}"))
}

/// Runs the demo; every expectation that fails is an error.
pub fn run() -> Result<Report, Error> {
    let t = Timeline::new();
    let lab = Lab::up(LabConfig::nodes(NODES))?;
    t.say(format!(
        "lab {} up: router r1, node1..node{NODES}, client (addresses in testbed/lab/src/addressing.rs)",
        lab.id()
    ));
    let bird = Bird::start(&lab, &RouterSpec::default())?;
    t.say("BIRD 2 on r1, listening for neighbours in 192.0.2.0/24 (AS 64512)");
    let dockerfile = Dockerfile::workspace()?;
    let binaries = image::workspace_binaries(&dockerfile, "debug")?;
    let archives = [lab.dir().join("ferrolb-image.tar"), lab.dir().join("ferrolb-image-next.tar")];
    let mut image_bytes = 0;
    for (name, archive) in [IMAGE, IMAGE_NEXT].into_iter().zip(&archives) {
        let built = image::build(&dockerfile, &binaries, name, archive)?;
        image::check(archive, &dockerfile)?;
        image_bytes = built.archive_bytes;
        t.say(format!(
            "ferrolb-testbed image build --tag {name}: {} ({:.1} MB)",
            archive.display(),
            built.archive_bytes as f64 / 1e6
        ));
    }
    let boot = Bootstrap::new(&lab.dir().join("etc-ferrolb"), CONTROL_PLANES, IMAGE)?;

    // What each node has on disk before its kubelet starts: the images, and on the
    // control planes their checkpoint (no apiserver needed). No static pod yet.
    let cfg = ClusterConfig {
        control_planes: CONTROL_PLANES,
        kubelets: true,
        workers_server: Some(vip_server()),
        ..Default::default()
    };
    let mut cluster = Cluster::start_with(&lab, &cfg, &mut |i, node, paths| {
        for archive in &archives {
            node.import(archive)?;
        }
        if i <= CONTROL_PLANES {
            boot.checkpoint_init(i, paths)?;
        }
        Ok(())
    })?;
    t.say(format!(
        "node1..node{CONTROL_PLANES}: etcd, kube-apiserver, kubelet, containerd; Ready through their own \
         apiservers; both images imported on every node; `ferrolb-bootstrap checkpoint init` on each control plane"
    ));
    circle(&t, &lab, &cluster, &boot)?;
    let (ingress, l2, bgp) = install(&t, &lab, &bird, &cluster)?;
    let active_active = active_active::active_active(&t, &lab, &cluster)?;
    let upgrade = upgrade(&t, &lab, &cluster, l2, bgp, active_active.address)?;
    let cold_start = cold_start(&t, &lab, &mut cluster, &[first_v4(&ingress)?, l2, bgp])?;
    drop(cluster);
    drop(bird);
    drop(lab);
    t.say("lab torn down: every process, mount, cgroup and namespace");
    Ok(Report { image_bytes, active_active, upgrade, cold_start })
}

/// The worker cannot register until the bootstrap static pods announce the VIP; then
/// it registers through it.
fn circle(t: &Timeline, lab: &Lab, cluster: &Cluster, boot: &Bootstrap) -> Result<(), Error> {
    let worker = &cluster.real_nodes()[WORKER - 1];
    let kubeconfig = std::fs::read_to_string(worker.paths().dir.join("kubelet.conf"))?;
    let servers: Vec<&str> = kubeconfig.lines().filter_map(|l| l.trim().strip_prefix("server: ")).collect();
    check(servers == [vip_server()], || format!("the worker's kubeconfig names {servers:?}"))?;

    // Without the static pods: the worker's kubelet tries the VIP and fails, and its
    // Node does not exist.
    let vip_port = format!("{}:{}", ferrolb_cluster::VIP_V4, ferrolb_cluster::APISERVER_PORT);
    wait::until("the worker's kubelet failing to reach the VIP", T, || {
        Ok(worker.kubelet_log().lines().any(|l| l.contains(&vip_port)).then_some(()))
    })?;
    let nodes: Api<Node> = Api::all(cluster.client());
    let name = addressing::node_name(WORKER);
    let found = cluster.block_on(nodes.get_opt(&name)).map_err(|e| Error::Parse(format!("get node: {e}")))?;
    check(found.is_none(), || format!("{name} registered without the VIP"))?;
    check(holders(lab).is_empty(), || format!("the VIP is up without bootstrap: {:?}", holders(lab)))?;
    t.say(format!(
        "node{WORKER} (worker, kubeconfig server {}) cannot register: nothing holds the VIP",
        vip_server()
    ));

    // The cluster side of bootstrap (its refresh): CRDs, read-only RBAC, the object.
    let crds = ferrolb::manifests_dir().join("crds");
    cluster.kubectl(&["apply", "--server-side", "-k", &crds.display().to_string()])?;
    cluster.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/controlplanevips.ferrolb.io",
    ])?;
    cluster.kubectl_stdin(&["apply", "-f", "-"], &boot.rbac()?)?;
    cluster.kubectl(&["apply", "-f", &boot.vip_file().display().to_string()])?;

    // The static pods go in: the VIP comes up, the worker registers through it.
    for i in 1..=CONTROL_PLANES {
        boot.install_static_pod(i, &cluster.real_nodes()[i - 1], cluster.paths())?;
    }
    t.say("`ferrolb-bootstrap manifest` written to /etc/kubernetes/manifests of node1..node3");
    let h = wait::until_value("the VIP on one control plane", T, || Ok(holders(lab)), |h| h.len() == 1)?;
    t.say(format!("VIP {} up on node{}", ferrolb_cluster::VIP_V4, h[0]));
    let node = wait::until(&format!("{name} Ready through the VIP"), T, || {
        Ok(cluster.block_on(nodes.get_opt(&name)).ok().flatten().filter(node_ready))
    })?;
    let version = node.status.and_then(|s| s.node_info).map(|i| i.kubelet_version).unwrap_or_default();
    check(version == "v1.37.2", || format!("{name}'s kubelet is {version}"))?;
    // Ready says the kubelet reached the apiserver, not that a connection is open at
    // this instant: between its requests it may have none (seen once).
    let peers = wait::until_value(
        &format!("{name}'s connections to port 6443"),
        T,
        || worker_apiserver_peers(lab),
        |p| !p.is_empty(),
    )?;
    check(peers.iter().all(|p| *p == vip_port), || format!("{name} talks to {peers:?}"))?;
    t.say(format!("{name} Ready (kubelet {version}), its only apiserver connection to {vip_port}"));

    // Each VIP holder candidate runs bootstrap as the kubelet's pod, Ready by its probe.
    for i in 1..=CONTROL_PLANES {
        let mirror = format!("ferrolb-bootstrap-{}", addressing::node_name(i));
        let pod = wait::until(&format!("{mirror} Running and Ready"), T, || {
            Ok(kubectl_json(cluster, &["get", "pod", "-n", "kube-system", &mirror])
                .ok()
                .filter(running_and_ready))
        })?;
        check(
            pod["spec"]["containers"][0]["image"] == IMAGE
                && pod["spec"]["nodeName"] == addressing::node_name(i),
            || format!("{mirror}: {}", pod["spec"]),
        )?;
    }
    t.say("ferrolb-bootstrap-node1..3: the kubelets' static pods, Running and Ready");
    Ok(())
}
