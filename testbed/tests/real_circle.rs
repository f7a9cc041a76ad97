//! The circle broken for real (issue #17 point 3): three control-plane nodes run a real
//! kube-apiserver each and, on their real kubelets, the `ferrolb-bootstrap` static pod
//! printed by `ferrolb-bootstrap manifest`, from ferrolb's image imported into their
//! containerd; the worker's kubelet knows the apiserver only as `https://<VIP>:6443`.
//! Until the static pods are in the control planes' manifests folders the worker cannot
//! register (its kubelet is seen failing to reach the VIP first); once they are, the
//! VIP comes up from the checkpoints and the worker registers through it. Then ferrolb
//! is installed from `manifests/` (overlay l2, the image name rewritten to the imported
//! one): the real scheduler places the speaker DaemonSet and the controller Deployment,
//! the kubelets run them with their ServiceAccounts' projected tokens (reaching the
//! apiservers through the `kubernetes` ClusterIP and the nodes' kube-proxy), a
//! LoadBalancer Service (manifests/examples) gets an address of the L2 pool and the
//! client on the LAN reaches its pod. Last, the whole lab loses power and cold-starts
//! (every etcd, apiserver, containerd, kubelet and kube-proxy started at once from the
//! disk alone): the time to each milestone is printed.
//!
//! Needs `target/kube/current/ferrolb-kube` (testbed/kube/build.sh), the debug binaries
//! the image holds, containerd, runc and a C compiler (testbed/prereqs.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use ferrolb_testbed::cluster::vip::{Bootstrap, vip_server};
use ferrolb_testbed::cluster::{self, Cluster, ClusterConfig, ferrolb, node_ready};
use ferrolb_testbed::image::{self, Dockerfile};
use ferrolb_testbed::kubeapi::Objects;
use ferrolb_testbed::speaker::yaml;
use ferrolb_testbed::{Lab, LabConfig, client, plan, wait};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde_json::Value;

const CONTROL_PLANES: usize = 3;
/// node4 is the worker.
const NODES: usize = 4;
const WORKER: usize = 4;
/// Pod starts and registrations: generous for four nodes on a loaded 2-core machine.
const T: Duration = Duration::from_secs(240);
const IMAGE: &str = "localhost/ferrolb:circle";

/// Control-plane nodes holding the VIP on eth0.
fn holders(lab: &Lab) -> Vec<usize> {
    let needle = format!(" {}/32 ", cluster::VIP_V4);
    (1..=CONTROL_PLANES)
        .filter(|i| lab.node(*i).ip(&["-o", "addr", "show", "dev", "eth0"]).unwrap().contains(&needle))
        .collect()
}

/// The peers of the worker's established connections to port 6443.
fn worker_apiserver_peers(lab: &Lab) -> Vec<String> {
    let out = lab.node(WORKER).exec(&["ss", "-Htn", "state", "established", "( dport = :6443 )"]).unwrap();
    out.lines().filter_map(|l| l.split_whitespace().last()).map(str::to_owned).collect()
}

/// The Service's backend: a Deployment of ferrolb's image whose one process serves HTTP
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

/// Unix microseconds now.
fn now_us() -> i64 {
    let d = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap();
    i64::try_from(d.as_micros()).unwrap()
}

/// Whether every pod the selector picks in `ns` has all its containers started after
/// `since_us` (Unix µs) and is Ready: started by the kubelets after the cold start.
fn pods_restarted_ready(cluster: &Cluster, ns: &str, selector: &str, want: usize, since_us: i64) -> bool {
    let Ok(text) = cluster.kubectl(&["get", "pods", "-n", ns, "-l", selector, "-o", "json"]) else {
        return false;
    };
    let Ok(pods) = serde_json::from_str::<Value>(&text) else { return false };
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

/// What the client's path to a Service address looks like, for a failure message.
fn diagnose(lab: &Lab, cluster: &Cluster, a: IpAddr) -> String {
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

fn kubectl_json(cluster: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&cluster.kubectl(&all).unwrap()).unwrap()
}

fn running_and_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

#[test]
fn workers_register_only_through_the_vip_of_the_bootstrap_static_pods() {
    let lab = Lab::up(LabConfig::nodes(NODES)).unwrap();
    let dockerfile = Dockerfile::workspace().unwrap();
    let binaries = image::workspace_binaries(&dockerfile, "debug").unwrap();
    let archive = lab.dir().join("ferrolb-image.tar");
    image::build(&dockerfile, &binaries, IMAGE, &archive).unwrap();
    let boot = Bootstrap::new(&lab.dir().join("etc-ferrolb"), CONTROL_PLANES, IMAGE).unwrap();

    // What each node has on disk before its kubelet starts: the image, and on the
    // control planes their checkpoint (no apiserver needed). No static pod yet.
    let cfg = ClusterConfig {
        control_planes: CONTROL_PLANES,
        kubelets: true,
        workers_server: Some(vip_server()),
        ..Default::default()
    };
    let started = Instant::now();
    let mut cluster = Cluster::start_with(&lab, &cfg, &mut |i, node, paths| {
        node.import(&archive)?;
        if i <= CONTROL_PLANES {
            boot.checkpoint_init(i, paths)?;
        }
        Ok(())
    })
    .unwrap();
    println!(
        "control planes Ready through their own apiservers after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let worker = &cluster.real_nodes()[WORKER - 1];
    let kubeconfig = std::fs::read_to_string(worker.paths().dir.join("kubelet.conf")).unwrap();
    let servers: Vec<&str> = kubeconfig.lines().filter_map(|l| l.trim().strip_prefix("server: ")).collect();
    assert_eq!(servers, [vip_server()], "the worker's kubeconfig");

    // Without the static pods: the worker's kubelet tries the VIP and fails, and its
    // Node does not exist.
    let vip_port = format!("{}:{}", cluster::VIP_V4, cluster::APISERVER_PORT);
    wait::until("the worker's kubelet failing to reach the VIP", T, || {
        Ok(worker.kubelet_log().lines().any(|l| l.contains(&vip_port)).then_some(()))
    })
    .unwrap();
    let nodes: Api<Node> = Api::all(cluster.client());
    let name = plan::node_name(WORKER);
    assert!(cluster.block_on(nodes.get_opt(&name)).unwrap().is_none(), "{name} registered without the VIP");
    assert!(holders(&lab).is_empty(), "the VIP is up without bootstrap: {:?}", holders(&lab));

    // The cluster side of bootstrap (its refresh): CRDs, read-only RBAC, the object.
    let crds = ferrolb::manifests_dir().join("crds");
    cluster.kubectl(&["apply", "--server-side", "-k", crds.to_str().unwrap()]).unwrap();
    cluster
        .kubectl(&["wait", "--for=condition=Established", "--timeout=60s", "crd/controlplanevips.ferrolb.io"])
        .unwrap();
    cluster.kubectl_stdin(&["apply", "-f", "-"], &boot.rbac().unwrap()).unwrap();
    cluster.kubectl(&["apply", "-f", boot.vip_file().to_str().unwrap()]).unwrap();

    // The static pods go in: the VIP comes up, the worker registers through it.
    let placed = Instant::now();
    for i in 1..=CONTROL_PLANES {
        boot.install_static_pod(i, &cluster.real_nodes()[i - 1], cluster.paths()).unwrap();
    }
    wait::until_value("the VIP on one control plane", T, || Ok(holders(&lab)), |h| h.len() == 1).unwrap();
    println!("VIP up {:.1} s after the static pods were placed", placed.elapsed().as_secs_f64());
    let node = wait::until(&format!("{name} Ready through the VIP"), T, || {
        Ok(cluster.block_on(nodes.get_opt(&name)).unwrap().filter(node_ready))
    })
    .unwrap();
    println!("{name} Ready {:.1} s after the static pods were placed", placed.elapsed().as_secs_f64());
    assert_eq!(node.status.unwrap().node_info.unwrap().kubelet_version, "v1.37.2");
    let peers = worker_apiserver_peers(&lab);
    assert!(!peers.is_empty() && peers.iter().all(|p| *p == vip_port), "{name} talks to {peers:?}");

    // Each VIP holder candidate runs bootstrap as the kubelet's pod, Ready by its probe.
    for i in 1..=CONTROL_PLANES {
        let mirror = format!("ferrolb-bootstrap-{}", plan::node_name(i));
        let pod = wait::until_value(
            &format!("{mirror} Running and Ready"),
            T,
            || Ok(cluster.kubectl(&["get", "pod", "-n", "kube-system", &mirror, "-o", "json"]).ok()),
            |p| {
                p.as_deref()
                    .and_then(|p| serde_json::from_str::<Value>(p).ok())
                    .is_some_and(|p| running_and_ready(&p))
            },
        )
        .unwrap();
        let pod: Value = serde_json::from_str(&pod.unwrap()).unwrap();
        assert_eq!(pod["spec"]["containers"][0]["image"], IMAGE);
        assert_eq!(pod["spec"]["nodeName"], plan::node_name(i));
    }

    // ferrolb from manifests/, on the real kubelets, from the imported image.
    let installed = Instant::now();
    ferrolb::install_on_kubelets(&cluster, &lab.dir().join("kustomize"), "l2", IMAGE).unwrap();
    let ns = ferrolb::NAMESPACE;
    ferrolb::wait_jsonpath(
        &cluster,
        &["daemonset", "-n", ns, "ferrolb-speaker"],
        "{.status.numberReady}",
        T,
        |n| n == NODES.to_string(),
    )
    .unwrap();
    println!(
        "speaker DaemonSet Ready on {NODES} nodes {:.1} s after kubectl apply",
        installed.elapsed().as_secs_f64()
    );
    ferrolb::wait_jsonpath(
        &cluster,
        &["deployment", "-n", ns, "ferrolb-controller"],
        "{.status.readyReplicas}",
        T,
        |n| n == "2",
    )
    .unwrap();
    println!(
        "controller Deployment 2/2 Ready {:.1} s after kubectl apply",
        installed.elapsed().as_secs_f64()
    );
    let pods = kubectl_json(&cluster, &["get", "pods", "-n", ns]);
    let mut speaker_nodes = Vec::new();
    for pod in pods["items"].as_array().unwrap() {
        let spec = &pod["spec"];
        assert_eq!(spec["containers"][0]["image"], IMAGE, "{}", pod["metadata"]["name"]);
        match spec["serviceAccountName"].as_str().unwrap() {
            "ferrolb-speaker" => speaker_nodes.push(spec["nodeName"].as_str().unwrap().to_owned()),
            "ferrolb-controller" => {
                // On the pod network, not the node's.
                let ip: IpAddr = pod["status"]["podIP"].as_str().unwrap().parse().unwrap();
                assert!(ip.to_string().starts_with("198.19.2"), "controller pod IP {ip}");
            }
            other => panic!("a pod of ServiceAccount {other} in {ns}"),
        }
    }
    speaker_nodes.sort();
    assert_eq!(speaker_nodes, (1..=NODES).map(plan::node_name).collect::<Vec<_>>());

    // A LoadBalancer Service gets an address and the client reaches its pod.
    let examples = ferrolb::manifests_dir().join("examples");
    cluster.kubectl(&["apply", "-f", examples.join("l2.yaml").to_str().unwrap()]).unwrap();
    cluster.kubectl_stdin(&["apply", "-f", "-"], &backend()).unwrap();
    let service_at = Instant::now();
    cluster.kubectl(&["apply", "-f", examples.join("service.yaml").to_str().unwrap()]).unwrap();
    let ingress = ferrolb::wait_jsonpath(
        &cluster,
        &["service", "-n", "default", "web"],
        "{.status.loadBalancer.ingress[*].ip}",
        T,
        |s| !s.is_empty(),
    )
    .unwrap();
    println!("Service web got {ingress} {:.1} s after it was created", service_at.elapsed().as_secs_f64());
    let v4: IpAddr = ingress.split_whitespace().filter_map(|a| a.parse().ok()).find(IpAddr::is_ipv4).unwrap();
    let body = wait::until(&format!("the client reaches {v4}:80"), T, || {
        Ok(client::http_get(lab.client(), SocketAddr::new(v4, 80), "/metrics", Duration::from_secs(2)).ok())
    })
    .unwrap();
    assert!(body.contains("ferrolb_build_info"), "{v4}:80/metrics: {body}");
    println!(
        "the client reached {v4}:80 {:.1} s after the Service was created",
        service_at.elapsed().as_secs_f64()
    );

    // ferrolb's components authenticated with their ServiceAccounts' tokens (the pods
    // hold no other credential: in-cluster config, no kubeconfig mounted).
    let audit = cluster.audit();
    for sa in [ferrolb::SPEAKER_SA, ferrolb::CONTROLLER_SA] {
        let user = format!("system:serviceaccount:{ns}:{sa}");
        assert!(audit.iter().any(|r| r.user == user), "no request by {user}");
    }

    // Cold start of the whole lab from its disks.
    cluster.power_off(&lab);
    assert!(holders(&lab).is_empty(), "the VIP survived the power-off");
    let since_us = now_us();
    let t0 = Instant::now();
    cluster.power_on().unwrap();
    let secs = || t0.elapsed().as_secs_f64();
    println!("cold start: every process started after {:.1} s", secs());
    wait::until_value("the VIP after the cold start", T, || Ok(holders(&lab)), |h| h.len() == 1).unwrap();
    println!("cold start: VIP up from the checkpoints after {:.1} s", secs());
    wait::until(&format!("{name} renewing its Lease through the VIP after the cold start"), T, || {
        let renew = cluster
            .kubectl(&["get", "lease", "-n", "kube-node-lease", &name, "-o", "jsonpath={.spec.renewTime}"])
            .ok();
        Ok(renew.as_deref().and_then(cluster::audit::rfc3339_us).filter(|t| *t > since_us))
    })
    .unwrap();
    println!("cold start: {name} registered (Lease renewed) through the VIP after {:.1} s", secs());
    assert!(
        worker_apiserver_peers(&lab).iter().all(|p| *p == vip_port),
        "{name}: {:?}",
        worker_apiserver_peers(&lab)
    );
    let speakers = "app.kubernetes.io/component=speaker";
    wait::until_holds("the speakers restarted and Ready", T, || {
        pods_restarted_ready(&cluster, ns, speakers, NODES, since_us)
    })
    .unwrap();
    println!("cold start: {NODES} speakers Ready after {:.1} s", secs());
    let controllers = "app.kubernetes.io/component=controller";
    wait::until_holds("the controllers restarted and Ready", T, || {
        pods_restarted_ready(&cluster, ns, controllers, 2, since_us)
    })
    .unwrap();
    println!("cold start: 2 controllers Ready after {:.1} s", secs());
    let cold = std::fs::read_to_string(examples.join("service.yaml"))
        .unwrap()
        .replace("name: web\n", "name: web-cold\n");
    cluster.kubectl_stdin(&["apply", "-f", "-"], &cold).unwrap();
    let cold_ingress = ferrolb::wait_jsonpath(
        &cluster,
        &["service", "-n", "default", "web-cold"],
        "{.status.loadBalancer.ingress[*].ip}",
        T,
        |s| !s.is_empty(),
    )
    .unwrap();
    println!("cold start: a new Service got {cold_ingress} after {:.1} s", secs());
    for svc in [ingress.as_str(), cold_ingress.as_str()] {
        let a: IpAddr = svc.split_whitespace().filter_map(|a| a.parse().ok()).find(IpAddr::is_ipv4).unwrap();
        let body = wait::until(&format!("the client reaches {a}:80 after the cold start"), T, || {
            Ok(client::http_get(lab.client(), SocketAddr::new(a, 80), "/metrics", Duration::from_secs(2))
                .ok())
        })
        .unwrap_or_else(|e| panic!("{e}\n{}", diagnose(&lab, &cluster, a)));
        assert!(body.contains("ferrolb_build_info"), "{a}:80/metrics: {body}");
        println!("cold start: the client reached {a}:80 after {:.1} s", secs());
    }
    drop(cluster);
    drop(lab);
}
