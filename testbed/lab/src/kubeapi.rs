//! A fake Kubernetes apiserver for the lab: the in-process [`FakeApiServer`] served over
//! HTTP on the router's LAN address, so real `ferrolb-speaker --kubeconfig` processes in
//! the node namespaces talk to it while the test edits objects in-process.
//!
//! ```no_run
//! # use ferrolb_lab::{Lab, LabConfig, kubeapi::{FakeCluster, Objects}};
//! let lab = Lab::up(LabConfig::nodes(2))?;
//! let cluster = FakeCluster::start(&lab)?;
//! cluster.apply(&serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node1"}}))?;
//! // ferrolb-speaker --kubeconfig <cluster.kubeconfig()> in lab.node(1) ...
//! cluster.api().set_hanging(true); // the API unreachable: requests hang, watches end
//! # Ok::<(), ferrolb_lab::Error>(())
//! ```

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use ferrolb_fakeapi::FakeApiServer;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

use crate::{Error, Lab, addressing};

/// Port the fake apiserver listens on, on [`addressing::ROUTER_V4`].
pub const PORT: u16 = 6443;

/// A fake apiserver reachable from every node of a lab; stops when dropped.
pub struct FakeCluster {
    api: FakeApiServer,
    rt: tokio::runtime::Runtime,
    server: tokio::task::JoinHandle<()>,
    kubeconfig: PathBuf,
    addr: SocketAddr,
}

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCluster").field("addr", &self.addr).field("kubeconfig", &self.kubeconfig).finish()
    }
}

impl FakeCluster {
    /// Serves a fresh fake apiserver with ferrolb's CRDs registered on
    /// `ROUTER_V4:6443` (inside the router namespace) and writes a kubeconfig for it
    /// into the lab directory.
    pub fn start(lab: &Lab) -> Result<Self, Error> {
        Self::start_with(lab, FakeApiServer::new())
    }

    /// [`FakeCluster::start`] serving `api`, built by the caller (e.g. with a request log).
    pub fn start_with(lab: &Lab, api: FakeApiServer) -> Result<Self, Error> {
        let addr = SocketAddr::new(addressing::ROUTER_V4.into(), PORT);
        let listener = lab.router().run(move || -> std::io::Result<TcpListener> {
            let l = TcpListener::bind(addr)?;
            l.set_nonblocking(true)?;
            Ok(l)
        })??;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fake-apiserver")
            .enable_all()
            .build()?;
        for crd in ferrolb_api::crd::crds() {
            api.register_crd(&crd).map_err(|e| Error::Parse(format!("registering a ferrolb CRD: {e}")))?;
        }
        let server = {
            let _guard = rt.enter();
            let listener = tokio::net::TcpListener::from_std(listener)?;
            ferrolb_fakeapi::http::serve(&api, listener)
        };
        let kubeconfig = lab.dir().join("kubeconfig");
        ferrolb_fakeapi::http::write_kubeconfig(&kubeconfig, &addr.to_string())?;
        Ok(FakeCluster { api, rt, server, kubeconfig, addr })
    }

    /// The fake itself: outage controls, request counters, direct reads.
    pub fn api(&self) -> &FakeApiServer {
        &self.api
    }

    /// The kubeconfig to hand to processes in the lab.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Where the apiserver listens (reachable from the nodes and the router).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Objects for FakeCluster {
    /// An in-process client (no HTTP); use it inside [`Objects::block_on`].
    fn client(&self) -> kube::Client {
        let _guard = self.rt.enter();
        self.api.new_client()
    }

    fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }
}

/// Object writes a test makes as the cluster's admin, on the fake or the real
/// apiserver alike.
pub trait Objects {
    /// A client with the admin's rights.
    fn client(&self) -> kube::Client;

    /// Runs `f` on the runtime the client belongs to.
    fn block_on<F: Future>(&self, f: F) -> F::Output;

    /// Creates or replaces `obj` (any served kind; namespaced when
    /// `metadata.namespace` is set) by server-side apply as the test's field manager.
    fn apply(&self, obj: &serde_json::Value) -> Result<(), Error> {
        self.block_on(apply(&self.client(), obj))
    }

    /// [`apply_stream`] on this cluster.
    fn apply_stream(&self, text: &str) -> Result<(), Error> {
        self.block_on(apply_stream(&self.client(), text))
    }

    /// [`patch_status`] on this cluster.
    fn patch_status(&self, obj: &serde_json::Value) -> Result<(), Error> {
        self.block_on(patch_status(&self.client(), obj))
    }

    /// Deletes the object of `api_version`/`kind` named `name` (in `namespace`, if any).
    fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), Error> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let client = self.client();
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &ar),
            None => Api::all_with(client, &ar),
        };
        self.block_on(api.delete(name, &Default::default()))
            .map(|_| ())
            .map_err(|e| Error::Parse(format!("deleting {kind} {name}: {e}")))
    }
}

/// Creates or replaces `obj` (any served kind; namespaced when `metadata.namespace` is
/// set) by server-side apply as the test's field manager.
pub async fn apply(client: &kube::Client, obj: &serde_json::Value) -> Result<(), Error> {
    let (kind, name, api) = dynamic(client, obj);
    let params = PatchParams::apply("ferrolb-testbed").force();
    api.patch(&name, &params, &Patch::Apply(obj))
        .await
        .map(|_| ())
        .map_err(|e| Error::Parse(format!("applying {kind} {name}: {e}")))
}

/// Applies every object of a YAML stream (the static-file format, [`crate::fixtures`],
/// `speaker::yaml` builders); a Node's or Service's `status` then goes through the
/// status subresource, as the kubelet and the controller write it.
pub async fn apply_stream(client: &kube::Client, text: &str) -> Result<(), Error> {
    let stream = ferrolb_api::parse_stream("objects.yaml", text).map_err(|e| Error::Parse(e.to_string()))?;
    for (_, o) in stream.objects {
        let with_status = matches!(o, ferrolb_api::Object::Node(_) | ferrolb_api::Object::Service(_));
        let obj = serde_json::to_value(&o).map_err(|e| Error::Parse(e.to_string()))?;
        apply(client, &obj).await?;
        if with_status && !obj["status"].is_null() {
            patch_status(client, &obj).await?;
        }
    }
    Ok(())
}

/// Replaces the `status` of `obj` (its kind, namespace and name) by a merge patch of the
/// status subresource.
pub async fn patch_status(client: &kube::Client, obj: &serde_json::Value) -> Result<(), Error> {
    let (kind, name, api) = dynamic(client, obj);
    let patch = Patch::Merge(serde_json::json!({"status": obj["status"]}));
    api.patch_status(&name, &PatchParams::default(), &patch)
        .await
        .map(|_| ())
        .map_err(|e| Error::Parse(format!("writing the status of {kind} {name}: {e}")))
}

/// The kind, name and dynamic API of `obj` (namespaced when `metadata.namespace` is set).
fn dynamic(client: &kube::Client, obj: &serde_json::Value) -> (String, String, Api<DynamicObject>) {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let kind = obj["kind"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let api = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    (kind.to_string(), name, api)
}

/// The ingress IPs in a Service's `status.loadBalancer`.
pub fn ingress_ips(s: &k8s_openapi::api::core::v1::Service) -> Vec<String> {
    s.status
        .iter()
        .flat_map(|st| st.load_balancer.iter())
        .flat_map(|lb| lb.ingress.iter().flatten())
        .filter_map(|i| i.ip.clone())
        .collect()
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        self.server.abort();
    }
}
