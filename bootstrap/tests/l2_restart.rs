//! L2 after a crash: a bootstrap killed while holding the VIP (SIGKILL, OOM) cannot
//! release it, so the address stays on the interface with ferrolb's mark. The restarted
//! process holds nothing until it is elected: it removes that leftover at start, or the
//! node's kernel would answer ARP for the VIP beside the real owner (found on real
//! apiservers: testbed/tests/apiserver_vip.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrolb_testbed::https::{HealthServer, TestCa};
use ferrolb_testbed::netns::Netns;
use ferrolb_testbed::process::{Proc, Spawn};
use nix::sys::signal::Signal;

struct Ns(Netns);

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = self.0.delete();
    }
}

fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn on_d0(ns: &Netns) -> bool {
    ns.ip(&["-o", "addr", "show", "dev", "d0"]).unwrap().contains(" 192.0.2.200/32")
}

#[test]
fn a_restarted_member_removes_the_vip_its_killed_predecessor_left() {
    ferrolb_testbed::lab::check_prerequisites().unwrap();
    let ns = Ns(Netns::create(&format!("flb{}x97-restart", std::process::id())).unwrap());
    ns.0.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"]).unwrap();
    ns.0.ip(&["link", "set", "d0", "up"]).unwrap();
    ns.0.ip(&["addr", "add", "192.0.2.11/24", "dev", "d0"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new().unwrap();
    ca.write(dir.path()).unwrap();
    let health = HealthServer::start(&ns.0, "127.0.0.1:6444".parse().unwrap(), &ca, &["kubernetes"]).unwrap();
    let cp = dir.path().join("checkpoint.yaml").display().to_string();
    let key_file = dir.path().join("membership.key").display().to_string();
    std::fs::write(&key_file, "0123456789abcdef0123456789abcdef-restart\n").unwrap();
    let ca_crt = dir.path().join("ca.crt").display().to_string();
    let bin = env!("CARGO_BIN_EXE_ferrolb-bootstrap");
    let init = std::process::Command::new(bin)
        .args(["checkpoint", "init", "--checkpoint", &cp, "--address", "192.0.2.200", "--interface", "d0"])
        .args(["--member", "node1=192.0.2.11", "--membership-key-file", &key_file, "--no-credentials"])
        .args(["--health-url", "https://127.0.0.1:6444/readyz", "--ca-file", &ca_crt])
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let text = std::fs::read_to_string(&cp).unwrap().replace("interval: 1s", "interval: 200ms");
    std::fs::write(&cp, text).unwrap();
    let start = |run: usize| {
        let spec = Spawn::new(
            format!("bootstrap-{run}"),
            &[bin, "run", "--checkpoint", &cp, "--node-name", "node1"],
        );
        Proc::start(&ns.0, dir.path(), &spec).unwrap()
    };
    let metrics: SocketAddr = "127.0.0.1:7949".parse().unwrap();
    let ready =
        || ferrolb_testbed::client::http_get(&ns.0, metrics, "/readyz", Duration::from_secs(2)).is_ok();

    // The only member, healthy: it holds the VIP; SIGKILL leaves the address behind.
    let mut first = start(1);
    wait("the VIP on d0", || on_d0(&ns.0));
    first.kill();
    assert!(on_d0(&ns.0), "SIGKILL released the VIP");

    // Restarted with its apiserver unhealthy: not elected, so the leftover must go.
    health.set_healthy(false);
    let mut second = start(2);
    wait("the restarted member's announcer running", ready);
    assert!(!on_d0(&ns.0), "the VIP left by the killed process is still on d0:\n{}", second.logs());
    assert!(second.logs().contains("removed the VIP a previous run left"), "{}", second.logs());

    // Elected again once healthy: it adds the VIP itself; SIGTERM releases it.
    health.set_healthy(true);
    wait("the VIP back on d0", || on_d0(&ns.0));
    second.signal(Signal::SIGTERM);
    let status = second.wait_exit(Duration::from_secs(20)).expect("no exit on SIGTERM");
    assert!(status.success(), "{status:?}\n{}", second.logs());
    assert!(!on_d0(&ns.0), "the VIP stayed after SIGTERM");
}
