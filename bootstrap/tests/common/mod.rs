//! Shared helpers of the bootstrap tests: bounded waits and captured logs.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Polls `f` every 25 ms until it holds; panics after 5 s (of tokio time: instant when paused).
pub async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The log lines of what runs under [`Logs::dispatch`] (e.g. a future given it with
/// `tracing::instrument::WithSubscriber::with_subscriber`), as `LEVEL target: message fields`.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// A subscriber writing INFO and above into these logs.
    pub fn dispatch(&self) -> tracing::Dispatch {
        tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .without_time()
            .with_max_level(tracing::Level::INFO)
            .finish()
            .into()
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap()).lines().map(String::from).collect()
    }

    /// The lines logged at `level` (`"WARN"`, `"INFO"`, ...).
    pub fn at(&self, level: &str) -> Vec<String> {
        self.lines().into_iter().filter(|l| l.split_whitespace().next() == Some(level)).collect()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl tracing_subscriber::fmt::MakeWriter<'_> for Logs {
    type Writer = Logs;

    fn make_writer(&self) -> Logs {
        self.clone()
    }
}
