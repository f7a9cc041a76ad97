//! The demo: a lab with a real router, service addresses announced into it, and a
//! client reaching them, narrated as a timeline.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::bench::failover;
use crate::client::{self, HttpServer, ProbeStream};
use crate::routers::{self, Bird, Router, RouterSpec};
use crate::speaker::{self, Speaker, yaml};
use crate::{Error, Lab, LabConfig, plan, wait};

/// Prints `[  1.234s] message` lines relative to the demo's start.
#[derive(Debug)]
pub struct Timeline {
    start: Instant,
}

impl Timeline {
    /// Starts the clock.
    pub fn new() -> Self {
        Timeline { start: Instant::now() }
    }

    /// Prints one event.
    pub fn say(&self, msg: impl AsRef<str>) {
        println!("[{:>7.3}s] {}", self.start.elapsed().as_secs_f64(), msg.as_ref());
    }
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

/// The speakers' static file: both nodes, a BGP pool announced to the router over
/// IPv4 and IPv6, an L2 pool answered by ARP/NDP, one Service in each.
fn static_file(bgp: [IpAddr; 2], l2: [IpAddr; 2]) -> String {
    let peer4 = yaml::peer(
        "router-v4",
        plan::NODE_ASN,
        plan::ROUTER_ASN,
        plan::ROUTER_V4.into(),
        &["addressFamilies: [ipv4-unicast]"],
    );
    let peer6 = yaml::peer(
        "router-v6",
        plan::NODE_ASN,
        plan::ROUTER_ASN,
        plan::ROUTER_V6.into(),
        &["addressFamilies: [ipv6-unicast]"],
    );
    let lan = [
        format!("{}-{}", plan::L2_POOL_V4.0, plan::L2_POOL_V4.1),
        format!("{}-{}", plan::L2_POOL_V6.0, plan::L2_POOL_V6.1),
    ];
    let lan: Vec<&str> = lan.iter().map(String::as_str).collect();
    yaml::stream(&[
        yaml::node(1),
        yaml::node(2),
        yaml::pool("public", &[plan::BGP_POOL_V4, "2001:db8:3::/120"]),
        yaml::pool("lan", &lan),
        peer4,
        peer6,
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        yaml::l2_advertisement("lan", &["ipAddressPools: [lan]"]),
        yaml::service("web-bgp", &bgp),
        yaml::service("web-l2", &l2),
    ])
}

/// Runs the demo; returns an error (and tears the lab down) if any step fails.
pub fn run() -> Result<(), Error> {
    let t = Timeline::new();
    let lab = Lab::up(LabConfig::nodes(2))?;
    t.say(format!("lab {} up: router r1, node1, node2, client (addresses in testbed/src/plan.rs)", lab.id()));
    let bird = Bird::start(&lab, &RouterSpec::default())?;
    t.say("BIRD 2 listening on r1 for neighbours in 192.0.2.0/24 and 2001:db8::/64 (AS 64512)");

    let (vip4, vip6) = (plan::bgp_vip_v4(10), plan::bgp_vip_v6(0x10));
    let l2v4: IpAddr = plan::L2_POOL_V4.0.parse().map_err(|e| Error::Parse(format!("{e}")))?;
    // An IPv6 address with the same elected owner, so the failover moves both.
    let names = [plan::node_name(1), plan::node_name(2)];
    let elect = |v: IpAddr| ferrolb_speaker::election::owner(v, names.iter().map(String::as_str));
    let l2v6 = (0x200..=0x250)
        .map(|n| IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, n]))
        .find(|v| elect(*v) == elect(l2v4))
        .ok_or_else(|| Error::Parse("no IPv6 address of the L2 pool shares the IPv4 owner".into()))?;
    let key = speaker::write_membership_key(&lab, "demo-membership-key")?;
    let key = key.display().to_string();
    let bin = speaker::binary("debug")?;
    let file = static_file([vip4, vip6], [l2v4, l2v6]);
    let mut speakers = Vec::new();
    let mut servers = Vec::new();
    for i in 1..=2 {
        let node = lab.node(i);
        // As kube-proxy would: every node accepts every service address.
        for v in [vip4, vip6, l2v4, l2v6] {
            lab.add_vip_on_lo(node, v)?;
        }
        for v in [vip4, l2v4] {
            servers.push(HttpServer::start(node, SocketAddr::new(v, 80), &format!("hello from node{i}\n"))?);
        }
        speakers.push(Speaker::start_with(&lab, i, &file, &bin, &["--membership-key-file", &key])?);
    }
    t.say(format!(
        "ferrolb-speaker --static on node1 and node2: Service web-bgp {vip4}, {vip6} by BGP; \
         Service web-l2 {l2v4}, {l2v6} by ARP/NDP"
    ));

    let peers: Vec<IpAddr> =
        (1..=2).flat_map(|i| [plan::node_v4(i).into(), plan::node_v6(i).into()]).collect();
    routers::wait_established(&bird, &peers, Duration::from_secs(30))?;
    t.say(format!("router: {} sessions Established", peers.len()));
    let hops4: Vec<IpAddr> = (1..=2).map(|i| plan::node_v4(i).into()).collect();
    let hops6: Vec<IpAddr> = (1..=2).map(|i| plan::node_v6(i).into()).collect();
    routers::wait_kernel_route(lab.router(), &format!("{vip4}/32"), &hops4, Duration::from_secs(20))?;
    routers::wait_kernel_route(lab.router(), &format!("{vip6}/128"), &hops6, Duration::from_secs(20))?;
    println!("\n--- router RIB (birdc show route) ---");
    for p in bird.rib()? {
        println!(
            "  {:<22} via {:<16} as-path {:?}",
            p.prefix,
            p.next_hop.map(|a| a.to_string()).unwrap_or_default(),
            p.as_path
        );
    }
    println!("--- router kernel table ---");
    for r in bird.kernel_routes()?.iter().filter(|r| r.protocol == "bird") {
        println!("  {:<22} ECMP via {:?}", r.prefix, r.via);
    }
    println!();
    t.say("router kernel has ECMP routes to both nodes");

    let body = client::http_get(lab.client(), SocketAddr::new(vip4, 80), "/", Duration::from_secs(5))?;
    t.say(format!("client → http://{vip4}/ through the router: {}", body.trim()));
    reach(&t, &lab, vip6)?;

    // L2: the client resolves the addresses on its LAN to the elected owner's MAC.
    let mut owners = Vec::new();
    for v in [l2v4, l2v6] {
        let o = wait::until(&format!("an owner answering {v}"), Duration::from_secs(30), || {
            let _ = lab.client().exec_output(&["ping", "-c", "1", "-W", "1", &v.to_string()]);
            failover::owner(&lab, v)
        })?;
        t.say(format!("client resolves {v} to node{o} ({}), the elected owner", plan::node_mac(o)));
        owners.push(o);
    }
    let body = fetch(&t, &lab, l2v4)?;
    t.say(format!("client → http://{l2v4}/ on the LAN: {}", body.trim()));

    let victim = owners[0];
    let survivor = 3 - victim;
    let probes = [
        ProbeStream::start(lab.client(), l2v4, Duration::from_millis(10))?,
        ProbeStream::start(lab.client(), l2v6, Duration::from_millis(10))?,
    ];
    std::thread::sleep(Duration::from_millis(500));
    if let Some(s) = speakers.get_mut(victim - 1) {
        s.kill();
    }
    for v in [l2v4, l2v6] {
        let cidr = format!("{v}/{}", if v.is_ipv4() { 32 } else { 128 });
        lab.node(victim).ip(&["addr", "del", &cidr, "dev", "lo"])?;
    }
    t.say(format!("node{victim}'s speaker SIGKILLed and node{victim} stops accepting {l2v4} and {l2v6}"));
    for v in [l2v4, l2v6] {
        client::wait_neighbour_mac(
            lab.client(),
            "eth0",
            v,
            &plan::node_mac(survivor),
            Duration::from_secs(30),
        )?;
        t.say(format!("client now resolves {v} to node{survivor} (gratuitous ARP / unsolicited NA)"));
    }
    std::thread::sleep(Duration::from_millis(300));
    for (v, p) in [l2v4, l2v6].into_iter().zip(probes) {
        let r = p.stop(Duration::from_millis(100));
        t.say(format!(
            "client pinging {v} every 10 ms: {} sent, {} lost, longest outage {:.0} ms",
            r.sent,
            r.lost(),
            r.max_outage().as_secs_f64() * 1000.0
        ));
        if r.received == 0 {
            return Err(Error::Parse(format!("client could not reach {v}")));
        }
    }
    let body = fetch(&t, &lab, l2v4)?;
    t.say(format!("client → http://{l2v4}/ after the failover: {}", body.trim()));
    reach(&t, &lab, l2v6)?;
    drop(speakers);
    drop(servers);
    drop(lab);
    t.say("lab torn down");
    Ok(())
}

/// Fetches `http://addr/` from the client, up to three attempts. A connection opened
/// while the client's neighbour entry moves (a takeover, or a membership flap on a
/// starved machine) can be reset; a real client retries, so the demo does too and says
/// so. The last failure prints the speakers' logs, which name every ownership change.
fn fetch(t: &Timeline, lab: &Lab, addr: IpAddr) -> Result<String, Error> {
    let mut attempt = 1;
    loop {
        match client::http_get(lab.client(), SocketAddr::new(addr, 80), "/", Duration::from_secs(5)) {
            Ok(body) => return Ok(body),
            Err(e) if attempt < 3 => {
                t.say(format!("client → http://{addr}/ attempt {attempt} failed ({e}); retrying"));
                attempt += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => {
                println!("--- lab logs ---\n{}", lab.logs(40));
                return Err(e);
            }
        }
    }
}

/// Pings `addr` every 10 ms for half a second; fails when nothing answers.
fn reach(t: &Timeline, lab: &Lab, addr: IpAddr) -> Result<(), Error> {
    let probe = ProbeStream::start(lab.client(), addr, Duration::from_millis(10))?;
    std::thread::sleep(Duration::from_millis(500));
    let r = probe.stop(Duration::from_millis(100));
    t.say(format!("client pings {addr} every 10 ms: {} sent, {} answered", r.sent, r.received));
    if r.received == 0 {
        return Err(Error::Parse(format!("client could not reach {addr}")));
    }
    Ok(())
}
