//! Wait-until helpers: poll an observation until it satisfies a test or time runs out.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use crate::Error;

/// How often [`until`] polls.
pub const POLL: Duration = Duration::from_millis(50);

/// Polls `probe` until it returns `Ok(Some(value))`, or fails with the last
/// observation (`Ok(None)` or an error's text) after `timeout`.
pub fn until<T>(
    what: &str,
    timeout: Duration,
    probe: impl FnMut() -> Result<Option<T>, Error>,
) -> Result<T, Error> {
    until_every(what, timeout, POLL, probe)
}

/// [`until`], polling every `poll`: for probes cheap enough to run every few
/// milliseconds when the thing timed takes a tenth of a second.
pub fn until_every<T>(
    what: &str,
    timeout: Duration,
    poll: Duration,
    mut probe: impl FnMut() -> Result<Option<T>, Error>,
) -> Result<T, Error> {
    let start = Instant::now();
    loop {
        let last = match probe() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => "condition not met".to_string(),
            Err(e) => e.to_string(),
        };
        if start.elapsed() >= timeout {
            return Err(Error::Timeout { what: what.into(), after: timeout, last });
        }
        std::thread::sleep(poll);
    }
}

/// Polls `check` until it holds.
pub fn until_holds(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) -> Result<(), Error> {
    until(what, timeout, || Ok(check().then_some(())))
}

/// Polls `observe` until `ok(observation)` holds; the error shows the last observation.
pub fn until_value<T: Debug>(
    what: &str,
    timeout: Duration,
    mut observe: impl FnMut() -> Result<T, Error>,
    ok: impl Fn(&T) -> bool,
) -> Result<T, Error> {
    let start = Instant::now();
    loop {
        let seen = observe();
        let last = match seen {
            Ok(v) if ok(&v) => return Ok(v),
            Ok(v) => format!("{v:?}"),
            Err(e) => e.to_string(),
        };
        if start.elapsed() >= timeout {
            return Err(Error::Timeout { what: what.into(), after: timeout, last });
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_the_first_satisfying_value() {
        let mut n = 0;
        let v = until("n reaches 3", Duration::from_secs(5), || {
            n += 1;
            Ok((n >= 3).then_some(n))
        })
        .unwrap();
        assert_eq!(v, 3);
    }

    #[test]
    fn times_out_with_the_last_observation() {
        let err =
            until_value("never", Duration::from_millis(120), || Ok(7), |v| *v == 8).unwrap_err().to_string();
        assert!(err.contains("never") && err.contains('7'), "{err}");
    }
}
