//! Membership instances on loopback in one process: join, crash, leave, wrong key;
//! clocks that disagree; a node that cannot read its peer claims nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use ferrolb_fakeapi::wait::{until, until_watched_within};
use ferrolb_proto::membership::MembershipKey;
use ferrolb_proto::membership::auth::{DropReason, Sealer};
use ferrolb_proto::membership::claim::{self, Observation, Rule, Verdict};
use ferrolb_proto::membership::{Membership, MembershipConfig, MembershipHandle, MembershipMetrics, Seed};
use ferrolb_testkit::free_udp_ports;
use tokio::sync::watch;

const KEY: &str = "loopback-test-key-0123456789abcdef";

fn start(name: &str, me: SocketAddr, seeds: &[Seed], key: &str) -> (MembershipHandle, MembershipMetrics) {
    start_at(name, me, seeds, key, None)
}

/// Like [`start`], with the identity's start time read off a clock `skew_ms` off.
fn start_at(
    name: &str,
    me: SocketAddr,
    seeds: &[Seed],
    key: &str,
    skew_ms: Option<i64>,
) -> (MembershipHandle, MembershipMetrics) {
    let mut cfg = MembershipConfig::new(name, me, seeds.to_vec(), MembershipKey::parse(key).unwrap());
    cfg.bind = me;
    cfg.started_ms = skew_ms.map(|s| unix_ms().saturating_add_signed(s));
    let metrics = MembershipMetrics::default();
    (Membership::spawn(cfg, metrics.clone()).unwrap(), metrics)
}

fn unix_ms() -> u64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    u64::try_from(d.as_millis()).unwrap()
}

async fn wait_live(rx: &mut watch::Receiver<BTreeSet<String>>, want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    until_watched_within(&format!("the live set {want:?}"), Duration::from_secs(20), rx, |s| *s == want)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_crash_leave_and_ignore_a_wrong_key() {
    let addrs: Vec<SocketAddr> =
        free_udp_ports::<4>().into_iter().map(|p| SocketAddr::from((Ipv4Addr::LOCALHOST, p))).collect();
    let seeds: Vec<Seed> =
        ["a", "b", "c"].iter().zip(&addrs).map(|(n, a)| Seed { name: n.to_string(), addr: *a }).collect();
    let (a, ma) = start("a", addrs[0], &seeds, KEY);
    let (b, _) = start("b", addrs[1], &seeds, KEY);
    let (c, _) = start("c", addrs[2], &seeds, KEY);
    let (mut la, mut lb) = (a.live(), b.live());
    wait_live(&mut la, &["a", "b", "c"]).await;
    wait_live(&mut lb, &["a", "b", "c"]).await;
    for h in [&a, &b, &c] {
        until_watched_within("joined members settled", Duration::from_secs(5), &mut h.settled(), |s| *s)
            .await;
    }

    // An intruder with the wrong key on a Node's address, seeded with everyone: nothing
    // changes, drops counted.
    let nodes: Vec<Seed> = seeds.iter().cloned().chain([Seed { name: "x".into(), addr: addrs[3] }]).collect();
    for h in [&a, &b, &c] {
        h.set_nodes(&nodes);
    }
    let (x, _) = start("x", addrs[3], &seeds, "a-wrong-key-that-is-long-enough-000");
    let mut lx = x.live();
    // Proof that the input was processed: a dropped the intruder's packets, and the
    // intruder, answered by nobody, settled alone (within the 1.5 s it always had).
    until("a drops the intruder's packets", || async {
        (ma.dropped(DropReason::Unauthenticated) > 0).then_some(())
    })
    .await;
    let settled =
        tokio::time::timeout(Duration::from_millis(1500), x.settled().wait_for(|s| *s)).await.is_ok();
    assert!(!la.borrow().contains("x"), "a member with the wrong key must never be seen live");
    assert_eq!(*lx.borrow_and_update(), BTreeSet::from(["x".to_string()]));
    assert!(ma.dropped(DropReason::Unauthenticated) > 0, "the intruder's packets must be counted");
    assert!(settled, "a node nobody answers settles alone after join_timeout");
    x.abort();

    // Graceful leave: dropped at once (no suspicion timeout).
    let t = std::time::Instant::now();
    c.leave().await;
    wait_live(&mut la, &["a", "b"]).await;
    println!("graceful leave seen after {:?}", t.elapsed());

    // A crash: detected by probing.
    let t = std::time::Instant::now();
    b.abort();
    wait_live(&mut la, &["a"]).await;
    println!("crash detected after {:?}", t.elapsed());
    assert_eq!(ma.size(), 1);
    a.leave().await;
}

const HOUR_MS: i64 = 3_600_000;

/// Clocks 60 s and 1 h ahead and behind: every node hears every other one (no datagram
/// is judged by its time), and a node whose clock steps back 1 h across a restart — its
/// new identity older than the one its peers remember — rejoins (told it is down, it
/// renews its identity until it outranks the old one), after a crash and after a leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_that_disagree_change_nothing_and_a_clock_stepping_back_rejoins() {
    let addrs: Vec<SocketAddr> =
        free_udp_ports::<5>().into_iter().map(|p| SocketAddr::from((Ipv4Addr::LOCALHOST, p))).collect();
    let names = ["on-time", "ahead-60s", "behind-60s", "ahead-1h", "behind-1h"];
    let skews = [0, 60_000, -60_000, HOUR_MS, -HOUR_MS];
    let seeds: Vec<Seed> =
        names.iter().zip(&addrs).map(|(n, a)| Seed { name: n.to_string(), addr: *a }).collect();
    let mut nodes: Vec<MembershipHandle> = names
        .iter()
        .zip(&addrs)
        .zip(skews)
        .map(|((n, a), skew)| start_at(n, *a, &seeds, KEY, Some(skew)).0)
        .collect();
    for h in &nodes {
        wait_live(&mut h.live(), &names).await;
    }

    // "ahead-1h" crashes and comes back with its clock fixed (1 h earlier), then leaves
    // and comes back 1 h earlier still.
    for (round, skew) in [(1, 0), (2, -HOUR_MS)] {
        let old = nodes.remove(3);
        if round == 1 {
            old.abort();
        } else {
            old.leave().await;
        }
        let rest: Vec<&str> = names.iter().copied().filter(|n| *n != "ahead-1h").collect();
        wait_live(&mut nodes[0].live(), &rest).await;
        let t = std::time::Instant::now();
        let (back, _) = start_at("ahead-1h", addrs[3], &seeds, KEY, Some(skew));
        for h in nodes.iter().chain([&back]) {
            wait_live(&mut h.live(), &names).await;
        }
        println!(
            "round {round}: the node whose clock stepped back is live everywhere after {:?}",
            t.elapsed()
        );
        nodes.insert(3, back);
    }
    for h in nodes {
        h.leave().await;
    }
}

/// What a peer that this node cannot read sends.
#[derive(Debug, Clone, Copy)]
enum Unreadable {
    /// Sealed with another key.
    Forged,
    /// One datagram sealed with the right key, sent again and again.
    Replayed,
    /// Wire version 1 (another release), stamped 60 s ahead.
    Version1,
}

fn unreadable_datagrams(kind: Unreadable) -> impl FnMut() -> Vec<u8> {
    let mut right = Sealer::new(KEY.as_bytes(), 7).unwrap();
    let mut wrong = Sealer::new(b"another-key-of-the-same-length-0123", 7).unwrap();
    let captured = right.seal("me", b"a datagram captured on the wire");
    move || match kind {
        Unreadable::Forged => wrong.seal("me", b"hello"),
        Unreadable::Replayed => captured.clone(),
        Unreadable::Version1 => {
            let mut d = b"FLBM\x01".to_vec();
            d.extend_from_slice(&9u64.to_be_bytes());
            d.extend_from_slice(&1u64.to_be_bytes());
            d.extend_from_slice(&(unix_ms() + 60_000).to_be_bytes());
            d.extend_from_slice(&[0u8; 40]);
            d
        }
    }
}

/// The guard of the speaker and bootstrap, on a real membership instance whose only
/// peer sends datagrams it cannot read (as a node with another key, a replaying
/// attacker, or a node of the previous wire version whose clock is 60 s ahead would):
/// it settles alone, yet never claims — for far longer than ALONE_WAIT — and reports
/// blindness; once the datagrams stop, its lone view is true and it claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_read_its_peer_claims_nothing() {
    let runs = [Unreadable::Forged, Unreadable::Replayed, Unreadable::Version1].map(|kind| {
        tokio::spawn(async move {
            let me = SocketAddr::from((Ipv4Addr::LOCALHOST, free_udp_ports::<1>()[0]));
            let peer = tokio::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
            let seeds = [Seed { name: "peer".into(), addr: peer.local_addr().unwrap() }];
            let (h, metrics) = start("me", me, &seeds, KEY);
            let mut guard = Rule::new(1);
            let mut next = unreadable_datagrams(kind);
            let observe = |guard: &mut Rule| {
                let seen = Observation {
                    settled: *h.settled().borrow(),
                    live_others: h.live().borrow().len() - 1,
                    unreadable: metrics.unreadable(),
                };
                guard.handle(std::time::Instant::now(), seen)
            };
            let start = std::time::Instant::now();
            let mut verdicts = Vec::new();
            // The peer sends every 200 ms (a real one announces at least every second).
            while start.elapsed() < claim::ALONE_WAIT * 2 {
                peer.send_to(&next(), me).await.unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
                verdicts.push(observe(&mut guard));
            }
            assert!(*h.settled().borrow(), "{kind:?}: settled alone (join_timeout)");
            assert!(metrics.unreadable() >= 10, "{kind:?}: the datagrams were counted");
            assert!(!verdicts.contains(&Verdict::Claim), "{kind:?}: claimed from a lone view: {verdicts:?}");
            assert_eq!(verdicts.last(), Some(&Verdict::Blind), "{kind:?}");
            assert_eq!(guard.poll_event(), Some(true), "{kind:?}: blindness reported");
            // The peer goes quiet: after UNREADABLE_MEMORY the lone view is believed.
            let quiet = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                match observe(&mut guard) {
                    Verdict::Claim => break,
                    v => {
                        assert!(quiet.elapsed() < claim::UNREADABLE_MEMORY * 2, "{kind:?}: still {v:?}")
                    }
                }
            }
            assert_eq!(guard.poll_event(), Some(false));
            h.leave().await;
            kind
        })
    });
    for r in runs {
        println!("{:?}: claimed nothing", r.await.unwrap());
    }
}

/// Key rotation through the real driver (issue #13): three members get a new key one
/// after the other, 400 ms apart (within the 1 s rotation window): nobody is ever
/// declared down on the way; each seals with the new key 1 s after it learned it and
/// retires the old one after 2 s. The same rolling change with window 0 (a plain switch)
/// splits the cluster: the guard of this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_key_change_within_the_window_never_splits_membership() {
    const NEW: &str = "the-rotated-loopback-key-0123456789";
    async fn rolling(window: Duration) -> (bool, Vec<MembershipMetrics>) {
        let addrs: Vec<SocketAddr> =
            free_udp_ports::<3>().into_iter().map(|p| SocketAddr::from((Ipv4Addr::LOCALHOST, p))).collect();
        let names = ["a", "b", "c"];
        let seeds: Vec<Seed> =
            names.iter().zip(&addrs).map(|(n, a)| Seed { name: n.to_string(), addr: *a }).collect();
        let members: Vec<(MembershipHandle, MembershipMetrics)> = names
            .iter()
            .zip(&addrs)
            .map(|(n, a)| {
                let mut cfg = MembershipConfig::new(n, *a, seeds.clone(), MembershipKey::parse(KEY).unwrap());
                cfg.bind = *a;
                cfg.rotation_window = window;
                let metrics = MembershipMetrics::default();
                (Membership::spawn(cfg, metrics.clone()).unwrap(), metrics)
            })
            .collect();
        let mut lives: Vec<_> = members.iter().map(|(h, _)| h.live()).collect();
        for l in &mut lives {
            wait_live(l, &names).await;
        }
        // Sample every live set every 20 ms from the first change until 2 windows after
        // the last one plus a second.
        let sampler = {
            let lives = lives.clone();
            tokio::spawn(async move {
                let end = tokio::time::Instant::now()
                    + Duration::from_millis(800)
                    + window * 2
                    + Duration::from_secs(1);
                let mut split = false;
                while tokio::time::Instant::now() < end {
                    split |= lives.iter().any(|l| l.borrow().len() != 3);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                split
            })
        };
        for (h, _) in &members {
            h.set_key(MembershipKey::parse(NEW).unwrap());
            tokio::time::sleep(Duration::from_millis(400)).await;
        }
        let split = sampler.await.unwrap();
        let metrics = members.iter().map(|(_, m)| m.clone()).collect();
        for (h, _) in members {
            h.abort();
        }
        (split, metrics)
    }

    let (split, metrics) = rolling(Duration::from_secs(1)).await;
    assert!(!split, "a member was declared down during the rotation");
    for m in &metrics {
        assert_eq!(m.key_changes("applied"), 1);
        assert_eq!(m.rotation_phase(), 0, "every rotation finished");
        assert_eq!(m.dropped(DropReason::Unauthenticated), 0, "every datagram was readable");
    }

    let (split, _) = rolling(Duration::ZERO).await;
    assert!(split, "a plain switch should split membership (or this test proves nothing)");
}

/// A starting node does not elect from its first answer: the upgrade that lost a
/// connection had node2 settle on "node2, node3" while node1 and node4 answered 10 ms
/// later, and claim node4's address for those 10 ms. Here `d`'s announcement to `b`
/// is held by a relay until `d` has joined through `a`, so `d`'s first view lacks `b`;
/// `d` must settle only on a view holding both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_node_settles_on_the_whole_view_not_the_first_answer() {
    let [pa, pb, pd, pr] = free_udp_ports();
    let at = |p| SocketAddr::from((Ipv4Addr::LOCALHOST, p));
    // a and b do not know each other: only d's arrival joins them.
    let (a, _) = start("a", at(pa), &[], KEY);
    let (b, _) = start("b", at(pb), &[], KEY);
    // Every node knows the others' addresses (the relay's too: it speaks for d to b and
    // for b to d), seeds or not.
    let node = |name: &str, p| Seed { name: name.into(), addr: at(p) };
    a.set_nodes(&[node("b", pb), node("d", pd)]);
    b.set_nodes(&[node("a", pa), node("d", pd), node("d", pr)]);

    // The relay holds what d sends to b until released, then forwards it all.
    let relay = tokio::net::UdpSocket::bind(at(pr)).await.unwrap();
    let (release, mut released) = watch::channel(false);
    let relaying = tokio::spawn(async move {
        let mut held: Vec<Vec<u8>> = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            tokio::select! {
                r = relay.recv_from(&mut buf) => {
                    let (n, _) = r.unwrap();
                    held.push(buf[..n].to_vec());
                }
                r = released.changed() => if r.is_err() { return },
            }
            if *released.borrow() {
                for d in held.drain(..) {
                    relay.send_to(&d, at(pb)).await.unwrap();
                }
            }
        }
    });

    let seeds = [Seed { name: "a".into(), addr: at(pa) }, Seed { name: "b".into(), addr: at(pr) }];
    let (d, _) = start("d", at(pd), &seeds, KEY);
    d.set_nodes(&[node("a", pa), node("b", pb), node("b", pr)]);
    let (mut ld, mut sd) = (d.live(), d.settled());
    wait_live(&mut ld, &["a", "d"]).await;
    assert!(!*sd.borrow(), "d settled on its first answer (a), with b's answer still to come");

    release.send_replace(true);
    until_watched_within("d settles", Duration::from_secs(5), &mut sd, |s| *s).await;
    let view = ld.borrow().clone();
    let want: BTreeSet<String> = ["a", "b", "d"].iter().map(|s| s.to_string()).collect();
    assert_eq!(view, want, "d must settle on the view with every seed that answers");

    relaying.abort();
    for h in [a, b, d] {
        h.leave().await;
    }
}
