//! `bench active-active`: connection rate and throughput through one L2 address as the
//! nodes serving it grow (1, 2, 3 …), served by one elected node (`SingleOwner`) and by
//! every node (`ActiveActive`) in the same run, and what active-active costs the
//! segment: how many frames the nodes' NICs receive for each frame r1 sends the address.
//!
//! The nodes are network namespaces sharing this machine's cores: the figures show what
//! each mode costs and where flooding goes, not how far more machines would scale.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use ferrolb_lab::client::{EchoServer, flow_split, open_flows};
use ferrolb_lab::netns::{self, Netns};
use ferrolb_lab::speaker::{Speaker, write_membership_key, yaml};
use ferrolb_lab::{Error, Lab, LabConfig, addressing, wait};

/// The echo port (connection rate) and the sink port (throughput).
const ECHO: u16 = 8080;
const SINK: u16 = 8081;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Node counts, each a lab of its own.
    pub nodes: Vec<usize>,
    /// Length of each measurement.
    pub seconds: u64,
    /// Client threads opening connections, and parallel streams for throughput.
    pub streams: usize,
}

mod write;

pub use write::{FILE, rewrite, write};

/// One mode at one node count.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Row {
    /// Nodes serving the address.
    pub nodes: usize,
    /// `SingleOwner` or `ActiveActive`.
    pub mode: String,
    /// Connections opened, greeted and closed per second.
    pub connections_per_s: f64,
    /// Connections that failed meanwhile.
    pub failed: u64,
    /// Bytes per second the client's streams sent, MB/s.
    pub megabytes_per_s: f64,
    /// Frames the nodes' NICs received per frame r1 sent on the LAN during the streams.
    pub frames_per_frame: f64,
    /// Which node took the connections.
    pub split: BTreeMap<String, usize>,
}

/// Measures every node count in both modes and prints the table.
pub fn run(s: &Settings) -> Result<Vec<Row>, Error> {
    let bin = ferrolb_lab::speaker::binary("release")?;
    let mut rows = Vec::new();
    for &n in &s.nodes {
        for mode in ["SingleOwner", "ActiveActive"] {
            let row = measure(n, mode, &bin, s)?;
            println!(
                "{n} node(s), {mode}: {:.0} connections/s ({} failed), {:.1} MB/s, {:.2} frames received per frame sent, split {:?}",
                row.connections_per_s, row.failed, row.megabytes_per_s, row.frames_per_frame, row.split
            );
            rows.push(row);
        }
    }
    println!("\n{}", table(&rows));
    Ok(rows)
}

/// The rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "| nodes | mode | connections/s | failed | MB/s (client → address) | frames received by the nodes per frame sent |\n|---:|---|---:|---:|---:|---:|\n",
    );
    for r in rows {
        t.push_str(&format!(
            "| {} | {} | {:.0} | {} | {:.1} | {:.2} |\n",
            r.nodes, r.mode, r.connections_per_s, r.failed, r.megabytes_per_s, r.frames_per_frame
        ));
    }
    t
}

fn measure(n: usize, mode: &'static str, bin: &std::path::Path, s: &Settings) -> Result<Row, Error> {
    let lab = Lab::up(LabConfig::nodes(n))?;
    let vip = addressing::lan_v4(220);
    let key = write_membership_key(&lab, "bench")?;
    let mut servers = Vec::new();
    for (i, ns) in lab.nodes().iter().enumerate() {
        lab.add_vip_on_lo(ns, vip)?;
        let name = addressing::node_name(i + 1);
        servers.push(EchoServer::start(ns, SocketAddr::new(vip, ECHO), &name)?);
        servers.push(EchoServer::sink(ns, SocketAddr::new(vip, SINK), &name)?);
    }
    let mut objs: Vec<String> = (1..=n).map(yaml::node).collect();
    objs.push(yaml::pool("lan", &["192.0.2.200-192.0.2.250"]));
    objs.push(yaml::l2_advertisement("lan", &["ipAddressPools: [lan]", &format!("mode: {mode}")]));
    objs.push(yaml::service("web", &[vip]));
    let file = yaml::stream(&objs);
    let key = key.display().to_string();
    let _speakers: Vec<Speaker> = (1..=n)
        .map(|i| Speaker::start_with(&lab, i, &file, bin, &["--membership-key-file", key.as_str()]))
        .collect::<Result<_, _>>()?;
    lab.client().ip(&[
        "route",
        "add",
        &format!("{vip}/32"),
        "via",
        &addressing::ROUTER_LINK_V4.to_string(),
    ])?;
    let source: IpAddr = addressing::CLIENT_LINK_V4.into();
    // Served as the mode says: every node takes connections, or one does.
    let want = if mode == "ActiveActive" { n } else { 1 };
    let mut port = 20000;
    let split =
        wait::until(&format!("{n} node(s) in {mode} take connections"), Duration::from_secs(90), || {
            let flows = open_flows(
                lab.client(),
                source,
                port..port + 60,
                SocketAddr::new(vip, ECHO),
                Duration::from_secs(1),
            )?;
            port += 60;
            let split = flow_split(&flows);
            Ok((!split.contains_key("failed") && split.len() == want).then_some(split))
        })?;
    let seconds = Duration::from_secs(s.seconds);
    let (done, failed) = in_client(&lab, s.streams, move || connections(vip, seconds))?;
    let before = lan_frames(&lab)?;
    let (bytes, _) = in_client(&lab, s.streams, move || stream(vip, seconds))?;
    let after = lan_frames(&lab)?;
    let sent = after.0.saturating_sub(before.0).max(1);
    let received = after.1.saturating_sub(before.1);
    Ok(Row {
        nodes: n,
        mode: mode.to_owned(),
        connections_per_s: done as f64 / seconds.as_secs_f64(),
        failed,
        megabytes_per_s: bytes as f64 / seconds.as_secs_f64() / 1e6,
        frames_per_frame: received as f64 / sent as f64,
        split,
    })
}

/// Runs `work` on `threads` threads inside the client's namespace and sums their (ok, failed).
fn in_client(
    lab: &Lab,
    threads: usize,
    work: impl Fn() -> (u64, u64) + Send + Sync + Copy + 'static,
) -> Result<(u64, u64), Error> {
    let path = lab.client().path();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || -> Result<(u64, u64), Error> {
                netns::enter(&path)?;
                Ok(work())
            })
        })
        .collect();
    let mut total = (0, 0);
    for h in handles {
        let (ok, failed) = h.join().map_err(|_| Error::Thread("client thread panicked".into()))??;
        total = (total.0 + ok, total.1 + failed);
    }
    Ok(total)
}

/// Opens, greets and closes connections to the echo port until `seconds` pass.
fn connections(vip: IpAddr, seconds: Duration) -> (u64, u64) {
    let end = Instant::now() + seconds;
    let (mut ok, mut failed) = (0, 0);
    while Instant::now() < end {
        let one = || -> std::io::Result<()> {
            let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
            // Closed with a reset: thousands of TIME_WAITs would exhaust the ports.
            s.set_linger(Some(Duration::ZERO))?;
            s.connect_timeout(&SocketAddr::new(vip, ECHO).into(), Duration::from_secs(1))?;
            let mut t: TcpStream = s.into();
            t.set_read_timeout(Some(Duration::from_secs(1)))?;
            let mut b = [0u8; 16];
            let _ = t.read(&mut b)?;
            Ok(())
        };
        match one() {
            Ok(()) => ok += 1,
            Err(_) => failed += 1,
        }
    }
    (ok, failed)
}

/// Sends as fast as it can to the sink port until `seconds` pass; returns (bytes, 0).
fn stream(vip: IpAddr, seconds: Duration) -> (u64, u64) {
    let Ok(mut t) = TcpStream::connect_timeout(&SocketAddr::new(vip, SINK), Duration::from_secs(2)) else {
        return (0, 1);
    };
    let _ = t.set_write_timeout(Some(Duration::from_secs(1)));
    let chunk = vec![0u8; 64 * 1024];
    let end = Instant::now() + seconds;
    let mut bytes = 0u64;
    while Instant::now() < end {
        match t.write(&chunk) {
            Ok(n) => bytes += n as u64,
            Err(_) => break,
        }
    }
    (bytes, 0)
}

/// (frames r1 sent on the LAN, frames every node's NIC received).
fn lan_frames(lab: &Lab) -> Result<(u64, u64), Error> {
    let sent = counter(lab.router(), "tx_packets")?;
    let mut received = 0;
    for ns in lab.nodes() {
        received += counter(ns, "rx_packets")?;
    }
    Ok((sent, received))
}

fn counter(ns: &Netns, name: &str) -> Result<u64, Error> {
    let text = ns.exec(&["cat", &format!("/sys/class/net/eth0/statistics/{name}")])?;
    text.trim().parse().map_err(|_| Error::Parse(format!("{name} of {}: {text:?}", ns.name())))
}
