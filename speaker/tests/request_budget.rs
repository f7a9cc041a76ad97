//! What the speakers ask of the apiserver, counted on the fake one (issue #39 point 4):
//! at rest nothing but their open watches; for a Service change or deletion, no read, and
//! by each speaker that announces it one write of its ServiceAnnouncement (one per node, as
//! the API defines it) and no Event (a BGP Service is announced by every node: Events from
//! each would grow with the cluster); and a rolling restart of every speaker costs one
//! list per kind per speaker and not one write when nothing changed. A cluster of 5 000
//! Nodes multiplies these counts by its speakers; nothing here grows with the number of
//! other speakers. Without an L2Advertisement (BGP only, as here) a speaker lists and
//! watches its own Node alone, so neither the other kubelets' status writes nor a
//! restart's Node list grow with them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::ServiceAnnouncement;
use ferrolb_fakeapi::wait::until;
use ferrolb_fakeapi::{FakeApiServer, LoggedRequest, Verb};
use ferrolb_lab::kubeapi;
use ferrolb_lab::netns::{PREFIX, TempNetns};
use ferrolb_speaker::metrics::Metrics;
use ferrolb_speaker::run::{self, KubeOptions, Options};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::task::JoinHandle;

const SPEAKERS: usize = 6;
const SERVICES: usize = 20;

/// The kinds every speaker lists and watches (no gated pods, no L2, no secrets here).
const KINDS: [&str; 9] = [
    "nodes",
    "services",
    "endpointslices",
    "ipaddresspools",
    "bgppeers",
    "bgpadvertisements",
    "l2advertisements",
    "bfdprofiles",
    "serviceannouncements",
];

fn objects() -> String {
    let mut y = String::new();
    for i in 1..=SPEAKERS {
        let _ = write!(
            y,
            "---\napiVersion: v1\nkind: Node\nmetadata: {{name: node{i}}}\nstatus:\n  conditions: [{{type: Ready, status: \"True\"}}]\n  addresses: [{{type: InternalIP, address: 192.0.2.{}}}]\n",
            10 + i
        );
    }
    for s in 0..SERVICES {
        let _ = write!(
            y,
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: svc{s}, namespace: default}}\nspec: {{type: LoadBalancer, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: 203.0.113.{}}}]}}}}\n",
            10 + s
        );
    }
    y.push_str(
        "---\napiVersion: ferrolb.io/v1alpha1\nkind: IPAddressPool\nmetadata: {name: public}\nspec: {addresses: [203.0.113.0/24]}\n\
         ---\napiVersion: ferrolb.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: router}\nspec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}\n\
         ---\napiVersion: ferrolb.io/v1alpha1\nkind: BGPAdvertisement\nmetadata: {name: public}\nspec: {ipAddressPools: [public]}\n",
    );
    y
}

fn start(server: &FakeApiServer, node: &str) -> JoinHandle<anyhow::Result<()>> {
    let opts = KubeOptions {
        options: Options::defaults(node),
        namespace: "ferrolb-system".into(),
        plans: None,
        record: None,
    };
    let client = server.new_client_tagged(node);
    tokio::spawn(async move {
        run::run_kube(opts, client, Arc::new(Metrics::new())).await.map_err(anyhow::Error::msg)
    })
}

/// Requests of each speaker since `from` (a position in the log), by verb and resource.
fn counts(log: &[LoggedRequest], from: usize) -> BTreeMap<(String, Verb, String), usize> {
    let mut out = BTreeMap::new();
    for r in &log[from..] {
        let (Some(tag), Some(verb)) = (&r.client, r.verb) else { continue };
        let resource = r.path.rsplit('/').find(|s| KINDS.contains(s)).unwrap_or(&r.path).to_owned();
        *out.entry((tag.clone(), verb, resource)).or_default() += 1;
    }
    out
}

fn sum(counts: &BTreeMap<(String, Verb, String), usize>, verbs: &[Verb]) -> usize {
    counts.iter().filter(|((_, v, _), _)| verbs.contains(v)).map(|(_, n)| n).sum()
}

/// For one Service changed (`what`): no speaker read anything, and each of `nodes` wrote
/// its ServiceAnnouncement once and no Event.
fn no_read_one_write_each(counts: &BTreeMap<(String, Verb, String), usize>, nodes: &[String], what: &str) {
    assert_eq!(sum(counts, &[Verb::List, Verb::Get]), 0, "{what} made a speaker read: {counts:?}");
    for node in nodes {
        assert_eq!(writes(counts, node, false), 1, "{node}'s announcement writes for {what}: {counts:?}");
        assert_eq!(writes(counts, node, true), 0, "{node}'s Events for {what}: {counts:?}");
    }
}

/// `node`'s writes in `counts`: of Events (their resource is the whole path, as they are
/// not a kind in [`KINDS`]), or (not `events`) of anything else.
fn writes(counts: &BTreeMap<(String, Verb, String), usize>, node: &str, events: bool) -> usize {
    counts
        .iter()
        .filter(|((t, v, r), _)| t == node && WRITES.contains(v) && r.contains("/events") == events)
        .map(|(_, n)| n)
        .sum()
}

const WRITES: [Verb; 5] = [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete, Verb::DeleteCollection];

async fn announcements_with(client: &kube::Client, ip: &str) -> usize {
    let sas: Api<ServiceAnnouncement> = Api::all(client.clone());
    let all = sas.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default();
    all.iter().filter(|a| a.spec.addresses.iter().any(|x| x == ip)).count()
}

#[test]
fn speakers_ask_nothing_at_rest_one_write_per_change_and_one_list_per_kind_on_restart() {
    let ns = TempNetns::create(&format!("{PREFIX}{}xbudget", std::process::id())).unwrap();
    ns.run(|| {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(budget());
    })
    .unwrap();
}

async fn budget() {
    let (client, server) = FakeApiServer::new().with_request_log().client();
    for crd in ferrolb_api::crds() {
        server.register_crd(&crd).unwrap();
    }
    kubeapi::apply_stream(&client, &objects()).await.unwrap();
    let nodes: Vec<String> = (1..=SPEAKERS).map(|i| format!("node{i}")).collect();
    let mut running: Vec<JoinHandle<anyhow::Result<()>>> = nodes.iter().map(|n| start(&server, n)).collect();
    until("every speaker announcing every Service", || async {
        (announcements_with(&client, "203.0.113.10").await == SPEAKERS).then_some(())
    })
    .await;
    until("every speaker's announcements written", || async {
        let sas: Api<ServiceAnnouncement> = Api::all(client.clone());
        (sas.list(&ListParams::default()).await.ok()?.items.len() == SPEAKERS * SERVICES).then_some(())
    })
    .await;

    // At rest: nothing but the open watches.
    let rest = server.request_log().len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let at_rest = counts(&server.request_log(), rest);
    assert!(at_rest.is_empty(), "requests at rest: {at_rest:?}");

    // One Service's address changes: each speaker writes its one announcement of it.
    let change = server.request_log().len();
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.99"}]}}});
    svcs.patch_status("svc0", &PatchParams::default(), &Patch::Merge(&status)).await.unwrap();
    until("every speaker announcing the new address", || async {
        (announcements_with(&client, "203.0.113.99").await == SPEAKERS).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    no_read_one_write_each(&counts(&server.request_log(), change), &nodes, "a Service change");

    // One Service deleted: each speaker deletes its announcement of it, and writes no Event.
    let gone = server.request_log().len();
    svcs.delete("svc1", &DeleteParams::default()).await.unwrap();
    until("every speaker's announcement of svc1 deleted", || async {
        (announcements_with(&client, "203.0.113.11").await == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    no_read_one_write_each(&counts(&server.request_log(), gone), &nodes, "a Service deleted");

    // A rolling restart of every speaker, one at a time.
    let restart = server.request_log().len();
    for (i, node) in nodes.iter().enumerate() {
        running[i].abort();
        let _ = (&mut running[i]).await;
        running[i] = start(&server, node);
        until("the restarted speaker listing every kind", || async {
            let c = counts(&server.request_log(), restart);
            KINDS.iter().all(|k| c.contains_key(&(node.clone(), Verb::List, (*k).to_owned()))).then_some(())
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restarted = counts(&server.request_log(), restart);
    let mut report = String::new();
    for ((tag, verb, resource), n) in &restarted {
        let _ = writeln!(report, "{tag} {verb:?} {resource}: {n}");
    }
    for node in &nodes {
        for kind in KINDS {
            let lists = restarted.get(&(node.clone(), Verb::List, kind.to_owned())).copied().unwrap_or(0);
            assert_eq!(lists, 1, "{node} listed {kind} {lists} times on restart:\n{report}");
        }
    }
    let log = server.request_log();
    for node in &nodes {
        let own = format!("fieldSelector=metadata.name%3D{node}");
        let of_nodes: Vec<&LoggedRequest> = log[restart..]
            .iter()
            .filter(|r| r.client.as_deref() == Some(node.as_str()) && r.path.ends_with("/nodes"))
            .collect();
        assert!(
            !of_nodes.is_empty() && of_nodes.iter().all(|r| r.query.contains(&own)),
            "{node}'s Node list and watch, without L2: {:?}",
            of_nodes.iter().map(|r| &r.query).collect::<Vec<_>>()
        );
    }
    assert_eq!(sum(&restarted, &WRITES), 0, "a restart with nothing changed wrote:\n{report}");
    assert_eq!(sum(&restarted, &[Verb::Get]), 0, "a restart read single objects:\n{report}");
    let (lists, watches) = (sum(&restarted, &[Verb::List]), sum(&restarted, &[Verb::Watch]));
    println!(
        "a rolling restart of {SPEAKERS} speakers: {lists} lists and {watches} watches, no write; \
         of a 5 000-Node cluster's speakers: {} lists",
        lists / SPEAKERS * 5000
    );
    for r in running {
        r.abort();
    }
}
