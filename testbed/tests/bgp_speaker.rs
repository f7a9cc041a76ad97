//! The real `ferrolb-speaker` binary in static mode against BIRD 2, FRR, GoBGP and an
//! ExaBGP recorder: sessions over IPv4 and IPv6 transport, eBGP and iBGP, attributes
//! exactly as configured, file edits reaching the routers, Cease on peer removal, TCP
//! MD5, and graceful restart across a SIGKILL.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::IpAddr;
use std::time::Duration;

use ferrolb_lab::addressing::{node_ip as v4, node_ip6 as v6};
use ferrolb_lab::client::ProbeStream;
use ferrolb_lab::routers::exabgp::Record;
use ferrolb_lab::routers::{self, Bird, ExaBgp, ExaNeighbor, Frr, GoBgp, Router, RouterSpec};
use ferrolb_lab::speaker::{Speaker, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};

const T: Duration = Duration::from_secs(30);

/// Node 1 peers with the lab router over IPv4 (ipv4-unicast) and IPv6 (ipv6-unicast).
fn router_peers(my_asn: u32, peer_asn: u32, extra: &[&str]) -> Vec<String> {
    router_peers_as(my_asn, &peer_asn.to_string(), extra)
}

/// As [`router_peers`], with the router's AS a number or (`dynamicASN`) `internal` / `external`.
fn router_peers_as(my_asn: u32, peer_as: &str, extra: &[&str]) -> Vec<String> {
    let mut e4 = vec!["addressFamilies: [ipv4-unicast]"];
    e4.extend_from_slice(extra);
    let mut e6 = vec!["addressFamilies: [ipv6-unicast]"];
    e6.extend_from_slice(extra);
    let peer = |name: &str, address: IpAddr, extra: &[&str]| match peer_as.parse::<u32>() {
        Ok(asn) => yaml::peer(name, my_asn, asn, address, extra),
        Err(_) => yaml::dynamic_peer(name, my_asn, peer_as, address, extra),
    };
    vec![
        peer("router-v4", addressing::ROUTER_V4.into(), &e4),
        peer("router-v6", addressing::ROUTER_V6.into(), &e6),
    ]
}

fn static_file(services: &[(&str, Vec<IpAddr>)], peers: Vec<String>, advertisement: &[&str]) -> String {
    let mut objs = vec![
        yaml::node(1),
        yaml::node(2),
        yaml::pool("public", &[addressing::BGP_POOL_V4, "2001:db8:3::/120"]),
    ];
    objs.extend(services.iter().map(|(n, ips)| yaml::service(n, ips)));
    objs.extend(peers);
    objs.push(yaml::bgp_advertisement("public", advertisement));
    yaml::stream(&objs)
}

/// Which router implementation a matrix case runs.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Bird,
    Frr,
    GoBgp,
}

/// eBGP (node ASN ≠ router ASN) or iBGP (the node takes the router's ASN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ebgp,
    Ibgp,
}

/// One cell of issue 3's interop matrix: the speaker peers with `kind` over IPv4 and
/// IPv6 transport in `mode`; IPv4 and IPv6 prefixes reach the router's RIB (with the
/// communities, large communities and, on iBGP, the LOCAL_PREF configured on the
/// BGPAdvertisement) and its kernel table.
fn interop(kind: Kind, mode: Mode) {
    interop_as(kind, mode, &addressing::ROUTER_ASN.to_string());
}

/// [`interop`] with the router's AS given as `peer_as`: its number, or `dynamicASN`'s
/// `internal` / `external`, learned from the router's OPEN.
fn interop_as(kind: Kind, mode: Mode, peer_as: &str) {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let spec = match mode {
        Mode::Ebgp => RouterSpec::default(),
        Mode::Ibgp => RouterSpec::default().ibgp(),
    };
    let router: Box<dyn Router> = match kind {
        Kind::Bird => Box::new(Bird::start(&lab, &spec).unwrap()),
        Kind::Frr => Box::new(Frr::start(&lab, &spec).unwrap()),
        Kind::GoBgp => Box::new(GoBgp::start(&lab, &spec).unwrap()),
    };
    let my_asn = match mode {
        Mode::Ebgp => addressing::NODE_ASN,
        Mode::Ibgp => addressing::ROUTER_ASN,
    };
    let (vip4, vip6) = (addressing::bgp_vip_v4(10), addressing::bgp_vip_v6(0x10));
    let file = static_file(
        &[("web", vec![vip4, vip6])],
        router_peers_as(my_asn, peer_as, &[]),
        &["ipAddressPools: [public]", "localPref: 250", "communities: [\"64512:100\", \"large:64512:1:2\"]"],
    );
    let _speaker = Speaker::start(&lab, 1, &file).unwrap();
    let r = routers::wait_established(router.as_ref(), &[v4(1), v6(1)], T);
    assert!(r.is_ok(), "{kind:?} {mode:?}: {r:?}\n{}", lab.logs(40));
    for (prefix, nh) in [("203.0.113.10/32", v4(1)), ("2001:db8:3::10/128", v6(1))] {
        let paths = routers::wait_rib(router.as_ref(), prefix, &[nh], T).unwrap();
        let p = &paths[0];
        match mode {
            // eBGP: our AS prepended; LOCAL_PREF is not sent (the router shows its default).
            Mode::Ebgp => assert_eq!(p.as_path, vec![addressing::NODE_ASN], "{kind:?} {mode:?}: {p:?}"),
            Mode::Ibgp => {
                assert!(p.as_path.is_empty(), "{kind:?} {mode:?}: {p:?}");
                assert_eq!(p.local_pref, Some(250), "{kind:?} {mode:?}: {p:?}");
            }
        }
        assert_eq!(p.communities, vec!["64512:100"], "{kind:?} {mode:?}: {p:?}");
        assert_eq!(p.large_communities, vec!["64512:1:2"], "{kind:?} {mode:?}: {p:?}");
        let r = routers::wait_kernel_route(router.netns(), prefix, &[nh], T);
        assert!(r.is_ok(), "{kind:?} {mode:?}: {r:?}\n{}", lab.logs(40));
    }
}

#[test]
fn interop_bird_ebgp() {
    interop(Kind::Bird, Mode::Ebgp);
}

#[test]
fn interop_bird_ibgp() {
    interop(Kind::Bird, Mode::Ibgp);
}

#[test]
fn interop_frr_ebgp() {
    interop(Kind::Frr, Mode::Ebgp);
}

#[test]
fn interop_frr_ibgp() {
    interop(Kind::Frr, Mode::Ibgp);
}

#[test]
fn interop_gobgp_ebgp() {
    interop(Kind::GoBgp, Mode::Ebgp);
}

#[test]
fn interop_gobgp_ibgp() {
    interop(Kind::GoBgp, Mode::Ibgp);
}

#[test]
fn interop_frr_ebgp_dynamic_asn() {
    interop_as(Kind::Frr, Mode::Ebgp, "external");
}

#[test]
fn interop_bird_ibgp_dynamic_asn() {
    interop_as(Kind::Bird, Mode::Ibgp, "internal");
}

/// `dynamicASN: internal` against a router in another AS: its OPEN is refused with Bad
/// Peer AS and the session never comes up.
#[test]
fn dynamic_asn_refuses_a_router_on_the_other_side() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let router = Frr::start(&lab, &RouterSpec::default()).unwrap();
    let file = static_file(
        &[("web", vec![addressing::bgp_vip_v4(10)])],
        router_peers_as(addressing::NODE_ASN, "internal", &[]),
        &["ipAddressPools: [public]"],
    );
    let speaker = Speaker::start(&lab, 1, &file).unwrap();
    speaker.wait_log("bad peer AS", T).unwrap();
    assert_eq!(router.established().unwrap(), Default::default(), "{}", lab.logs(40));
}

/// BIRD (eBGP) and the ExaBGP recorder (iBGP) at once: attributes exactly as
/// configured; edits by rename and in place reach both; an invalid edit changes
/// nothing; a removed peer gets a Cease NOTIFICATION; SIGTERM exits 0 with Cease.
#[test]
fn speaker_follows_static_file_edits_with_bird_and_recorder() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    // The recorder sits on the client's LAN address, iBGP, passive.
    let recorder = ExaBgp::start(&lab, lab.client(), "recorder", &[ExaNeighbor::recorder(1)]).unwrap();
    let recorder_peer = || yaml::recorder_peer();

    let (vip4, vip6) = (addressing::bgp_vip_v4(10), addressing::bgp_vip_v6(0x10));
    let ad =
        ["ipAddressPools: [public]", "localPref: 250", "communities: [\"64512:100\", \"large:64512:1:2\"]"];
    let mut peers = router_peers(addressing::NODE_ASN, addressing::ROUTER_ASN, &[]);
    peers.push(recorder_peer());
    let mut speaker =
        Speaker::start(&lab, 1, &static_file(&[("web", vec![vip4, vip6])], peers.clone(), &ad)).unwrap();

    let r = routers::wait_established(&bird, &[v4(1), v6(1)], T);
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    let paths = routers::wait_rib(&bird, "203.0.113.10/32", &[v4(1)], T).unwrap();
    // eBGP: our AS prepended, LOCAL_PREF not sent (BIRD shows its own default).
    assert_eq!(paths[0].as_path, vec![addressing::NODE_ASN]);
    assert_eq!(paths[0].communities, vec!["64512:100"]);
    assert_eq!(paths[0].large_communities, vec!["64512:1:2"]);
    routers::wait_rib(&bird, "2001:db8:3::10/128", &[v6(1)], T).unwrap();
    routers::wait_kernel_route(bird.netns(), "203.0.113.10/32", &[v4(1)], T).unwrap();
    routers::wait_kernel_route(bird.netns(), "2001:db8:3::10/128", &[v6(1)], T).unwrap();

    let announced = |prefix: &'static str| move |r: &Record| matches!(r, Record::Update(u) if u.announced.iter().any(|(p, _)| p == prefix));
    let Record::Update(u) =
        recorder.wait_record("203.0.113.10/32 at the recorder", T, announced("203.0.113.10/32")).unwrap()
    else {
        unreachable!()
    };
    assert_eq!(u.peer, v4(1));
    assert_eq!(u.attrs.communities, vec!["64512:100"]);
    assert_eq!(u.attrs.large_communities, vec!["64512:1:2"]);
    assert_eq!(u.attrs.local_pref, Some(250), "iBGP carries localPref");
    assert_eq!(u.attrs.origin.as_deref(), Some("igp"));
    assert!(u.attrs.as_path.is_empty(), "iBGP: empty AS_PATH, got {:?}", u.attrs.as_path);
    // IPv6 over the IPv4 session, next hop = the node's IPv6 address.
    let Record::Update(u6) = recorder
        .wait_record("2001:db8:3::10/128 at the recorder", T, announced("2001:db8:3::10/128"))
        .unwrap()
    else {
        unreachable!()
    };
    assert_eq!(u6.announced[0].1, Some(v6(1)));
    recorder
        .wait_record(
            "End-of-RIB",
            T,
            |r| matches!(r, Record::EndOfRib { family, .. } if family == "ipv4 unicast"),
        )
        .unwrap();

    // Edit 1, by rename: one address added, the IPv6 one removed, communities changed.
    let vip11 = addressing::bgp_vip_v4(11);
    let ad2 = ["ipAddressPools: [public]", "localPref: 300", "communities: [\"64512:200\"]"];
    // The routers' BGPPeers change too (holdTime): their sessions are re-made.
    let mut peers2 = router_peers(addressing::NODE_ASN, addressing::ROUTER_ASN, &["holdTime: 30s"]);
    peers2.push(recorder_peer());
    speaker.replace_file(&static_file(&[("web", vec![vip4, vip11])], peers2.clone(), &ad2)).unwrap();
    routers::wait_rib(&bird, "203.0.113.11/32", &[v4(1)], T).unwrap();
    routers::wait_rib_gone(&bird, "2001:db8:3::10/128", T).unwrap();
    let changed = recorder
        .wait_record("new attributes at the recorder", T, |r| {
            matches!(r, Record::Update(u) if u.attrs.communities == ["64512:200"] && u.attrs.local_pref == Some(300))
        })
        .unwrap();
    let Record::Update(c) = changed else { unreachable!() };
    assert!(c.attrs.large_communities.is_empty(), "{c:?}");
    let rib = recorder.rib().unwrap();
    let mut prefixes: Vec<&str> = rib.iter().map(|p| p.prefix.as_str()).collect();
    prefixes.sort();
    assert_eq!(prefixes, vec!["203.0.113.10/32", "203.0.113.11/32"], "recorder RIB: {rib:?}");

    // The same text written again is read and hashed, not parsed nor applied again.
    const UNCHANGED: &str = "static file unchanged: not parsed again";
    let skipped = speaker.logs().matches(UNCHANGED).count();
    speaker.rewrite_file(&static_file(&[("web", vec![vip4, vip11])], peers2.clone(), &ad2)).unwrap();
    wait::until("the rewrite seen as unchanged", T, || {
        Ok((speaker.logs().matches(UNCHANGED).count() > skipped).then_some(()))
    })
    .unwrap();
    assert_eq!(speaker.logs().matches("static file changed: applying").count(), 1, "only edit 1 was applied");

    // An invalid edit is rejected whole; the last good content stays.
    speaker
        .rewrite_file(
            "apiVersion: ferrolb.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: x}\nspec: {myASN: 1}\n",
        )
        .unwrap();
    speaker.wait_log("static file rejected, the last good content stays in force", T).unwrap();
    // No timer: a withdrawal would reach BIRD within the margin of wait::stays.
    let kept = |rib: &Vec<routers::RibPath>| rib.iter().any(|p| p.prefix == "203.0.113.11/32");
    wait::stays("the last good route at BIRD", Duration::ZERO, || bird.rib(), kept).unwrap();
    let logs = speaker.logs();
    assert_eq!(logs.matches("BGPPeer changed: restarting its session").count(), 2, "{logs}");
    routers::wait_established(&bird, &[v4(1), v6(1)], T).unwrap();

    // Edit 2, in place: the recorder's BGPPeer removed → Cease / Peer De-configured.
    speaker.rewrite_file(&static_file(&[("web", vec![vip4, vip11])], peers2[..2].to_vec(), &ad2)).unwrap();
    recorder
        .wait_record("Cease NOTIFICATION at the recorder", T, |r| {
            matches!(r, Record::Notification { code: 6, subcode: 3, .. })
        })
        .unwrap();
    assert!(bird.established().unwrap().contains(&v4(1)), "other sessions stay up");

    // SIGTERM: exit 0, sessions closed, so BIRD drops the routes at once.
    assert_eq!(speaker.terminate(Duration::from_secs(10)), Some(0), "{}", speaker.logs());
    routers::wait_rib_gone(&bird, "203.0.113.10/32", T).unwrap();
    let logs = speaker.logs();
    assert!(logs.contains("closing BGP session (Cease, administrative shutdown)"), "{logs}");
    assert!(logs.contains("BGP session state changed"), "{logs}");
}

/// TCP MD5: the right password gives a session, a wrong one none and a clear log
/// line. Graceful restart: across a SIGKILL of the speaker BIRD keeps forwarding to
/// the service address, and after the restart a route removed meanwhile is gone.
#[test]
fn md5_and_graceful_restart_with_bird() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let bird = Bird::start(
        &lab,
        &RouterSpec::default().password("right-password").graceful_restart(Duration::from_secs(60)),
    )
    .unwrap();
    let dir = lab.subdir("secrets").unwrap();
    let (right, wrong) = (dir.join("right"), dir.join("wrong"));
    std::fs::write(&right, "right-password\n").unwrap();
    std::fs::write(&wrong, "wrong-password\n").unwrap();
    let (vip, vip12) = (addressing::bgp_vip_v4(10), addressing::bgp_vip_v4(12));
    lab.add_vip_on_lo(lab.node(1), vip).unwrap();
    let pw = |p: &std::path::Path| format!("passwordFile: {}", p.display());
    let file = |pw_line: &str, ips: Vec<IpAddr>| {
        let peer = yaml::router_peer_v4(&[pw_line, &yaml::graceful_restart(Duration::from_secs(60))]);
        static_file(&[("web", ips)], vec![peer], &["ipAddressPools: [public]"])
    };
    let mut good = Speaker::start(&lab, 1, &file(&pw(&right), vec![vip, vip12])).unwrap();
    let bad_file = file(&pw(&wrong), vec![vip]);
    let bad = Speaker::start(&lab, 2, &bad_file).unwrap();

    let r = routers::wait_established(&bird, &[v4(1)], T);
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    routers::wait_kernel_route(bird.netns(), "203.0.113.10/32", &[v4(1)], T).unwrap();
    routers::wait_kernel_route(bird.netns(), "203.0.113.12/32", &[v4(1)], T).unwrap();
    bad.wait_log("no answer from 192.0.2.1: check the TCP MD5 password on both sides", T).unwrap();
    assert!(!bird.established().unwrap().contains(&v4(2)));
    for s in [&good, &bad] {
        assert!(
            !s.logs().contains("right-password") && !s.logs().contains("wrong-password"),
            "secret logged"
        );
    }

    let probe = ProbeStream::start(lab.client(), vip, Duration::from_millis(10)).unwrap();
    probe.wait_answered(30, T).unwrap();
    good.kill();
    // While the speaker is down its file loses 203.0.113.12: a stale route after restart.
    good.replace_file(&file(&pw(&right), vec![vip])).unwrap();
    // Proof BIRD handled the dead session before asserting what it kept.
    wait::until_holds("BIRD saw node1's session go down", T, || {
        bird.established().is_ok_and(|up| !up.contains(&v4(1)))
    })
    .unwrap();
    // Graceful restart: BIRD keeps the routes of the dead session (as stale).
    let kept = routers::kernel_routes(bird.netns()).unwrap();
    assert!(kept.iter().any(|r| r.prefix == "203.0.113.12/32"), "GR kept nothing: {kept:?}");
    good.restart().unwrap();
    good.wait_log("BGP session state changed", T).unwrap();
    routers::wait_kernel_route(bird.netns(), "203.0.113.12/32", &[], T).unwrap();
    routers::wait_kernel_route(bird.netns(), "203.0.113.10/32", &[v4(1)], T).unwrap();
    probe.wait_answered(30, T).unwrap();
    let report = probe.stop(Duration::from_millis(200));
    assert!(report.sent > 50, "{report:?}");
    assert_eq!(report.lost(), 0, "probe stream across the restart: {report:?}\n{}", lab.logs(30));
}

/// A bad static file at start: non-zero exit, one line naming file, document and field.
#[test]
fn invalid_static_file_at_start_exits_with_one_clear_line() {
    let dir = std::env::temp_dir().join(format!("ferrolb-bad-static-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("static.yaml");
    std::fs::write(&file, yaml::peer("r", 64513, 64512, addressing::ROUTER_V4.into(), &["holdTime: 2s"]))
        .unwrap();
    let bin = ferrolb_lab::speaker::binary("debug").unwrap();
    let out = std::process::Command::new(bin)
        .args(["--node-name", "node1", "--static"])
        .arg(&file)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("document 1: BGPPeer/r: spec.holdTime"), "{err}");
}
