//! Active-active L2 in the real kernel: the buckets of
//! [`ferrolb_proto::l2::active_active`] rendered as nftables tables, loaded by real
//! `nft` into three nodes, and 1 000 TCP connections from behind the router r1 to one
//! address: they split over the nodes by bucket, survive a node's death on the others,
//! and survive its return (make before break), on IPv4 and IPv6.
//!
//! The router reaches the address through its virtual MAC (a permanent neighbour
//! entry here: the answering speaker is not part of this test), the lab's switch floods
//! frames sent to it to every node, as a switch that never learns it does.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ferrolb_lab::client::{EchoServer, Flow, flow_split, open_flows};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::{Lab, LabConfig, addressing};
use ferrolb_proto::l2::active_active::{Input, Spread, nft, virtual_mac};
use ferrolb_proto::l2::arp::mac_to_string;

const PORT: u16 = 8080;
const GRACE: Duration = Duration::from_secs(600);
const TIMEOUT: Duration = Duration::from_secs(5);

/// One node's filter: its spread, loaded into its namespace's kernel.
struct Node {
    name: String,
    spread: Spread,
}

impl Node {
    /// A speaker that has run for longer than the grace: its buckets are settled.
    fn settled(name: &str, vip: IpAddr, members: &[&str], lab: &Lab, ns: &Netns) -> Node {
        let t0 = Instant::now();
        let mut n = Node { name: name.into(), spread: Spread::new(name, GRACE) };
        n.spread.handle(t0, desired(vip, members));
        n.spread.handle(t0 + GRACE, Input::Timeout);
        n.load(lab, ns);
        n
    }

    /// Loads the rendered table with real `nft`.
    fn load(&self, lab: &Lab, ns: &Netns) {
        let text = nft::ruleset(&self.spread, &BTreeSet::from(["eth0".to_string()]));
        let path = lab.dir().join(format!("{}.nft", self.name));
        std::fs::write(&path, &text).unwrap();
        if let Err(e) = ns.exec(&["nft", "-f", path.to_str().unwrap()]) {
            panic!("nft refused the table of {}: {e}\n{text}", self.name);
        }
    }

    fn members(&mut self, vip: IpAddr, members: &[&str], lab: &Lab, ns: &Netns) {
        self.spread.handle(Instant::now(), desired(vip, members));
        self.load(lab, ns);
    }
}

fn desired(vip: IpAddr, members: &[&str]) -> Input {
    Input::Desired(BTreeMap::from([(vip, members.iter().map(|m| m.to_string()).collect())]))
}

/// The lab: three nodes serving `vip` on `lo` through an echo server, r1 sending the
/// address's frames to its virtual MAC, the client routed to it through r1.
fn lab_for(vip: IpAddr) -> (Lab, Vec<EchoServer>) {
    let lab = Lab::up(LabConfig::nodes(3)).unwrap();
    let vmac = mac_to_string(&virtual_mac(vip));
    let mut servers = Vec::new();
    for (i, ns) in lab.nodes().iter().enumerate() {
        lab.add_vip_on_lo(ns, vip).unwrap();
        // What the speaker does on a real NIC: accept the virtual MAC without promiscuous mode.
        ns.exec(&["bridge", "fdb", "add", &vmac, "dev", "eth0", "self", "permanent"]).unwrap();
        servers
            .push(EchoServer::start(ns, SocketAddr::new(vip, PORT), &addressing::node_name(i + 1)).unwrap());
    }
    let (fam, len, via) = if vip.is_ipv4() {
        ("-4", 32, IpAddr::from(addressing::ROUTER_LINK_V4))
    } else {
        ("-6", 128, IpAddr::from(addressing::ROUTER_LINK_V6))
    };
    lab.client().ip(&[fam, "route", "add", &format!("{vip}/{len}"), "via", &via.to_string()]).unwrap();
    lab.router()
        .ip(&["neigh", "replace", &vip.to_string(), "lladdr", &vmac, "dev", "eth0", "nud", "permanent"])
        .unwrap();
    (lab, servers)
}

fn client_source(vip: IpAddr) -> IpAddr {
    if vip.is_ipv4() { addressing::CLIENT_LINK_V4.into() } else { addressing::CLIENT_LINK_V6.into() }
}

fn open(lab: &Lab, vip: IpAddr, ports: std::ops::Range<u16>) -> Vec<Flow> {
    open_flows(lab.client(), client_source(vip), ports, SocketAddr::new(vip, PORT), TIMEOUT).unwrap()
}

/// Flows held by `nodes` that no longer echo, by node (checked all at once).
fn broken(flows: &mut [Flow], nodes: &[&str]) -> BTreeMap<String, usize> {
    let failed: Vec<String> = std::thread::scope(|scope| {
        let checks: Vec<_> = flows
            .iter_mut()
            .filter(|f| f.node.as_deref().is_some_and(|n| nodes.contains(&n)))
            .map(|f| scope.spawn(move || (!f.echoes(TIMEOUT)).then(|| f.node.clone().unwrap())))
            .collect();
        checks.into_iter().filter_map(|c| c.join().ok().flatten()).collect()
    });
    let mut m = BTreeMap::new();
    for n in failed {
        *m.entry(n).or_insert(0) += 1;
    }
    m
}

/// The packets counted by the rule of `chain` (in `inet ferrolb`) whose verdict is `verdict`.
fn packets(ns: &Netns, chain: &str, verdict: &str) -> u64 {
    let text = ns.exec(&["nft", "list", "chain", "inet", nft::TABLE, chain]).unwrap();
    text.lines()
        .filter(|l| l.trim_end().ends_with(verdict))
        .filter_map(|l| l.split_whitespace().skip_while(|w| *w != "packets").nth(1)?.parse::<u64>().ok())
        .sum()
}

fn assert_even(split: &BTreeMap<String, usize>, nodes: &[&str], total: usize, what: &str) {
    println!("{what}: {split:?}");
    assert_eq!(split.get("failed"), None, "{what}: connections failed: {split:?}");
    let share = total as f64 / nodes.len() as f64;
    for n in nodes {
        let got = split.get(*n).copied().unwrap_or(0) as f64;
        assert!(
            (got - share).abs() <= 0.15 * share,
            "{what}: {n} took {got} of {total}, share {share:.0}: {split:?}"
        );
    }
    assert_eq!(split.values().sum::<usize>(), total, "{what}: {split:?}");
}

fn death_and_return(vip: IpAddr) {
    let (lab, _servers) = lab_for(vip);
    let all = ["node1", "node2", "node3"];
    let mut nodes: Vec<Node> =
        all.iter().zip(lab.nodes()).map(|(name, ns)| Node::settled(name, vip, &all, &lab, ns)).collect();

    // 1 000 connections from 1 000 source ports: every node takes its third.
    let mut first = open(&lab, vip, 20000..21000);
    assert_even(&flow_split(&first), &all, 1000, "1 000 connections over three nodes");
    for ns in lab.nodes() {
        let dropped = packets(ns, &format!("n_{}", vip.to_string().replace(['.', ':'], "_")), "drop");
        assert!(dropped > 0, "{}: no packet dropped as another node's", ns.name());
    }

    // node2 dies: its switch port is cut; the survivors take its buckets.
    let ns2 = &lab.nodes()[1];
    lab.switch().ip(&["link", "set", "n2", "down"]).unwrap();
    for i in [0, 2] {
        nodes[i].members(vip, &["node1", "node3"], &lab, &lab.nodes()[i]);
    }
    let lost = broken(&mut first, &["node1", "node3"]);
    assert_eq!(lost, BTreeMap::new(), "connections held by the survivors broke when node2 died");
    let mut during = open(&lab, vip, 30000..30300);
    assert_even(&flow_split(&during), &["node1", "node3"], 300, "new connections while node2 is away");

    // node2 returns, its speaker restarted (a fresh spread); the others hand back its
    // buckets and keep, while the grace lasts, the connections they took meanwhile.
    lab.switch().ip(&["link", "set", "n2", "up"]).unwrap();
    let t = Instant::now();
    nodes[1].spread = Spread::new("node2", GRACE);
    nodes[1].spread.handle(t, desired(vip, &all));
    nodes[1].load(&lab, ns2);
    for i in [0, 2] {
        nodes[i].members(vip, &all, &lab, &lab.nodes()[i]);
    }
    let mut held = broken(&mut during, &["node1", "node3"]);
    held.append(&mut broken(&mut first, &["node1", "node3"]));
    assert_eq!(held, BTreeMap::new(), "connections of node1 and node3 broke when node2 returned");
    // They were kept by the grace, not by luck: node1 and node3 kept established packets
    // of the buckets they hand back, node2 dropped them as another node's.
    let kept: u64 = [0, 2].iter().map(|&i| packets(&lab.nodes()[i], "draining", "accept")).sum();
    assert!(kept > 0, "no established packet went through the draining buckets");
    assert!(packets(ns2, "acquiring", "drop") > 0, "node2 dropped no packet of another node's flow");
    let after = open(&lab, vip, 40000..41000);
    assert_even(&flow_split(&after), &all, 1000, "1 000 new connections after node2 returned");
}

#[test]
fn ipv4_flows_split_by_bucket_and_survive_a_death_and_a_return() {
    death_and_return(addressing::lan_v4(60));
}

#[test]
fn ipv6_flows_split_by_bucket_and_survive_a_death_and_a_return() {
    death_and_return(addressing::lan_v6(0x60));
}
