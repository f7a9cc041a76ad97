//! ferrolb-bootstrap in lab nodes: the built binary runs in each node namespace with a
//! fake local apiserver health endpoint (HTTPS on 127.0.0.1:6443, test CA) that the
//! test switches between healthy and unhealthy.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ferrolb_testbed::client::{self, ProbeStream};
use ferrolb_testbed::https::{HealthServer, TestCa};
use ferrolb_testbed::process::{Proc, Spawn};
use ferrolb_testbed::routers::exabgp::Record;
use ferrolb_testbed::routers::{self, Bird, ExaBgp, ExaNeighbor, Router, RouterSpec};
use ferrolb_testbed::{Lab, LabConfig, plan, wait};
use nix::sys::signal::Signal;

const T: Duration = Duration::from_secs(30);
const BGP_VIP: &str = "203.0.113.100";
const L2_VIP: &str = "192.0.2.200";

/// The binary cargo built next to this test (`cargo test --workspace` builds it).
fn binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("ferrolb-bootstrap");
    assert!(bin.exists(), "{} missing: run `cargo build -p ferrolb-bootstrap` first", bin.display());
    bin
}

/// One node's files: the test CA and a checkpoint.
fn checkpoint(lab: &Lab, node: usize, ca: &TestCa, spec_extra: &str, objects: &str) -> PathBuf {
    let dir = lab.subdir(&format!("bootstrap{node}")).unwrap();
    ca.write(&dir).unwrap();
    let members: String = (1..=lab.nodes().len())
        .map(|i| format!("    - {{name: {}, address: {}}}\n", plan::node_name(i), plan::node_v4(i)))
        .collect();
    let text = format!(
        "apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata: {{name: apiserver}}
spec:
{spec_extra}  members:
{members}  healthCheck:
    url: https://127.0.0.1:6443/readyz
    interval: 200ms
    timeout: 1s
    failureThreshold: 2
    caFile: {ca}
{objects}",
        ca = dir.join("ca.crt").display()
    );
    let path = dir.join("checkpoint.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn bgp_checkpoint(lab: &Lab, node: usize, ca: &TestCa) -> PathBuf {
    checkpoint(
        lab,
        node,
        ca,
        &format!(
            "  address: {BGP_VIP}\n  mode: BGP\n  bgp: {{peers: [router-a], communities: [\"64513:42\"]}}\n"
        ),
        &format!(
            "---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {{name: router-a}}
spec: {{myASN: {}, peerASN: {}, peerAddress: {}, sourceAddress: {}, connectTime: 1s}}
",
            plan::NODE_ASN,
            plan::ROUTER_ASN,
            plan::ROUTER_V4,
            plan::node_v4(node)
        ),
    )
}

/// Starts the fake apiserver health endpoint of node `i` (healthy).
fn apiserver(lab: &Lab, i: usize, ca: &TestCa) -> HealthServer {
    // Like kubeadm's serving certificate: no 127.0.0.1 among the names.
    HealthServer::start(lab.node(i), "127.0.0.1:6443".parse().unwrap(), ca, &["kubernetes", "10.96.0.1"])
        .unwrap()
}

fn start(lab: &Lab, i: usize, checkpoint: &Path, extra: &[&str], run: usize) -> Proc {
    let bin = binary();
    let cp = checkpoint.display().to_string();
    let node = plan::node_name(i);
    let mut argv = vec![bin.to_str().unwrap(), "run", "--checkpoint", &cp, "--node-name", &node];
    argv.extend_from_slice(extra);
    lab.spawn(
        lab.node(i),
        Spawn::new(format!("bootstrap-node{i}-{run}"), &argv).env("RUST_LOG", "info,ferrolb_speaker=debug"),
    )
    .unwrap()
}

fn sigterm_exits_zero(p: &mut Proc) {
    p.signal(Signal::SIGTERM);
    let status = p.wait_exit(T).expect("ferrolb-bootstrap did not stop on SIGTERM");
    assert!(status.success(), "exit status {status:?}; log:\n{}", p.logs());
}

/// Two healthy members: the router learns the VIP /32 from both (ECMP in its kernel)
/// and the client reaches it; an unhealthy one is taken out of the ECMP set.
#[test]
fn bgp_two_healthy_members_give_ecmp_at_the_router() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let bird = Bird::start(&lab, &RouterSpec::default()).unwrap();
    let ca = TestCa::new().unwrap();
    let health: Vec<HealthServer> = (1..=2).map(|i| apiserver(&lab, i, &ca)).collect();
    let _procs: Vec<Proc> =
        (1..=2).map(|i| start(&lab, i, &bgp_checkpoint(&lab, i, &ca), &["--drain-delay", "1s"], 1)).collect();
    let both: Vec<IpAddr> = (1..=2).map(|i| plan::node_v4(i).into()).collect();
    let prefix = format!("{BGP_VIP}/32");
    let paths = routers::wait_rib(&bird, &prefix, &both, T).unwrap();
    assert!(paths.iter().all(|p| p.communities == vec!["64513:42".to_string()]), "{paths:?}");
    routers::wait_kernel_route(bird.netns(), &prefix, &both, T).unwrap();
    // The VIP sits on each node's lo, so the client's pings are answered through r1.
    let vip: IpAddr = BGP_VIP.parse().unwrap();
    let probe = ProbeStream::start(lab.client(), vip, Duration::from_millis(10)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let r = probe.stop(Duration::from_millis(200));
    assert!(r.sent >= 10 && r.lost() == 0, "client → {vip}: {r:?}");

    health[0].set_healthy(false);
    routers::wait_kernel_route(bird.netns(), &prefix, &both[1..], T).unwrap();
    health[0].set_healthy(true);
    routers::wait_kernel_route(bird.netns(), &prefix, &both, T).unwrap();
}

fn vip_updates(rec: &ExaBgp, prefix: &str) -> Vec<(bool, Vec<String>)> {
    rec.records()
        .into_iter()
        .filter_map(|r| match r {
            Record::Update(u) if u.announced.iter().any(|(p, _)| p == prefix) => {
                Some((true, u.attrs.communities))
            }
            Record::Update(u) if u.withdrawn.iter().any(|p| p == prefix) => Some((false, Vec::new())),
            _ => None,
        })
        .collect()
}

/// After `from` updates: a GRACEFUL_SHUTDOWN announcement, then a withdrawal.
fn wait_drain(rec: &ExaBgp, prefix: &str, from: usize, what: &str) -> usize {
    let gshut = "65535:0".to_string();
    wait::until(what, T, || {
        let u = vip_updates(rec, prefix);
        let tail = u.get(from..).unwrap_or_default();
        let g = tail.iter().position(|(ann, c)| *ann && c.contains(&gshut));
        let w = tail.iter().position(|(ann, _)| !*ann);
        Ok(match (g, w) {
            (Some(g), Some(w)) if g < w => Some(from + w + 1),
            (None, Some(_)) => {
                panic!("{what}: withdrawn without a GRACEFUL_SHUTDOWN announcement first: {tail:?}")
            }
            _ => None,
        })
    })
    .unwrap()
}

/// Waits for an announcement without GRACEFUL_SHUTDOWN after `from`.
fn wait_announced(rec: &ExaBgp, prefix: &str, from: usize, what: &str) -> usize {
    wait::until(what, T, || {
        let u = vip_updates(rec, prefix);
        let tail = u.get(from..).unwrap_or_default();
        Ok(tail.iter().position(|(ann, c)| *ann && !c.contains(&"65535:0".to_string())).map(|i| from + i + 1))
    })
    .unwrap()
}

/// Unhealthy → GRACEFUL_SHUTDOWN before the withdrawal; healthy → announced again;
/// SIGTERM drains the same way and exits 0; a restart with a corrupt checkpoint and a
/// valid FILE.prev announces again.
#[test]
fn bgp_unhealthy_member_drains_with_graceful_shutdown_then_withdraws() {
    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let mut n = ExaNeighbor::to_router(plan::ROUTER_V4.into(), plan::node_v4(1).into(), plan::ROUTER_V4);
    n.passive = true;
    (n.local_as, n.peer_as) = (plan::ROUTER_ASN, plan::NODE_ASN);
    let rec = ExaBgp::start(&lab, lab.router(), "recorder", &[n]).unwrap();
    let ca = TestCa::new().unwrap();
    let health = apiserver(&lab, 1, &ca);
    let cp = bgp_checkpoint(&lab, 1, &ca);
    let args = ["--drain-delay", "1s", "--shutdown-drain", "500ms", "--log-format", "json"];
    let mut p = start(&lab, 1, &cp, &args, 1);
    let prefix = format!("{BGP_VIP}/32");

    let seen = wait_announced(&rec, &prefix, 0, "the VIP announced");
    health.set_healthy(false);
    let seen =
        wait_drain(&rec, &prefix, seen, "GRACEFUL_SHUTDOWN then withdrawal after the apiserver failed");
    health.set_healthy(true);
    let seen = wait_announced(&rec, &prefix, seen, "the VIP announced again once healthy");

    sigterm_exits_zero(&mut p);
    let seen = wait_drain(&rec, &prefix, seen, "GRACEFUL_SHUTDOWN then withdrawal on SIGTERM");
    assert!(p.logs().contains("\"level\":\"INFO\""), "--log-format json: {}", p.logs());
    let on_lo = lab.node(1).ip(&["-o", "addr", "show", "dev", "lo"]).unwrap();
    assert!(!on_lo.contains(BGP_VIP), "the VIP stayed on lo after shutdown: {on_lo}");

    // Restart with a corrupt checkpoint and a valid previous one.
    let prev = PathBuf::from(format!("{}.prev", cp.display()));
    std::fs::copy(&cp, &prev).unwrap();
    std::fs::write(&cp, "apiVersion: ferrolb.io/v1alpha1\nkind: ControlPlaneVIP\nspec: [not, a, spec\n")
        .unwrap();
    let p2 = start(&lab, 1, &cp, &args, 2);
    wait_announced(&rec, &prefix, seen, "the VIP announced from FILE.prev");
    assert!(p2.logs().contains("checkpoint.yaml.prev"), "{}", p2.logs());
}

/// A checkpoint that is invalid with no FILE.prev: exit non-zero with one line naming
/// the file, the document and the field.
#[test]
fn invalid_checkpoint_without_prev_exits_with_one_clear_line() {
    let dir = tempfile_dir("invalid");
    let cp = dir.join("checkpoint.yaml");
    std::fs::write(
        &cp,
        "apiVersion: ferrolb.io/v1alpha1\nkind: ControlPlaneVIP\nmetadata: {name: a}\nspec: {address: 192.0.2.200, mode: L2, members: [{name: node1, address: 192.0.2.11}], healthCheck: {interval: soon}}\n",
    )
    .unwrap();
    let out = std::process::Command::new(binary())
        .args(["run", "--checkpoint", cp.to_str().unwrap(), "--node-name", "node1"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("checkpoint.yaml") && lines[0].contains("document 1"), "{err}");
    assert!(lines[0].contains("spec.healthCheck.interval"), "{err}");
}

fn tempfile_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrolb-bootstrap-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn holds(lab: &Lab, i: usize) -> bool {
    lab.node(i).ip(&["-o", "addr", "show", "dev", "eth0"]).unwrap().contains(&format!(" {L2_VIP}/32"))
}

fn holders(lab: &Lab) -> Vec<usize> {
    (1..=lab.nodes().len()).filter(|i| holds(lab, *i)).collect()
}

/// L2: the elected owner puts the VIP on eth0 and the client reaches it; the owner
/// turning unhealthy moves it to the healthy member; with nobody healthy the holder
/// keeps it; SIGTERM releases it. Membership is the test implementation (a file of
/// live, healthy members per node) until SWIM membership is wired in.
#[test]
fn l2_owner_holds_the_vip_and_it_moves_when_the_owner_turns_unhealthy() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let ca = TestCa::new().unwrap();
    let health: Vec<HealthServer> = (1..=2).map(|i| apiserver(&lab, i, &ca)).collect();
    let mut procs = Vec::new();
    let mut members_files = Vec::new();
    for i in 1..=2 {
        let cp =
            checkpoint(&lab, i, &ca, &format!("  address: {L2_VIP}\n  mode: L2\n  interface: eth0\n"), "");
        let mf = cp.with_file_name("members");
        std::fs::write(&mf, "node1\nnode2\n").unwrap();
        let mfs = mf.display().to_string();
        procs.push(start(&lab, i, &cp, &["--test-membership-file", &mfs], 1));
        members_files.push(mf);
    }
    let owner = wait::until_value("one owner", T, || Ok(holders(&lab)), |h| h.len() == 1).unwrap()[0];
    let other = 3 - owner;
    let vip: IpAddr = L2_VIP.parse().unwrap();
    let probe = ProbeStream::start(lab.client(), vip, Duration::from_millis(10)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let r = probe.stop(Duration::from_millis(200));
    assert!(r.sent >= 10 && r.lost() == 0, "client → {vip}: {r:?}");
    client::wait_neighbour_mac(lab.client(), "eth0", vip, &plan::node_mac(owner), T).unwrap();

    // The owner's apiserver fails; membership tells the other member.
    health[owner - 1].set_healthy(false);
    std::fs::write(&members_files[other - 1], plan::node_name(other)).unwrap();
    wait::until_value("the VIP moved", T, || Ok(holders(&lab)), |h| h == &vec![other]).unwrap();
    // No gratuitous ARP yet (the sender is behind a trait, not wired): forget the old MAC.
    let _ = lab.client().ip(&["neigh", "flush", "dev", "eth0", "to", L2_VIP]);
    let probe = ProbeStream::start(lab.client(), vip, Duration::from_millis(10)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let r = probe.stop(Duration::from_millis(200));
    assert!(r.received > 0, "client → {vip} after the move: {r:?}");
    client::wait_neighbour_mac(lab.client(), "eth0", vip, &plan::node_mac(other), T).unwrap();

    // Nobody healthy: the current holder keeps the VIP.
    health[other - 1].set_healthy(false);
    std::fs::write(&members_files[other - 1], "").unwrap();
    std::fs::write(&members_files[owner - 1], "").unwrap();
    wait::until("the new owner logged its apiserver unhealthy", T, || {
        Ok(procs[other - 1].logs().contains("local apiserver is unhealthy").then_some(()))
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(holders(&lab), vec![other], "with no healthy member the holder must keep the VIP");

    // SIGTERM: exit 0 and release the address (only ours: it carries our mark).
    sigterm_exits_zero(&mut procs[other - 1]);
    assert!(holders(&lab).is_empty());
    sigterm_exits_zero(&mut procs[owner - 1]);
}
