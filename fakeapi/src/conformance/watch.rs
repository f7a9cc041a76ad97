//! LIST and WATCH: resourceVersions, 410 Gone, bookmarks, selectors, paging.

use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use super::Env;
use super::fixtures::{PATIENCE, cm, names, next_change, next_event, rv};
use crate::ROOT_CA_CONFIGMAP;

pub(super) async fn watch_from_a_resource_version_sees_later_events_in_order(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    // Changes made before the watch opens, but after its resourceVersion, are replayed.
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    let mut stream =
        cms.watch(&WatchParams::default().timeout(30), &rv(&a).to_string()).await.unwrap().boxed();
    cms.patch("b", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "2"}}))).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();

    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(match next_change(&mut stream).await {
            WatchEvent::Added(o) => ("ADDED", o.name_any(), rv(&o)),
            WatchEvent::Modified(o) => ("MODIFIED", o.name_any(), rv(&o)),
            WatchEvent::Deleted(o) => ("DELETED", o.name_any(), rv(&o)),
            other => panic!("unexpected {other:?}"),
        });
    }
    let kinds: Vec<_> = seen.iter().map(|(t, n, _)| (*t, n.as_str())).collect();
    assert_eq!(kinds, vec![("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "a")]);
    assert!(seen.windows(2).all(|w| w[0].2 < w[1].2), "resourceVersions increase: {seen:?}");
}

/// Every line of a watch begins `{"type":"…",`, as the apiserver encodes its events
/// (type before object): the clients' watch-event counters read the type there
/// (`ferrolb_runtime::kube_client::received`), so a server putting it last would have
/// every event counted as `other`.
pub(super) async fn watch_lines_begin_with_their_type(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let path = format!(
        "/api/v1/namespaces/{}/configmaps?watch=true&resourceVersion={}&timeoutSeconds=10",
        env.ns(),
        rv(&a)
    );
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    let mut lines = env.client().request_stream(request).await.unwrap().lines();
    cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"k": "2"}}))).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    for want in ["MODIFIED", "DELETED"] {
        let line = tokio::time::timeout(PATIENCE, lines.next())
            .await
            .unwrap_or_else(|_| panic!("a {want} line in time"))
            .expect("the watch goes on")
            .unwrap();
        let head = format!("{{\"type\":\"{want}\",");
        assert!(line.starts_with(&head), "a {want} line begins {head}: {line}");
    }
}

pub(super) async fn watch_from_a_compacted_resource_version_is_gone(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    env.forget_history().await;
    let mut stream = cms.watch(&WatchParams::default(), &rv(&a).to_string()).await.unwrap().boxed();
    match next_event(&mut stream).await {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired"), "{e:?}"),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
}

/// Bookmarks report progress: once the server moved past a watch's resourceVersion, it
/// sends one about every minute and one 2 s before the watch times out (the fake: every
/// second).
pub(super) async fn bookmarks_arrive(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let mut stream =
        cms.watch(&WatchParams::default().timeout(5), &rv(&a).to_string()).await.unwrap().boxed();
    let b = cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    let bookmark = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match stream.next().await.expect("a bookmark before the watch ends").unwrap() {
                WatchEvent::Bookmark(bookmark) => return bookmark,
                WatchEvent::Added(o) => assert_eq!(o.name_any(), "b"),
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await
    .expect("a bookmark in time");
    assert!(bookmark.metadata.resource_version.parse::<u64>().unwrap() >= rv(&b));
}

pub(super) async fn label_and_field_selectors_filter_lists_and_watches(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    for (n, app, tier) in [("a", "web", "front"), ("b", "web", "back"), ("c", "db", "back")] {
        cms.create(&PostParams::default(), &cm(n, &[("app", app), ("tier", tier)])).await.unwrap();
    }
    let labelled = |sel: &str| ListParams::default().labels(sel);
    assert_eq!(names(&cms, &labelled("app=web")).await, ["a", "b"]);
    assert_eq!(names(&cms, &labelled("app=web,tier=back")).await, ["b"]);
    assert_eq!(names(&cms, &labelled("app in (db, cache)")).await, ["c"]);
    // Objects without the label match `!=` and `!key`.
    assert_eq!(names(&cms, &labelled("app!=web")).await, ["c", ROOT_CA_CONFIGMAP]);
    assert_eq!(names(&cms, &labelled("!tier")).await, [ROOT_CA_CONFIGMAP]);
    assert_eq!(names(&cms, &ListParams::default().fields("metadata.name=b")).await, ["b"]);

    // Paging returns every item exactly once.
    let first = cms.list(&ListParams::default().limit(3)).await.unwrap();
    let token = first.metadata.continue_.clone().expect("a continue token");
    let second = cms.list(&ListParams::default().limit(3).continue_token(&token)).await.unwrap();
    let paged: Vec<_> = first.items.iter().chain(&second.items).map(|o| o.name_any()).collect();
    assert_eq!(paged, ["a", "b", "c", ROOT_CA_CONFIGMAP]);
    assert!(second.metadata.continue_.is_none_or(|c| c.is_empty()));

    // Pages form one list: later pages report the first page's resourceVersion, so a watch
    // from it sees changes made while paging — here an object sorting before the token,
    // which no later page can show (kube's watcher pages by 500 and watches from the last
    // page's resourceVersion; without this it lost such objects for good).
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    let first_rv = first.metadata.resource_version.clone().unwrap();
    let token = first.metadata.continue_.clone().expect("a continue token");
    cms.create(&PostParams::default(), &cm("aa", &[])).await.unwrap();
    let second = cms.list(&ListParams::default().limit(2).continue_token(&token)).await.unwrap();
    assert_eq!(second.metadata.resource_version.as_deref(), Some(first_rv.as_str()));
    assert!(second.items.iter().all(|o| o.name_any() != "aa"), "sorts before the token");
    let mut stream = cms.watch(&WatchParams::default(), &first_rv).await.unwrap().boxed();
    match next_change(&mut stream).await {
        WatchEvent::Added(o) => assert_eq!(o.name_any(), "aa"),
        other => panic!("expected ADDED aa, got {other:?}"),
    }
    cms.delete("aa", &DeleteParams::default()).await.unwrap();

    // A watch with a selector sees an object leave the selection as DELETED.
    let start = cms.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = cms.watch(&WatchParams::default().labels("app=web"), &start).await.unwrap().boxed();
    cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": "other"}}})))
        .await
        .unwrap();
    assert!(matches!(next_change(&mut stream).await, WatchEvent::Deleted(o) if o.name_any() == "a"));

    // Collection delete honours the selector.
    cms.delete_collection(&DeleteParams::default(), &ListParams::default().labels("tier=back"))
        .await
        .unwrap();
    assert_eq!(names(&cms, &ListParams::default()).await, ["a", ROOT_CA_CONFIGMAP]);
}
