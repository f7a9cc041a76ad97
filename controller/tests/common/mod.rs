//! Shared fixtures for the controller tests on the fake apiserver.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use ferrolb_api::{IpAddressPool, IpAddressPoolSpec};
use ferrolb_controller::http::Health;
use ferrolb_controller::leader::LeaseConfig;
use ferrolb_controller::metrics::Metrics;
use ferrolb_controller::{Error, Settings};
use ferrolb_fakeapi::FakeApiServer;
/// The kit's bounded poll, for every test of this crate.
pub use ferrolb_fakeapi::wait::until;
/// The kit's reading of a Service's ingress IPs.
pub use ferrolb_lab::kubeapi::ingress_ips as ingress;
use k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub const NS: &str = "ferrolb-system";

/// A fake cluster with ferrolb's CRDs and the controller's namespace.
pub async fn cluster() -> (kube::Client, FakeApiServer) {
    cluster_on(FakeApiServer::new()).await
}

/// [`cluster`] on a fake built beforehand (e.g. `FakeApiServer::new().with_request_log()`).
pub async fn cluster_on(server: FakeApiServer) -> (kube::Client, FakeApiServer) {
    let (client, server) = server.client();
    for crd in ferrolb_api::crds() {
        server.register_crd(&crd).unwrap();
    }
    namespace(&client, NS, &[]).await;
    (client, server)
}

pub async fn namespace(client: &kube::Client, name: &str, labels: &[(&str, &str)]) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
}

pub fn pool(name: &str, addresses: &[&str]) -> IpAddressPool {
    IpAddressPool::new(name, IpAddressPoolSpec::new(addresses.iter().copied()))
}

pub async fn create_pool(client: &kube::Client, p: IpAddressPool) {
    Api::<IpAddressPool>::all(client.clone()).create(&PostParams::default(), &p).await.unwrap();
}

pub fn settings(identity: &str, leader: Option<Duration>) -> Settings {
    Settings {
        lb_class: ferrolb_api::DEFAULT_LOAD_BALANCER_CLASS.into(),
        namespace: NS.into(),
        identity: identity.into(),
        leader: leader.map(|d| LeaseConfig {
            namespace: NS.into(),
            name: "ferrolb-controller".into(),
            identity: identity.into(),
            duration: d,
            retry: Duration::from_millis(200),
        }),
    }
}

/// A controller running in a task; `stop` is a clean shutdown, `kill` a crash.
pub struct Running {
    pub metrics: Metrics,
    pub health: Health,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), Error>>,
}

/// Logs to the test output: warnings always (the harness shows them only for a failed
/// test, which then tells why a replica stepped down), more when RUST_LOG says so.
pub fn logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
}

/// Starts a controller on a client of its own, tagged with its identity (so that
/// `set_hanging_for` and the request log can single it out).
pub fn start(server: &FakeApiServer, settings: Settings) -> Running {
    start_on(server.new_client_tagged(&settings.identity), settings)
}

/// Starts a controller on `client` (e.g. one whose link to the fake a test controls).
pub fn start_on(client: kube::Client, settings: Settings) -> Running {
    logs();
    let (tx, rx) = oneshot::channel::<()>();
    let metrics = Metrics::new();
    let health = Health::default();
    let task = tokio::spawn(ferrolb_controller::run(
        client,
        settings,
        metrics.clone(),
        health.clone(),
        async move {
            let _ = rx.await;
        },
    ));
    Running { metrics, health, stop: Some(tx), task }
}

impl Running {
    /// Clean shutdown (as on SIGTERM); returns what `run` returned.
    pub async fn stop(mut self) -> Result<(), Error> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task.await.expect("controller task panicked")
    }

    /// A crash: the task is dropped wherever it is.
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    pub fn is_leader(&self) -> bool {
        self.metrics.leader.get() == 1
    }
}

/// Service fixture builder: `svc("ns", "web").port(80).annot(..)`.
pub struct Svc(pub Service);

pub fn svc(ns: &str, name: &str) -> Svc {
    Svc(Service {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some(ns.into()), ..Default::default() },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort { port: 80, protocol: Some("TCP".into()), ..Default::default() }]),
            ..Default::default()
        }),
        status: None,
    })
}

impl Svc {
    fn spec(&mut self) -> &mut ServiceSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }
    pub fn annot(mut self, k: &str, v: &str) -> Self {
        self.0.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(k.into(), v.into());
        self
    }
    pub fn class(mut self, c: &str) -> Self {
        self.spec().load_balancer_class = Some(c.into());
        self
    }
    pub fn lb_ip(mut self, ip: &str) -> Self {
        self.spec().load_balancer_ip = Some(ip.into());
        self
    }
    pub fn ports(mut self, ports: &[u16]) -> Self {
        self.spec().ports = Some(
            ports
                .iter()
                .map(|&p| ServicePort {
                    port: i32::from(p),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                })
                .collect(),
        );
        self
    }
    pub fn families(mut self, policy: &str, families: &[&str]) -> Self {
        self.spec().ip_family_policy = Some(policy.into());
        self.spec().ip_families = Some(families.iter().map(|f| f.to_string()).collect());
        self
    }
    pub fn cluster_ip(mut self) -> Self {
        self.spec().type_ = Some("ClusterIP".into());
        self
    }
    pub async fn create(self, client: &kube::Client) -> Service {
        let ns = self.0.namespace().unwrap();
        Api::<Service>::namespaced(client.clone(), &ns).create(&PostParams::default(), &self.0).await.unwrap()
    }
}

pub async fn get_svc(client: &kube::Client, ns: &str, name: &str) -> Service {
    Api::<Service>::namespaced(client.clone(), ns).get(name).await.unwrap()
}

/// Waits until the Service's status lists addresses, and returns them.
pub async fn addresses(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    until(&format!("{ns}/{name} has an address"), || async {
        let ips = ingress(&get_svc(client, ns, name).await);
        (!ips.is_empty()).then_some(ips)
    })
    .await
}

/// Events (events.k8s.io/v1) about an object with this reason.
pub async fn events(client: &kube::Client, ns: &str, name: &str, reason: &str) -> Vec<String> {
    Api::<K8sEvent>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// Waits for an Event and returns its note.
pub async fn event(client: &kube::Client, ns: &str, name: &str, reason: &str) -> String {
    until(&format!("a {reason} event about {ns}/{name}"), || async {
        events(client, ns, name, reason).await.into_iter().next()
    })
    .await
}

pub async fn pool_status(client: &kube::Client, name: &str) -> ferrolb_api::IpAddressPoolStatus {
    Api::<IpAddressPool>::all(client.clone()).get(name).await.unwrap().status.unwrap_or_default()
}
