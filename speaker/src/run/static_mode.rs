//! Static mode: the model comes from a file, re-read whenever it changes.

use std::sync::Arc;

use super::event_loop::serve;
use super::input::{Cause, Sources};
use super::options::StaticOptions;
use super::state::State;
use crate::error::{SpeakerError, one_line};
use crate::metrics::{Metrics, ResultLabel};
use crate::model::static_file;

/// Runs static mode until SIGTERM or SIGINT; sessions end with Cease.
pub async fn run_static(opts: StaticOptions, metrics: Arc<Metrics>) -> Result<(), SpeakerError> {
    let sources = Sources::new()?;
    let StaticOptions { options, file } = opts;
    let loaded = static_file::load(&file, &options.lb_class)?;
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    let changes = static_file::watch(&file).map_err(|source| SpeakerError::Io {
        what: format!("watching the directory of {}", file.display()),
        source,
    })?;
    metrics.config_loads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
    let mut state = State::new(options, metrics.clone());
    state.model = loaded.model;
    state.passwords = loaded.passwords;
    state.fingerprint = loaded.fingerprint;
    tracing::info!(node = %state.opts.node_name, file = %file.display(), "speaker started in static mode");
    state.file = Some(file);
    if !state.model.nodes.contains_key(&state.opts.node_name) {
        tracing::warn!(
            node = %state.opts.node_name,
            "the static file has no Node of this name: nothing will be announced until it does"
        );
    }
    state.ensure_l2().await.map_err(SpeakerError::L2)?;
    state.replan(&Cause::new("config", "speaker started")).await;
    metrics.set_ready();
    serve(state, sources.with_file_changes(changes), None).await
}

impl State {
    /// Applies the static file when its content changed; an invalid one leaves the last
    /// good content in force.
    pub(super) async fn reload(&mut self) {
        let Some(file) = self.file.clone() else { return };
        let started = std::time::Instant::now();
        let text = match static_file::read(&file) {
            Ok(t) if t.digest == self.fingerprint => {
                // An event about another file of the directory, or the same text written
                // again: nothing to parse (password files are polled on their own).
                tracing::debug!(file = %file.display(), "static file unchanged: not parsed again");
                return;
            }
            other => other,
        };
        match text.and_then(|t| static_file::parse(&file, t, &self.opts.lb_class)) {
            Ok(l) => {
                for w in &l.warnings {
                    tracing::warn!("{w}");
                }
                tracing::info!(file = %file.display(), "static file changed: applying");
                self.metrics.config_loads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
                // Only what differs is marked changed: the planner recomputes just that.
                let read = started.elapsed();
                self.model.replace_with(l.model);
                self.passwords = l.passwords;
                self.fingerprint = l.fingerprint;
                self.ensure_l2_logged().await;
                self.replan(&Cause::new("config", "static file changed")).await;
                // Where a big file's time goes: reading, parsing and validating it, then
                // planning and handing the changes to the sessions.
                tracing::info!(
                    read_ms = read.as_millis(),
                    plan_ms = (started.elapsed() - read).as_millis(),
                    "static file applied"
                );
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
