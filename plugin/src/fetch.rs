//! The only I/O: read-only lists from the apiserver into a [`Snapshot`].

use anyhow::Context as _;
use ferrolb_api::{BgpPeer, IpAddressPool, ServiceAnnouncement};
use k8s_openapi::api::core::v1::{Event, Node, Pod, Service};
use kube::api::{Api, ListParams};
use kube::core::NamespaceResourceScope;
use kube::{Resource, ResourceExt as _};
use serde::de::DeserializeOwned;

use crate::snapshot::Snapshot;

/// Which namespaces the namespaced lists cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One namespace.
    Namespace(String),
    /// `-A`.
    All,
}

async fn list<K>(api: Api<K>, where_: &str) -> anyhow::Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let dt = K::DynamicType::default();
    let group = K::group(&dt);
    let what =
        if group.is_empty() { K::plural(&dt).into_owned() } else { format!("{}.{group}", K::plural(&dt)) };
    let list = api.list(&ListParams::default()).await.with_context(|| {
        format!(
            "cannot list {what}{where_} (the ferrolb-viewer ClusterRole grants every read this plugin makes)"
        )
    })?;
    Ok(list.items)
}

/// A namespaced kind in `scope`.
async fn scoped<K>(client: &kube::Client, scope: &Scope) -> anyhow::Result<Vec<K>>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    match scope {
        Scope::Namespace(ns) => {
            list(Api::namespaced(client.clone(), ns), &format!(" in namespace {ns}")).await
        }
        Scope::All => list(Api::all(client.clone()), "").await,
    }
}

/// A cluster-scoped kind (or a namespaced one across all namespaces).
async fn every<K>(client: &kube::Client) -> anyhow::Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    list(Api::all(client.clone()), "").await
}

/// Services, their ServiceAnnouncements, Events and Pods in `scope`, and every pool.
pub async fn for_services(client: &kube::Client, scope: &Scope) -> anyhow::Result<Snapshot> {
    Ok(Snapshot {
        services: scoped::<Service>(client, scope).await?,
        announcements: scoped::<ServiceAnnouncement>(client, scope).await?,
        pools: every::<IpAddressPool>(client).await?,
        pods: scoped::<Pod>(client, scope).await?,
        events: scoped::<Event>(client, scope).await?,
        ..Snapshot::default()
    })
}

/// Every pool.
pub async fn for_pools(client: &kube::Client) -> anyhow::Result<Snapshot> {
    Ok(Snapshot { pools: every::<IpAddressPool>(client).await?, ..Snapshot::default() })
}

/// Every BGPPeer, Node and ServiceAnnouncement.
pub async fn for_peers(client: &kube::Client) -> anyhow::Result<Snapshot> {
    let mut announcements = every::<ServiceAnnouncement>(client).await?;
    announcements.sort_by_key(|a| (a.namespace(), a.name_any()));
    Ok(Snapshot {
        peers: every::<BgpPeer>(client).await?,
        nodes: every::<Node>(client).await?,
        announcements,
        ..Snapshot::default()
    })
}
