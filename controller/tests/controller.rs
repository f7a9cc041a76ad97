//! The controller on the fake apiserver: allocation, status, Events, pools, classes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferrolb_api::{
    ANNOTATION_ALLOW_SHARED_IP, ANNOTATION_IP_ALLOCATED_FROM_POOL, ANNOTATION_LOAD_BALANCER_IPS,
    IpAddressPool, MEMBERSHIP_SECRET_NAME,
};
use k8s_openapi::api::core::v1::{Namespace, Secret, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assigns_status_annotation_event_pool_status_and_releases() {
    let (client, server) = cluster().await;
    create_pool(&client, pool("lan", &["192.0.2.0/30"])).await;
    let ctl = start(&server, settings("c1", None));
    svc("default", "web").create(&client).await;

    assert_eq!(addresses(&client, "default", "web").await, vec!["192.0.2.0"]);
    let s = get_svc(&client, "default", "web").await;
    let ing = &s.status.unwrap().load_balancer.unwrap().ingress.unwrap()[0];
    assert_eq!(ing.ip_mode.as_deref(), Some("VIP"));
    until("the pool annotation", || async {
        let s = get_svc(&client, "default", "web").await;
        (s.annotations().get(ANNOTATION_IP_ALLOCATED_FROM_POOL).map(String::as_str) == Some("lan"))
            .then_some(())
    })
    .await;
    let note = event(&client, "default", "web", "IPAllocated").await;
    assert!(note.contains("192.0.2.0 from pool lan"), "{note}");
    let st = until("pool status counts the address", || async {
        let st = pool_status(&client, "lan").await;
        (st.assigned_ipv4 == 1).then_some(st)
    })
    .await;
    assert_eq!((st.available_ipv4, st.assigned_ipv6, st.available_ipv6), (3, 0, 0));
    let valid = st.conditions.iter().find(|c| c.type_ == "Valid").expect("Valid condition");
    assert_eq!(valid.status, "True");
    assert!(ctl.health.is_ready());

    // The membership Secret exists with a long random key.
    let secret = until("the membership Secret", || async {
        Api::<Secret>::namespaced(client.clone(), NS).get_opt(MEMBERSHIP_SECRET_NAME).await.unwrap()
    })
    .await;
    let key = &secret.data.unwrap()[ferrolb_controller::membership_secret::MEMBERSHIP_SECRET_KEY];
    assert!(key.0.len() >= 32);

    // Type change releases the address and clears what we wrote.
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})))
        .await
        .unwrap();
    until("status and annotation cleared", || async {
        let s = get_svc(&client, "default", "web").await;
        (ingress(&s).is_empty() && !s.annotations().contains_key(ANNOTATION_IP_ALLOCATED_FROM_POOL))
            .then_some(())
    })
    .await;
    until("pool status back to 0", || async {
        (pool_status(&client, "lan").await.assigned_ipv4 == 0).then_some(())
    })
    .await;

    // Deletion releases: four Services fill the /30 only if the deleted one's address came back.
    api.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"type": "LoadBalancer"}})))
        .await
        .unwrap();
    addresses(&client, "default", "web").await;
    for n in ["b", "c", "d"] {
        svc("default", n).create(&client).await;
        addresses(&client, "default", n).await;
    }
    svc("default", "e").create(&client).await;
    let note = event(&client, "default", "e", "AllocationFailed").await;
    assert!(note.contains("pool lan is exhausted"), "{note}");
    api.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(addresses(&client, "default", "e").await.len(), 1, "e got b's address after b was deleted");
    ctl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requested_addresses_are_honoured_or_reported() {
    let (client, server) = cluster().await;
    create_pool(&client, pool("lan", &["192.0.2.0/29"])).await;
    let ctl = start(&server, settings("c1", None));
    svc("default", "annotated").annot(ANNOTATION_LOAD_BALANCER_IPS, "192.0.2.5").create(&client).await;
    svc("default", "legacy").lb_ip("192.0.2.6").create(&client).await;
    svc("default", "outside").annot(ANNOTATION_LOAD_BALANCER_IPS, "198.51.100.1").create(&client).await;
    // Two Services asking for the same free address: whichever is reconciled first gets
    // it (the reconcile order of a fresh controller is not creation order), so the
    // second asks only once the first holds it.
    assert_eq!(addresses(&client, "default", "annotated").await, vec!["192.0.2.5"]);
    svc("default", "taken").annot(ANNOTATION_LOAD_BALANCER_IPS, "192.0.2.5").create(&client).await;
    svc("default", "garbage").annot(ANNOTATION_LOAD_BALANCER_IPS, "not-an-ip").create(&client).await;

    assert_eq!(addresses(&client, "default", "legacy").await, vec!["192.0.2.6"]);
    let note = event(&client, "default", "outside", "AllocationFailed").await;
    assert!(note.contains("198.51.100.1 is not in any pool"), "{note}");
    let note = event(&client, "default", "taken", "AllocationFailed").await;
    assert!(note.contains("192.0.2.5 is used by svc default/annotated"), "{note}");
    let note = event(&client, "default", "garbage", "AllocationFailed").await;
    assert!(note.contains(ANNOTATION_LOAD_BALANCER_IPS) && note.contains("not-an-ip"), "{note}");
    for n in ["outside", "taken", "garbage"] {
        assert!(ingress(&get_svc(&client, "default", n).await).is_empty(), "{n} got no address");
    }
    // Freeing the address lets the waiting Service have it: only the affected one is retried.
    Api::<Service>::namespaced(client.clone(), "default")
        .delete("annotated", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(addresses(&client, "default", "taken").await, vec!["192.0.2.5"]);
    ctl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_class_filtering_and_dual_stack() {
    let (client, server) = cluster().await;
    create_pool(&client, pool("dual", &["192.0.2.0/29", "2001:db8::/125"])).await;
    let ctl = start(&server, settings("c1", None));
    // Another class is never touched, even though it is created first.
    svc("default", "foreign").class("other.io/lb").create(&client).await;
    svc("default", "mine").class(ferrolb_api::DEFAULT_LOAD_BALANCER_CLASS).create(&client).await;
    svc("default", "ds").families("RequireDualStack", &["IPv6", "IPv4"]).create(&client).await;
    // Sharing depends on what is already allocated, and a fresh controller's reconcile
    // order is not creation order: each sharer is created once the one before holds
    // its address.
    svc("default", "http").annot(ANNOTATION_ALLOW_SHARED_IP, "k").ports(&[80]).create(&client).await;
    let http = addresses(&client, "default", "http").await;
    svc("default", "https").annot(ANNOTATION_ALLOW_SHARED_IP, "k").ports(&[443]).create(&client).await;
    let https = addresses(&client, "default", "https").await;
    svc("default", "clash").annot(ANNOTATION_ALLOW_SHARED_IP, "k").ports(&[80]).create(&client).await;
    let clash = addresses(&client, "default", "clash").await;
    let mine = addresses(&client, "default", "mine").await;
    assert_eq!(http, https, "same key, different ports: shared");
    assert_ne!(http, clash, "same key, same port: not shared");
    assert_ne!(mine, http);
    let ds = addresses(&client, "default", "ds").await;
    assert_eq!(ds.len(), 2);
    assert!(ds[0].contains(':') && !ds[1].contains(':'), "IPv6 (primary) first: {ds:?}");
    until("pool status counts both families", || async {
        let st = pool_status(&client, "dual").await;
        // mine, http/https (shared: once), clash, ds = 4 IPv4; ds = 1 IPv6.
        (st.assigned_ipv4 == 4 && st.assigned_ipv6 == 1 && st.available_ipv6 == 7).then_some(())
    })
    .await;

    let foreign = get_svc(&client, "default", "foreign").await;
    assert!(ingress(&foreign).is_empty());
    assert!(!foreign.annotations().contains_key(ANNOTATION_IP_ALLOCATED_FROM_POOL));
    assert!(events(&client, "default", "foreign", "AllocationFailed").await.is_empty());
    assert!(events(&client, "default", "foreign", "IPAllocated").await.is_empty());
    ctl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_shrink_delete_invalid_and_namespace_selection() {
    let (client, server) = cluster().await;
    let pools: Api<IpAddressPool> = Api::all(client.clone());
    create_pool(&client, pool("a", &["192.0.2.0/30"])).await;
    let mut team = pool("team", &["198.51.100.0/30"]);
    team.spec.auto_assign = true;
    team.spec.service_allocation = Some(ferrolb_api::ServiceAllocation {
        namespace_selectors: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some([("team".to_string(), "x".to_string())].into()),
            match_expressions: None,
        }],
        ..Default::default()
    });
    create_pool(&client, team).await;
    namespace(&client, "apps", &[]).await;
    let ctl = start(&server, settings("c1", None));
    svc("default", "kept").create(&client).await;
    assert_eq!(addresses(&client, "default", "kept").await, vec!["192.0.2.0"]);

    // Shrink pool a so the address leaves every pool: the Service keeps it (orphan policy).
    pools
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"addresses": ["192.0.2.2/31"]}})))
        .await
        .unwrap();
    let note = event(&client, "default", "kept", "AddressOrphaned").await;
    assert!(note.contains("192.0.2.0") && note.contains("pool a no longer contains"), "{note}");
    until("the orphan loses its pool annotation", || async {
        let s = get_svc(&client, "default", "kept").await;
        (!s.annotations().contains_key(ANNOTATION_IP_ALLOCATED_FROM_POOL)).then_some(())
    })
    .await;
    assert_eq!(ingress(&get_svc(&client, "default", "kept").await), vec!["192.0.2.0"], "address kept");
    until("the orphan metric", || async { (ctl.metrics.orphaned.get() == 1).then_some(()) }).await;
    let cond = until("the AddressInPool=False condition", || async {
        let s = get_svc(&client, "default", "kept").await;
        s.status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "ferrolb.io/AddressInPool" && c.status == "False")
    })
    .await;
    assert!(cond.message.contains("192.0.2.0") && cond.reason == "Orphaned", "{cond:?}");

    // An invalid edit: Valid=False, an Event, and the last good config stays in force.
    pools
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"addresses": ["192.0.2.9/30"]}})))
        .await
        .unwrap();
    let note = event(&client, "default", "a", "InvalidConfig").await;
    assert!(note.contains("spec.addresses[0]") && note.contains("last valid configuration"), "{note}");
    let cond = until("Valid=False on the pool", || async {
        pool_status(&client, "a")
            .await
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Valid" && c.status == "False")
    })
    .await;
    assert!(cond.message.contains("host bits"), "{}", cond.message);
    svc("default", "next").create(&client).await;
    assert_eq!(addresses(&client, "default", "next").await, vec!["192.0.2.2"], "from the last good range");
    // Changing the orphan's request moves it into a live pool; the condition turns True.
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), "default")
        .patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {ferrolb_api::ANNOTATION_ADDRESS_POOL: "a"}}})),
        )
        .await
        .unwrap();
    until("the orphan moved into pool a", || async {
        let s = get_svc(&client, "default", "kept").await;
        let back = s
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "ferrolb.io/AddressInPool" && c.status == "True");
        (back && ingress(&s) == ["192.0.2.3"]).then_some(())
    })
    .await;

    // Namespace selection: not allowed until the namespace gets the label; then only its Services move.
    svc("apps", "sel").annot(ferrolb_api::ANNOTATION_ADDRESS_POOL, "team").create(&client).await;
    let note = event(&client, "apps", "sel", "AllocationFailed").await;
    assert!(note.contains("does not allow"), "{note}");
    Api::<Namespace>::all(client.clone())
        .patch("apps", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"team": "x"}}})))
        .await
        .unwrap();
    assert_eq!(addresses(&client, "apps", "sel").await, vec!["198.51.100.0"]);

    // Deleting the pool orphans its Services' addresses too; nothing is taken away.
    pools.delete("team", &DeleteParams::default()).await.unwrap();
    let note = event(&client, "apps", "sel", "AddressOrphaned").await;
    assert!(note.contains("pool team was deleted"), "{note}");
    assert_eq!(ingress(&get_svc(&client, "apps", "sel").await), vec!["198.51.100.0"]);
    ctl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_replays_status_and_resolves_duplicates_by_age() {
    let (client, server) = cluster().await;
    create_pool(&client, pool("lan", &["192.0.2.0/29"])).await;
    // Status as a previous run (or a manual edit) left it: two Services on one address.
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    for name in ["a-old", "b-young", "c-kept"] {
        svc("default", name).create(&client).await;
    }
    let set =
        |ip: &'static str| json!({"status": {"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"}]}}});
    for (name, ip) in [("a-old", "192.0.2.3"), ("b-young", "192.0.2.3"), ("c-kept", "192.0.2.0")] {
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(set(ip))).await.unwrap();
    }
    let ctl = start(&server, settings("c1", None));
    let note = event(&client, "default", "b-young", "AddressConflict").await;
    assert!(note.contains("default/a-old keeps it"), "{note}");
    let young = until("b-young moves", || async {
        let ips = ingress(&get_svc(&client, "default", "b-young").await);
        (ips != ["192.0.2.3"]).then_some(ips)
    })
    .await;
    assert_eq!(ingress(&get_svc(&client, "default", "a-old").await), vec!["192.0.2.3"]);
    assert_eq!(
        ingress(&get_svc(&client, "default", "c-kept").await),
        vec!["192.0.2.0"],
        "replayed, not moved"
    );
    // Lowest free after replay: .0 and .3 are held, so the loser gets .1, never a held one.
    assert_eq!(young, vec!["192.0.2.1"]);
    assert_eq!(ctl.metrics.conflicts.get(), 1);
    ctl.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_changes_nothing_writes_nothing() {
    let (client, server) = cluster_on(ferrolb_fakeapi::FakeApiServer::new().with_request_log()).await;
    create_pool(&client, pool("lan", &["192.0.2.0/29"])).await;
    for name in ["a", "b", "c"] {
        svc("default", name).create(&client).await;
    }
    // A first run assigns the addresses and writes the pool's counts.
    let first = start(&server, settings("c1", None));
    let pools: Api<IpAddressPool> = Api::all(client.clone());
    until("the pool status counting three", || async {
        let p = pools.get("lan").await.unwrap();
        (p.status.is_some_and(|s| s.assigned_ipv4 == 3)).then_some(())
    })
    .await;
    // The pool counts the allocator, which is ahead of the Services' writes: stopped
    // before its last pool annotation, the first run leaves the second a write to make
    // (seen once on a loaded machine).
    for name in ["a", "b", "c"] {
        until("every Service's address and pool annotation", || async {
            let s = get_svc(&client, "default", name).await;
            (!ingress(&s).is_empty()
                && s.annotations().get(ANNOTATION_IP_ALLOCATED_FROM_POOL).map(String::as_str) == Some("lan"))
            .then_some(())
        })
        .await;
    }
    first.stop().await.unwrap();

    // The next run finds everything as it would make it.
    let second = start(&server, settings("c2", None));
    // Processed: ready (every Service replayed) and each Service reconciled once; the
    // pool-status write the replay asks for has run once the allocations metric is set.
    until("the second run reconciling every Service", || async {
        (second.health.is_ready() && second.metrics.reconciles.get() >= 3).then_some(())
    })
    .await;
    until("the second run's pool gauge", || async {
        let text = second.metrics.encode();
        text.contains("ferrolb_allocator_assigned_addresses{pool=\"lan\",family=\"ipv4\"} 3").then_some(())
    })
    .await;
    let writes: Vec<String> = server
        .request_log()
        .into_iter()
        .filter(|r| r.client.as_deref() == Some("c2") && r.is_write())
        .map(|r| format!("{:?} {}", r.verb, r.path))
        .collect();
    assert!(writes.is_empty(), "a restart with nothing to change wrote: {writes:?}");
    second.stop().await.unwrap();
}

/// A reconcile whose write fails is tried again ([`reconcile::RETRY_ERROR`] later) with
/// no change to the Service to set it off: the apiserver stops answering the controller,
/// its status write times out, the apiserver answers again, and the address arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_is_tried_again_without_a_change() {
    use ferrolb_controller::reconcile;
    let (client, server) = cluster().await;
    create_pool(&client, pool("lan", &["192.0.2.0/30"])).await;
    let ctl = start(&server, settings("c1", None));
    svc("default", "first").create(&client).await;
    addresses(&client, "default", "first").await;
    // Its open watches keep streaming; its new requests (the status write) hang.
    server.set_hanging_for("c1", true);
    svc("default", "web").create(&client).await;
    until("the write counted as failed", || async {
        ctl.metrics.encode().contains("ferrolb_controller_reconcile_errors_total{error=").then_some(())
    })
    .await;
    assert!(ingress(&get_svc(&client, "default", "web").await).is_empty());
    server.set_hanging_for("c1", false);
    // Within `until`'s patience (60 s): the retry after an error, not a later one.
    assert!(reconcile::RETRY_ERROR < ferrolb_fakeapi::wait::PATIENCE);
    assert_eq!(addresses(&client, "default", "web").await, vec!["192.0.2.1"]);
    ctl.stop().await.unwrap();
}

/// Far more Services than are reconciled at once: a cold start reaches every one, also
/// when some are deleted while they wait in the queue (their reconcile finds them gone)
/// and others change while they wait or while their reconcile runs (queued again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_start_reaches_every_service_while_some_go_and_others_change() {
    use futures::{StreamExt, TryStreamExt};
    let (client, server) = cluster().await;
    create_pool(&client, pool("bulk", &["198.18.0.0/20"])).await;
    let n = 3072;
    let name = |i: usize| format!("s{i:04}");
    futures::stream::iter(0..n)
        .map(|i| {
            let client = client.clone();
            async move { svc("default", &name(i)).create(&client).await }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let ctl = start(&server, settings("c1", None));
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    // While the cold start runs: every second Service goes, every fifth gets a label.
    let deleted: Vec<String> = (0..n).step_by(2).map(name).collect();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                if i % 2 == 0 {
                    api.delete(&name(i), &DeleteParams::default()).await.map(drop)
                } else if i % 5 == 0 {
                    let label = json!({"metadata": {"labels": {"touched": "yes"}}});
                    api.patch(&name(i), &PatchParams::default(), &Patch::Merge(label)).await.map(drop)
                } else {
                    Ok(())
                }
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<()>>()
        .await
        .unwrap();
    let addressed = until("every remaining Service with an address", || async {
        let list = api.list(&Default::default()).await.unwrap();
        let with: Vec<String> =
            list.items.iter().filter(|s| !ingress(s).is_empty()).map(|s| s.name_any()).collect();
        (list.items.len() == n - deleted.len() && with.len() == list.items.len()).then_some(with)
    })
    .await;
    assert!(deleted.iter().all(|d| !addressed.contains(d)));
    ctl.stop().await.unwrap();
}

/// Services addressed in a burst have their pool's counts written a few times, at most
/// once every [`STATUS_INTERVAL`], not once per round trip; the last write counts them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_services_writes_the_pool_counts_a_few_times() {
    use ferrolb_controller::pool_sync::STATUS_INTERVAL;
    const BURST: i64 = 40;
    let (client, server) = cluster_on(ferrolb_fakeapi::FakeApiServer::new().with_request_log()).await;
    create_pool(&client, pool("lan", &["192.0.2.0/26"])).await;
    let started = std::time::Instant::now();
    let ctl = start(&server, settings("c1", None));
    for i in 0..BURST {
        svc("default", &format!("s{i:02}")).create(&client).await;
    }
    until("the pool counting every Service", || async {
        (pool_status(&client, "lan").await.assigned_ipv4 == BURST).then_some(())
    })
    .await;
    let took = started.elapsed();
    let writes = server
        .request_log()
        .into_iter()
        .filter(|r| {
            r.client.as_deref() == Some("c1")
                && r.is_write()
                && r.path.ends_with("/ipaddresspools/lan/status")
        })
        .count();
    // One write per interval at most, besides the first (the Valid condition) and the one
    // after a quiet spell.
    let bound = 2 + (took.as_secs_f64() / STATUS_INTERVAL.as_secs_f64()) as usize;
    assert!(
        writes <= bound,
        "{writes} pool status writes in {took:?} for {BURST} Services (at most {bound})"
    );
    ctl.stop().await.unwrap();
}
