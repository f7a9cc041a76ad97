//! Key and password rotation without a restart (issue #13).
//!
//! The membership key (Secret `ferrolb-membership`, or `--membership-key-file`) and the
//! BGP passwords (BGPPeer `spec.passwordSecret`, or `spec.passwordFile` in static mode)
//! are followed while the speaker runs: Secrets through a watch on each by name, files by
//! re-reading them every [`FILE_POLL`]. A new membership key goes to membership, which
//! rotates without a split ([`ferrolb_proto::membership::auth::Keyring`]); a new password goes
//! through the plan to the BGP announcer, which restarts only that peer's session (its
//! settings changed) with the new TCP MD5 key on the connection and the listener. A key
//! or password that cannot be used leaves the current one in force, with one error line.

use std::collections::BTreeSet;
use std::time::Duration;

use ferrolb_proto::membership::{MembershipKey, Reread};
use tokio::sync::watch;

use crate::cluster::secrets::Watched;
use crate::metrics::Metrics;

/// How often key and password files are re-read.
pub(in crate::run) const FILE_POLL: Duration = Duration::from_secs(2);

/// What the rotation logic remembers: errors already logged, so each is logged once.
#[derive(Debug, Default)]
pub(in crate::run) struct Rotation {
    key: Reread,
    password_errors: BTreeSet<String>,
}

impl Rotation {
    /// A (re)read membership key: the key to hand to membership, or None when it is
    /// unusable (the current key stays in force; logged and counted once per error).
    pub(in crate::run) fn key(
        &mut self,
        key: Result<MembershipKey, String>,
        metrics: &Metrics,
    ) -> Option<MembershipKey> {
        self.key.judge(key, &metrics.membership)
    }

    /// Passwords that could not be (re)read: each new one is logged once (the previous
    /// value stays in force).
    pub(in crate::run) fn password_errors(&mut self, errors: Vec<String>) {
        for e in &errors {
            if !self.password_errors.contains(e) {
                tracing::error!("{e}; the password last read stays in force");
            }
        }
        self.password_errors = errors.into_iter().collect();
    }
}

/// Resolves when a watched Secret changed (never without a watch).
pub(in crate::run) async fn secrets_changed(rx: Option<watch::Receiver<Watched>>) {
    let Some(mut rx) = rx else { return std::future::pending().await };
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}
