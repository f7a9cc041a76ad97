//! Kubernetes mode: what the event loop talks to the API with (the status writer, the
//! Secrets, the readiness gate, the watchers' lifetime). The model itself comes from the
//! [`super::feed`].

use std::collections::BTreeMap;

use tokio::sync::watch;

use super::gate::GatePart;
use crate::cluster;
use crate::cluster::status;

/// Kubernetes mode: the API side of the event loop.
pub(in crate::run) struct ClusterPart {
    pub(in crate::run) client: kube::Client,
    pub(in crate::run) namespace: String,
    /// Where each plan's status changes go; the writer task converges the API to them.
    pub(in crate::run) status: status::Outbox,
    /// Which Services' status each plan changed.
    pub(in crate::run) tracker: status::Tracker,
    /// The BGP password Secrets last read completely (re-read when they change).
    pub(in crate::run) password_refs: BTreeMap<String, ferrolb_api::SecretKeyRef>,
    /// Watches the Secrets in use, so rotated keys and passwords apply ([`super::rotation`]).
    pub(in crate::run) secrets: cluster::secrets::SecretWatch,
    /// What of them was applied last.
    pub(in crate::run) secrets_seen: watch::Receiver<cluster::secrets::Watched>,
    /// Pod readiness gates of this node's pods.
    pub(in crate::run) gate: GatePart,
    /// The watchers (aborted when the speaker stops), told which Nodes to watch.
    pub(in crate::run) watchers: cluster::Watchers,
}
