//! kube-runtime on top of the API: watcher, reflector, controller, finalizer helper.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as Fin, finalizer};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;

use super::Env;
use super::fixtures::{PATIENCE, api_code, cm};
use crate::ROOT_CA_CONFIGMAP;
use crate::wait::until;

type Events = BoxStream<'static, Result<watcher::Event<ConfigMap>, watcher::Error>>;

/// The watcher's next event, within 10 s.
async fn next(events: &mut Events) -> Result<watcher::Event<ConfigMap>, watcher::Error> {
    tokio::time::timeout(Duration::from_secs(10), events.next()).await.unwrap().expect("a watcher event")
}

/// The names a watcher's initial list delivers, after its `Init`.
async fn initial_names(events: &mut Events) -> Vec<String> {
    let mut names = Vec::new();
    loop {
        match next(events).await {
            Ok(watcher::Event::InitApply(o)) => names.push(o.name_any()),
            Ok(watcher::Event::InitDone) => return names,
            other => panic!("expected the initial list, got {other:?}"),
        }
    }
}

pub(super) async fn watcher_relists_after_410(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    // Without bookmarks and with a short server timeout, the watcher re-watches from the last RV it saw.
    let cfg = watcher::Config::default().timeout(1).disable_bookmarks();
    let mut events = watcher(cms.clone(), cfg).boxed();
    assert!(matches!(next(&mut events).await, Ok(watcher::Event::Init)));
    assert_eq!(initial_names(&mut events).await, ["a", ROOT_CA_CONFIGMAP]);
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    assert!(matches!(next(&mut events).await, Ok(watcher::Event::Apply(o)) if o.name_any() == "b"));

    // A write this watcher does not see, then the server forgets history past its resourceVersion.
    let elsewhere: Api<ConfigMap> = Api::namespaced(env.client(), "kube-system");
    elsewhere.create(&PostParams::default(), &cm(&env.unique("x"), &[])).await.unwrap();
    env.forget_history().await;
    // A restarted apiserver may first refuse the connection or the re-watch (429 until its
    // cache is ready): the watcher reports that and tries again.
    let gone = async {
        loop {
            match next(&mut events).await {
                Err(watcher::Error::WatchError(e)) => return e,
                Err(watcher::Error::WatchFailed(_) | watcher::Error::WatchStartFailed(_)) => continue,
                other => panic!("expected a 410 watch error, got {other:?}"),
            }
        }
    };
    let e = tokio::time::timeout(PATIENCE, gone).await.expect("a watch error in time");
    assert_eq!(e.code, 410, "{e:?}");
    assert!(matches!(next(&mut events).await, Ok(watcher::Event::Init)));
    assert_eq!(initial_names(&mut events).await, ["a", "b", ROOT_CA_CONFIGMAP]);
}

pub(super) async fn reflector_store_follows_the_api(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let (reader, writer) = reflector::store();
    let stream = reflector(writer, watcher(cms.clone(), watcher::Config::default())).applied_objects();
    let task = tokio::spawn(stream.try_for_each(|_| async { Ok(()) }));
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready()).await.unwrap().unwrap();
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    until("the store to hold b and the root CA only", || async {
        let mut names: Vec<String> = reader.state().iter().map(|o| o.name_any()).collect();
        names.sort();
        (names == ["b", ROOT_CA_CONFIGMAP]).then_some(())
    })
    .await;
    task.abort();
}

#[derive(Debug, thiserror::Error)]
#[error("never fails")]
struct NeverFails;

pub(super) async fn kube_runtime_controller_reconciles(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    cms.create(&PostParams::default(), &cm("a", &[])).await.unwrap();
    let reconcile = |obj: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>| async move {
        let patch = json!({"metadata": {"annotations": {"ferrolb.io/seen": "yes"}}});
        api.patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await?;
        Ok::<_, kube::Error>(Action::await_change())
    };
    let controller = Controller::new(cms.clone(), watcher::Config::default())
        .run(reconcile, |_, _, _| Action::requeue(Duration::from_secs(1)), Arc::new(cms.clone()))
        .for_each(|_| async {});
    let task = tokio::spawn(controller);
    cms.create(&PostParams::default(), &cm("b", &[])).await.unwrap();
    until("the controller to annotate every object", || async {
        let list = cms.list(&ListParams::default()).await.unwrap();
        list.items.iter().all(|o| o.annotations().contains_key("ferrolb.io/seen")).then_some(())
    })
    .await;
    task.abort();
}

pub(super) async fn kube_runtime_finalizer_helper_round_trip(env: &Env) {
    let cms: Api<ConfigMap> = env.api();
    cms.create(&PostParams::default(), &cm("guarded", &[])).await.unwrap();
    let run = |seen: Arc<Mutex<Vec<&'static str>>>| {
        let cms = cms.clone();
        async move {
            let obj = Arc::new(cms.get("guarded").await.unwrap());
            finalizer(&cms, "ferrolb.io/cleanup", obj, |ev| async move {
                seen.lock().unwrap().push(match ev {
                    Fin::Apply(_) => "apply",
                    Fin::Cleanup(_) => "cleanup",
                });
                Ok::<_, NeverFails>(Action::await_change())
            })
            .await
            .unwrap();
        }
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    run(seen.clone()).await; // adds the finalizer (JSON patch with a `test` op)
    assert_eq!(cms.get("guarded").await.unwrap().metadata.finalizers.unwrap(), vec!["ferrolb.io/cleanup"]);
    run(seen.clone()).await; // reconciles
    cms.delete("guarded", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("guarded").await.unwrap().is_some(), "held by the finalizer");
    run(seen.clone()).await; // cleans up and removes the finalizer
    assert!(cms.get_opt("guarded").await.unwrap().is_none());
    assert_eq!(*seen.lock().unwrap(), vec!["apply", "cleanup"]);

    // A JSON patch whose `test` fails changes nothing.
    cms.create(&PostParams::default(), &cm("other", &[])).await.unwrap();
    let stale: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/data/k", "value": "stale"}, {"op": "remove", "path": "/data"}]),
    )
    .unwrap();
    let err = cms.patch("other", &PatchParams::default(), &Patch::Json::<()>(stale)).await.unwrap_err();
    assert_eq!(api_code(err).0, 422);
    assert!(cms.get("other").await.unwrap().data.is_some());
}
