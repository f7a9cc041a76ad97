//! Two session drivers talking over loopback: active ↔ passive, routes, shutdown, TCP MD5.
use crate::bgp::error::subcode;
use crate::bgp::fsm::{PeerConfig, State};
use crate::bgp::session::Routes;
use crate::bgp::session::{self, Listener, SessionConfig, SessionHandle, SessionStatus};
use crate::bgp::socket::Password;
use crate::bgp::*;
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

const A_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const B_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

/// B listens passively on 127.0.0.1; A connects to it from 127.0.0.2.
fn setup(pw_a: Option<&str>, pw_b: Option<&str>) -> (SessionHandle, SessionHandle, Listener) {
    setup_with(pw_a, pw_b, false, false)
}

/// [`setup`] with GTSM (RFC 5082) on A and/or B.
fn setup_with(
    pw_a: Option<&str>,
    pw_b: Option<&str>,
    gtsm_a: bool,
    gtsm_b: bool,
) -> (SessionHandle, SessionHandle, Listener) {
    let listener = Listener::bind(SocketAddr::new(IpAddr::V4(B_IP), 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();

    let mut b_peer = PeerConfig::new(65002, 65001, B_IP);
    b_peer.passive = true;
    let mut b_cfg = SessionConfig::new(b_peer, SocketAddr::new(IpAddr::V4(A_IP), 179));
    b_cfg.password = pw_b.map(Password::new);
    b_cfg.ttl_security = gtsm_b;
    let b = session::spawn(b_cfg.clone());
    listener.add_peer(&b, b_cfg.password.as_ref()).expect("add peer");

    let mut a_peer = PeerConfig::new(65001, 65002, A_IP);
    a_peer.hold_time = 9;
    let mut a_cfg = SessionConfig::new(a_peer, SocketAddr::new(IpAddr::V4(B_IP), port));
    a_cfg.local_addr = Some(IpAddr::V4(A_IP));
    a_cfg.password = pw_a.map(Password::new);
    a_cfg.ttl_security = gtsm_a;
    a_cfg.export.next_hop_v6 = Some("2001:db8::2".parse().expect("addr"));
    let a = session::spawn(a_cfg);
    (a, b, listener)
}

async fn wait_for(h: &SessionHandle, what: &str, f: impl Fn(&SessionStatus) -> bool) -> SessionStatus {
    ferrolb_testkit::wait::until_watched_within(what, Duration::from_secs(10), &mut h.watch_status(), f).await
}

fn routes() -> Routes {
    let attrs =
        Arc::new(PathAttributes { communities: vec![Community::new(64512, 100)], ..Default::default() });
    ["198.51.100.10/32", "198.51.100.11/32", "203.0.113.0/24", "2001:db8:1::10/128"]
        .iter()
        .map(|p| (p.parse::<IpNet>().expect("prefix"), attrs.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_and_passive_drivers_establish_and_exchange_routes() {
    let (a, b, _l) = setup(None, None);
    a.set_desired(routes());
    // Whenever a status shows Established it carries the negotiated parameters.
    let sa = wait_for(&a, "A established", |s| s.is_up()).await;
    wait_for(&b, "B established", |s| s.is_up()).await;
    let n = sa.negotiated.expect("an Established status carries the negotiated parameters");
    assert_eq!((n.peer_as, n.hold_time, n.keepalive_time), (65002, 9, 3));
    // 3 IPv4 prefixes and 1 IPv6 prefix reach B, which counts and drops them.
    // End-of-RIB follows the routes: wait for both markers, not just the prefixes.
    let sb = wait_for(&b, "B received routes and two End-of-RIB markers", |s| {
        s.prefixes_received == 4 && s.updates_received >= 2 + 2
    })
    .await;
    assert_eq!(sb.prefixes_received, 4);
    // A publishes its own counters after the write; B may count first.
    wait_for(&a, "A counted 4 prefixes advertised", |s| s.prefixes_advertised == 4).await;

    // A withdrawal reaches the peer as well.
    let mut fewer = routes();
    fewer.remove(&"203.0.113.0/24".parse::<IpNet>().expect("prefix"));
    a.set_desired(fewer);
    wait_for(&a, "A withdrew", |s| s.prefixes_withdrawn == 1 && s.prefixes_advertised == 3).await;

    // Keepalives (every 3 s) hold the session beyond the 9 s hold time.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(a.status().is_up() && b.status().is_up());
    assert_eq!(a.status().established_count, 1);

    a.shutdown(2).await;
    let sb = wait_for(&b, "B saw the Cease", |s| s.last_down_reason.is_some()).await;
    let why = sb.last_down_reason.expect("reason");
    assert!(why.contains("cease (6/2)"), "{why}");
    assert_ne!(sb.state, State::Established);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_with_matching_passwords_comes_up() {
    let (a, b, _l) = setup(Some("s3cret-key"), Some("s3cret-key"));
    wait_for(&a, "A established with MD5", |s| s.is_up()).await;
    wait_for(&b, "B established with MD5", |s| s.is_up()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_with_wrong_password_never_comes_up() {
    let (a, b, _l) = setup(Some("s3cret-key"), Some("other-key"));
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_ne!(a.status().state, State::Established);
    assert_ne!(b.status().state, State::Established);
    assert_eq!(b.status().established_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn md5_on_one_side_only_never_comes_up() {
    let (a, b, _l) = setup(None, Some("s3cret-key"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(a.status().established_count + b.status().established_count, 0);
}

/// Both sides with GTSM: TTL 255 each way, through B's listener (whose SYN-ACK A's
/// minimum TTL would otherwise drop) and on the accepted connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gtsm_on_both_sides_comes_up() {
    let (a, b, _l) = setup_with(None, None, true, true);
    wait_for(&a, "A established with GTSM", |s| s.is_up()).await;
    wait_for(&b, "B established with GTSM", |s| s.is_up()).await;
}

/// A connection from B's peer address whose SYN carries TTL 1 (an eBGP peer without
/// GTSM, or one further away): B, with GTSM, closes it without sending its OPEN, and
/// the kernel would drop the rest of such a connection anyway (IP_MINTTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gtsm_refuses_a_connection_with_a_lower_ttl() {
    use crate::bgp::socket::{self, ConnectOptions};
    use tokio::io::AsyncReadExt;
    let (a, b, l) = setup_with(None, None, false, true);
    a.shutdown(2).await; // the raw connection below plays A
    let opts = ConnectOptions {
        peer: l.local_addr().expect("addr"),
        local_addr: Some(IpAddr::V4(A_IP)),
        local_port: None,
        ttl: Some(1),
        min_ttl: None,
        password: None,
    };
    let mut conn = socket::connect(&opts).await.expect("the handshake completes before accept");
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await;
    // Closed (EOF or reset) with nothing read: no OPEN came from B.
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "B answered a TTL-1 connection: {read:?}");
    assert_eq!(b.status().established_count, 0, "{:?}", b.status());
    assert_ne!(b.status().state, State::Established);
}

/// The kernel holds the options: IP_MINTTL (IPV6_MINHOPCOUNT) 255 on a connecting
/// socket before its SYN, and on an accepted one, also for an IPv4 peer accepted on a
/// dual-stack IPv6 listener; TTL 255 on the listener and on the accepted connection.
#[tokio::test]
async fn gtsm_socket_options_are_set() {
    use crate::bgp::socket::{self, ConnectOptions, GTSM_TTL};
    use socket2::SockRef;
    for (listen, peer) in
        [("[::]:0", Ipv4Addr::LOCALHOST.into()), ("[::1]:0", IpAddr::from(std::net::Ipv6Addr::LOCALHOST))]
    {
        let l = socket::listen(listen.parse().expect("addr")).expect("listen");
        assert_eq!(SockRef::from(&l).ttl_v4().expect("ttl"), 255, "{listen}");
        assert_eq!(SockRef::from(&l).unicast_hops_v6().expect("hops"), 255, "{listen}");
        let opts = ConnectOptions {
            peer: SocketAddr::new(peer, l.local_addr().expect("addr").port()),
            local_addr: None,
            local_port: None,
            ttl: Some(255),
            min_ttl: Some(GTSM_TTL),
            password: None,
        };
        let (out, accepted) = tokio::join!(socket::connect(&opts), l.accept());
        let out = out.expect("connect");
        let (accepted, _) = accepted.expect("accept");
        assert_eq!(socket::min_ttl(&out, peer).expect("getsockopt"), 255, "connecting to {peer}");
        assert_eq!(
            socket::min_ttl(&accepted, peer).expect("getsockopt"),
            0,
            "none before it is matched to a peer"
        );
        socket::set_stream_ttl(&accepted, peer, Some(255), Some(GTSM_TTL)).expect("set");
        assert_eq!(socket::min_ttl(&accepted, peer).expect("getsockopt"), 255, "accepted from {peer}");
        let sock = SockRef::from(&accepted);
        let ttl = if peer.is_ipv4() { sock.ttl_v4() } else { sock.unicast_hops_v6() };
        assert_eq!(ttl.expect("ttl"), 255, "accepted from {peer}");
        // A peer without GTSM: the route's default TTL again, not the listener's 255.
        socket::set_stream_ttl(&accepted, peer, None, None).expect("set");
        let ttl = if peer.is_ipv4() { sock.ttl_v4() } else { sock.unicast_hops_v6() };
        assert_ne!(ttl.expect("ttl"), 255, "accepted from {peer}");
    }
}

#[test]
fn password_is_never_printed() {
    let p = Password::new("hunter2");
    let mut cfg = SessionConfig::new(
        PeerConfig::new(1, 2, Ipv4Addr::LOCALHOST),
        "127.0.0.1:179".parse().expect("addr"),
    );
    cfg.password = Some(p.clone());
    assert!(!format!("{p:?} {cfg:?}").contains("hunter2"));
}

/// A TCP reset of an Established session (through a proxy the test controls) ends in
/// a reconnect after the ConnectRetry backoff, and the session comes back with its routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_reset_of_established_session_reconnects_after_backoff() {
    use tokio::net::{TcpListener, TcpStream};

    let listener = Listener::bind(SocketAddr::new(IpAddr::V4(B_IP), 0)).expect("bind");
    let b_port = listener.local_addr().expect("addr").port();
    let proxy = TcpListener::bind(SocketAddr::new(IpAddr::V4(B_IP), 0)).await.expect("proxy");
    let proxy_port = proxy.local_addr().expect("addr").port();

    let mut b_peer = PeerConfig::new(65002, 65001, B_IP);
    b_peer.passive = true;
    let b = session::spawn(SessionConfig::new(b_peer, SocketAddr::new(IpAddr::V4(A_IP), 179)));
    listener.add_peer(&b, None).expect("add peer");
    let mut a_peer = PeerConfig::new(65001, 65002, A_IP);
    a_peer.connect_retry = Duration::from_millis(800);
    let mut a_cfg = SessionConfig::new(a_peer, SocketAddr::new(IpAddr::V4(B_IP), proxy_port));
    a_cfg.local_addr = Some(IpAddr::V4(A_IP));
    a_cfg.export.next_hop_v6 = Some("2001:db8::2".parse().expect("addr"));
    let a = session::spawn(a_cfg);
    a.set_desired(routes());

    // Proxy A → B; hands the test the A-side stream of each connection to reset it.
    let (conn_tx, mut conn_rx) = tokio::sync::mpsc::channel::<std::net::TcpStream>(4);
    tokio::spawn(async move {
        while let Ok((from_a, _)) = proxy.accept().await {
            // B accepts only its peer's address: connect from A's.
            let Ok(sock) = tokio::net::TcpSocket::new_v4() else { continue };
            if sock.bind(SocketAddr::new(IpAddr::V4(A_IP), 0)).is_err() {
                continue;
            }
            let Ok(to_b) = sock.connect(SocketAddr::new(IpAddr::V4(B_IP), b_port)).await else {
                continue;
            };
            let Ok(std_a) = from_a.into_std() else { continue };
            let Ok(keep) = std_a.try_clone() else { continue };
            let _ = conn_tx.send(keep).await;
            let Ok(mut from_a) = TcpStream::from_std(std_a) else { continue };
            let mut to_b = to_b;
            tokio::spawn(async move {
                let _ = tokio::io::copy_bidirectional(&mut from_a, &mut to_b).await;
            });
        }
    });

    wait_for(&b, "B received routes", |s| s.prefixes_received == 4).await;
    let first = conn_rx.recv().await.expect("first connection");
    // SO_LINGER 0 + close = RST.
    socket2::SockRef::from(&first).set_linger(Some(Duration::ZERO)).expect("linger");
    let _ = first.shutdown(std::net::Shutdown::Both);
    drop(first);
    let reset_at = tokio::time::Instant::now();
    let down = wait_for(&a, "A saw the reset", |s| s.state != State::Established).await;
    assert!(down.last_down_reason.is_some(), "{down:?}");
    let second = tokio::time::timeout(Duration::from_secs(10), conn_rx.recv()).await;
    assert!(matches!(second, Ok(Some(_))), "no reconnect");
    // Backoff: no reconnect before (most of) the ConnectRetry time.
    assert!(reset_at.elapsed() >= Duration::from_millis(600), "reconnected after {:?}", reset_at.elapsed());
    let up = wait_for(&a, "A re-established", |s| s.is_up() && s.established_count == 2).await;
    assert_eq!(up.established_count, 2);
    wait_for(&a, "routes re-sent", |s| s.prefixes_advertised == 4).await;
    a.shutdown(2).await;
}

/// Like [`setup`] but A retries quickly, so a held-down session that reconnected would show.
fn setup_fast_retry() -> (SessionHandle, SessionHandle, Listener) {
    let listener = Listener::bind(SocketAddr::new(IpAddr::V4(B_IP), 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let mut b_peer = PeerConfig::new(65002, 65001, B_IP);
    b_peer.passive = true;
    let b = session::spawn(SessionConfig::new(b_peer, SocketAddr::new(IpAddr::V4(A_IP), 179)));
    listener.add_peer(&b, None).expect("add peer");
    let mut a_peer = PeerConfig::new(65001, 65002, A_IP);
    a_peer.hold_time = 90;
    a_peer.connect_retry = Duration::from_millis(200);
    a_peer.connect_retry_max = Duration::from_millis(400);
    let mut a_cfg = SessionConfig::new(a_peer, SocketAddr::new(IpAddr::V4(B_IP), port));
    a_cfg.local_addr = Some(IpAddr::V4(A_IP));
    a_cfg.export.next_hop_v6 = Some("2001:db8::2".parse().expect("addr"));
    (session::spawn(a_cfg), b, listener)
}

/// BFD down on the active side: the Established session is reset at once (the peer
/// sees Cease / BFD Down, long before the 90 s hold time), stays down while BFD is
/// down although the active side retries every 200 ms, and comes back with its routes
/// when BFD is up again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bfd_down_resets_established_session_and_holds_it_down_until_bfd_up() {
    let (a, b, _l) = setup_fast_retry();
    a.set_desired(routes());
    wait_for(&b, "B received routes", |s| s.is_up() && s.prefixes_received == 4).await;

    a.set_bfd_up(false).await;
    let sa = wait_for(&a, "A reset by BFD", |s| s.state == State::Idle && s.bfd_held_down).await;
    let why = sa.last_down_reason.expect("A down reason");
    assert!(why.contains("cease (6/10)"), "{why}");
    let sb = wait_for(&b, "B saw Cease / BFD down", |s| s.last_down_reason.is_some()).await;
    let why = sb.last_down_reason.expect("B down reason");
    assert!(why.contains("cease (6/10)"), "{why}");
    assert_ne!(sb.state, State::Established);

    // Held down: several ConnectRetry periods pass without a new session.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(a.status().state, State::Idle);
    assert_eq!((a.status().established_count, b.status().established_count), (1, 1));
    // Repeating "down" changes nothing.
    a.set_bfd_up(false).await;
    assert_eq!(a.status().established_count, 1);

    a.set_bfd_up(true).await;
    let up = wait_for(&a, "A re-established", |s| s.is_up() && s.established_count == 2).await;
    assert!(!up.bfd_held_down);
    assert_eq!(up.bfd_resets, 1);
    wait_for(&a, "routes re-sent", |s| s.prefixes_advertised == 4).await;
    wait_for(&b, "B has the routes again", |s| s.is_up() && s.prefixes_received >= 8).await;
    a.shutdown(2).await;
}

/// BFD down on the passive side: it resets the session and refuses the active peer's
/// reconnects until BFD is up again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bfd_down_on_passive_side_refuses_connections_until_bfd_up() {
    let (a, b, _l) = setup_fast_retry();
    wait_for(&b, "B established", |s| s.is_up()).await;

    b.set_bfd_up(false).await;
    wait_for(&b, "B reset by BFD", |s| s.state == State::Idle && s.bfd_held_down).await;
    let sa = wait_for(&a, "A saw Cease / BFD down", |s| s.last_down_reason.is_some()).await;
    assert!(sa.last_down_reason.expect("reason").contains("cease (6/10)"));
    // A keeps connecting every 200-400 ms; B closes every connection in Idle.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!((a.status().established_count, b.status().established_count), (1, 1));
    assert_eq!(b.status().state, State::Idle);

    b.set_bfd_up(true).await;
    wait_for(&b, "B re-established", |s| s.is_up() && s.established_count == 2).await;
    wait_for(&a, "A re-established", |s| s.is_up() && s.established_count == 2).await;
    a.shutdown(2).await;
}

/// `advertised` lists a prefix only once its UPDATE went out on an Established session:
/// never while the session is down (here held down by BFD with routes desired), and
/// every snapshot that lists prefixes is Established with UPDATEs written. Withdrawals
/// and the session going down take prefixes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertised_lists_prefixes_only_after_their_update_went_out_established() {
    let (a, b, _l) = setup_fast_retry();
    a.set_bfd_up(false).await;
    a.set_desired(routes());
    // Every status A publishes from here on: prefixes imply Established with UPDATEs sent.
    let mut seen = a.watch_status();
    let checker = tokio::spawn(async move {
        let mut snapshots = 0u32;
        loop {
            {
                let s = seen.borrow_and_update();
                snapshots += 1;
                assert!(
                    s.advertised.is_empty() || (s.is_up() && s.updates_sent > 0),
                    "prefixes listed before their UPDATE went out: {s:?}"
                );
            }
            if seen.changed().await.is_err() {
                return snapshots;
            }
        }
    });
    // Held down with routes desired: nothing is advertised.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let st = a.status();
    assert!(!st.is_up() && st.advertised.is_empty(), "{st:?}");

    a.set_bfd_up(true).await;
    let want: crate::bgp::session::Prefixes = routes().keys().copied().collect();
    let st = wait_for(&a, "A advertised every route", |s| s.advertised == want).await;
    assert!(st.is_up() && st.updates_sent >= 1);
    wait_for(&b, "B received them", |s| s.prefixes_received == 4).await;

    let mut fewer = routes();
    let gone: IpNet = "203.0.113.0/24".parse().expect("prefix");
    fewer.remove(&gone);
    a.set_desired(fewer);
    wait_for(&a, "the withdrawn prefix is no longer listed", |s| {
        s.advertised.len() == 3 && !s.advertised.contains(&gone)
    })
    .await;

    // The peer goes away: its copy of our routes is gone, and so is the list.
    b.shutdown(2).await;
    let st = wait_for(&a, "A down after the peer's Cease", |s| !s.is_up()).await;
    assert!(st.advertised.is_empty(), "{st:?}");
    a.shutdown(2).await;
    let snapshots = checker.await.expect("invariant held on every snapshot");
    assert!(snapshots >= 3, "the checker saw the session's life ({snapshots} snapshots)");
}

/// A peer that sends a NOTIFICATION and resets the connection is down for the reason
/// its NOTIFICATION gives, also when A's next write fails before A has read it (the
/// failed write used to overtake it: "TCP connection failed or closed").
///
/// One thread, so the order is the runtime's: the routes wake A's driver, whose UPDATE
/// meets the reset before the runtime has polled the socket for the NOTIFICATION.
#[tokio::test(flavor = "current_thread")]
async fn a_reset_peers_notification_is_the_reason_though_a_write_fails_first() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    async fn frame(conn: &mut tokio::net::TcpStream) -> Message {
        let mut head = [0u8; 19];
        conn.read_exact(&mut head).await.expect("header");
        let len = usize::from(u16::from_be_bytes([head[16], head[17]]));
        let mut whole = head.to_vec();
        whole.resize(len, 0);
        conn.read_exact(&mut whole[19..]).await.expect("body");
        Message::decode(&mut bytes::Bytes::from(whole), &DecodeContext::default()).expect("a message")
    }
    async fn send(conn: &mut tokio::net::TcpStream, m: Message) {
        let mut buf = bytes::BytesMut::new();
        m.encode(&mut buf, &EncodeContext::default());
        conn.write_all(&buf).await.expect("write");
    }

    let peer = tokio::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(B_IP), 0)).await.expect("bind");
    let mut a_cfg = SessionConfig::new(PeerConfig::new(65001, 65002, A_IP), peer.local_addr().expect("addr"));
    a_cfg.local_addr = Some(IpAddr::V4(A_IP));
    let a = session::spawn(a_cfg);
    let (mut conn, _) = peer.accept().await.expect("A connects");
    assert!(matches!(frame(&mut conn).await, Message::Open(_)));
    send(&mut conn, Message::Open(Open::new(65002, 90, B_IP, Vec::new()))).await;
    send(&mut conn, Message::Keepalive).await;
    assert_eq!(frame(&mut conn).await, Message::Keepalive);
    // Established, with its End-of-RIB (an UPDATE) written.
    let up = wait_for(&a, "A established", |s| s.is_up() && s.updates_sent > 0).await;

    send(&mut conn, Message::Notification(Notification::cease(subcode::CEASE_ADMIN_SHUTDOWN))).await;
    let conn = conn.into_std().expect("std");
    socket2::SockRef::from(&conn).set_linger(Some(Duration::ZERO)).expect("linger");
    drop(conn);
    // Blocking, so nothing of A runs meanwhile: the kernel takes the reset.
    std::thread::sleep(Duration::from_millis(50));
    a.set_desired(routes());
    let down = wait_for(&a, "A down", |s| s.last_down_reason.is_some()).await;
    let why = down.last_down_reason.as_deref().expect("reason");
    assert!(why.contains("peer sent NOTIFICATION cease (6/2)"), "{why}");
    assert_eq!(down.updates_sent, up.updates_sent, "the routes' UPDATE was not written: {down:?}");
    a.shutdown(2).await;
}
