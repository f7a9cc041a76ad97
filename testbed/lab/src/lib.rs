//! Network-namespace labs with real routers (BIRD 2, FRR, GoBGP, ExaBGP) and clients.
//!
//! A [`Lab`] is one L2 segment (a bridge in its own namespace) joining a router, N
//! nodes and a client, plus a routed router↔client link; see [`addressing`] for the fixed
//! addresses. Everything it starts dies with it, on drop and on panic.

pub mod addressing;
pub mod binary;
pub mod bootstrap;
pub mod client;
pub mod fixtures;
pub mod https;
pub mod keepalived;
pub mod kubeapi;
pub mod lab;
pub mod mrt;
pub mod netns;
pub mod process;
pub mod routers;
pub mod runtime;
pub mod speaker;
pub mod wait;

use std::time::Duration;

pub use lab::{Lab, LabConfig};

/// Where labs keep configs, sockets and logs (`<BASE_DIR>/<lab id>/`), and the real
/// control plane its clusters and the kubelet host's state.
pub const BASE_DIR: &str = "/tmp/ferrolb-testbed";

/// Errors of the testbed; each carries what was being done.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command failed or could not start.
    #[error("command `{command}` failed: {detail}")]
    Command { command: String, detail: String },
    /// A namespace could not be entered or made.
    #[error("namespace: {0}")]
    Namespace(String),
    /// A helper thread failed.
    #[error("thread: {0}")]
    Thread(String),
    /// A wait-until helper ran out of time.
    #[error("timed out after {after:?} waiting for {what}; last seen: {last}")]
    Timeout { what: String, after: Duration, last: String },
    /// Output of a router or tool could not be understood.
    #[error("parse: {0}")]
    Parse(String),
    /// Something a scenario (the demo) expects does not hold.
    #[error("check failed: {0}")]
    Check(String),
    /// The machine lacks something the lab needs.
    #[error("missing prerequisite: {0}")]
    Missing(String),
    /// An image archive that is malformed or differs from what the Dockerfile builds.
    #[error("image {archive}: {problem}")]
    Image { archive: String, problem: String },
    /// File or socket I/O.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
