//! Checkpoint refresh: while the local apiserver serves the ControlPlaneVIP, watch it
//! and rewrite the checkpoint atomically (previous content kept as `FILE.prev`) when
//! the VIP or the BGPPeers / BFDProfiles it refers to change.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ferrolb_api::{BfdProfile, BgpPeer, Config, ControlPlaneVip};
use futures::StreamExt;
use kube::Api;
use kube::runtime::watcher;

use crate::checkpoint;

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
    /// The checkpoint could not be written.
    #[error(transparent)]
    Write(#[from] ferrolb_api::StreamError),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> RefreshError {
    let what = what.into();
    move |source| RefreshError::Api { what, source }
}

/// Reads the VIP `name` and what it refers to; rewrites `path` when that differs.
pub async fn refresh_once(client: &kube::Client, name: &str, path: &Path) -> Result<Outcome, RefreshError> {
    let vips: Api<ControlPlaneVip> = Api::all(client.clone());
    let Some(vip) = vips.get_opt(name).await.map_err(api_err(format!("ControlPlaneVIP {name}")))? else {
        return Ok(Outcome::Absent);
    };
    let mut config = Config::default();
    let peers: Api<BgpPeer> = Api::all(client.clone());
    for p in vip.spec.bgp.iter().flat_map(|b| b.peers.iter()) {
        if let Some(peer) = peers.get_opt(p).await.map_err(api_err(format!("BGPPeer {p}")))? {
            config.peers.push(peer);
        }
    }
    let profiles: Api<BfdProfile> = Api::all(client.clone());
    let bfd: std::collections::BTreeSet<String> =
        config.peers.iter().filter_map(|p| p.spec.bfd_profile.clone()).collect();
    for b in bfd {
        if let Some(profile) = profiles.get_opt(&b).await.map_err(api_err(format!("BFDProfile {b}")))? {
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
    ferrolb_api::write_atomically(path, text.as_bytes(), true)?;
    Ok(Outcome::Written)
}

/// Watches the VIP `name` and refreshes on every change, and every `resync` (BGPPeer
/// and BFDProfile changes are not watched); bumps `written` after each rewrite. Runs
/// until the task is dropped.
pub async fn run(
    client: kube::Client,
    name: String,
    path: PathBuf,
    resync: Duration,
    written: Option<tokio::sync::watch::Sender<u64>>,
) {
    let vips: Api<ControlPlaneVip> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(vips, cfg).boxed();
    let mut tick = tokio::time::interval(resync);
    let mut last: Option<Outcome> = None;
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone)) => {}
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "ControlPlaneVIP watch");
                    continue;
                }
                None => return,
            },
            _ = tick.tick() => {}
        }
        let outcome = refresh_once(&client, &name, &path).await;
        match &outcome {
            Ok(Outcome::Written) => {
                tracing::info!(file = %path.display(), "checkpoint refreshed from the local apiserver");
                if let Some(w) = &written {
                    w.send_modify(|n| *n += 1);
                }
            }
            Ok(o) if last.as_ref() != Some(o) => match o {
                Outcome::Invalid(e) => tracing::warn!(error = %e, "not refreshing the checkpoint"),
                Outcome::Absent => {
                    tracing::info!(vip = %name, "the local apiserver has no such ControlPlaneVIP; keeping the checkpoint")
                }
                _ => {}
            },
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "checkpoint refresh"),
        }
        if let Ok(o) = outcome {
            last = Some(o);
        }
    }
}
