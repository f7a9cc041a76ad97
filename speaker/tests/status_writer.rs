//! The ServiceAnnouncement writer converges to the latest desired set, not through every
//! set it was handed: a speaker that fell behind (its request limit, a slow apiserver) while
//! Services came and went writes nothing for those that are gone. Counted requests on the
//! fake apiserver, no clock.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::Arc;

use ferrolb_api::{AnnouncementProtocol, ServiceAnnouncement, ServiceAnnouncementSpec, ServiceRef};
use ferrolb_fakeapi::wait::until;
use ferrolb_fakeapi::{FakeApiServer, Verb};
use ferrolb_speaker::cluster::status::{self, Desired, Record, object_name};
use ferrolb_speaker::metrics::Metrics;
use ferrolb_speaker::model::ServiceKey;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};

const NODE: &str = "node1";

/// Services `range` in namespace `bulk`, each announced by BGP from this node.
fn desired(range: Range<usize>) -> Desired {
    let mut d = Desired::default();
    for i in range {
        let name = format!("svc-{i:04}");
        let spec = ServiceAnnouncementSpec {
            node: NODE.into(),
            service: ServiceRef { namespace: "bulk".into(), name: name.clone() },
            protocol: AnnouncementProtocol::Bgp,
            addresses: vec![format!("198.51.100.{}", i % 250)],
            interfaces: Vec::new(),
            peers: vec!["router".into()],
        };
        let uid = format!("uid-{i}");
        let object = object_name(&name, NODE, AnnouncementProtocol::Bgp);
        d.objects.insert(("bulk".into(), object), Record { spec: Arc::new(spec), owner: uid.clone() });
        d.uids.insert(ServiceKey { namespace: "bulk".into(), name: name.into() }, uid);
    }
    d
}

fn writes(server: &FakeApiServer) -> usize {
    server
        .request_log()
        .iter()
        .filter(|r| r.path.contains("serviceannouncements"))
        .filter(|r| matches!(r.verb, Some(Verb::Patch | Verb::Delete)))
        .count()
}

#[tokio::test]
async fn services_gone_before_the_writer_caught_up_cost_no_write() {
    let server = FakeApiServer::new().with_request_log();
    for crd in ferrolb_api::crds() {
        server.register_crd(&crd).unwrap();
    }
    let namespaces: Api<Namespace> = Api::all(server.new_client_tagged("test"));
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": "bulk"}})).unwrap();
    namespaces.create(&PostParams::default(), &ns).await.unwrap();
    let client = server.new_client_tagged("speaker");
    // The apiserver holds the writer's requests: it falls behind.
    server.set_delaying_for("speaker", true);
    let tx = status::spawn(client, NODE, Arc::new(Metrics::new()));
    tx.send_replace(Some(Arc::new(desired(0..200))));
    until("the writer waiting on the apiserver", || async {
        server.request_log().iter().any(|r| r.client.as_deref() == Some("speaker")).then_some(())
    })
    .await;
    // Before it caught up, all but the last 50 Services are gone.
    let kept = desired(150..200);
    let names: BTreeSet<String> = kept.objects.keys().map(|(_, n)| n.clone()).collect();
    tx.send_replace(Some(Arc::new(kept)));
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
