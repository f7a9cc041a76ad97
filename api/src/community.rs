//! BGP communities as users write them: `64512:100`, `large:64512:1:2`, `no-export`.

use std::fmt;
use std::str::FromStr;

/// A parsed community.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Community {
    /// RFC 1997 community (ASN, value).
    Standard(u16, u16),
    /// RFC 8092 large community (global admin, local 1, local 2).
    Large(u32, u32, u32),
}

/// Why a community did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a community; write ASN:VALUE (64512:100, each 0..=65535), \
     large:A:B:C (each 0..=4294967295) or a well-known name (no-export, no-advertise, \
     no-export-subconfed, no-peer, blackhole, graceful-shutdown, accept-own, llgr-stale, no-llgr)"
)]
pub struct CommunityError(pub String);

/// Well-known communities (RFC 1997, 3765, 7999, 8326, 7611, 9494).
pub(crate) const WELL_KNOWN: &[(&str, u16, u16)] = &[
    ("graceful-shutdown", 65535, 0),
    ("accept-own", 65535, 1),
    ("llgr-stale", 65535, 6),
    ("no-llgr", 65535, 7),
    ("blackhole", 65535, 666),
    ("no-export", 65535, 65281),
    ("no-advertise", 65535, 65282),
    ("no-export-subconfed", 65535, 65283),
    ("local-as", 65535, 65283),
    ("no-peer", 65535, 65284),
];

impl FromStr for Community {
    type Err = CommunityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CommunityError(s.to_owned());
        let t = s.trim();
        if let Some(&(_, a, v)) = WELL_KNOWN.iter().find(|(name, _, _)| name.eq_ignore_ascii_case(t)) {
            return Ok(Self::Standard(a, v));
        }
        if let Some(rest) = t.strip_prefix("large:") {
            let parts: Vec<&str> = rest.split(':').collect();
            let [a, b, c] = parts.as_slice() else {
                return Err(err());
            };
            let n = |x: &str| x.parse::<u32>().map_err(|_| err());
            return Ok(Self::Large(n(a)?, n(b)?, n(c)?));
        }
        let (a, v) = t.split_once(':').ok_or_else(err)?;
        let n = |x: &str| x.parse::<u16>().map_err(|_| err());
        Ok(Self::Standard(n(a)?, n(v)?))
    }
}

impl fmt::Display for Community {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Standard(a, v) => write!(f, "{a}:{v}"),
            Self::Large(a, b, c) => write!(f, "large:{a}:{b}:{c}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_forms() {
        assert_eq!("64512:100".parse(), Ok(Community::Standard(64512, 100)));
        assert_eq!("large:64512:1:2".parse(), Ok(Community::Large(64512, 1, 2)));
        assert_eq!("no-export".parse(), Ok(Community::Standard(65535, 65281)));
        assert_eq!(
            "graceful-shutdown".parse::<Community>().unwrap().to_string(),
            crate::crd::GRACEFUL_SHUTDOWN_COMMUNITY
        );
    }

    #[test]
    fn rejects_bad() {
        for bad in [
            "65536:1",
            "1:65536",
            "64512",
            "large:1:2",
            "large:1:2:3:4",
            "large:4294967296:1:1",
            "no-such-name",
            "a:b",
            "",
        ] {
            assert!(bad.parse::<Community>().is_err(), "{bad} should fail");
        }
    }
}
