//! The speakers of `bench bgp-scale`, each fed through its own user's input: ferrolb a
//! static file, BIRD an included file of static routes, GoBGP an MRT dump, ExaBGP its API.

use super::*;

/// ferrolb-speaker in static mode, started with no Service.
pub(super) struct FerrolbFeed {
    sp: Speaker,
    ns: Netns,
    metrics: std::net::SocketAddr,
    file: String,
}

impl FerrolbFeed {
    pub(super) fn start(lab: &Lab, bin: &Path, n: u32) -> Result<Self, Error> {
        let metrics: std::net::SocketAddr = ([127, 0, 0, 1], 9473).into();
        // Info, as an operator runs it: the testbed's default (debug) logs every address.
        let env = [("RUST_LOG".to_string(), "info".to_string())];
        let sp = Speaker::start_env(
            lab,
            1,
            &ferrolb_static_file(0),
            bin,
            &["--metrics-addr", &metrics.to_string()],
            &env,
        )?;
        Ok(FerrolbFeed { sp, ns: lab.node(1).clone(), metrics, file: ferrolb_static_file(n) })
    }
}

impl Feed for FerrolbFeed {
    fn connect_timeout(&self) -> Duration {
        Duration::from_secs(120)
    }

    fn announce(&mut self) -> Result<(), Error> {
        self.sp.replace_file(&self.file)
    }

    fn withdraw(&mut self) -> Result<(), Error> {
        self.sp.replace_file(&ferrolb_static_file(0))
    }

    fn updates_sent(&mut self) -> Option<u64> {
        // The metrics tick once a second.
        std::thread::sleep(Duration::from_millis(1200));
        scrape_updates_sent(&self.ns, self.metrics).ok().flatten()
    }

    fn pid(&mut self) -> Option<i32> {
        self.sp.pid()
    }
}

/// A second BIRD on node1 as the speaker: a static protocol whose routes come from an
/// included file, exported over eBGP to r1.
pub(super) struct BirdFeed {
    bird: Bird,
    routes: PathBuf,
    n: u32,
}

/// The name of the speaker BIRD's lab subdirectory (config, socket, routes).
const BIRD_SPEAKER: &str = "bird-speaker";

impl BirdFeed {
    pub(super) fn start(lab: &Lab, n: u32) -> Result<Self, Error> {
        // The router driver's config, turned around: node1's ASN, r1 as the one active
        // neighbour.
        let spec = RouterSpec {
            asn: addressing::NODE_ASN,
            router_id: addressing::node_v4(1),
            peer_as: PeerAs::Asn(addressing::ROUTER_ASN),
            ranges: Vec::new(),
            neighbors: vec![addressing::ROUTER_V4.into()],
            active: true,
            ..RouterSpec::default()
        };
        let dir = lab.subdir(BIRD_SPEAKER)?;
        let routes = dir.join("routes.conf");
        std::fs::write(&routes, "")?;
        let conf = bird_speaker_config(&routers::bird::config(&spec), &routes)?;
        // `Bird::start_in` writes the plain driver config; the speaker's (export and the
        // static protocol) is loaded by `configure` before the session is waited for.
        let bird = Bird::start_in(lab, lab.node(1), BIRD_SPEAKER, &spec)?;
        std::fs::write(dir.join("bird.conf"), conf)?;
        bird_configure(&bird)?;
        Ok(BirdFeed { bird, routes, n })
    }

    fn set_routes(&self, n: u32) -> Result<(), Error> {
        let mut text = String::with_capacity(n as usize * 32);
        for ip in mrt::bulk_prefixes(n) {
            let _ = writeln!(text, "route {ip}/32 blackhole;");
        }
        std::fs::write(&self.routes, text)?;
        bird_configure(&self.bird)
    }
}

/// The driver's `config` with IPv4 static routes exported to the BGP neighbour and a
/// static protocol whose routes are `include`d from `routes`.
pub(super) fn bird_speaker_config(driver: &str, routes: &Path) -> Result<String, Error> {
    let missing = || Error::Parse("bird::config: no IPv4 BGP channel to export from".into());
    let channel = driver.find("  ipv4 { import filter").ok_or_else(missing)?;
    let export = channel + driver[channel..].find("export none;").ok_or_else(missing)?;
    let mut c = driver.to_string();
    c.replace_range(export..export + "export none;".len(), "export where source = RTS_STATIC;");
    // `include` is read by BIRD's lexer and must start a line.
    let _ = write!(c, "protocol static bulk {{\n  ipv4;\ninclude \"{}\";\n}}\n", routes.display());
    Ok(c)
}

/// `birdc configure`, failing unless BIRD says it reconfigured.
fn bird_configure(bird: &Bird) -> Result<(), Error> {
    let out = bird.birdc("configure")?;
    if out.contains("Reconfigured") || out.contains("Reconfiguration in progress") {
        Ok(())
    } else {
        Err(Error::Command { command: "birdc configure".into(), detail: out.trim().to_string() })
    }
}

impl Feed for BirdFeed {
    fn announce(&mut self) -> Result<(), Error> {
        self.set_routes(self.n)
    }

    fn withdraw(&mut self) -> Result<(), Error> {
        self.set_routes(0)
    }

    fn pid(&mut self) -> Option<i32> {
        Some(self.bird.process().pid())
    }
}

/// The GoBGP speaker: no neighbour and no route in its config; r1 is added by CLI.
fn gobgp_speaker_config() -> String {
    format!(
        "[global.config]\n  as = {}\n  router-id = \"{}\"\n  port = -1\n",
        addressing::NODE_ASN,
        addressing::node_v4(1)
    )
}

/// Destinations in GoBGP's global IPv4 RIB (`gobgp global rib summary`).
fn gobgp_rib_count(text: &str) -> Result<u64, Error> {
    text.split_whitespace()
        .skip_while(|w| *w != "Destination:")
        .nth(1)
        .and_then(|n| n.trim_end_matches(',').parse().ok())
        .ok_or_else(|| Error::Parse(format!("gobgp rib summary: {text}")))
}

/// Duplicates appended to every file given to `gobgp mrt inject`: 3.10's CLI can exit
/// before its stream is flushed, and GoBGP then holds only a leading part of the file
/// (up to ~2 000 paths short, seen here). Injecting a path twice changes nothing, so
/// a lost tail of padding loses nothing.
const GOBGP_PADDING: usize = 4_000;

/// How long GoBGP's RIB may stay short and unchanged before the rest is injected again.
const GOBGP_STALL: Duration = Duration::from_millis(500);

/// GoBGP as the speaker, fed by `gobgp mrt inject` from an MRT file written beforehand.
pub(super) struct GoBgpFeed {
    ns: Netns,
    proc: Proc,
    dir: PathBuf,
    prefixes: Vec<std::net::Ipv4Addr>,
    /// All the prefixes, then the padding.
    dump: PathBuf,
}

impl GoBgpFeed {
    pub(super) fn start(lab: &Lab, n: u32) -> Result<Self, Error> {
        let dir = lab.subdir("gobgp-speaker")?;
        let conf = dir.join("gobgpd.toml");
        std::fs::write(&conf, gobgp_speaker_config())?;
        let node = lab.node(1);
        let proc = lab.spawn(node, routers::gobgp::daemon("gobgpd-speaker", &conf))?;
        let prefixes: Vec<_> = mrt::bulk_prefixes(n).collect();
        let dump = dir.join("all.mrt");
        let feed = GoBgpFeed { ns: node.clone(), proc, dir, prefixes, dump };
        feed.write_dump(&feed.dump, 0)?;
        wait::until("gobgpd API", Duration::from_secs(15), || Ok(feed.cli(&["global"]).ok().map(|_| ())))?;
        feed.cli(&[
            "neighbor",
            "add",
            &addressing::ROUTER_V4.to_string(),
            "as",
            &addressing::ROUTER_ASN.to_string(),
        ])?;
        Ok(feed)
    }

    /// Writes the prefixes from index `from` on, then [`GOBGP_PADDING`] of them again.
    fn write_dump(&self, path: &Path, from: usize) -> Result<(), Error> {
        let rest = &self.prefixes[from.min(self.prefixes.len())..];
        let paths = rest.iter().chain(rest.iter().cycle().take(GOBGP_PADDING)).copied();
        std::fs::write(path, mrt::dump_host_routes(paths, addressing::node_v4(1)))?;
        Ok(())
    }

    fn inject(&self, dump: &Path) -> Result<(), Error> {
        self.cli(&["mrt", "inject", "global", &dump.to_string_lossy()]).map(|_| ())
    }

    fn cli(&self, args: &[&str]) -> Result<String, Error> {
        let mut argv = vec!["gobgp", "-u", "127.0.0.1", "-p", "50051"];
        argv.extend_from_slice(args);
        self.ns.exec(&argv)
    }

    fn rib_count(&self) -> Result<u64, Error> {
        gobgp_rib_count(&self.cli(&["global", "rib", "-a", "ipv4", "summary"])?)
    }
}

impl Feed for GoBgpFeed {
    /// One `gobgp mrt inject`; should GoBGP stop short of the padding, the prefixes
    /// after the last it holds (injection keeps the file's order) are injected again.
    fn announce(&mut self) -> Result<(), Error> {
        self.inject(&self.dump)?;
        let want = self.prefixes.len() as u64;
        let (mut held, mut since) = (0, Instant::now());
        for repair in 1..=10 {
            loop {
                let now = self.rib_count()?;
                if now >= want {
                    return Ok(());
                }
                if now != held {
                    (held, since) = (now, Instant::now());
                } else if since.elapsed() > GOBGP_STALL {
                    break;
                }
                std::thread::sleep(observe::POLL);
            }
            let rest = self.dir.join(format!("rest-{repair}.mrt"));
            self.write_dump(&rest, usize::try_from(held).unwrap_or(usize::MAX))?;
            self.inject(&rest)?;
            since = Instant::now();
        }
        Err(Error::Parse(format!("GoBGP holds {held} of {want} prefixes after 10 injections of the rest")))
    }

    fn withdraw(&mut self) -> Result<(), Error> {
        self.cli(&["global", "rib", "-a", "ipv4", "del", "all"]).map(|_| ())
    }

    fn updates_sent(&mut self) -> Option<u64> {
        let text = self.cli(&["neighbor", &addressing::ROUTER_V4.to_string(), "-j"]).ok()?;
        let stats: serde_json::Value = serde_json::from_str(&text).ok()?;
        stats["state"]["messages"]["sent"]["update"].as_u64()
    }

    fn pid(&mut self) -> Option<i32> {
        Some(self.proc.pid())
    }
}

/// ExaBGP's API process for the speaker: copies what the bench writes into a FIFO to
/// ExaBGP, as the lines arrive.
const EXABGP_FEEDER: &str = r#"import os, sys
path = sys.argv[1]
while True:
    fd = os.open(path, os.O_RDONLY)
    while True:
        data = os.read(fd, 1 << 16)
        if not data:
            break
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    os.close(fd)
"#;

/// ExaBGP as the speaker, its routes given as `announce route` lines on its API.
pub(super) struct ExaBgpFeed {
    proc: Proc,
    input: std::fs::File,
    n: u32,
}

impl ExaBgpFeed {
    pub(super) fn start(lab: &Lab, n: u32) -> Result<Self, Error> {
        let dir = lab.subdir("exabgp-speaker")?;
        let script = dir.join("feeder.py");
        let fifo = dir.join("input");
        std::fs::write(&script, EXABGP_FEEDER)?;
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).map_err(|e| {
            Error::Command { command: format!("mkfifo {}", fifo.display()), detail: e.to_string() }
        })?;
        let neighbor = ExaNeighbor::to_router(
            addressing::node_ip(1),
            addressing::ROUTER_V4.into(),
            addressing::node_v4(1),
        );
        // The driver's config is the recording peer's, which sends one UPDATE per
        // prefix; as a speaker ExaBGP packs prefixes with the same attributes (its default).
        let conf = routers::exabgp::config(&[neighbor], &script.to_string_lossy(), &fifo.to_string_lossy())
            .replace("group-updates false", "group-updates true");
        let conf_path = dir.join("exabgp.conf");
        std::fs::write(&conf_path, conf)?;
        let proc = lab.spawn(
            lab.node(1),
            Spawn::new("exabgp-speaker", &["exabgp", &conf_path.to_string_lossy()])
                .env("exabgp_daemon_user", "root")
                .env("exabgp_daemon_drop", "false")
                .env("exabgp_daemon_daemonize", "false")
                .env("exabgp_api_cli", "false")
                // No "done" per command: nobody reads them.
                .env("exabgp_api_ack", "false")
                .env("exabgp_log_destination", "stdout")
                .env("exabgp_log_level", "INFO"),
        )?;
        let input = wait::until("ExaBGP's API process to open its FIFO", Duration::from_secs(30), || {
            Ok(open_fifo_writer(&fifo).ok())
        })?;
        Ok(ExaBgpFeed { proc, input, n })
    }

    fn write_lines(&mut self, verb: &str) -> Result<(), Error> {
        use std::io::Write as _;
        let mut text = String::with_capacity(self.n as usize * 48);
        for ip in mrt::bulk_prefixes(self.n) {
            let _ = writeln!(text, "{verb} route {ip}/32 next-hop self");
        }
        self.input.write_all(text.as_bytes())?;
        Ok(())
    }
}

/// Opens the write end of a FIFO, failing (ENXIO) while nobody reads it; the file
/// returned blocks on write.
fn open_fifo_writer(path: &Path) -> Result<std::fs::File, Error> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new().write(true).custom_flags(OFlag::O_NONBLOCK.bits()).open(path)?;
    fcntl(&f, FcntlArg::F_SETFL(OFlag::empty()))
        .map_err(|e| Error::Command { command: "fcntl F_SETFL".into(), detail: e.to_string() })?;
    Ok(f)
}

impl Feed for ExaBgpFeed {
    fn announce(&mut self) -> Result<(), Error> {
        self.write_lines("announce")
    }

    fn withdraw(&mut self) -> Result<(), Error> {
        self.write_lines("withdraw")
    }

    fn pid(&mut self) -> Option<i32> {
        Some(self.proc.pid())
    }
}
