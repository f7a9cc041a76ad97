//! The speaker's event loop (holo shape): one task owns the [`State`](state) and its
//! parts; each turn takes one typed [`Input`] from the sources (the model source, the
//! parts' receivers, the timers, the signals) and processes it in one place
//! (`event_loop`). Both model sources (the static file's watcher, or the Kubernetes
//! watchers of [`crate::cluster`]) feed the same [`ClusterModel`](crate::model::ClusterModel)
//! calls; everything after that is one code path, ending in `State::replan`.
//!
//! Files, from the bottom up (nothing imports a file above it):
//! * `options`: what each mode is started with;
//! * `parts/`: what the loop owns, each part with its own state and knowing nothing of
//!   the loop (feed, cluster, gate, l2, rotation, drain);
//! * `input`: the [`Input`] enum and the sources it comes from;
//! * `state`: the parts together, and `replan`, where every change ends;
//! * `on_cluster`, `on_l2`, `on_rotation`, `static_mode` (its file), `shutdown`: what
//!   each input does, with the parts it needs;
//! * `event_loop`: the loop and `process`, the one match over every input;
//! * `kube`, `static_mode`: the entry points, which spawn the tasks;
//! * `replay`: a recorded run's inputs fed back into a state with no I/O.

mod event_loop;
mod input;
mod kube;
mod on_cluster;
mod on_l2;
mod on_rotation;
mod options;
mod parts;
mod replay;
mod shutdown;
mod state;
mod static_mode;

pub use input::{Input, Recorded};
pub use kube::run_kube;
pub use options::{DEFAULT_DRAIN_MAX_DELAY, DEFAULT_DRAIN_ON_SHUTDOWN, KubeOptions, Options, StaticOptions};
pub use parts::drain::{DrainTimers, HANDOVER_GRACE};
pub use parts::gate::{GATE_STARTUP_HOLD, GateSignal};
pub use replay::replay;
pub use static_mode::run_static;

pub use crate::error::SpeakerError;

#[cfg(test)]
mod tests;
