//! Make before break during a rolling update (issue #9): the pods behind an
//! externalTrafficPolicy Local Service are replaced node by node while the client
//! pings the Service address through BIRD (ECMP over the nodes, RFC 8326
//! GRACEFUL_SHUTDOWN honoured on import). A "pod" on node i is the address on node
//! i's `lo` (what kube-proxy's Local rule gives: traffic reaches a node only while it
//! has a local endpoint) plus its endpoint in the Service's EndpointSlice.
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

use ferrolb_testbed::client::ProbeStream;
use ferrolb_testbed::routers::{self, Bird, RouterSpec};
use ferrolb_testbed::speaker::{self, Speaker, yaml};
use ferrolb_testbed::{Lab, LabConfig, plan};

const T: Duration = Duration::from_secs(30);
const READY: &str = "{ready: true, serving: true, terminating: false}";
const TERMINATING: &str = "{ready: false, serving: true, terminating: true}";

fn vip() -> IpAddr {
    plan::bgp_vip_v4(30)
}

/// Both nodes, a peer to BIRD, and the Local Service with one endpoint per node in the
/// given condition (None: that node has no pod).
fn file(endpoints: [Option<&str>; 2]) -> String {
    let mut svc = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\nspec: {{type: LoadBalancer, externalTrafficPolicy: Local, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: \"{}\"}}]}}}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\nendpoints:",
        vip()
    );
    let mut any = false;
    for (i, cond) in endpoints.iter().enumerate() {
        if let Some(cond) = cond {
            let n = i + 1;
            svc.push_str(&format!(
                "\n- {{addresses: [10.0.0.{n}], nodeName: {}, conditions: {cond}}}",
                plan::node_name(n)
            ));
            any = true;
        }
    }
    if !any {
        svc.push_str(" []");
    }
    svc.push('\n');
    yaml::stream(&[
        yaml::node(1),
        yaml::node(2),
        yaml::pool("public", &[plan::BGP_POOL_V4]),
        yaml::peer("router", plan::NODE_ASN, plan::ROUTER_ASN, plan::ROUTER_V4.into(), &[]),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        svc,
    ])
}

struct Cluster<'a> {
    lab: &'a Lab,
    speakers: Vec<Speaker>,
    endpoints: [Option<&'static str>; 2],
}

impl Cluster<'_> {
    fn set(&mut self, node: usize, cond: Option<&'static str>) {
        self.endpoints[node - 1] = cond;
        for s in &self.speakers {
            s.replace_file(&file(self.endpoints)).unwrap();
        }
    }

    fn pod_up(&mut self, node: usize) {
        self.lab.add_vip_on_lo(self.lab.node(node), vip()).unwrap();
        self.set(node, Some(READY));
    }

    fn pod_gone(&mut self, node: usize) {
        self.lab.node(node).ip(&["addr", "del", &format!("{}/32", vip()), "dev", "lo"]).unwrap();
        self.set(node, None);
    }

    fn wait_route(&self, via: &[usize], what: &str) {
        let hops: Vec<IpAddr> = via.iter().map(|i| plan::node_v4(*i).into()).collect();
        let r = routers::wait_kernel_route(self.lab.router(), &format!("{}/32", vip()), &hops, T);
        assert!(r.is_ok(), "{what}: {r:?}\n{}", self.logs());
    }

    fn logs(&self) -> String {
        self.speakers.iter().map(Speaker::logs).collect::<Vec<_>>().join("\n")
    }

    /// Replaces the pod on each node in turn; returns (sent, lost, longest outage).
    fn rolling_update(&mut self, drain: bool) -> (u64, u64, Duration) {
        let probe = ProbeStream::start(self.lab.client(), vip(), Duration::from_millis(10)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        for (node, other) in [(1, 2), (2, 1)] {
            if drain {
                // The old pod terminates but keeps serving (a preStop hook as long as
                // the drain takes); the router moves away before it goes.
                self.set(node, Some(TERMINATING));
                self.wait_route(&[other], "the router leaves the draining node");
            }
            self.pod_gone(node);
            self.wait_route(&[other], "the router leaves the node whose pod is gone");
            // The new pod on the same node.
            self.pod_up(node);
            self.wait_route(&[1, 2], "ECMP over both nodes again");
        }
        std::thread::sleep(Duration::from_millis(300));
        let r = probe.stop(Duration::from_millis(200));
        (r.sent, r.lost(), r.max_outage())
    }
}

#[test]
fn rolling_update_of_a_local_service_loses_nothing_with_drain() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let _bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    let bin = speaker::binary("debug").unwrap();
    let mut cluster = Cluster { lab: &lab, speakers: Vec::new(), endpoints: [None, None] };
    for i in 1..=2 {
        lab.add_vip_on_lo(lab.node(i), vip()).unwrap();
    }
    cluster.endpoints = [Some(READY), Some(READY)];
    for i in 1..=2 {
        cluster.speakers.push(Speaker::start_with(&lab, i, &file(cluster.endpoints), &bin, &[]).unwrap());
    }
    cluster.wait_route(&[1, 2], "ECMP over both nodes");

    let (sent, lost_without, gap_without) = cluster.rolling_update(false);
    println!(
        "rolling update WITHOUT drain: {sent} probes every 10 ms, {lost_without} lost, longest outage {:.0} ms",
        gap_without.as_secs_f64() * 1000.0
    );
    let (sent, lost_with, gap_with) = cluster.rolling_update(true);
    println!(
        "rolling update WITH drain:    {sent} probes every 10 ms, {lost_with} lost, longest outage {:.0} ms",
        gap_with.as_secs_f64() * 1000.0
    );
    assert_eq!(lost_with, 0, "make before break loses no probe\n{}", cluster.logs());
}
