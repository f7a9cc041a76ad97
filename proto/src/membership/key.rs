//! The membership key: the shared secret that seals every datagram ([`super::auth`]).

use std::fmt;

/// Minimum length of a membership key, in characters.
pub const KEY_MIN_LEN: usize = 32;

/// A membership key; `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct MembershipKey(String);

impl MembershipKey {
    /// Parses key file text: surrounding whitespace ignored, at least 32 characters left.
    pub fn parse(text: &str) -> Result<Self, MembershipKeyError> {
        let key = text.trim();
        let len = key.chars().count();
        if len < KEY_MIN_LEN {
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
    #![allow(clippy::unwrap_used)]
    use super::*;

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
