//! What a load balancer reads of a Service, and reading it straight from a plain
//! document of a stream.
//!
//! A static file of 50k Services is mostly Services, and building each as a Kubernetes
//! object (a `Service` with its 40 optional fields, through serde) took more time than
//! reading the YAML: 4 µs a Service. [`from_node`] reads the few fields a load balancer
//! needs straight from the fast reader's document and checks every other field against
//! the type the Kubernetes object gives it, so it accepts a document only where decoding
//! the object would succeed without an unknown field. Anything else (a field it does not
//! know, a value of another type, a `null`) it leaves to the object's decoder, which
//! decides and words every error and warning: it may be stricter than that decoder,
//! never more lenient. `tests::agrees_with_the_typed_decoder` holds it to that.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;

use crate::fast_yaml::{Node, key_cmp};

/// Labels or a selector: borrowed from a typed Service, owned when read from a document.
pub type Labels<'a> = Cow<'a, BTreeMap<String, String>>;

/// What a load balancer reads of a Service.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServiceFields<'a> {
    /// `metadata.namespace`.
    pub namespace: Option<Cow<'a, str>>,
    /// `metadata.name`.
    pub name: Option<Cow<'a, str>>,
    /// `metadata.labels`.
    pub labels: Option<Labels<'a>>,
    /// `spec.type`.
    pub type_: Option<Cow<'a, str>>,
    /// `spec.loadBalancerClass`.
    pub load_balancer_class: Option<Cow<'a, str>>,
    /// `spec.externalTrafficPolicy`.
    pub external_traffic_policy: Option<Cow<'a, str>>,
    /// `spec.selector`.
    pub selector: Option<Labels<'a>>,
    /// `status.loadBalancer.ingress[].ip`, in order, those that are IP addresses; sized
    /// exactly (a Vec grown by pushing holds room for 4: 0.7 MB with 10k Services).
    pub ingress: Vec<IpAddr>,
}

/// The addresses among `status.loadBalancer.ingress[].ip`.
fn ingress_of(svc: &Service) -> Vec<IpAddr> {
    let listed = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default();
    let mut ingress = Vec::with_capacity(listed.len());
    ingress.extend(listed.iter().filter_map(|i| i.ip.as_deref()?.parse::<IpAddr>().ok()));
    ingress
}

impl<'a> ServiceFields<'a> {
    /// The same fields, owning their text.
    pub fn into_owned(self) -> ServiceFields<'static> {
        let text = |s: Option<Cow<'a, str>>| s.map(|s| Cow::Owned(s.into_owned()));
        let map = |m: Option<Labels<'a>>| m.map(|m| Cow::Owned(m.into_owned()));
        ServiceFields {
            namespace: text(self.namespace),
            name: text(self.name),
            labels: map(self.labels),
            type_: text(self.type_),
            load_balancer_class: text(self.load_balancer_class),
            external_traffic_policy: text(self.external_traffic_policy),
            selector: map(self.selector),
            ingress: self.ingress,
        }
    }

    /// The fields of `svc`, borrowed.
    pub fn of(svc: &'a Service) -> Self {
        let spec = svc.spec.as_ref();
        let text = |s: Option<&'a String>| s.map(|s| Cow::Borrowed(s.as_str()));
        ServiceFields {
            namespace: text(svc.metadata.namespace.as_ref()),
            name: text(svc.metadata.name.as_ref()),
            labels: svc.metadata.labels.as_ref().map(Cow::Borrowed),
            type_: text(spec.and_then(|s| s.type_.as_ref())),
            load_balancer_class: text(spec.and_then(|s| s.load_balancer_class.as_ref())),
            external_traffic_policy: text(spec.and_then(|s| s.external_traffic_policy.as_ref())),
            selector: spec.and_then(|s| s.selector.as_ref()).map(Cow::Borrowed),
            ingress: ingress_of(svc),
        }
    }
}

impl From<Service> for ServiceFields<'static> {
    /// The fields of `svc`, moved out of it.
    fn from(mut svc: Service) -> Self {
        let ingress = ingress_of(&svc);
        let meta = &mut svc.metadata;
        let (namespace, name, labels) = (meta.namespace.take(), meta.name.take(), meta.labels.take());
        let mut spec = svc.spec.unwrap_or_default();
        ServiceFields {
            namespace: namespace.map(Cow::Owned),
            name: name.map(Cow::Owned),
            labels: labels.map(Cow::Owned),
            type_: spec.type_.take().map(Cow::Owned),
            load_balancer_class: spec.load_balancer_class.take().map(Cow::Owned),
            external_traffic_policy: spec.external_traffic_policy.take().map(Cow::Owned),
            selector: spec.selector.take().map(Cow::Owned),
            ingress,
        }
    }
}

/// The type a field of a Service has in the Kubernetes object, as far as [`from_node`]
/// checks it. A `null` matches none of them (the object reads it as absent; the decoder
/// decides).
#[derive(Clone, Copy)]
enum Shape {
    Str,
    /// `i32`.
    Int32,
    /// `i64`.
    Int64,
    Bool,
    /// `Vec<String>`.
    Strs,
    /// `BTreeMap<String, String>`.
    StrMap,
    /// `meta/v1.Time`: checked by its own decoder.
    Time,
    /// `IntOrString`.
    IntOrStr,
    /// A mapping of these fields.
    Fields(&'static [(&'static str, Shape)]),
    /// A sequence of mappings of these fields.
    List(&'static [(&'static str, Shape)]),
}

use Shape::*;

/// `ObjectMeta`, without `managedFields` and `ownerReferences` (rare in a file, and
/// deep: the object's decoder reads them).
const METADATA: &[(&str, Shape)] = &[
    ("annotations", StrMap),
    ("creationTimestamp", Time),
    ("deletionGracePeriodSeconds", Int64),
    ("deletionTimestamp", Time),
    ("finalizers", Strs),
    ("generateName", Str),
    ("generation", Int64),
    ("labels", StrMap),
    ("name", Str),
    ("namespace", Str),
    ("resourceVersion", Str),
    ("selfLink", Str),
    ("uid", Str),
];

/// `ServicePort`.
const PORT: &[(&str, Shape)] = &[
    ("appProtocol", Str),
    ("name", Str),
    ("nodePort", Int32),
    ("port", Int32),
    ("protocol", Str),
    ("targetPort", IntOrStr),
];

/// `ServiceSpec`, without `sessionAffinityConfig`.
const SPEC: &[(&str, Shape)] = &[
    ("allocateLoadBalancerNodePorts", Bool),
    ("clusterIP", Str),
    ("clusterIPs", Strs),
    ("externalIPs", Strs),
    ("externalName", Str),
    ("externalTrafficPolicy", Str),
    ("healthCheckNodePort", Int32),
    ("internalTrafficPolicy", Str),
    ("ipFamilies", Strs),
    ("ipFamilyPolicy", Str),
    ("loadBalancerClass", Str),
    ("loadBalancerIP", Str),
    ("loadBalancerSourceRanges", Strs),
    ("ports", List(PORT)),
    ("publishNotReadyAddresses", Bool),
    ("selector", StrMap),
    ("sessionAffinity", Str),
    ("trafficDistribution", Str),
    ("type", Str),
];

/// `LoadBalancerIngress`, without `ports`.
const INGRESS: &[(&str, Shape)] = &[("hostname", Str), ("ip", Str), ("ipMode", Str)];

/// `ServiceStatus`, without `conditions`.
const STATUS: &[(&str, Shape)] = &[("loadBalancer", Fields(&[("ingress", List(INGRESS))]))];

/// `Service`.
const SERVICE: &[(&str, Shape)] = &[
    ("apiVersion", Str),
    ("kind", Str),
    ("metadata", Fields(METADATA)),
    ("spec", Fields(SPEC)),
    ("status", Fields(STATUS)),
];

/// Whether `node` has `shape`, as the Kubernetes object's decoder reads it.
fn fits(node: &Node<'_>, shape: Shape) -> bool {
    let is_str = |n: &Node<'_>| matches!(n, Node::Str(_));
    match (shape, node) {
        (Str, Node::Str(_)) | (Bool, Node::Bool(_)) | (Int64, Node::Int(_)) => true,
        (Int32 | IntOrStr, Node::Int(n)) => i32::try_from(*n).is_ok(),
        (IntOrStr, Node::Str(_)) => true,
        (Strs, Node::Seq(items)) => items.iter().all(is_str),
        (StrMap, Node::Map(entries)) => entries.iter().all(|(_, v)| is_str(v)),
        (Time, Node::Str(_)) => {
            <k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as serde::Deserialize>::deserialize(node)
                .is_ok()
        }
        (Fields(fields), Node::Map(entries)) => has_fields(entries, fields),
        (List(fields), Node::Seq(items)) => {
            items.iter().all(|i| matches!(i, Node::Map(entries) if has_fields(entries, fields)))
        }
        _ => false,
    }
}

/// Whether every entry is one of `fields` and has its shape. Both are sorted by key.
fn has_fields(entries: &[(Cow<'_, str>, Node<'_>)], fields: &[(&str, Shape)]) -> bool {
    let mut known = fields.iter();
    entries.iter().all(|(key, value)| {
        // Both sorted: walk the known fields once, to the first not before `key`.
        let shape = known.by_ref().find_map(|(name, shape)| match key_cmp(name, key) {
            Ordering::Less => None,
            Ordering::Equal => Some(Some(*shape)),
            Ordering::Greater => Some(None),
        });
        shape.flatten().is_some_and(|shape| fits(value, shape))
    })
}

/// The entry at `key` of a mapping's sorted entries.
fn field<'n, 'a>(entries: &'n [(Cow<'a, str>, Node<'a>)], key: &str) -> Option<&'n Node<'a>> {
    entries.binary_search_by(|(k, _)| key_cmp(k, key)).ok().map(|i| &entries[i].1)
}

fn entries<'n, 'a>(node: Option<&'n Node<'a>>) -> &'n [(Cow<'a, str>, Node<'a>)] {
    match node {
        Some(Node::Map(entries)) => entries,
        _ => &[],
    }
}

fn text<'a>(node: Option<&Node<'a>>) -> Option<Cow<'a, str>> {
    match node {
        Some(Node::Str(s)) => Some(s.clone()),
        _ => None,
    }
}

fn labels<'a>(node: Option<&Node<'a>>) -> Option<Labels<'a>> {
    let entries = match node {
        Some(Node::Map(entries)) => entries,
        _ => return None,
    };
    let map = entries.iter().filter_map(|(k, v)| Some((k.to_string(), text(Some(v))?.into_owned())));
    Some(Cow::Owned(map.collect()))
}

/// The fields of the Service document `node` (its `apiVersion` and `kind` already read
/// as `v1` `Service`), if decoding it as a Kubernetes object would succeed without an
/// unknown field; `None`: decode the object.
pub(crate) fn from_node<'a>(node: &Node<'a>) -> Option<ServiceFields<'a>> {
    let Node::Map(root) = node else { return None };
    if !has_fields(root, SERVICE) {
        return None;
    }
    let meta = entries(field(root, "metadata"));
    let spec = entries(field(root, "spec"));
    let listed = match field(entries(field(entries(field(root, "status")), "loadBalancer")), "ingress") {
        Some(Node::Seq(items)) => items.as_slice(),
        _ => &[],
    };
    let mut ingress = Vec::with_capacity(listed.len());
    ingress.extend(listed.iter().filter_map(|i| text(field(entries(Some(i)), "ip"))?.parse::<IpAddr>().ok()));
    Some(ServiceFields {
        namespace: text(field(meta, "namespace")),
        name: text(field(meta, "name")),
        labels: labels(field(meta, "labels")),
        type_: text(field(spec, "type")),
        load_balancer_class: text(field(spec, "loadBalancerClass")),
        external_traffic_policy: text(field(spec, "externalTrafficPolicy")),
        selector: labels(field(spec, "selector")),
        ingress,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`has_fields`] walks each table once, in the order of a mapping's sorted keys.
    #[test]
    fn tables_are_sorted_as_mappings_are() {
        for table in [METADATA, PORT, SPEC, INGRESS, STATUS, SERVICE] {
            assert!(
                table.windows(2).all(|w| w[0].0 < w[1].0),
                "unsorted: {:?}",
                table.iter().map(|f| f.0).collect::<Vec<_>>()
            );
        }
    }

    fn read(doc: &str) -> Option<ServiceFields<'static>> {
        let node = crate::fast_yaml::parse_node(doc)
            .unwrap_or_else(|| panic!("outside the fast reader's subset:\n{doc}"));
        from_node(&node).map(ServiceFields::into_owned)
    }

    const FLOW: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: svc-1, namespace: default}\nspec: {type: LoadBalancer, ports: [{port: 80, protocol: TCP}]}\nstatus: {loadBalancer: {ingress: [{ip: \"198.18.0.1\"}, {hostname: lb.example}, {ip: nonsense}]}}\n";

    #[test]
    fn reads_what_a_load_balancer_needs() {
        let f = read(FLOW).expect("read straight");
        assert_eq!(f.name.as_deref(), Some("svc-1"));
        assert_eq!(f.namespace.as_deref(), Some("default"));
        assert_eq!(f.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(f.ingress, vec!["198.18.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(f.ingress.capacity(), 3, "sized by the list, not grown");
        assert_eq!((f.labels, f.selector, f.load_balancer_class), (None, None, None));
    }

    /// Whatever the object's decoder would warn about or refuse, or read otherwise, is
    /// left to it.
    #[test]
    fn leaves_unknown_fields_nulls_and_other_types_to_the_decoder() {
        assert!(read(FLOW).is_some());
        for (from, to) in [
            ("name: svc-1", "name: svc-1, typo: x"),
            ("type: LoadBalancer", "type: LoadBalancer, typo: x"),
            ("{ip: \"198.18.0.1\"}", "{ip: \"198.18.0.1\", typo: x}"),
            ("{ip: \"198.18.0.1\"}", "{ip: \"198.18.0.1\", ports: []}"),
            ("kind: Service", "kind: Service\ntypo: x"),
            ("name: svc-1", "name: ~"),
            ("name: svc-1", "name: 1"),
            ("port: 80", "port: 2147483648"),
            ("port: 80", "port: \"80\""),
            ("type: LoadBalancer", "type: LoadBalancer, selector: {app: 1}"),
            ("type: LoadBalancer", "type: LoadBalancer, clusterIPs: [1]"),
            ("type: LoadBalancer", "type: LoadBalancer, sessionAffinityConfig: {}"),
            ("name: svc-1", "name: svc-1, creationTimestamp: yesterday"),
            ("name: svc-1", "name: svc-1, managedFields: []"),
            ("{loadBalancer:", "{conditions: [], loadBalancer:"),
            ("spec: {type: LoadBalancer, ports: [{port: 80, protocol: TCP}]}", "spec: [LoadBalancer]"),
        ] {
            let doc = FLOW.replacen(from, to, 1);
            assert_ne!(doc, FLOW);
            assert_eq!(read(&doc), None, "read straight:\n{doc}");
        }
        for (from, to) in [
            ("name: svc-1", "name: svc-1, creationTimestamp: \"2026-11-26T01:00:00Z\", generation: 3"),
            ("type: LoadBalancer", "type: LoadBalancer, selector: {app: web}, healthCheckNodePort: 30000"),
            ("port: 80", "port: 80, targetPort: http, nodePort: 30080"),
        ] {
            assert!(read(&FLOW.replacen(from, to, 1)).is_some(), "not read straight: {to}");
        }
    }
}
