//! `bench kube-replan`: what one new Service costs the speaker's event loop in Kubernetes
//! mode with N Services: the mean of `ferrolb_speaker_replan_seconds` (model, plan,
//! status, logs) over 40 Services created one by one. The speaker runs in process against
//! the in-process fake apiserver, so 50 000 Services take seconds to set up, where the
//! real control plane (`bench scale`) needs 21 minutes for 10 000 on two cores.
//!
//! The BGPPeer leads nowhere (a network namespace of the bench's own, with no route), so
//! no session comes up: this leaves out the session's own work. Needs root. Figures are
//! printed, never asserted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolb_fakeapi::FakeApiServer;
use ferrolb_lab::client::metric_sample;
use ferrolb_lab::netns::{PREFIX, TempNetns};
use ferrolb_lab::{Error, kubeapi};
use ferrolb_speaker::metrics::Metrics;
use ferrolb_speaker::run::{self, KubeOptions, Options};

/// Services created one by one and timed, after the N at rest.
const TIMED: usize = 40;

/// node1, a pool of 65 536 addresses, a BGPPeer and its BGPAdvertisement.
const CONFIG: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node1}
status:
  conditions: [{type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 192.0.2.11}]
---
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: bulk}
spec: {addresses: [198.18.0.0/16]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: tor}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: bulk}
spec: {ipAddressPools: [bulk]}
"#;

/// Measures each of `sizes` (Services at rest), one fresh apiserver and speaker each.
pub fn run(sizes: &[usize]) -> Result<(), Error> {
    println!(
        "bench kube-replan: one new Service's plan in Kubernetes mode, {TIMED} timed (fake apiserver, in process)"
    );
    for &n in sizes {
        let ns = TempNetns::create(&format!("{PREFIX}{}xreplan", std::process::id()))?;
        let line = ns.run(move || -> Result<String, Error> {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            rt.block_on(measure(n))
        })??;
        println!("{line}");
    }
    Ok(())
}

/// The replan histogram's (count, sum of seconds).
fn replans(m: &Metrics) -> (f64, f64) {
    let text = m.encode();
    let get = |s: &str| metric_sample(&text, s).unwrap_or(0.0);
    (get("ferrolb_speaker_replan_seconds_count"), get("ferrolb_speaker_replan_seconds_sum"))
}

/// Service `s{i}` at an address of its own with one endpoint on node1.
fn service(i: usize) -> String {
    let (hi, lo) = (i / 250, i % 250 + 1);
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: default}}\n\
         spec: {{type: LoadBalancer, ports: [{{port: 80, protocol: TCP}}]}}\n\
         status: {{loadBalancer: {{ingress: [{{ip: 198.18.{hi}.{lo}}}]}}}}\n\
         ---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n\
         metadata: {{name: s{i}-a, namespace: default, labels: {{kubernetes.io/service-name: s{i}}}}}\n\
         addressType: IPv4\nendpoints:\n- {{addresses: [10.1.{hi}.{lo}], nodeName: node1, conditions: {{ready: true}}}}\n"
    )
}

/// Creates `n` Services, starts a speaker, waits for rest, then times its plans for
/// [`TIMED`] more created one by one.
async fn measure(n: usize) -> Result<String, Error> {
    if n + TIMED > 250 * 256 {
        return Err(Error::Check(format!("{n} Services do not fit the bench's pool")));
    }
    let (client, server) = FakeApiServer::new().client();
    for crd in ferrolb_api::crds() {
        server.register_crd(&crd).map_err(|e| Error::Check(format!("registering a CRD: {e:?}")))?;
    }
    kubeapi::apply_stream(&client, CONFIG).await?;
    let t = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        kubeapi::apply_stream(&client, &chunk.iter().map(|i| service(*i)).collect::<String>()).await?;
    }
    let created = t.elapsed();
    let metrics = Arc::new(Metrics::new());
    let opts = KubeOptions {
        options: Options::defaults("node1"),
        namespace: "ferrolb-system".into(),
        plans: None,
        record: None,
    };
    let speaker = tokio::spawn(run::run_kube(opts, client.clone(), metrics.clone()));
    while !metrics.is_ready() {
        if speaker.is_finished() {
            return Err(Error::Check("the speaker stopped before its first plan".into()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // At rest: the first plan's ServiceAnnouncements written.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (c0, s0) = replans(&metrics);
    for i in n..n + TIMED {
        let (before, _) = replans(&metrics);
        kubeapi::apply_stream(&client, &service(i)).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while replans(&metrics).0 < before + 1.0 {
            if Instant::now() > deadline {
                return Err(Error::Check(format!("no plan within 30 s of creating Service s{i}")));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Let the Service's EndpointSlice and status land before the next.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (c1, s1) = replans(&metrics);
    speaker.abort();
    Ok(format!(
        "{n:>6} Services (set up in {:.1} s): {} plans for {TIMED} new Services, {:.2} ms a plan",
        created.as_secs_f64(),
        c1 - c0,
        (s1 - s0) / (c1 - c0).max(1.0) * 1000.0
    ))
}
