//! The FSM's timers (RFC 4271 §8), ConnectRetryTimer, HoldTimer and KeepaliveTimer, held
//! as deadlines for [`Fsm::poll_timeout`](super::Fsm::poll_timeout).
use std::time::Instant;

/// The FSM's timers (RFC 4271 §8); their order breaks ties between equal deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    /// ConnectRetryTimer, also used for the reconnect backoff in Idle.
    ConnectRetry,
    /// HoldTimer.
    Hold,
    /// KeepaliveTimer.
    Keepalive,
}

impl Timer {
    const ALL: [Timer; 3] = [Timer::ConnectRetry, Timer::Hold, Timer::Keepalive];
}

/// Deadlines of the armed timers, indexed by [`Timer`].
#[derive(Debug, Default)]
pub(super) struct Timers([Option<Instant>; 3]);

impl Timers {
    /// Arms `timer` to fire at `at`, replacing its previous deadline.
    pub(super) fn arm(&mut self, timer: Timer, at: Instant) {
        self.0[timer as usize] = Some(at);
    }

    /// Stops `timer`.
    pub(super) fn cancel(&mut self, timer: Timer) {
        self.0[timer as usize] = None;
    }

    /// Stops every timer.
    pub(super) fn cancel_all(&mut self) {
        self.0 = [None; 3];
    }

    /// The earliest deadline; `None` while no timer runs.
    pub(super) fn next(&self) -> Option<Instant> {
        self.0.iter().flatten().min().copied()
    }

    /// The timers due at `now` with their deadlines, earliest first.
    pub(super) fn due(&self, now: Instant) -> Vec<(Instant, Timer)> {
        let mut due: Vec<(Instant, Timer)> = Timer::ALL
            .into_iter()
            .filter_map(|t| self.0[t as usize].filter(|at| *at <= now).map(|at| (at, t)))
            .collect();
        due.sort();
        due
    }

    /// Stops `timer` and returns true if it is still armed for `at`: one that an
    /// earlier timer stopped or re-armed must not fire.
    pub(super) fn take(&mut self, timer: Timer, at: Instant) -> bool {
        let slot = &mut self.0[timer as usize];
        if *slot != Some(at) {
            return false;
        }
        *slot = None;
        true
    }
}
