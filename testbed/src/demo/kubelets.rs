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

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde_json::Value;

use super::Timeline;
use crate::client::{self, ArpProbes, ArpReport, ProbeReport, ProbeStream};
use crate::cluster::vip::{Bootstrap, vip_server};
use crate::cluster::{self, Cluster, ClusterConfig, ferrolb, node_ready};
use crate::image::{self, Dockerfile};
use crate::kubeapi::Objects;
use crate::routers::{self, Bird, RouterSpec};
use crate::speaker::yaml;
use crate::{Error, Lab, LabConfig, plan, wait};

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
/// Interval of the client's connection probes during the upgrade.
pub const PROBE: Duration = Duration::from_millis(10);
/// A probe whose handshake takes longer is lost (a SYN the kernel must resend).
const PROBE_TIMEOUT: Duration = Duration::from_millis(900);
/// Interval of the client's ARP requests for the L2 Service during the upgrade.
pub const ARP_PROBE: Duration = Duration::from_millis(10);

/// How many sender addresses take turns asking: an answer up to `ARP_PROBE ×
/// ARP_SENDERS` (500 ms) late still counts for its request.
pub const ARP_SENDERS: u8 = 50;

/// A speaker pod: its name, its node, the image of its running container.
pub type SpeakerPod = (String, String, String);

/// What the demo measured.
#[derive(Debug)]
pub struct Report {
    /// Bytes of each image archive.
    pub image_bytes: u64,
    /// The speaker DaemonSet's rolling upgrade.
    pub upgrade: Upgrade,
    /// Time from power-on to each cold-start milestone, in order.
    pub cold_start: Vec<(String, Duration)>,
}

/// The speaker DaemonSet rolled from [`IMAGE`] to [`IMAGE_NEXT`] by the real DaemonSet
/// controller, with the client's TCP connection probes running all along.
#[derive(Debug)]
pub struct Upgrade {
    /// `kubectl set image` to `kubectl rollout status` done.
    pub took: Duration,
    /// The speaker pods before (name, node, image).
    pub before: Vec<SpeakerPod>,
    /// The speaker pods after, each Ready.
    pub after: Vec<SpeakerPod>,
    /// The L2 Service's address and its probes.
    pub l2: (IpAddr, ProbeReport),
    /// The client's ARP requests for the L2 Service's address: a new client resolving
    /// it at any moment of the upgrade.
    pub arp: ArpReport,
    /// The BGP Service's address and its probes.
    pub bgp: (IpAddr, ProbeReport),
}

fn check(cond: bool, what: impl FnOnce() -> String) -> Result<(), Error> {
    if cond { Ok(()) } else { Err(Error::Check(what())) }
}

/// Control-plane nodes holding the VIP on eth0.
pub fn holders(lab: &Lab) -> Vec<usize> {
    let needle = format!(" {}/32 ", cluster::VIP_V4);
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

/// The Services' backend: a Deployment of ferrolb's image whose one process serves HTTP
/// on the pod network (a speaker in static mode with nothing to announce: its /metrics).
fn backend() -> String {
    let node = yaml::node(1).replace('\n', "\n    ");
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: web-static, namespace: default}}
data:
  static.yaml: |
    {node}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      automountServiceAccountToken: false
      containers:
      - name: web
        image: {IMAGE}
        command: [/usr/local/bin/ferrolb-speaker]
        args: [--node-name, node1, --static, /etc/web/static.yaml, --metrics-addr, "0.0.0.0:8080"]
        ports: [{{containerPort: 8080}}]
        readinessProbe:
          httpGet: {{path: /readyz, port: 8080}}
          periodSeconds: 1
        volumeMounts: [{{name: static, mountPath: /etc/web}}]
      volumes: [{{name: static, configMap: {{name: web-static}}}}]
"#
    )
}

/// BGP to the router (the L2 pool comes from manifests/examples/l2.yaml) and two
/// Services of policy Cluster, one per pool: every node may carry their traffic, so a
/// speaker leaving hands its part over rather than taking it down.
fn bgp_and_services() -> String {
    let service = |name: &str, pool: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\n  annotations:\n    \
             ferrolb.io/address-pool: {pool}\nspec:\n  type: LoadBalancer\n  selector: {{app: web}}\n  \
             ports: [{{port: 80, targetPort: 8080, protocol: TCP}}]\n"
        )
    };
    yaml::stream(&[
        yaml::pool("public", &[plan::BGP_POOL_V4]),
        yaml::peer("router", plan::NODE_ASN, plan::ROUTER_ASN, plan::ROUTER_V4.into(), &[]),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        service("web-l2", "lan"),
        service("web-bgp", "public"),
    ])
}

/// Unix microseconds now.
fn now_us() -> i64 {
    let d = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
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

/// Whether every pod the selector picks in `ns` has all its containers started after
/// `since_us` (Unix µs) and is Ready: started by the kubelets after the cold start.
fn pods_restarted_ready(cluster: &Cluster, ns: &str, selector: &str, want: usize, since_us: i64) -> bool {
    let Ok(pods) = kubectl_json(cluster, &["get", "pods", "-n", ns, "-l", selector]) else {
        return false;
    };
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    items.len() == want
        && items.iter().all(|p| {
            running_and_ready(p)
                && p["status"]["containerStatuses"].as_array().is_some_and(|cs| {
                    cs.iter().all(|c| {
                        c["state"]["running"]["startedAt"]
                            .as_str()
                            .and_then(cluster::audit::rfc3339_us)
                            // startedAt has whole seconds.
                            .is_some_and(|t| t + 1_000_000 > since_us)
                    })
                })
        })
}

/// The speaker pods by node, and whether all are Ready.
fn speaker_pods(cluster: &Cluster) -> Result<(Vec<SpeakerPod>, bool), Error> {
    let pods = kubectl_json(cluster, &["get", "pods", "-n", ferrolb::NAMESPACE, "-l", SPEAKERS])?;
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    let ready = items.iter().all(running_and_ready);
    let mut out: Vec<SpeakerPod> = items
        .iter()
        .map(|p| {
            let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                s(&p["metadata"]["name"]),
                s(&p["spec"]["nodeName"]),
                s(&p["status"]["containerStatuses"][0]["image"]),
            )
        })
        .collect();
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok((out, ready))
}

const SPEAKERS: &str = "app.kubernetes.io/component=speaker";
const CONTROLLERS: &str = "app.kubernetes.io/component=controller";

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
        "lab {} up: router r1, node1..node{NODES}, client (addresses in testbed/src/plan.rs)",
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
    let upgrade = upgrade(&t, &lab, &cluster, l2, bgp)?;
    let cold_start = cold_start(&t, &lab, &mut cluster, &[first_v4(&ingress)?, l2, bgp])?;
    drop(cluster);
    drop(bird);
    drop(lab);
    t.say("lab torn down: every process, mount, cgroup and namespace");
    Ok(Report { image_bytes, upgrade, cold_start })
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
    let vip_port = format!("{}:{}", cluster::VIP_V4, cluster::APISERVER_PORT);
    wait::until("the worker's kubelet failing to reach the VIP", T, || {
        Ok(worker.kubelet_log().lines().any(|l| l.contains(&vip_port)).then_some(()))
    })?;
    let nodes: Api<Node> = Api::all(cluster.client());
    let name = plan::node_name(WORKER);
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
    t.say(format!("VIP {} up on node{}", cluster::VIP_V4, h[0]));
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
        let mirror = format!("ferrolb-bootstrap-{}", plan::node_name(i));
        let pod = wait::until(&format!("{mirror} Running and Ready"), T, || {
            Ok(kubectl_json(cluster, &["get", "pod", "-n", "kube-system", &mirror])
                .ok()
                .filter(running_and_ready))
        })?;
        check(
            pod["spec"]["containers"][0]["image"] == IMAGE && pod["spec"]["nodeName"] == plan::node_name(i),
            || format!("{mirror}: {}", pod["spec"]),
        )?;
    }
    t.say("ferrolb-bootstrap-node1..3: the kubelets' static pods, Running and Ready");
    Ok(())
}

/// ferrolb from `manifests/` on the kubelets, its configuration, the Services; returns
/// the example Service's ingress and the addresses of web-l2 and web-bgp.
fn install(
    t: &Timeline,
    lab: &Lab,
    bird: &Bird,
    cluster: &Cluster,
) -> Result<(String, IpAddr, IpAddr), Error> {
    let installed = Instant::now();
    // The speaker as shipped: no argument added (its heartbeat defaults included).
    ferrolb::install_on_kubelets(cluster, &lab.dir().join("kustomize"), "l2-bgp", IMAGE, &[])?;
    t.say(format!("kubectl apply -k (manifests/overlays/l2-bgp, image {IMAGE}, speaker defaults)"));
    let ns = ferrolb::NAMESPACE;
    ferrolb::wait_jsonpath(
        cluster,
        &["daemonset", "-n", ns, "ferrolb-speaker"],
        "{.status.numberReady}",
        T,
        |n| n == NODES.to_string(),
    )?;
    t.say(format!(
        "speaker DaemonSet Ready on {NODES} nodes {:.1} s after kubectl apply",
        installed.elapsed().as_secs_f64()
    ));
    ferrolb::wait_jsonpath(
        cluster,
        &["deployment", "-n", ns, "ferrolb-controller"],
        "{.status.readyReplicas}",
        T,
        |n| n == "2",
    )?;
    t.say(format!(
        "controller Deployment 2/2 Ready {:.1} s after kubectl apply",
        installed.elapsed().as_secs_f64()
    ));
    let pods = kubectl_json(cluster, &["get", "pods", "-n", ns])?;
    let mut speaker_nodes = Vec::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let spec = &pod["spec"];
        let name = &pod["metadata"]["name"];
        check(spec["containers"][0]["image"] == IMAGE, || {
            format!("{name} runs {}", spec["containers"][0]["image"])
        })?;
        match spec["serviceAccountName"].as_str().unwrap_or_default() {
            "ferrolb-speaker" => {
                let args = &spec["containers"][0]["args"];
                let tuned = args
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|x| x.as_str().is_some_and(|a| a.starts_with("--l2-heartbeat")));
                check(!tuned, || {
                    format!("{name} runs with heartbeat flags the manifests do not set: {args}")
                })?;
                speaker_nodes.push(spec["nodeName"].as_str().unwrap_or_default().to_owned());
            }
            "ferrolb-controller" => {
                // On the pod network, not the node's.
                let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
                check(ip.starts_with("198.19.2"), || format!("controller pod IP {ip}"))?;
            }
            other => return Err(Error::Check(format!("a pod of ServiceAccount {other} in {ns}"))),
        }
    }
    speaker_nodes.sort();
    check(speaker_nodes == (1..=NODES).map(plan::node_name).collect::<Vec<_>>(), || {
        format!("speakers on {speaker_nodes:?}")
    })?;
    println!(
        "\n--- kubectl get pods -A -o wide ---\n{}",
        cluster.kubectl(&["get", "pods", "-A", "-o", "wide"])?
    );

    // LoadBalancer Services get addresses and the client reaches their pod.
    let examples = ferrolb::manifests_dir().join("examples");
    cluster.kubectl(&["apply", "-f", &examples.join("l2.yaml").display().to_string()])?;
    cluster.kubectl_stdin(&["apply", "-f", "-"], &backend())?;
    let service_at = Instant::now();
    cluster.kubectl(&["apply", "-f", &examples.join("service.yaml").display().to_string()])?;
    cluster.kubectl_stdin(&["apply", "-f", "-"], &bgp_and_services())?;
    t.say(
        "kubectl apply: manifests/examples/l2.yaml and service.yaml (web, Local), a BGPPeer to the router, \
         Services web-l2 (pool lan) and web-bgp (pool public), a Deployment of app=web",
    );
    let ingress = wait_ingress(cluster, "web")?;
    t.say(format!(
        "Service web got {ingress} {:.1} s after it was created",
        service_at.elapsed().as_secs_f64()
    ));
    let l2 = first_v4(&wait_ingress(cluster, "web-l2")?)?;
    let bgp = first_v4(&wait_ingress(cluster, "web-bgp")?)?;
    t.say(format!("Service web-l2 got {l2}, web-bgp got {bgp}"));
    reach(lab, cluster, first_v4(&ingress)?, "")?;
    t.say(format!("client → http://{}/metrics on the LAN: the web pod answers", first_v4(&ingress)?));
    let hops: Vec<IpAddr> = (1..=NODES).map(plan::node_ip).collect();
    routers::wait_established(bird, &hops, T)?;
    routers::wait_kernel_route(lab.router(), &format!("{bgp}/32"), &hops, T)?;
    t.say(format!("router: {NODES} BGP sessions Established, {bgp}/32 ECMP over every node"));
    for a in [l2, bgp] {
        reach(lab, cluster, a, "")?;
    }
    t.say(format!(
        "client → http://{l2}/metrics (ARP) and http://{bgp}/metrics (through the router): answered"
    ));

    // ferrolb's components authenticated with their ServiceAccounts' tokens (the pods
    // hold no other credential: in-cluster config, no kubeconfig mounted).
    let audit = cluster.audit();
    for sa in [ferrolb::SPEAKER_SA, ferrolb::CONTROLLER_SA] {
        let user = format!("system:serviceaccount:{ns}:{sa}");
        check(audit.iter().any(|r| r.user == user), || format!("no request by {user}"))?;
    }
    Ok((ingress, l2, bgp))
}

/// The speaker DaemonSet rolled to [`IMAGE_NEXT`] under the client's probes.
fn upgrade(t: &Timeline, lab: &Lab, cluster: &Cluster, l2: IpAddr, bgp: IpAddr) -> Result<Upgrade, Error> {
    let probes =
        [l2, bgp].map(|a| ProbeStream::connect(lab.client(), SocketAddr::new(a, 80), PROBE, PROBE_TIMEOUT));
    let [l2_probe, bgp_probe] = probes;
    let (l2_probe, bgp_probe) = (l2_probe?, bgp_probe?);
    for p in [&l2_probe, &bgp_probe] {
        p.wait_answered(100, T)?;
    }
    // Unused LAN addresses (the client's is .100, the nodes' .11-.19, the L2 pool .200-).
    let senders: Vec<Ipv4Addr> = (0..ARP_SENDERS).map(|k| Ipv4Addr::new(192, 0, 2, 150 + k)).collect();
    let IpAddr::V4(l2_v4) = l2 else { return Err(Error::Check(format!("{l2} is not IPv4"))) };
    let arp = ArpProbes::start(lab.client(), "eth0", l2_v4, ARP_PROBE, &senders)?;
    t.say(format!(
        "client: a TCP connection to {l2}:80 and to {bgp}:80 every {} ms, an ARP request for {l2} every {} ms \
         (an answer up to {} ms late counts)",
        PROBE.as_millis(),
        ARP_PROBE.as_millis(),
        (ARP_PROBE * u32::from(ARP_SENDERS)).as_millis()
    ));
    let (before, _) = speaker_pods(cluster)?;
    let ns = ferrolb::NAMESPACE;
    let started = Instant::now();
    cluster.kubectl(&[
        "-n",
        ns,
        "set",
        "image",
        "daemonset/ferrolb-speaker",
        &format!("speaker={IMAGE_NEXT}"),
    ])?;
    t.say(format!("kubectl -n {ns} set image daemonset/ferrolb-speaker speaker={IMAGE_NEXT}"));
    cluster.kubectl(&["-n", ns, "rollout", "status", "daemonset/ferrolb-speaker", "--timeout=600s"])?;
    let took = started.elapsed();
    t.say(format!(
        "kubectl rollout status: the DaemonSet controller replaced {NODES} speakers in {:.1} s",
        took.as_secs_f64()
    ));
    let after = wait::until_value(
        "every new speaker Ready",
        T,
        || speaker_pods(cluster),
        |(pods, ready)| *ready && pods.len() == NODES && pods.iter().all(|p| p.2.ends_with(IMAGE_NEXT)),
    )?
    .0;
    check(after.iter().all(|p| before.iter().all(|b| b.0 != p.0)), || {
        format!("speaker pods not replaced: before {before:?}, after {after:?}")
    })?;
    for p in [&l2_probe, &bgp_probe] {
        p.wait_answered(100, T)?;
    }
    let arp = arp.stop()?;
    let owners: Vec<String> = arp
        .owners
        .iter()
        .map(|mac| (1..=NODES).find(|i| plan::node_mac(*i) == *mac).map_or(mac.clone(), plan::node_name))
        .collect();
    t.say(format!(
        "client ARP for {l2} during the upgrade: {} requests, {} unanswered {:?}, {} answered by two nodes \
         (handovers); owners {}",
        arp.sent,
        arp.unanswered.len(),
        arp.unanswered,
        arp.answered_twice,
        owners.join(" → ")
    ));
    for (pod, node, _) in &after {
        let logs = cluster.kubectl(&["logs", "-n", ns, pod]).unwrap_or_default();
        for line in logs.lines().filter(|l| l.contains("L2:") || l.contains("membership")) {
            println!("  {node} {}", line.trim());
        }
    }
    let l2_report = l2_probe.stop(Duration::ZERO);
    let bgp_report = bgp_probe.stop(Duration::ZERO);
    for (a, r) in [(l2, &l2_report), (bgp, &bgp_report)] {
        t.say(format!(
            "client → {a}:80 during the upgrade: {} connections, {} failed, longest outage {:.0} ms",
            r.sent,
            r.lost(),
            r.max_outage().as_secs_f64() * 1000.0
        ));
    }
    Ok(Upgrade { took, before, after, l2: (l2, l2_report), arp, bgp: (bgp, bgp_report) })
}

/// Power loss of the whole lab and its cold start; returns each milestone's time.
fn cold_start(
    t: &Timeline,
    lab: &Lab,
    cluster: &mut Cluster,
    addresses: &[IpAddr],
) -> Result<Vec<(String, Duration)>, Error> {
    let ns = ferrolb::NAMESPACE;
    let name = plan::node_name(WORKER);
    let vip_port = format!("{}:{}", cluster::VIP_V4, cluster::APISERVER_PORT);
    cluster.power_off(lab);
    check(holders(lab).is_empty(), || "the VIP survived the power-off".into())?;
    t.say("power off: every process of the cluster SIGKILLed, mounts, cgroups and the VIP gone; disks kept");
    let since_us = now_us();
    let t0 = Instant::now();
    let mut milestones = Vec::new();
    let mut milestone = |what: String| {
        t.say(format!("cold start: {what} after {:.1} s", t0.elapsed().as_secs_f64()));
        milestones.push((what, t0.elapsed()));
    };
    cluster.power_on()?;
    milestone("every process started".into());
    wait::until_value("the VIP after the cold start", T, || Ok(holders(lab)), |h| h.len() == 1)?;
    milestone("VIP up from the checkpoints".into());
    wait::until(&format!("{name} renewing its Lease through the VIP after the cold start"), T, || {
        let renew = cluster
            .kubectl(&["get", "lease", "-n", "kube-node-lease", &name, "-o", "jsonpath={.spec.renewTime}"])
            .ok();
        Ok(renew.as_deref().and_then(cluster::audit::rfc3339_us).filter(|t| *t > since_us))
    })?;
    milestone(format!("{name} registered (Lease renewed) through the VIP"));
    let peers = worker_apiserver_peers(lab)?;
    check(peers.iter().all(|p| *p == vip_port), || format!("{name}: {peers:?}"))?;
    wait::until_holds("the speakers restarted and Ready", T, || {
        pods_restarted_ready(cluster, ns, SPEAKERS, NODES, since_us)
    })?;
    milestone(format!("{NODES} speakers Ready"));
    wait::until_holds("the controllers restarted and Ready", T, || {
        pods_restarted_ready(cluster, ns, CONTROLLERS, 2, since_us)
    })?;
    milestone("2 controllers Ready".into());
    let examples = ferrolb::manifests_dir().join("examples");
    let cold =
        std::fs::read_to_string(examples.join("service.yaml"))?.replace("name: web\n", "name: web-cold\n");
    cluster.kubectl_stdin(&["apply", "-f", "-"], &cold)?;
    let cold_ingress = wait_ingress(cluster, "web-cold")?;
    milestone(format!("a new Service got {cold_ingress}"));
    for a in addresses.iter().copied().chain([first_v4(&cold_ingress)?]) {
        reach(lab, cluster, a, " after the cold start")?;
        milestone(format!("the client reached {a}:80"));
    }
    Ok(milestones)
}
