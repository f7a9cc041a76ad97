//! One document to one typed [`Object`]: the kind by `apiVersion` and `kind`, field
//! paths in errors, and unknown fields (refused for ferrolb kinds, warned for core ones).

use serde_json::Value;

use super::object::Object;
use super::{Source, StreamError};
use crate::crd::API_VERSION;

pub(super) fn object_error(file: &str, source: Source, path: &str, message: &str) -> StreamError {
    StreamError::Object {
        file: file.to_owned(),
        at: source,
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

pub(crate) fn decode_into(
    file: &str,
    source: Source,
    doc: Value,
    warnings: &mut Vec<String>,
    emit: &mut impl FnMut(Source, Object),
) -> Result<(), StreamError> {
    if !doc.is_object() {
        return Err(object_error(
            file,
            source,
            ".",
            "a document must be a Kubernetes object (a mapping with apiVersion and kind)",
        ));
    }
    let field = |name: &str| doc.get(name).and_then(Value::as_str).map(str::to_owned);
    let Some(api_version) = field("apiVersion") else {
        return Err(object_error(file, source, "apiVersion", "missing apiVersion"));
    };
    let Some(kind) = field("kind") else {
        return Err(object_error(file, source, "kind", "missing kind"));
    };
    let Some(kind_tag) = Kind::of(&api_version, &kind) else {
        let name = doc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        warnings.push(format!(
            "{file}: {source}: ignoring {api_version} {kind} {name:?}: not a kind ferrolb reads"
        ));
        return Ok(());
    };
    let mut unknown = Vec::new();
    let object = decode(file, source, &doc, kind_tag, &mut unknown)?;
    if let Some(path) = unknown.first() {
        let name = object.name();
        if matches!(object, Object::Node(_) | Object::Service(_) | Object::EndpointSlice(_)) {
            // kubectl output from a newer Kubernetes may hold fields our types lack.
            warnings.push(format!(
                "{file}: {source}: {kind} {name:?}: ignoring unknown fields {}",
                unknown.join(", ")
            ));
        } else {
            // A misspelt ferrolb field would silently take its default: refuse, like
            // `kubectl apply --validate=strict`.
            return Err(StreamError::Object {
                file: file.to_owned(),
                at: source,
                path: path.clone(),
                message: format!("unknown field in {kind} {name:?}; check the spelling against the API"),
            });
        }
    }
    emit(source, object);
    Ok(())
}

/// Rewrites serde_ignored's `status.?.addresses.?.0.typo` as `status.addresses[0].typo`.
fn field_path(ignored: &str) -> String {
    let mut out = String::new();
    for seg in ignored.split('.').filter(|s| *s != "?") {
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(seg);
        }
    }
    out
}

/// The kinds a stream may hold, by `apiVersion` and `kind`.
#[derive(Clone, Copy)]
enum Kind {
    IpAddressPool,
    BgpPeer,
    BgpAdvertisement,
    L2Advertisement,
    BfdProfile,
    ControlPlaneVip,
    ServiceAnnouncement,
    Node,
    Service,
    EndpointSlice,
}

impl Kind {
    fn of(api_version: &str, kind: &str) -> Option<Kind> {
        Some(match (api_version, kind) {
            (API_VERSION, "IPAddressPool") => Kind::IpAddressPool,
            (API_VERSION, "BGPPeer") => Kind::BgpPeer,
            (API_VERSION, "BGPAdvertisement") => Kind::BgpAdvertisement,
            (API_VERSION, "L2Advertisement") => Kind::L2Advertisement,
            (API_VERSION, "BFDProfile") => Kind::BfdProfile,
            (API_VERSION, "ControlPlaneVIP") => Kind::ControlPlaneVip,
            (API_VERSION, "ServiceAnnouncement") => Kind::ServiceAnnouncement,
            ("v1", "Node") => Kind::Node,
            ("v1", "Service") => Kind::Service,
            ("discovery.k8s.io/v1", "EndpointSlice") => Kind::EndpointSlice,
            _ => return None,
        })
    }

    /// The object of this kind that `de` holds.
    fn decode<'de, D: serde::Deserializer<'de>>(self, de: D) -> Result<Object, D::Error> {
        use serde::Deserialize;
        fn boxed<'de, T: Deserialize<'de>, D: serde::Deserializer<'de>>(de: D) -> Result<Box<T>, D::Error> {
            Box::<T>::deserialize(de)
        }
        Ok(match self {
            Kind::IpAddressPool => Object::IpAddressPool(boxed(de)?),
            Kind::BgpPeer => Object::BgpPeer(boxed(de)?),
            Kind::BgpAdvertisement => Object::BgpAdvertisement(boxed(de)?),
            Kind::L2Advertisement => Object::L2Advertisement(boxed(de)?),
            Kind::BfdProfile => Object::BfdProfile(boxed(de)?),
            Kind::ControlPlaneVip => Object::ControlPlaneVip(boxed(de)?),
            Kind::ServiceAnnouncement => Object::ServiceAnnouncement(boxed(de)?),
            Kind::Node => Object::Node(boxed(de)?),
            Kind::Service => Object::Service(boxed(de)?),
            Kind::EndpointSlice => Object::EndpointSlice(boxed(de)?),
        })
    }
}

/// Collects the paths of the fields serde_ignored reports, as users spell them.
fn collect_unknown(unknown: &mut Vec<String>) -> impl FnMut(serde_ignored::Path<'_>) + '_ {
    |path| {
        let path = field_path(&path.to_string());
        // Some types read apiVersion and kind through their own means and skip the fields.
        if path != "apiVersion" && path != "kind" {
            unknown.push(path);
        }
    }
}

/// Decodes one object, collecting the paths of fields the type does not have.
fn decode(
    file: &str,
    source: Source,
    doc: &Value,
    kind: Kind,
    unknown: &mut Vec<String>,
) -> Result<Object, StreamError> {
    // The happy path reads without tracking where it is; only a failure reads the
    // document again to name the field.
    let result = kind.decode(serde_ignored::Deserializer::new(doc, &mut collect_unknown(unknown)));
    result.or_else(|_| {
        let mut track = serde_path_to_error::Track::new();
        let de = serde_path_to_error::Deserializer::new(doc, &mut track);
        kind.decode(de).map_err(|e| StreamError::Object {
            file: file.to_owned(),
            at: source,
            path: track.path().to_string(),
            message: e.to_string(),
        })
    })
}

/// The object a document read by the fast reader holds, decoded straight from it, if it
/// is one object of a kind ferrolb reads that decodes without an error and without an
/// unknown field: the common case of a big file. Anything else (a List, an error, an
/// unknown field, a kind ferrolb ignores) is `None` and goes the general way, through a
/// `Value`, which decodes the same object and words every error and warning.
pub(crate) fn decode_fast(node: &crate::fast_yaml::Node<'_>) -> Option<Object> {
    let kind = Kind::of(node.str_field("apiVersion")?, node.str_field("kind")?)?;
    let mut unknown = Vec::new();
    let object =
        kind.decode(serde_ignored::Deserializer::new(node, &mut collect_unknown(&mut unknown))).ok()?;
    unknown.is_empty().then_some(object)
}
