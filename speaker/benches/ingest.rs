//! Prints how long the speaker takes to ingest a static file of N Services (one /32
//! each, shaped as `kubectl get svc -o yaml` prints them, ~500 bytes a Service): the
//! YAML stream parsed and decoded into the model (as the speaker reads a static file:
//! `ClusterModel::parse`), validated, then the first full plan.
//! This is what stands between a static file renamed into place and the first UPDATE.
//! Run with `cargo bench -p ferrolb-speaker --bench ingest [-- N ...]`; it reports, it
//! does not judge.
use std::collections::BTreeSet;
use std::fmt::Write;
use std::time::{Duration, Instant};

use ferrolb_speaker::model::ClusterModel;

const CONFIG: &str = "\
apiVersion: v1
kind: Node
metadata: {name: node1}
status:
  conditions: [{type: Ready, status: \"True\"}]
  addresses: [{type: InternalIP, address: 192.0.2.11}]
---
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: bulk}
spec: {addresses: [198.18.0.0/15]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: r1}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, addressFamilies: [ipv4-unicast]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: bulk}
spec: {ipAddressPools: [bulk]}
";

/// The static file: the configuration above and `n` Services.
fn file(n: u32) -> String {
    let mut s = String::from(CONFIG);
    for i in 0..n {
        let (a, b) = ((i >> 8) & 0x1ff, i & 0xff);
        let _ = write!(
            s,
            "---
apiVersion: v1
kind: Service
metadata:
  name: svc-{i}
  namespace: default
  uid: 5b0e6a4c-0000-4000-8000-{i:012}
  resourceVersion: \"{rv}\"
  creationTimestamp: \"2026-11-26T01:00:00Z\"
  labels:
    app: svc-{i}
spec:
  type: LoadBalancer
  clusterIP: 198.19.{c}.{b}
  clusterIPs:
  - 198.19.{c}.{b}
  externalTrafficPolicy: Cluster
  internalTrafficPolicy: Cluster
  ipFamilies:
  - IPv4
  ipFamilyPolicy: SingleStack
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 8080
  selector:
    app: svc-{i}
  sessionAffinity: None
status:
  loadBalancer:
    ingress:
    - ip: 198.{d}.{e}.{b}
      ipMode: VIP
",
            rv = 1000 + i,
            c = a & 0xff,
            d = 18 + (a >> 8),
            e = a & 0xff,
        );
    }
    s
}

/// The same Services in flow style, as `ferrolb-testbed bench bgp-scale` writes them.
fn flow_file(n: u32) -> String {
    let mut s = String::from(CONFIG);
    for i in 0..n {
        let (a, b) = ((i >> 8) & 0x1ff, i & 0xff);
        let _ = write!(
            s,
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: svc-{i}, namespace: default}}\nspec: {{type: LoadBalancer, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: \"198.{d}.{e}.{b}\"}}]}}}}\n",
            d = 18 + (a >> 8),
            e = a & 0xff,
        );
    }
    s
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let sizes: Vec<u32> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    // `flow`: the Services as the bgp-scale bench writes them (8 MB for 50k, not 32).
    let flow = std::env::args().any(|a| a == "flow");
    let sizes = if sizes.is_empty() { vec![10_000, 50_000, 100_000] } else { sizes };
    println!("bench ingest: a static file of N Services (one /32 each), node1, one BGP peer");
    for n in sizes {
        let text = if flow { flow_file(n) } else { file(n) };
        let t = Instant::now();
        let model = match ClusterModel::parse("bench.yaml", &text, ferrolb_speaker::model::DEFAULT_LB_CLASS) {
            Ok((m, _)) => m,
            Err(e) => return eprintln!("{e}"),
        };
        let read = t.elapsed();
        let t = Instant::now();
        let plan = ferrolb_speaker::plan::plan(&model, "node1", &BTreeSet::new());
        let planned = t.elapsed();
        let announced = plan.bgp_addresses().len();
        println!(
            "{n:>7} Services, {:>5.1} MB: parse and model {:>7.0} ms ({:>5.1} MB/s), plan {:>6.0} ms, total {:>7.0} ms; {announced} addresses announced",
            text.len() as f64 / 1e6,
            ms(read),
            text.len() as f64 / 1e6 / read.as_secs_f64(),
            ms(planned),
            ms(read + planned),
        );
    }
}
