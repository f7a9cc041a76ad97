//! Objects and waits the bodies share.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ListParams, WatchEvent};
use kube::{Api, Resource, ResourceExt};

/// How long a body waits for something a real cluster does asynchronously.
pub(super) const PATIENCE: Duration = Duration::from_secs(30);

/// A ConfigMap with these labels and one data entry.
pub(super) fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            ..Default::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    }
}

/// A LoadBalancer Service on port 80.
pub(super) fn service(name: &str) -> Service {
    Service {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort { port: 80, ..Default::default() }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The object's resourceVersion as a number (both servers use etcd-style integers).
pub(super) fn rv<K: Resource>(k: &K) -> u64 {
    k.meta().resource_version.as_deref().unwrap().parse().unwrap()
}

/// The code and reason of an API error.
pub(super) fn api_code(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The names a list returns, in order.
pub(super) async fn names<K>(api: &Api<K>, lp: &ListParams) -> Vec<String>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(lp).await.unwrap().items.iter().map(|o| o.name_any()).collect()
}

/// The next watch event, within 10 s.
pub(super) async fn next_event<K>(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("watch event in time")
        .unwrap()
        .unwrap()
}

/// The next watch event that is not a bookmark.
pub(super) async fn next_change<K>(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    loop {
        match next_event(stream).await {
            WatchEvent::Bookmark(_) => continue,
            other => return other,
        }
    }
}
