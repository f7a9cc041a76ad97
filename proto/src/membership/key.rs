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

/// A key source that is read again (a file, a Secret): each read gives the key to
/// hand to membership, or None when it is unusable. The current key then stays in
/// force, and the error is logged and counted (`ferrolb_membership_key_changes_total`,
/// rejected) once per distinct error; one after a good read counts again.
#[derive(Debug, Default)]
pub struct Reread {
    /// The error logged last: the same one again is not.
    error: Option<String>,
}

impl Reread {
    /// Judges one read.
    pub fn judge(
        &mut self,
        read: Result<MembershipKey, String>,
        metrics: &super::MembershipMetrics,
    ) -> Option<MembershipKey> {
        match read {
            Ok(key) => {
                self.error = None;
                Some(key)
            }
            Err(e) => {
                if self.error.as_ref() != Some(&e) {
                    tracing::error!("membership key unchanged, the current one stays in force: {e}");
                    metrics.key_rejected();
                    self.error = Some(e);
                }
                None
            }
        }
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

    #[test]
    fn an_unusable_key_is_logged_and_counted_once_per_error() {
        let metrics = crate::membership::MembershipMetrics::default();
        let key = MembershipKey::parse("0123456789abcdef0123456789abcdef").unwrap();
        let mut f = Reread::default();
        let rejected = || metrics.key_changes("rejected");
        assert!(f.judge(Err("too short".into()), &metrics).is_none());
        assert!(f.judge(Err("too short".into()), &metrics).is_none());
        assert_eq!(rejected(), 1, "the same error again is not counted");
        assert!(f.judge(Err("cannot read".into()), &metrics).is_none());
        assert_eq!(rejected(), 2, "another error is");
        assert!(f.judge(Ok(key), &metrics).is_some());
        assert!(f.judge(Err("cannot read".into()), &metrics).is_none());
        assert_eq!(rejected(), 3, "an error after a good read is counted again");
    }
}
