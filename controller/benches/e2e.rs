//! End to end through the controller on the in-process fake apiserver: N Services created,
//! then the controller started; time until every one has an address in its status, and
//! time for a restarted controller to rebuild its state from that status.
//!
//! `cargo bench -p ferrolb-controller --bench e2e [-- N]` (default 5000). Prints figures;
//! the fake apiserver's own cost (JSON, watch fan-out) is included.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use ferrolb_api::{IpAddressPool, IpAddressPoolSpec};
use ferrolb_controller::http::Health;
use ferrolb_controller::metrics::Metrics;
use ferrolb_controller::{Settings, run};
use ferrolb_fakeapi::FakeApiServer;
use k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};

fn cpu_time() -> Duration {
    // utime + stime of this process, in clock ticks (100 Hz on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, s)| s);
    let f: Vec<u64> = after.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    // Fields after the command: state(skipped, not numeric) ppid pgrp ... utime is field 14 overall.
    let ticks = f.get(10).copied().unwrap_or(0) + f.get(11).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn start(server: &FakeApiServer) -> (tokio::task::JoinHandle<()>, Health) {
    let health = Health::default();
    let settings = Settings {
        lb_class: ferrolb_api::DEFAULT_LOAD_BALANCER_CLASS.into(),
        namespace: "ferrolb-system".into(),
        identity: "bench".into(),
        leader: None,
    };
    let h = health.clone();
    let client = server.new_client();
    let task = tokio::spawn(async move {
        let _ = run(client, settings, Metrics::new(), h, std::future::pending()).await;
    });
    (task, health)
}

async fn all_assigned(api: &Api<Service>, n: usize) -> bool {
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .filter(|s| {
            s.status
                .as_ref()
                .and_then(|st| st.load_balancer.as_ref())
                .and_then(|lb| lb.ingress.as_ref())
                .is_some_and(|i| !i.is_empty())
        })
        .count()
        == n
}

fn main() {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    }
    let n: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(5000);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let (client, server) = FakeApiServer::new().client();
        for crd in ferrolb_api::crds() {
            server.register_crd(&crd).unwrap();
        }
        let ns = Namespace { metadata: ObjectMeta { name: Some("ferrolb-system".into()), ..Default::default() }, ..Default::default() };
        Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.unwrap();
        let pool = IpAddressPool::new("bench", IpAddressPoolSpec::new(["198.18.0.0/16", "2001:db8::/112"]));
        Api::<IpAddressPool>::all(client.clone()).create(&PostParams::default(), &pool).await.unwrap();
        let api: Api<Service> = Api::namespaced(client.clone(), "default");
        for i in 0..n {
            let svc = Service {
                metadata: ObjectMeta { name: Some(format!("s{i}")), ..Default::default() },
                spec: Some(ServiceSpec {
                    type_: Some("LoadBalancer".into()),
                    ip_family_policy: Some(if i % 2 == 0 { "SingleStack" } else { "RequireDualStack" }.into()),
                    ports: Some(vec![ServicePort { port: 80, ..Default::default() }]),
                    ..Default::default()
                }),
                status: None,
            };
            api.create(&PostParams::default(), &svc).await.unwrap();
        }

        let (cpu0, t0) = (cpu_time(), Instant::now());
        let (task, _) = start(&server);
        while !all_assigned(&api, n).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (wall, cpu) = (t0.elapsed(), cpu_time().saturating_sub(cpu0));
        println!(
            "e2e: {n} Services (half RequireDualStack) assigned through the controller in {wall:.2?} wall, {cpu:.2?} CPU (controller + fake apiserver + polling): {:.0} µs wall per Service",
            wall.as_secs_f64() * 1e6 / n as f64
        );
        task.abort();
        let _ = task.await;

        let (cpu0, t0) = (cpu_time(), Instant::now());
        let (task, health) = start(&server);
        while !health.is_ready() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (wall, cpu) = (t0.elapsed(), cpu_time().saturating_sub(cpu0));
        println!("e2e: restart rebuilt {n} Services from status (list + replay) in {wall:.2?} wall, {cpu:.2?} CPU");
        task.abort();
    });
}
