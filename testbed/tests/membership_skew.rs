//! Membership between speakers whose clocks disagree (hardening #2). The real
//! `ferrolb-speaker --static` in L2 mode on two nodes with the same key, node2's clocks
//! 60 s ahead (libfaketime, as `faketime -f +60s`): exactly one node answers ARP for each
//! VIP before the second speaker starts, while both run, and after the skewed one
//! restarts with its clock set right (60 s back) and wrong again — whichever starts
//! first. (Membership wire version 1 dropped every datagram more than 30 s off the
//! receiver's clock: both nodes settled alone and both answered for every VIP.)
//!
//! The same for ferrolb-bootstrap's apiserver VIP (it shares the speaker's membership).
//!
//! And the guard: a speaker whose only peer sends datagrams it cannot read (replays of
//! one sealed datagram, wire version 1 stamped 60 s ahead) claims nothing and says why.
//!
//! Needs `target/debug/ferrolb-speaker`, `target/debug/ferrolb-bootstrap` and libfaketime
//! (testbed/prereqs.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ferrolb_lab::addressing::{lan_v4 as v4, owner};
use ferrolb_lab::https::{HealthServer, TestCa};
use ferrolb_lab::netns;
use ferrolb_lab::process::{Proc, Spawn};
use ferrolb_lab::speaker::{Speaker, diag, faketime, write_membership_key, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use ferrolb_proto::membership::DEFAULT_PORT;
use ferrolb_proto::membership::auth::Sealer;
use ferrolb_proto::membership::claim::ALONE_WAIT;
use ferrolb_proto::membership::{MembershipKey, Timings};

const T: Duration = Duration::from_secs(30);
/// How long a steady phase is sampled: past the moment a node that settled alone claims
/// (join_timeout, then ALONE_WAIT), had the skew kept the nodes from reading each other.
const STEADY: Duration = Duration::from_secs(5);
/// The skewed node.
const SKEWED: usize = 2;

/// Two VIPs: node1 owns the first, node2 the second, when both are live.
fn vips() -> [IpAddr; 2] {
    [addressing::l2_vip_of(1, &[1, 2]), addressing::l2_vip_of(2, &[1, 2])]
}

fn static_file(vips: &[IpAddr]) -> String {
    yaml::l2_file(&[1, 2], vips)
}

/// Waits until each VIP is answered by `members`' elected owner alone, then samples
/// every VIP for [`STEADY`]: each sample answered by exactly that node.
fn exactly_the_owner(lab: &Lab, vips: &[IpAddr], members: &[usize], what: &str, speakers: &[&Speaker]) {
    exactly_one(lab, vips, members, what, &|| diag(lab, speakers));
}

/// [`exactly_the_owner`] with any diagnostics.
fn exactly_one(
    lab: &Lab,
    vips: &[IpAddr],
    members: &[usize],
    what: &str,
    diag: &(dyn Fn() -> String + Sync),
) {
    for v in vips {
        let want = addressing::node_macs(&[owner(*v, members)]);
        let r = wait::until_value(
            &format!("{what}: {v} answered by its owner alone"),
            T,
            || Ok(lab.arp_answers(*v, 1).unwrap()),
            |m| *m == want,
        );
        assert!(r.is_ok(), "{r:?}\n{}", diag());
    }
    let lone_claim = Timings::default().join_timeout + ALONE_WAIT;
    assert!(
        STEADY > lone_claim + wait::PAST_TIMER,
        "{STEADY:?} sampled, a lone node claims after {lone_claim:?}"
    );
    // One sampler per VIP, in parallel: an ARP sample takes about a second.
    let wrong: Vec<(IpAddr, usize, Vec<BTreeSet<String>>)> = std::thread::scope(|scope| {
        let samplers: Vec<_> = vips
            .iter()
            .map(|v| {
                scope.spawn(move || {
                    let want = addressing::node_macs(&[owner(*v, members)]);
                    let start = Instant::now();
                    let (mut samples, mut wrong) = (0, Vec::new());
                    while start.elapsed() < STEADY {
                        let seen = lab.arp_answers(*v, 1).unwrap();
                        samples += 1;
                        if seen != want {
                            wrong.push(seen);
                        }
                    }
                    (*v, samples, wrong)
                })
            })
            .collect();
        samplers.into_iter().map(|s| s.join().unwrap()).collect()
    });
    for (v, samples, bad) in &wrong {
        assert!(
            bad.is_empty(),
            "{what}: {v}: {} of {samples} samples not answered by node{} alone: {bad:?}\n{}",
            bad.len(),
            owner(*v, members),
            diag()
        );
        println!("{what}: {v}: {samples} ARP samples, each answered by node{} alone", owner(*v, members));
    }
}

/// Node `first` starts (alone it owns both VIPs), then the other; node2 runs 60 s ahead.
/// Then node2 restarts with its clock right (60 s back), then 60 s ahead again.
fn skewed_pair(first: usize) {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let vips = vips();
    let file = static_file(&vips);
    let ahead = faketime("+60s").unwrap();
    let start = |i: usize| {
        let env = if i == SKEWED { ahead.clone() } else { Vec::new() };
        // The shipped heartbeat defaults: one owner per VIP must hold in every sample, so
        // a false heartbeat suspicion fails this test too.
        Speaker::start_l2_env(&lab, i, &file, &key, &[], &env).unwrap()
    };
    let second = 3 - first;

    let s_first = start(first);
    exactly_the_owner(&lab, &vips, &[first], &format!("before: node{first} alone"), &[&s_first]);

    let s_second = start(second);
    let mut by_node = if first == 1 { [s_first, s_second] } else { [s_second, s_first] };
    let both = [1, 2];
    exactly_the_owner(&lab, &vips, &both, "during: both running, node2 60 s ahead", &by_node.each_ref());

    by_node[SKEWED - 1].set_env(&[]);
    by_node[SKEWED - 1].terminate(Duration::from_secs(15));
    by_node[SKEWED - 1].restart().unwrap();
    exactly_the_owner(
        &lab,
        &vips,
        &both,
        "after: node2 restarted with its clock 60 s back",
        &by_node.each_ref(),
    );

    by_node[SKEWED - 1].set_env(&ahead);
    by_node[SKEWED - 1].terminate(Duration::from_secs(15));
    by_node[SKEWED - 1].restart().unwrap();
    exactly_the_owner(&lab, &vips, &both, "after: node2 restarted 60 s ahead again", &by_node.each_ref());
}

#[test]
fn one_owner_per_vip_when_the_node_60s_ahead_starts_second() {
    skewed_pair(1);
}

#[test]
fn one_owner_per_vip_when_the_node_60s_ahead_starts_first() {
    skewed_pair(SKEWED);
}

/// Node1's speaker lists node2, whose membership address sends only datagrams node1
/// cannot read: replays of one datagram sealed with the cluster key, and wire version 1
/// stamped 60 s ahead. Node1 settles alone, yet answers ARP for no VIP (well past the
/// moment a lone node claims), logs why, and claims both once the datagrams stop.
#[test]
fn a_speaker_that_cannot_read_its_peer_claims_nothing() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let key_file = write_membership_key(&lab, "cluster-key").unwrap();
    let key = MembershipKey::parse(&std::fs::read_to_string(&key_file).unwrap()).unwrap();
    let vips = vips();
    let s1 = Speaker::start_l2(&lab, 1, &static_file(&vips), &key_file).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (stop, path) = (stop.clone(), lab.node(2).path());
        let mut sealer = Sealer::new(key.expose(), 7).unwrap();
        let captured = sealer.seal("node1", b"a datagram captured on the wire");
        std::thread::spawn(move || {
            netns::enter(&path).unwrap();
            let from = SocketAddr::new(addressing::node_v4(2).into(), DEFAULT_PORT);
            let to = SocketAddr::new(addressing::node_v4(1).into(), DEFAULT_PORT);
            let sock = UdpSocket::bind(from).unwrap();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let d = if sent.is_multiple_of(2) { captured.clone() } else { v1_datagram() };
                if sock.send_to(&d, to).is_err() {
                    break; // the lab is gone (the test failed)
                }
                sent += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            sent
        })
    };

    // Past join_timeout + ALONE_WAIT (twice), a lone node would have claimed both VIPs.
    let t = Instant::now();
    let mut samples = 0;
    while t.elapsed() < Timings::default().join_timeout + ALONE_WAIT * 2 {
        for v in vips {
            let seen = lab.arp_answers(v, 1).unwrap();
            assert!(seen.is_empty(), "{v} answered by {seen:?} from a lone view\n{}", diag(&lab, &[&s1]));
            samples += 1;
        }
    }
    s1.wait_log("membership: datagrams from other nodes arrive but none can be read", T).unwrap();
    println!("{samples} ARP samples in {:?}, none answered; the speaker logged its blindness", t.elapsed());
    let line = s1.logs().lines().find(|l| l.contains("none can be read")).unwrap_or_default().to_string();
    println!("{line}");
    assert!(line.contains("replayed") && line.contains("version"), "{line}");

    stop.store(true, Ordering::Relaxed);
    let sent = sender.join().unwrap();
    println!("{sent} unreadable datagrams sent");
    s1.wait_log("membership: no longer blind", T).unwrap();
    exactly_the_owner(&lab, &vips, &[1], "the datagrams stopped: node1 alone owns both", &[&s1]);
}

/// A datagram of membership wire version 1 (the previous release), stamped 60 s ahead.
fn v1_datagram() -> Vec<u8> {
    let ahead = std::time::SystemTime::now() + Duration::from_secs(60);
    let ms = ahead.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let mut d = b"FLBM\x01".to_vec();
    d.extend(9u64.to_be_bytes().into_iter().chain(1u64.to_be_bytes()).chain(ms.to_be_bytes()));
    d.extend_from_slice(&[0u8; 40]);
    d
}

/// One bootstrap member's checkpoint (L2, both lab nodes members, the shared key, the
/// local stand-in apiserver as health URL).
fn bootstrap_checkpoint(lab: &Lab, i: usize, ca: &TestCa, vip: IpAddr) -> std::path::PathBuf {
    let dir = lab.subdir(&format!("bootstrap{i}")).unwrap();
    ca.write(&dir).unwrap();
    let key = dir.join("membership.key");
    std::fs::write(&key, "lab-membership-key-0123456789abcdef\n").unwrap();
    let members = yaml::vip_members(2);
    let text = format!(
        "apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata: {{name: apiserver}}
spec:
  address: \"{vip}\"
  mode: L2
  interface: eth0
  membershipKeyFile: {key}
  members:
{members}  healthCheck:
    url: https://127.0.0.1:6443/readyz
    interval: 200ms
    timeout: 1s
    failureThreshold: 2
    caFile: {ca}
",
        key = key.display(),
        ca = dir.join("ca.crt").display()
    );
    let path = dir.join("checkpoint.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start_bootstrap(
    lab: &Lab,
    i: usize,
    checkpoint: &std::path::Path,
    env: &[(String, String)],
    run: usize,
) -> Proc {
    let bin = ferrolb_lab::binary::workspace("ferrolb-bootstrap", "debug").unwrap();
    let (bin, cp, node) =
        (bin.display().to_string(), checkpoint.display().to_string(), addressing::node_name(i));
    let argv = [bin.as_str(), "run", "--checkpoint", &cp, "--node-name", &node];
    let mut spec =
        Spawn::new(format!("bootstrap-node{i}-{run}"), &argv).env("RUST_LOG", "info,ferrolb_speaker=debug");
    for (k, v) in env {
        spec = spec.env(k, v);
    }
    lab.spawn(lab.node(i), spec).unwrap()
}

/// Members holding `vip` on their interface.
fn holders(lab: &Lab, vip: IpAddr) -> Vec<usize> {
    (1..=2)
        .filter(|i| {
            lab.node(*i).ip(&["-o", "addr", "show", "dev", "eth0"]).unwrap().contains(&format!(" {vip}/32"))
        })
        .collect()
}

/// The apiserver VIP with bootstrap members whose clocks are 60 s apart: node1 alone
/// holds it; node2 (60 s ahead) joins and exactly the elected member holds it and
/// answers ARP; node2 restarted with its clock set right (60 s back), then 60 s ahead
/// again: the same.
#[test]
fn bootstrap_members_60s_apart_hold_the_apiserver_vip_once() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let ca = TestCa::new().unwrap();
    let _apiservers: Vec<HealthServer> = (1..=2)
        .map(|i| {
            HealthServer::start(lab.node(i), "127.0.0.1:6443".parse().unwrap(), &ca, &["kubernetes"]).unwrap()
        })
        .collect();
    let vip = v4(200);
    let cps: Vec<_> = (1..=2).map(|i| bootstrap_checkpoint(&lab, i, &ca, vip)).collect();
    let ahead = faketime("+60s").unwrap();
    let procs = std::sync::Mutex::new(vec![start_bootstrap(&lab, 1, &cps[0], &[], 1)]);
    let diag = || {
        let p = procs.lock().unwrap();
        format!(
            "holders {:?}\n{}",
            holders(&lab, vip),
            p.iter().map(|p| p.logs()).collect::<Vec<_>>().join("\n---\n")
        )
    };
    let one_holder = |members: &[usize], what: &str| {
        let want = vec![owner(vip, members)];
        let r =
            wait::until_value(&format!("{what}: one holder"), T, || Ok(holders(&lab, vip)), |h| *h == want);
        assert!(r.is_ok(), "{r:?}\n{}", diag());
        exactly_one(&lab, &[vip], members, what, &diag);
        assert_eq!(holders(&lab, vip), want, "{what}\n{}", diag());
    };
    one_holder(&[1], "before: node1 alone");
    procs.lock().unwrap().push(start_bootstrap(&lab, 2, &cps[1], &ahead, 1));
    one_holder(&[1, 2], "during: both members, node2 60 s ahead");
    for (run, env) in [(2, Vec::new()), (3, ahead.clone())] {
        let mut old = procs.lock().unwrap().pop().unwrap();
        old.terminate(T);
        procs.lock().unwrap().push(start_bootstrap(&lab, 2, &cps[1], &env, run));
        let what = if env.is_empty() {
            "after: node2 restarted 60 s back"
        } else {
            "after: node2 restarted 60 s ahead"
        };
        one_holder(&[1, 2], what);
    }
}
