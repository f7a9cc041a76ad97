//! Accepting connections without spinning: an accept error (EMFILE, ENFILE, ENOBUFS…)
//! is usually still there on the next call, and a loop that retries at once burns a core
//! and floods the log. Every listener of the speaker, the controller and bootstrap (BGP,
//! metrics) accepts through [`accept`].

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// When to retry after a failed accept and whether to log it: the pause doubles from
/// [`AcceptBackoff::MIN`] to [`AcceptBackoff::MAX`] and starts over after a success;
/// at most one log line per [`AcceptBackoff::MAX`]. Sans-IO: the caller sleeps.
#[derive(Debug, Clone)]
pub struct AcceptBackoff {
    next: Duration,
    logged: Option<Instant>,
    /// Errors since the last logged one (reported with the next line).
    quiet: u64,
}

impl Default for AcceptBackoff {
    fn default() -> Self {
        AcceptBackoff { next: Self::MIN, logged: None, quiet: 0 }
    }
}

/// What to do after one failed accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Sleep this long before accepting again.
    pub pause: Duration,
    /// Log this error, with this many earlier ones that were not logged (None: stay quiet).
    pub log: Option<u64>,
}

impl AcceptBackoff {
    /// The first pause.
    pub const MIN: Duration = Duration::from_millis(5);
    /// The longest pause, and the shortest interval between two log lines.
    pub const MAX: Duration = Duration::from_secs(1);

    /// An accept failed at `now`.
    pub fn failed(&mut self, now: Instant) -> Retry {
        let pause = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        let log = match self.logged {
            Some(t) if now.saturating_duration_since(t) < Self::MAX => {
                self.quiet += 1;
                None
            }
            _ => {
                self.logged = Some(now);
                Some(std::mem::take(&mut self.quiet))
            }
        };
        Retry { pause, log }
    }

    /// An accept succeeded: the next failure pauses [`AcceptBackoff::MIN`] again.
    pub fn succeeded(&mut self) {
        self.next = Self::MIN;
    }
}

/// Something that accepts connections (a tokio listener; a fake in tests).
pub trait Accept {
    /// One accepted connection and its peer.
    type Conn;
    /// Waits for the next connection.
    fn accept_one(&self) -> impl Future<Output = std::io::Result<Self::Conn>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Conn = (tokio::net::TcpStream, std::net::SocketAddr);

    fn accept_one(&self) -> impl Future<Output = std::io::Result<Self::Conn>> + Send {
        self.accept()
    }
}

/// The next connection of `listener`; failed accepts are retried after `backoff`'s pause
/// and logged (at WARN, at most once a second) naming `what`, e.g. "metrics".
pub async fn accept<L: Accept>(listener: &L, backoff: &mut AcceptBackoff, what: &str) -> L::Conn {
    loop {
        match listener.accept_one().await {
            Ok(c) => {
                backoff.succeeded();
                return c;
            }
            Err(e) => {
                let retry = backoff.failed(Instant::now());
                if let Some(more) = retry.log {
                    tracing::warn!(listener = what, error = %e, more_errors = more, pause = ?retry.pause, "cannot accept a connection; pausing");
                }
                tokio::time::sleep(retry.pause).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn pauses_double_to_a_second_and_start_over_after_a_success() {
        let mut b = AcceptBackoff::default();
        let t0 = Instant::now();
        let pauses: Vec<u64> =
            (0..10).map(|_| u64::try_from(b.failed(t0).pause.as_millis()).unwrap()).collect();
        assert_eq!(pauses, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed(t0).pause, AcceptBackoff::MIN);
    }

    #[test]
    fn one_log_line_per_interval_counting_the_quiet_ones() {
        let mut b = AcceptBackoff::default();
        let t0 = Instant::now();
        assert_eq!(b.failed(t0).log, Some(0));
        assert_eq!(b.failed(t0 + Duration::from_millis(5)).log, None);
        assert_eq!(b.failed(t0 + Duration::from_millis(999)).log, None);
        assert_eq!(b.failed(t0 + Duration::from_secs(1)).log, Some(2));
        // A success resets the pause, not the log interval: a flapping error stays quiet.
        b.succeeded();
        assert_eq!(b.failed(t0 + Duration::from_millis(1500)).log, None);
    }

    #[test]
    fn accept_errors_pause_5ms_doubling_to_1s_and_log_once_a_second() {
        let mut b = AcceptBackoff::default();
        let t0 = Instant::now();
        let pauses: Vec<u128> = (0..10).map(|_| b.failed(t0).pause.as_millis()).collect();
        assert_eq!(pauses, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed(t0).pause, AcceptBackoff::MIN);
        let mut b = AcceptBackoff::default();
        assert_eq!(b.failed(t0).log, Some(0));
        assert_eq!(b.failed(t0 + Duration::from_millis(500)).log, None);
        assert_eq!(b.failed(t0 + Duration::from_secs(1)).log, Some(1));
    }

    /// Fails every accept, like a process out of file descriptors.
    struct Exhausted(AtomicU32);

    impl Accept for Exhausted {
        type Conn = ();
        fn accept_one(&self) -> impl Future<Output = std::io::Result<()>> + Send {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Err(std::io::Error::from_raw_os_error(libc::EMFILE)))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_listener_is_retried_about_once_a_second_not_in_a_spin() {
        let l = Exhausted(AtomicU32::new(0));
        let mut b = AcceptBackoff::default();
        let r = tokio::time::timeout(Duration::from_secs(10), accept(&l, &mut b, "test")).await;
        assert!(r.is_err(), "no connection ever comes");
        // 5 ms doubling to 1 s: 8 attempts in the first 1.3 s, then one a second.
        let attempts = l.0.load(Ordering::SeqCst);
        assert!((15..=20).contains(&attempts), "{attempts} attempts in 10 s");
    }
}
