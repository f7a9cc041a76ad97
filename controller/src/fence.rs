//! Deadlines on API calls, and the fence that keeps a leader whose term ended from writing.
//!
//! Every API call the controller makes itself has a deadline ([`within`]); watches are
//! bounded by the client's read timeout instead (see `main.rs`). The leader's work goes
//! through a [`Fence`]: a call is sent only while the leader [`Term`] runs, and one still
//! in flight when the term ends is abandoned. The term ends `renewDeadline` after the last
//! successful renewal round began (`leader.rs`), which is before any other replica can
//! judge the Lease expired: so no write leaves this replica once another may lead.
//!
//! A write that left in time may still land late (a paused process, a slow link): the
//! timer cannot stop that. The apiserver does: every allocation write is conditional on
//! the resourceVersion it was decided from (`service_write.rs`), so it is refused once
//! the new leader has written the object. The timer stays, as the first line.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::CallError;

/// How long one API call may take: the apiserver may accept a request and never answer.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one API call, failing it as [`CallError::NoAnswer`] after `limit`.
pub async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r.map_err(CallError::Api),
        Err(_) => Err(CallError::NoAnswer(limit)),
    }
}

/// The leader's side of a term: the elector extends it after each successful renewal.
#[derive(Debug)]
pub struct Term {
    ends: watch::Sender<Instant>,
}

impl Term {
    /// A term that ends at `ends` unless extended.
    pub fn until(ends: Instant) -> Self {
        Term { ends: watch::Sender::new(ends) }
    }

    /// When the term ends, as far as renewals so far go.
    pub fn ends(&self) -> Instant {
        *self.ends.borrow()
    }

    /// Moves the end to `ends` (never earlier: a slow round must not shorten a later one's term).
    pub fn extend(&self, ends: Instant) {
        self.ends.send_if_modified(|cur| {
            let later = ends > *cur;
            if later {
                *cur = ends;
            }
            later
        });
    }

    /// The fence the leader's work writes through.
    pub fn fence(&self) -> Fence {
        Fence { term: Some(self.ends.subscribe()) }
    }
}

/// Lets API calls through only while the leader's term runs; cheap to clone.
#[derive(Debug, Clone)]
pub struct Fence {
    /// `None`: no leader election, the only replica; never fenced.
    term: Option<watch::Receiver<Instant>>,
}

impl Fence {
    /// No leader election: calls are only bounded by their deadline.
    pub fn open() -> Self {
        Fence { term: None }
    }

    /// Whether a call may be sent at `now`.
    pub fn admits(&self, now: Instant) -> bool {
        self.term.as_ref().is_none_or(|t| *t.borrow() > now)
    }

    /// Sends one API call if the term still runs, and abandons it at `limit` or at the end
    /// of the term, whichever comes first. The check is made right before the call is first
    /// polled, i.e. sent: the term ends with a margin before another replica may lead, and
    /// that margin is what a request sent just in time has to reach the apiserver.
    pub async fn call<T>(
        &self,
        limit: Duration,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, CallError> {
        let Some(term) = &self.term else {
            return within(limit, call).await;
        };
        if !self.admits(Instant::now()) {
            return Err(CallError::NotLeader);
        }
        tokio::select! {
            biased;
            r = within(limit, call) => r,
            () = ended(term.clone()) => Err(CallError::NotLeader),
        }
    }
}

/// Resolves once the term has ended: sleeps until its end, and again if it was extended meanwhile.
async fn ended(term: watch::Receiver<Instant>) {
    loop {
        let ends = *term.borrow();
        tokio::time::sleep_until(ends).await;
        if *term.borrow() <= ends {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_pass_only_while_the_term_runs_and_are_abandoned_when_it_ends() {
        let t0 = Instant::now();
        let term = Term::until(t0 + Duration::from_secs(2));
        let fence = term.fence();
        assert!(fence.call(CALL_TIMEOUT, async { Ok(1) }).await.is_ok());

        // In flight across an extension: it goes on; across the (extended) end: abandoned.
        let slow = fence.call(CALL_TIMEOUT, std::future::pending::<Result<(), kube::Error>>());
        let extend = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            term.extend(t0 + Duration::from_secs(3));
            // Never shortened by a late, older round.
            term.extend(t0 + Duration::from_secs(2));
        };
        let (r, ()) = tokio::join!(slow, extend);
        assert!(matches!(r, Err(CallError::NotLeader)));
        assert_eq!(Instant::now(), t0 + Duration::from_secs(3));

        // After the end nothing is even started.
        let mut started = false;
        let r = fence
            .call(CALL_TIMEOUT, async {
                started = true;
                Ok(())
            })
            .await;
        assert!(matches!(r, Err(CallError::NotLeader)) && !started);
        assert!(!fence.admits(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn every_call_has_a_deadline_fenced_or_not() {
        let hangs = || std::future::pending::<Result<(), kube::Error>>();
        let r = Fence::open().call(Duration::from_secs(5), hangs()).await;
        assert!(matches!(r, Err(CallError::NoAnswer(d)) if d == Duration::from_secs(5)));
        let term = Term::until(Instant::now() + Duration::from_secs(60));
        let r = term.fence().call(Duration::from_secs(5), hangs()).await;
        assert!(matches!(r, Err(CallError::NoAnswer(_))));
    }
}
