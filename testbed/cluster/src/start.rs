//! Bringing a cluster up: etcd, the apiservers, the controller-manager and the
//! scheduler with their command lines, then the Nodes — registered by the testbed acting
//! as their kubelet, or real nodes whose kubelets register them.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::apiserver::{apiserver_addr, client_from, wait_ready};
use super::forward::Forwarder;
use super::pki::{write_cert_kubeconfig, write_client_pair, write_pki};
use super::{
    APISERVER_PORT, Cluster, ClusterConfig, ETCD_PORT, ISSUER, Paths, SERVICE_CIDRS, kube_binary, kubelet,
    kwok, node, node_ready,
};
use ferrolb_lab::https::TestCa;
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::{Proc, Spawn, Supervised, read_lossy, tail};
use ferrolb_lab::{Error, Lab, addressing, wait};

/// How long a real kubelet may take to register its Node Ready (a cold start of several
/// kubelets on a loaded 2-core machine).
const KUBELET_READY_TIMEOUT: Duration = Duration::from_secs(180);

impl Cluster {
    /// Starts etcd and the first apiserver on lab node 1, the other apiservers on nodes
    /// 2..=K, the controller-manager on node 1; waits for every apiserver's `/readyz`;
    /// registers every lab node as a Ready Node and starts acting as their kubelet, or,
    /// with [`ClusterConfig::kubelets`], starts a real node on each and waits until
    /// every Node is Ready; then, with [`ClusterConfig::kwok_nodes`], starts kwok and
    /// waits until its fake Nodes are Ready.
    pub fn start(lab: &Lab, cfg: &ClusterConfig) -> Result<Self, Error> {
        Self::start_with(lab, cfg, &mut |_, _, _| Ok(()))
    }

    /// [`Cluster::start`], calling `before_kubelet(i, node, paths)` for each real node `i`
    /// once its containerd runs and before its kubelet starts: what a node has on disk
    /// when it boots (imported images, static pods, checkpoints) goes in there.
    pub fn start_with(
        lab: &Lab,
        cfg: &ClusterConfig,
        before_kubelet: &mut dyn FnMut(usize, &node::RealNode, &Paths) -> Result<(), Error>,
    ) -> Result<Self, Error> {
        let k = cfg.control_planes;
        if k == 0 || k > lab.nodes().len() {
            return Err(Error::Missing(format!(
                "{k} control planes need as many lab nodes (the lab has {})",
                lab.nodes().len()
            )));
        }
        let kube = kube_binary()?;
        if cfg.kwok_nodes > 0 {
            // Missing kwok fails here, not after the control plane came up.
            kwok::check(cfg.kwok_nodes)?;
        }
        let paths = Paths::new(lab.subdir("cluster")?);
        std::fs::create_dir_all(&paths.pki)?;
        let ca = write_pki(&paths, k, &cfg.extra_sans)?;
        std::fs::write(paths.dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
        let log_dir = paths.dir.clone();
        let kube_s = kube.display().to_string();

        let cp1 = lab.node(1).clone();
        let etcd_url = format!("http://{}:{ETCD_PORT}", addressing::node_v4(1));
        let etcd_spec = Spawn::new(
            "etcd",
            &[
                &kube_s,
                "etcd",
                "--name=etcd",
                &format!("--data-dir={}", paths.dir.join("etcd").display()),
                &format!("--listen-client-urls={etcd_url},http://127.0.0.1:{ETCD_PORT}"),
                &format!("--advertise-client-urls={etcd_url}"),
                "--listen-peer-urls=http://127.0.0.1:2380",
                "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                "--initial-cluster=etcd=http://127.0.0.1:2380",
                "--listen-metrics-urls=http://127.0.0.1:2381",
                // A lab on a shared disk: durability across power loss is not tested here.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        );
        let etcd = Proc::start(&cp1, &log_dir, &etcd_spec)?;

        let mut apiserver_specs = Vec::new();
        for i in 1..=k {
            let spec = apiserver_spec(&kube_s, &paths, i, &etcd_url);
            apiserver_specs.push((lab.node(i).clone(), spec));
        }
        let mut apiservers = Vec::new();
        for (ns, spec) in &apiserver_specs {
            apiservers.push(Some(Proc::start(ns, &log_dir, spec)?));
        }

        let targets: Vec<(Netns, SocketAddr)> =
            (1..=k).map(|i| (lab.node(i).clone(), apiserver_addr(i))).collect();
        let forwarder = Forwarder::start(targets.clone())?;
        let direct = targets.into_iter().map(|t| Forwarder::start(vec![t])).collect::<Result<Vec<_>, _>>()?;

        let admin_server = format!("https://{}", forwarder.addr());
        write_cert_kubeconfig(&paths, &paths.admin_kubeconfig(), &admin_server, "kubernetes-admin", "admin")?;
        let cm_conf = paths.dir.join("controller-manager.conf");
        let cp1_server = format!("https://{}", apiserver_addr(1));
        write_cert_kubeconfig(
            &paths,
            &cm_conf,
            &cp1_server,
            "system:kube-controller-manager",
            "controller-manager",
        )?;

        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cluster")
            .enable_all()
            .build()?;

        let nodes: Vec<kubelet::NodeInfo> = (1..=lab.nodes().len())
            .map(|i| kubelet::NodeInfo {
                name: addressing::node_name(i),
                ips: vec![IpAddr::V4(addressing::node_v4(i)), IpAddr::V6(addressing::node_v6(i))],
                control_plane: i <= k,
            })
            .collect();

        let cm_spec = Spawn::new(
            "kube-controller-manager",
            &[
                &kube_s,
                "kube-controller-manager",
                &format!("--kubeconfig={}", cm_conf.display()),
                &format!("--authentication-kubeconfig={}", cm_conf.display()),
                &format!("--authorization-kubeconfig={}", cm_conf.display()),
                &format!("--service-account-private-key-file={}", paths.pki.join("sa.key").display()),
                &format!("--root-ca-file={}", paths.ca_cert().display()),
                "--use-service-account-credentials=true",
                // Without real kubelets nobody renews Node leases: the lifecycle
                // controller would taint every node NotReady and evict. With them it
                // runs, and removes the not-ready taint each Node registers with.
                if cfg.kubelets { "--controllers=*" } else { "--controllers=*,-node-lifecycle-controller" },
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "-v=1",
            ],
        );
        // The controller-manager starts once the first apiserver answers.
        wait_ready(&rt, &direct[0], &paths, Duration::from_secs(120))
            .map_err(|e| startup_failure(e, &log_dir))?;
        let controller_manager = Supervised::start(&cp1, &log_dir, &cm_spec)?;
        let scheduler_spec = if cfg.kubelets {
            let conf = paths.dir.join("scheduler.conf");
            write_cert_kubeconfig(&paths, &conf, &cp1_server, "system:kube-scheduler", "scheduler")?;
            let conf = conf.display().to_string();
            let spec = Spawn::new(
                "kube-scheduler",
                &[
                    &kube_s,
                    "kube-scheduler",
                    &format!("--kubeconfig={conf}"),
                    &format!("--authentication-kubeconfig={conf}"),
                    &format!("--authorization-kubeconfig={conf}"),
                    "--leader-elect=false",
                    "--bind-address=127.0.0.1",
                    "-v=1",
                ],
            );
            Some(spec)
        } else {
            None
        };
        let scheduler = scheduler_spec.as_ref().map(|s| Supervised::start(&cp1, &log_dir, s)).transpose()?;
        for (i, d) in direct.iter().enumerate().skip(1) {
            wait_ready(&rt, d, &paths, Duration::from_secs(120))
                .map_err(|e| startup_failure(Error::Parse(format!("apiserver {}: {e}", i + 1)), &log_dir))?;
        }

        let admin = client_from(&rt, &paths.admin_kubeconfig())?;
        let (kubelet, real_nodes) = if cfg.kubelets {
            let real = start_real_nodes(lab, &rt, &admin, &kube, &paths, &ca, &nodes, cfg, before_kubelet)
                .map_err(|e| startup_failure(e, &log_dir))?;
            (None, real)
        } else {
            rt.block_on(kubelet::register_nodes(&admin, &nodes))?;
            (Some(rt.spawn(kubelet::run(admin.clone(), nodes.clone()))), Vec::new())
        };
        // kwok's Leases matter only to the node lifecycle controller, which runs with real kubelets.
        let kwok = (cfg.kwok_nodes > 0)
            .then(|| kwok::Kwok::start(&cp1, &paths, &cp1_server, cfg.kubelets, &rt, &admin, cfg.kwok_nodes))
            .transpose()?;

        let cluster = Cluster {
            paths,
            kube,
            control_planes: k,
            nodes,
            etcd,
            etcd_spec,
            cm_spec,
            scheduler_spec,
            apiservers,
            apiserver_specs,
            controller_manager,
            scheduler,
            forwarder,
            direct,
            rt,
            kubelet,
            real_nodes,
            kwok,
            log_dir,
        };
        // The ServiceAccount controllers and the RBAC bootstrap must have run before a
        // test asks for a token: wait for the default ServiceAccount.
        wait::until("the default ServiceAccount", Duration::from_secs(60), || {
            Ok(cluster.kubectl(&["get", "serviceaccount", "default", "-n", "default", "-o", "name"]).ok())
        })?;
        Ok(cluster)
    }
}

const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

fn apiserver_spec(kube: &str, paths: &Paths, i: usize, etcd_url: &str) -> Spawn {
    let p = |f: &str| paths.pki.join(f).display().to_string();
    Spawn::new(
        format!("kube-apiserver-{}", addressing::node_name(i)),
        &[
            kube,
            "kube-apiserver",
            &format!("--etcd-servers={etcd_url}"),
            "--bind-address=::",
            &format!("--secure-port={APISERVER_PORT}"),
            &format!("--advertise-address={}", addressing::node_v4(i)),
            &format!("--tls-cert-file={}", p("apiserver.crt")),
            &format!("--tls-private-key-file={}", p("apiserver.key")),
            &format!("--client-ca-file={}", p("ca.crt")),
            &format!("--service-account-issuer={ISSUER}"),
            &format!("--service-account-key-file={}", p("sa.pub")),
            &format!("--service-account-signing-key-file={}", p("sa.key")),
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            &format!("--service-cluster-ip-range={SERVICE_CIDRS}"),
            &format!("--audit-policy-file={}", paths.dir.join("audit-policy.yaml").display()),
            &format!("--audit-log-path={}", paths.audit_log(i).display()),
            "--audit-log-format=json",
            // Never rotated (the default rotates at 100 MB): a rotation moves a window's
            // requests to a file `load::Window` does not read.
            "--audit-log-maxsize=0",
            "--allow-privileged=true",
            // Real kubelets (#17): dial them by InternalIP (lab node names do not
            // resolve), presenting a client cert their x509 authn accepts.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            &format!("--kubelet-client-certificate={}", p("apiserver-kubelet-client.crt")),
            &format!("--kubelet-client-key={}", p("apiserver-kubelet-client.key")),
            &format!("--cert-dir={}", paths.dir.join(format!("apiserver-{i}")).display()),
            "--profiling=false",
            "-v=1",
        ],
    )
}

/// Starts a real node on every lab node (its kubelet talks to its own apiserver on a
/// control-plane node, elsewhere to [`ClusterConfig::workers_server`] or the first
/// one), waits until every Node is Ready (but the workers' with a `workers_server`) and
/// labels the control planes as kubeadm does.
#[allow(clippy::too_many_arguments)]
fn start_real_nodes(
    lab: &Lab,
    rt: &tokio::runtime::Runtime,
    admin: &kube::Client,
    kube: &Path,
    paths: &Paths,
    ca: &TestCa,
    nodes: &[kubelet::NodeInfo],
    cfg: &ClusterConfig,
    before_kubelet: &mut dyn FnMut(usize, &node::RealNode, &Paths) -> Result<(), Error>,
) -> Result<Vec<node::RealNode>, Error> {
    let control_planes = cfg.control_planes;
    let pause = node::build_pause_image(&paths.dir.join("pause.tar"))?;
    let mut real = Vec::new();
    for (i, n) in nodes.iter().enumerate().map(|(i, n)| (i + 1, n)) {
        let pair = format!("kubelet-{}", n.name);
        write_client_pair(paths, ca, &pair, &format!("system:node:{}", n.name), Some("system:nodes"))?;
        let spec = node::NodeSpec {
            name: n.name.clone(),
            netns: lab.node(i).clone(),
            ips: n.ips.clone(),
            pod_subnet: Some(addressing::node_pod_v4(i)),
            proxy: Some(node::ProxySpec {
                client_cert: paths.pki.join("kube-proxy.crt"),
                client_key: paths.pki.join("kube-proxy.key"),
                cluster_cidr: addressing::POD_V4.into(),
            }),
            server: match &cfg.workers_server {
                Some(url) if i > control_planes => url.clone(),
                _ => format!("https://{}", apiserver_addr(if i <= control_planes { i } else { 1 })),
            },
            ca_cert: paths.ca_cert(),
            client_cert: paths.pki.join(format!("{pair}.crt")),
            client_key: paths.pki.join(format!("{pair}.key")),
        };
        pod_routes(lab.node(i), i, nodes.len())?;
        let dir = paths.dir.join(format!("kubelet-{}", n.name));
        let mut node = node::RealNode::start_containerd(&spec, &dir, &paths.dir, &pause)?;
        before_kubelet(i, &node, paths)?;
        node.start_kubelet(kube, &spec, &paths.dir)?;
        real.push(node);
    }
    let api: Api<Node> = Api::all(admin.clone());
    let awaited = if cfg.workers_server.is_some() { control_planes } else { nodes.len() };
    for (n, node) in nodes.iter().zip(&mut real).take(awaited) {
        let what = format!("Node {} Ready through its kubelet", n.name);
        let waited = wait::until(&what, KUBELET_READY_TIMEOUT, || {
            // A kubelet that exited never will be: stop waiting at once.
            if !node.kubelet_running() {
                return Ok(Some(Err(Error::Command {
                    command: format!("kubelet {}", n.name),
                    detail: "exited".into(),
                })));
            }
            let got = rt.block_on(api.get_opt(&n.name)).map_err(|e| Error::Parse(e.to_string()))?;
            Ok(got.filter(node_ready).map(Ok))
        });
        if let Err(e) = waited.and_then(|r| r) {
            return Err(Error::Parse(format!("{e}\n{}", node.logs(30))));
        }
        node.saw_ready();
        if n.control_plane {
            let label = json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}});
            rt.block_on(api.patch(&n.name, &PatchParams::default(), &Patch::Merge(&label)))
                .map_err(|e| Error::Parse(format!("labelling Node {}: {e}", n.name)))?;
        }
    }
    Ok(real)
}

/// Node `i`'s routes for pod networking, as a cluster's network would provide them: the
/// other nodes' pod subnets through those nodes, and the ClusterIPs (v4) on the LAN link —
/// only so that a connect() finds a route before kube-proxy's DNAT rewrites it (there is
/// no default route). Forwarding on, for the pods and for kube-proxy's DNAT.
fn pod_routes(ns: &Netns, i: usize, nodes: usize) -> Result<(), Error> {
    ns.sysctl("net.ipv4.ip_forward", "1")?;
    for j in (1..=nodes).filter(|j| *j != i) {
        ns.ip(&[
            "route",
            "replace",
            &addressing::node_pod_v4(j),
            "via",
            &addressing::node_v4(j).to_string(),
        ])?;
    }
    ns.ip(&["route", "replace", addressing::SERVICES_V4, "dev", "eth0"])?;
    Ok(())
}

fn startup_failure(e: Error, log_dir: &Path) -> Error {
    let mut logs = String::new();
    for name in ["etcd", "kube-apiserver-node1", "kube-controller-manager"] {
        let p = log_dir.join(format!("{name}.log"));
        logs.push_str(&format!("\n----- {} -----\n{}", p.display(), tail(&read_lossy(&p), 15)));
    }
    Error::Parse(format!("the control plane did not start: {e}{logs}"))
}
