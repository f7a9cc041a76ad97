//! Simulated nodes on the real control plane (issue #39): kwok (`sigs.k8s.io/kwok`, built
//! beside `ferrolb-kube` by `testbed/kube/build.sh`) runs in the first control-plane
//! node's namespace as the kubelet of fake Nodes the testbed registers (`kwok-node-00001`,
//! …, annotated [`ANNOTATION`]). It keeps them Ready and makes the pods bound to them
//! Running and Ready with an IP from [`FAKE_POD_V4`], so the real EndpointSlice
//! controller lists them beside the lab's real nodes. Nothing runs for those pods and
//! nothing routes their addresses: they exist only in the API. See `testbed/kube/KWOK.md`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use super::pki::write_cert_kubeconfig;
use super::{Cluster, Paths, kube_binary, node_ready};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::{Spawn, Supervised, read_lossy, tail};
use ferrolb_lab::{Error, wait};

/// The annotation kwok manages Nodes by (`--manage-nodes-with-annotation-selector`).
pub const ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");
/// The label every fake Node carries (as in kwok's examples), to list or avoid them.
pub const LABEL: (&str, &str) = ("type", "kwok");
/// Fake Nodes' InternalIPs: fake node `i` is 198.19.192.0 + `i` (in the benchmarking
/// block, below the real nodes' pod subnets, [`ferrolb_lab::addressing::POD_V4`]).
pub const FAKE_NODE_V4: &str = "198.19.192.0/19";
/// Where kwok takes the fake pods' IPs from (`--cidr`): 16 382 of them.
pub const FAKE_POD_V4: &str = "198.19.128.0/18";
/// As many fake Nodes as [`FAKE_NODE_V4`] has addresses for.
pub const MAX_FAKE_NODES: usize = 8190;
/// The image of the fake pods' container: kwok pulls nothing, and `.invalid` never resolves.
pub const FAKE_IMAGE: &str = "fake.invalid/kwok-pod:0";
/// Creations in flight at once: enough to keep the apiserver busy, well under its
/// 200 mutating requests in flight.
const IN_FLIGHT: usize = 32;

/// Name of fake node `i` (1-based): `kwok-node-00001`.
pub fn fake_node_name(i: usize) -> String {
    format!("kwok-node-{i:05}")
}

/// InternalIP of fake node `i` (1-based, at most [`MAX_FAKE_NODES`]).
pub fn fake_node_v4(i: usize) -> Ipv4Addr {
    let base = u32::from(Ipv4Addr::new(198, 19, 192, 0));
    Ipv4Addr::from(base + u32::try_from(i.min(MAX_FAKE_NODES)).unwrap_or(0))
}

/// `kwok` and the stages it runs (`kwok-stages.yaml`), beside `ferrolb-kube`.
pub fn kwok_binary() -> Result<(PathBuf, PathBuf), Error> {
    let kube = kube_binary()?;
    let (bin, stages) = (kube.with_file_name("kwok"), kube.with_file_name("kwok-stages.yaml"));
    if bin.exists() && stages.exists() {
        Ok((bin, stages))
    } else {
        Err(Error::Missing(format!(
            "{} (or kwok-stages.yaml beside it) not found: build it first (testbed/kube/build.sh builds kwok \
             beside ferrolb-kube; testbed/test.sh runs it)",
            bin.display()
        )))
    }
}

/// What `count` fake Nodes need: kwok built, and addresses for them. Returns
/// [`kwok_binary`].
pub(super) fn check(count: usize) -> Result<(PathBuf, PathBuf), Error> {
    if count > MAX_FAKE_NODES {
        return Err(Error::Missing(format!(
            "ClusterConfig::kwok_nodes (--kwok-nodes) is {count}: at most {MAX_FAKE_NODES} fake nodes fit \
             in {FAKE_NODE_V4}; ask for fewer"
        )));
    }
    kwok_binary()
}

/// kwok running for a cluster, and the fake Nodes it keeps Ready.
#[derive(Debug)]
pub struct Kwok {
    proc: Supervised,
    nodes: Vec<String>,
    registered_in: Duration,
    ready_in: Duration,
}

impl Kwok {
    /// Starts kwok in `ns` (the first control plane's) against `server` with the admin's
    /// credentials, registers `count` fake Nodes and waits until all are Ready. With
    /// `leases`, kwok renews each Node's Lease as a kubelet does (needed when the node
    /// lifecycle controller runs, costly with thousands of Nodes otherwise).
    pub(super) fn start(
        ns: &Netns,
        paths: &Paths,
        server: &str,
        leases: bool,
        rt: &tokio::runtime::Runtime,
        admin: &kube::Client,
        count: usize,
    ) -> Result<Self, Error> {
        let (bin, stages) = check(count)?;
        let dir = paths.dir.join("kwok");
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("kwok.conf");
        write_cert_kubeconfig(paths, &conf, server, "kubernetes-admin", "admin")?;
        let spec = Spawn::new(
            "kwok",
            &[
                &bin.display().to_string(),
                &format!("--kubeconfig={}", conf.display()),
                &format!("--config={}", stages.display()),
                "--manage-all-nodes=false",
                &format!("--manage-nodes-with-annotation-selector={}={}", ANNOTATION.0, ANNOTATION.1),
                &format!("--node-lease-duration-seconds={}", if leases { 40 } else { 0 }),
                &format!("--cidr={FAKE_POD_V4}"),
            ],
        )
        // kwok also reads ~/.kwok/kwok.yaml when it exists: never the host's.
        .env("HOME", &dir.display().to_string());
        let proc = Supervised::start(ns, &paths.dir, &spec)?;
        let log = proc.log_path().to_owned();
        let failed = |e: Error| {
            Error::Parse(format!("{e}\n----- {} -----\n{}", log.display(), tail(&read_lossy(&log), 20)))
        };

        let started = Instant::now();
        let nodes = rt.block_on(register_nodes(admin, 1..=count))?;
        let registered_in = started.elapsed();
        let started = Instant::now();
        wait_ready(rt, admin, &nodes).map_err(failed)?;
        Ok(Kwok { proc, nodes, registered_in, ready_in: started.elapsed() })
    }

    /// The fake Nodes' names, in order.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// How long registering the fake Nodes took (the apiserver's answers).
    pub fn registered_in(&self) -> Duration {
        self.registered_in
    }

    /// How long the fake Nodes took to be Ready once registered (kwok's work).
    pub fn ready_in(&self) -> Duration {
        self.ready_in
    }

    /// kwok's log file.
    pub fn log_path(&self) -> &Path {
        self.proc.log_path()
    }

    pub(super) fn kill(&mut self) {
        self.proc.kill();
    }
}

/// Creates fake Nodes `range` (skipping those that exist), [`IN_FLIGHT`] at a time: the
/// annotation kwok manages them by, kubelet-like labels, their InternalIP and Hostname.
/// kwok writes the rest of their status (conditions, capacity, node info).
pub async fn register_nodes(
    client: &kube::Client,
    range: std::ops::RangeInclusive<usize>,
) -> Result<Vec<String>, Error> {
    let api: Api<Node> = Api::all(client.clone());
    let names: Vec<String> = range.clone().map(fake_node_name).collect();
    futures::stream::iter(range)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = fake_node_name(i);
                let node: Node = serde_json::from_value(json!({
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {ANNOTATION.0: ANNOTATION.1, "node.alpha.kubernetes.io/ttl": "0"},
                        "labels": {
                            "kubernetes.io/hostname": name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "kubernetes.io/role": "agent",
                            "node-role.kubernetes.io/agent": "",
                            LABEL.0: LABEL.1,
                        },
                    },
                    "status": {"addresses": [
                        {"type": "InternalIP", "address": fake_node_v4(i).to_string()},
                        {"type": "Hostname", "address": name},
                    ]},
                }))
                .map_err(|e| Error::Parse(format!("fake Node {name}: {e}")))?;
                match api.create(&PostParams::default(), &node).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err(Error::Parse(format!("registering fake Node {name}: {e}"))),
                }
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    Ok(names)
}

/// Waits until every Node of `names` is Ready, within a bound that grows with their number.
fn wait_ready(rt: &tokio::runtime::Runtime, admin: &kube::Client, names: &[String]) -> Result<(), Error> {
    let api: Api<Node> = Api::all(admin.clone());
    let lp = ListParams::default().labels(&format!("{}={}", LABEL.0, LABEL.1));
    let timeout =
        Duration::from_secs(60) + Duration::from_millis(20) * u32::try_from(names.len()).unwrap_or(0);
    let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut ready = 0;
    let what = format!("{} fake Nodes Ready through kwok", names.len());
    // Every second: a list of thousands of Nodes is not free.
    wait::until_every(&what, timeout, Duration::from_secs(1), || {
        let listed = rt.block_on(api.list(&lp)).map_err(|e| Error::Parse(format!("listing Nodes: {e}")))?;
        ready = listed
            .items
            .iter()
            .filter(|n| n.metadata.name.as_deref().is_some_and(|n| wanted.contains(n)) && node_ready(n))
            .count();
        Ok((ready == wanted.len()).then_some(()))
    })
    .map_err(|e| Error::Parse(format!("{e} ({ready} of {} Ready)", wanted.len())))
}

impl Cluster {
    /// kwok and its fake Nodes, when started with [`super::ClusterConfig::kwok_nodes`].
    pub fn kwok(&self) -> Option<&Kwok> {
        self.kwok.as_ref()
    }

    /// The fake Nodes' names (none without kwok).
    pub fn fake_nodes(&self) -> &[String] {
        self.kwok.as_ref().map_or(&[], |k| k.nodes())
    }

    /// Creates `count` pods `<app>-00001`, … labelled `app=<app>` in `namespace` (which
    /// must exist, with its default ServiceAccount), bound round-robin to the fake Nodes
    /// by `nodeName` (no scheduler involved), one container with port 8080 (`http`).
    /// Returns their names once the apiserver accepted them all; kwok then makes them
    /// Running and Ready with an IP from [`FAKE_POD_V4`].
    pub fn create_fake_pods(&self, namespace: &str, app: &str, count: usize) -> Result<Vec<String>, Error> {
        let nodes = self.fake_nodes();
        if nodes.is_empty() {
            return Err(Error::Missing(format!(
                "pods for fake nodes: the cluster has none (ClusterConfig::kwok_nodes, cluster up --kwok-nodes); \
                 {count} pods of app {app} not created"
            )));
        }
        let api: Api<Pod> = Api::namespaced(self.admin_client_blocking(), namespace);
        let names: Vec<String> = (1..=count).map(|i| format!("{app}-{i:05}")).collect();
        let create = futures::stream::iter(names.iter().enumerate())
            .map(|(i, name)| {
                let api = api.clone();
                let node = &nodes[i % nodes.len()];
                async move {
                    let pod: Pod = serde_json::from_value(json!({
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
                        "spec": {
                            "nodeName": node,
                            // Nothing runs: no token to mount, no environment to fill.
                            "automountServiceAccountToken": false,
                            "enableServiceLinks": false,
                            "terminationGracePeriodSeconds": 0,
                            "containers": [{
                                "name": "app",
                                "image": FAKE_IMAGE,
                                "ports": [{"name": "http", "containerPort": 8080}],
                            }],
                        },
                    }))
                    .map_err(|e| Error::Parse(format!("fake pod {namespace}/{name}: {e}")))?;
                    match api.create(&PostParams::default(), &pod).await {
                        Ok(_) => Ok(()),
                        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                        Err(e) => {
                            Err(Error::Parse(format!("creating pod {namespace}/{name} on {node}: {e}")))
                        }
                    }
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<()>();
        self.rt.block_on(create)?;
        Ok(names)
    }
}
