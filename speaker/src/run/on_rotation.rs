//! Rotation inputs: a watched Secret changed, or the key and password files are due to
//! be read again ([`super::parts::rotation`]).

use std::collections::{BTreeMap, BTreeSet};

use ferrolb_api::MEMBERSHIP_SECRET_NAME;
use ferrolb_proto::bgp::socket::Password;
use ferrolb_proto::membership::{self, MembershipKey};

use super::input::Cause;
use super::state::State;
use crate::cluster::secrets::{self, SecretName};
use crate::error::one_line;
use crate::model::static_file;

impl State {
    /// Kubernetes mode: watches the Secrets in use, the password Secrets of the BGPPeers
    /// and, while membership runs without a key file, `ferrolb-membership`.
    pub(super) fn watch_secrets(&mut self) {
        let Some(c) = self.cluster.as_mut() else { return };
        let mut wanted: BTreeSet<SecretName> =
            secrets::password_refs(&self.model).into_values().map(|r| (r.namespace, r.name)).collect();
        if self.l2.is_some() && self.opts.membership_key_file.is_none() {
            wanted.insert((c.namespace.clone(), MEMBERSHIP_SECRET_NAME.to_owned()));
        }
        c.secrets.set(&wanted);
    }

    /// Kubernetes mode: a watched Secret changed.
    pub(super) async fn on_secrets(&mut self) {
        let Some(c) = self.cluster.as_mut() else { return };
        let watched = c.secrets_seen.borrow_and_update().clone();
        let namespace = c.namespace.clone();
        if self.opts.membership_key_file.is_none()
            && let Some(s) = watched.get(&(namespace.clone(), MEMBERSHIP_SECRET_NAME.to_owned()))
        {
            self.apply_membership_key(secrets::membership_key_in(&namespace, s.as_ref()));
        }
        let mut passwords = self.passwords.clone();
        let mut errors = Vec::new();
        for (peer, r) in secrets::password_refs(&self.model) {
            let Some(s) = watched.get(&(r.namespace.clone(), r.name.clone())) else { continue };
            match secrets::password_in(&peer, &r, s.as_ref()) {
                Ok(pw) => {
                    passwords.insert(peer, pw);
                }
                Err(e) => errors.push(e),
            }
        }
        self.apply_passwords(passwords, errors, "BGP password Secret changed").await;
    }

    /// Re-reads the membership key file and (static mode) the BGP password files.
    pub(super) async fn poll_files(&mut self) {
        if self.l2.is_some()
            && let Some(f) = self.opts.membership_key_file.clone()
        {
            self.apply_membership_key(membership::read_key_file(&f));
        }
        if let Some(file) = self.file.clone() {
            match static_file::passwords(&self.model, &file) {
                Ok(p) => self.apply_passwords(p, Vec::new(), "BGP password file changed").await,
                Err(e) => {
                    let passwords = self.passwords.clone();
                    self.apply_passwords(passwords, vec![one_line(&e.to_string())], "").await;
                }
            }
        }
    }

    /// Hands a (re)read membership key to membership, which rotates to it if it is new;
    /// an unusable one leaves the current key in force and is logged and counted once.
    fn apply_membership_key(&mut self, key: Result<MembershipKey, String>) {
        let Some(p) = self.l2.as_ref() else { return };
        if let Some(k) = self.rotation.key(key, &self.metrics) {
            p.membership.set_key(k);
        }
    }

    /// Applies (re)read BGP passwords: the sessions of the peers whose password changed
    /// restart with it, and only those. `errors`: passwords that could not be read (their
    /// previous value is in `passwords`), each logged once.
    async fn apply_passwords(
        &mut self,
        passwords: BTreeMap<String, Password>,
        errors: Vec<String>,
        why: &str,
    ) {
        self.rotation.password_errors(errors);
        if passwords == self.passwords {
            return;
        }
        let changed: Vec<String> = passwords
            .keys()
            .chain(self.passwords.keys())
            .filter(|p| passwords.get(*p) != self.passwords.get(*p))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        tracing::info!(peers = ?changed, "{why}: restarting the sessions of these peers only, with the new password");
        self.passwords = passwords;
        self.replan(&Cause::new("config", why)).await;
    }
}
