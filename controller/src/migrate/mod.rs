//! `ferrolb-controller migrate-from-metallb FILE`: converts MetalLB's configuration
//! (metallb.io IPAddressPool, L2Advertisement, BGPAdvertisement, BGPPeer v1beta1 and
//! v1beta2, BFDProfile, Community) and its Service annotations into ferrolb's objects.
//!
//! Nothing is dropped silently: every field that has no ferrolb equivalent comes back
//! as an [`Unconverted`] line naming the object, the field and why. The converted set is
//! run through ferrolb's validator, so problems show before anything is applied.
//!
//! ```
//! let metallb = r#"
//! apiVersion: metallb.io/v1beta1
//! kind: IPAddressPool
//! metadata: {name: lan, namespace: metallb-system}
//! spec: {addresses: [192.0.2.200-192.0.2.250]}
//! "#;
//! let conversion = ferrolb_controller::migrate::convert(metallb, "metallb.yaml").unwrap();
//! assert_eq!(conversion.objects[0].kind(), "IPAddressPool");
//! assert!(conversion.unconverted.is_empty() && conversion.invalid.is_empty());
//! ```

mod fields;
mod kinds;
mod secrets;
mod service;

pub use secrets::PasswordSecret;

use std::collections::BTreeMap;
use std::fmt;

use ferrolb_api::{
    Config, Object, Origin, StreamError, ValidationError, split_documents, validate, write_stream,
};
use serde_json::Value;

use fields::Report;

/// One field of one input object that has no ferrolb equivalent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unconverted {
    /// The MetalLB object, e.g. `BGPPeer metallb-system/router-a`.
    pub object: String,
    /// Field path inside it, e.g. `spec.vrf`.
    pub field: String,
    /// Why it was not converted, and what to do instead.
    pub why: String,
}

impl fmt::Display for Unconverted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.object, self.field, self.why)
    }
}

/// The result of a conversion.
#[derive(Clone, Debug, Default)]
pub struct Conversion {
    /// ferrolb objects, in input order (Communities are folded into advertisements).
    pub objects: Vec<Object>,
    /// Fields that could not be converted, in input order.
    pub unconverted: Vec<Unconverted>,
    /// What ferrolb's validator says about the converted configuration.
    pub invalid: Vec<ValidationError>,
    /// BGP password Secrets to create in ferrolb's namespace (passwords MetalLB had
    /// inline, or in a Secret the input holds). Kept apart from `objects` so that
    /// password material is written only where asked for.
    pub secrets: Vec<PasswordSecret>,
    /// Commands to run before applying `objects`: copy the password Secrets the input
    /// does not hold into ferrolb's namespace, and let the speaker read each Secret a
    /// BGPPeer names. They print no password.
    pub commands: Vec<String>,
}

impl Conversion {
    /// The objects as a YAML stream (`---`-separated documents).
    pub fn to_yaml(&self) -> Result<String, Error> {
        Ok(write_stream(&self.objects)?)
    }

    /// The password Secrets as a YAML stream. It holds the passwords: write it only
    /// where the user asked for it, never to a log.
    pub fn secrets_yaml(&self) -> Result<String, Error> {
        let mut out = String::new();
        for s in &self.secrets {
            let yaml = serde_saphyr::to_string(&s.to_secret())
                .map_err(|e| Error::Secret { name: s.name.clone(), message: e.to_string() })?;
            out.push_str("---\n");
            out.push_str(&yaml);
            if !yaml.ends_with('\n') {
                out.push('\n');
            }
        }
        Ok(out)
    }
}

/// Why the input could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A document is not YAML.
    #[error("{file}: document {document}: invalid YAML: {message}")]
    Yaml {
        /// Input file name.
        file: String,
        /// Document number, from 1.
        document: usize,
        /// Parser message.
        message: String,
    },
    /// Writing a password Secret failed (the message holds no password).
    #[error("Secret {name}: cannot be written: {message}")]
    Secret {
        /// Secret name.
        name: String,
        /// Serializer message.
        message: String,
    },
    /// Writing the result failed.
    #[error(transparent)]
    Write(#[from] StreamError),
}

/// Converts a YAML stream of MetalLB objects (documents separated by `---`, or a
/// `kind: List` as `kubectl get -o yaml` prints). `file` names the input in errors.
pub fn convert(input: &str, file: &str) -> Result<Conversion, Error> {
    let docs = documents(input, file)?;
    let mut report = Report::default();

    // Community aliases first: advertisements anywhere in the file may use them.
    let mut aliases: BTreeMap<String, String> = BTreeMap::new();
    for doc in docs.iter().filter(|d| is_metallb(d) && d["kind"] == "Community") {
        kinds::community_aliases(doc, &mut aliases, &mut report);
    }

    let mut passwords = secrets::Passwords::default();
    for doc in docs.iter().filter(|d| is_secret(d)) {
        passwords.add_input(doc, kinds::METALLB_NAMESPACE);
    }

    let mut objects = Vec::new();
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let converted = if is_metallb(doc) {
            match kind {
                "IPAddressPool" => kinds::pool(doc, &mut report).map(Object::from),
                "L2Advertisement" => kinds::l2_advertisement(doc, &mut report).map(Object::from),
                "BGPAdvertisement" => kinds::bgp_advertisement(doc, &aliases, &mut report).map(Object::from),
                "BGPPeer" => kinds::bgp_peer(doc, &mut passwords, &mut report).map(Object::from),
                "BFDProfile" => kinds::bfd_profile(doc, &mut report).map(Object::from),
                "Community" => None, // folded into BGPAdvertisement.spec.communities
                _ => {
                    report.push(
                        &fields::describe(doc),
                        "kind",
                        "not a MetalLB configuration kind (status objects are written by MetalLB); ignored",
                    );
                    None
                }
            }
        } else if kind == "Service" && doc["apiVersion"] == "v1" {
            service::convert(doc, &mut report).map(Object::from)
        } else if is_secret(doc) {
            None // read by the BGPPeers that name it
        } else if kind == "ConfigMap" && doc["data"].get("config").is_some() {
            report.push(
                &fields::describe(doc),
                "data.config",
                "MetalLB's pre-0.13 ConfigMap format; convert it to metallb.io resources with MetalLB's \
                 configmaptocrs tool first, then run this on the result",
            );
            None
        } else {
            report.push(&fields::describe(doc), "kind", "not a MetalLB object or Service; ignored");
            None
        };
        objects.extend(converted);
    }

    passwords.report_unused(&mut report);

    let config = Config::from_objects(&objects);
    let invalid = validate(&config, Origin::Cluster);
    Ok(Conversion {
        objects,
        unconverted: report.into_lines(),
        invalid,
        secrets: passwords.secrets,
        commands: passwords.commands,
    })
}

fn is_secret(doc: &Value) -> bool {
    doc["kind"] == "Secret" && doc["apiVersion"] == "v1"
}

fn is_metallb(doc: &Value) -> bool {
    doc["apiVersion"].as_str().is_some_and(|v| v.starts_with("metallb.io/"))
}

/// The objects of the stream, with `kind: List` items flattened; documents split and
/// numbered as ferrolb's own streams ([`split_documents`]).
fn documents(input: &str, file: &str) -> Result<Vec<Value>, Error> {
    let mut out = Vec::new();
    for (i, (_, chunk)) in split_documents(input).into_iter().enumerate() {
        let doc: Value = serde_saphyr::from_str(chunk).map_err(|e| Error::Yaml {
            file: file.to_owned(),
            document: i + 1,
            message: e.to_string(),
        })?;
        match doc {
            Value::Null => {}
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                out.extend(m.get("items").and_then(Value::as_array).into_iter().flatten().cloned());
            }
            other => out.push(other),
        }
    }
    Ok(out)
}
