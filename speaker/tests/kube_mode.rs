//! Kubernetes mode on the in-process fake apiserver: the model from the API, the
//! ServiceAnnouncements and Events, crash consistency, and an apiserver outage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use ferrolb_api::NodeFacts;
use ferrolb_api::node_facts;
use ferrolb_api::{
    AnnouncementProtocol, Object, ServiceAnnouncement, ServiceAnnouncementSpec, ServiceRef, parse_stream,
};
use ferrolb_fakeapi::wait::until;
use ferrolb_fakeapi::{FakeApiServer, FakeService, ResponseBody};
use ferrolb_lab::fixtures::TWO_RACKS;
use ferrolb_lab::kubeapi;
use ferrolb_lab::netns::{PREFIX, TempNetns};
use ferrolb_speaker::cluster::{self, Feed};
use ferrolb_speaker::metrics::{KindLabel, Metrics};
use ferrolb_speaker::model::{ClusterModel, DEFAULT_LB_CLASS};
use ferrolb_speaker::plan::Plan;
use ferrolb_speaker::run::{self, KubeOptions, Options};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde_json::json;
use std::sync::Mutex;

/// The speaker's (and the controller's) namespace.
const NS: &str = "ferrolb-system";

/// Serves every ferrolb kind except those named in `skip`.
fn register_crds(server: &FakeApiServer, skip: &[&str]) {
    for crd in ferrolb_api::crds() {
        if !skip.contains(&crd.spec.names.kind.as_str()) {
            server.register_crd(&crd).unwrap();
        }
    }
}

/// The objects without the BFDProfile (and the peer's reference to it).
fn without_bfd(text: &str) -> String {
    let docs: Vec<&str> = text.split("\n---\n").filter(|d| !d.contains("kind: BFDProfile")).collect();
    docs.join("\n---\n").replace(", bfdProfile: fast", "")
}

/// Applies what the watchers send to a fresh model until every kind was listed once,
/// telling the watchers which Nodes to watch as the speaker's event loop does.
async fn synced(
    rx: &mut tokio::sync::mpsc::Receiver<cluster::Update>,
    watchers: &cluster::Watchers,
) -> (Feed, ClusterModel) {
    let mut feed = Feed::default();
    let mut model = ClusterModel::new(DEFAULT_LB_CLASS);
    while !feed.synced() {
        let u = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().unwrap();
        feed.apply(&mut model, u);
        if let Some(on) = feed.wants_facts() {
            watchers.set_facts_watch(on);
        }
        if let Some(scope) = feed.node_scope() {
            watchers.set_node_scope(scope);
        }
    }
    (feed, model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_from_the_api_equals_the_model_from_the_same_objects_as_a_static_file() {
    let (client, server) = FakeApiServer::new().client();
    register_crds(&server, &[]);
    kubeapi::apply_stream(&client, TWO_RACKS).await.unwrap();
    // Objects outside ferrolb's concern change nothing: a ClusterIP Service.
    let other = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "internal", "namespace": "default"},
        "spec": {"type": "ClusterIP"}});
    Api::<Service>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &serde_json::from_value(other).unwrap())
        .await
        .unwrap();

    let (tx, mut rx) = cluster::channel();
    let watchers = cluster::spawn_watchers(&client, &tx, "node1", NS);
    let (_, model) = synced(&mut rx, &watchers).await;
    let stream = parse_stream("objects.yaml", TWO_RACKS).unwrap();
    let from_file = ClusterModel::from_stream(stream, "objects.yaml", DEFAULT_LB_CLASS).unwrap();
    assert_eq!(model, from_file);
    assert!(
        !model.services.is_empty() && !model.endpoint_slices.is_empty() && !model.bfd_profiles.is_empty()
    );
}

/// Where the controller publishes every Node's facts, an L2 speaker reads the other nodes
/// from them and the same model results; it lists and watches its own Node only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_node_facts_give_the_same_model_without_watching_every_node() {
    let (client, server) = FakeApiServer::new().with_request_log().client();
    register_crds(&server, &[]);
    kubeapi::apply_stream(&client, TWO_RACKS).await.unwrap();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let ns = serde_json::from_value(ns).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    for node in Api::<Node>::all(client.clone()).list(&ListParams::default()).await.unwrap() {
        let cm = NodeFacts::of(&node).config_map(&node.name_any(), node.metadata.uid.as_deref(), NS);
        config_maps.create(&PostParams::default(), &cm).await.unwrap();
    }
    config_maps.create(&PostParams::default(), &node_facts::complete_config_map(NS)).await.unwrap();

    let from = server.request_log().len();
    let (tx, mut rx) = cluster::channel();
    let watchers = cluster::spawn_watchers(&client, &tx, "node1", NS);
    let (feed, model) = synced(&mut rx, &watchers).await;
    assert_eq!(feed.node_scope(), Some(cluster::NodeScope::Facts));
    let stream = parse_stream("objects.yaml", TWO_RACKS).unwrap();
    let from_file = ClusterModel::from_stream(stream, "objects.yaml", DEFAULT_LB_CLASS).unwrap();
    assert_eq!(model, from_file);
    let node_reads: Vec<String> = server.request_log()[from..]
        .iter()
        .filter(|r| r.path == "/api/v1/nodes")
        .map(|r| r.query.clone())
        .collect();
    assert!(!node_reads.is_empty());
    assert!(
        node_reads.iter().all(|q| q.contains("fieldSelector=metadata.name%3Dnode1")),
        "every Node read is of node1 alone: {node_reads:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_event_loop_holds_back_the_watchers_instead_of_queueing_without_bound() {
    let (client, server) = FakeApiServer::new().client();
    register_crds(&server, &[]);
    let (tx, mut rx) = cluster::channel();
    let watchers = cluster::spawn_watchers(&client, &tx, "node1", NS);
    let (mut feed, mut model) = synced(&mut rx, &watchers).await;
    // The event loop stalls while a burst four times the queue's depth is created.
    let burst = 4 * cluster::UPDATE_QUEUE;
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    for i in 0..burst {
        let s = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("burst-{i}"), "namespace": "default"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
        svcs.create(&PostParams::default(), &serde_json::from_value(s).unwrap()).await.unwrap();
    }
    until("the queue to fill", || async { (rx.len() >= cluster::UPDATE_QUEUE).then_some(()) }).await;
    // Then it drains: no more than the queue's depth ever waited, and nothing was lost.
    let mut most = 0;
    let mut seen = 0;
    while seen < burst {
        most = most.max(rx.len());
        let u = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.unwrap().unwrap();
        if let cluster::Update::Service(cluster::Change::Apply(_)) = &u {
            seen += 1;
        }
        feed.apply(&mut model, u);
    }
    assert!(most <= cluster::UPDATE_QUEUE, "{most} updates queued");
    assert_eq!(model.services.len(), burst);
}

/// Fails every request while closed, like an unreachable apiserver, or only LISTs
/// (a relist that cannot complete). The test's own client goes around it.
#[derive(Clone)]
struct Gate {
    inner: FakeService,
    closed: Arc<AtomicBool>,
    fail_lists: Arc<AtomicBool>,
    refused: Arc<AtomicUsize>,
}

impl tower::Service<http::Request<kube::client::Body>> for Gate {
    type Response = http::Response<ResponseBody>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let is_list =
            req.method() == http::Method::GET && !req.uri().query().unwrap_or("").contains("watch=true");
        if self.closed.load(Ordering::SeqCst) || (is_list && self.fail_lists.load(Ordering::SeqCst)) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            let e =
                std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "apiserver unreachable (test)");
            return Box::pin(std::future::ready(Err(e)));
        }
        let mut inner = self.inner.clone();
        Box::pin(async move { inner.call(req).await.map_err(|e: Infallible| match e {}) })
    }
}

/// Runs `body` on a runtime inside a fresh network namespace (only `lo`), so the
/// speaker's BGP sessions can reach nothing outside the test.
fn in_netns<F, Fut>(tag: &str, body: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let ns = TempNetns::create(&format!("{PREFIX}{}xkm-{tag}", std::process::id())).unwrap();
    ns.run(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(body());
    })
    .unwrap();
}

fn announcement(name: &str, node: &str, service: &Service, addresses: &[&str]) -> ServiceAnnouncement {
    let mut sa = ServiceAnnouncement::new(
        name,
        ServiceAnnouncementSpec {
            node: node.into(),
            service: ServiceRef { namespace: "default".into(), name: service.name_any() },
            protocol: AnnouncementProtocol::Bgp,
            addresses: addresses.iter().map(|a| (*a).to_owned()).collect(),
            interfaces: Vec::new(),
            peers: vec!["router-a".into()],
        },
    );
    sa.metadata.namespace = Some("default".into());
    sa.metadata.labels = Some([("ferrolb.io/node".to_owned(), node.to_owned())].into());
    sa.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: service.name_any(),
        uid: service.uid().unwrap(),
        ..OwnerReference::default()
    }]);
    sa
}

async fn announcements(client: &kube::Client) -> Vec<ServiceAnnouncement> {
    Api::<ServiceAnnouncement>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

async fn event_note(client: &kube::Client, service: &str, reason: &str, containing: &str) -> Option<String> {
    let events =
        Api::<Event>::namespaced(client.clone(), "default").list(&ListParams::default()).await.unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(service))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .find(|n| n.contains(containing))
}

/// Every plan the speaker made, in order.
#[derive(Clone)]
struct Plans(Arc<Mutex<Vec<Plan>>>);

impl Plans {
    fn record(mut rx: tokio::sync::mpsc::UnboundedReceiver<Plan>) -> Self {
        let plans = Plans(Arc::default());
        let p = plans.clone();
        tokio::spawn(async move {
            while let Some(a) = rx.recv().await {
                p.0.lock().unwrap().push(a);
            }
        });
        plans
    }
    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn latest(&self) -> Option<Plan> {
        self.0.lock().unwrap().last().cloned()
    }
    fn since(&self, n: usize) -> Vec<Plan> {
        self.0.lock().unwrap()[n..].to_vec()
    }
}

fn announced(plan: &Plan) -> BTreeSet<String> {
    plan.bgp_addresses().iter().map(|p| p.addr().to_string()).collect()
}

#[test]
fn announcements_status_events_crash_consistency_and_an_apiserver_outage() {
    in_netns("status", || async {
        let (client, server) = FakeApiServer::new().with_request_log().client();
        // BFDProfiles are not served yet: the speaker must wait for every list.
        register_crds(&server, &["BFDProfile"]);
        kubeapi::apply_stream(&client, &without_bfd(TWO_RACKS)).await.unwrap();
        let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
        let web = svcs.get("web").await.unwrap();
        let sas: Api<ServiceAnnouncement> = Api::namespaced(client.clone(), "default");
        let pp = PostParams::default();
        // What an earlier run of node1 left (one stale, one outdated), and node2's own.
        sas.create(&pp, &announcement("stale-node1-bgp", "node1", &web, &["203.0.113.99"])).await.unwrap();
        sas.create(&pp, &announcement("web-node1-bgp", "node1", &web, &["203.0.113.77"])).await.unwrap();
        sas.create(&pp, &announcement("web-node2-bgp", "node2", &web, &["203.0.113.10"])).await.unwrap();

        let closed = Arc::new(AtomicBool::new(false));
        let fail_lists = Arc::new(AtomicBool::new(false));
        let gate = Gate {
            inner: server.service(),
            closed: closed.clone(),
            fail_lists: fail_lists.clone(),
            refused: Arc::default(),
        };
        let speaker_client = kube::Client::new(gate.clone(), "default");
        let metrics = Arc::new(Metrics::new());
        let (plans_tx, plans_rx) = tokio::sync::mpsc::unbounded_channel();
        let plans = Plans::record(plans_rx);
        let opts = KubeOptions {
            options: Options::defaults("node1"),
            namespace: "ferrolb-system".into(),
            plans: Some(plans_tx),
            record: None,
        };
        let run = tokio::spawn(run::run_kube(opts, speaker_client, metrics.clone()));

        // Not every kind listed: not ready, nothing planned, nothing written or deleted.
        until("the BFDProfile watch to fail", || async {
            (metrics.watch_errors.get_or_create(&KindLabel { kind: "BFDProfile".into() }).get() >= 1)
                .then_some(())
        })
        .await;
        // Proof the other kinds were processed: each was listed, and its watch opened.
        until("every other kind listed and watched", || async {
            let log = server.request_log();
            let watched = |plural: &str| {
                log.iter().any(|r| r.verb == Some(ferrolb_fakeapi::Verb::Watch) && r.path.ends_with(plural))
            };
            const OTHERS: [&str; 7] = [
                "nodes",
                "services",
                "endpointslices",
                "ipaddresspools",
                "bgppeers",
                "bgpadvertisements",
                "l2advertisements",
            ];
            OTHERS.into_iter().all(watched).then_some(())
        })
        .await;
        assert!(!metrics.is_ready());
        assert_eq!(plans.count(), 0, "planned before every kind was listed");
        assert_eq!(announcements(&client).await.len(), 3);

        server.register_crd(&ferrolb_api::BfdProfile::crd()).unwrap();
        let plan = until("the first plan", || async { plans.latest() }).await;
        assert_eq!(announced(&plan), BTreeSet::from(["203.0.113.10".to_owned(), "203.0.113.20".to_owned()]));
        assert!(metrics.is_ready());
        // Each plan is timed, for operators and `bench scale`.
        until("the first plan in ferrolb_speaker_replan_seconds", || async {
            let text = metrics.encode();
            let count = text.lines().find_map(|l| l.strip_prefix("ferrolb_speaker_replan_seconds_count "));
            count.and_then(|c| c.trim().parse::<f64>().ok()).filter(|c| *c >= 1.0)
        })
        .await;

        // Status: one object per announced Service, owned by it; the stale one deleted,
        // the outdated one corrected, the other node's left alone.
        let local = svcs.get("local").await.unwrap();
        let want = |name: &str, addr: &str, svc: &Service| {
            let (name, addr, uid) = (name.to_owned(), addr.to_owned(), svc.uid().unwrap());
            move |all: &[ServiceAnnouncement]| {
                all.iter().any(|s| {
                    s.name_any() == name
                        && s.spec.addresses == vec![addr.clone()]
                        && s.spec.node == "node1"
                        && s.spec.peers == vec!["router-a".to_owned()]
                        && s.spec.protocol == AnnouncementProtocol::Bgp
                        && s.owner_references().iter().any(|o| o.kind == "Service" && o.uid == uid)
                })
            }
        };
        let (web_ok, local_ok) =
            (want("web-node1-bgp", "203.0.113.10", &web), want("local-node1-bgp", "203.0.113.20", &local));
        until("ServiceAnnouncements to converge", || async {
            let all = announcements(&client).await;
            let names: BTreeSet<String> = all.iter().map(|s| s.name_any()).collect();
            let expected: BTreeSet<String> =
                ["web-node1-bgp", "local-node1-bgp", "web-node2-bgp"].map(String::from).into();
            (names == expected && web_ok(&all) && local_ok(&all)).then_some(())
        })
        .await;
        // Garbage collection follows the owner reference.
        assert_eq!(web.meta().uid, svcs.get("web").await.unwrap().meta().uid);

        // The endpoint goes away: withdrawn, the object deleted, an Event with the reason.
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
        slices.delete("local-a", &DeleteParams::default()).await.unwrap();
        until("local's announcement deleted", || async {
            (!announcements(&client).await.iter().any(|s| s.name_any() == "local-node1-bgp")).then_some(())
        })
        .await;
        let note =
            until("a Withdrawn event", || event_note(&client, "local", "Withdrawn", "203.0.113.20")).await;
        assert!(note.contains("no serving endpoint on node node1"), "{note}");
        // A BGP Service is announced by every node with a route: no node says so in an Event
        // (its ServiceAnnouncement does), though a withdrawal with a reason does. The writer
        // publishes in order, so an Announced Event would be here before this Withdrawn one.
        for svc in ["local", "web"] {
            assert_eq!(event_note(&client, svc, "Announced", "").await, None, "{svc}: Announced by BGP");
        }
        let slice =
            parse_stream("s.yaml", TWO_RACKS).unwrap().objects.into_iter().find_map(|(_, o)| match o {
                Object::EndpointSlice(e) => Some(*e),
                _ => None,
            });
        slices.create(&pp, &slice.unwrap()).await.unwrap();
        until("local announced again", || async {
            plans.latest().filter(|p| announced(p).contains("203.0.113.20"))
        })
        .await;
        until("local's announcement back", || async {
            announcements(&client).await.iter().any(|s| s.name_any() == "local-node1-bgp").then_some(())
        })
        .await;

        // Outage: the speaker reaches no apiserver; its open watches end.
        let before_outage = plans.count();
        let objects_before: BTreeSet<String> =
            announcements(&client).await.iter().map(|s| s.name_any()).collect();
        closed.store(true, Ordering::SeqCst);
        server.set_unavailable(true);
        server.set_unavailable(false);
        // Meanwhile web becomes Local (no endpoint on node1), history is compacted (the
        // watches come back to 410 Gone and relist).
        svcs.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"externalTrafficPolicy": "Local"}})),
        )
        .await
        .unwrap();
        server.compact();
        until("every watch to fail twice", || async {
            cluster::KINDS
                .iter()
                .all(|k| metrics.watch_errors.get_or_create(&KindLabel { kind: (*k).into() }).get() >= 2)
                .then_some(())
        })
        .await;
        assert_eq!(plans.count(), before_outage, "planned while the apiserver was unreachable");
        assert!(metrics.is_ready(), "an outage does not make the speaker unready");
        assert!(gate.refused.load(Ordering::SeqCst) > 0);

        // Watches work again but relists fail (410 Gone after the compaction, then every
        // LIST refused): an incomplete relist deletes nothing.
        let errors = |k: &&str| metrics.watch_errors.get_or_create(&KindLabel { kind: (*k).into() }).get();
        let failed_before: Vec<u64> = cluster::KINDS.iter().map(errors).collect();
        fail_lists.store(true, Ordering::SeqCst);
        closed.store(false, Ordering::SeqCst);
        until("every relist to fail", || async {
            let now: Vec<u64> = cluster::KINDS.iter().map(errors).collect();
            now.iter().zip(&failed_before).all(|(n, b)| n >= &(b + 2)).then_some(())
        })
        .await;
        assert_eq!(plans.count(), before_outage, "planned from an incomplete relist");

        // The apiserver is back: resync applies what changed meanwhile, and only that.
        fail_lists.store(false, Ordering::SeqCst);
        let after = until("web withdrawn after the resync", || async {
            plans.latest().filter(|p| !announced(p).contains("203.0.113.10"))
        })
        .await;
        // The relist never looked like "everything deleted": every plan since kept local.
        for p in plans.since(before_outage) {
            assert!(announced(&p).contains("203.0.113.20"), "a plan withdrew local during the resync: {p:?}");
        }
        assert_eq!(announced(&after), BTreeSet::from(["203.0.113.20".to_owned()]));
        assert!(after.withdrawn[&"203.0.113.10".parse().unwrap()].contains("externalTrafficPolicy Local"));
        until("web's announcement deleted", || async {
            let names: BTreeSet<String> = announcements(&client).await.iter().map(|s| s.name_any()).collect();
            let mut want = objects_before.clone();
            want.remove("web-node1-bgp");
            (names == want).then_some(())
        })
        .await;
        until("a Withdrawn event for web", || {
            event_note(&client, "web", "Withdrawn", "externalTrafficPolicy Local")
        })
        .await;
        run.abort();
    });
}

/// Creates namespace ferrolb-system; its Secrets.
async fn ferrolb_system_secrets(client: &kube::Client) -> Api<k8s_openapi::api::core::v1::Secret> {
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "ferrolb-system"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    Api::namespaced(client.clone(), "ferrolb-system")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_give_the_membership_key_and_bgp_passwords_and_errors_never_show_them() {
    use ferrolb_api::SecretKeyRef;
    use ferrolb_proto::bgp::socket::Password;
    use ferrolb_speaker::cluster::secrets;
    use k8s_openapi::api::core::v1::Secret;
    use std::collections::BTreeMap;

    let (client, _server) = FakeApiServer::new().client();
    let pp = PostParams::default();
    let secrets_api = ferrolb_system_secrets(&client).await;

    let e = secrets::membership_key(&client, "ferrolb-system").await.unwrap_err();
    assert!(
        e.contains("ferrolb-system/ferrolb-membership does not exist") && e.contains("--membership-key-file"),
        "{e}"
    );
    let short: Secret = serde_json::from_value(json!({"metadata": {"name": "ferrolb-membership"},
        "data": {"key": "c2hvcnQtc2VjcmV0"}}))
    .unwrap(); // "short-secret"
    secrets_api.create(&pp, &short).await.unwrap();
    let e = secrets::membership_key(&client, "ferrolb-system").await.unwrap_err();
    assert!(e.contains("data.key") && e.contains("32") && !e.contains("short-secret"), "{e}");
    let key = "k".repeat(40);
    let patch = json!({"data": {"key": k8s_openapi::ByteString(key.clone().into_bytes())}});
    secrets_api.patch("ferrolb-membership", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    let k = secrets::membership_key(&client, "ferrolb-system").await.unwrap();
    assert_eq!(k.expose(), key.as_bytes());

    // "s3cr3t\n": surrounding whitespace is not part of the password.
    let auth: Secret = serde_json::from_value(
        json!({"metadata": {"name": "bgp-auth"}, "data": {"password": "czNjcjN0Cg=="}}),
    )
    .unwrap();
    secrets_api.create(&pp, &auth).await.unwrap();
    let r = |name: &str| SecretKeyRef {
        name: name.into(),
        namespace: "ferrolb-system".into(),
        key: "password".into(),
    };
    let refs =
        BTreeMap::from([("router-a".to_owned(), r("bgp-auth")), ("router-b".to_owned(), r("missing"))]);
    let previous = BTreeMap::from([("router-b".to_owned(), Password::new("old"))]);
    let (pw, errors) = secrets::bgp_passwords(&client, &refs, &previous).await;
    assert_eq!(pw.get("router-a"), Some(&Password::new("s3cr3t")));
    assert_eq!(
        pw.get("router-b"),
        Some(&Password::new("old")),
        "an unreadable Secret keeps the last password"
    );
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0]
            .contains("BGPPeer/router-b: spec.passwordSecret: Secret ferrolb-system/missing does not exist"),
        "{}",
        errors[0]
    );
    assert!(!errors.iter().any(|e| e.contains("s3cr3t") || e.contains("old")));
}

/// The Secret watch behind key and password rotation: each wanted Secret is followed by
/// name (a change, a deletion, a re-creation), a Secret not asked for never shows, and
/// one no longer wanted is forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_secrets_follow_changes_by_name_only() {
    use ferrolb_speaker::cluster::secrets::{SecretWatch, Watched};
    use k8s_openapi::api::core::v1::Secret;

    let (client, _server) = FakeApiServer::new().client();
    let pp = PostParams::default();
    let api = ferrolb_system_secrets(&client).await;
    let secret = |name: &str, pw: &str| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": name},
            "data": {"password": k8s_openapi::ByteString(pw.as_bytes().to_vec())}}))
        .unwrap()
    };
    api.create(&pp, &secret("bgp-auth", "first")).await.unwrap();
    api.create(&pp, &secret("unrelated", "x")).await.unwrap();
    let mut watch = SecretWatch::new(client.clone());
    let mut rx = watch.subscribe();
    let name = |n: &str| ("ferrolb-system".to_owned(), n.to_owned());
    watch.set(&BTreeSet::from([name("bgp-auth"), name("ferrolb-membership")]));
    let password = |w: &Watched, n: &str| -> Option<Option<String>> {
        w.get(&name(n)).map(|s| {
            s.as_ref().map(|s| String::from_utf8(s.data.as_ref().unwrap()["password"].0.clone()).unwrap())
        })
    };
    async fn wait(rx: &mut tokio::sync::watch::Receiver<Watched>, f: impl Fn(&Watched) -> bool) {
        let ok = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|w| f(w))).await.is_ok();
        assert!(ok, "watched Secrets never became as expected: {:?}", rx.borrow().keys().collect::<Vec<_>>());
    }
    wait(&mut rx, |w| {
        password(w, "bgp-auth") == Some(Some("first".into()))
            && password(w, "ferrolb-membership") == Some(None)
    })
    .await;
    api.patch(
        "bgp-auth",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"password": k8s_openapi::ByteString(b"second".to_vec())}})),
    )
    .await
    .unwrap();
    wait(&mut rx, |w| password(w, "bgp-auth") == Some(Some("second".into()))).await;
    api.create(&pp, &secret("ferrolb-membership", "k")).await.unwrap();
    wait(&mut rx, |w| password(w, "ferrolb-membership") == Some(Some("k".into()))).await;
    api.delete("bgp-auth", &DeleteParams::default()).await.unwrap();
    wait(&mut rx, |w| password(w, "bgp-auth") == Some(None)).await;
    assert!(!rx.borrow().contains_key(&name("unrelated")), "a Secret not asked for was watched");
    watch.set(&BTreeSet::from([name("ferrolb-membership")]));
    assert!(!rx.borrow().contains_key(&name("bgp-auth")), "a Secret no longer wanted is forgotten");
}

/// A run's inputs, recorded, replay into the same plans in a state with no I/O of its
/// own: the event loop decides from its inputs and their recorded clock only. The run
/// lists, drains an address whose last local endpoint is terminating (the drain running
/// out on the clock), and withdraws a deleted Service.
#[test]
fn a_recorded_run_replays_into_the_same_plans() {
    in_netns("replay", || async {
        let (client, server) = FakeApiServer::new().client();
        register_crds(&server, &[]);
        kubeapi::apply_stream(&client, TWO_RACKS).await.unwrap();
        // The setting this test is about: a drain that runs out while it watches.
        let options = Options { drain_max_delay: Duration::from_millis(300), ..Options::defaults("node1") };
        let (plans_tx, mut plans_rx) = tokio::sync::mpsc::unbounded_channel();
        let (record_tx, mut record_rx) = tokio::sync::mpsc::unbounded_channel();
        let opts = KubeOptions {
            options: options.clone(),
            namespace: "ferrolb-system".into(),
            plans: Some(plans_tx),
            record: Some(record_tx),
        };
        let run = tokio::spawn(run::run_kube(opts, client.clone(), Arc::new(Metrics::new())));
        let mut live: Vec<Plan> = Vec::new();
        let mut next_plan = async || {
            let p = tokio::time::timeout(Duration::from_secs(30), plans_rx.recv()).await.unwrap().unwrap();
            live.push(p.clone());
            p
        };
        let first = next_plan().await;
        assert!(announced(&first).contains("203.0.113.20"), "{first:?}");
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
        // Its one local endpoint terminates (still serving): drained, then withdrawn.
        let terminating = json!({"endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "node1",
            "conditions": {"ready": false, "serving": true, "terminating": true}}]});
        slices.patch("local-a", &PatchParams::default(), &Patch::Merge(&terminating)).await.unwrap();
        while announced(&next_plan().await).contains("203.0.113.20") {}
        let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
        svcs.delete("web", &DeleteParams::default()).await.unwrap();
        while announced(&next_plan().await).contains("203.0.113.10") {}
        run.abort();
        let _ = run.await;
        while let Ok(p) = plans_rx.try_recv() {
            live.push(p);
        }
        let mut recorded = Vec::new();
        while let Ok(r) = record_rx.try_recv() {
            recorded.push(r);
        }
        assert!(
            recorded.iter().any(|r| matches!(r.input, run::Input::DrainDue)),
            "the drain ran out on the clock"
        );
        let replayed = run::replay(options, recorded).await;
        assert!(live.len() >= 3, "{} plans", live.len());
        assert_eq!(replayed.len(), live.len());
        for (i, (r, l)) in replayed.iter().zip(&live).enumerate() {
            assert_eq!(r, l, "plan {i} of {}", live.len());
        }
    });
}
