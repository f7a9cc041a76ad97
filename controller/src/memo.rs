//! What the controller remembers of its own writes, shared through the
//! [`crate::context::Context`]: the MetalLB-spelling notice each Service got
//! ([`Notices`], published by [`crate::metallb_notice`]) and the Service versions a later
//! write of ours superseded ([`Superseded`], written by [`crate::service_write`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use crate::ipam::ServiceKey;
use crate::model::CachedService;

/// The notice each Service got last: its uid and the note.
#[derive(Debug, Default)]
pub struct Notices(Mutex<BTreeMap<ServiceKey, (String, String)>>);

impl Notices {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<ServiceKey, (String, String)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers the note for this Service; whether it differs from the last one.
    pub(crate) fn remember(&self, key: &ServiceKey, uid: &str, note: &str) -> bool {
        let mut map = self.lock();
        if map.get(key).is_some_and(|(u, n)| u == uid && n == note) {
            return false;
        }
        map.insert(key.clone(), (uid.to_owned(), note.to_owned()));
        true
    }

    /// Forgets a Service (deleted or no longer served).
    pub fn forget(&self, key: &ServiceKey) {
        self.lock().remove(key);
    }
}

/// Versions of Services that a later write of ours superseded: the ingress write's, once
/// the annotation write followed. The watch delivers them all, in order; a reconcile of
/// such a version would decide from an object we know is already old, and its write would
/// be refused (409) for nothing. It is skipped instead: the newer version's event queues
/// the Service again. An entry lives until the watch has caught up with our writes.
#[derive(Debug, Default)]
pub struct Superseded(Mutex<HashMap<ServiceKey, Vec<Box<str>>>>);

impl Superseded {
    fn lock(&self) -> MutexGuard<'_, HashMap<ServiceKey, Vec<Box<str>>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set(&self, key: &ServiceKey, versions: Vec<Box<str>>) {
        let mut map = self.lock();
        if versions.is_empty() {
            map.remove(key);
        } else {
            map.insert(key.clone(), versions);
        }
    }

    /// Whether `svc` is a version a later write of ours superseded. Any other version
    /// means the watch has caught up (or someone else wrote): the entry goes.
    pub fn is_superseded(&self, svc: &CachedService) -> bool {
        let mut map = self.lock();
        let Some(versions) = map.get(&svc.key) else { return false };
        let ours = svc.resource_version.as_deref().is_some_and(|v| versions.iter().any(|o| **o == *v));
        if !ours {
            map.remove(&svc.key);
        }
        ours
    }

    /// Forgets a Service (deleted or released).
    pub fn forget(&self, key: &ServiceKey) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(version: &str) -> CachedService {
        CachedService {
            key: ServiceKey::new("default", "s"),
            resource_version: Some(version.into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_versions_our_later_write_superseded_are_skipped_until_the_watch_caught_up() {
        let s = Superseded::default();
        assert!(!s.is_superseded(&at("5")), "nothing written");
        // Status write made 6, the annotation write 7: 6 is superseded, 7 is current.
        s.set(&at("5").key, vec!["6".into()]);
        assert!(s.is_superseded(&at("6")));
        assert!(s.is_superseded(&at("6")), "until the watch caught up");
        assert!(!s.is_superseded(&at("7")));
        assert!(!s.is_superseded(&at("6")), "caught up: forgotten");
        // Someone else's version: decided from as usual.
        s.set(&at("5").key, vec!["8".into()]);
        assert!(!s.is_superseded(&at("9")));
        s.set(&at("5").key, vec!["10".into()]);
        s.forget(&at("5").key);
        assert!(!s.is_superseded(&at("10")));
    }
}
