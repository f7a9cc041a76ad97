//! The deadlines every ferrolb binary's Kubernetes client carries.

use std::time::Duration;

/// Deadlines on every request of a client. kube's defaults have no read timeout: a
/// request the apiserver accepted and never answers would wait forever. The calls a
/// binary makes itself have tighter ones (the speaker's `cluster::CALL_TIMEOUT`, the
/// controller's `fence.rs`, the bootstrap refresh's `CALL_TIMEOUT`); these bound what
/// kube-runtime's watchers send (each list, each watch's start) and any stream that
/// goes silent. The read timeout must outlast a quiet watch, which the apiserver ends
/// after the 290 s kube-runtime asks for.
pub fn with_deadlines(mut config: kube::Config) -> kube::Config {
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
