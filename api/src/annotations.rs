//! Parsing of the Service annotations users write, in ferrolb's spelling or MetalLB's.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// Requested addresses on a Service, comma-separated, one per family.
pub const ANNOTATION_LOAD_BALANCER_IPS: &str = "ferrolb.io/loadBalancerIPs";
/// Pool a Service wants its address from.
pub const ANNOTATION_ADDRESS_POOL: &str = "ferrolb.io/address-pool";
/// Sharing key: Services with the same key may share an address when ports do not clash.
pub const ANNOTATION_ALLOW_SHARED_IP: &str = "ferrolb.io/allow-shared-ip";
/// Written by the controller: the pool an address came from.
pub const ANNOTATION_IP_ALLOCATED_FROM_POOL: &str = "ferrolb.io/ip-allocated-from-pool";

/// The Service annotations ferrolb reads, each with MetalLB's spellings of it, newest
/// first. MetalLB's are honoured so that Services keep working while a cluster migrates;
/// ferrolb's wins when both are set, and `metallb.io/` wins over `metallb.universe.tf/`.
pub const SERVICE_ANNOTATIONS: [(&str, [&str; 2]); 3] = [
    (ANNOTATION_LOAD_BALANCER_IPS, ["metallb.io/loadBalancerIPs", "metallb.universe.tf/loadBalancerIPs"]),
    (ANNOTATION_ADDRESS_POOL, ["metallb.io/address-pool", "metallb.universe.tf/address-pool"]),
    (ANNOTATION_ALLOW_SHARED_IP, ["metallb.io/allow-shared-ip", "metallb.universe.tf/allow-shared-ip"]),
];

/// One Service annotation as ferrolb reads it (see [`service_annotation`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationValue<'a> {
    /// The spelling that was read: the ferrolb.io key or one of MetalLB's.
    pub key: &'static str,
    /// Its value.
    pub value: &'a str,
    /// Other spellings that are set too and lose to `key`.
    pub shadowed: Vec<&'static str>,
}

impl AnnotationValue<'_> {
    /// Whether the value was read from one of MetalLB's spellings.
    pub fn is_metallb(&self) -> bool {
        !self.key.starts_with("ferrolb.io/")
    }
}

/// Reads the annotation `key` (a `ferrolb.io/` key of [`SERVICE_ANNOTATIONS`]) from a
/// Service's annotations: its ferrolb spelling, else the first MetalLB spelling set.
pub fn service_annotation<'a>(
    annotations: &'a BTreeMap<String, String>,
    key: &str,
) -> Option<AnnotationValue<'a>> {
    let (ferrolb, metallb) = SERVICE_ANNOTATIONS.iter().find(|(k, _)| *k == key)?;
    let mut set =
        std::iter::once(ferrolb).chain(metallb).filter_map(|k| annotations.get(*k).map(|v| (*k, v.as_str())));
    let (key, value) = set.next()?;
    Some(AnnotationValue { key, value, shadowed: set.map(|(k, _)| k).collect() })
}

/// Why a `loadBalancerIPs` annotation is invalid (the caller names the annotation).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadBalancerIpsError {
    /// An entry is not an IP address.
    #[error("{0:?} is not an IP address; write e.g. \"203.0.113.10\" or \"203.0.113.10,2001:db8::10\"")]
    NotAnAddress(String),
    /// Two addresses of one family.
    #[error("it lists two {family} addresses ({first} and {second}); give at most one per family")]
    SameFamily {
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// First address.
        first: IpAddr,
        /// Second address.
        second: IpAddr,
    },
}

/// Parses `ferrolb.io/loadBalancerIPs` (or MetalLB's spelling): comma-separated, at most one address per family.
pub fn parse_load_balancer_ips(value: &str) -> Result<Vec<IpAddr>, LoadBalancerIpsError> {
    let mut out: Vec<IpAddr> = Vec::new();
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let ip: IpAddr = part.parse().map_err(|_| LoadBalancerIpsError::NotAnAddress(part.to_owned()))?;
        if let Some(first) = out.iter().find(|o| o.is_ipv4() == ip.is_ipv4()) {
            return Err(LoadBalancerIpsError::SameFamily {
                family: if ip.is_ipv4() { "IPv4" } else { "IPv6" },
                first: *first,
                second: ip,
            });
        }
        out.push(ip);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_balancer_ips() {
        assert_eq!(parse_load_balancer_ips("203.0.113.10, 2001:db8::10").unwrap().len(), 2);
        assert!(parse_load_balancer_ips("").unwrap().is_empty());
        assert!(matches!(
            parse_load_balancer_ips("203.0.113.10,203.0.113.11"),
            Err(LoadBalancerIpsError::SameFamily { .. })
        ));
        assert!(matches!(
            parse_load_balancer_ips("203.0.113.300"),
            Err(LoadBalancerIpsError::NotAnAddress(_))
        ));
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn every_spelling_is_read_and_ferrolb_wins() {
        for (ferrolb, metallb) in SERVICE_ANNOTATIONS {
            assert_eq!(service_annotation(&annotations(&[]), ferrolb), None);
            for m in metallb {
                let a = annotations(&[(m, "x")]);
                let v = service_annotation(&a, ferrolb).unwrap();
                assert_eq!((v.key, v.value, v.is_metallb()), (m, "x", true));
                assert!(v.shadowed.is_empty());
            }
            let all = annotations(&[(metallb[1], "old"), (metallb[0], "new"), (ferrolb, "ours")]);
            let v = service_annotation(&all, ferrolb).unwrap();
            assert_eq!((v.key, v.value, v.is_metallb()), (ferrolb, "ours", false));
            assert_eq!(v.shadowed, metallb, "newest MetalLB spelling first");
            let both = annotations(&[(metallb[1], "old"), (metallb[0], "new")]);
            assert_eq!(service_annotation(&both, ferrolb).unwrap().value, "new", "metallb.io wins");
        }
        assert_eq!(service_annotation(&annotations(&[("a", "b")]), "ferrolb.io/unknown"), None);
    }
}
