//! `bench bgp-scale`: N /32 prefixes from 198.18.0.0/15 announced by a speaker on
//! node1 to BIRD on r1 — time until all are in BIRD's RIB and r1's kernel, time to
//! withdraw them, bytes on the wire, the speaker's peak RSS.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::{ms, peak_rss};
use crate::netns::Netns;
use crate::process::Spawn;
use crate::routers::{self, Bird, RouterSpec};
use crate::speaker::{self, Speaker, yaml};
use crate::{Error, Lab, LabConfig, mrt, plan, wait};

/// What one speaker achieved for one table size.
#[derive(Debug, Clone)]
pub struct ScaleResult {
    /// Speaker measured.
    pub system: String,
    /// Prefixes announced.
    pub prefixes: u32,
    /// From session Established to the last prefix in BIRD's RIB.
    pub to_rib: Duration,
    /// From session Established to the last prefix in r1's kernel.
    pub to_kernel: Duration,
    /// From the withdraw command to the last prefix gone from r1's kernel.
    pub withdraw: Duration,
    /// UPDATE messages sent, where the speaker counts them.
    pub updates: Option<u64>,
    /// TCP payload bytes BIRD received on the session.
    pub bytes: u64,
    /// Peak resident memory of the speaker.
    pub rss: Option<u64>,
}

/// Networks in BIRD's tables (`show route count`).
pub fn bird_route_count(bird: &Bird) -> Result<u64, Error> {
    let text = bird.birdc("show route count")?;
    Ok(text
        .lines()
        .filter(|l| l.contains("routes for"))
        .filter_map(|l| l.split(" for ").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
        .sum())
}

/// IPv4 routes BIRD installed in the kernel of `ns`.
pub fn kernel_count(ns: &Netns) -> Result<u64, Error> {
    Ok(ns.ip(&["-4", "route", "show", "proto", "bird"])?.lines().count() as u64)
}

/// Payload bytes received on established BGP sessions in `ns`.
pub fn bgp_bytes_received(ns: &Netns) -> Result<u64, Error> {
    let text = ns.exec(&["ss", "-tinH", "state", "established", "( sport = :179 )"])?;
    Ok(text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("bytes_received:"))
        .filter_map(|v| v.parse::<u64>().ok())
        .sum())
}

/// The GoBGP speaker starts with no neighbour: the table is loaded first.
fn gobgp_speaker_config() -> String {
    format!(
        "[global.config]\n  as = {}\n  router-id = \"{}\"\n  port = -1\n",
        plan::NODE_ASN,
        plan::node_v4(1)
    )
}

/// Destinations in GoBGP's global IPv4 RIB (`gobgp global rib summary`).
fn gobgp_rib_count(cli: &dyn Fn(&[&str]) -> Result<String, Error>) -> Result<u64, Error> {
    let text = cli(&["global", "rib", "-a", "ipv4", "summary"])?;
    text.split_whitespace()
        .skip_while(|w| *w != "Destination:")
        .nth(1)
        .and_then(|n| n.trim_end_matches(',').parse().ok())
        .ok_or_else(|| Error::Parse(format!("gobgp rib summary: {text}")))
}

/// GoBGP as the speaker: routes injected from an MRT dump, then the session comes up.
pub fn gobgp(n: u32) -> Result<ScaleResult, Error> {
    let lab = Lab::up(LabConfig::nodes(1))?;
    let bird = Bird::start(&lab, &RouterSpec::default())?;
    let dir = lab.subdir("gobgp-speaker")?;
    let conf = dir.join("gobgpd.toml");
    std::fs::write(&conf, gobgp_speaker_config())?;
    let node = lab.node(1);
    let mut proc = lab.spawn(
        node,
        Spawn::new(
            "gobgpd-speaker",
            &[
                "gobgpd",
                "-f",
                &conf.to_string_lossy(),
                "-t",
                "toml",
                "--api-hosts",
                "127.0.0.1:50051",
                "--pprof-disable",
            ],
        ),
    )?;
    let cli = |args: &[&str]| -> Result<String, Error> {
        let mut argv = vec!["gobgp", "-u", "127.0.0.1", "-p", "50051"];
        argv.extend_from_slice(args);
        node.exec(&argv)
    };
    wait::until("gobgpd API", Duration::from_secs(15), || Ok(cli(&["global"]).ok().map(|_| ())))?;
    // `gobgp mrt inject` (3.10) may exit before its stream is flushed, dropping the tail
    // of the file. Injecting a path twice changes nothing, so each chunk file carries
    // the chunk four times over: a lost tail only loses copies.
    let all: Vec<_> = mrt::bulk_prefixes(n).collect();
    let dump = dir.join("chunk.mrt");
    let mut loaded = 0u64;
    for chunk in all.chunks(250) {
        let copies = chunk.iter().copied().cycle().take(chunk.len() * 4);
        std::fs::write(&dump, mrt::dump_host_routes(copies, plan::node_v4(1)))?;
        let want = loaded + chunk.len() as u64;
        let mut tries = 0;
        while gobgp_rib_count(&cli)? < want {
            tries += 1;
            if tries > 20 {
                return Err(Error::Parse(format!("GoBGP never held {want} injected prefixes")));
            }
            cli(&["mrt", "inject", "global", &dump.to_string_lossy()])?;
            // Injection is processed asynchronously: give it time before injecting again.
            let _ = wait::until("GoBGP to hold an injected chunk", Duration::from_secs(2), || {
                Ok((gobgp_rib_count(&cli)? >= want).then_some(()))
            });
        }
        loaded = want;
    }
    cli(&["neighbor", "add", &plan::ROUTER_V4.to_string(), "as", &plan::ROUTER_ASN.to_string()])?;
    let peer: IpAddr = plan::node_v4(1).into();
    // GoBGP waits 5–10 s before its first connect; the clock starts at Established.
    routers::wait_established(&bird, &[peer], Duration::from_secs(60))?;
    let t0 = Instant::now();
    let long = Duration::from_secs(600);
    wait::until("all prefixes in BIRD's RIB", long, || {
        Ok((bird_route_count(&bird)? >= u64::from(n)).then_some(()))
    })?;
    let to_rib = t0.elapsed();
    wait::until("all prefixes in the kernel", long, || {
        Ok((kernel_count(lab.router())? >= u64::from(n)).then_some(()))
    })?;
    let to_kernel = t0.elapsed();
    let bytes = bgp_bytes_received(lab.router())?;
    let stats: serde_json::Value =
        serde_json::from_str(&cli(&["neighbor", &plan::ROUTER_V4.to_string(), "-j"])?)
            .map_err(|e| Error::Parse(format!("gobgp neighbor: {e}")))?;
    let updates = stats["state"]["messages"]["sent"]["update"].as_u64();
    let t1 = Instant::now();
    cli(&["global", "rib", "-a", "ipv4", "del", "all"])?;
    wait::until("all prefixes withdrawn from the kernel", long, || {
        Ok((kernel_count(lab.router())? == 0).then_some(()))
    })?;
    let withdraw = t1.elapsed();
    let rss = peak_rss(proc.pid());
    proc.kill();
    Ok(ScaleResult {
        system: "GoBGP 3".into(),
        prefixes: n,
        to_rib,
        to_kernel,
        withdraw,
        updates,
        bytes,
        rss,
    })
}

/// The speaker's static file: node1, Services holding `n` bulk addresses (10 000 per
/// Service: the stream reader caps one YAML document's size), a pool, BIRD on r1 as the peer.
pub fn ferrolb_static_file(n: u32) -> String {
    let ips: Vec<IpAddr> = mrt::bulk_prefixes(n).map(IpAddr::V4).collect();
    let mut objs = vec![yaml::node(1), yaml::pool("bulk", &[plan::BULK_V4])];
    objs.extend(ips.chunks(10_000).enumerate().map(|(i, c)| yaml::service(&format!("bulk-{i}"), c)));
    objs.extend([
        yaml::peer(
            "r1",
            plan::NODE_ASN,
            plan::ROUTER_ASN,
            plan::ROUTER_V4.into(),
            &["addressFamilies: [ipv4-unicast]"],
        ),
        yaml::bgp_advertisement("bulk", &["ipAddressPools: [bulk]"]),
    ]);
    yaml::stream(&objs)
}

/// `ferrolb_bgp_updates_sent_total` summed over peers, scraped inside `ns`.
pub fn scrape_updates_sent(ns: &Netns, addr: std::net::SocketAddr) -> Result<Option<u64>, Error> {
    let text = ns.run(move || -> std::io::Result<String> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        Ok(out)
    })??;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("ferrolb_bgp_updates_sent_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .reduce(|a, b| a + b))
}

/// ferrolb-speaker (release build if present, else debug) as the speaker: the table
/// comes from its static file; the clock starts at Established; withdrawal is a file edit.
pub fn ferrolb(n: u32) -> Result<ScaleResult, Error> {
    let bin = speaker::binary("release").or_else(|_| speaker::binary("debug"))?;
    let lab = Lab::up(LabConfig::nodes(1))?;
    let bird = Bird::start(&lab, &RouterSpec::default())?;
    let metrics: std::net::SocketAddr = "127.0.0.1:9473".parse().map_err(|_| Error::Parse("addr".into()))?;
    let mut sp = Speaker::start_with(
        &lab,
        1,
        &ferrolb_static_file(n),
        &bin,
        &["--metrics-addr", &metrics.to_string()],
    )?;
    let peer: IpAddr = plan::node_v4(1).into();
    routers::wait_established(&bird, &[peer], Duration::from_secs(120))?;
    let t0 = Instant::now();
    let long = Duration::from_secs(600);
    wait::until("all prefixes in BIRD's RIB", long, || {
        Ok((bird_route_count(&bird)? >= u64::from(n)).then_some(()))
    })?;
    let to_rib = t0.elapsed();
    wait::until("all prefixes in the kernel", long, || {
        Ok((kernel_count(lab.router())? >= u64::from(n)).then_some(()))
    })?;
    let to_kernel = t0.elapsed();
    let bytes = bgp_bytes_received(lab.router())?;
    // The metrics tick once a second.
    std::thread::sleep(Duration::from_millis(1200));
    let updates = scrape_updates_sent(lab.node(1), metrics).ok().flatten();
    let t1 = Instant::now();
    sp.replace_file(&ferrolb_static_file(0))?;
    wait::until("all prefixes withdrawn from the kernel", long, || {
        Ok((kernel_count(lab.router())? == 0).then_some(()))
    })?;
    let withdraw = t1.elapsed();
    let rss = sp.pid().and_then(peak_rss);
    sp.kill();
    Ok(ScaleResult {
        system: "ferrolb".into(),
        prefixes: n,
        to_rib,
        to_kernel,
        withdraw,
        updates,
        bytes,
        rss,
    })
}

/// Which speakers to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Systems {
    /// GoBGP and ferrolb, side by side.
    Both,
    /// ferrolb only.
    Ferrolb,
}

/// Runs the speakers for every size and prints a table.
pub fn run(sizes: &[u32], systems: Systems) -> Result<(), Error> {
    println!("bench bgp-scale: N /32s from 198.18.0.0/15, speaker on node1 → BIRD 2 on r1 (eBGP)");
    for &n in sizes {
        if systems == Systems::Both {
            print_row(&gobgp(n)?);
        }
        print_row(&ferrolb(n)?);
    }
    Ok(())
}

fn print_row(r: &ScaleResult) {
    println!(
        "{:<10} {:>7} prefixes: RIB {:>8.0} ms, kernel {:>8.0} ms, withdraw {:>8.0} ms, {} UPDATEs, {:>10} bytes, RSS {}",
        r.system,
        r.prefixes,
        ms(r.to_rib),
        ms(r.to_kernel),
        ms(r.withdraw),
        r.updates.map_or("?".into(), |u| u.to_string()),
        r.bytes,
        r.rss.map_or("?".into(), |b| format!("{:.1} MB", b as f64 / 1e6)),
    );
}
