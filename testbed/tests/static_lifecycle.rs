//! Static-file mode end to end with BIRD and the client (issue #6): a Service is added,
//! its endpoints scale to zero and back, and it moves to another pool — the router's
//! RIB and the client follow each step.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ferrolb_lab::client::{self, HttpServer};
use ferrolb_lab::routers::{self, Bird, Router, RouterSpec};
use ferrolb_lab::speaker::{self, Speaker, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const T: Duration = Duration::from_secs(30);

/// A Local Service at `ip` with `endpoints` ready endpoints on node 1 (None: no Service).
fn file(service: Option<(IpAddr, usize)>) -> String {
    let mut objs = vec![
        yaml::node(1),
        yaml::pool("blue", &["203.0.113.0/25"]),
        yaml::pool("green", &["203.0.113.128/25"]),
        yaml::peer("router", addressing::NODE_ASN, addressing::ROUTER_ASN, addressing::ROUTER_V4.into(), &[]),
        yaml::bgp_advertisement("blue", &["ipAddressPools: [blue]", "communities: [\"64512:1\"]"]),
        yaml::bgp_advertisement("green", &["ipAddressPools: [green]", "communities: [\"64512:2\"]"]),
    ];
    if let Some((ip, n)) = service {
        let eps: Vec<String> = (1..=n)
            .map(|i| {
                format!(
                    "- {{addresses: [10.0.0.{i}], nodeName: {}, conditions: {{ready: true}}}}",
                    addressing::node_name(1)
                )
            })
            .collect();
        let eps = if eps.is_empty() { " []".to_string() } else { format!("\n{}", eps.join("\n")) };
        objs.push(format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\nspec: {{type: LoadBalancer, externalTrafficPolicy: Local, ports: [{{port: 80, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: \"{ip}\"}}]}}}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\nendpoints:{eps}\n"
        ));
    }
    yaml::stream(&objs)
}

fn fetch(lab: &Lab, ip: IpAddr) -> String {
    client::http_get(lab.client(), SocketAddr::new(ip, 80), "/", Duration::from_secs(5)).unwrap()
}

#[test]
fn a_service_added_scaled_to_zero_and_moved_to_another_pool_is_followed_by_router_and_client() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    let (blue, green) = (addressing::bgp_vip_v4(10), addressing::bgp_vip_v4(140));
    let node: IpAddr = addressing::node_v4(1).into();
    let mut servers = Vec::new();
    for ip in [blue, green] {
        lab.add_vip_on_lo(lab.node(1), ip).unwrap();
        servers.push(HttpServer::start(lab.node(1), SocketAddr::new(ip, 80), "web on node1\n").unwrap());
    }
    let sp = Speaker::start_with(&lab, 1, &file(None), &speaker::binary("debug").unwrap(), &[]).unwrap();
    routers::wait_established(&bird, &[node], T).unwrap();
    // No timer: a route would follow Established within the margin of wait::stays.
    wait::stays("no Service, no route", Duration::ZERO, || bird.rib(), |rib| rib.is_empty()).unwrap();

    // Added: announced with the blue advertisement's community; the client reaches it.
    sp.replace_file(&file(Some((blue, 2)))).unwrap();
    let paths = routers::wait_rib(&bird, "203.0.113.10/32", &[node], T).unwrap();
    assert!(paths[0].communities.iter().any(|c| c == "64512:1"), "{paths:?}");
    routers::wait_kernel_route(lab.router(), "203.0.113.10/32", &[node], T).unwrap();
    assert_eq!(fetch(&lab, blue), "web on node1\n");

    // Scaled to zero: a Local Service without endpoints is withdrawn.
    sp.replace_file(&file(Some((blue, 0)))).unwrap();
    let gone = routers::wait_rib_gone(&bird, "203.0.113.10/32", T);
    assert!(gone.is_ok(), "{gone:?}\n{}", sp.logs());
    routers::wait_kernel_route(lab.router(), "203.0.113.10/32", &[], T).unwrap();

    // Scaled up again, then moved to the green pool: the old address goes, the new one
    // comes with the green community, and the client follows.
    sp.replace_file(&file(Some((blue, 1)))).unwrap();
    routers::wait_rib(&bird, "203.0.113.10/32", &[node], T).unwrap();
    sp.replace_file(&file(Some((green, 1)))).unwrap();
    let paths = routers::wait_rib(&bird, "203.0.113.140/32", &[node], T).unwrap();
    assert!(paths[0].communities.iter().any(|c| c == "64512:2"), "{paths:?}");
    routers::wait_rib_gone(&bird, "203.0.113.10/32", T).unwrap();
    routers::wait_kernel_route(lab.router(), "203.0.113.140/32", &[node], T).unwrap();
    assert_eq!(fetch(&lab, green), "web on node1\n");
    drop(servers);
}
