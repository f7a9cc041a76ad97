#![allow(clippy::unwrap_used)]
use super::*;
use crate::plan::RouteAttrs;
use ferrolb_api::AddressFamily;
use ferrolb_proto::bgp::Family;
use ferrolb_proto::bgp::fsm::PeerConfig;
use ipnet::IpNet;

fn settings(spec: BgpPeerSpec) -> PeerSettings {
    PeerSettings {
        spec,
        password: None,
        router_id: Ipv4Addr::new(192, 0, 2, 11),
        next_hop_v4: Some(Ipv4Addr::new(192, 0, 2, 11)),
        next_hop_v6: Some("2001:db8::11".parse().unwrap()),
        bfd: None,
        found: None,
    }
}

#[test]
fn peer_fields_reach_the_session_config() {
    let mut spec = BgpPeerSpec::new(64513, 64512, "192.0.2.1");
    spec.hold_time = "9s".into();
    spec.keepalive_time = Some("2s".into());
    spec.connect_time = "1s".into();
    spec.passive = true;
    spec.ebgp_multi_hop = true;
    spec.source_address = Some("192.0.2.11".into());
    spec.peer_port = 1179;
    spec.address_families = vec![AddressFamily::Ipv6Unicast];
    spec.graceful_restart = Some(ferrolb_api::GracefulRestart { enabled: true, restart_time: "30s".into() });
    let cfg = session_config("r", &settings(spec), true).unwrap();
    assert_eq!(cfg.peer.hold_time, 9);
    assert_eq!(cfg.peer.keepalive_time, Some(2));
    assert_eq!(cfg.peer.connect_retry, Duration::from_secs(1));
    assert!(cfg.peer.passive);
    assert!(cfg.ebgp_multihop);
    assert_eq!(cfg.local_addr, Some("192.0.2.11".parse().unwrap()));
    assert_eq!(cfg.peer_addr, "192.0.2.1:1179".parse().unwrap());
    assert_eq!(cfg.peer.families, vec![Family::IPV6_UNICAST]);
    let gr = cfg.peer.graceful_restart.unwrap();
    assert_eq!((gr.restart_time, gr.restarting, gr.forwarding_preserved), (30, true, true));
    // IPv4 transport: the IPv6 next hop comes from the node's address.
    assert_eq!(cfg.export.next_hop_v6, Some("2001:db8::11".parse().unwrap()));
}

#[test]
fn ttl_security_and_zero_hold_time_reach_the_session_config() {
    let mut spec = BgpPeerSpec::new(64513, 64512, "192.0.2.1");
    spec.ttl_security = true;
    let cfg = session_config("r", &settings(spec.clone()), false).unwrap();
    assert!(cfg.ttl_security);
    assert!(!cfg.peer.allow_zero_hold_time, "no BFD: a peer's hold time 0 is refused");

    spec.hold_time = "0s".into();
    let e = session_config("r", &settings(spec.clone()), false).unwrap_err().to_string();
    assert!(e.starts_with("BGPPeer/r: spec.holdTime:"), "{e}");
    let mut with_bfd = settings(spec);
    with_bfd.bfd = Some(bfd::SessionConfig::default());
    let cfg = session_config("r", &with_bfd, false).unwrap();
    assert_eq!(cfg.peer.hold_time, 0);
    assert!(cfg.peer.allow_zero_hold_time);
}

/// Unnumbered: the session goes to the router found on the link, scoped to it, offers
/// IPv4 over an IPv6 next hop, and gives no IPv4 next hop (the node's IPv4 address is not
/// on that link); without a router found there is no session.
#[test]
fn an_unnumbered_peer_connects_to_the_router_found_on_its_link() {
    let mut spec = BgpPeerSpec::new(64513, 64512, "unused");
    spec.peer_address = None;
    spec.interface = Some("p2p0".into());
    let e = session_config("fabric", &settings(spec.clone()), false).unwrap_err().to_string();
    assert!(e.starts_with("BGPPeer/fabric: spec.interface: no router found on p2p0"), "{e}");
    let found = std::net::SocketAddrV6::new("fe80::1".parse().unwrap(), 0, 0, 7);
    let cfg =
        session_config("fabric", &PeerSettings { found: Some(found), ..settings(spec) }, false).unwrap();
    assert_eq!(
        cfg.peer_addr,
        SocketAddr::V6(std::net::SocketAddrV6::new("fe80::1".parse().unwrap(), 179, 0, 7))
    );
    assert!(cfg.peer.extended_next_hop);
    assert_eq!(cfg.export.next_hop_v4, None, "IPv4 routes take the link's IPv6 next hop");

    let numbered =
        session_config("r", &settings(BgpPeerSpec::new(64513, 64512, "2001:db8::1")), false).unwrap();
    assert!(!numbered.peer.extended_next_hop);
    assert_eq!(numbered.export.next_hop_v4, Some(Ipv4Addr::new(192, 0, 2, 11)));
}

#[test]
fn bad_peer_fields_name_object_and_field() {
    let spec = BgpPeerSpec::new(64513, 64512, "not-an-ip");
    let e = session_config("router-a", &settings(spec), false).unwrap_err().to_string();
    assert!(e.starts_with("BGPPeer/router-a: spec.peerAddress:"), "{e}");
}

/// A BFD failure holds the BGP session down, BFD Up releases it; the peer going
/// AdminDown (no failure counted) and a failure hidden by a skipped watch value
/// (Up → Down → Up seen as Up with `downs` grown) are handled as RFC 5882 says.
#[tokio::test]
async fn bfd_state_drives_the_bgp_session() {
    use ferrolb_proto::bfd::State as Bfd;
    let mut peer = PeerConfig::new(64513, 64512, Ipv4Addr::new(192, 0, 2, 11));
    peer.passive = true; // never connects: only the held-down flag matters here
    let session = session::spawn(SessionConfig::new(peer, "192.0.2.1:179".parse().unwrap()));
    let mut status = session.watch_status();
    let (tx, rx) = tokio::sync::watch::channel(BfdState::default());
    let task = tokio::spawn(watch_bfd("r".into(), rx, session.clone(), Duration::from_secs(3600)));
    let held = |status: &mut tokio::sync::watch::Receiver<SessionStatus>, want: bool| {
        let mut status = status.clone();
        async move {
            let wait = status.wait_for(|s| s.bfd_held_down == want);
            tokio::time::timeout(Duration::from_secs(5), wait).await.unwrap().unwrap();
        }
    };
    let set = |state, downs| tx.send_replace(BfdState { state, downs, ..BfdState::default() });

    set(Bfd::Up, 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!session.status().bfd_held_down);
    set(Bfd::Down, 1);
    held(&mut status, true).await;
    set(Bfd::Init, 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(session.status().bfd_held_down, "held until Up");
    set(Bfd::Up, 1);
    held(&mut status, false).await;
    // The peer going AdminDown is not a failure: the BGP session is left alone.
    set(Bfd::Down, 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!session.status().bfd_held_down);
    // Up → Down → Up seen only as Up with one more failure: reset, then released.
    assert_eq!(session.status().bfd_resets, 1);
    set(Bfd::Up, 2);
    let mut st = status.clone();
    let reset = st.wait_for(|s| s.bfd_resets == 2 && !s.bfd_held_down);
    tokio::time::timeout(Duration::from_secs(5), reset).await.unwrap().unwrap();
    task.abort();
    session.shutdown(subcode::CEASE_ADMIN_SHUTDOWN).await;
}

/// A router that runs BFD only with a live BGP session never brings BFD Up while we
/// hold the session down: the hold-down ends after its limit all the same.
#[tokio::test]
async fn bfd_hold_down_ends_after_its_limit_when_bfd_stays_down() {
    use ferrolb_proto::bfd::State as Bfd;
    let mut peer = PeerConfig::new(64513, 64512, Ipv4Addr::new(192, 0, 2, 11));
    peer.passive = true;
    let session = session::spawn(SessionConfig::new(peer, "192.0.2.1:179".parse().unwrap()));
    let (tx, rx) = tokio::sync::watch::channel(BfdState { state: Bfd::Up, ..BfdState::default() });
    let task = tokio::spawn(watch_bfd("r".into(), rx, session.clone(), Duration::from_millis(300)));
    let mut status = session.watch_status();
    // Let the watcher read the Up state first, as it would in a running speaker.
    tokio::time::sleep(Duration::from_millis(50)).await;
    tx.send_replace(BfdState { state: Bfd::Down, downs: 1, ..BfdState::default() });
    // bfd_resets counts hold-downs, so this sees the hold and its end even if both
    // happened before the first look.
    let released = status.wait_for(|s| s.bfd_resets == 1 && !s.bfd_held_down);
    tokio::time::timeout(Duration::from_secs(5), released).await.unwrap().unwrap();
    assert_eq!(tx.borrow().state, Bfd::Down, "released with BFD still down");
    task.abort();
    session.shutdown(subcode::CEASE_ADMIN_SHUTDOWN).await;
}

/// The announcer's [`BgpAnnounced`] follows what each session really sent: a
/// prefix appears for the peer that established and received it, never for a peer
/// that does not answer, and goes when the plan withdraws it or drops the peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn announced_state_lists_prefixes_per_peer_once_sent() {
    use ferrolb_proto::bgp::session::Listener;
    let router = Ipv4Addr::LOCALHOST;
    // The "router": a passive session on 127.0.0.1 accepting our node's connection.
    let listener = Listener::bind(SocketAddr::new(IpAddr::V4(router), 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut rpeer = PeerConfig::new(64512, 64513, Ipv4Addr::new(192, 0, 2, 1));
    rpeer.passive = true;
    let r = session::spawn(SessionConfig::new(rpeer, SocketAddr::new(IpAddr::V4(router), 179)));
    listener.add_peer(&r, None).unwrap();
    // A port nobody listens on: the "dead" peer never establishes.
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();

    let mut model = ClusterModel::new("ferrolb.io/lb");
    let node = crate::model::NodeInfo {
        addresses: vec!["192.0.2.11".parse().unwrap()],
        ready: true,
        ..Default::default()
    };
    model.nodes.insert("n1".into(), node);
    for (name, p) in [("router", port), ("dead", dead_port)] {
        let mut spec = BgpPeerSpec::new(64513, 64512, "127.0.0.1");
        spec.peer_port = p;
        spec.connect_time = "1s".into();
        model.peers.insert(name.into(), ferrolb_api::BgpPeer::new(name, spec));
    }
    let vip: IpNet = "203.0.113.10/32".parse().unwrap();
    let plan_with = |routes: &[IpNet], peers: &[&str]| {
        let mut plan = Plan::default();
        for p in peers {
            let r = routes.iter().map(|n| (*n, RouteAttrs::default())).collect();
            plan.bgp.insert((*p).to_string(), r);
        }
        plan
    };
    let metrics = Arc::new(Metrics::new());
    let mut bgp = BgpAnnouncer::new("n1", metrics.clone());
    let mut announced = bgp.announced();
    assert!(announced.borrow().by_peer.is_empty());
    let wait = |rx: &mut watch::Receiver<BgpAnnounced>, what: &'static str, f: fn(&BgpAnnounced) -> bool| {
        let mut rx = rx.clone();
        async move {
            let ok = tokio::time::timeout(Duration::from_secs(10), rx.wait_for(f)).await.is_ok();
            assert!(ok, "timed out waiting until {what}: {:?}", rx.borrow().clone());
        }
    };

    let errors = bgp.apply(&model, &BTreeMap::new(), &plan_with(&[vip], &["router", "dead"])).await;
    assert!(errors.is_empty(), "{errors:?}");
    wait(&mut announced, "the router holds the prefix", |a| !a.by_peer.is_empty()).await;
    let now = announced.borrow_and_update().clone();
    assert_eq!(now.by_peer, BTreeMap::from([("router".to_string(), Prefixes::unit(vip))]));
    let mut rs = r.watch_status();
    let got = tokio::time::timeout(Duration::from_secs(10), rs.wait_for(|s| s.prefixes_received == 1))
        .await
        .is_ok();
    assert!(got, "the router received it: {:?}", r.status());
    assert_eq!(bgp.status("dead").map(|s| s.is_up()), Some(false));

    // Withdrawn by the plan: gone, the router's session stays up.
    let _ = bgp.apply(&model, &BTreeMap::new(), &plan_with(&[], &["router", "dead"])).await;
    wait(&mut announced, "the prefix is withdrawn", |a| a.by_peer.is_empty()).await;
    assert_eq!(bgp.status("router").map(|s| s.is_up()), Some(true));

    // Announced again, then the peer leaves the plan: its entry goes with its session.
    bgp.tick();
    let text = metrics.encode();
    assert!(text.contains("ferrolb_bgp_session_up{peer=\"dead\"} 0"), "{text}");
    assert!(text.contains("ferrolb_bgp_session_up{peer=\"router\"} 1"), "{text}");
    let _ = bgp.apply(&model, &BTreeMap::new(), &plan_with(&[vip], &["router"])).await;
    wait(&mut announced, "announced again", |a| a.by_peer.contains_key("router")).await;
    let text = metrics.encode();
    assert!(!text.contains("peer=\"dead\""), "a removed peer's series are gone, not 0: {text}");
    let _ = bgp.apply(&model, &BTreeMap::new(), &plan_with(&[], &[])).await;
    assert!(announced.borrow().by_peer.is_empty(), "removed with the session: {:?}", announced.borrow());
    let text = metrics.encode();
    assert!(!text.contains("peer=\"router\""), "{text}");
    bgp.shutdown().await;
    r.shutdown(2).await;
}
