//! One ServiceAnnouncement as the speaker writes it: its record, name, labels and owner
//! reference.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_api::{AnnouncementProtocol, ServiceAnnouncement, ServiceAnnouncementSpec, ServiceRef};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest, Sha256};

use crate::model::ServiceKey;

/// Field manager of the speaker's writes, and the Events' reporting controller.
pub const MANAGER: &str = "ferrolb-speaker";
/// Label naming the announcing node on every ServiceAnnouncement.
pub const NODE_LABEL: &str = "ferrolb.io/node";
/// A ServiceAnnouncement's (namespace, name).
pub type ObjectKey = (Arc<str>, Arc<str>);

/// Names (peers or interfaces) as many Services share them: the same list is one
/// allocation however many Services are announced alike ([`Interner`]).
pub type Names = Arc<[Arc<str>]>;

/// One ServiceAnnouncement as far as the writer cares, wanted or as the API holds it:
/// what its spec says beside what the Service, node and name imply. The object is made
/// only to write it: at 10 000 Services the specs held as objects (eight strings each)
/// were the largest part of a speaker's heap (issue #39).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// `spec.protocol`.
    pub protocol: AnnouncementProtocol,
    /// `spec.addresses`.
    pub addresses: Box<[IpAddr]>,
    /// `spec.peers` (BGP) or `spec.interfaces` (L2), the other one empty.
    pub via: Names,
    /// The owning Service's uid (shared with the model's); empty when the object is not
    /// exactly what the speaker writes (its owner reference, or a spec this type cannot
    /// hold), so it is rewritten.
    pub owner: Arc<str>,
}

impl Record {
    /// What the writer keeps of an object read from the API.
    pub(super) fn of(o: ServiceAnnouncement) -> Record {
        let ours = |r: &OwnerReference| *r == owner_reference(&o.spec.service.name, &r.uid);
        let mut owner: Arc<str> = match o.metadata.owner_references.as_deref() {
            Some([r]) if ours(r) => r.uid.as_str().into(),
            _ => "".into(),
        };
        let spec = o.spec;
        // Only the canonical text reads back as the address written.
        let addresses: Vec<IpAddr> = spec
            .addresses
            .iter()
            .filter_map(|a| a.parse().ok().filter(|ip: &IpAddr| ip.to_string() == *a))
            .collect();
        let (via, other) = match spec.protocol {
            AnnouncementProtocol::Bgp => (spec.peers, spec.interfaces),
            AnnouncementProtocol::L2 => (spec.interfaces, spec.peers),
        };
        if addresses.len() != spec.addresses.len() || !other.is_empty() {
            owner = "".into();
        }
        Record {
            protocol: spec.protocol,
            addresses: addresses.into(),
            via: via.into_iter().map(Arc::from).collect(),
            owner,
        }
    }

    /// The object to write for Service `svc`, named `name`, for `node`.
    pub fn object(&self, svc: &ServiceKey, name: &str, node: &str) -> ServiceAnnouncement {
        let via: Vec<String> = self.via.iter().map(|n| n.to_string()).collect();
        let (peers, interfaces) = match self.protocol {
            AnnouncementProtocol::Bgp => (via, Vec::new()),
            AnnouncementProtocol::L2 => (Vec::new(), via),
        };
        ServiceAnnouncement {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(svc.namespace.to_string()),
                labels: Some(BTreeMap::from([
                    (NODE_LABEL.to_owned(), label_value(node)),
                    ("app.kubernetes.io/managed-by".to_owned(), MANAGER.to_owned()),
                ])),
                owner_references: Some(vec![owner_reference(&svc.name, &self.owner)]),
                ..ObjectMeta::default()
            },
            spec: ServiceAnnouncementSpec {
                node: node.to_owned(),
                service: ServiceRef { namespace: svc.namespace.to_string(), name: svc.name.to_string() },
                protocol: self.protocol,
                addresses: self.addresses.iter().map(IpAddr::to_string).collect(),
                interfaces,
                peers,
            },
            status: None,
        }
    }
}

/// Shares equal [`Names`] lists: a speaker announces its Services to the same few peers
/// or on the same few interfaces.
#[derive(Debug, Default)]
pub struct Interner(Vec<Names>);

impl Interner {
    /// The shared list holding `names`, in this order.
    pub fn names<S: AsRef<str>>(&mut self, names: &[S]) -> Names {
        let same =
            |n: &&Names| n.len() == names.len() && n.iter().zip(names).all(|(a, b)| **a == *b.as_ref());
        if let Some(n) = self.0.iter().find(same) {
            return n.clone();
        }
        // Lists nobody holds any more go first, so the interner stays as small as the
        // combinations in use.
        self.0.retain(|n| Arc::strong_count(n) > 1);
        let n: Names = names.iter().map(|s| Arc::from(s.as_ref())).collect();
        self.0.push(n.clone());
        n
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
