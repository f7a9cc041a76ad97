//! BGP passwords: every Secret a converted BGPPeer names lives in ferrolb's namespace,
//! where the speaker may read it, and is either emitted here or named in a copy command.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use ferrolb_api::SecretKeyRef;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::fields::{Report, describe};

/// Namespace the speaker runs in and reads BGP password Secrets from.
pub(super) const FERROLB_NAMESPACE: &str = "ferrolb-system";
/// Key MetalLB reads from a BGP password Secret (type kubernetes.io/basic-auth); the
/// converted BGPPeers name the same key.
pub(super) const PASSWORD_KEY: &str = "password";
/// The Role that lists the Secrets the speaker may read (manifests/components/bgp).
const SPEAKER_ROLE: &str = "ferrolb-speaker-bgp-passwords";

/// A BGP password Secret to create in ferrolb's namespace. Its Debug output hides the
/// password; only [`PasswordSecret::to_secret`] reveals it.
#[derive(Clone, PartialEq, Eq)]
pub struct PasswordSecret {
    /// Secret name in [`PasswordSecret::namespace`].
    pub name: String,
    /// ferrolb's namespace.
    pub namespace: String,
    /// The BGPPeer that names it.
    pub peer: String,
    password: Vec<u8>,
}

impl fmt::Debug for PasswordSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PasswordSecret")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("peer", &self.peer)
            .field("password", &"(hidden)")
            .finish()
    }
}

impl PasswordSecret {
    /// The Kubernetes Secret, password under data key `password`.
    pub fn to_secret(&self) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                labels: Some(BTreeMap::from([("app.kubernetes.io/name".to_owned(), "ferrolb".to_owned())])),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(BTreeMap::from([(PASSWORD_KEY.to_owned(), ByteString(self.password.clone()))])),
            ..Secret::default()
        }
    }
}

/// The Secrets of the input, and what the converted BGPPeers need of them.
#[derive(Default)]
pub(super) struct Passwords {
    /// Input Secrets by (namespace, name); the flag says a BGPPeer used it.
    input: BTreeMap<(String, String), (Value, bool)>,
    pub(super) secrets: Vec<PasswordSecret>,
    pub(super) commands: Vec<String>,
    granted: BTreeSet<String>,
}

impl Passwords {
    pub(super) fn add_input(&mut self, doc: &Value, default_namespace: &str) {
        let ns = doc["metadata"]["namespace"].as_str().unwrap_or(default_namespace).to_owned();
        let name = doc["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        self.input.insert((ns, name), (doc.clone(), false));
    }

    /// The reference for MetalLB's inline `spec.password` of BGPPeer `peer`.
    pub(super) fn inline(&mut self, peer: &str, password: String) -> SecretKeyRef {
        let name = format!("{peer}-bgp-password");
        self.emit(&name, peer, password.into_bytes());
        reference(name)
    }

    /// The reference for MetalLB's `spec.passwordSecret` {namespace, name} of BGPPeer
    /// `peer`: the Secret's copy in ferrolb's namespace, emitted when the input holds
    /// the Secret, else created by a command that copies it.
    pub(super) fn copied(
        &mut self,
        peer: &str,
        namespace: &str,
        name: &str,
        report: &mut Report,
    ) -> SecretKeyRef {
        let password = match self.input.get_mut(&(namespace.to_owned(), name.to_owned())) {
            Some((doc, used)) => {
                *used = true;
                let password = password_of(doc);
                if password.is_none() {
                    report.push(
                        &describe(doc),
                        "data.password",
                        format!("missing, so BGPPeer {peer}'s password is copied from the cluster instead"),
                    );
                }
                password
            }
            None => None,
        };
        match password {
            Some(p) => self.emit(name, peer, p),
            None => {
                if !self.granted.contains(name) && !self.secrets.iter().any(|s| s.name == name) {
                    self.commands.push(format!(
                        "kubectl -n {namespace} get secret {name} -o jsonpath='{{.data.password}}' | base64 -d | \
                         kubectl -n {FERROLB_NAMESPACE} create secret generic {name} \
                         --from-file={PASSWORD_KEY}=/dev/stdin"
                    ));
                    self.grant(name);
                }
            }
        }
        reference(name.to_owned())
    }

    fn emit(&mut self, name: &str, peer: &str, password: Vec<u8>) {
        if self.secrets.iter().any(|s| s.name == name) {
            return;
        }
        self.secrets.push(PasswordSecret {
            name: name.to_owned(),
            namespace: FERROLB_NAMESPACE.to_owned(),
            peer: peer.to_owned(),
            password,
        });
        self.grant(name);
    }

    /// The speaker reads only the Secrets its Role lists by name.
    fn grant(&mut self, name: &str) {
        if self.granted.insert(name.to_owned()) {
            self.commands.push(format!(
                "kubectl -n {FERROLB_NAMESPACE} patch role {SPEAKER_ROLE} --type=json \
                 -p '[{{\"op\":\"add\",\"path\":\"/rules/0/resourceNames/-\",\"value\":\"{name}\"}}]'"
            ));
        }
    }

    /// Input Secrets no BGPPeer named.
    pub(super) fn report_unused(&self, report: &mut Report) {
        for (doc, used) in self.input.values() {
            if !used {
                report.push(&describe(doc), "kind", "no converted BGPPeer names this Secret; ignored");
            }
        }
    }
}

fn reference(name: String) -> SecretKeyRef {
    SecretKeyRef { name, namespace: FERROLB_NAMESPACE.to_owned(), key: PASSWORD_KEY.to_owned() }
}

/// `data.password` (base64, as `kubectl get -o yaml` prints) or `stringData.password`.
fn password_of(doc: &Value) -> Option<Vec<u8>> {
    let secret: Secret = serde_json::from_value(doc.clone()).ok()?;
    let from_data = secret.data.and_then(|mut d| d.remove(PASSWORD_KEY)).map(|b| b.0);
    from_data
        .or_else(|| secret.string_data.and_then(|mut d| d.remove(PASSWORD_KEY)).map(String::into_bytes))
        .filter(|p| !p.is_empty())
}
