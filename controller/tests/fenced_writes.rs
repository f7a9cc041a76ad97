//! Allocation writes fenced by the apiserver, not only by the leader's timer: each write
//! is conditional on the version of the Service it was decided from, so a write of an
//! old leader that lands late is refused once the Service changed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ferrolb_fakeapi::{FakeApiServer, LoggedRequest, Verb};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};

/// Every version of every Service in `default` a watch delivers: (name, ingress IPs, labels).
type Versions = Arc<Mutex<Vec<(String, Vec<String>, BTreeMap<String, String>)>>>;

async fn record_versions(services: &Api<Service>) -> Versions {
    let seen = Versions::default();
    let from = services.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = services.watch(&WatchParams::default(), &from).await.unwrap().boxed();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Some(Ok(ev)) = stream.next().await {
            if let WatchEvent::Added(s) | WatchEvent::Modified(s) = ev {
                let name = s.metadata.name.clone().unwrap_or_default();
                let labels = s.metadata.labels.clone().unwrap_or_default();
                record.lock().unwrap().push((name, ingress(&s), labels));
            }
        }
    });
    seen
}

/// The first status write of client `who` to Service `name`.
fn status_write(log: &[LoggedRequest], who: &str, name: &str) -> Option<LoggedRequest> {
    let path = format!("/api/v1/namespaces/default/services/{name}/status");
    log.iter()
        .find(|r| r.client.as_deref() == Some(who) && r.verb == Some(Verb::Patch) && r.path == path)
        .cloned()
}

/// Waits until `who`'s watch of `path` is open: held afterwards, its writes are held,
/// but what it watches still reaches it (a watch started after the hold would not).
async fn watching(server: &FakeApiServer, who: &str, path: &str) {
    until(&format!("{who} watches {path}"), || async {
        let log = server.request_log();
        let open = log.iter().any(|r| {
            r.client.as_deref() == Some(who) && r.verb == Some(Verb::Watch) && r.path == path && r.succeeded()
        });
        open.then_some(())
    })
    .await;
}

/// A leader paused mid-write: its status write for `s`, decided from version N, is on the
/// wire while it loses the Lease. Someone else changes `s` (N+1: it now asks for an
/// address of its own); the new leader decides from the fresh object and gives the address
/// the old leader had picked for `s` to another Service, `t`. When the old write finally
/// reaches the apiserver it is refused (409): the stale address never shows on `s`, no
/// write of the old leader lands on a Service after the new leader's first, and after
/// more churn no address is held twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_leaders_write_that_lands_late_is_refused() {
    let (client, server) = cluster_on(FakeApiServer::new().with_request_log()).await;
    create_pool(&client, pool("lan", &["192.0.2.0/29"])).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let lease = Duration::from_secs(3);
    let old = start(&server, settings("a", Some(lease)));
    // Leading and done rebuilding its state (ready again): from here it allocates.
    until("a leads and allocates", || async { (old.is_leader() && old.health.is_ready()).then_some(()) })
        .await;
    watching(&server, "a", "/api/v1/services").await;
    let new = start(&server, settings("b", Some(lease)));
    until("b stands by", || async { new.health.is_ready().then_some(()) }).await;
    let seen = record_versions(&services).await;

    server.set_delaying_for("a", true);
    svc("default", "s").create(&client).await;
    let stale = until("a's status write for s is on the wire", || async {
        status_write(&server.request_log(), "a", "s")
    })
    .await;
    assert_eq!(stale.answered, None, "held on the wire");
    let pp = PatchParams::default();
    let wants = serde_json::json!({"spec": {"loadBalancerIP": "192.0.2.5"}});
    services.patch("s", &pp, &Patch::Merge(&wants)).await.unwrap();

    until("b takes over", || async { new.is_leader().then_some(()) }).await;
    until("b gives s the address it asks for", || async {
        (ingress(&get_svc(&client, "default", "s").await) == ["192.0.2.5"]).then_some(())
    })
    .await;
    svc("default", "t").create(&client).await;
    assert_eq!(
        addresses(&client, "default", "t").await,
        ["192.0.2.0"],
        "the address a picked for s is t's now"
    );

    server.set_delaying_for("a", false);
    let landed = until("a's held write reaches the apiserver", || async {
        server.request_log().into_iter().find(|r| r.sent == stale.sent).and_then(|r| r.answered)
    })
    .await;
    assert_eq!(landed.1, 409, "a's write, decided from s before b wrote it, must be refused");
    // Proof the watch saw every write up to the refusal: a change made after it.
    let marker = serde_json::json!({"metadata": {"labels": {"marker": "after-the-refusal"}}});
    services.patch("s", &pp, &Patch::Merge(&marker)).await.unwrap();
    until("the watch sees the marker", || async {
        let seen = seen.lock().unwrap();
        seen.iter().any(|(n, _, l)| n == "s" && l.contains_key("marker")).then_some(())
    })
    .await;
    let on_s: Vec<Vec<String>> =
        seen.lock().unwrap().iter().filter(|(n, _, _)| n == "s").map(|(_, ips, _)| ips.clone()).collect();
    assert!(
        !on_s.iter().any(|ips| ips.contains(&"192.0.2.0".to_string())),
        "a stale address landed on s: {on_s:?}"
    );

    // In the log: once b has written a Service, no write of a to a Service succeeds.
    let log = server.request_log();
    let service_write = |r: &&LoggedRequest| r.is_write() && r.path.contains("/services/");
    let first_new = log
        .iter()
        .filter(service_write)
        .filter(|r| r.client.as_deref() == Some("b") && r.succeeded())
        .filter_map(|r| r.answered.map(|(at, _)| at))
        .min()
        .unwrap();
    let late: Vec<&LoggedRequest> = log
        .iter()
        .filter(service_write)
        .filter(|r| r.client.as_deref() == Some("a") && r.succeeded())
        .filter(|r| r.answered.is_some_and(|(at, _)| at > first_new))
        .collect();
    assert!(late.is_empty(), "writes of the old leader landed after the new leader's first: {late:#?}");

    // Churn under the new leader; then every address is held once.
    until("a's run() returns", || async { old.is_finished().then_some(()) }).await;
    assert!(matches!(old.stop().await, Err(ferrolb_controller::Error::LostLeadership)));
    for i in 0..3 {
        svc("default", &format!("c{i}")).create(&client).await;
    }
    services.delete("t", &DeleteParams::default()).await.unwrap();
    svc("default", "c3").create(&client).await;
    for i in 0..4 {
        addresses(&client, "default", &format!("c{i}")).await;
    }
    let mut holders = BTreeMap::new();
    for s in services.list(&ListParams::default()).await.unwrap().items {
        for ip in ingress(&s) {
            let name = s.metadata.name.clone().unwrap();
            if let Some(other) = holders.insert(ip.clone(), name.clone()) {
                panic!("{ip} is held by both {other} and {name}");
            }
        }
    }
    assert_eq!(holders.len(), 5, "s and c0..c3, one address each: {holders:?}");
    new.stop().await.unwrap();
}

/// One leader whose write was decided from a version that changed before it landed: the
/// apiserver refuses it (409), and the controller does not send that decision again but
/// decides anew from the changed Service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_write_is_decided_again_from_the_changed_service() {
    let (client, server) = cluster_on(FakeApiServer::new().with_request_log()).await;
    create_pool(&client, pool("lan", &["192.0.2.0/29"])).await;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let ctl = start(&server, settings("a", None));
    until("a is ready", || async { ctl.health.is_ready().then_some(()) }).await;
    watching(&server, "a", "/api/v1/services").await;

    server.set_delaying_for("a", true);
    svc("default", "s").create(&client).await;
    until("a's status write for s is on the wire", || async {
        status_write(&server.request_log(), "a", "s")
    })
    .await;
    let wants = serde_json::json!({"spec": {"loadBalancerIP": "192.0.2.5"}});
    services.patch("s", &PatchParams::default(), &Patch::Merge(&wants)).await.unwrap();
    server.set_delaying_for("a", false);

    until("s gets the address it asks for", || async {
        (ingress(&get_svc(&client, "default", "s").await) == ["192.0.2.5"]).then_some(())
    })
    .await;
    let path = "/api/v1/namespaces/default/services/s/status";
    // The store has the write a moment before the log has its answer.
    let answers = until("both status writes are answered", || async {
        let answers: Vec<u16> = server
            .request_log()
            .iter()
            .filter(|r| r.client.as_deref() == Some("a") && r.verb == Some(Verb::Patch) && r.path == path)
            .filter_map(|r| r.answered.map(|(_, code)| code))
            .collect();
        (answers.len() >= 2).then_some(answers)
    })
    .await;
    assert_eq!(answers, [409, 200], "refused, then decided again from the new version");
    let conflicts =
        ctl.metrics.reconcile_errors.get_or_create(&vec![("error".into(), "conflict".into())]).get();
    // The refusal only: the version between our ingress and annotation writes is not
    // reconciled (its write would be refused for nothing).
    assert_eq!(conflicts, 1);
    ctl.stop().await.unwrap();
}

/// Pool status is written conditional on the version of the pool its counts were computed
/// against: computed before the pool changed, it is refused, and written from the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_status_write_computed_before_the_pool_changed_is_refused() {
    use ferrolb_api::IpAddressPool;
    let (client, server) = cluster_on(FakeApiServer::new().with_request_log()).await;
    create_pool(&client, pool("lan", &["192.0.2.0/29"])).await;
    let pools: Api<IpAddressPool> = Api::all(client.clone());
    let ctl = start(&server, settings("a", None));
    until("a counts the pool", || async {
        (pool_status(&client, "lan").await.available_ipv4 == 8).then_some(())
    })
    .await;
    watching(&server, "a", "/apis/ferrolb.io/v1alpha1/ipaddresspools").await;

    server.set_delaying_for("a", true);
    // Requests before this one (such as the write of the counts just seen, whose answer
    // the log may not show yet) are not the one to hold.
    let before = server.request_log().len();
    let grow = serde_json::json!({"spec": {"addresses": ["192.0.2.0/28"]}});
    pools.patch("lan", &PatchParams::default(), &Patch::Merge(&grow)).await.unwrap();
    let path = "/apis/ferrolb.io/v1alpha1/ipaddresspools/lan/status";
    let status_writes = |log: Vec<LoggedRequest>| -> Vec<LoggedRequest> {
        log.into_iter()
            .filter(|r| r.client.as_deref() == Some("a") && r.is_write() && r.path == path)
            .collect()
    };
    let held = until("a's pool status write is on the wire", || async {
        status_writes(server.request_log().split_off(before)).into_iter().next()
    })
    .await;
    let touch = serde_json::json!({"metadata": {"labels": {"touched": "yes"}}});
    pools.patch("lan", &PatchParams::default(), &Patch::Merge(&touch)).await.unwrap();
    server.set_delaying_for("a", false);

    let answered = until("the held write is answered", || async {
        status_writes(server.request_log()).into_iter().find(|r| r.sent == held.sent).and_then(|r| r.answered)
    })
    .await;
    assert_eq!(answered.1, 409, "computed against the pool before it changed");
    until("the counts are written from the new version", || async {
        (pool_status(&client, "lan").await.available_ipv4 == 16).then_some(())
    })
    .await;
    ctl.stop().await.unwrap();
}
