//! Every ferrolb binary's Kubernetes client: deadlines on each request, client-side
//! request limits ([`throttle`]) and what it receives counted ([`received`]).

mod received;
mod throttle;

use std::time::Duration;

pub use received::{Received, ReceivedLayer};
pub use throttle::{Limits, Throttle, ThrottleLayer};

/// A client for `config` with the deadlines of [`with_deadlines`], its requests held to
/// `limits` (one of the [`Limits`] constants of the binary it runs in) and what it
/// receives counted into `received` (registered in the binary's metrics).
pub fn client(
    config: kube::Config,
    limits: Limits,
    received: &Received,
) -> Result<kube::Client, kube::Error> {
    // The throttle outermost, right under the Client's queue, whose order it keeps.
    // kube's own retries (a 429, 503 or 504, after a back-off or the server's
    // Retry-After) are paced by the apiserver and not counted again.
    Ok(kube::client::ClientBuilder::try_from(with_deadlines(config))?
        .with_layer(&ReceivedLayer::new(received))
        .with_layer(&ThrottleLayer::new(limits))
        .build())
}

/// Deadlines on every request of a client. kube's defaults have no read timeout: a
/// request the apiserver accepted and never answers would wait forever. The calls a
/// binary makes itself have tighter ones (the speaker's `cluster::CALL_TIMEOUT`, the
/// controller's `fence.rs`, the bootstrap refresh's `CALL_TIMEOUT`); these bound what
/// kube-runtime's watchers send (each list, each watch's start) and any stream that
/// goes silent. The read timeout must outlast a quiet watch, which the apiserver ends
/// after the 290 s kube-runtime asks for.
fn with_deadlines(mut config: kube::Config) -> kube::Config {
    config.connect_timeout = Some(Duration::from_secs(10));
    config.write_timeout = Some(Duration::from_secs(30));
    config.read_timeout = Some(Duration::from_secs(300));
    // From when each request is sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_has_deadlines_and_a_quiet_watch_outlives_none() {
        let config = with_deadlines(kube::Config::new("https://192.0.2.1:6443".parse().unwrap()));
        assert!(config.connect_timeout.is_some() && config.write_timeout.is_some());
        // kube-runtime asks the apiserver to end a quiet watch after 290 s.
        assert!(config.read_timeout.is_some_and(|t| t > Duration::from_secs(290)));
        assert!(config.reset_reader_on_write);
    }
}
