//! What the allocator needs to know about a Service, and when two Services may share an address.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use super::range::Family;

/// A Service's namespace and name, as `namespace/name` in one shared allocation: the
/// allocator keeps several copies of each key (its map, the request, every address's
/// holders), which were two heap strings each. Ordered by namespace, then name. A
/// namespace never contains `/` (it is a DNS label).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ServiceKey(Arc<str>);

impl ServiceKey {
    /// The key `namespace/name`.
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> Self {
        ServiceKey(format!("{}/{}", namespace.as_ref(), name.as_ref()).into())
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        self.0.split_once('/').map_or(&*self.0, |(ns, _)| ns)
    }

    /// The name.
    pub fn name(&self) -> &str {
        self.0.split_once('/').map_or("", |(_, name)| name)
    }
}

impl Ord for ServiceKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.namespace(), self.name()).cmp(&(other.namespace(), other.name()))
    }
}

impl PartialOrd for ServiceKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A Service port protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        })
    }
}

/// `spec.externalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrafficPolicy {
    /// Any node may forward to any endpoint.
    #[default]
    Cluster,
    /// Only nodes with local endpoints serve; sharing then needs identical backends.
    Local,
}

/// `spec.ipFamilyPolicy` with `spec.ipFamilies[0]` as the primary family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyPolicy {
    /// One address of this family.
    SingleStack(Family),
    /// Both families if possible, else whichever is available; primary first.
    PreferDualStack(Family),
    /// One address of each family or nothing; primary first.
    RequireDualStack(Family),
}

impl Default for FamilyPolicy {
    fn default() -> Self {
        FamilyPolicy::SingleStack(Family::V4)
    }
}

impl FamilyPolicy {
    /// The families wanted, primary first.
    pub fn families(self) -> Vec<Family> {
        match self {
            FamilyPolicy::SingleStack(f) => vec![f],
            FamilyPolicy::PreferDualStack(f) | FamilyPolicy::RequireDualStack(f) => {
                vec![f, f.other()]
            }
        }
    }

    /// Whether a set of held families satisfies the policy.
    pub(crate) fn accepts(self, held: &[Family]) -> bool {
        let has = |f: Family| held.contains(&f);
        let distinct = held.len() <= 1 || held[0] != held[1];
        distinct
            && match self {
                FamilyPolicy::SingleStack(f) => held == [f],
                FamilyPolicy::PreferDualStack(_) => !held.is_empty() && held.len() <= 2,
                FamilyPolicy::RequireDualStack(_) => held.len() == 2 && has(Family::V4) && has(Family::V6),
            }
    }
}

/// Everything about a Service that decides which addresses it may hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceRequest {
    /// Namespace and name.
    pub key: ServiceKey,
    /// Labels of the Service's namespace (for `namespaceSelectors`). Shared: every
    /// Service of a namespace holds the one map (a real namespace has at least
    /// `kubernetes.io/metadata.name`, and a map of one costs 544 bytes).
    pub namespace_labels: Arc<BTreeMap<String, String>>,
    /// Labels of the Service (for `serviceSelectors`), shared with the watch cache.
    pub service_labels: Arc<BTreeMap<String, String>>,
    /// Family policy.
    pub families: FamilyPolicy,
    /// `ferrolb.io/loadBalancerIPs` or `spec.loadBalancerIP`, at most one per family.
    pub requested: Vec<IpAddr>,
    /// `ferrolb.io/address-pool`.
    pub pool: Option<String>,
    /// `ferrolb.io/allow-shared-ip`.
    pub sharing_key: Option<String>,
    /// Service ports; two sharers may not use the same (protocol, port).
    pub ports: Vec<(Protocol, u16)>,
    /// `spec.externalTrafficPolicy`.
    pub traffic_policy: TrafficPolicy,
    /// Identity of the selected backends (e.g. the canonical pod selector).
    pub backend_key: Option<String>,
    /// Creation time (any monotonic unit, e.g. Unix seconds); older wins conflicts.
    pub created: i64,
}

impl ServiceRequest {
    /// A single-stack IPv4 request with no annotations, created at time 0.
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> Self {
        ServiceRequest { key: ServiceKey::new(namespace, name), ..ServiceRequest::default() }
    }

    /// Why `self` and `other` may not share one address, or `None` if they may.
    pub fn share_refusal(&self, other: &ServiceRequest) -> Option<ShareRefusal> {
        match (&self.sharing_key, &other.sharing_key) {
            (Some(a), Some(b)) if a == b => {}
            (Some(_), Some(_)) => return Some(ShareRefusal::KeysDiffer),
            _ => return Some(ShareRefusal::NotShareable),
        }
        if let Some(&(protocol, port)) = self.ports.iter().find(|p| other.ports.contains(p)) {
            return Some(ShareRefusal::PortClash { protocol, port });
        }
        let local =
            self.traffic_policy == TrafficPolicy::Local || other.traffic_policy == TrafficPolicy::Local;
        if local && (self.backend_key.is_none() || self.backend_key != other.backend_key) {
            return Some(ShareRefusal::BackendsDiffer);
        }
        None
    }

    /// Conflict order: older first, then namespace/name.
    pub(crate) fn seniority(&self) -> (i64, &ServiceKey) {
        (self.created, &self.key)
    }

    /// The fields that decide *where* a Service's addresses come from; when they are
    /// unchanged an orphaned address is kept (see docs/ipam.md).
    pub(crate) fn placement_fields(&self) -> (&[IpAddr], &Option<String>, FamilyPolicy) {
        (&self.requested, &self.pool, self.families)
    }
}

/// Why two Services may not share an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShareRefusal {
    /// At least one of them has no `ferrolb.io/allow-shared-ip` annotation.
    #[error("both services need the same ferrolb.io/allow-shared-ip key to share an address")]
    NotShareable,
    /// Both have a sharing key, but not the same one.
    #[error("sharing keys differ")]
    KeysDiffer,
    /// Both use the same protocol and port.
    #[error("both use port {protocol}/{port}")]
    PortClash {
        /// The protocol.
        protocol: Protocol,
        /// The port.
        port: u16,
    },
    /// One has `externalTrafficPolicy: Local` and they select different backends.
    #[error("externalTrafficPolicy is Local and the services select different backends")]
    BackendsDiffer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_its_namespace_and_name_and_sorts_by_them() {
        let k = ServiceKey::new("team-a", "web");
        assert_eq!((k.namespace(), k.name(), k.to_string().as_str()), ("team-a", "web", "team-a/web"));
        let copy = k.clone();
        assert!(Arc::ptr_eq(&k.0, &copy.0), "a copy shares the text");
        // By namespace first: as text, "a-b/y" would sort before "a/x" ('-' < '/').
        let mut keys = [ServiceKey::new("a-b", "y"), ServiceKey::new("a", "x"), ServiceKey::new("a", "w")];
        keys.sort();
        let sorted: Vec<String> = keys.iter().map(ToString::to_string).collect();
        assert_eq!(sorted, ["a/w", "a/x", "a-b/y"]);
        assert_eq!((ServiceKey::default().namespace(), ServiceKey::default().name()), ("", ""));
    }

    fn svc(key: Option<&str>, ports: &[u16]) -> ServiceRequest {
        ServiceRequest {
            sharing_key: key.map(str::to_owned),
            ports: ports.iter().map(|&p| (Protocol::Tcp, p)).collect(),
            ..ServiceRequest::new("ns", "a")
        }
    }

    #[test]
    fn sharing_rules() {
        assert_eq!(svc(None, &[80]).share_refusal(&svc(None, &[443])), Some(ShareRefusal::NotShareable));
        assert_eq!(svc(Some("k"), &[80]).share_refusal(&svc(None, &[443])), Some(ShareRefusal::NotShareable));
        assert_eq!(
            svc(Some("k"), &[80]).share_refusal(&svc(Some("j"), &[443])),
            Some(ShareRefusal::KeysDiffer)
        );
        assert_eq!(
            svc(Some("k"), &[80]).share_refusal(&svc(Some("k"), &[80])),
            Some(ShareRefusal::PortClash { protocol: Protocol::Tcp, port: 80 })
        );
        assert_eq!(svc(Some("k"), &[80]).share_refusal(&svc(Some("k"), &[443])), None);
        let mut udp = svc(Some("k"), &[]);
        udp.ports = vec![(Protocol::Udp, 80)];
        assert_eq!(svc(Some("k"), &[80]).share_refusal(&udp), None, "TCP/80 and UDP/80 do not clash");
    }

    #[test]
    fn local_traffic_needs_the_same_backends() {
        let mut a = svc(Some("k"), &[80]);
        let mut b = svc(Some("k"), &[443]);
        a.traffic_policy = TrafficPolicy::Local;
        a.backend_key = Some("app=web".into());
        assert_eq!(a.share_refusal(&b), Some(ShareRefusal::BackendsDiffer));
        b.backend_key = Some("app=web".into());
        assert_eq!(a.share_refusal(&b), None);
        assert_eq!(b.share_refusal(&a), None);
        b.backend_key = Some("app=db".into());
        assert_eq!(b.share_refusal(&a), Some(ShareRefusal::BackendsDiffer));
    }

    #[test]
    fn family_policy_acceptance() {
        use Family::*;
        assert!(FamilyPolicy::SingleStack(V4).accepts(&[V4]));
        assert!(!FamilyPolicy::SingleStack(V4).accepts(&[V6]));
        assert!(!FamilyPolicy::SingleStack(V4).accepts(&[V4, V6]));
        assert!(FamilyPolicy::PreferDualStack(V6).accepts(&[V4]));
        assert!(FamilyPolicy::PreferDualStack(V6).accepts(&[V6, V4]));
        assert!(!FamilyPolicy::PreferDualStack(V6).accepts(&[V4, V4]));
        assert!(!FamilyPolicy::PreferDualStack(V6).accepts(&[]));
        assert!(FamilyPolicy::RequireDualStack(V4).accepts(&[V6, V4]));
        assert!(!FamilyPolicy::RequireDualStack(V4).accepts(&[V4]));
    }
}
