//! Checkpoint refresh: while the local apiserver serves the ControlPlaneVIP, watch it
//! and rewrite the checkpoint atomically (previous content kept as `FILE.prev`) when
//! the VIP or the BGPPeers / BFDProfiles it refers to change.
//!
//! Every read has a deadline ([`CALL_TIMEOUT`]), so an apiserver that accepts a request
//! and never answers cannot stall the loop. Failures are counted by reason
//! (`ferrolb_bootstrap_checkpoint_refresh_errors_total`) and logged at warn once per
//! distinct failure; the first success after them is logged at info.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::{BfdProfile, BgpPeer, Config, ControlPlaneVip};
use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher;

use crate::checkpoint;
use crate::metrics::Metrics;

/// How long one read of the refresh may take: an apiserver may accept a request and
/// never answer (the client's read timeout, 300 s, is sized for watches).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What one refresh did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The apiserver's objects equal the checkpoint.
    Unchanged,
    /// The checkpoint was rewritten.
    Written,
    /// The apiserver does not serve the VIP (yet); the checkpoint stays.
    Absent,
    /// What the apiserver serves is not a valid checkpoint; the old one stays.
    Invalid(String),
}

/// Why a refresh failed (the apiserver or the file).
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// The apiserver could not be read.
    #[error("reading {what} from the local apiserver: {source}")]
    Api {
        /// What was read.
        what: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The apiserver did not answer a read in time.
    #[error("reading {what} from the local apiserver: no answer within {after:?}")]
    NoAnswer {
        /// What was read.
        what: String,
        /// The deadline that passed.
        after: Duration,
    },
    /// The checkpoint could not be written.
    #[error(transparent)]
    Write(#[from] ferrolb_api::StreamError),
}

impl RefreshError {
    /// The `reason` label of `ferrolb_bootstrap_checkpoint_refresh_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            RefreshError::NoAnswer { .. } => "timeout",
            // The credentials or their RBAC (`ferrolb-bootstrap checkpoint rbac`).
            RefreshError::Api { source: kube::Error::Api(s), .. } if matches!(s.code, 401 | 403) => "denied",
            RefreshError::Api { .. } => "api",
            RefreshError::Write(_) => "write",
        }
    }
}

/// Reads `name` through `api` within [`CALL_TIMEOUT`]; `what` names it in errors.
async fn get_opt<K>(api: &Api<K>, name: &str, what: String) -> Result<Option<K>, RefreshError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match tokio::time::timeout(CALL_TIMEOUT, api.get_opt(name)).await {
        Ok(r) => r.map_err(|source| RefreshError::Api { what, source }),
        Err(_) => Err(RefreshError::NoAnswer { what, after: CALL_TIMEOUT }),
    }
}

/// Reads the VIP `name` and what it refers to; rewrites `path` when that differs.
pub async fn refresh_once(client: &kube::Client, name: &str, path: &Path) -> Result<Outcome, RefreshError> {
    let vips: Api<ControlPlaneVip> = Api::all(client.clone());
    let Some(vip) = get_opt(&vips, name, format!("ControlPlaneVIP {name}")).await? else {
        return Ok(Outcome::Absent);
    };
    let mut config = Config::default();
    let peers: Api<BgpPeer> = Api::all(client.clone());
    for p in vip.spec.bgp.iter().flat_map(|b| b.peers.iter()) {
        if let Some(peer) = get_opt(&peers, p, format!("BGPPeer {p}")).await? {
            config.peers.push(peer);
        }
    }
    let profiles: Api<BfdProfile> = Api::all(client.clone());
    let bfd: std::collections::BTreeSet<String> =
        config.peers.iter().filter_map(|p| p.spec.bfd_profile.clone()).collect();
    for b in bfd {
        if let Some(profile) = get_opt(&profiles, &b, format!("BFDProfile {b}")).await? {
            config.bfd_profiles.push(profile);
        }
    }
    config.control_plane_vips.push(vip);
    let text = match checkpoint::render(&config, name) {
        Ok(t) => t,
        Err(e) => return Ok(Outcome::Invalid(e)),
    };
    let file = path.display().to_string();
    let stream = match ferrolb_api::parse_stream(&file, &text) {
        Ok(s) => s,
        Err(e) => return Ok(Outcome::Invalid(checkpoint::one_line(&e))),
    };
    if let Err(e) = checkpoint::from_stream(&file, stream) {
        return Ok(Outcome::Invalid(e));
    }
    if std::fs::read_to_string(path).is_ok_and(|cur| cur == text) {
        return Ok(Outcome::Unchanged);
    }
    checkpoint::write(path, &text)?;
    Ok(Outcome::Written)
}

/// What the last refresh found, so that each state is logged once.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Read and written, or unchanged.
    Fine,
    /// The apiserver has no such ControlPlaneVIP.
    Absent,
    /// Something failed (the message), so the checkpoint may be stale.
    Failed(String),
}

/// Watches the VIP `name` and refreshes on every change, and every `resync` (BGPPeer
/// and BFDProfile changes are not watched); bumps `written` after each rewrite and
/// counts failures in `metrics`. Runs until the task is dropped.
pub async fn run(
    client: kube::Client,
    name: String,
    path: PathBuf,
    resync: Duration,
    written: Option<tokio::sync::watch::Sender<u64>>,
    metrics: Arc<Metrics>,
) {
    let vips: Api<ControlPlaneVip> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(vips, cfg).boxed();
    let mut tick = tokio::time::interval(resync);
    let mut last: Option<Seen> = None;
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)) => {}
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    // The next resync tells, and counts, whether the apiserver answers.
                    tracing::debug!(error = %e, "ControlPlaneVIP watch");
                    continue;
                }
                None => return,
            },
            _ = tick.tick() => {}
        }
        let seen = match refresh_once(&client, &name, &path).await {
            Ok(Outcome::Written) => {
                tracing::info!(file = %path.display(), "checkpoint refreshed from the local apiserver");
                if let Some(w) = &written {
                    w.send_modify(|n| *n += 1);
                }
                Seen::Fine
            }
            Ok(Outcome::Unchanged) => Seen::Fine,
            Ok(Outcome::Absent) => {
                if last != Some(Seen::Absent) {
                    tracing::info!(vip = %name, "the local apiserver has no such ControlPlaneVIP; keeping the checkpoint");
                }
                Seen::Absent
            }
            Ok(Outcome::Invalid(e)) => failed(&metrics, &last, "invalid", e, &path),
            Err(e) => failed(&metrics, &last, e.metric_label(), e.to_string(), &path),
        };
        if seen == Seen::Fine && matches!(last, Some(Seen::Failed(_))) {
            tracing::info!(file = %path.display(), "checkpoint refresh works again");
        }
        last = Some(seen);
    }
}

/// Counts a failed refresh and logs it unless it is the same failure as the last one.
fn failed(metrics: &Metrics, last: &Option<Seen>, reason: &'static str, error: String, path: &Path) -> Seen {
    if !matches!(last, Some(Seen::Failed(e)) if *e == error) {
        tracing::warn!(%error, reason, file = %path.display(), "checkpoint not refreshed; keeping the one on disk");
    }
    metrics.refresh_failed(reason);
    Seen::Failed(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_credentials_are_labelled_denied() {
        let refused = |code| RefreshError::Api {
            what: "ControlPlaneVIP apiserver".into(),
            source: kube::Error::Api(
                kube::core::Status::failure("refused", "Refused").with_code(code).boxed(),
            ),
        };
        assert_eq!(refused(401).metric_label(), "denied");
        assert_eq!(refused(403).metric_label(), "denied");
        assert_eq!(refused(503).metric_label(), "api");
    }
}
