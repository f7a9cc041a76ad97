//! The speakers' membership key: the Secret `ferrolb-membership`, created when absent.

use std::collections::BTreeMap;

pub use ferrolb_api::MEMBERSHIP_SECRET_KEY;
use ferrolb_api::MEMBERSHIP_SECRET_NAME;
use ferrolb_proto::membership::KEY_MIN_LEN as MEMBERSHIP_KEY_MIN_LEN;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use crate::error::{CallError, Error};
use crate::fence::{CALL_TIMEOUT, Fence};

/// A fresh random key: 32 random bytes as 64 hex characters.
fn random_key() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    let key: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    debug_assert!(key.len() >= MEMBERSHIP_KEY_MIN_LEN);
    Ok(key)
}

/// Creates the Secret when absent; never replaces an existing one (the user may have set
/// their own key). Returns whether it created it. The key is never logged. Both calls go
/// through `fence` (the leader's work) with [`CALL_TIMEOUT`].
pub async fn ensure_secret(client: &kube::Client, fence: &Fence, namespace: &str) -> Result<bool, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let object = format!("Secret {namespace}/{MEMBERSHIP_SECRET_NAME}");
    let existing = fence
        .call(CALL_TIMEOUT, api.get_opt(MEMBERSHIP_SECRET_NAME))
        .await
        .map_err(|source| Error::Read { what: object.clone(), source })?;
    if existing.is_some() {
        return Ok(false);
    }
    let key = random_key().map_err(|e| Error::Write {
        what: "data (no randomness available)",
        object: object.clone(),
        source: CallError::Api(kube::Error::Service(Box::new(std::io::Error::other(e.to_string())))),
    })?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(MEMBERSHIP_SECRET_NAME.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([("app.kubernetes.io/part-of".to_owned(), "ferrolb".to_owned())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(MEMBERSHIP_SECRET_KEY.to_owned(), ByteString(key.into_bytes()))])),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    match fence.call(CALL_TIMEOUT, api.create(&PostParams::default(), &secret)).await {
        Ok(_) => Ok(true),
        // Another replica (or the user) created it meanwhile: theirs stays.
        Err(e) if e.status() == Some(409) => Ok(false),
        Err(source) => Err(Error::Write { what: "the whole object", object, source }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_are_long_and_differ() {
        let a = random_key().unwrap();
        let b = random_key().unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        assert!(ferrolb_proto::membership::MembershipKey::parse(&a).is_ok());
    }
}
