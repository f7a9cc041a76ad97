//! The drivers' one timer: wait for a machine's `poll_timeout`.

/// Sleeps until `t`, forever without one. Takes the sans-IO machines' std `Instant` as
/// well as tokio's.
pub async fn sleep_until<T: Into<tokio::time::Instant>>(t: Option<T>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}
