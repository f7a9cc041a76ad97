//! The L2 announcer on real kernels: a client in a lab resolves service addresses by
//! ARP and NDP to the owner only, follows a takeover through gratuitous ARP /
//! unsolicited NA, and malformed frames change nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::Duration;

use ferrolb_lab::client::{self, ProbeStream};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::runtime::NsRuntime;
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use ferrolb_proto::l2::{
    InterfaceChoice, L2Announcer, L2Config, L2Handle, L2Metrics, L2Status, Owned, arp, ndp,
};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

const T: Duration = Duration::from_secs(20);

fn vip4() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, 200))
}

fn vip6() -> IpAddr {
    IpAddr::V6("2001:db8::200".parse().unwrap())
}

fn both() -> Owned {
    [(vip4(), InterfaceChoice::Auto), (vip6(), InterfaceChoice::Auto)].into()
}

struct Node {
    handle: L2Handle,
    metrics: L2Metrics,
    _rt: NsRuntime,
}

fn announcer(ns: &Netns) -> Node {
    let metrics = L2Metrics::default();
    let m = metrics.clone();
    let (handle, rt) =
        NsRuntime::start(ns, move || L2Announcer::spawn(L2Config::default(), m).unwrap()).unwrap();
    Node { handle, metrics, _rt: rt }
}

/// Waits until `node` reports the first takeover announcement of every owned address.
fn wait_announced(node: &Node, addrs: &[IpAddr]) -> L2Status {
    let rx = node.handle.status();
    wait::until_value(
        "gratuitous announcements sent",
        T,
        || Ok(rx.borrow().clone()),
        |s: &L2Status| {
            addrs.iter().all(|a| {
                s.addresses.get(a).is_some_and(|st| st.gratuitous_sent && st.interfaces.contains("eth0"))
            })
        },
    )
    .unwrap()
}

fn ping(lab: &Lab, addr: IpAddr) {
    let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", &addr.to_string()]);
}

#[test]
fn client_resolves_to_the_owner_only_and_follows_a_takeover() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    for n in lab.nodes() {
        lab.add_vip_on_lo(n, vip4()).unwrap();
        lab.add_vip_on_lo(n, vip6()).unwrap();
    }
    let (mac1, mac2) = (addressing::node_mac(1), addressing::node_mac(2));
    let node1 = announcer(lab.node(1));
    let node2 = announcer(lab.node(2));
    node1.handle.set_owned(both());
    node2.handle.set_owned(Owned::new());
    wait_announced(&node1, &[vip4(), vip6()]);

    // Exactly one MAC answers, the owner's; the kernel of node2 stays silent too.
    assert_eq!(lab.arp_answers(vip4(), 3).unwrap(), BTreeSet::from([mac1.clone()]));
    assert_eq!(lab.ndp_answers(vip6()).unwrap(), BTreeSet::from([mac1.clone()]));
    for vip in [vip4(), vip6()] {
        ping(&lab, vip);
        client::wait_neighbour_mac(lab.client(), "eth0", vip, &mac1, T).unwrap();
        assert!(node1.metrics.replies_sent(vip) > 0, "{vip}: owner replied");
        assert_eq!(
            node2.metrics.requests_received(vip) + node2.metrics.replies_sent(vip),
            0,
            "{vip}: non-owner silent"
        );
    }

    // Takeover, make before break: node2 owns first, then node1 lets go.
    let probe4 = ProbeStream::start(lab.client(), vip4(), Duration::from_millis(10)).unwrap();
    let probe6 = ProbeStream::start(lab.client(), vip6(), Duration::from_millis(10)).unwrap();
    for p in [&probe4, &probe6] {
        p.wait_sent(20, T).unwrap();
    }
    let replies1 = node1.metrics.replies_sent(vip4());
    node2.handle.set_owned(both());
    node1.handle.set_owned(Owned::new());
    for vip in [vip4(), vip6()] {
        client::wait_neighbour_mac(lab.client(), "eth0", vip, &mac2, T).unwrap();
    }
    wait_announced(&node2, &[vip4(), vip6()]);
    for p in [&probe4, &probe6] {
        p.wait_sent(20, T).unwrap();
    }
    for (name, p) in [("IPv4", probe4), ("IPv6", probe6)] {
        let r = p.stop(Duration::from_millis(100));
        println!(
            "takeover {name}: {} probes, {} lost, max outage {:?}, gaps {:?}",
            r.sent,
            r.lost(),
            r.max_outage(),
            r.gaps
        );
    }
    assert!(node2.metrics.gratuitous_sent(vip4()) >= 1 && node2.metrics.gratuitous_sent(vip6()) >= 1);
    // The old owner answers no more: its counter does not move while the client asks
    // again. (Its per-address series went with the address; a reply counted in the
    // handover's last instant can bring one back, so the baseline is read here.)
    assert!(node1.handle.status().borrow().addresses.is_empty());
    let settled = node1.metrics.replies_sent(vip4());
    assert!(
        settled <= replies1 + 1,
        "old owner kept answering: {settled} replies, {replies1} before the handover"
    );
    assert_eq!(lab.arp_answers(vip4(), 2).unwrap(), BTreeSet::from([mac2.clone()]));
    assert_eq!(lab.ndp_answers(vip6()).unwrap(), BTreeSet::from([mac2.clone()]));
    assert_eq!(node1.metrics.replies_sent(vip4()), settled, "old owner must stop answering at once");
}

/// Sends one raw Ethernet frame from the client's eth0.
fn send_frame(lab: &Lab, frame: Vec<u8>) {
    lab.client()
        .run(move || {
            let ifindex = nix::net::if_::if_nametoindex("eth0").unwrap();
            let s =
                Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(i32::from(0x0806u16.to_be()))))
                    .unwrap();
            s.bind_device(Some(b"eth0")).unwrap();
            send_on_device(&s, ifindex, &frame);
        })
        .unwrap();
}

#[allow(unsafe_code)]
fn send_on_device(s: &Socket, ifindex: u32, frame: &[u8]) {
    let mut storage = socket2::SockAddrStorage::zeroed();
    // SAFETY: sockaddr_storage is big enough and aligned for sockaddr_ll, zero is valid.
    let sll = unsafe { storage.view_as::<libc::sockaddr_ll>() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = 0x0806u16.to_be();
    sll.sll_ifindex = ifindex as i32;
    sll.sll_halen = 6;
    sll.sll_addr[..6].copy_from_slice(&[0xff; 6]);
    // SAFETY: the storage holds an initialised sockaddr_ll.
    let addr = unsafe { SockAddr::new(storage, std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t) };
    s.send_to(frame, &addr).unwrap();
}

/// Sends one ICMPv6 message from the client's eth0 with the given hop limit.
fn send_icmpv6(lab: &Lab, dst: Ipv6Addr, hops: u32, msg: Vec<u8>) {
    lab.client()
        .run(move || {
            let ifindex = nix::net::if_::if_nametoindex("eth0").unwrap();
            let s = Socket::new(Domain::IPV6, Type::RAW, Some(Protocol::ICMPV6)).unwrap();
            s.set_multicast_hops_v6(hops).unwrap();
            s.set_unicast_hops_v6(hops).unwrap();
            s.send_to(&msg, &SockAddr::from(SocketAddr::V6(SocketAddrV6::new(dst, 0, 0, ifindex)))).unwrap();
        })
        .unwrap();
}

#[test]
fn malformed_arp_and_ndp_are_ignored() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let node = announcer(lab.node(1));
    node.handle.set_owned(both());
    wait_announced(&node, &[vip4(), vip6()]);
    let client_mac = [0x00, 0x00, 0x5e, 0x00, 0x53, 0xc1];
    let IpAddr::V4(v4) = vip4() else { unreachable!() };
    let IpAddr::V6(v6) = vip6() else { unreachable!() };
    let good = arp::encode_frame(
        arp::BROADCAST_MAC,
        client_mac,
        &arp::ArpPacket {
            operation: arp::Operation::Request,
            sender_mac: client_mac,
            sender_ip: addressing::CLIENT_V4,
            target_mac: [0; 6],
            target_ip: v4,
        },
    );
    let mut bad_len = good.to_vec();
    bad_len[18] = 8; // hardware address length 8
    let mut bad_op = good.to_vec();
    bad_op[21] = 3; // RARP
    let mut bad_proto = good.to_vec();
    bad_proto[16] = 0x86;
    for f in [good[..30].to_vec(), bad_len, bad_op, bad_proto] {
        send_frame(&lab, f);
    }
    // NS with a zero-length option, then a well-formed NS that crossed a router (hop limit 64).
    let ns = ndp::NdMessage::Solicitation(ndp::NeighborSolicitation {
        target: v6,
        options: vec![ndp::NdOption::SourceLinkLayer(client_mac)],
    })
    .to_bytes()
    .to_vec();
    let mut zero_opt = ns.clone();
    zero_opt[25] = 0;
    send_icmpv6(&lab, ndp::solicited_node(v6), 255, zero_opt);
    send_icmpv6(&lab, ndp::solicited_node(v6), 64, ns.clone());

    wait::until_value(
        "malformed frames counted",
        T,
        || Ok((node.metrics.malformed("arp"), node.metrics.malformed("ndp"))),
        |(a, n)| *a >= 4 && *n >= 2,
    )
    .unwrap();
    assert_eq!(node.metrics.replies_sent(vip4()), 0, "no ARP reply to a malformed frame");
    assert_eq!(node.metrics.replies_sent(vip6()), 0, "no NA to a malformed NS");
    // Still alive and answering well-formed requests.
    send_frame(&lab, good.to_vec());
    send_icmpv6(&lab, ndp::solicited_node(v6), 255, ns);
    wait::until_value(
        "well-formed requests answered",
        T,
        || Ok((node.metrics.replies_sent(vip4()), node.metrics.replies_sent(vip6()))),
        |(a, n)| *a == 1 && *n == 1,
    )
    .unwrap();
    assert_eq!(lab.ndp_answers(vip6()).unwrap(), BTreeSet::from([addressing::node_mac(1)]));
}

#[test]
fn interfaces_are_followed_through_netlink_events() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let ns = lab.node(1);
    ns.ip(&["link", "set", "eth0", "down"]).unwrap();
    let node = announcer(ns);
    node.handle.set_owned(both());
    let status = node.handle.status();
    let interfaces = |want: &'static [&'static str]| {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        wait::until_value(
            &format!("owned addresses answered on {want:?}"),
            T,
            || Ok(status.borrow().clone()),
            move |s: &L2Status| s.addresses.len() == 2 && s.addresses.values().all(|a| a.interfaces == want),
        )
        .unwrap()
    };
    // Owned, but nothing may answer while eth0 is down.
    let s = interfaces(&[]);
    assert!(s.addresses.values().all(|a| !a.gratuitous_sent));
    ns.ip(&["link", "set", "eth0", "up"]).unwrap();
    interfaces(&["eth0"]);
    wait_announced(&node, &[vip4(), vip6()]);
    // eth0 becomes a bridge port: the bridge answers, the port no longer does.
    ns.ip(&["link", "add", "br9", "type", "bridge"]).unwrap();
    ns.ip(&["link", "set", "br9", "up"]).unwrap();
    ns.ip(&["link", "set", "eth0", "master", "br9"]).unwrap();
    interfaces(&["br9"]);
    ns.ip(&["link", "set", "eth0", "nomaster"]).unwrap();
    ns.ip(&["link", "del", "br9"]).unwrap();
    interfaces(&["eth0"]);
}

/// The really-announced L2 state (what readiness gates read): an owned address counts
/// only once its first gratuitous ARP went out, an address owned on an interface that
/// does not exist never counts, and a released address stops counting at once.
#[test]
fn announced_state_lists_an_address_only_after_its_gratuitous_announcement() {
    use ferrolb_speaker::announce::bgp::BgpAnnounced;
    use ferrolb_speaker::announce::{Announced, AnnouncedFeed};

    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let node = announcer(lab.node(1));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_rt = rt.enter();
    let (_bgp, bgp_rx) = tokio::sync::watch::channel(BgpAnnounced::default());
    let feed = AnnouncedFeed::spawn(bgp_rx);
    feed.set_l2(Some(node.handle.status()));
    let merged = feed.subscribe();
    let nowhere = vip6();
    let owned: Owned = [
        (vip4(), InterfaceChoice::Auto),
        (nowhere, InterfaceChoice::Named(BTreeSet::from(["nope0".to_string()]))),
    ]
    .into();
    node.handle.set_owned(owned);
    let a = wait::until_value(
        "the address announced",
        T,
        || Ok(merged.borrow().clone()),
        |a: &Announced| a.l2.contains(&vip4()),
    )
    .unwrap();
    // Counted as sent before it was reported.
    assert!(node.metrics.gratuitous_sent(vip4()) >= 1);
    assert!(!a.l2.contains(&nowhere), "{a:?}");
    let st = node.handle.status().borrow().clone();
    assert!(st.addresses[&nowhere].interfaces.is_empty(), "owned, nowhere to answer: {st:?}");
    assert_eq!(st.announced(), BTreeSet::from([vip4()]));
    assert_eq!(node.metrics.gratuitous_sent(nowhere), 0);

    node.handle.set_owned(Owned::new());
    wait::until_value("released", T, || Ok(merged.borrow().clone()), |a: &Announced| a.l2.is_empty())
        .unwrap();
}

/// After another node claimed the address by mistake (a false suspicion in
/// membership), `reannounce` moves the client's neighbour entry back to the owner,
/// whose owned set never changed. The client's timers are so long that only a
/// gratuitous ARP can move its entry.
#[test]
fn reannounce_moves_a_client_back_after_a_mistaken_claim() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    lab.client().sysctl("net.ipv4.neigh.eth0.base_reachable_time_ms", "600000").unwrap();
    let node1 = announcer(lab.node(1));
    node1.handle.set_owned([(vip4(), InterfaceChoice::Auto)].into());
    wait_announced(&node1, &[vip4()]);
    ping(&lab, vip4());
    client::wait_neighbour_mac(lab.client(), "eth0", vip4(), &addressing::node_mac(1), T).unwrap();

    // The takeover burst ends (after it, nothing but reannounce sends again).
    let burst = L2Config::default().takeover.len() as u64;
    wait::until("the whole takeover burst sent", T, || {
        Ok((node1.metrics.gratuitous_sent(vip4()) >= burst).then_some(()))
    })
    .unwrap();
    // node2 claims it (as a speaker that thought node1 dead would).
    std::thread::sleep(Duration::from_millis(1100)); // past the client's neighbour locktime
    client::gratuitous_arp(lab.node(2), "eth0", vip4()).unwrap();
    client::wait_neighbour_mac(lab.client(), "eth0", vip4(), &addressing::node_mac(2), T).unwrap();
    let before = node1.metrics.gratuitous_sent(vip4());

    node1.handle.reannounce();
    client::wait_neighbour_mac(lab.client(), "eth0", vip4(), &addressing::node_mac(1), T).unwrap();
    assert!(node1.metrics.gratuitous_sent(vip4()) > before);
    assert_eq!(before, burst, "nothing but reannounce sent after the burst");
}
