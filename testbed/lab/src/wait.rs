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
    observe: impl FnMut() -> Result<T, Error>,
    ok: impl Fn(&T) -> bool,
) -> Result<T, Error> {
    until_value_every(what, timeout, POLL, observe, ok)
}

/// [`until_value`], polling every `poll`: for observations too costly to make every
/// 50 ms (lists of thousands of objects, a router's whole RIB).
pub fn until_value_every<T: Debug>(
    what: &str,
    timeout: Duration,
    poll: Duration,
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
        std::thread::sleep(poll);
    }
}

/// How long past the timer it is about [`stays`] keeps looking: what the timer sets off
/// (a log line, an ARP answer, an UPDATE at a router) becomes visible to a probe within it.
pub const PAST_TIMER: Duration = Duration::from_millis(500);

/// Proves that something does not happen: polls `observe` until `past_timer` (the timer
/// that would make it happen, plus the detection it implies) and [`PAST_TIMER`] have
/// passed, failing at the first observation `ok` rejects. The last observation is made
/// after the whole wait, so no caller can stop looking before the timer expires.
pub fn stays<T: Debug>(
    what: &str,
    past_timer: Duration,
    mut observe: impl FnMut() -> Result<T, Error>,
    ok: impl Fn(&T) -> bool,
) -> Result<T, Error> {
    let start = Instant::now();
    let wait = past_timer + PAST_TIMER;
    loop {
        let last = start.elapsed() >= wait;
        let v = observe()?;
        if !ok(&v) {
            return Err(Error::Check(format!(
                "{what}: broken {:?} into a wait of {wait:?}: {v:?}",
                start.elapsed()
            )));
        }
        if last {
            return Ok(v);
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

    #[test]
    fn stays_looks_until_past_the_timer() {
        let timer = Duration::from_millis(200);
        let start = Instant::now();
        let mut polls = 0;
        stays(
            "nothing happens",
            timer,
            || {
                polls += 1;
                Ok(polls)
            },
            |_| true,
        )
        .unwrap();
        let waited = start.elapsed();
        assert!(waited >= timer + PAST_TIMER, "stopped looking after {waited:?}");
        assert!(polls >= 2, "{polls} observations");
    }

    #[test]
    fn stays_reports_what_happens_just_before_the_timer_expires() {
        let timer = Duration::from_millis(300);
        let start = Instant::now();
        let err = stays(
            "no takeover",
            timer,
            || Ok(start.elapsed() >= timer - Duration::from_millis(20)),
            |took_over| !took_over,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("no takeover") && err.contains("true"), "{err}");
        assert!(start.elapsed() < timer + PAST_TIMER, "the violation was seen late: {err}");
    }

    #[test]
    fn stays_reports_what_the_timer_sets_off_within_the_margin() {
        let timer = Duration::from_millis(100);
        let start = Instant::now();
        let r = stays("no takeover", timer, || Ok(start.elapsed()), |t| *t < timer + PAST_TIMER / 2);
        assert!(r.is_err(), "{r:?}");
    }

    #[test]
    fn stays_fails_at_the_first_violation() {
        let start = Instant::now();
        let r = stays("quiet", Duration::from_secs(30), || Ok(1), |n| *n == 0);
        assert!(r.is_err() && start.elapsed() < Duration::from_secs(1), "{r:?}");
    }
}
