//! Shared helpers of the bootstrap tests: the bound of their waits, captured logs, a
//! namespace with a veth.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolb_lab::netns::{Netns, TempNetns};

/// How long a wait of these tests may take, in tokio time (instant when paused).
pub const PATIENCE: Duration = Duration::from_secs(5);

/// A namespace of the test's own, `flb<pid>x<tag>` (so `ferrolb-testbed down --stale`
/// finds leftovers), with a veth `d0` (peer `d1`) up.
pub fn veth_namespace(tag: &str) -> TempNetns {
    ferrolb_lab::lab::check_prerequisites().unwrap();
    let ns = TempNetns::create(&format!("flb{}x{tag}", std::process::id())).unwrap();
    ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"]).unwrap();
    ns.ip(&["link", "set", "d0", "up"]).unwrap();
    ns
}

/// Whether `d0` in `ns` carries `ip`/32.
pub fn on_d0(ns: &Netns, ip: &str) -> bool {
    ns.ip(&["-o", "addr", "show", "dev", "d0"]).unwrap().contains(&format!(" {ip}/32"))
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
