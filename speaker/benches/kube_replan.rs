//! Prints what one new Service costs the speaker's event loop in Kubernetes mode with N
//! Services: the mean of `ferrolb_speaker_replan_seconds` (model, plan, status, logs) over
//! 40 Services created one by one, on the in-process fake apiserver, so 50 000 Services
//! take seconds to set up (the real control plane's `bench scale` takes over an hour).
//! The BGPPeer leads nowhere (a network namespace of the bench's own with no route), so
//! no session is up and this leaves out the session's own work.
//! Run with `cargo bench -p ferrolb-speaker --bench kube_replan [-- N ...]` as root; it
//! reports, it does not judge.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolb_fakeapi::FakeApiServer;
use ferrolb_lab::kubeapi;
use ferrolb_lab::netns::{PREFIX, TempNetns};
use ferrolb_speaker::metrics::Metrics;
use ferrolb_speaker::run::{self, KubeOptions, Options};

/// The replan histogram's (count, sum of seconds).
fn count(m: &Metrics) -> (f64, f64) {
    let t = m.encode();
    let get = |k: &str| {
        t.lines().find_map(|l| l.strip_prefix(k)).map(|v| v.trim().parse::<f64>().unwrap()).unwrap_or(0.0)
    };
    (get("ferrolb_speaker_replan_seconds_count "), get("ferrolb_speaker_replan_seconds_sum "))
}

/// Service `s{i}` at 198.18.x.y with one endpoint on node1.
fn svc(i: usize) -> String {
    let ip = format!("198.18.{}.{}", i / 250, i % 250 + 1);
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: default}}\nspec: {{type: LoadBalancer, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: {ip}}}]}}}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s{i}-a, namespace: default, labels: {{kubernetes.io/service-name: s{i}}}}}\naddressType: IPv4\nendpoints:\n- {{addresses: [10.1.{}.{}], nodeName: node1, conditions: {{ready: true}}}}\n",
        i / 250,
        i % 250 + 1
    )
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![1_000, 10_000] } else { sizes };
    for n in sizes {
        let ns = TempNetns::create(&format!("{PREFIX}{}xreplan", std::process::id())).unwrap();
        ns.run(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            rt.block_on(measure(n));
        })
        .unwrap();
    }
}

/// Creates `n` Services, starts a speaker, then times its plans for 40 more.
async fn measure(n: usize) {
    let (client, server) = FakeApiServer::new().client();
    for crd in ferrolb_api::crds() {
        server.register_crd(&crd).unwrap();
    }
    let base = r#"
apiVersion: v1
kind: Node
metadata: {name: node1}
status:
  conditions: [{type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 192.0.2.11}]
---
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: public}
spec: {addresses: [198.18.0.0/16]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-a}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: public}
spec: {ipAddressPools: [public]}
"#;
    kubeapi::apply_stream(&client, base).await.unwrap();
    let t = Instant::now();
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&svc(i));
        if i % 500 == 499 {
            kubeapi::apply_stream(&client, &text).await.unwrap();
            text.clear();
        }
    }
    kubeapi::apply_stream(&client, &text).await.unwrap();
    let created = t.elapsed();
    let metrics = Arc::new(Metrics::new());
    let opts = KubeOptions {
        options: Options::defaults("node1"),
        namespace: "ferrolb-system".into(),
        plans: None,
        record: None,
    };
    let _run = tokio::spawn(run::run_kube(opts, client.clone(), metrics.clone()));
    while !metrics.is_ready() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // At rest: the first plan's writes done.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (c0, s0) = count(&metrics);
    for i in n..n + 40 {
        let (c, _) = count(&metrics);
        kubeapi::apply_stream(&client, &svc(i)).await.unwrap();
        while count(&metrics).0 < c + 1.0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (c1, s1) = count(&metrics);
    println!(
        "{n:>6} Services (set up in {:.1} s): {} plans for 40 new Services, {:.2} ms a plan",
        created.as_secs_f64(),
        c1 - c0,
        (s1 - s0) / (c1 - c0) * 1000.0
    );
}
