//! L2 after a crash: a bootstrap killed while holding the VIP (SIGKILL, OOM) cannot
//! release it, so the address stays on the interface with ferrolb's mark. The restarted
//! process holds nothing until it is elected: it removes that leftover at start, or the
//! node's kernel would answer ARP for the VIP beside the real owner (found on real
//! apiservers: testbed/tests/apiserver_vip.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{OneMember, on_d0};
use ferrolb_lab::process::{Proc, Spawn};
use ferrolb_lab::wait;
use nix::sys::signal::Signal;

/// How long a wait may take (a bound, not a speed check).
const T: Duration = Duration::from_secs(30);

#[test]
fn a_restarted_member_removes_the_vip_its_killed_predecessor_left() {
    let bed = OneMember::new("97-restart");
    let (ns, dir, health) = (&bed.ns, &bed.dir, &bed.health);
    let cp = dir.path().join("checkpoint.yaml").display().to_string();
    let bin = env!("CARGO_BIN_EXE_ferrolb-bootstrap");
    bed.init_checkpoint(&cp, &["--no-credentials"]);
    let text = std::fs::read_to_string(&cp).unwrap().replace("interval: 1s", "interval: 200ms");
    std::fs::write(&cp, text).unwrap();
    let start = |run: usize| {
        let spec = Spawn::new(
            format!("bootstrap-{run}"),
            &[bin, "run", "--checkpoint", &cp, "--node-name", "node1"],
        );
        Proc::start(ns, dir.path(), &spec).unwrap()
    };
    let metrics: SocketAddr = "127.0.0.1:7949".parse().unwrap();
    let ready = || ferrolb_lab::client::http_get(ns, metrics, "/readyz", Duration::from_secs(2)).is_ok();

    // The only member, healthy: it holds the VIP; SIGKILL leaves the address behind.
    let mut first = start(1);
    wait::until_holds("the VIP on d0", T, || on_d0(ns, "192.0.2.200")).unwrap();
    first.kill();
    assert!(on_d0(ns, "192.0.2.200"), "SIGKILL released the VIP");

    // Restarted with its apiserver unhealthy: not elected, so the leftover must go.
    health.set_healthy(false);
    let mut second = start(2);
    wait::until_holds("the restarted member's announcer running", T, ready).unwrap();
    assert!(
        !on_d0(ns, "192.0.2.200"),
        "the VIP left by the killed process is still on d0:\n{}",
        second.logs()
    );
    assert!(second.logs().contains("removed the VIP a previous run left"), "{}", second.logs());

    // Elected again once healthy: it adds the VIP itself; SIGTERM releases it.
    health.set_healthy(true);
    wait::until_holds("the VIP back on d0", T, || on_d0(ns, "192.0.2.200")).unwrap();
    second.signal(Signal::SIGTERM);
    let status = second.wait_exit(Duration::from_secs(20)).expect("no exit on SIGTERM");
    assert!(status.success(), "{status:?}\n{}", second.logs());
    assert!(!on_d0(ns, "192.0.2.200"), "the VIP stayed after SIGTERM");
}
