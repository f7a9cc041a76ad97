//! Active-active L2 in the real kernel: the buckets of
//! [`ferrolb_proto::l2::active_active`] built as nftables tables, loaded over netlink
//! (as the speaker loads them) into three nodes, and 1 000 TCP connections from behind
//! the router r1 to one address (and, with speakers, 1 000 more from two on-link
//! clients): they split over the nodes by bucket, survive a node's death on the others,
//! and survive its return (make before break), on IPv4 and IPv6.
//!
//! The router reaches the address through its virtual MAC (a permanent neighbour
//! entry here: the answering speaker is not part of this test), the lab's switch floods
//! frames sent to it to every node, as a switch that never learns it does.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use ferrolb_lab::client::{self, EchoServer, Flow, flow_split, open_flows};
use ferrolb_lab::netns::Netns;
use ferrolb_lab::speaker::{Speaker, write_membership_key, yaml};
use ferrolb_lab::{Lab, LabConfig, addressing, wait};
use ferrolb_proto::l2::active_active::{Input, Spread, nft, virtual_mac};
use ferrolb_proto::l2::arp::mac_to_string;
use ferrolb_proto::nftables::{Family, socket};

const PORT: u16 = 8080;
const GRACE: Duration = Duration::from_secs(600);
const TIMEOUT: Duration = Duration::from_secs(5);
const METRICS_PORT: u16 = 9472;

/// One node's filter: its spread, loaded into its namespace's kernel.
struct Node {
    name: String,
    spread: Spread,
}

impl Node {
    /// A speaker that has run for longer than the grace: its buckets are settled.
    fn settled(name: &str, vip: IpAddr, members: &[&str], ns: &Netns) -> Node {
        let t0 = Instant::now();
        let mut n = Node { name: name.into(), spread: Spread::new(name, GRACE) };
        n.spread.handle(t0, desired(vip, members));
        n.spread.handle(t0 + GRACE, Input::Timeout);
        n.load(ns);
        n
    }

    /// Loads its tables into the namespace's kernel.
    fn load(&self, ns: &Netns) {
        let batch = nft::ruleset(&self.spread, &BTreeSet::from(["eth0".to_string()]));
        if let Err(e) = ns.run(move || socket::load(&batch)).unwrap() {
            panic!("nf_tables refused the tables of {}: {e}", self.name);
        }
    }

    fn members(&mut self, vip: IpAddr, members: &[&str], ns: &Netns) {
        self.spread.handle(Instant::now(), desired(vip, members));
        self.load(ns);
    }
}

fn desired(vip: IpAddr, members: &[&str]) -> Input {
    Input::Desired(BTreeMap::from([(vip, members.iter().map(|m| m.to_string()).collect())]))
}

/// The lab: three nodes serving `vip` on `lo` through an echo server, the client routed
/// to it through r1, two more clients on the LAN. Without speakers (`by_hand`), r1 is told
/// the virtual MAC and the nodes' NICs accept it, as the speakers do.
fn lab_for(vip: IpAddr, by_hand: bool) -> (Lab, Vec<EchoServer>) {
    let lab = Lab::up(LabConfig::nodes(3).lan_clients(2)).unwrap();
    let vmac = mac_to_string(&virtual_mac(vip));
    let mut servers = Vec::new();
    for (i, ns) in lab.nodes().iter().enumerate() {
        lab.add_vip_on_lo(ns, vip).unwrap();
        if by_hand {
            ns.exec(&["bridge", "fdb", "add", &vmac, "dev", "eth0", "self", "permanent"]).unwrap();
        }
        let name = addressing::node_name(i + 1);
        servers.push(EchoServer::start(ns, SocketAddr::new(vip, PORT), &name).unwrap());
    }
    let (fam, len, via) = if vip.is_ipv4() {
        ("-4", 32, IpAddr::from(addressing::ROUTER_LINK_V4))
    } else {
        ("-6", 128, IpAddr::from(addressing::ROUTER_LINK_V6))
    };
    lab.client().ip(&[fam, "route", "add", &format!("{vip}/{len}"), "via", &via.to_string()]).unwrap();
    if by_hand {
        lab.router()
            .ip(&["neigh", "replace", &vip.to_string(), "lladdr", &vmac, "dev", "eth0", "nud", "permanent"])
            .unwrap();
    }
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
    let (lab, _servers) = lab_for(vip, true);
    let all = ["node1", "node2", "node3"];
    let mut nodes: Vec<Node> =
        all.iter().zip(lab.nodes()).map(|(name, ns)| Node::settled(name, vip, &all, ns)).collect();

    // 1 000 connections from 1 000 source ports: every node takes its third.
    let mut first = open(&lab, vip, 20000..21000);
    assert_even(&flow_split(&first), &all, 1000, "1 000 connections over three nodes");
    // Each node dropped the others' packets, as its not-mine counter (read back over
    // netlink, as the speaker reads it) says.
    for ns in lab.nodes() {
        let rules = ns.run(|| socket::rule_packets(Family::Inet, nft::TABLE)).unwrap().unwrap();
        let dropped = nft::not_mine(&rules);
        assert!(
            dropped.get(&vip).is_some_and(|n| *n > 0),
            "{}: no packet dropped as another node's: {dropped:?}",
            ns.name()
        );
    }

    // node2 dies: its switch port is cut; the survivors take its buckets.
    let ns2 = &lab.nodes()[1];
    lab.switch().ip(&["link", "set", "n2", "down"]).unwrap();
    for i in [0, 2] {
        nodes[i].members(vip, &["node1", "node3"], &lab.nodes()[i]);
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
    let left = ns2.run(|| socket::chains(Family::Inet, nft::TABLE)).unwrap().unwrap();
    nodes[1].spread.adopt(t, nft::addresses_in(&left));
    nodes[1].spread.handle(t, desired(vip, &all));
    nodes[1].load(ns2);
    for i in [0, 2] {
        nodes[i].members(vip, &all, &lab.nodes()[i]);
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

/// A node whose kernel takes a packet for the address nowhere (no DNAT rule yet, no
/// local socket) and forwards IP resolves the address to the virtual MAC like everyone:
/// routing the packet on would flood a copy to every other node, and conntrack would
/// remember the flow un-NATed. The forward chain drops it instead: each node sees each
/// of the client's SYNs exactly once.
fn nothing_takes_the_packet(vip: IpAddr) {
    let lab = Lab::up(LabConfig::nodes(2)).unwrap();
    let vmac = mac_to_string(&virtual_mac(vip));
    let both = ["node1", "node2"];
    for (name, ns) in both.iter().zip(lab.nodes()) {
        ns.exec(&["bridge", "fdb", "add", &vmac, "dev", "eth0", "self", "permanent"]).unwrap();
        ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
        ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        // What the other nodes' answers would teach it.
        ns.ip(&["neigh", "replace", &vip.to_string(), "lladdr", &vmac, "dev", "eth0", "nud", "permanent"])
            .unwrap();
        Node::settled(name, vip, &both, ns);
    }
    lab.client()
        .ip(&["neigh", "replace", &vip.to_string(), "lladdr", &vmac, "dev", "eth0", "nud", "permanent"])
        .unwrap();
    let to = SocketAddr::new(vip, PORT);
    let r = lab
        .client()
        .run(move || std::net::TcpStream::connect_timeout(&to, Duration::from_millis(2500)))
        .unwrap();
    assert!(r.is_err(), "nothing serves {to}, yet the client connected");
    let counts: Vec<(u64, u64)> = lab
        .nodes()
        .iter()
        .map(|ns| {
            let rules = ns.run(|| socket::rule_packets(Family::Inet, nft::TABLE)).unwrap().unwrap();
            let not_mine = nft::not_mine(&rules).get(&vip).copied().unwrap_or(0);
            let forwarded = rules.iter().filter(|(c, _)| c == "forward").map(|(_, n)| n).sum::<u64>();
            (not_mine, forwarded)
        })
        .collect();
    println!("{vip}: (dropped as not mine, dropped instead of forwarded) per node: {counts:?}");
    let owner =
        counts.iter().position(|c| c.1 > 0).expect("no node dropped the flow instead of forwarding it");
    let (other, mine) = (counts[1 - owner], counts[owner]);
    assert_eq!(mine.0, 0, "the owner dropped its own flow as another node's: {counts:?}");
    assert_eq!(other.1, 0, "{counts:?}");
    assert_eq!(
        other.0, mine.1,
        "the other node saw a SYN more often than the owner: copies went round: {counts:?}"
    );
}

#[test]
fn ipv4_a_packet_nothing_takes_is_dropped_not_sent_round_the_segment() {
    nothing_takes_the_packet(addressing::lan_v4(61));
}

#[test]
fn ipv6_a_packet_nothing_takes_is_dropped_not_sent_round_the_segment() {
    nothing_takes_the_packet(addressing::lan_v6(0x61));
}

/// Buckets of `vip` that `ns` owns (takes new flows of), read from its loaded table
/// (two reads: a load between them may make it wrong, once).
fn owned_buckets(ns: &Netns, vip: IpAddr) -> usize {
    owned(vip, |what, name| ns.exec(&["nft", "list", what, "inet", nft::TABLE, name]).ok())
}

/// The per-address chain or map `{prefix}_X` of `vip`.
fn table_name(prefix: &str, vip: IpAddr) -> String {
    format!("{prefix}_{}", vip.to_string().replace(['.', ':'], "_"))
}

/// Elements of a listed map (None: not loaded) whose verdict is `verdict` ("a": buckets
/// not mine, "g": buckets in grace).
fn count_verdicts(listed: Option<String>, verdict: &str) -> usize {
    listed.map_or(0, |text| text.matches(&format!(": {verdict}")).count())
}

/// Buckets of `vip` that take new flows, from `list(what, name)`, which runs `nft list
/// what inet ferrolb name` where the table is (None: no such chain or map).
fn owned(vip: IpAddr, list: impl Fn(&str, &str) -> Option<String>) -> usize {
    if list("chain", &table_name("a", vip)).is_none() {
        return 0;
    }
    let count = |prefix: &str, verdict: &str| count_verdicts(list("map", &table_name(prefix, vip)), verdict);
    256usize.saturating_sub(count("a", "goto n_") + count("g", "goto draining"))
}

/// Waits until each of `nodes` (lab indexes) owns its share of `vip`'s buckets.
fn wait_shares(lab: &Lab, vip: IpAddr, nodes: &[usize], speakers: &[Speaker]) {
    let share = 256 / nodes.len();
    let r = wait::until_value(
        &format!("nodes {nodes:?} own a share of the buckets of {vip} each"),
        Duration::from_secs(60),
        || Ok(nodes.iter().map(|&i| owned_buckets(&lab.nodes()[i - 1], vip)).collect::<Vec<_>>()),
        |owned| owned.iter().all(|&o| o == share || o == share + 1),
    );
    let logs: Vec<String> = speakers.iter().map(|s| s.logs()).collect();
    assert!(r.is_ok(), "{r:?}\n{}", logs.join("\n---\n"));
}

/// Opens rounds of new connections until every one of a round connects: the time a
/// dead node's buckets took to move.
fn time_until_new_connections_succeed(lab: &Lab, vip: IpAddr) -> Duration {
    let start = Instant::now();
    let mut port = 50000;
    loop {
        let flows = open_flows(
            lab.client(),
            client_source(vip),
            port..port + 30,
            SocketAddr::new(vip, PORT),
            Duration::from_millis(300),
        )
        .unwrap();
        port += 30;
        if !flow_split(&flows).contains_key("failed") {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "new connections still fail after 60 s: {:?}",
            flow_split(&flows)
        );
    }
}

#[test]
fn speakers_serve_one_ipv4_address_from_every_node_through_a_death_a_return_and_a_roll() {
    speakers_through_a_death_a_return_and_a_roll(addressing::lan_v4(0xd2));
}

#[test]
fn speakers_serve_one_ipv6_address_from_every_node_through_a_death_a_return_and_a_roll() {
    speakers_through_a_death_a_return_and_a_roll(addressing::lan_v6(0x210));
}

fn speakers_through_a_death_a_return_and_a_roll(vip: IpAddr) {
    let (lab, _servers) = lab_for(vip, false);
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let mut objs: Vec<String> = (1..=3).map(yaml::node).collect();
    objs.push(yaml::pool("lan", &["192.0.2.200-192.0.2.250", "2001:db8::200-2001:db8::250"]));
    objs.push(yaml::l2_advertisement("lan", &["ipAddressPools: [lan]", "mode: ActiveActive"]));
    objs.push(yaml::service("web", &[vip]));
    let file = yaml::stream(&objs);
    let mut speakers = Speaker::start_l2_metered(&lab, 3, &file, &key, METRICS_PORT).unwrap();
    wait_shares(&lab, vip, &[1, 2, 3], &speakers);

    // Every node answers ARP (each from its own MAC), all with the one virtual MAC: the
    // on-link client and r1 both resolve the address to it.
    let vmac = mac_to_string(&virtual_mac(vip));
    if vip.is_ipv4() {
        assert_eq!(
            lab.arp_answers(vip, 3).unwrap(),
            addressing::node_macs(&[1, 2, 3]),
            "on-link ARP answers"
        );
    } else {
        assert_eq!(lab.ndp_answers(vip).unwrap(), BTreeSet::from([vmac.clone()]), "on-link NDP answers");
    }
    let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", "-I", "eth0", &vip.to_string()]);
    assert_eq!(client::neighbour(lab.client(), "eth0", vip).unwrap().and_then(|n| n.mac), Some(vmac.clone()));
    let all = ["node1", "node2", "node3"];
    let mut first = open(&lab, vip, 20000..21000);
    assert_eq!(client::neighbour(lab.router(), "eth0", vip).unwrap().and_then(|n| n.mac), Some(vmac.clone()));
    assert_even(&flow_split(&first), &all, 1000, "speakers: 1 000 connections through r1");
    // Two clients on the LAN resolve the address themselves (to the virtual MAC) and
    // their connections spread over the nodes too.
    let mut on_link = Vec::new();
    for (k, lan) in lab.lan_clients().iter().enumerate() {
        let source: IpAddr = if vip.is_ipv4() {
            addressing::lan_client_v4(k + 1).into()
        } else {
            addressing::lan_client_v6(k + 1).into()
        };
        let flows = open_flows(lan, source, 20000..20500, SocketAddr::new(vip, PORT), TIMEOUT).unwrap();
        let split = flow_split(&flows);
        println!("speakers: 500 connections from on-link client lan{}: {split:?}", k + 1);
        assert!(all.iter().all(|n| split.contains_key(*n)), "lan{} reached only {split:?}", k + 1);
        let mac = client::neighbour(lan, "eth0", vip).unwrap().and_then(|n| n.mac);
        assert_eq!(mac.as_deref(), Some(vmac.as_str()), "lan{} resolved {vip}", k + 1);
        on_link.extend(flows);
    }
    assert_even(&flow_split(&on_link), &all, 1000, "speakers: 1 000 connections from two on-link clients");

    // node2 dies: its port is cut and its speaker killed.
    lab.switch().ip(&["link", "set", "n2", "down"]).unwrap();
    speakers[1].kill();
    let took = time_until_new_connections_succeed(&lab, vip);
    println!("speakers: new connections all succeed {took:?} after node2 died");
    // The survivors reloaded their tables, and read what the old ones dropped first.
    let sample = format!("ferrolb_l2_active_active_not_mine_packets_total{{address=\"{vip}\"}}");
    for i in [1, 3] {
        let at = SocketAddr::new(addressing::node_v4(i).into(), METRICS_PORT);
        let body = client::http_get(lab.client(), at, "/metrics", TIMEOUT).unwrap();
        let dropped = client::metric_sample(&body, &sample).unwrap_or(0.0);
        assert!(dropped > 0.0, "node{i} counted no packet as another node's: {sample} = {dropped}");
    }
    assert_eq!(broken(&mut first, &["node1", "node3"]), BTreeMap::new(), "survivors' connections broke");
    assert_eq!(
        broken(&mut on_link, &["node1", "node3"]),
        BTreeMap::new(),
        "survivors' on-link connections broke"
    );
    let mut during = open(&lab, vip, 30000..30300);
    assert_even(
        &flow_split(&during),
        &["node1", "node3"],
        300,
        "speakers: new connections while node2 is away",
    );

    // node2 comes back: its speaker restarts with the table of its previous run loaded.
    speakers[1].restart().unwrap();
    lab.switch().ip(&["link", "set", "n2", "up"]).unwrap();
    wait_shares(&lab, vip, &[1, 2, 3], &speakers);
    let mut held = broken(&mut during, &["node1", "node3"]);
    held.append(&mut broken(&mut first, &["node1", "node3"]));
    assert_eq!(held, BTreeMap::new(), "connections broke when node2 returned");
    let mut after = open(&lab, vip, 40000..41000);
    assert_even(&flow_split(&after), &all, 1000, "speakers: 1 000 connections after node2 returned");

    // node1's speaker is rolled (SIGTERM, then a new one): no connection of any node is lost.
    assert!(speakers[0].terminate(Duration::from_secs(30)).is_some(), "speaker 1 did not stop on SIGTERM");
    let mut rolled = open(&lab, vip, 42000..42300);
    assert_even(&flow_split(&rolled), &["node2", "node3"], 300, "speakers: while node1's speaker is stopped");
    speakers[0].restart().unwrap();
    wait_shares(&lab, vip, &[1, 2, 3], &speakers);
    let mut lost = broken(&mut after, &all);
    lost.append(&mut broken(&mut rolled, &all));
    lost.append(&mut broken(&mut first, &["node1", "node3"]));
    assert_eq!(lost, BTreeMap::new(), "connections lost across the roll of node1's speaker");
}

/// The static file of an active-active Local Service whose serving endpoints are on `nodes`.
fn local_file(vip: IpAddr, nodes: &[usize]) -> String {
    let mut objs: Vec<String> = (1..=3).map(yaml::node).collect();
    objs.push(yaml::pool("lan", &["192.0.2.200-192.0.2.250", "2001:db8::200-2001:db8::250"]));
    objs.push(yaml::l2_advertisement("lan", &["ipAddressPools: [lan]", "mode: ActiveActive"]));
    let endpoints: String = nodes
        .iter()
        .map(|&i| {
            format!(
                "\n- {{addresses: [10.0.0.{i}], nodeName: {}, conditions: {{ready: true}}}}",
                addressing::node_name(i)
            )
        })
        .collect();
    objs.push(format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\nspec: {{type: LoadBalancer, externalTrafficPolicy: Local, ports: [{{port: {PORT}, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: \"{vip}\"}}]}}}}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}\naddressType: IPv4\nendpoints:{endpoints}\n"
    ));
    yaml::stream(&objs)
}

#[test]
fn under_local_policy_a_node_without_a_serving_endpoint_gets_no_bucket() {
    let vip = addressing::lan_v4(0xd3);
    let (lab, _servers) = lab_for(vip, false);
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    let file = local_file(vip, &[1, 3]);
    let speakers: Vec<Speaker> = (1..=3).map(|i| Speaker::start_l2(&lab, i, &file, &key).unwrap()).collect();
    wait_shares(&lab, vip, &[1, 3], &speakers);
    assert_eq!(owned_buckets(&lab.nodes()[1], vip), 0, "node2 has no serving endpoint");
    let mut before = open(&lab, vip, 20000..20600);
    assert_even(&flow_split(&before), &["node1", "node3"], 600, "Local: endpoints on node1 and node3");

    // An endpoint starts serving on node2: it takes its share; nobody's connection breaks.
    for s in &speakers {
        s.replace_file(&local_file(vip, &[1, 2, 3])).unwrap();
    }
    wait_shares(&lab, vip, &[1, 2, 3], &speakers);
    assert_eq!(
        broken(&mut before, &["node1", "node3"]),
        BTreeMap::new(),
        "connections broke when node2 joined"
    );
    let after = open(&lab, vip, 21000..22000);
    assert_even(&flow_split(&after), &["node1", "node2", "node3"], 1000, "Local: endpoints on every node");
}

/// Buckets of `vip` that this thread's network namespace takes new flows of, as
/// [`owned_buckets`] reads them (its `nft` runs where the thread is).
fn owned_here(vip: IpAddr) -> usize {
    owned(vip, |what, name| {
        let out = std::process::Command::new("nft").args(["list", what, "inet", nft::TABLE, name]).output();
        out.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    })
}

/// What a stopping speaker waits for before it leaves membership
/// (`BucketFilter::loaded`): once the filter says so, the kernel holds the tables of
/// the last set given. Handed over, no bucket of the address takes new flows here any
/// more, so the others may take them without two nodes answering one SYN (CI saw
/// clients reset when the others took them first).
#[test]
fn the_filter_says_loaded_once_the_kernel_holds_its_tables() {
    use ferrolb_proto::l2::L2Status;
    use ferrolb_speaker::announce::active_active::{BucketFilter, FilterMetrics};

    let lab = Lab::up(LabConfig::nodes(1)).unwrap();
    let vip: IpAddr = "192.0.2.120".parse().unwrap();
    let owned = lab.nodes()[0]
        .run(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let (_status, rx) = tokio::sync::watch::channel(L2Status::default());
                let filter = BucketFilter::spawn("node1", Duration::ZERO, rx, FilterMetrics::default());
                filter.set(&[(vip, vec!["node1".to_string(), "node2".to_string()])].into());
                assert!(filter.loaded(TIMEOUT).await, "the first tables loaded");
                let serving = owned_here(vip);
                filter.set(&BTreeMap::new());
                assert!(filter.loaded(TIMEOUT).await, "the handed-over tables loaded");
                let handed_over = owned_here(vip);
                filter.stop(BTreeMap::new()).await;
                (serving, handed_over)
            })
        })
        .unwrap();
    assert_eq!(owned, (128, 0), "buckets taking new flows: shared with node2, then handed over");
}
