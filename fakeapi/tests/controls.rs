//! The fake's own test controls: outages, counters, direct store access, bookmarks on demand.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::json;

use ferrolb_fakeapi::wait::until;
use ferrolb_fakeapi::{FakeApiServer, ROOT_CA_CONFIGMAP, Verb};

fn cm(name: &str) -> ConfigMap {
    ConfigMap { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() }
}

#[tokio::test]
async fn unavailable_answers_503_and_ends_watches() {
    let (client, fake) = FakeApiServer::new().client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let rv = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = cms.watch(&WatchParams::default(), &rv).await.unwrap().boxed();

    fake.set_unavailable(true);
    match cms.get("x").await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 503),
        other => panic!("expected 503, got {other:?}"),
    }
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = stream.next().await {
            assert!(matches!(ev, Ok(WatchEvent::Bookmark(_))), "{ev:?}");
        }
    });
    end.await.expect("watch stream ends during the outage");

    fake.set_unavailable(false);
    cms.create(&PostParams::default(), &cm("after")).await.unwrap();
}

#[tokio::test]
async fn hanging_requests_wait_for_the_apiserver_to_return() {
    let (client, fake) = FakeApiServer::new().client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    fake.set_hanging(true);
    let before = fake.total_requests();
    let pending = tokio::spawn(async move { cms.create(&PostParams::default(), &cm("late")).await });
    // Proof the request reached the apiserver (which holds it) before asserting it waits.
    until("the request to arrive", || async { (fake.total_requests() > before).then_some(()) }).await;
    assert!(!pending.is_finished());
    assert!(fake.get_json("v1", "configmaps", Some("default"), "late").is_none());
    fake.set_hanging(false);
    pending.await.unwrap().unwrap();
    assert!(fake.get_json("v1", "configmaps", Some("default"), "late").is_some());
}

/// One client hangs, the other is served; the hung client's open watch keeps streaming,
/// and the request log orders both clients' requests on one counter.
#[tokio::test]
async fn hanging_one_client_leaves_the_others_and_its_open_watches_alone() {
    let fake = FakeApiServer::new().with_request_log();
    let (a, b): (Api<ConfigMap>, Api<ConfigMap>) = (
        Api::default_namespaced(fake.new_client_tagged("a")),
        Api::default_namespaced(fake.new_client_tagged("b")),
    );
    let rv = a.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut watch = a.watch(&WatchParams::default(), &rv).await.unwrap().boxed();

    fake.set_hanging_for("a", true);
    let pending = tokio::spawn({
        let a = a.clone();
        async move { a.create(&PostParams::default(), &cm("from-a")).await }
    });
    let sent_by_a = |log: &[ferrolb_fakeapi::LoggedRequest]| {
        log.iter().find(|r| r.client.as_deref() == Some("a") && r.verb == Some(Verb::Create)).cloned()
    };
    // The proof that a's request arrived: the log has it.
    let waiting = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(r) = sent_by_a(&fake.request_log()) {
                return r;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("a's create reaches the server");
    assert_eq!(waiting.answered, None);

    b.create(&PostParams::default(), &cm("from-b")).await.unwrap();
    match tokio::time::timeout(Duration::from_secs(5), watch.next()).await.unwrap() {
        Some(Ok(WatchEvent::Added(o))) => assert_eq!(o.metadata.name.as_deref(), Some("from-b")),
        other => panic!("a's open watch should carry on, got {other:?}"),
    }
    assert!(!pending.is_finished());
    assert!(fake.get_json("v1", "configmaps", Some("default"), "from-a").is_none());

    fake.set_hanging_for("a", false);
    pending.await.unwrap().unwrap();
    let log = fake.request_log();
    let by_b = log.iter().find(|r| r.client.as_deref() == Some("b") && r.is_write()).unwrap();
    let by_a = sent_by_a(&log).unwrap();
    assert_eq!(by_b.path, "/api/v1/namespaces/default/configmaps");
    assert!(by_a.sent < by_b.sent && by_b.succeeded() && by_a.succeeded());
    assert!(by_b.answered.unwrap().0 < by_a.answered.unwrap().0, "{log:#?}");
}

/// A delayed link holds a client's requests on the wire: one the client gave up on still
/// lands when the link is back, after the other clients' writes of the meantime; one a
/// hang held and the client gave up on never does.
#[tokio::test]
async fn a_delayed_request_lands_when_the_link_is_back_even_if_its_client_gave_up() {
    let fake = FakeApiServer::new().with_request_log();
    let a: Api<ConfigMap> = Api::default_namespaced(fake.new_client_tagged("a"));
    let b: Api<ConfigMap> = Api::default_namespaced(fake.new_client_tagged("b"));
    let create_by_a = |name: &'static str| {
        let a = a.clone();
        tokio::spawn(async move { a.create(&PostParams::default(), &cm(name)).await })
    };
    let arrived = |fake: &FakeApiServer, n: usize| {
        let fake = fake.clone();
        async move {
            until("a's create reaches the server", || async {
                let log = fake.request_log();
                let by_a = log.iter().filter(|r| r.client.as_deref() == Some("a") && r.is_write());
                (by_a.count() >= n).then_some(())
            })
            .await
        }
    };

    fake.set_hanging_for("a", true);
    let hung = create_by_a("hung");
    arrived(&fake, 1).await;
    hung.abort();
    let _ = hung.await;
    fake.set_hanging_for("a", false);

    fake.set_delaying_for("a", true);
    let delayed = create_by_a("delayed");
    arrived(&fake, 2).await;
    delayed.abort();
    let _ = delayed.await;
    b.create(&PostParams::default(), &cm("meanwhile")).await.unwrap();
    assert!(fake.get_json("v1", "configmaps", Some("default"), "delayed").is_none(), "held while delayed");

    fake.set_delaying_for("a", false);
    until("the delayed create lands", || async {
        fake.get_json("v1", "configmaps", Some("default"), "delayed").map(|_| ())
    })
    .await;
    let log = fake.request_log();
    let writes = |client: &str| -> Vec<_> {
        log.iter().filter(|r| r.client.as_deref() == Some(client) && r.is_write()).collect()
    };
    let (by_a, by_b) = (writes("a"), writes("b"));
    let (hung, delayed, meanwhile) = (by_a[0], by_a[1], by_b[0]);
    assert_eq!(hung.answered, None, "a hung request its client gave up on is never served");
    assert!(delayed.succeeded(), "{delayed:?}");
    assert!(meanwhile.answered.unwrap().0 < delayed.answered.unwrap().0, "{log:#?}");
    assert!(fake.get_json("v1", "configmaps", Some("default"), "hung").is_none());
}

#[tokio::test]
async fn counters_and_direct_store_access() {
    let (client, fake) = FakeApiServer::new().client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let before = fake.total_requests();
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    cms.get("a").await.unwrap();
    cms.list(&ListParams::default()).await.unwrap();
    cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "v"}}))).await.unwrap();
    assert_eq!(fake.total_requests() - before, 4);
    assert_eq!(
        [Verb::Create, Verb::Get, Verb::List, Verb::Patch, Verb::Watch].map(|v| fake.request_count(v)),
        [1, 1, 1, 1, 0]
    );
    let stored = fake.get_json("v1", "configmaps", Some("default"), "a").unwrap();
    assert_eq!(stored["data"]["k"], "v");
    assert_eq!(stored["metadata"]["resourceVersion"], fake.resource_version().to_string());
}

#[tokio::test]
async fn bookmarks_on_demand() {
    let (client, fake) = FakeApiServer::new().with_bookmark_interval(Duration::from_secs(3600)).client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let a = cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default(), a.metadata.resource_version.as_deref().unwrap())
        .await
        .unwrap()
        .boxed();
    let mut quiet = cms.watch(&WatchParams::default().disable_bookmarks(), "0").await.unwrap().boxed();
    cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    fake.send_bookmarks();
    assert!(matches!(stream.next().await, Some(Ok(WatchEvent::Added(_)))));
    match tokio::time::timeout(Duration::from_secs(5), stream.next()).await.unwrap() {
        Some(Ok(WatchEvent::Bookmark(b))) => {
            assert_eq!(b.metadata.resource_version, fake.resource_version().to_string())
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // rv "0": synthetic ADDEDs for what was there when the watch opened, the real one for "b", no bookmark.
    for want in ["a", ROOT_CA_CONFIGMAP, "b"] {
        let ev = tokio::time::timeout(Duration::from_secs(5), quiet.next()).await.unwrap();
        assert!(
            matches!(ev, Some(Ok(WatchEvent::Added(ref o))) if o.metadata.name.as_deref() == Some(want)),
            "{ev:?}"
        );
    }
    assert!(tokio::time::timeout(Duration::from_millis(300), quiet.next()).await.is_err());
}

#[tokio::test]
async fn streaming_list_watcher_gets_initial_events_end() {
    let (client, _fake) = FakeApiServer::new().client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let mut events = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut next =
        async || tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap().unwrap();
    assert!(matches!(next().await, Ok(watcher::Event::Init)));
    for want in ["a", ROOT_CA_CONFIGMAP] {
        assert!(
            matches!(next().await, Ok(watcher::Event::InitApply(o)) if o.metadata.name.as_deref() == Some(want))
        );
    }
    assert!(matches!(next().await, Ok(watcher::Event::InitDone)));
}

#[tokio::test]
async fn ferrolb_kinds_register_cluster_scoped_with_status() {
    let (client, fake) = FakeApiServer::new().client();
    fake.register_ferrolb_kind("ServiceAnnouncement", "serviceannouncements", true).unwrap();
    let gvk = GroupVersionKind::gvk("ferrolb.io", "v1alpha1", "ServiceAnnouncement");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "serviceannouncements");
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ferrolb.io/v1alpha1", "kind": "ServiceAnnouncement",
        "metadata": {"name": "web"}, "spec": {"ip": "192.0.2.10"}, "status": {"ignored": true},
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert!(created.data.get("status").is_none(), "status subresource: create ignores .status");
    let st = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"announcedBy": ["n1"]}})),
        )
        .await
        .unwrap();
    assert_eq!(st.data["status"]["announcedBy"][0], "n1");
    assert!(
        fake.get_json(
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            None,
            "serviceannouncements.ferrolb.io"
        )
        .is_some()
    );
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let (client, fake) = FakeApiServer::new().client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let rv = fake.resource_version();
    let made = cms.create(&PostParams { dry_run: true, ..Default::default() }, &cm("ghost")).await.unwrap();
    assert_eq!(made.metadata.name.as_deref(), Some("ghost"));
    assert!(cms.get_opt("ghost").await.unwrap().is_none());
    assert_eq!(fake.resource_version(), rv);
}
