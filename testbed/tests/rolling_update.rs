//! Make before break during a rolling update (issue #9), with the real
//! `ferrolb-speaker --kubeconfig` on both nodes against the fake apiserver: the pods
//! behind an externalTrafficPolicy Local Service are replaced node by node while the
//! client pings the Service address through BIRD (ECMP over the nodes, RFC 8326
//! GRACEFUL_SHUTDOWN honoured on import). Nodes, the Service with its status ingress,
//! the pool, the peer and the advertisement are API objects; every endpoint transition
//! is the Service's EndpointSlice applied anew, as the EndpointSlice controller writes
//! it. A "pod" on node i is the address on node i's `lo` (what kube-proxy's Local rule
//! gives: traffic reaches a node only while it has a local endpoint) plus its endpoint
//! in the slice.
//!
//! * With drain: the old pod's endpoint turns terminating (still serving) first; the
//!   speaker re-announces with 65535:0, BIRD moves the traffic to the other node, and
//!   only then does the pod go. Zero lost probes.
//! * Without drain: what a load balancer that ignores `terminating` sees: the endpoint
//!   and the pod go at the same moment, and the router follows only after the
//!   withdrawal. The lost probes are counted and printed, not asserted.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::IpAddr;
use std::time::Duration;

use ferrolb_lab::client::ProbeStream;
use ferrolb_lab::kubeapi::{FakeCluster, Objects};
use ferrolb_lab::process::Proc;
use ferrolb_lab::routers::{self, Bird, RouterSpec};
use ferrolb_lab::speaker::{start_kube, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(30);
/// Probe interval: fine enough that a withdrawal racing the pod's removal shows.
const PROBE: Duration = Duration::from_millis(2);

/// An endpoint's conditions as the EndpointSlice controller writes them.
#[derive(Clone, Copy, Debug)]
enum Pod {
    Ready,
    /// Deleted but still serving (a preStop hook as long as the drain takes).
    Terminating,
}

fn vip() -> IpAddr {
    addressing::bgp_vip_v4(30)
}

/// Both nodes, a peer to BIRD, and the Local Service with its ingress address.
fn objects() -> String {
    yaml::stream(&[
        yaml::node(1),
        yaml::node(2),
        yaml::pool("public", &[addressing::BGP_POOL_V4]),
        yaml::peer("router", addressing::NODE_ASN, addressing::ROUTER_ASN, addressing::ROUTER_V4.into(), &[]),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        yaml::service("web", &[vip()])
            .replace("type: LoadBalancer,", "type: LoadBalancer, externalTrafficPolicy: Local,"),
    ])
}

/// The Service's EndpointSlice with one endpoint per node that has a pod.
fn slice(pods: [Option<Pod>; 2]) -> Value {
    let endpoints: Vec<Value> = pods
        .iter()
        .enumerate()
        .filter_map(|(i, pod)| {
            let n = i + 1;
            let (ready, terminating) = match (*pod)? {
                Pod::Ready => (true, false),
                Pod::Terminating => (false, true),
            };
            Some(json!({
                "addresses": [format!("10.0.0.{n}")],
                "nodeName": addressing::node_name(n),
                "conditions": {"ready": ready, "serving": true, "terminating": terminating},
            }))
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "web-1", "namespace": "default", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
    })
}

fn speaker(lab: &Lab, api: &FakeCluster, i: usize) -> Proc {
    start_kube(lab, api.kubeconfig(), i, "kspeaker", None).unwrap()
}

struct Cluster<'a> {
    lab: &'a Lab,
    api: FakeCluster,
    speakers: Vec<Proc>,
    pods: [Option<Pod>; 2],
}

impl Cluster<'_> {
    fn set(&mut self, node: usize, pod: Option<Pod>) {
        self.pods[node - 1] = pod;
        self.api.apply(&slice(self.pods)).unwrap();
    }

    fn pod_up(&mut self, node: usize) {
        self.lab.add_vip_on_lo(self.lab.node(node), vip()).unwrap();
        self.set(node, Some(Pod::Ready));
    }

    fn pod_gone(&mut self, node: usize) {
        self.lab.node(node).ip(&["addr", "del", &format!("{}/32", vip()), "dev", "lo"]).unwrap();
        self.set(node, None);
    }

    fn wait_route(&self, via: &[usize], what: &str) {
        let hops: Vec<IpAddr> = via.iter().map(|i| addressing::node_v4(*i).into()).collect();
        let r = routers::wait_kernel_route(self.lab.router(), &format!("{}/32", vip()), &hops, T);
        assert!(r.is_ok(), "{what}: {r:?}\n{}", self.logs());
    }

    fn logs(&self) -> String {
        self.speakers.iter().map(Proc::logs).collect::<Vec<_>>().join("\n")
    }

    /// Replaces the pod on each node in turn; returns (sent, lost, longest outage).
    fn rolling_update(&mut self, drain: bool) -> (u64, u64, Duration) {
        let probe = ProbeStream::start(self.lab.client(), vip(), PROBE).unwrap();
        probe.wait_sent(150, T).unwrap(); // 300 ms of probes
        for (node, other) in [(1, 2), (2, 1)] {
            if drain {
                // The old pod terminates but keeps serving; the router moves away
                // before it goes.
                self.set(node, Some(Pod::Terminating));
                self.wait_route(&[other], "the router leaves the draining node");
            }
            self.pod_gone(node);
            self.wait_route(&[other], "the router leaves the node whose pod is gone");
            // The new pod on the same node.
            self.pod_up(node);
            self.wait_route(&[1, 2], "ECMP over both nodes again");
        }
        probe.wait_sent(150, T).unwrap(); // 300 ms of probes
        let r = probe.stop(Duration::from_millis(200));
        (r.sent, r.lost(), r.max_outage())
    }
}

#[test]
fn rolling_update_of_a_local_service_loses_nothing_with_drain() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let _bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    let api = FakeCluster::start(&lab).unwrap();
    api.apply_stream(&objects()).unwrap();
    let mut cluster = Cluster { lab: &lab, api, speakers: Vec::new(), pods: [None, None] };
    for i in 1..=2 {
        cluster.pod_up(i);
    }
    for i in 1..=2 {
        cluster.speakers.push(speaker(&lab, &cluster.api, i));
    }
    cluster.wait_route(&[1, 2], "ECMP over both nodes");

    let (sent, lost_without, gap_without) = cluster.rolling_update(false);
    println!(
        "rolling update WITHOUT drain: {sent} probes every {PROBE:?}, {lost_without} lost, longest outage {:.0} ms",
        gap_without.as_secs_f64() * 1000.0
    );
    let (sent, lost_with, gap_with) = cluster.rolling_update(true);
    println!(
        "rolling update WITH drain:    {sent} probes every {PROBE:?}, {lost_with} lost, longest outage {:.0} ms",
        gap_with.as_secs_f64() * 1000.0
    );
    assert_eq!(lost_with, 0, "make before break loses no probe\n{}", cluster.logs());
}
