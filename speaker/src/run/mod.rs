//! The speaker's event loop (holo shape): one task owns the model, the plan and the
//! announcers; the model source (the static file's watcher, or the Kubernetes watchers
//! of [`crate::cluster`]), membership, the clock and signals feed it. Both sources feed
//! the same [`ClusterModel`](crate::model::ClusterModel) calls; everything after that is
//! one code path.
//!
//! Files: `options` (what each mode is started with), `static_mode` and `kube` (the
//! two model sources and their entry points), `event_loop` (the `select!` over every
//! input), `state` (what the loop owns, and `replan`, where every change ends), `l2`
//! (membership, the claim gate, the L2 announcer), `gate` (pod readiness gates),
//! `rotation` (keys and passwords), `drain` (drain timers), `shutdown` (make before
//! break).

mod drain;
mod event_loop;
mod gate;
mod kube;
mod l2;
mod options;
mod rotation;
mod shutdown;
mod state;
mod static_mode;

pub use drain::{DrainTimers, HANDOVER_GRACE};
pub use gate::GATE_STARTUP_HOLD;
pub use kube::run_kube;
pub use options::{DEFAULT_DRAIN_MAX_DELAY, DEFAULT_DRAIN_ON_SHUTDOWN, KubeOptions, Options, StaticOptions};
pub use static_mode::run_static;

pub use crate::error::SpeakerError;

#[cfg(test)]
mod tests;
