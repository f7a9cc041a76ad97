//! Secrets the speaker reads in Kubernetes mode: the membership key and BGP passwords.
//! Their values never reach a log line, an Event or an error message.
//!
//! Each is read once when first needed (a `get`), then watched by name ([`SecretWatch`]:
//! `list` and `watch` with the field selector `metadata.name`, which RBAC authorizes
//! against `resourceNames`), so a rotated key or password is applied without a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::{MEMBERSHIP_SECRET_KEY, MEMBERSHIP_SECRET_NAME, SecretKeyRef};
use ferrolb_proto::membership::MembershipKey;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::model::ClusterModel;
use ferrolb_proto::bgp::socket::Password;

/// How long one Secret read may take before it counts as failed.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

async fn get(client: &kube::Client, namespace: &str, name: &str) -> Result<Option<Secret>, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match tokio::time::timeout(READ_TIMEOUT, api.get_opt(name)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(kube::Error::Api(s))) if s.code == 403 => Err(format!(
            "the speaker may not read it ({}); grant its ServiceAccount `get`, `list` and `watch` on this Secret \
             (manifests/components)",
            s.message
        )),
        Ok(Err(e)) => Err(crate::error::one_line(&e.to_string())),
        Err(_) => Err(format!("no answer from the apiserver within {READ_TIMEOUT:?}")),
    }
}

/// Reads the membership key from Secret `ferrolb-membership`, data key `key`, in `namespace`.
pub async fn membership_key(client: &kube::Client, namespace: &str) -> Result<MembershipKey, String> {
    let object = format!("Secret {namespace}/{MEMBERSHIP_SECRET_NAME}");
    let secret = get(client, namespace, MEMBERSHIP_SECRET_NAME)
        .await
        .map_err(|e| format!("{object}: cannot read the membership key: {e}"))?;
    membership_key_in(namespace, secret.as_ref())
}

/// The membership key in Secret `ferrolb-membership` of `namespace` (None: it does not exist).
pub fn membership_key_in(namespace: &str, secret: Option<&Secret>) -> Result<MembershipKey, String> {
    let object = format!("Secret {namespace}/{MEMBERSHIP_SECRET_NAME}");
    let secret = secret.ok_or_else(|| {
            format!(
                "{object} does not exist: L2 announcements need the membership key; ferrolb-controller creates it \
                 (is it running in {namespace}?), or pass --membership-key-file FILE, or --namespace if the speaker \
                 runs elsewhere"
            )
        })?;
    let bytes = secret.data.as_ref().and_then(|d| d.get(MEMBERSHIP_SECRET_KEY)).ok_or_else(|| {
        format!("{object}: data.{MEMBERSHIP_SECRET_KEY} is missing; put the membership key (at least 32 characters) there")
    })?;
    let text = std::str::from_utf8(&bytes.0)
        .map_err(|_| format!("{object}: data.{MEMBERSHIP_SECRET_KEY} is not text; write the key as text"))?;
    MembershipKey::parse(text)
        .map_err(|e| format!("{object}: data.{MEMBERSHIP_SECRET_KEY}: {e}; replace it with a longer key"))
}

/// How long reading every BGP password may take in all: the event loop waits for it.
const PASSWORDS_TIMEOUT: Duration = Duration::from_secs(3);

/// Which Secret each BGPPeer's password is in (`spec.passwordSecret`).
pub fn password_refs(model: &ClusterModel) -> BTreeMap<String, SecretKeyRef> {
    model.peers.iter().filter_map(|(n, p)| Some((n.clone(), p.spec.password_secret.clone()?))).collect()
}

async fn password(client: &kube::Client, peer: &str, r: &SecretKeyRef) -> Result<Password, String> {
    match get(client, &r.namespace, &r.name).await {
        Ok(s) => password_in(peer, r, s.as_ref()),
        Err(e) => Err(format!("BGPPeer/{peer}: spec.passwordSecret: Secret {}/{}: {e}", r.namespace, r.name)),
    }
}

/// BGPPeer `peer`'s password in `secret`, the Secret `r` names (None: it does not exist).
pub fn password_in(peer: &str, r: &SecretKeyRef, secret: Option<&Secret>) -> Result<Password, String> {
    let object = format!("BGPPeer/{peer}: spec.passwordSecret: Secret {}/{}", r.namespace, r.name);
    match secret {
        Some(s) => match s.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(b) => match std::str::from_utf8(&b.0) {
                Ok(t) => Ok(Password::new(t.trim())),
                Err(_) => Err(format!("{object}: data.{} is not text; store the password as text", r.key)),
            },
            None => Err(format!("{object}: has no data.{}; add it or fix spec.passwordSecret.key", r.key)),
        },
        None => Err(format!("{object} does not exist; create it or fix spec.passwordSecret")),
    }
}

/// Reads the TCP MD5 password of every BGPPeer in `refs`, all at once and within
/// `PASSWORDS_TIMEOUT`. A peer whose Secret cannot be read keeps its `previous`
/// password (if any) and is reported, one line each.
pub async fn bgp_passwords(
    client: &kube::Client,
    refs: &BTreeMap<String, SecretKeyRef>,
    previous: &BTreeMap<String, Password>,
) -> (BTreeMap<String, Password>, Vec<String>) {
    let reads = refs.iter().map(|(peer, r)| async move { (peer.clone(), password(client, peer, r).await) });
    let results = match tokio::time::timeout(PASSWORDS_TIMEOUT, futures::future::join_all(reads)).await {
        Ok(r) => r,
        Err(_) => refs
            .keys()
            .map(|p| (p.clone(), Err(format!("BGPPeer/{p}: spec.passwordSecret: no answer from the apiserver within {PASSWORDS_TIMEOUT:?}"))))
            .collect(),
    };
    let mut out = BTreeMap::new();
    let mut errors = Vec::new();
    for (peer, result) in results {
        match result {
            Ok(pw) => {
                out.insert(peer, pw);
            }
            Err(e) => {
                if let Some(old) = previous.get(&peer) {
                    out.insert(peer, old.clone());
                }
                errors.push(e);
            }
        }
    }
    (out, errors)
}

/// A Secret by (namespace, name).
pub type SecretName = (String, String);

/// The watched Secrets as last listed or changed: `None` when one does not exist. A Secret
/// not listed yet has no entry.
pub type Watched = BTreeMap<SecretName, Option<Secret>>;

/// Watches Secrets one by one, by name, and publishes their current content.
pub struct SecretWatch {
    client: kube::Client,
    tasks: BTreeMap<SecretName, tokio::task::JoinHandle<()>>,
    current: Arc<watch::Sender<Watched>>,
}

impl std::fmt::Debug for SecretWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only, never the data.
        f.debug_struct("SecretWatch").field("watching", &self.tasks.keys().collect::<Vec<_>>()).finish()
    }
}

impl SecretWatch {
    /// Watches nothing yet.
    pub fn new(client: kube::Client) -> Self {
        SecretWatch { client, tasks: BTreeMap::new(), current: Arc::new(watch::channel(Watched::new()).0) }
    }

    /// Notified on every change of a watched Secret.
    pub fn subscribe(&self) -> watch::Receiver<Watched> {
        self.current.subscribe()
    }

    /// Watches exactly `wanted`: starts the new ones, stops (and forgets) the others.
    pub fn set(&mut self, wanted: &BTreeSet<SecretName>) {
        let gone: Vec<SecretName> = self.tasks.keys().filter(|k| !wanted.contains(*k)).cloned().collect();
        for k in gone {
            if let Some(t) = self.tasks.remove(&k) {
                t.abort();
            }
            self.current.send_if_modified(|w| w.remove(&k).is_some());
        }
        for k in wanted.iter().filter(|k| !self.tasks.contains_key(*k)).cloned().collect::<Vec<_>>() {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &k.0);
            tracing::debug!(secret = %format!("{}/{}", k.0, k.1), "watching the Secret for changes");
            self.tasks.insert(k.clone(), tokio::spawn(watch_one(api, k, self.current.clone())));
        }
    }
}

impl Drop for SecretWatch {
    fn drop(&mut self) {
        for t in self.tasks.values() {
            t.abort();
        }
    }
}

/// Follows one Secret (a list and watch narrowed to its name) into `out`.
async fn watch_one(api: Api<Secret>, key: SecretName, out: Arc<watch::Sender<Watched>>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={}", key.1));
    let stream = watcher::watcher(api, config).backoff(super::WatchBackoff::default());
    let mut stream = std::pin::pin!(stream);
    let object = format!("Secret {}/{}", key.0, key.1);
    let mut listing: Option<Secret> = None;
    let mut failing = false;
    while let Some(ev) = stream.next().await {
        let value = match ev {
            Ok(Event::Init) => {
                listing = None;
                continue;
            }
            Ok(Event::InitApply(s)) => {
                listing = Some(s);
                continue;
            }
            Ok(Event::InitDone) => listing.take(),
            Ok(Event::Apply(s)) => Some(s),
            Ok(Event::Delete(_)) => None,
            Err(e) => {
                if !failing {
                    let error = crate::error::one_line(&e.to_string());
                    tracing::warn!(%error, "{object}: watch failed; its last content stays in force, retrying with back-off (the speaker needs `list` and `watch` on it)");
                }
                failing = true;
                continue;
            }
        };
        if failing {
            tracing::info!("{object}: watch recovered");
            failing = false;
        }
        out.send_if_modified(|w| {
            if w.get(&key) == Some(&value) {
                return false;
            }
            w.insert(key.clone(), value);
            true
        });
    }
}
