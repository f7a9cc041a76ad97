//! Parsing of the Service annotations and key files users write.

use std::net::IpAddr;

/// Why `ferrolb.io/loadBalancerIPs` is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadBalancerIpsError {
    /// An entry is not an IP address.
    #[error(
        "{0:?} in ferrolb.io/loadBalancerIPs is not an IP address; write e.g. \"203.0.113.10\" or \"203.0.113.10,2001:db8::10\""
    )]
    NotAnAddress(String),
    /// Two addresses of one family.
    #[error(
        "ferrolb.io/loadBalancerIPs lists two {family} addresses ({first} and {second}); give at most one per family"
    )]
    SameFamily {
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// First address.
        first: IpAddr,
        /// Second address.
        second: IpAddr,
    },
}

/// Parses `ferrolb.io/loadBalancerIPs`: comma-separated, at most one address per family.
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
}
