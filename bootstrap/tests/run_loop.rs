//! The loop `ferrolb-bootstrap run` runs is the library's (`ferrolb_bootstrap::run`), so
//! a test drives it in process: the only member, its apiserver healthy, puts the VIP on
//! its interface; a second run started after the first one was dropped with its
//! runtime (as a crash) finds the leftover, removes it and takes the VIP again.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use std::time::Duration;

use common::{Logs, OneMember, on_d0};
use ferrolb_bootstrap::run::{RunOptions, run};
use ferrolb_lab::wait;
use tracing::instrument::WithSubscriber;

/// How long a wait may take (a bound, not a speed check).
const T: Duration = Duration::from_secs(30);

#[test]
fn the_library_loop_holds_the_vip_as_the_only_healthy_member() {
    let bed = OneMember::new("96-runloop");
    let ns = &bed.ns;
    let cp = bed.dir.path().join("checkpoint.yaml");
    bed.init_checkpoint(&cp.display().to_string(), &["--no-credentials"]);
    let opts = RunOptions {
        checkpoint: cp,
        node_name: "node1".into(),
        metrics_addr: "127.0.0.1:7948".parse().unwrap(),
        kubeconfig: None,
        apiserver_tls_name: "kubernetes".into(),
        drain_delay: "5s".parse().unwrap(),
        shutdown_drain: "2s".parse().unwrap(),
    };
    let inside = (**ns).clone();
    ns.run(move || {
        let runtime =
            || tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let rt = runtime();
        rt.block_on(async {
            let first = tokio::spawn(run(opts.clone()));
            let check = inside.clone();
            tokio::task::spawn_blocking(move || {
                wait::until_holds("the loop putting the VIP on d0", T, || on_d0(&check, "192.0.2.200"))
            })
            .await
            .unwrap()
            .unwrap();
            assert!(!first.is_finished(), "the loop ended: {:?}", first.await);
        });
        // Dropped with every task it spawned, as a crash: the VIP stays behind.
        drop(rt);
        assert!(on_d0(&inside, "192.0.2.200"), "a dropped loop released the VIP");
        // The next run removes the leftover before it is elected, then holds the VIP.
        let logs = Logs::default();
        runtime().block_on(async {
            let second = tokio::spawn(run(opts).with_subscriber(logs.dispatch()));
            let (check, seen) = (inside.clone(), logs.clone());
            tokio::task::spawn_blocking(move || {
                wait::until_holds("the restarted loop removing the leftover and holding the VIP", T, || {
                    seen.lines().iter().any(|l| l.contains("removed the VIP a previous run left"))
                        && on_d0(&check, "192.0.2.200")
                })
            })
            .await
            .unwrap()
            .unwrap();
            assert!(!second.is_finished(), "the loop ended: {:?}", second.await);
        });
    })
    .unwrap();
}
