//! `kubectl ferrolb`: what ferrolb announces, where, and why, read from the API.
//!
//! The reports are pure functions from a [`Snapshot`] of fetched objects to rows
//! ([`report`]); [`fetch`] is the only code that talks to the apiserver, and it only
//! reads (the `ferrolb-viewer` ClusterRole in manifests/base/viewer-rbac.yaml suffices).

pub mod cli;
pub mod fetch;
pub mod render;
pub mod report;
pub mod snapshot;

pub use snapshot::Snapshot;
