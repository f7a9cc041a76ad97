//! Secrets the speaker reads in Kubernetes mode: the membership key and BGP passwords.
//! Their values never reach a log line, an Event or an error message.

use std::collections::BTreeMap;
use std::time::Duration;

use ferrolb_api::{MEMBERSHIP_SECRET_KEY, MEMBERSHIP_SECRET_NAME, MembershipKey, SecretKeyRef};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::bgp::socket::Password;
use crate::model::ClusterModel;

/// How long one Secret read may take before it counts as failed.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

async fn get(client: &kube::Client, namespace: &str, name: &str) -> Result<Option<Secret>, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match tokio::time::timeout(READ_TIMEOUT, api.get_opt(name)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(kube::Error::Api(s))) if s.code == 403 => Err(format!(
            "the speaker may not read it ({}); grant its ServiceAccount `get` on this Secret (manifests/components)",
            s.message
        )),
        Ok(Err(e)) => Err(crate::speaker::one_line(&e.to_string())),
        Err(_) => Err(format!("no answer from the apiserver within {READ_TIMEOUT:?}")),
    }
}

/// Reads the membership key from Secret `ferrolb-membership`, data key `key`, in `namespace`.
pub async fn membership_key(client: &kube::Client, namespace: &str) -> Result<MembershipKey, String> {
    let object = format!("Secret {namespace}/{MEMBERSHIP_SECRET_NAME}");
    let secret = get(client, namespace, MEMBERSHIP_SECRET_NAME)
        .await
        .map_err(|e| format!("{object}: cannot read the membership key: {e}"))?
        .ok_or_else(|| {
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
    let object = format!("BGPPeer/{peer}: spec.passwordSecret: Secret {}/{}", r.namespace, r.name);
    match get(client, &r.namespace, &r.name).await {
        Ok(Some(s)) => match s.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(b) => match std::str::from_utf8(&b.0) {
                Ok(t) => Ok(Password::new(t.trim())),
                Err(_) => Err(format!("{object}: data.{} is not text; store the password as text", r.key)),
            },
            None => Err(format!("{object}: has no data.{}; add it or fix spec.passwordSecret.key", r.key)),
        },
        Ok(None) => Err(format!("{object} does not exist; create it or fix spec.passwordSecret")),
        Err(e) => Err(format!("{object}: {e}")),
    }
}

/// Reads the TCP MD5 password of every BGPPeer in `refs`, all at once and within
/// [`PASSWORDS_TIMEOUT`]. A peer whose Secret cannot be read keeps its `previous`
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
