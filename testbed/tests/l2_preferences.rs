//! The real `ferrolb-speaker --static` with an L2Advertisement's `nodePreferences`: the
//! operator's first choice answers for the address whatever the election's score says,
//! the second choice (not the score's) takes over when the first dies, and the first
//! takes the address back, make before break, when it returns. With no address
//! active-active, no speaker touches nf_tables.
//!
//! Needs `target/debug/ferrolb-speaker` (testbed/test.sh builds it first).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ferrolb_lab::addressing::{self, lan_v4, lan_v6, node_name};
use ferrolb_lab::client::{self, ArpProbes};
use ferrolb_lab::speaker::{Speaker, write_membership_key, yaml};
use ferrolb_lab::{Lab, LabConfig, wait};
use ferrolb_proto::election;

const T: Duration = Duration::from_secs(30);

/// Nodes 1..=3 from the lowest election score for `vip` to the highest.
fn by_score(vip: IpAddr) -> Vec<usize> {
    let mut nodes = vec![1, 2, 3];
    nodes.sort_by_key(|i| election::weight(&node_name(*i), vip));
    nodes
}

/// The static file: three nodes (labelled `rack: rN`), the LAN pool, an advertisement
/// preferring `first` (weight 50) then `second` (weight 10), and a Service on `vips`.
fn static_file(vips: &[IpAddr], first: usize, second: usize) -> String {
    let mut objs: Vec<String> = (1..=3).map(yaml::node).collect();
    objs.push(yaml::pool("lan", &["192.0.2.200-192.0.2.250", "2001:db8::200-2001:db8::250"]));
    let preferences = format!(
        "nodePreferences: [{{nodeSelector: {{matchLabels: {{rack: r{first}}}}}, weight: 50}}, \
         {{nodeSelector: {{matchLabels: {{rack: r{second}}}}}, weight: 10}}]"
    );
    objs.push(yaml::l2_advertisement("lan", &["ipAddressPools: [lan]", &preferences]));
    objs.push(yaml::service("web", vips));
    yaml::stream(&objs)
}

/// Pings each of `vips` until the client's neighbour entry holds node `node`'s MAC.
fn wait_answered_by(lab: &Lab, vips: &[IpAddr], node: usize) {
    for v in vips {
        let r = client::wait_resolved(lab.client(), "eth0", *v, &addressing::node_mac(node), T);
        assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    }
}

/// The preferences run against the score at every step: the first choice scores lowest
/// and the second lower than the node left, so a speaker that ignored them would pick
/// other nodes each time.
#[test]
fn the_preferred_node_answers_the_next_takes_over_and_the_first_takes_back() {
    let a = lan_v4(200);
    let order = by_score(a);
    // An IPv6 address whose scores rank the three nodes the same way.
    let b = (0x200..=0x250).map(lan_v6).find(|b| by_score(*b) == order).unwrap();
    let (first, second, scored) = (order[0], order[1], order[2]);
    assert_eq!(addressing::owner(a, &[1, 2, 3]), scored);
    assert_eq!(addressing::owner(a, &[second, scored]), scored);

    let lab = Lab::up(LabConfig::nodes(3)).unwrap();
    let key = write_membership_key(&lab, "cluster-key").unwrap();
    for n in lab.nodes() {
        for v in [a, b] {
            lab.add_vip_on_lo(n, v).unwrap();
        }
    }
    let file = static_file(&[a, b], first, second);
    let mut speakers: Vec<Speaker> =
        (1..=3).map(|i| Speaker::start_l2(&lab, i, &file, &key).unwrap()).collect();
    wait_answered_by(&lab, &[a, b], first);

    // The first choice dies (SIGKILL, link cut): the second choice takes over.
    let node = lab.node(first).clone();
    let cut = Instant::now();
    let reports = client::probe_across(lab.client(), &[a, b], T, || {
        speakers[first - 1].kill();
        node.ip(&["link", "set", "eth0", "down"]).unwrap();
    });
    let reports = reports.unwrap_or_else(|e| panic!("{e:?}\n{}", lab.logs(40)));
    println!("first choice node{first} killed: answered again within {:?}", cut.elapsed());
    for (v, r) in [a, b].iter().zip(reports) {
        println!("  {v}: {} probes, {} lost, outage {:?}", r.sent, r.lost(), r.max_outage());
    }
    wait_answered_by(&lab, &[a, b], second);
    assert_eq!(
        lab.arp_answers(a, 1).unwrap(),
        [addressing::node_mac(second)].into(),
        "node{scored} stays out"
    );

    // The first choice returns and takes the addresses back: asked every 10 ms, the
    // client is answered at every moment of the handover.
    node.ip(&["link", "set", "eth0", "up"]).unwrap();
    let senders: Vec<Ipv4Addr> = (150..200).map(|k| Ipv4Addr::new(192, 0, 2, k)).collect();
    let IpAddr::V4(a4) = a else { unreachable!() };
    let arp = ArpProbes::start(lab.client(), "eth0", a4, Duration::from_millis(10), &senders).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    speakers[first - 1].restart().unwrap();
    let r = wait::until_value(
        &format!("{a} answered by node{first} only"),
        T,
        || Ok(lab.arp_answers(a, 1).unwrap()),
        |m| *m == [addressing::node_mac(first)].into(),
    );
    assert!(r.is_ok(), "{r:?}\n{}", lab.logs(40));
    std::thread::sleep(Duration::from_millis(300));
    let arp = arp.stop().unwrap();
    println!(
        "ARP for {a} while node{first} returned: {} requests, {} unanswered, {} answered by both during the handover, owners {:?}",
        arp.sent,
        arp.unanswered.len(),
        arp.answered_twice,
        arp.owners
    );
    assert!(arp.unanswered.is_empty(), "make before break: {arp:?}\n{}", lab.logs(40));
    assert_eq!(arp.owners.last(), Some(&addressing::node_mac(first)), "{arp:?}");
    wait_answered_by(&lab, &[b], first);
    let scored_logs = speakers[scored - 1].logs();
    assert!(!scored_logs.contains("now owns the address"), "node{scored} never owned:\n{scored_logs}");
    // No address is active-active: no speaker touched nf_tables, in any of its runs.
    for (i, sp) in speakers.iter().enumerate() {
        let logs = sp.logs();
        assert!(!logs.contains("active-active bucket filter"), "node{}:\n{logs}", i + 1);
        let tables = lab.nodes()[i].exec(&["nft", "list", "tables"]).unwrap();
        assert!(!tables.contains("ferrolb"), "node{}: {tables}", i + 1);
    }
}
