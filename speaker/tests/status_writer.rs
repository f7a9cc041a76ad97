//! The ServiceAnnouncement writer converges to each Service's latest status, not through
//! every change it was handed: a speaker that fell behind (its request limit, a slow
//! apiserver) while Services came and went writes nothing for those that are gone.
//! Counted requests on the fake apiserver, no clock.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;

use ferrolb_api::{AnnouncementProtocol, ServiceAnnouncement};
use ferrolb_fakeapi::wait::until;
use ferrolb_fakeapi::{FakeApiServer, Verb};
use ferrolb_speaker::cluster::status::{self, Interner, Record, Shown, Update, object_name};
use ferrolb_speaker::metrics::Metrics;
use ferrolb_speaker::model::ServiceKey;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};

const NODE: &str = "node1";

/// Services `range` in namespace `bulk`, each announced by BGP from this node (or, not
/// `announced`, gone).
fn update(range: Range<usize>, announced: bool, complete: bool) -> Update {
    let mut u = Update { complete, ..Update::default() };
    let router = Interner::default().names(&["router"]);
    for i in range {
        let name = format!("svc-{i:04}");
        let uid: Arc<str> = format!("uid-{i}").into();
        let record = Record {
            protocol: AnnouncementProtocol::Bgp,
            addresses: [format!("198.51.100.{}", i % 250).parse().unwrap()].into(),
            via: router.clone(),
            owner: uid.clone(),
        };
        let shown = Shown { objects: [record].into(), reason: None, uid, shared: false };
        u.services.insert(
            ServiceKey { namespace: "bulk".into(), name: name.into() },
            announced.then(|| Arc::new(shown)),
        );
    }
    u
}

fn writes(server: &FakeApiServer) -> usize {
    server
        .request_log()
        .iter()
        .filter(|r| r.path.contains("serviceannouncements"))
        .filter(|r| matches!(r.verb, Some(Verb::Patch | Verb::Delete)))
        .count()
}

/// A fake apiserver logging requests, serving ferrolb's kinds and namespace `bulk`.
async fn serving_bulk() -> FakeApiServer {
    let server = FakeApiServer::new().with_request_log();
    for crd in ferrolb_api::crds() {
        server.register_crd(&crd).unwrap();
    }
    let namespaces: Api<Namespace> = Api::all(server.new_client_tagged("test"));
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "bulk"}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
    server
}

#[tokio::test]
async fn services_gone_before_the_writer_caught_up_cost_no_write() {
    let server = serving_bulk().await;
    let client = server.new_client_tagged("speaker");
    // The apiserver holds the writer's requests: it falls behind.
    server.set_delaying_for("speaker", true);
    let tx = status::spawn(client, NODE, Arc::new(Metrics::new()));
    tx.send(update(0..200, true, true));
    until("the writer waiting on the apiserver", || async {
        server.request_log().iter().any(|r| r.client.as_deref() == Some("speaker")).then_some(())
    })
    .await;
    // Before it caught up, all but the last 50 Services are gone.
    let names: BTreeSet<String> =
        (150..200).map(|i| object_name(&format!("svc-{i:04}"), NODE, AnnouncementProtocol::Bgp)).collect();
    tx.send(update(0..150, false, false));
    server.set_delaying_for("speaker", false);
    // Exactly the last 50 in the API. A writer that wrote every set it was handed would
    // first write all 200 in order, so the API would show these 50 alone only once it
    // had deleted the other 150 again.
    let api: Api<ServiceAnnouncement> = Api::all(server.new_client_tagged("test"));

    until("exactly the remaining Services' ServiceAnnouncements", || async {
        let listed = api.list(&ListParams::default()).await.ok()?;
        let there: BTreeSet<String> = listed.items.iter().filter_map(|o| o.metadata.name.clone()).collect();
        (there == names).then_some(())
    })
    .await;
    assert_eq!(writes(&server), 50, "one write per remaining Service, none for those gone");
}

/// After the first complete set, a change to one Service costs one request, whatever the
/// number of Services: the writer converges the Services it is told of, not the whole set.
#[tokio::test]
async fn one_changed_service_among_many_costs_one_write() {
    let server = serving_bulk().await;
    let tx = status::spawn(server.new_client_tagged("speaker"), NODE, Arc::new(Metrics::new()));
    tx.send(update(0..300, true, true));
    until("every Service written", || async { (writes(&server) == 300).then_some(()) }).await;
    // svc-0007 moves to another address; svc-0008 is gone.
    let mut moved = update(7..8, true, false);
    if let Some(Some(shown)) = moved.services.values_mut().next() {
        Arc::make_mut(shown).objects[0].addresses = ["198.51.100.251".parse().unwrap()].into();
    }
    tx.send(moved);
    tx.send(update(8..9, false, false));
    let api: Api<ServiceAnnouncement> = Api::namespaced(server.new_client_tagged("test"), "bulk");
    until("svc-0007 moved and svc-0008 gone", || async {
        let listed = api.list(&ListParams::default()).await.ok()?;
        let name = |i: usize| object_name(&format!("svc-{i:04}"), NODE, AnnouncementProtocol::Bgp);
        let moved = listed
            .items
            .iter()
            .any(|o| o.metadata.name == Some(name(7)) && o.spec.addresses == ["198.51.100.251"]);
        let gone = !listed.items.iter().any(|o| o.metadata.name == Some(name(8)));
        (moved && gone).then_some(())
    })
    .await;
    assert_eq!(writes(&server), 302, "one patch and one delete");
}
