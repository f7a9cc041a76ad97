//! fakeapi's conformance suite against a real kube-apiserver v1.37 (with etcd and
//! kube-controller-manager): the same bodies `fakeapi/tests/conformance.rs` runs against
//! the fake, one namespace each, on one cluster started once. Every body must pass here,
//! known gaps of the fake included: they pin what the real server does.
//!
//! Needs root and `target/kube/current/ferrolb-kube` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolb_cluster::{Cluster, ClusterConfig};
use ferrolb_fakeapi::conformance::{Backend, run_all};
use ferrolb_lab::{Lab, LabConfig};
use futures::future::BoxFuture;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The real apiserver, as the cluster's admin.
struct RealApiserver {
    config: kube::Config,
    cluster: Arc<Mutex<Cluster>>,
}

impl Backend for RealApiserver {
    fn name(&self) -> String {
        format!("kube-apiserver at {}", self.config.cluster_url)
    }

    fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config.clone()).expect("a client from the admin kubeconfig")
    }

    /// Restarts the apiserver: its watch cache then begins at the current revision, so
    /// older resourceVersions are 410 Gone, as after a compaction (which etcd does on its
    /// own schedule, every 5 min).
    fn forget_history(&self) -> BoxFuture<'_, ()> {
        let cluster = self.cluster.clone();
        Box::pin(async move {
            // The cluster waits for /readyz on its own runtime: off this one's threads.
            let restart = move || cluster.lock().unwrap().restart_apiserver(1);
            tokio::task::spawn_blocking(restart).await.unwrap().expect("the apiserver restarts");
        })
    }
}

#[test]
fn conformance_bodies_hold_on_a_real_apiserver() {
    let started = Instant::now();
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let cluster = Cluster::start(&lab, &ClusterConfig::default()).unwrap();
    let up = started.elapsed();
    let kubeconfig = Kubeconfig::read_from(cluster.kubeconfig()).unwrap();
    // The bodies run on a runtime of their own, so that the cluster's blocking calls
    // (restarting the apiserver) work from inside them.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let config =
        rt.block_on(kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())).unwrap();
    let backend = Arc::new(RealApiserver { config, cluster: Arc::new(Mutex::new(cluster)) });
    let outcomes = rt.block_on(run_all(backend.clone(), Duration::from_secs(60)));

    println!("conformance bodies against {} (cluster up in {up:.1?}):", backend.name());
    let mut failed = Vec::new();
    for o in &outcomes {
        let (name, gap) = (o.body.name, o.body.gap);
        let gap = gap.map(|g| format!(" [a known gap of the fake: {g}]")).unwrap_or_default();
        match &o.result {
            Ok(()) => println!("  ok      {:>7.1?}  {name}{gap}", o.took),
            Err(e) => {
                println!("  FAILED  {:>7.1?}  {name}{gap}: {e}", o.took);
                failed.push(name);
            }
        }
    }
    println!("total {:.1?}", started.elapsed());
    drop(backend);
    drop(lab);
    assert!(failed.is_empty(), "bodies failing on the real apiserver: {failed:?}");
}
