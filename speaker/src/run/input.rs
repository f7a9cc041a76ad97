//! What wakes the event loop: one typed [`Input`], and the [`Sources`] it comes from.
//!
//! ```text
//!   watchers (kube) ──Update──┐      static file watcher ──┐
//!   readiness, announcers ────┤ gate  membership ──────────┤ view, suspects
//!   Secrets, key/pw files ────┤       drain / join / hold ─┤ timers
//!   SIGTERM, SIGINT ──────────┘       ticks (BGP, L2) ─────┘
//!                   Sources::next(Wakeups) ─▶ Input ─▶ State::process
//! ```
//!
//! The tasks behind the sources are spawned where each mode starts (`super::kube`,
//! `super::static_mode`) and by the parts themselves (membership, the announcers);
//! [`Wakeups`] is what the state asks to be woken for at this turn (deadlines and the
//! receivers of the parts that exist).

use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::parts::gate::{GateSignal, GateWatch, gate_changed};
use super::parts::l2::{L2Watch, l2_changed};
use super::parts::rotation::{FILE_POLL, secrets_changed};
use crate::cluster::Update;
use crate::cluster::secrets::Watched;
use crate::error::SpeakerError;
use ferrolb_proto::time::sleep_until;

/// Watcher updates taken in one input at most (more are the next input's).
const BATCH: usize = 1024;

/// One thing that happened, as the event loop processes it.
#[derive(Debug, Clone)]
pub enum Input {
    /// Kubernetes mode: watcher updates (one, and what else was queued): applied
    /// together, planned once.
    Updates(Vec<Update>),
    /// Kubernetes mode: every watcher stopped.
    WatchersStopped,
    /// Static mode: the file (or its directory) changed; it is read when processed.
    FileChanged,
    /// Kubernetes mode: a watched Secret changed.
    SecretsChanged,
    /// Time to re-read the key and password files.
    PollFiles,
    /// Kubernetes mode: an input of the readiness gate changed.
    Gate(GateSignal),
    /// The readiness gate's startup hold ran out.
    GateHoldOver,
    /// A BGP drain or an L2 handover ran out.
    DrainDue,
    /// Membership's view, settledness, suspects or take-over notices changed.
    Membership,
    /// A joining member's grace passed: it becomes a candidate.
    JoinDue,
    /// The L2 tick (the claim rule's timers).
    L2Tick,
    /// Kubernetes mode: L2 could not start (the Secret not there yet); try again.
    L2Retry,
    /// The BGP sessions' one-second tick.
    BgpTick,
    /// SIGTERM or SIGINT: make before break, then stop.
    Stop(&'static str),
}

/// An input and when it came: what a run records and a replay feeds
/// ([`super::replay`]).
#[derive(Debug, Clone)]
pub struct Recorded {
    /// When the loop took it.
    pub at: Instant,
    /// What it was.
    pub input: Input,
}

/// What the state asks to be woken for at this turn.
#[derive(Default)]
pub(super) struct Wakeups {
    pub(super) secrets: Option<watch::Receiver<Watched>>,
    pub(super) poll_files: bool,
    pub(super) gate: Option<GateWatch>,
    pub(super) gate_hold: Option<Instant>,
    pub(super) drain: Option<Instant>,
    pub(super) l2: Option<L2Watch>,
    pub(super) join: Option<Instant>,
    pub(super) l2_ticks: bool,
    pub(super) retry_l2: bool,
}

/// Where inputs come from: the model source's channel, the signals and the ticks.
pub(super) struct Sources {
    /// Static mode: the file watcher (debounced).
    changes: Option<mpsc::Receiver<()>>,
    /// Kubernetes mode: the watchers.
    updates: Option<mpsc::Receiver<Update>>,
    sigterm: Signal,
    sigint: Signal,
    bgp_tick: Interval,
    l2_tick: Interval,
    l2_retry: Interval,
    file_poll: Interval,
}

impl Sources {
    /// Installs the signal handlers (before anything else starts, so a SIGTERM during
    /// startup is not lost) and the ticks.
    pub(super) fn new() -> Result<Self, SpeakerError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |source| SpeakerError::Io { what, source }
        };
        let sigterm = signal(SignalKind::terminate()).map_err(io("installing the SIGTERM handler"))?;
        let sigint = signal(SignalKind::interrupt()).map_err(io("installing the SIGINT handler"))?;
        let every = |d: Duration| {
            let mut i = tokio::time::interval(d);
            i.set_missed_tick_behavior(MissedTickBehavior::Burst);
            i
        };
        Ok(Sources {
            changes: None,
            updates: None,
            sigterm,
            sigint,
            bgp_tick: every(Duration::from_secs(1)),
            l2_tick: every(Duration::from_millis(200)),
            // Kubernetes mode: L2 that could not start (the Secret not there yet).
            l2_retry: every(Duration::from_secs(10)),
            file_poll: every(FILE_POLL),
        })
    }

    /// Static mode: the file watcher's notifications.
    pub(super) fn with_file_changes(mut self, changes: mpsc::Receiver<()>) -> Self {
        self.changes = Some(changes);
        self
    }

    /// Kubernetes mode: the watchers' updates.
    pub(super) fn with_updates(mut self, updates: mpsc::Receiver<Update>) -> Self {
        self.updates = Some(updates);
        self
    }

    /// The next input.
    pub(super) async fn next(&mut self, w: Wakeups) -> Input {
        tokio::select! {
            () = secrets_changed(w.secrets) => Input::SecretsChanged,
            _ = self.file_poll.tick(), if w.poll_files => Input::PollFiles,
            () = sleep_until(w.gate_hold) => Input::GateHoldOver,
            signal = gate_changed(w.gate) => Input::Gate(signal),
            () = sleep_until(w.drain) => Input::DrainDue,
            () = l2_changed(w.l2) => Input::Membership,
            () = sleep_until(w.join) => Input::JoinDue,
            _ = self.l2_tick.tick(), if w.l2_ticks => Input::L2Tick,
            () = recv_opt(&mut self.changes) => Input::FileChanged,
            u = recv_or_closed(&mut self.updates) => match u {
                Some(first) => {
                    let mut batch = vec![first];
                    while batch.len() < BATCH
                        && let Some(u) = self.updates.as_mut().and_then(|rx| rx.try_recv().ok())
                    {
                        batch.push(u);
                    }
                    Input::Updates(batch)
                }
                None => {
                    self.updates = None;
                    Input::WatchersStopped
                }
            },
            _ = self.l2_retry.tick(), if w.retry_l2 => Input::L2Retry,
            _ = self.bgp_tick.tick() => Input::BgpTick,
            _ = self.sigterm.recv() => Input::Stop("SIGTERM"),
            _ = self.sigint.recv() => Input::Stop("SIGINT"),
        }
    }
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

/// Why the L2 owned set changed (log text and metric label).
pub(super) struct Cause {
    pub(super) label: &'static str,
    pub(super) text: String,
}

impl Cause {
    pub(super) fn new(label: &'static str, text: impl Into<String>) -> Self {
        Cause { label, text: text.into() }
    }
}
