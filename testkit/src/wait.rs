//! Bounded polls for async tests: wait on a condition, never on a bare sleep. One
//! spelling for every test crate, proto's own tests included (no Kubernetes here),
//! re-exported as `ferrolb_fakeapi::wait` (the labs' thread-based polls are
//! `ferrolb_testbed::wait`).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// How long [`until`] waits: a generous bound, not a speed check.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How often [`until`] polls.
pub const POLL: Duration = Duration::from_millis(20);

/// Polls `check` until it gives a value; panics naming `what` after [`PATIENCE`].
pub async fn until<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    until_within(what, PATIENCE, check).await
}

/// [`until`] with a bound of its own, in tokio time (instant when the clock is paused).
pub async fn until_within<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the value `rx` watches satisfies `ok` (woken by each change, no polling)
/// and returns it; panics naming `what` and the last value after [`PATIENCE`]. Not for
/// values that hold secrets: the panic shows the value.
pub async fn until_watched<T: Clone + Debug>(
    what: &str,
    rx: &mut watch::Receiver<T>,
    ok: impl FnMut(&T) -> bool,
) -> T {
    until_watched_within(what, PATIENCE, rx, ok).await
}

/// [`until_watched`] with a bound of its own, in tokio time.
pub async fn until_watched_within<T: Clone + Debug>(
    what: &str,
    within: Duration,
    rx: &mut watch::Receiver<T>,
    mut ok: impl FnMut(&T) -> bool,
) -> T {
    let seen = tokio::time::timeout(within, rx.wait_for(|v| ok(v))).await.map(|r| r.map(|v| v.clone()));
    match seen {
        Ok(Ok(v)) => v,
        Ok(Err(_)) => panic!("waiting for {what}: the sender is gone; last {:?}", *rx.borrow()),
        Err(_) => panic!("timed out after {within:?} waiting for {what}; last {:?}", *rx.borrow()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn returns_the_first_value() {
        let mut n = 0;
        let v = until("n reaches 3", || {
            n += 1;
            std::future::ready((n >= 3).then_some(n))
        })
        .await;
        assert_eq!(v, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "waiting for never")]
    async fn panics_naming_what_it_waited_for() {
        until_within("never", Duration::from_millis(100), || std::future::ready(None::<()>)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_watched_value_is_returned_once_it_holds() {
        let (tx, mut rx) = watch::channel(0);
        tokio::spawn(async move {
            for n in 1..=3 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let _ = tx.send(n);
            }
            std::future::pending::<()>().await;
        });
        assert_eq!(until_watched("n reaches 3", &mut rx, |n| *n == 3).await, 3);
    }
}
