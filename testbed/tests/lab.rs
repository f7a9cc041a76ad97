//! Tests of the lab itself: real routers learn routes from a stand-in speaker, the
//! client reaches them, the recorder is faithful, neighbours follow gratuitous ARP,
//! and nothing is left behind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ferrolb_lab::client::{self, HttpServer, ProbeStream};
use ferrolb_lab::netns;
use ferrolb_lab::routers::exabgp::Record;
use ferrolb_lab::routers::{self, Bird, ExaBgp, ExaNeighbor, Frr, GoBgp, Router, RouterSpec, StaticRoute};
use ferrolb_lab::{Lab, LabConfig, addressing};

const T: Duration = Duration::from_secs(30);

/// node `i` announces the service VIPs over an IPv4 and an IPv6 session, with the VIPs
/// on its `lo` so it answers for them.
fn stand_in_speaker(lab: &Lab, i: usize, password: Option<&str>) -> ExaBgp {
    let (vip4, vip6) = (addressing::bgp_vip_v4(10), addressing::bgp_vip_v6(0x10));
    let node = lab.node(i);
    lab.add_vip_on_lo(node, vip4).unwrap();
    lab.add_vip_on_lo(node, vip6).unwrap();
    let mut n4 = ExaNeighbor::to_router(
        addressing::node_v4(i).into(),
        addressing::ROUTER_V4.into(),
        addressing::node_v4(i),
    )
    .route(StaticRoute::new("203.0.113.10/32", addressing::node_v4(i).into()));
    let mut n6 = ExaNeighbor::to_router(
        addressing::node_v6(i).into(),
        addressing::ROUTER_V6.into(),
        addressing::node_v4(i),
    )
    .route(StaticRoute::new("2001:db8:3::10/128", addressing::node_v6(i).into()));
    n4.password = password.map(String::from);
    n6.password = password.map(String::from);
    ExaBgp::start(lab, node, &format!("speaker{i}"), &[n4, n6]).unwrap()
}

fn nodes_v4(n: usize) -> Vec<IpAddr> {
    (1..=n).map(|i| addressing::node_v4(i).into()).collect()
}

fn nodes_v6(n: usize) -> Vec<IpAddr> {
    (1..=n).map(|i| addressing::node_v6(i).into()).collect()
}

/// Two nodes announce the same VIPs: the router learns both paths over IPv4 and IPv6
/// transport, installs ECMP kernel routes, and the client reaches the VIPs through it.
fn router_learns_routes_and_forwards(lab: &Lab, router: &dyn Router) {
    let _s1 = stand_in_speaker(lab, 1, None);
    let _s2 = stand_in_speaker(lab, 2, None);
    let peers: Vec<IpAddr> = nodes_v4(2).into_iter().chain(nodes_v6(2)).collect();
    routers::wait_established(router, &peers, T).unwrap();

    let paths = routers::wait_rib(router, "203.0.113.10/32", &nodes_v4(2), T).unwrap();
    assert!(paths.iter().all(|p| p.as_path == vec![addressing::NODE_ASN]), "{paths:?}");
    routers::wait_rib(router, "2001:db8:3::10/128", &nodes_v6(2), T).unwrap();
    routers::wait_kernel_route(router.netns(), "203.0.113.10/32", &nodes_v4(2), T).unwrap();
    routers::wait_kernel_route(router.netns(), "2001:db8:3::10/128", &nodes_v6(2), T).unwrap();

    for vip in [addressing::bgp_vip_v4(10), addressing::bgp_vip_v6(0x10)] {
        let probe = ProbeStream::start(lab.client(), vip, Duration::from_millis(10)).unwrap();
        probe.wait_answered(30, T).unwrap();
        let r = probe.stop(Duration::from_millis(200));
        assert!(r.sent >= 10 && r.lost() == 0, "client → {vip} through {}: {r:?}", router.kind());
    }
}

#[test]
fn bird_learns_v4_and_v6_routes_into_its_kernel_with_ecmp() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    router_learns_routes_and_forwards(&lab, &bird);
}

#[test]
fn frr_learns_v4_and_v6_routes_into_its_kernel_with_ecmp() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let frr = Frr::start(&lab, &RouterSpec::default()).unwrap();
    router_learns_routes_and_forwards(&lab, &frr);
}

#[test]
fn gobgp_learns_v4_and_v6_routes_into_its_kernel_with_ecmp() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let gobgp = GoBgp::start(&lab, &RouterSpec::default()).unwrap();
    router_learns_routes_and_forwards(&lab, &gobgp);
}

/// The recording peer reports exactly the attributes sent: communities, large
/// communities, MED and (iBGP) LOCAL_PREF, then End-of-RIB.
#[test]
fn recorder_reports_attributes_faithfully() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let asn = addressing::ROUTER_ASN;
    let rec = ExaNeighbor::passive(addressing::ROUTER_V4, 1, asn, asn);
    let recorder = ExaBgp::start(&lab, lab.router(), "recorder", &[rec]).unwrap();

    let mut route = StaticRoute::new("203.0.113.20/32", addressing::node_v4(1).into());
    route.communities = vec!["64512:100".into(), "65535:0".into()];
    route.large_communities = vec!["64512:1:2".into(), "4200000000:7:8".into()];
    route.local_pref = Some(250);
    route.med = Some(42);
    let mut sender = ExaNeighbor::to_router(
        addressing::node_v4(1).into(),
        addressing::ROUTER_V4.into(),
        addressing::node_v4(1),
    )
    .route(route);
    (sender.local_as, sender.peer_as) = (asn, asn);
    let _speaker = ExaBgp::start(&lab, lab.node(1), "sender", &[sender]).unwrap();

    let got = recorder
        .wait_record(
            "the UPDATE for 203.0.113.20/32",
            T,
            |r| matches!(r, Record::Update(u) if u.announced.iter().any(|(p, _)| p == "203.0.113.20/32")),
        )
        .unwrap();
    let Record::Update(u) = got else { unreachable!() };
    assert_eq!(u.peer, IpAddr::from(addressing::node_v4(1)));
    assert_eq!(u.announced, vec![("203.0.113.20/32".to_string(), Some(addressing::node_v4(1).into()))]);
    assert_eq!(u.attrs.communities, vec!["64512:100", "65535:0"]);
    assert_eq!(u.attrs.large_communities, vec!["64512:1:2", "4200000000:7:8"]);
    assert_eq!(u.attrs.local_pref, Some(250));
    assert_eq!(u.attrs.med, Some(42));
    assert_eq!(u.attrs.origin.as_deref(), Some("igp"));
    recorder
        .wait_record(
            "End-of-RIB for IPv4",
            T,
            |r| matches!(r, Record::EndOfRib { family, .. } if family == "ipv4 unicast"),
        )
        .unwrap();
    // The recorder is also a Router: its RIB is rebuilt from what it received.
    let rib = recorder.rib().unwrap();
    assert_eq!(rib.len(), 1, "{rib:?}");
    assert_eq!(rib[0].communities, vec!["64512:100", "65535:0"]);
}

/// TCP MD5: the right password gives a session, a wrong one none, and the router's
/// kernel counts the bad segments.
#[test]
fn md5_password_gates_the_session() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let bird = Bird::start(&lab, &RouterSpec::default().password("right-password")).unwrap();
    let _good = stand_in_speaker(&lab, 1, Some("right-password"));
    let _bad = stand_in_speaker(&lab, 2, Some("wrong-password"));
    routers::wait_established(&bird, &[addressing::node_v4(1).into(), addressing::node_v6(1).into()], T)
        .unwrap();
    let md5_failures = || -> u64 {
        let out = lab.router().exec(&["nstat", "-az", "TcpExtTCPMD5Failure"]).unwrap();
        out.lines()
            .find_map(|l| l.strip_prefix("TcpExtTCPMD5Failure"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    ferrolb_lab::wait::until("MD5 failures counted at the router", T, || {
        Ok((md5_failures() > 0).then_some(()))
    })
    .unwrap();
    let up = bird.established().unwrap();
    assert!(!up.contains(&IpAddr::from(addressing::node_v4(2))), "wrong password got a session: {up:?}");
}

/// A gratuitous ARP (sent as a request) moves the client's existing entry to the new MAC.
#[test]
fn client_neighbour_entry_follows_gratuitous_arp() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let vip: IpAddr = "192.0.2.200".parse().unwrap();
    lab.node(1).ip(&["addr", "add", "192.0.2.200/32", "dev", "eth0"]).unwrap();
    // A real resolution creates the entry (a gratuitous ARP never creates one).
    let probe = ProbeStream::start(lab.client(), vip, Duration::from_millis(10)).unwrap();
    probe.wait_answered(1, T).unwrap();
    assert!(probe.stop(Duration::from_millis(100)).received > 0);
    client::wait_neighbour_mac(lab.client(), "eth0", vip, &addressing::node_mac(1), T).unwrap();

    lab.node(1).ip(&["addr", "del", "192.0.2.200/32", "dev", "eth0"]).unwrap();
    lab.node(2).ip(&["addr", "add", "192.0.2.200/32", "dev", "eth0"]).unwrap();
    client::gratuitous_arp(lab.node(2), "eth0", vip).unwrap();
    client::wait_neighbour_mac(lab.client(), "eth0", vip, &addressing::node_mac(2), Duration::from_secs(2))
        .unwrap();
}

/// The probe stream sees an outage as a gap of about its length.
#[test]
fn probe_stream_reports_loss_gaps() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let target: IpAddr = addressing::node_v4(1).into();
    let probe = ProbeStream::start(lab.client(), target, Duration::from_millis(10)).unwrap();
    probe.wait_answered(30, T).unwrap();
    lab.node(1).ip(&["link", "set", "eth0", "down"]).unwrap();
    // The outage the stream must see (the input, not a wait).
    std::thread::sleep(Duration::from_millis(400));
    lab.node(1).ip(&["link", "set", "eth0", "up"]).unwrap();
    // The gap is closed once the stream is answered again.
    probe.wait_answered(30, T).unwrap();
    let r = probe.stop(Duration::from_millis(200));
    assert_eq!(r.gaps.len(), 1, "{r:?}");
    let g = &r.gaps[0];
    // The link was down for 400 ms: at least that many probes are lost.
    assert!(g.lost >= 30 && g.outage >= Duration::from_millis(300), "{g:?}");
    assert!(g.at >= Duration::from_millis(250), "{g:?}");
}

/// The client fetches over HTTP from a node's server through the router.
#[test]
fn client_fetches_http_through_the_router() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    let _s = stand_in_speaker(&lab, 1, None);
    let _srv =
        HttpServer::start(lab.node(1), SocketAddr::new(addressing::bgp_vip_v4(10), 8080), "node1").unwrap();
    routers::wait_kernel_route(bird.netns(), "203.0.113.10/32", &nodes_v4(1), T).unwrap();
    let body = client::http_get(
        lab.client(),
        SocketAddr::new(addressing::bgp_vip_v4(10), 8080),
        "/",
        Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(body, "node1");
}

/// Dropping a lab (normally or while panicking) kills its processes and removes its
/// namespaces; two labs with the same addresses run side by side.
#[test]
fn labs_are_isolated_and_leave_nothing_behind() {
    let a = Lab::up(LabConfig::nodes(1)).unwrap();
    let b = Lab::up(LabConfig::nodes(1)).unwrap();
    assert_ne!(a.id(), b.id());
    let bird_a = Bird::start(&a, &RouterSpec::default()).unwrap();
    let _bird_b = Bird::start(&b, &RouterSpec::default()).unwrap();
    let pid_a = a.router().pids();
    assert!(!pid_a.is_empty());
    let names_a: Vec<String> = a.all().iter().map(|n| n.name().to_string()).collect();
    drop(bird_a);
    drop(a);
    for n in &names_a {
        assert!(!netns::list().contains(n), "{n} left behind");
    }
    for p in pid_a {
        assert!(!netns::pid_alive(p), "process {p} left behind");
    }
    // The other lab is untouched.
    let probe =
        ProbeStream::start(b.client(), addressing::ROUTER_V4.into(), Duration::from_millis(10)).unwrap();
    probe.wait_answered(20, T).unwrap();
    assert_eq!(probe.stop(Duration::from_millis(100)).lost(), 0);

    let names = std::thread::spawn(|| {
        let lab = Lab::up(LabConfig::nodes(1)).unwrap();
        let names: Vec<String> = lab.all().iter().map(|n| n.name().to_string()).collect();
        let bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
        let pids = lab.router().pids();
        std::panic::panic_any((names, pids, bird, lab.dir().to_path_buf()));
    })
    .join()
    .unwrap_err();
    let (names, pids, _bird, dir) =
        *names.downcast::<(Vec<String>, Vec<i32>, Bird, std::path::PathBuf)>().unwrap();
    // A failed lab keeps its logs for debugging; this failure was on purpose.
    assert!(dir.join("bird.log").exists());
    std::fs::remove_dir_all(dir).unwrap();
    for n in &names {
        assert!(!netns::list().contains(n), "{n} left behind after a panic");
    }
    for p in pids {
        assert!(!netns::pid_alive(p), "process {p} left behind after a panic");
    }
}

#[test]
fn demo_runs_to_completion() {
    ferrolb_testbed::demo::run().unwrap();
}

#[test]
fn nodes_reach_the_fake_apiserver_over_http() {
    use ferrolb_lab::kubeapi::Objects;
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let cluster = ferrolb_lab::kubeapi::FakeCluster::start(&lab).unwrap();
    let node = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node1"}});
    cluster.apply(&node).unwrap();
    let body =
        client::http_get(lab.node(1), cluster.addr(), "/api/v1/nodes/node1", Duration::from_secs(5)).unwrap();
    let got: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(got["metadata"]["name"], "node1", "{body}");
    assert!(std::fs::read_to_string(cluster.kubeconfig()).unwrap().contains(&cluster.addr().to_string()));
    // The outage controls reach HTTP clients too.
    cluster.api().set_unavailable(true);
    let err = client::http_get(lab.node(1), cluster.addr(), "/api/v1/nodes/node1", Duration::from_secs(5));
    assert!(format!("{err:?}").contains("503"), "{err:?}");
}
