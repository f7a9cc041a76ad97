//! The controller's cache of Services, by [`ServiceKey`].
//!
//! kube's reflector would key each Service by an `ObjectRef` (a 96-byte struct with its
//! own copies of name, namespace, uid and resourceVersion) and keep the object's whole
//! `ObjectMeta`, which nothing reads: with it, a cold start with 100k Services peaked at
//! 192 MiB, without it at 128 MiB (`ferrolb-testbed bench controller-memory`). Here the
//! key is the one the queue and the allocator share, and the value the compact
//! [`CachedService`].
//!
//! The watch task is the only writer. It applies a relist the way kube's reflector does:
//! the listed Services are gathered apart ([`Relist`]) and replace the cache at once when
//! the list is complete, so readers never see a half-listed cache.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube::runtime::watcher::Event;
use tokio::sync::watch;

use crate::ipam::ServiceKey;
use crate::model::{CachedService, WatchedService};

/// Every Service the watch has seen, by key; shared by the watch task (the writer) and
/// the reconciles (readers).
#[derive(Debug)]
pub struct ServiceCache {
    map: RwLock<HashMap<ServiceKey, Arc<CachedService>>>,
    /// True once the first list is complete.
    ready: watch::Sender<bool>,
}

impl Default for ServiceCache {
    fn default() -> Self {
        ServiceCache { map: RwLock::default(), ready: watch::Sender::new(false) }
    }
}

/// A relist in progress: the Services listed so far, which replace the cache when it ends.
#[derive(Debug, Default)]
pub struct Relist(Option<HashMap<ServiceKey, Arc<CachedService>>>);

/// What a watch event changed in the cache.
#[derive(Debug)]
pub enum Change {
    /// This Service was added or changed.
    Applied(ServiceKey),
    /// This Service was deleted.
    Deleted(ServiceKey),
    /// A relist ended: the cache now holds exactly the listed Services.
    Relisted,
    /// Nothing visible to readers yet (a relist in progress).
    None,
}

impl ServiceCache {
    fn read(&self) -> RwLockReadGuard<'_, HashMap<ServiceKey, Arc<CachedService>>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<ServiceKey, Arc<CachedService>>> {
        self.map.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The Service of `key`, when the cache has it.
    pub fn get(&self, key: &ServiceKey) -> Option<Arc<CachedService>> {
        self.read().get(key).cloned()
    }

    /// Every cached Service, in no particular order.
    pub fn state(&self) -> Vec<Arc<CachedService>> {
        self.read().values().cloned().collect()
    }

    /// The keys of every cached Service in `namespace`.
    pub fn keys_in(&self, namespace: &str) -> Vec<ServiceKey> {
        self.read().keys().filter(|k| k.namespace() == namespace).cloned().collect()
    }

    /// How many Services the cache holds.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the cache holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the first list is complete.
    pub async fn wait_until_ready(&self) {
        let mut ready = self.ready.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = ready.wait_for(|r| *r).await;
    }

    /// Applies one watch event; `relist` carries a relist across its events.
    pub fn apply(&self, relist: &mut Relist, event: Event<WatchedService>) -> Change {
        match event {
            Event::Apply(w) => {
                let key = w.service.key.clone();
                self.write().insert(key.clone(), Arc::new(w.service));
                Change::Applied(key)
            }
            Event::Delete(w) => {
                let key = w.service.key;
                self.write().remove(&key);
                Change::Deleted(key)
            }
            Event::Init => {
                relist.0 = Some(HashMap::new());
                Change::None
            }
            Event::InitApply(w) => {
                let listed = relist.0.get_or_insert_default();
                listed.insert(w.service.key.clone(), Arc::new(w.service));
                Change::None
            }
            Event::InitDone => {
                let listed = relist.0.take().unwrap_or_default();
                // The old map is dropped after the lock is released.
                let old = std::mem::replace(&mut *self.write(), listed);
                drop(old);
                self.ready.send_replace(true);
                Change::Relisted
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn svc(name: &str, rv: &str) -> WatchedService {
        WatchedService::from(Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn key(name: &str) -> ServiceKey {
        ServiceKey::new("default", name)
    }

    fn version(cache: &ServiceCache, name: &str) -> Option<String> {
        cache.get(&key(name)).map(|s| s.resource_version.as_deref().unwrap_or_default().to_owned())
    }

    #[test]
    fn a_relist_replaces_the_cache_only_when_it_is_complete() {
        let cache = ServiceCache::default();
        let mut relist = Relist::default();
        assert!(cache.wait_until_ready().now_or_never().is_none(), "not ready before the first list");
        assert!(matches!(cache.apply(&mut relist, Event::Init), Change::None));
        assert!(matches!(cache.apply(&mut relist, Event::InitApply(svc("a", "1"))), Change::None));
        assert!(cache.is_empty(), "a list in progress is not visible");
        assert!(matches!(cache.apply(&mut relist, Event::InitDone), Change::Relisted));
        assert!(cache.wait_until_ready().now_or_never().is_some());
        assert_eq!(version(&cache, "a").as_deref(), Some("1"));

        assert!(
            matches!(cache.apply(&mut relist, Event::Apply(svc("b", "2"))), Change::Applied(k) if k == key("b"))
        );
        assert!(matches!(cache.apply(&mut relist, Event::Apply(svc("a", "3"))), Change::Applied(_)));
        assert_eq!(version(&cache, "a").as_deref(), Some("3"));
        assert_eq!(cache.keys_in("default").len(), 2);
        assert!(cache.keys_in("other").is_empty());

        // A relist after a watch outage: b was deleted meanwhile, c created.
        cache.apply(&mut relist, Event::Init);
        cache.apply(&mut relist, Event::InitApply(svc("a", "4")));
        cache.apply(&mut relist, Event::InitApply(svc("c", "5")));
        assert_eq!(
            version(&cache, "b").as_deref(),
            Some("2"),
            "the old state stays until the list is complete"
        );
        cache.apply(&mut relist, Event::InitDone);
        assert_eq!((version(&cache, "a"), version(&cache, "b")), (Some("4".into()), None));
        assert_eq!(version(&cache, "c").as_deref(), Some("5"));
        assert_eq!(cache.len(), 2);

        assert!(
            matches!(cache.apply(&mut relist, Event::Delete(svc("c", "6"))), Change::Deleted(k) if k == key("c"))
        );
        assert_eq!(cache.len(), 1);
    }
}
