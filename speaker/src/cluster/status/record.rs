//! One ServiceAnnouncement as the speaker writes it: its record, name, labels and owner
//! reference.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrolb_api::{AnnouncementProtocol, ServiceAnnouncement, ServiceAnnouncementSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest, Sha256};

use crate::model::ServiceKey;

/// Field manager of the speaker's writes, and the Events' reporting controller.
pub const MANAGER: &str = "ferrolb-speaker";
/// Label naming the announcing node on every ServiceAnnouncement.
pub const NODE_LABEL: &str = "ferrolb.io/node";
/// A ServiceAnnouncement's (namespace, name).
pub type ObjectKey = (Arc<str>, Arc<str>);

/// One ServiceAnnouncement as far as the writer cares, wanted or as the API holds it. The
/// object is made only to write it: whole objects (an API's, managedFields and all) cost
/// about 4 KB per Service in the writer and as much again in the desired set, the
/// largest part of a speaker's heap at 1 000 Services; the spec is shared by both.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The spec.
    pub spec: Arc<ServiceAnnouncementSpec>,
    /// The owning Service's uid (shared with the model's); empty when the object's owner
    /// reference is not exactly the one the speaker writes (so it is rewritten).
    pub owner: Arc<str>,
}

impl Record {
    /// What the writer keeps of an object read from the API.
    pub(super) fn of(o: ServiceAnnouncement) -> Record {
        let ours = |r: &OwnerReference| *r == owner_reference(&o.spec.service.name, &r.uid);
        let owner = match o.metadata.owner_references.as_deref() {
            Some([r]) if ours(r) => r.uid.as_str().into(),
            _ => "".into(),
        };
        Record { spec: Arc::new(o.spec), owner }
    }

    /// The object to write, named `name` in `namespace`, for `node`.
    pub fn object(&self, namespace: &str, name: &str, node: &str) -> ServiceAnnouncement {
        ServiceAnnouncement {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([
                    (NODE_LABEL.to_owned(), label_value(node)),
                    ("app.kubernetes.io/managed-by".to_owned(), MANAGER.to_owned()),
                ])),
                owner_references: Some(vec![owner_reference(&self.spec.service.name, &self.owner)]),
                ..ObjectMeta::default()
            },
            spec: ServiceAnnouncementSpec::clone(&self.spec),
            status: None,
        }
    }
}

/// The owner reference of a ServiceAnnouncement: its Service, not as controller.
pub(super) fn owner_reference(service: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: service.to_owned(),
        uid: uid.to_owned(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    }
}

pub(super) fn proto_name(p: AnnouncementProtocol) -> &'static str {
    match p {
        AnnouncementProtocol::Bgp => "bgp",
        AnnouncementProtocol::L2 => "l2",
    }
}

/// `<service>-<node>-<protocol>`, or when longer than 63 characters a prefix of it and a
/// hash of the whole, so names stay unique and valid.
pub fn object_name(service: &str, node: &str, protocol: AnnouncementProtocol) -> String {
    let full = format!("{service}-{node}-{}", proto_name(protocol));
    if full.len() <= 63 {
        return full;
    }
    let digest = Sha256::digest(full.as_bytes());
    let hash: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    let mut cut = 63 - hash.len() - 1;
    while !full.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = full[..cut].trim_end_matches(['-', '.']);
    format!("{head}-{hash}")
}

/// A label value (at most 63 characters); long node names are cut, `spec.node` is exact.
pub(super) fn label_value(s: &str) -> String {
    let mut cut = s.len().min(63);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s[..cut].trim_end_matches(['-', '.', '_']).to_owned()
}

/// The Service a ServiceAnnouncement speaks for.
pub(super) fn service_of(spec: &ServiceAnnouncementSpec) -> ServiceKey {
    ServiceKey { namespace: spec.service.namespace.as_str().into(), name: spec.service.name.as_str().into() }
}
