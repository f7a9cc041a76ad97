//! A membership-only partition heals on the wire (issue: production conditions, point 1).
//! The real `ferrolb-speaker --static` in L2 mode on node1 and node2, shipped defaults:
//! UDP between the two is dropped (nftables in node1's namespace) while the LAN still
//! carries ARP, so each declares the other dead and claims its addresses. Address
//! conflict detection must leave one MAC per address within a bounded time (printed;
//! the goal is well under 2 s), where before both answered until the cut ended; once
//! UDP flows again each address is its elected owner's alone.
//!
//! The same for bootstrap's apiserver VIP, which sits on the holder's interface (so the
//! kernel answers for it too): the member that yields takes it off its interface.
//!
//! Needs `target/debug/ferrolb-speaker`, `ferrolb-bootstrap` and `nft` (testbed/prereqs.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ferrolb_lab::addressing::{node_v4, owner};
use ferrolb_lab::bootstrap;
use ferrolb_lab::client::{self, ArpProbes, ArpReport};
use ferrolb_lab::https::{HealthServer, TestCa};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::process::Proc;
use ferrolb_lab::speaker::{Speaker, diag, write_membership_key, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use ferrolb_proto::l2::conflict;

const T: Duration = Duration::from_secs(30);
/// How long the membership port stays cut.
const CUT: Duration = Duration::from_secs(10);
/// Two MACs on one address for longer than this after the cut fails the test: the time
/// SWIM takes to declare the other side dead (about a second), a conflict detector's
/// probe of a freshly claimed address (`ferrolb_proto::l2::conflict::FRESH`) and its
/// confirmation.
const BOUND: Duration = Duration::from_secs(4);

/// How long the client keeps asking after the heal: past every timer of the conflict
/// detector that could still move an address (a yielded owner answers again
/// RELEASE_AFTER after the other's last answer; a winner reports a foreign device
/// FOREIGN_AFTER after a confirmed conflict).
const AFTER_HEAL: Duration = Duration::from_secs(6);
const _: () = assert!(
    AFTER_HEAL.as_millis()
        > conflict::FOREIGN_AFTER.as_millis()
            + conflict::FRESH.as_millis()
            + conflict::RELEASE_AFTER.as_millis()
);

/// Requests go every this often to each VIP.
const EVERY: Duration = Duration::from_millis(10);

fn nft(ns: &Netns, rule: &str) {
    let argv: Vec<&str> = std::iter::once("nft").chain(rule.split_whitespace()).collect();
    let out = ns.exec_output(&argv).unwrap();
    assert!(out.status.success(), "nft {rule}: {}", String::from_utf8_lossy(&out.stderr));
}

/// UDP between node1 and node2 dropped in node1's namespace (ARP still flows).
struct Cut<'a> {
    node1: &'a Netns,
}

impl<'a> Cut<'a> {
    fn make(lab: &'a Lab) -> Self {
        let n1 = lab.node(1);
        let peer = node_v4(2);
        nft(n1, "add table inet flbtest");
        nft(n1, "add chain inet flbtest in { type filter hook input priority 0 ; }");
        nft(n1, "add chain inet flbtest out { type filter hook output priority 0 ; }");
        nft(n1, &format!("add rule inet flbtest in ip saddr {peer} meta l4proto udp drop"));
        nft(n1, &format!("add rule inet flbtest out ip daddr {peer} meta l4proto udp drop"));
        Cut { node1: n1 }
    }

    fn heal(self) {
        nft(self.node1, "delete table inet flbtest");
    }
}

/// An ARP request every [`EVERY`] for each VIP from the client, from 500 ms before the
/// cut until [`AFTER_HEAL`] after the heal.
struct Probes {
    probes: Vec<ArpProbes>,
    started: Instant,
}

impl Probes {
    fn start(lab: &Lab, vips: &[Ipv4Addr]) -> Self {
        let senders: Vec<Ipv4Addr> = (150..200).map(|k| Ipv4Addr::new(192, 0, 2, k)).collect();
        let probes = vips
            .iter()
            .map(|v| ArpProbes::start(lab.client(), "eth0", *v, EVERY, &senders).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        Probes { probes, started: Instant::now() }
    }

    /// Holds `cut` for [`CUT`], heals it and stops: the reports and when the cut and the
    /// heal happened, from the probes' start.
    fn through(self, cut: Cut<'_>) -> (Vec<ArpReport>, Duration, Duration) {
        let cut_at = Duration::from_millis(500);
        std::thread::sleep(CUT.saturating_sub(self.started.elapsed()));
        cut.heal();
        let healed_at = self.started.elapsed() + Duration::from_millis(500);
        std::thread::sleep(AFTER_HEAL);
        (self.probes.into_iter().map(|p| p.stop().unwrap()).collect(), cut_at, healed_at)
    }
}

/// Prints what the client saw of `v` and fails past [`BOUND`] of two MACs, on a request
/// unanswered after the heal, or unless `owner` alone answers after it.
fn judge(v: Ipv4Addr, r: &ArpReport, cut_at: Duration, healed_at: Duration, owner: usize, logs: &str) {
    let during: Vec<Duration> =
        r.answered_twice_at.iter().copied().filter(|t| *t >= cut_at && *t < healed_at).collect();
    let window = match (during.first(), during.last()) {
        (Some(a), Some(b)) => *b - *a + EVERY,
        _ => Duration::ZERO,
    };
    let after = r.answered_twice_at.iter().filter(|t| **t >= healed_at).count();
    println!(
        "{v}: {} of {} requests answered by two MACs during the {CUT:?} cut, within {window:?} \
         (goal well under 2 s); {after} after the heal; unanswered {}; owners {:?}",
        during.len(),
        r.sent,
        r.unanswered.len(),
        r.owners
    );
    assert!(
        during.last().is_none_or(|t| *t - cut_at < BOUND),
        "{v}: two MACs answered {:?} after the cut began: {r:?}\n{logs}",
        during.last().map(|t| *t - cut_at)
    );
    // The heal hands each address back make before break.
    let lost = r.unanswered.iter().filter(|t| **t >= healed_at).count();
    assert_eq!(lost, 0, "{v}: {lost} requests unanswered after the heal: {r:?}\n{logs}");
    assert_eq!(
        r.owners.last(),
        Some(&addressing::node_mac(owner)),
        "{v}: its elected owner alone answers after the heal: {r:?}\n{logs}"
    );
}

/// Two VIPs: node1 owns the first, node2 the second, when both are live.
fn vips() -> [Ipv4Addr; 2] {
    [1, 2].map(|n| match addressing::l2_vip_of(n, &[1, 2]) {
        IpAddr::V4(a) => a,
        IpAddr::V6(a) => panic!("{a} is not IPv4"),
    })
}

#[test]
fn a_membership_only_partition_leaves_one_mac_per_address() {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let vips = vips();
    let all: Vec<IpAddr> = vips.iter().map(|v| IpAddr::V4(*v)).collect();
    let file = yaml::l2_file(&[1, 2], &all);
    let speakers: Vec<Speaker> = (1..=2).map(|i| Speaker::start_l2(&lab, i, &file, &key).unwrap()).collect();
    let diag = || diag(&lab, &speakers.iter().collect::<Vec<_>>());
    for v in &all {
        let want = BTreeSet::from([addressing::node_mac(owner(*v, &[1, 2]))]);
        let r = wait::until_value(
            &format!("{v} answered by its owner alone"),
            T,
            || Ok(lab.arp_answers(*v, 1).unwrap()),
            |m| *m == want,
        );
        assert!(r.is_ok(), "{r:?}\n{}", diag());
    }

    let probes = Probes::start(&lab, &vips);
    let cut = Cut::make(&lab);
    for s in &speakers {
        s.wait_log("membership changed", T).unwrap();
    }
    let (reports, cut_at, healed_at) = probes.through(cut);
    let logs = diag();
    for (v, r) in vips.iter().zip(&reports) {
        judge(*v, r, cut_at, healed_at, owner(IpAddr::V4(*v), &[1, 2]), &logs);
    }
    assert!(logs.contains("L2 address conflict"), "the speakers saw no conflict: was the cut made?\n{logs}");
}

/// Bootstrap's apiserver VIP, two healthy members: the same cut leaves one MAC within the
/// bound. The member that yields takes the VIP off its interface (else its kernel goes on
/// answering), and after the heal the elected member alone holds it.
///
/// Twice: with a VIP whose elected member also outranks the other on the wire (the
/// other yields during the cut), and with one whose elected member does not (the
/// elected one yields, and after the heal takes the VIP back from the other).
#[test]
fn a_membership_only_partition_leaves_one_mac_on_the_apiserver_vip() {
    for elected_outranks in [true, false] {
        let vip = (200..=250)
            .map(|k| Ipv4Addr::new(192, 0, 2, k))
            .find(|v| {
                let elected = owner(IpAddr::V4(*v), &[1, 2]);
                let rank = |i: usize| conflict::rank(IpAddr::V4(*v), mac_bytes(&addressing::node_mac(i)));
                (rank(elected) > rank(3 - elected)) == elected_outranks
            })
            .unwrap();
        println!("elected member outranks the other on the wire: {elected_outranks}");
        apiserver_vip_through_a_cut(vip);
    }
}

fn mac_bytes(mac: &str) -> [u8; 6] {
    let b: Vec<u8> = mac.split(':').map(|x| u8::from_str_radix(x, 16).unwrap()).collect();
    b.try_into().unwrap()
}

fn apiserver_vip_through_a_cut(vip: Ipv4Addr) {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let ca = TestCa::new().unwrap();
    let _health: Vec<HealthServer> = (1..=2).map(|i| bootstrap::apiserver(&lab, i, &ca).unwrap()).collect();
    let cps = bootstrap::l2_checkpoints(&lab, &ca, &vip.to_string(), bootstrap::READYZ).unwrap();
    let procs: Vec<Proc> = (1..=2).map(|i| bootstrap::start(&lab, i, &cps[i - 1], &[], 1).unwrap()).collect();
    let logs = || procs.iter().map(|p| p.logs()).collect::<Vec<_>>().join("\n");
    let elected = owner(IpAddr::V4(vip), &[1, 2]);
    let on_interface = |i: usize| {
        lab.node(i).ip(&["-o", "addr", "show", "dev", "eth0"]).unwrap().contains(&format!(" {vip}/32"))
    };
    let holders = || (1..=2).filter(|i| on_interface(*i)).collect::<Vec<_>>();
    let r =
        wait::until_value("the elected member alone holds the VIP", T, || Ok(holders()), |h| *h == [elected]);
    assert!(r.is_ok(), "{r:?}\n{}", logs());
    let want = BTreeSet::from([addressing::node_mac(elected)]);
    let r = wait::until_value(
        "answered by it alone",
        T,
        || Ok(lab.arp_answers(IpAddr::V4(vip), 1).unwrap()),
        |m| *m == want,
    );
    assert!(r.is_ok(), "{r:?}\n{}", logs());

    let probes = Probes::start(&lab, &[vip]);
    let cut = Cut::make(&lab);
    // The other member takes the VIP once it declares the elected one dead.
    let other = 3 - elected;
    let r = wait::until("the other member takes the VIP", T, || {
        Ok(procs[other - 1].logs().contains("took the VIP").then_some(()))
    });
    assert!(r.is_ok(), "{r:?}\n{}", logs());
    let (reports, cut_at, healed_at) = probes.through(cut);
    let logs = logs();
    judge(vip, &reports[0], cut_at, healed_at, elected, &logs);
    assert!(logs.contains("L2 address conflict"), "the members saw no conflict: was the cut made?\n{logs}");
    assert!(
        logs.contains("address conflict)"),
        "the member that yielded kept the VIP on its interface\n{logs}"
    );
    assert_eq!(holders(), [elected], "after the heal the elected member alone holds the VIP\n{logs}");
    // Counted where operators look (bootstrap's /metrics, the speaker's names).
    for result in ["won", "yielded"] {
        let series = format!("ferrolb_l2_address_conflicts_total{{result=\"{result}\"}}");
        let total: f64 = (1..=2).map(|i| sample(&lab, i, &series)).sum();
        assert!(total >= 1.0, "{series}: {total} on the two members\n{logs}");
    }
}

/// A sample of bootstrap's metrics on node `i` (0 when absent).
fn sample(lab: &Lab, i: usize, series: &str) -> f64 {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 7949));
    let text = client::http_get(lab.node(i), addr, "/metrics", Duration::from_secs(2)).unwrap();
    client::metric_sample(&text, series).unwrap_or(0.0)
}
