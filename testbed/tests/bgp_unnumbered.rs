//! BGP unnumbered: a real `ferrolb-speaker --static` whose BGPPeer names an interface
//! instead of an address peers with real FRR (`neighbor p2p0 interface`) over a
//! point-to-point veth that holds only IPv6 link-local addresses. The speaker finds r1 by
//! its router advertisements, r1 finds the speaker by the speaker's; the session runs
//! between the two link-local addresses with the extended next hop capability (RFC 8950),
//! the IPv4 /32 lands in r1's kernel via an `inet6` gateway on p2p0 (the IPv6 /128 via
//! the same link-local address), and the client, behind r1, reaches the Service's
//! addresses of both families through it. The same with real BIRD
//! (a neighbour `fe80::…%p2p0`, `extended next hop on`, `protocol radv`).
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use ferrolb_lab::client::{EchoServer, flow_split, open_flows};
use ferrolb_lab::routers::{self, BfdSpec, Bird, Frr, RouterSpec, Unnumbered};
use ferrolb_lab::speaker::{Speaker, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use serde_json::Value;

const T: Duration = Duration::from_secs(30);
const PORT: u16 = 8080;
/// The point-to-point link's name on both ends.
const LINK: &str = "p2p0";

/// Node1's static file: the BGP pools, r1 as an unnumbered peer on [`LINK`] (`extra`:
/// more `spec` entries of the BGPPeer), one Service holding both `vips`, and `objects`.
fn static_file(vips: [IpAddr; 2], extra: &[String], objects: &[String]) -> String {
    let extra: String = extra.iter().map(|e| format!(", {e}")).collect();
    let peer = format!(
        "apiVersion: ferrolb.io/v1alpha1\nkind: BGPPeer\nmetadata: {{name: fabric}}\nspec: {{myASN: {}, peerASN: {}, interface: {LINK}{extra}}}\n",
        addressing::NODE_ASN,
        addressing::ROUTER_ASN
    );
    let [v4, v6] = vips;
    let service = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\nspec: {{type: LoadBalancer, ipFamilyPolicy: RequireDualStack, ports: [{{port: {PORT}, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: {v4}}}, {{ip: \"{v6}\"}}]}}}}\n"
    );
    yaml::stream(
        &[
            yaml::node(1),
            yaml::pool("public", &[addressing::BGP_POOL_V4, addressing::BGP_POOL_V6]),
            peer,
            yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
            service,
        ]
        .into_iter()
        .chain(objects.iter().cloned())
        .collect::<Vec<_>>(),
    )
}

/// The link-local address of `dev` in `ns`'s `ip -j addr` output.
fn link_local(text: &str) -> Option<String> {
    let v: Value = serde_json::from_str(text.trim()).ok()?;
    v.as_array()?.iter().flat_map(|l| l["addr_info"].as_array().into_iter().flatten()).find_map(|a| {
        (a["scope"] == "link" && a["family"] == "inet6")
            .then(|| a["local"].as_str().map(str::to_owned))
            .flatten()
    })
}

/// Node1 and r1 joined by [`LINK`], link-local addresses only; the node's one, and the
/// router spec peering unnumbered with it.
fn unnumbered_lab() -> (Lab, Ipv6Addr, RouterSpec) {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let (node, router) = (lab.node(1), lab.router());
    node.ip(&["link", "add", LINK, "type", "veth", "peer", "name", LINK, "netns", router.name()]).unwrap();
    for ns in [node, router] {
        ns.ip(&["link", "set", LINK, "up"]).unwrap();
    }
    let node_ll =
        link_local(&node.ip(&["-j", "addr", "show", "dev", LINK]).unwrap()).unwrap().parse().unwrap();
    let unnumbered = Unnumbered { interface: LINK.into(), neighbor: node_ll };
    let spec = RouterSpec { interfaces: vec![unnumbered], ranges: Vec::new(), ..RouterSpec::default() };
    (lab, node_ll, spec)
}

/// Starts node1's speaker for one Service and proves the route: the /32 in r1's kernel
/// via `inet6` the node's link-local address on [`LINK`], and the client behind r1
/// reaching the Service through it. `established` says whether r1's session is up.
fn announce_and_reach(
    lab: &Lab,
    node_ll: Ipv6Addr,
    peer: &[String],
    established: &dyn Fn() -> bool,
    diag: &dyn Fn() -> String,
) -> Speaker {
    announce_and_reach_with(lab, node_ll, peer, &[], established, diag)
}

/// [`announce_and_reach`] with more objects in the static file.
fn announce_and_reach_with(
    lab: &Lab,
    node_ll: Ipv6Addr,
    peer: &[String],
    objects: &[String],
    established: &dyn Fn() -> bool,
    diag: &dyn Fn() -> String,
) -> Speaker {
    let (node, router) = (lab.node(1), lab.router());
    let vips = [addressing::bgp_vip_v4(30), addressing::bgp_vip_v6(30)];
    let mut servers = Vec::new();
    for vip in vips {
        lab.add_vip_on_lo(node, vip).unwrap();
        servers.push(EchoServer::start(node, SocketAddr::new(vip, PORT), "node1").unwrap());
    }
    let start = Instant::now();
    let speaker = Speaker::start(lab, 1, &static_file(vips, peer, objects)).unwrap();
    let up = wait::until_holds("r1's unnumbered session Established", T, established);
    assert!(up.is_ok(), "{up:?}\n{}\n{}", speaker.logs(), diag());
    println!("session Established {:?} after the speaker started", start.elapsed());

    // Both families over the node's link-local address on p2p0: IPv4 as an `inet6`
    // gateway (RFC 8950), IPv6 as usual.
    for (vip, family, via, client) in [
        (vips[0], "-4", format!("via inet6 {node_ll}"), IpAddr::from(addressing::CLIENT_LINK_V4)),
        (vips[1], "-6", format!("via {node_ll}"), IpAddr::from(addressing::CLIENT_LINK_V6)),
    ] {
        let prefix = if vip.is_ipv4() { format!("{vip}/32") } else { format!("{vip}/128") };
        let route = wait::until_value(
            &format!("{prefix} in r1's kernel via the node's link-local address"),
            T,
            || Ok(router.ip(&[family, "route", "show", &prefix]).unwrap_or_default()),
            |r| r.contains(&via) && r.contains(&format!("dev {LINK}")),
        );
        let route = route.unwrap_or_else(|e| panic!("{e:?}\n{}", diag()));
        println!("r1's kernel: {}", route.trim());

        let flows = open_flows(
            lab.client(),
            client,
            21000..21020,
            SocketAddr::new(vip, PORT),
            Duration::from_secs(5),
        )
        .unwrap();
        let split = flow_split(&flows);
        println!("20 connections from the client, behind r1, to {vip}: {split:?}");
        assert_eq!(split.get("node1"), Some(&20), "{split:?}");
    }
    drop(servers);
    // One router found, once: the session was never rebuilt.
    assert_eq!(speaker.logs().matches("router found on the link").count(), 1, "{}", speaker.logs());
    speaker
}

#[test]
fn frr_peers_unnumbered_and_routes_ipv4_over_the_ipv6_link_local_next_hop() {
    let (lab, node_ll, spec) = unnumbered_lab();
    let frr = Frr::start(&lab, &spec).unwrap();
    // r1 names its unnumbered neighbour by the interface.
    let neighbor = || -> Value {
        let text = frr.vtysh(&format!("show bgp neighbors {LINK} json")).unwrap_or_default();
        serde_json::from_str::<Value>(&text).unwrap_or(Value::Null)[LINK].clone()
    };
    let diag = || frr.vtysh(&format!("show bgp neighbors {LINK}")).unwrap_or_default();
    let _speaker = announce_and_reach(&lab, node_ll, &[], &|| neighbor()["bgpState"] == "Established", &diag);
    let n = neighbor();
    assert_eq!(
        n["hostForeign"].as_str(),
        Some(node_ll.to_string().as_str()),
        "from the node's link-local\n{n}"
    );
    let enhe = &n["neighborCapabilities"]["extendedNexthop"];
    assert_eq!(enhe.as_str(), Some("advertisedAndReceived"), "extended next hop negotiated\n{n}");
    println!("FRR: neighbour {} on {LINK}, extended next hop {enhe}", n["hostForeign"]);
}

#[test]
fn bird_peers_with_a_scoped_link_local_neighbour_and_extended_next_hop() {
    let (lab, node_ll, spec) = unnumbered_lab();
    let bird = Bird::start(&lab, &spec).unwrap();
    let proto = || bird.birdc("show protocols all speakers0").unwrap_or_default();
    let _speaker = announce_and_reach(&lab, node_ll, &[], &|| proto().contains("Established"), &proto);
    let text = proto();
    println!("BIRD:\n{text}");
    assert!(text.contains(&format!("Neighbor address: {node_ll}%{LINK}")), "{text}");
    let theirs = text.split("Neighbor capabilities").nth(1).unwrap_or_default();
    assert!(
        theirs.contains("Extended next hop\n        IPv6 nexthop: ipv4"),
        "RFC 8950 from the speaker\n{text}"
    );
}

/// MD5, graceful restart and GTSM on the unnumbered session as on a numbered one, with
/// BIRD requiring all three (`password`, `graceful restart on`, `ttl security on`): the
/// session comes up only if the speaker signs with the password (scoped to the link's
/// link-local address) and sends with hop limit 255, and BIRD sees its restart
/// capability.
#[test]
fn md5_graceful_restart_and_gtsm_hold_on_an_unnumbered_session() {
    let (lab, node_ll, spec) = unnumbered_lab();
    let spec = RouterSpec {
        ttl_security: true,
        ..spec.password("unnumbered-secret").graceful_restart(Duration::from_secs(60))
    };
    let bird = Bird::start(&lab, &spec).unwrap();
    let pw = lab.subdir("secrets").unwrap().join("fabric.password");
    std::fs::write(&pw, "unnumbered-secret\n").unwrap();
    let peer = [
        format!("passwordFile: {}", pw.display()),
        "gracefulRestart: {enabled: true, restartTime: 120s}".to_owned(),
        "ttlSecurity: true".to_owned(),
    ];
    let proto = || bird.birdc("show protocols all speakers0").unwrap_or_default();
    let _speaker = announce_and_reach(&lab, node_ll, &peer, &|| proto().contains("Established"), &proto);
    let text = proto();
    let theirs = text.split("Neighbor capabilities").nth(1).unwrap_or_default();
    assert!(theirs.contains("Graceful restart") && theirs.contains("Extended next hop"), "{text}");
    let config = std::fs::read_to_string(lab.dir().join("bird/bird.conf")).unwrap();
    for needed in ["password \"unnumbered-secret\"", "ttl security on", "graceful restart on"] {
        assert!(config.contains(needed), "BIRD requires {needed}\n{config}");
    }
}

/// BFD on the link: with a `bfdProfile` the speaker runs single-hop BFD between the two
/// link-local addresses, scoped to the link, and FRR (`neighbor … bfd` on the interface
/// peer) sees it Up from the node's link-local address on p2p0; the speaker's session
/// says Up too.
#[test]
fn bfd_runs_between_the_link_local_addresses() {
    let (lab, node_ll, spec) = unnumbered_lab();
    let bfd = BfdSpec {
        neighbors: Vec::new(),
        interface: LINK.into(),
        interval: Duration::from_millis(100),
        multiplier: 3,
    };
    let frr = Frr::start(&lab, &spec.bfd(bfd)).unwrap();
    let neighbor = || -> Value {
        let text = frr.vtysh(&format!("show bgp neighbors {LINK} json")).unwrap_or_default();
        serde_json::from_str::<Value>(&text).unwrap_or(Value::Null)[LINK].clone()
    };
    let diag = || frr.vtysh("show bfd peers").unwrap_or_default();
    let peer = ["bfdProfile: fast".to_owned()];
    let profile = "apiVersion: ferrolb.io/v1alpha1\nkind: BFDProfile\nmetadata: {name: fast}\nspec: {transmitInterval: 100ms, receiveInterval: 100ms, detectMultiplier: 3}\n";
    let speaker = announce_and_reach_with(
        &lab,
        node_ll,
        &peer,
        &[profile.to_owned()],
        &|| neighbor()["bgpState"] == "Established",
        &diag,
    );
    routers::wait_bfd(&frr, IpAddr::V6(node_ll), "up", T)
        .unwrap_or_else(|e| panic!("{e:?}\n{}\n{}", diag(), speaker.logs()));
    let peers: Value = serde_json::from_str(&frr.vtysh("show bfd peers json").unwrap()).unwrap();
    println!("FRR's BFD peers: {peers}");
    let p = peers.as_array().and_then(|a| a.first()).cloned().unwrap_or(Value::Null);
    assert_eq!((p["interface"].as_str(), p["status"].as_str()), (Some(LINK), Some("up")), "{peers}");
    speaker.wait_log("BFD session Up", T).unwrap();
    let logs = speaker.logs();
    let started = logs.lines().find(|l| l.contains("BFD session started")).unwrap_or_default();
    assert!(started.contains(&node_ll.to_string()), "BFD from the link-local address\n{logs}");
}
