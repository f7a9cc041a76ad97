//! Parsing of the Service annotations and key files users write.

use std::fmt;
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

/// A membership key; `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct MembershipKey(String);

impl MembershipKey {
    /// Parses key file text: surrounding whitespace ignored, at least 32 characters left.
    pub fn parse(text: &str) -> Result<Self, MembershipKeyError> {
        let key = text.trim();
        let len = key.chars().count();
        if len < crate::crd::MEMBERSHIP_KEY_MIN_LEN {
            return Err(MembershipKeyError::TooShort(len));
        }
        Ok(Self(key.to_owned()))
    }

    /// The key bytes, for the membership protocol only.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for MembershipKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MembershipKey(<redacted>)")
    }
}

/// Why a membership key is unusable; never contains the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipKeyError {
    /// Fewer than 32 characters after trimming.
    #[error(
        "the membership key has {0} characters, fewer than 32; generate one with e.g. `head -c 32 /dev/urandom | base64`"
    )]
    TooShort(usize),
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

    #[test]
    fn membership_key_is_never_shown() {
        let secret = "s3cr3t-s3cr3t-s3cr3t-s3cr3t-s3cr3t";
        let key = MembershipKey::parse(&format!("  {secret}\n")).unwrap();
        assert_eq!(key.expose(), secret.as_bytes());
        assert!(!format!("{key:?}").contains("s3cr3t"));
        let err = MembershipKey::parse("short-secret").unwrap_err().to_string();
        assert!(!err.contains("short-secret"), "{err}");
        assert!(err.contains("12 characters"), "{err}");
    }
}
