//! The event loop of both modes (holo shape): one task owns the [`State`]; the model
//! source, membership, the gate, the clock and signals wake it.

use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::gate::gate_changed;
use super::l2::l2_changed;
use super::rotation;
use super::shutdown::shutdown;
use super::state::{Cause, State};
use crate::cluster::Update;
use crate::error::SpeakerError;

pub(super) type Signals = (tokio::signal::unix::Signal, tokio::signal::unix::Signal);

/// The SIGTERM and SIGINT streams that end the loop.
pub(super) fn signals() -> Result<Signals, SpeakerError> {
    let io = |what: &str| {
        let what = what.to_owned();
        move |source| SpeakerError::Io { what, source }
    };
    let sigterm = signal(SignalKind::terminate()).map_err(io("installing the SIGTERM handler"))?;
    let sigint = signal(SignalKind::interrupt()).map_err(io("installing the SIGINT handler"))?;
    Ok((sigterm, sigint))
}

/// Receives from an optional channel (pending forever without one or once it closed).
async fn recv_opt<T>(rx: &mut Option<mpsc::Receiver<T>>) -> T {
    match rx.as_mut() {
        Some(r) => match r.recv().await {
            Some(v) => v,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// Receives from an optional channel: None once it closed, pending forever without one.
async fn recv_or_closed<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx.as_mut() {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `t`, or forever without one.
async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// The event loop of both modes, then the shutdown sequence.
pub(super) async fn serve(
    mut state: State,
    mut changes: Option<mpsc::Receiver<()>>,
    mut updates: Option<mpsc::Receiver<Update>>,
    (mut sigterm, mut sigint): Signals,
) -> Result<(), SpeakerError> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut l2_tick = tokio::time::interval(Duration::from_millis(200));
    // Kubernetes mode: L2 that could not start (the Secret not there yet) is retried.
    let mut l2_retry = tokio::time::interval(Duration::from_secs(10));
    let mut file_poll = tokio::time::interval(rotation::FILE_POLL);
    loop {
        state.metrics.beat();
        let watched = state.l2.as_ref().map(super::l2::L2Part::watch);
        let next_drain = state.drains.poll_timeout();
        let next_join = state.l2.as_ref().and_then(super::l2::L2Part::next_join);
        let retry_l2 = state.cluster.is_some() && state.l2_error.is_some();
        let gate = state.gate_watch();
        let gate_hold = state.gate_hold_until();
        let secrets = state.secrets_watch();
        let poll_files = state.polls_files();
        tokio::select! {
            () = rotation::secrets_changed(secrets) => state.on_secrets().await,
            _ = file_poll.tick(), if poll_files => state.poll_files().await,
            () = sleep_until_opt(gate_hold) => state.end_gate_hold(),
            signal = gate_changed(gate) => state.on_gate_signal(signal).await,
            () = sleep_until_opt(next_drain) => {
                state.replan(&Cause::new("drain", "--drain-max-delay or the L2 handover grace passed")).await;
            }
            () = l2_changed(watched) => state.on_l2_change().await,
            () = sleep_until_opt(next_join) => state.on_l2_change().await,
            _ = l2_tick.tick(), if state.l2.is_some() => state.on_l2_change().await,
            // The watcher reads a complete file at once and debounces the rest.
            () = recv_opt(&mut changes) => state.reload().await,
            u = recv_or_closed(&mut updates) => match u {
                Some(u) => {
                    if let Some(rx) = updates.as_mut() {
                        state.on_updates(u, rx).await;
                    }
                }
                None => {
                    tracing::error!("every API watcher stopped; keeping the announcements until SIGTERM");
                    updates = None;
                }
            },
            _ = l2_retry.tick(), if retry_l2 => {
                state.ensure_l2_logged().await;
                if state.l2.is_some() {
                    state.replan(&Cause::new("config", "L2 started")).await;
                }
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
    shutdown(state).await;
    Ok(())
}
