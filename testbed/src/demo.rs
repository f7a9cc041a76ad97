//! The demo: a lab with a real router, service addresses announced into it, and a
//! client reaching them, narrated as a timeline.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::client::{self, HttpServer, ProbeStream};
use crate::routers::{self, Bird, ExaBgp, ExaNeighbor, Router, RouterSpec, StaticRoute};
use crate::{Error, Lab, LabConfig, plan};

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

/// Runs the demo; returns an error (and tears the lab down) if any step fails.
pub fn run() -> Result<(), Error> {
    let t = Timeline::new();
    let lab = Lab::up(LabConfig::nodes(2))?;
    t.say(format!("lab {} up: router r1, node1, node2, client (addresses in testbed/src/plan.rs)", lab.id()));
    let bird = Bird::start(&lab, &RouterSpec::default())?;
    t.say("BIRD 2 listening on r1 for neighbours in 192.0.2.0/24 and 2001:db8::/64 (AS 64512)");

    let (vip4, vip6) = (plan::bgp_vip_v4(10), plan::bgp_vip_v6(0x10));
    let mut speakers = Vec::new();
    let mut servers = Vec::new();
    for i in 1..=2 {
        let node = lab.node(i);
        lab.add_vip_on_lo(node, vip4)?;
        lab.add_vip_on_lo(node, vip6)?;
        servers.push(HttpServer::start(node, SocketAddr::new(vip4, 80), &format!("hello from node{i}\n"))?);
        let n4 = ExaNeighbor::to_router(plan::node_v4(i).into(), plan::ROUTER_V4.into(), plan::node_v4(i))
            .route(StaticRoute::new(&format!("{vip4}/32"), plan::node_v4(i).into()));
        let n6 = ExaNeighbor::to_router(plan::node_v6(i).into(), plan::ROUTER_V6.into(), plan::node_v4(i))
            .route(StaticRoute::new(&format!("{vip6}/128"), plan::node_v6(i).into()));
        speakers.push(ExaBgp::start(&lab, node, &format!("speaker-node{i}"), &[n4, n6])?);
    }
    t.say(format!("node1 and node2 announce {vip4}/32 and {vip6}/128 (stand-in speaker: ExaBGP)"));

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
    let probe = ProbeStream::start(lab.client(), vip6, Duration::from_millis(10))?;
    std::thread::sleep(Duration::from_millis(500));
    let r = probe.stop(Duration::from_millis(100));
    t.say(format!("client pings {vip6} every 10 ms: {} sent, {} answered", r.sent, r.received));
    if r.received == 0 {
        return Err(Error::Parse(format!("client could not reach {vip6}")));
    }
    drop(speakers);
    drop(lab);
    t.say("lab torn down");
    Ok(())
}
