//! Key and password rotation without a restart or a split (issue #13, point 3).
//!
//! Membership: three `ferrolb-speaker --static` in L2 mode, their key files rewritten one
//! after the other 1.5 s apart (a rolling change, within the rotation window W, shortened
//! to 8 s here by the test-only `FERROLB_TEST_MEMBERSHIP_ROTATION_WINDOW_MS`). Sampled
//! continuously from before the first change until every node retired the old key: each
//! VIP is answered by its elected owner among all three nodes, and no node ever drops an
//! unauthenticated datagram; afterwards a datagram sealed with the old key is dropped as
//! unauthenticated and one sealed with the new key is read. (With W = 0, a plain switch,
//! the nodes that changed first cannot read the others: they are declared down and their
//! VIPs move; the samplers see it.)
//!
//! BGP passwords: one `ferrolb-speaker --kubeconfig` against the fake apiserver, with two
//! BGPPeers (BIRD on the router's address and BIRD on the client's, TCP MD5 from two
//! Secrets). Peer A's password changes on both sides: A's session comes back with the new
//! password (the speaker follows the Secret; no restart), B's session never drops (BIRD's
//! `since` for it is unchanged and it was Established at every sample). The membership
//! Secret is rotated on the same speaker, which follows it too.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first) and BIRD 2.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrolb_lab::addressing::{lan_v4 as v4, owner};
use ferrolb_lab::kubeapi::{FakeCluster, Objects};
use ferrolb_lab::routers::{self, Bird, Router, RouterSpec, bird};
use ferrolb_lab::speaker::{Speaker, binary, start_kube, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, client, wait};
use ferrolb_proto::membership::auth::Sealer;
use ferrolb_proto::membership::{DEFAULT_PORT, TEST_ROTATION_WINDOW_ENV};
use serde_json::json;

const T: Duration = Duration::from_secs(30);
/// The rotation window the speakers run with here.
const W: Duration = Duration::from_secs(8);
/// Between two nodes' key changes: with the 2 s file poll, the last node learns the key
/// at most 2 × 1.5 + 2 = 5 s after the first, within W.
const GAP: Duration = Duration::from_millis(1500);
const METRICS_PORT: u16 = 9121;
const OLD_KEY: &str = "the-old-membership-key-of-the-rotation-lab";
const NEW_KEY: &str = "the-new-membership-key-of-the-rotation-lab";

fn node_v4(i: usize) -> IpAddr {
    addressing::node_v4(i).into()
}

/// Writes `key` into `path` as an operator would: a temporary file renamed into place.
fn write_key(path: &Path, key: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{key}\n")).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The value of one sample (`name{labels}`) in a Prometheus text body (0 when absent).
fn metric(body: &str, sample: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn scrape(lab: &Lab, i: usize) -> String {
    client::http_get(lab.client(), SocketAddr::new(node_v4(i), METRICS_PORT), "/metrics", T).unwrap()
}

/// One VIP's samples: the VIP, how many, and the wrong ones (when, who answered).
type Sampled = (IpAddr, usize, Vec<(Duration, BTreeSet<String>)>);

const UNAUTHENTICATED: &str = "ferrolb_membership_dropped_packets_total{reason=\"unauthenticated\"}";
const PROTOCOL: &str = "ferrolb_membership_dropped_packets_total{reason=\"protocol\"}";

#[test]
fn a_rolling_membership_key_change_moves_no_vip() {
    let nodes = [1, 2, 3];
    // Node 4 is a Node of the file that runs no speaker: the datagrams below come from
    // its address, as membership reads only datagrams from Nodes.
    let lab = Lab::up(LabConfig::nodes(4)).unwrap();
    // One VIP owned by each node while all three are live.
    let vips: Vec<IpAddr> =
        nodes.iter().map(|n| (200..=250).map(v4).find(|v| owner(*v, &nodes) == *n).unwrap()).collect();
    let mut objs: Vec<String> = nodes.iter().chain(&[4]).map(|i| yaml::node(*i)).collect();
    objs.push(yaml::pool("lan", &["192.0.2.200-192.0.2.250"]));
    objs.push(yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]));
    objs.push(yaml::service("web", &vips));
    let file = yaml::stream(&objs);
    let window = W.as_millis().to_string();
    let env = vec![(TEST_ROTATION_WINDOW_ENV.to_string(), window)];
    let bin = binary("debug").unwrap();
    let keys: Vec<PathBuf> = nodes
        .iter()
        .map(|i| {
            let k = lab.subdir(&format!("key-node{i}")).unwrap().join("membership.key");
            write_key(&k, OLD_KEY);
            k
        })
        .collect();
    let speakers: Vec<Speaker> = nodes
        .iter()
        .map(|i| {
            let key = keys[i - 1].display().to_string();
            let metrics = SocketAddr::new(node_v4(*i), METRICS_PORT).to_string();
            let extra = ["--membership-key-file", key.as_str(), "--metrics-addr", metrics.as_str()];
            Speaker::start_env(&lab, *i, &file, &bin, &extra, &env).unwrap()
        })
        .collect();
    let diag = || {
        let mut out = lab.logs(20);
        for s in &speakers {
            out.push_str(&format!("\n--- {}\n{}", s.file().display(), s.logs()));
        }
        out
    };
    let answering = |vip: IpAddr| client::arp_responders(lab.client(), "eth0", vip, 1).unwrap();
    for v in &vips {
        let want = BTreeSet::from([addressing::node_mac(owner(*v, &nodes))]);
        let r = wait::until_value(
            &format!("{v} answered by its owner alone"),
            T,
            || Ok(answering(*v)),
            |m| *m == want,
        );
        assert!(r.is_ok(), "{r:?}\n{}", diag());
    }

    // Sample every VIP, one thread each, from before the first change until every node
    // retired the old key.
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let samples: Vec<Sampled> = std::thread::scope(|scope| {
        let samplers: Vec<_> = vips
            .iter()
            .map(|v| {
                let stop = stop.clone();
                scope.spawn(move || {
                    let want = BTreeSet::from([addressing::node_mac(owner(*v, &nodes))]);
                    let (mut n, mut wrong) = (0, Vec::new());
                    while !stop.load(Ordering::Relaxed) {
                        let seen = answering(*v);
                        n += 1;
                        if seen != want {
                            wrong.push((started.elapsed(), seen));
                        }
                    }
                    (*v, n, wrong)
                })
            })
            .collect();
        // The rolling change: node after node, GAP apart (the pace of the input, not a wait).
        for (n, k) in keys.iter().enumerate() {
            if n > 0 {
                std::thread::sleep(GAP);
            }
            write_key(k, NEW_KEY);
        }
        for s in &speakers {
            if let Err(e) = s.wait_log("membership key rotation: old key retired", W * 2 + T) {
                stop.store(true, Ordering::Relaxed);
                panic!("{e}\n{}", diag());
            }
        }
        stop.store(true, Ordering::Relaxed);
        samplers.into_iter().map(|s| s.join().unwrap()).collect()
    });
    println!("rotation: every node retired the old key {:?} after the first change", started.elapsed());
    for (v, n, wrong) in &samples {
        assert!(
            wrong.is_empty(),
            "{v}: {} of {n} ARP samples not answered by node{} alone: {wrong:?}\n{}",
            wrong.len(),
            owner(*v, &nodes),
            diag()
        );
        println!(
            "{v}: {n} ARP samples through the rotation, each answered by node{} alone",
            owner(*v, &nodes)
        );
    }
    let bodies: Vec<String> = nodes.iter().map(|i| scrape(&lab, *i)).collect();
    let mut other_key = 0.0;
    for (i, b) in nodes.iter().zip(&bodies) {
        assert_eq!(
            metric(b, UNAUTHENTICATED),
            0.0,
            "node{i} could not read a datagram during the rotation\n{b}"
        );
        assert_eq!(metric(b, "ferrolb_membership_key_changes_total{result=\"applied\"}"), 1.0, "node{i}");
        assert_eq!(metric(b, "ferrolb_membership_key_rotation_phase"), 0.0, "node{i}: rotation finished");
        other_key += metric(b, "ferrolb_membership_rotation_datagrams_total{key=\"previous\"}")
            + metric(b, "ferrolb_membership_rotation_datagrams_total{key=\"next\"}");
    }
    assert!(other_key > 0.0, "no datagram needed the other key: the rotation window was never exercised");
    for s in &speakers {
        let logs = s.logs();
        assert!(logs.contains("membership key changed: accepting both keys"), "{logs}");
        assert!(logs.contains("sealing with the new key; the old key is still accepted"), "{logs}");
        assert!(!logs.contains(OLD_KEY) && !logs.contains(NEW_KEY), "a key was logged");
    }

    // The old key is retired: node1 drops what it seals, and reads what the new one seals.
    let send = |key: &str| {
        let datagrams: Vec<Vec<u8>> = {
            let session = u64::from(std::process::id()) << 8 | key.len() as u64;
            let mut s = Sealer::new(key.as_bytes(), session).unwrap();
            (0..3).map(|_| s.seal("node1", b"not a SWIM message")).collect()
        };
        lab.node(4)
            .run(move || {
                let sock = UdpSocket::bind((node_v4(4), DEFAULT_PORT)).unwrap();
                for d in &datagrams {
                    sock.send_to(d, SocketAddr::new(node_v4(1), DEFAULT_PORT)).unwrap();
                }
            })
            .unwrap();
    };
    let count = |sample: &str| metric(&scrape(&lab, 1), sample);
    send(OLD_KEY);
    wait::until("node1 drops the old key's datagrams as unauthenticated", T, || {
        Ok((count(UNAUTHENTICATED) >= 3.0).then_some(()))
    })
    .unwrap();
    let protocol_before = count(PROTOCOL);
    send(NEW_KEY);
    wait::until("node1 reads the new key's datagrams (then SWIM rejects them)", T, || {
        Ok((count(PROTOCOL) >= protocol_before + 3.0).then_some(()))
    })
    .unwrap();
    assert_eq!(count(UNAUTHENTICATED), 3.0, "the new key's datagrams were not read");
}

/// BIRD on `ns`'s address with one explicit, passive neighbour (node1) and a password.
fn bird_spec(router_id: std::net::Ipv4Addr, password: &str) -> RouterSpec {
    let mut spec = RouterSpec::default().password(password);
    spec.router_id = router_id;
    spec.ranges = Vec::new();
    spec.neighbors = vec![node_v4(1)];
    spec
}

/// BIRD's `show protocols` line of the session with node1 (name, state, since, info).
fn session_line(b: &Bird) -> String {
    b.birdc("show protocols")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("speakers0"))
        .unwrap_or_default()
        .to_string()
}

/// Where the speaker reads its passwords (and membership key) from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// Kubernetes mode: Secrets on the fake apiserver, which the speaker watches.
    Secrets,
    /// Static mode: `passwordFile`s and `--membership-key-file`, which it re-reads.
    Files,
}

#[test]
fn a_bgp_password_secret_change_restarts_only_that_peers_session() {
    password_change(Source::Secrets);
}

#[test]
fn a_bgp_password_file_change_restarts_only_that_peers_session() {
    password_change(Source::Files);
}

fn password_change(source: Source) {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let spec_a = bird_spec(addressing::ROUTER_V4, "alpha-first");
    let bird_a = Bird::start(&lab, &spec_a).unwrap();
    let bird_b =
        Bird::start_in(&lab, lab.client(), "bird-b", &bird_spec(addressing::CLIENT_V4, "bravo")).unwrap();
    // The fake apiserver takes `data` (base64), as the real one stores it.
    let secret = |name: &str, key: &str, value: &str| {
        let data = json!({ key: k8s_openapi::ByteString(value.as_bytes().to_vec()) });
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "ferrolb-system"},
               "data": data})
    };
    let dir = lab.subdir("secrets").unwrap();
    let file = |name: &str| dir.join(name);
    let peer = |name: &str, addr: IpAddr, secret: &str| {
        let pw = match source {
            Source::Secrets => {
                format!("passwordSecret: {{name: {secret}, namespace: ferrolb-system, key: password}}")
            }
            Source::Files => format!("passwordFile: {}", file(secret).display()),
        };
        yaml::peer(
            name,
            addressing::NODE_ASN,
            addressing::ROUTER_ASN,
            addr,
            &["addressFamilies: [ipv4-unicast]", &pw],
        )
    };
    let objects = yaml::stream(&[
        yaml::node(1),
        yaml::pool("public", &[addressing::BGP_POOL_V4]),
        yaml::pool("lan", &["192.0.2.200-192.0.2.250"]),
        peer("router-a", addressing::ROUTER_V4.into(), "bgp-a"),
        peer("router-b", addressing::CLIENT_V4.into(), "bgp-b"),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]),
        yaml::service("web", &[addressing::bgp_vip_v4(10)]),
    ]);
    let mut cluster = None;
    let mut kube_speaker = None;
    let mut static_speaker = None;
    match source {
        Source::Secrets => {
            let c = FakeCluster::start(&lab).unwrap();
            c.apply(
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ferrolb-system"}}),
            )
            .unwrap();
            c.apply(&secret("bgp-a", "password", "alpha-first")).unwrap();
            c.apply(&secret("bgp-b", "password", "bravo")).unwrap();
            c.apply(&secret("ferrolb-membership", "key", OLD_KEY)).unwrap();
            c.apply_stream(&objects).unwrap();
            kube_speaker = Some(start_kube(&lab, c.kubeconfig(), 1, "rotation", None).unwrap());
            cluster = Some(c);
        }
        Source::Files => {
            write_key(&file("bgp-a"), "alpha-first");
            write_key(&file("bgp-b"), "bravo");
            write_key(&file("membership.key"), OLD_KEY);
            let key = file("membership.key");
            static_speaker = Some(Speaker::start_l2(&lab, 1, &objects, &key).unwrap());
        }
    }
    let logs = || match (&kube_speaker, &static_speaker) {
        (Some(p), _) => p.logs(),
        (_, Some(s)) => s.logs(),
        _ => String::new(),
    };
    // Changes a password or the membership key where this mode reads it.
    let change = |name: &str, key: &str, value: &str| match &cluster {
        Some(c) => c.apply(&secret(name, key, value)).unwrap(),
        None => write_key(&file(if name == "ferrolb-membership" { "membership.key" } else { name }), value),
    };
    let diag = || format!("{}\n--- speaker\n{}", lab.logs(40), logs());
    for (b, what) in [(&bird_a, "A"), (&bird_b, "B")] {
        let r = routers::wait_established(b, &[node_v4(1)], T);
        assert!(r.is_ok(), "session {what}: {r:?}\n{}", diag());
        let r = routers::wait_rib(b, "203.0.113.10/32", &[node_v4(1)], T);
        assert!(r.is_ok(), "route at {what}: {r:?}\n{}", diag());
    }
    // BIRD's `since` is no witness of a restart: 2.0.12 stamps it again with B up all along
    // (a millisecond after Established; and once, in CI, later still, while every sample saw
    // B Established). The speaker's session machine is a witness: a restart from either side
    // takes B's session out of Established.
    let b_before = session_line(&bird_b);
    assert!(b_before.contains("Established"), "{b_before}");
    let b_peer = format!("peer={}}}", addressing::CLIENT_V4);
    let b_transitions = || -> Vec<String> {
        let text = ferrolb_lab::process::strip_ansi(&logs());
        text.lines()
            .filter(|l| l.contains(&b_peer) && l.contains("BGP session state changed"))
            .map(str::to_string)
            .collect()
    };
    let b_start = b_transitions();
    let up = b_start.iter().filter(|l| l.contains("to=Established")).count();
    assert_eq!(up, 1, "B's session came up once before the change: {b_start:#?}");

    let stop = Arc::new(AtomicBool::new(false));
    let (b_samples, b_down) = std::thread::scope(|scope| {
        let sampler = {
            let (stop, bird_b) = (stop.clone(), &bird_b);
            scope.spawn(move || {
                let (mut n, mut down) = (0, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let line = session_line(bird_b);
                    n += 1;
                    if !line.contains("Established") {
                        down.push(line);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                (n, down)
            })
        };
        // The router first: BIRD restarts A's session, which cannot come back with the old
        // password; then the Secret.
        let mut new_a = spec_a.clone();
        new_a.password = Some("alpha-second".into());
        std::fs::write(lab.dir().join("bird").join("bird.conf"), bird::config(&new_a)).unwrap();
        let out = bird_a.birdc("configure").unwrap();
        assert!(out.contains("Reconfigur"), "{out}");
        let r = wait::until("A's session down after the router's password change", T, || {
            Ok((!bird_a.established()?.contains(&node_v4(1))).then_some(()))
        });
        assert!(r.is_ok(), "{r:?}\n{}", diag());
        let t = Instant::now();
        change("bgp-a", "password", "alpha-second");
        let r = routers::wait_established(&bird_a, &[node_v4(1)], T);
        if r.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        assert!(r.is_ok(), "A never came back with the new password: {r:?}\n{}", diag());
        println!("{source:?}: bgp-a changed → A Established again in {:?}", t.elapsed());
        routers::wait_rib(&bird_a, "203.0.113.10/32", &[node_v4(1)], T).unwrap();
        // B kept the route all along, and is sampled a little longer.
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        sampler.join().unwrap()
    });
    assert!(
        b_down.is_empty(),
        "B's session was not Established in {} of {b_samples} samples: {b_down:?}",
        b_down.len()
    );
    let b_end = b_transitions();
    assert_eq!(b_end, b_start, "B's session changed state (restarted)\n{}", diag());
    println!(
        "B: {b_samples} samples, Established in each; before: {b_before}; after: {}",
        session_line(&bird_b)
    );
    let text = logs();
    let why =
        if source == Source::Secrets { "BGP password Secret changed" } else { "BGP password file changed" };
    assert!(text.contains(&format!("{why}: restarting the sessions of these peers only")), "{text}");
    let restarts: Vec<&str> =
        text.lines().filter(|l| l.contains("BGPPeer changed: restarting its session")).collect();
    assert!(restarts.len() == 1 && restarts[0].contains("router-a"), "{restarts:#?}");

    // The membership key is followed too (one node: nothing to split).
    change("ferrolb-membership", "key", NEW_KEY);
    wait::until("the speaker follows the membership key", T, || {
        Ok(logs().contains("membership key changed: accepting both keys").then_some(()))
    })
    .unwrap();
    let text = logs();
    for secret in ["alpha-first", "alpha-second", "bravo", OLD_KEY, NEW_KEY] {
        assert!(!text.contains(secret), "a secret was logged");
    }
}
