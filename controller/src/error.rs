//! The controller's one error type, and why one API call failed.

use std::time::Duration;

use thiserror::Error;

/// Why one API call did not succeed.
#[derive(Debug, Error)]
pub enum CallError {
    /// The API refused or failed the request.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The API accepted the request (or not even that) and did not answer in time.
    #[error("no answer from the API within {0:?}")]
    NoAnswer(Duration),
    /// Not sent, or given up: this replica's leader term ended (see `fence.rs`).
    #[error("not sent: this replica's leader term ended (the Lease was not renewed in time)")]
    NotLeader,
}

impl CallError {
    /// The API's own answer, when it gave one (e.g. to tell a 404 or a 409).
    pub fn status(&self) -> Option<u16> {
        match self {
            CallError::Api(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }
}

/// Why a reconciliation or the controller failed.
#[derive(Debug, Error)]
pub enum Error {
    /// A write to the API failed (retried by the error policy).
    #[error("cannot write {what} of {object}: {source}")]
    Write {
        /// What was written, e.g. `status.loadBalancer`.
        what: &'static str,
        /// `kind namespace/name`.
        object: String,
        /// Why.
        #[source]
        source: CallError,
    },
    /// A read from the API failed.
    #[error("cannot read {what}: {source}")]
    Read {
        /// What was read.
        what: String,
        /// Why.
        #[source]
        source: CallError,
    },
    /// A watch ended for good (its reflector's store was dropped).
    #[error("the {0} watch stopped")]
    WatchStopped(&'static str),
    /// Another replica holds the leader lease now, or renewal failed for too long.
    #[error("lost the leader lease; exiting so that only one replica allocates addresses")]
    LostLeadership,
}

impl Error {
    /// A short stable label for `ferrolb_controller_reconcile_errors_total{error=...}`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Write { source: CallError::NotLeader, .. }
            | Error::Read { source: CallError::NotLeader, .. } => "not_leader",
            Error::Write { source: CallError::NoAnswer(_), .. }
            | Error::Read { source: CallError::NoAnswer(_), .. } => "timeout",
            Error::Write { source, .. } if source.status() == Some(409) => "conflict",
            Error::Write { .. } => "write",
            Error::Read { .. } => "read",
            Error::WatchStopped(_) => "watch_stopped",
            Error::LostLeadership => "lost_leadership",
        }
    }
}
