//! The controller's one error type.

use thiserror::Error;

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
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A read from the API failed.
    #[error("cannot read {what}: {source}")]
    Read {
        /// What was read.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
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
            Error::Write { .. } => "write",
            Error::Read { .. } => "read",
            Error::WatchStopped(_) => "watch_stopped",
            Error::LostLeadership => "lost_leadership",
        }
    }
}
