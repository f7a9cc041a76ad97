//! The fake apiserver over HTTP: a `kube::Client` built from a kubeconfig (as a real
//! binary builds it) sees the same store, watches and outage controls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use ferrolb_fakeapi::{FakeApiServer, http};

fn cm(name: &str) -> ConfigMap {
    ConfigMap { metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }, ..Default::default() }
}

async fn http_client(fake: &FakeApiServer) -> kube::Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    http::serve(fake, listener);
    let kc = Kubeconfig::from_yaml(&http::kubeconfig(&addr.to_string())).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.unwrap();
    // kube retries 503 up to 15 times with backoff growing to minutes; the test wants
    // to see the first answer.
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn http_clients_share_the_store_and_its_watches() {
    let fake = FakeApiServer::new();
    let remote: Api<ConfigMap> = Api::default_namespaced(http_client(&fake).await);
    let local: Api<ConfigMap> = Api::default_namespaced(fake.new_client());

    let rv = remote.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut stream = remote.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    local.create(&PostParams::default(), &cm("from-local")).await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.next().await {
                Some(Ok(WatchEvent::Bookmark(_))) => continue,
                other => break other,
            }
        }
    })
    .await
    .expect("the HTTP watch sees the in-process create");
    match ev {
        Some(Ok(WatchEvent::Added(o))) => assert_eq!(o.metadata.name.as_deref(), Some("from-local")),
        other => panic!("expected Added, got {other:?}"),
    }

    remote.create(&PostParams::default(), &cm("from-http")).await.unwrap();
    assert!(fake.get_json("v1", "configmaps", Some("default"), "from-http").is_some());
    match remote.create(&PostParams::default(), &cm("from-http")).await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 409),
        other => panic!("expected 409 over HTTP, got {other:?}"),
    }
}

#[tokio::test]
async fn outage_controls_apply_over_http() {
    let fake = FakeApiServer::new();
    let remote: Api<ConfigMap> = Api::default_namespaced(http_client(&fake).await);
    fake.set_unavailable(true);
    match remote.get("x").await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 503),
        other => panic!("expected 503 over HTTP, got {other:?}"),
    }
    fake.set_unavailable(false);
    remote.create(&PostParams::default(), &cm("after")).await.unwrap();
}
