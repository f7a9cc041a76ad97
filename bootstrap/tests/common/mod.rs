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

/// The VIP the single-member beds announce, on `d0`.
pub const VIP: &str = "192.0.2.200";

/// One control-plane member, `node1` at 192.0.2.11 on `d0` of its own namespace, with a
/// healthy apiserver stand-in on 127.0.0.1:6444 (TLS from a test CA written into `dir`)
/// and a membership key: what the bootstrap's L2 tests start from.
pub struct OneMember {
    pub ns: TempNetns,
    pub dir: tempfile::TempDir,
    pub ca: ferrolb_lab::https::TestCa,
    pub health: ferrolb_lab::https::HealthServer,
    /// `dir/ca.crt`.
    pub ca_crt: String,
    /// `dir/membership.key`.
    pub key_file: String,
}

impl OneMember {
    /// The bed, in namespace `flb<pid>x<tag>`; `tag` also salts the membership key.
    pub fn new(tag: &str) -> Self {
        let ns = veth_namespace(tag);
        ns.ip(&["addr", "add", "192.0.2.11/24", "dev", "d0"]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca = ferrolb_lab::https::TestCa::new().unwrap();
        ca.write(dir.path()).unwrap();
        let health = ferrolb_lab::https::HealthServer::start(
            &ns,
            "127.0.0.1:6444".parse().unwrap(),
            &ca,
            &["kubernetes"],
        )
        .unwrap();
        let key_file = dir.path().join("membership.key").display().to_string();
        std::fs::write(&key_file, format!("0123456789abcdef0123456789abcdef-{tag}\n")).unwrap();
        let ca_crt = dir.path().join("ca.crt").display().to_string();
        OneMember { ns, dir, ca, health, ca_crt, key_file }
    }

    /// `ferrolb-bootstrap checkpoint init` of [`VIP`] on `d0` with this one member into
    /// `checkpoint`, its health URL the stand-in's; `extra` arguments appended.
    pub fn init_checkpoint(&self, checkpoint: &str, extra: &[&str]) {
        let init = std::process::Command::new(env!("CARGO_BIN_EXE_ferrolb-bootstrap"))
            .args(["checkpoint", "init", "--checkpoint", checkpoint, "--address", VIP, "--interface", "d0"])
            .args(["--member", "node1=192.0.2.11", "--membership-key-file", &self.key_file])
            .args(["--health-url", "https://127.0.0.1:6444/readyz", "--ca-file", &self.ca_crt])
            .args(extra)
            .output()
            .unwrap();
        assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    }
}
