//! MetalLB's spellings of the Service annotations (`metallb.io/…`, `metallb.universe.tf/…`)
//! work like ferrolb's, ferrolb's wins when both are set, and each Service gets one
//! Event saying so: not on every reconcile, and not again after a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferrolb_api::{ANNOTATION_ADDRESS_POOL, ANNOTATION_LOAD_BALANCER_IPS};
use ferrolb_controller::metallb_notice::REASON;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metallb_spellings_request_addresses_pick_pools_and_share() {
    let (client, server) = cluster().await;
    // Pool "a" comes first: without the annotations, every Service would get a's lowest address.
    create_pool(&client, pool("a", &["192.0.2.0/29"])).await;
    create_pool(&client, pool("b", &["198.51.100.0/29"])).await;
    let ctl = start(&server, settings("c1", None));

    svc("default", "new-ips").annot("metallb.io/loadBalancerIPs", "192.0.2.5").create(&client).await;
    svc("default", "old-ips").annot("metallb.universe.tf/loadBalancerIPs", "192.0.2.6").create(&client).await;
    svc("default", "new-pool").annot("metallb.io/address-pool", "b").create(&client).await;
    assert_eq!(addresses(&client, "default", "new-ips").await, vec!["192.0.2.5"]);
    assert_eq!(addresses(&client, "default", "old-ips").await, vec!["192.0.2.6"]);
    assert_eq!(addresses(&client, "default", "new-pool").await, vec!["198.51.100.0"]);
    svc("default", "old-pool").annot("metallb.universe.tf/address-pool", "b").create(&client).await;
    assert_eq!(addresses(&client, "default", "old-pool").await, vec!["198.51.100.1"]);

    // Sharing: each sharer is created once the one before holds its address (see
    // controller.rs), one spelling each; the third clashes on its port.
    svc("default", "http").annot("metallb.io/allow-shared-ip", "k").ports(&[80]).create(&client).await;
    let http = addresses(&client, "default", "http").await;
    svc("default", "https")
        .annot("metallb.universe.tf/allow-shared-ip", "k")
        .ports(&[443])
        .create(&client)
        .await;
    assert_eq!(addresses(&client, "default", "https").await, http, "same MetalLB key, other port: shared");
    svc("default", "clash").annot("metallb.io/allow-shared-ip", "k").ports(&[80]).create(&client).await;
    assert_ne!(addresses(&client, "default", "clash").await, http, "same port: not shared");

    let note = event(&client, "default", "old-pool", REASON).await;
    assert!(note.contains("metallb.universe.tf/address-pool as ferrolb.io/address-pool"), "{note}");
    assert!(note.contains("accepted for migration"), "{note}");
    ctl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrolb_spelling_wins_and_the_event_says_so() {
    let (client, server) = cluster().await;
    create_pool(&client, pool("a", &["192.0.2.0/29"])).await;
    create_pool(&client, pool("b", &["198.51.100.0/29"])).await;
    let ctl = start(&server, settings("c1", None));
    svc("default", "both")
        .annot(ANNOTATION_LOAD_BALANCER_IPS, "198.51.100.3")
        .annot("metallb.io/loadBalancerIPs", "192.0.2.4")
        .annot("metallb.universe.tf/loadBalancerIPs", "192.0.2.5")
        .annot(ANNOTATION_ADDRESS_POOL, "b")
        .annot("metallb.io/address-pool", "a")
        .create(&client)
        .await;
    assert_eq!(addresses(&client, "default", "both").await, vec!["198.51.100.3"]);
    let note = event(&client, "default", "both", REASON).await;
    for ignored in ["metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs"] {
        assert!(note.contains(&format!("{ignored} (ferrolb.io/loadBalancerIPs is set and wins)")), "{note}");
    }
    assert!(note.contains("metallb.io/address-pool (ferrolb.io/address-pool is set and wins)"), "{note}");
    assert!(!note.contains("reads"), "nothing is read in MetalLB's spelling: {note}");
    ctl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_event_per_service_across_reconciles_and_restarts() {
    let (client, server) = cluster().await;
    create_pool(&client, pool("a", &["192.0.2.0/29"])).await;
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    // A new value of the same annotation: reconciled (the notice comes before the status
    // write, so the new address proves it was considered), and no news.
    let request = |ip: &str| json!({"metadata": {"annotations": {"metallb.io/loadBalancerIPs": ip}}});
    let moved_to = |ip: &'static str| {
        let client = client.clone();
        async move {
            until(&format!("web moved to {ip}"), || async {
                (ingress(&get_svc(&client, "default", "web").await) == [ip]).then_some(())
            })
            .await
        }
    };
    let first = start(&server, settings("c1", None));
    svc("default", "web").annot("metallb.io/loadBalancerIPs", "192.0.2.3").create(&client).await;
    assert_eq!(addresses(&client, "default", "web").await, vec!["192.0.2.3"]);
    event(&client, "default", "web", REASON).await;
    api.patch("web", &PatchParams::default(), &Patch::Merge(request("192.0.2.4"))).await.unwrap();
    moved_to("192.0.2.4").await;
    assert_eq!(events(&client, "default", "web", REASON).await.len(), 1, "one Event across reconciles");
    first.stop().await.unwrap();

    // A new controller (a restart, or another leader) reads the Event back.
    let second = start(&server, settings("c2", None));
    api.patch("web", &PatchParams::default(), &Patch::Merge(request("192.0.2.5"))).await.unwrap();
    moved_to("192.0.2.5").await;
    assert!(second.health.is_ready());
    assert_eq!(events(&client, "default", "web", REASON).await.len(), 1, "one Event across restarts");

    // Another set of spellings is news: one more Event, naming it.
    let pool = json!({"metadata": {"annotations": {"metallb.universe.tf/address-pool": "a"}}});
    api.patch("web", &PatchParams::default(), &Patch::Merge(pool)).await.unwrap();
    let notes = until("a second Event", || async {
        let notes = events(&client, "default", "web", REASON).await;
        (notes.len() == 2).then_some(notes)
    })
    .await;
    assert!(notes.iter().any(|n| n.contains("metallb.universe.tf/address-pool as")), "{notes:?}");
    second.stop().await.unwrap();
}
