//! The speaker's event loop (holo shape): one task owns the model, the plan and the
//! announcers; the file watcher, the clock and signals feed it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::announce::bgp::BgpAnnouncer;
use crate::bgp::socket::Password;
use crate::metrics::{Metrics, ProtocolLabel, ResultLabel};
use crate::model::ClusterModel;
use crate::model::static_file::{self, LoadError};
use crate::plan::{self, Announcements};

/// How long the watcher waits for a burst of file events to settle.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Errors that stop the speaker.
#[derive(Debug, thiserror::Error)]
pub enum SpeakerError {
    /// The static file is invalid at start (there is no last good content yet).
    #[error(transparent)]
    Config(#[from] LoadError),
    /// Watching the static file's directory or installing signal handlers failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Options of static mode.
#[derive(Debug, Clone)]
pub struct StaticOptions {
    /// This node's name (`--node-name`).
    pub node_name: String,
    /// The static file (`--static`).
    pub file: PathBuf,
    /// loadBalancerClass served besides "none".
    pub lb_class: String,
}

struct State {
    opts: StaticOptions,
    model: ClusterModel,
    passwords: BTreeMap<String, Password>,
    fingerprint: Vec<u8>,
    bgp: BgpAnnouncer,
    plan: Announcements,
    metrics: Arc<Metrics>,
    peer_errors: Vec<String>,
}

impl State {
    /// Static mode has no membership: every Ready node of the file counts as live.
    fn live_members(&self) -> BTreeSet<String> {
        self.model.nodes.iter().filter(|(_, n)| n.ready).map(|(name, _)| name.clone()).collect()
    }

    async fn replan(&mut self) {
        let new = plan::plan(&self.model, &self.opts.node_name, &self.live_members());
        log_changes(&self.plan, &new);
        let errors = self.bgp.apply(&self.model, &self.passwords, &new).await;
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        if errors != self.peer_errors {
            for e in &errors {
                tracing::error!("{e}");
            }
            self.peer_errors = errors;
        }
        let bgp_addrs: BTreeSet<IpAddr> = new.bgp_addresses().iter().map(|n| n.addr()).collect();
        self.metrics
            .announced
            .get_or_create(&ProtocolLabel { protocol: "bgp".into() })
            .set(len_i64(&bgp_addrs));
        self.metrics.announced.get_or_create(&ProtocolLabel { protocol: "l2".into() }).set(len_i64(&new.l2));
        self.plan = new;
    }

    async fn reload(&mut self) {
        match static_file::load(&self.opts.file, &self.opts.lb_class) {
            Ok(l) if l.fingerprint == self.fingerprint => {}
            Ok(l) => {
                for w in &l.warnings {
                    tracing::warn!("{w}");
                }
                tracing::info!(file = %self.opts.file.display(), "static file changed: applying");
                self.metrics.config_loads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
                self.model = l.model;
                self.passwords = l.passwords;
                self.fingerprint = l.fingerprint;
                self.replan().await;
            }
            Err(e) => {
                self.metrics.config_loads.get_or_create(&ResultLabel { result: "rejected".into() }).inc();
                tracing::error!(
                    "static file rejected, the last good content stays in force: {}",
                    one_line(&e.to_string())
                );
            }
        }
    }
}

fn len_i64<T>(c: impl IntoIterator<Item = T>) -> i64 {
    i64::try_from(c.into_iter().count()).unwrap_or(i64::MAX)
}

/// Joins a multi-line error into one line, so every error is one log line.
pub fn one_line(s: &str) -> String {
    let mut out = String::new();
    for l in s.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !out.is_empty() {
            out.push_str(if out.ends_with(':') { " " } else { "; " });
        }
        out.push_str(l);
    }
    out
}

/// One line per address whose announcement or withdrawal reason changed.
fn log_changes(old: &Announcements, new: &Announcements) {
    let (o, n) = (old.bgp_addresses(), new.bgp_addresses());
    for p in n.difference(&o) {
        let peers: Vec<&str> =
            new.bgp.iter().filter(|(_, r)| r.contains_key(p)).map(|(n, _)| n.as_str()).collect();
        tracing::info!(prefix = %p, peers = ?peers, "announcing by BGP");
    }
    for p in o.difference(&n) {
        tracing::info!(prefix = %p, "no longer announcing by BGP");
    }
    for (ip, ifs) in &new.l2 {
        if !old.l2.contains_key(ip) {
            tracing::info!(address = %ip, interfaces = ?ifs, "this node owns the address for ARP/NDP");
        }
    }
    for (ip, why) in &new.withdrawn {
        if old.withdrawn.get(ip) != Some(why) {
            tracing::info!(address = %ip, reason = %why, "not announced");
        }
    }
}

/// Runs static mode until SIGTERM or SIGINT; sessions end with Cease.
pub async fn run_static(opts: StaticOptions, metrics: Arc<Metrics>) -> Result<(), SpeakerError> {
    let io = |what: &str| {
        let what = what.to_owned();
        move |source| SpeakerError::Io { what, source }
    };
    let mut sigterm = signal(SignalKind::terminate()).map_err(io("installing the SIGTERM handler"))?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(io("installing the SIGINT handler"))?;
    let loaded = static_file::load(&opts.file, &opts.lb_class)?;
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    let mut changes = static_file::watch(&opts.file)
        .map_err(io(&format!("watching the directory of {}", opts.file.display())))?;
    metrics.config_loads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
    let mut state = State {
        bgp: BgpAnnouncer::new(&opts.node_name, metrics.clone()),
        model: loaded.model,
        passwords: loaded.passwords,
        fingerprint: loaded.fingerprint,
        plan: Announcements::default(),
        metrics: metrics.clone(),
        peer_errors: Vec::new(),
        opts,
    };
    tracing::info!(node = %state.opts.node_name, file = %state.opts.file.display(), "speaker started in static mode");
    if !state.model.nodes.contains_key(&state.opts.node_name) {
        tracing::warn!(
            node = %state.opts.node_name,
            "the static file has no Node of this name: nothing will be announced until it does"
        );
    }
    state.replan().await;
    metrics.set_ready();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            Some(()) = changes.recv() => {
                // Debounce: an editor's save is several events; read once they settle.
                tokio::time::sleep(DEBOUNCE).await;
                while changes.try_recv().is_ok() {}
                state.reload().await;
            }
            _ = tick.tick() => state.bgp.tick(),
            _ = sigterm.recv() => {
                tracing::info!("SIGTERM: closing sessions");
                break;
            }
            _ = sigint.recv() => {
                tracing::info!("SIGINT: closing sessions");
                break;
            }
        }
    }
    state.bgp.shutdown().await;
    tracing::info!("speaker stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn errors_become_one_line() {
        let e = "f.yaml: invalid configuration:\n  document 1: a\n  document 2: b";
        assert_eq!(super::one_line(e), "f.yaml: invalid configuration: document 1: a; document 2: b");
    }
}
