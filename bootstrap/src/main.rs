//! ferrolb-bootstrap: the apiserver VIP as a static pod (see bootstrap/README.md).
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use ferrolb_api::{
    BgpPeer, BgpPeerSpec, Config, ControlPlaneVip, ControlPlaneVipBgp, ControlPlaneVipMember,
    ControlPlaneVipSpec, VipMode,
};
use ferrolb_bootstrap::l2::claims::{Claims, Seen};
use ferrolb_bootstrap::l2::holder::{Event, HANDOVER_WAIT, Holder, Input, Release};
use ferrolb_bootstrap::metrics::Metrics;
use ferrolb_bootstrap::{addr, bgp, checkpoint, credentials, health, l2, manifest, refresh};
use ferrolb_proto::l2::{DEFAULT_TAKEOVER, InterfaceChoice, L2Announcer, L2Config, L2Handle, Owned};
use ferrolb_proto::membership::{MembershipConfig, Seed};
use tokio::sync::watch;

/// Announces the kube-apiserver VIP from a checkpoint, gated on the local apiserver's health.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Announce the VIP of a checkpoint (the static pod's command).
    Run(RunArgs),
    /// Print the static pod manifest.
    Manifest(ManifestArgs),
    /// Checkpoint tools.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The checkpoint file; FILE.prev is the fallback.
    #[arg(long, default_value = manifest::defaults::CHECKPOINT)]
    checkpoint: PathBuf,
    /// This node's name (as in spec.members).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// Metrics (/metrics), liveness (/healthz) and readiness (/readyz) endpoint.
    #[arg(long, alias = "health-addr", default_value = manifest::defaults::METRICS_ADDR)]
    metrics_addr: SocketAddr,
    /// Kubeconfig for the checkpoint refresh; default `bootstrap.kubeconfig` next to the checkpoint.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Name verified in the apiserver certificate when probing a loopback URL.
    #[arg(long, default_value = "kubernetes")]
    apiserver_tls_name: String,
    /// BGP: how long a draining route (GRACEFUL_SHUTDOWN) stays before its withdrawal.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    drain_delay: Duration,
    /// BGP: keep announcing this long after SIGTERM before withdrawing (GRACEFUL_SHUTDOWN meanwhile).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    shutdown_drain: Duration,
}

#[derive(Args, Debug)]
struct ManifestArgs {
    /// Container image.
    #[arg(long)]
    image: Option<String>,
    /// Checkpoint path (inside --config-dir).
    #[arg(long, default_value = manifest::defaults::CHECKPOINT)]
    checkpoint: String,
    /// Host directory mounted into the pod.
    #[arg(long, default_value = manifest::defaults::CONFIG_DIR)]
    config_dir: String,
    /// Cluster CA mounted read-only.
    #[arg(long, default_value = manifest::defaults::CA_FILE)]
    ca_file: String,
    /// Metrics and health endpoint of the pod (loopback; the probes use it).
    #[arg(long, alias = "health-addr", default_value = manifest::defaults::METRICS_ADDR)]
    metrics_addr: String,
    /// RUST_LOG of the container.
    #[arg(long, default_value = "info")]
    log_level: String,
}

#[derive(Subcommand, Debug)]
enum CheckpointCommand {
    /// Write a first checkpoint (and refresh credentials); needs no apiserver.
    Init(Box<InitArgs>),
    /// Print the read-only RBAC the refresh credentials need.
    Rbac,
}

#[derive(Args, Debug)]
struct InitArgs {
    /// Checkpoint to write (FILE.prev keeps the previous one).
    #[arg(long, default_value = manifest::defaults::CHECKPOINT)]
    checkpoint: PathBuf,
    /// Take the ControlPlaneVIP (and its BGPPeers/BFDProfiles) from this YAML file of objects.
    #[arg(long, conflicts_with_all = ["address"])]
    from: Option<PathBuf>,
    /// ControlPlaneVIP name.
    #[arg(long, default_value = "apiserver")]
    name: String,
    /// The VIP.
    #[arg(long, required_unless_present = "from")]
    address: Option<String>,
    /// Apiserver port behind the VIP.
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// L2 or BGP.
    #[arg(long, default_value = "L2", value_parser = ["L2", "BGP"])]
    mode: String,
    /// L2 interface (default: the one whose subnet holds the VIP).
    #[arg(long)]
    interface: Option<String>,
    /// A member as NAME=ADDRESS; repeat per control-plane node.
    #[arg(long = "member")]
    members: Vec<String>,
    /// L2: the membership key file (spec.membershipKeyFile; default as in API.md).
    #[arg(long)]
    membership_key_file: Option<String>,
    /// L2: the membership UDP port (spec.membershipPort; default 7947).
    #[arg(long)]
    membership_port: Option<u16>,
    /// A BGP peer as NAME=ADDRESS; repeat.
    #[arg(long = "bgp-peer")]
    peers: Vec<String>,
    /// Our ASN towards the BGP peers.
    #[arg(long, default_value_t = 64513)]
    my_asn: u32,
    /// The peers' ASN.
    #[arg(long, default_value_t = 64512)]
    peer_asn: u32,
    /// Community on the VIP route; repeat.
    #[arg(long = "community")]
    communities: Vec<String>,
    /// Health check URL.
    #[arg(long)]
    health_url: Option<String>,
    /// CA verifying the local apiserver (health check and refresh).
    #[arg(long, default_value = manifest::defaults::CA_FILE)]
    ca_file: PathBuf,
    /// CA key signing the refresh client certificate.
    #[arg(long, default_value = "/etc/kubernetes/pki/ca.key")]
    ca_key: PathBuf,
    /// Node name for the refresh certificate (CN system:ferrolb-bootstrap:NODE).
    #[arg(long, env = "NODE_NAME")]
    node_name: Option<String>,
    /// Local apiserver URL for the refresh kubeconfig.
    #[arg(long, default_value = "https://127.0.0.1:6443")]
    server: String,
    /// Name verified in the apiserver's certificate.
    #[arg(long, default_value = "kubernetes")]
    apiserver_tls_name: String,
    /// Do not make refresh credentials (the checkpoint then never refreshes).
    #[arg(long)]
    no_credentials: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    s.parse::<ferrolb_api::Duration>().map(|d| d.std()).map_err(|e| e.to_string())
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().init(),
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli.command {
        Command::Manifest(a) => print_manifest(a),
        Command::Checkpoint(CheckpointCommand::Rbac) => {
            print!("{}", credentials::RBAC_YAML);
            Ok(())
        }
        Command::Checkpoint(CheckpointCommand::Init(a)) => init(*a),
        Command::Run(a) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(run(a))),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line: the chain joined, never a backtrace.
            eprintln!("ferrolb-bootstrap: {}", format!("{e:#}").replace('\n', " "));
            std::process::ExitCode::from(2)
        }
    }
}

fn print_manifest(a: ManifestArgs) -> anyhow::Result<()> {
    let mut o = manifest::Options {
        checkpoint: a.checkpoint,
        config_dir: a.config_dir,
        ca_file: a.ca_file,
        metrics_addr: a.metrics_addr,
        log_level: a.log_level,
        ..Default::default()
    };
    if let Some(i) = a.image {
        o.image = i;
    }
    print!("{}", manifest::render(&o).map_err(|e| anyhow!(e))?);
    Ok(())
}

fn split_pair<'a>(flag: &str, s: &'a str) -> anyhow::Result<(&'a str, &'a str)> {
    s.split_once('=').ok_or_else(|| anyhow!("--{flag} {s:?}: write NAME=ADDRESS"))
}

fn init(a: InitArgs) -> anyhow::Result<()> {
    let file = a.checkpoint.display().to_string();
    let config = match &a.from {
        Some(from) => {
            let stream = ferrolb_api::read_stream(from).map_err(|e| anyhow!(checkpoint::one_line(&e)))?;
            let config = stream.config();
            let name = if config.control_plane_vips.len() == 1 {
                kube::ResourceExt::name_any(&config.control_plane_vips[0])
            } else {
                a.name.clone()
            };
            config
                .for_control_plane_vip(&name)
                .ok_or_else(|| anyhow!("{}: no ControlPlaneVIP {name:?}; pass --name", from.display()))?
        }
        None => {
            let address = a.address.clone().unwrap_or_default();
            let mut spec = ControlPlaneVipSpec::new(address);
            spec.port = a.port;
            spec.mode = if a.mode == "BGP" { VipMode::Bgp } else { VipMode::L2 };
            spec.interface = a.interface.clone();
            if let Some(f) = &a.membership_key_file {
                spec.membership_key_file = f.clone();
            }
            if let Some(p) = a.membership_port {
                spec.membership_port = p;
            }
            for m in &a.members {
                let (name, address) = split_pair("member", m)?;
                spec.members.push(ControlPlaneVipMember { name: name.into(), address: address.into() });
            }
            if let Some(u) = &a.health_url {
                spec.health_check.url = u.clone();
            }
            spec.health_check.ca_file = a.ca_file.display().to_string();
            let mut config = Config::default();
            if !a.peers.is_empty() || spec.mode == VipMode::Bgp {
                let mut names = Vec::new();
                for p in &a.peers {
                    let (name, address) = split_pair("bgp-peer", p)?;
                    names.push(name.to_string());
                    config.peers.push(BgpPeer::new(name, BgpPeerSpec::new(a.my_asn, a.peer_asn, address)));
                }
                spec.bgp = Some(ControlPlaneVipBgp { peers: names, communities: a.communities.clone() });
            }
            config.control_plane_vips.push(ControlPlaneVip::new(&a.name, spec));
            config
        }
    };
    let name = kube::ResourceExt::name_any(&config.control_plane_vips[0]);
    let text = checkpoint::render(&config, &name).map_err(|e| anyhow!("{file}: {e}"))?;
    let stream = ferrolb_api::parse_stream(&file, &text).map_err(|e| anyhow!(checkpoint::one_line(&e)))?;
    checkpoint::from_stream(&file, stream).map_err(|e| anyhow!(e))?;
    if let Some(dir) = a.checkpoint.parent() {
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    }
    ferrolb_api::write_atomically(&a.checkpoint, text.as_bytes(), true)?;
    eprintln!("wrote {file}");
    if !a.no_credentials {
        let node = a.node_name.clone().ok_or_else(|| {
            anyhow!("--node-name is needed for the refresh credentials (or pass --no-credentials)")
        })?;
        let req = credentials::Request {
            node,
            ca_cert: a.ca_file.clone(),
            ca_key: a.ca_key.clone(),
            dir: a.checkpoint.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(".")),
            server: a.server.clone(),
            tls_server_name: a.apiserver_tls_name.clone(),
            days: 365,
        };
        let w = credentials::write(&req)?;
        eprintln!(
            "wrote {} (apply `ferrolb-bootstrap checkpoint rbac` once per cluster)",
            w.kubeconfig.display()
        );
    }
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => {}
                _ = i.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// Why an announcing loop ended.
#[derive(Debug)]
enum Stop {
    /// SIGTERM / SIGINT: drain and exit 0.
    Signal,
    /// The checkpoint was refreshed with a different configuration: drain, restart with it.
    Reload(Box<checkpoint::Checkpoint>),
}

/// Resolves on a signal, or when the refresh rewrote the checkpoint into something
/// different from `current` (an unreadable rewrite is logged and ignored).
async fn wait_stop(
    shutdown: &mut std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    written: &mut watch::Receiver<u64>,
    path: &Path,
    current: &checkpoint::Checkpoint,
    metrics: &Metrics,
) -> Stop {
    loop {
        tokio::select! {
            _ = shutdown.as_mut() => return Stop::Signal,
            r = written.changed() => {
                if r.is_err() {
                    shutdown.as_mut().await;
                    return Stop::Signal;
                }
                metrics.checkpoint_refreshes.inc();
                match checkpoint::load_one(path) {
                    Ok(new) if new.config != current.config => return Stop::Reload(Box::new(new)),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "refreshed checkpoint unusable; keeping the running one"),
                }
            }
        }
    }
}

async fn run(a: RunArgs) -> anyhow::Result<()> {
    let mut cp = checkpoint::load(&a.checkpoint).map_err(|e| anyhow!(e))?;
    for w in &cp.warnings {
        tracing::warn!("{w}");
    }
    let vip_name = kube::ResourceExt::name_any(cp.vip());
    let metrics = Arc::new(Metrics::new());
    metrics
        .clone()
        .serve(a.metrics_addr)
        .await
        .with_context(|| format!("--metrics-addr {}", a.metrics_addr))?;

    // Refresh the checkpoint from the local apiserver when credentials exist.
    let (written_tx, mut written_rx) = watch::channel(0u64);
    let kubeconfig = a
        .kubeconfig
        .clone()
        .unwrap_or_else(|| a.checkpoint.parent().unwrap_or(Path::new(".")).join("bootstrap.kubeconfig"));
    if kubeconfig.exists() {
        if let Err(e) = start_refresh(&kubeconfig, &a.checkpoint, &vip_name, written_tx, &metrics).await {
            tracing::warn!(error = %format!("{e:#}"), "checkpoint refresh disabled");
        }
    } else {
        tracing::info!(kubeconfig = %kubeconfig.display(), "no refresh credentials; the checkpoint is not refreshed");
    }
    let addrs = addr::Addresses::connect()?;
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        let vip = cp.vip().clone();
        let ip: IpAddr = vip.spec.address.trim().parse().map_err(|_| anyhow!("spec.address is not an IP"))?;
        if !vip.spec.members.iter().any(|m| m.name == a.node_name) {
            bail!(
                "{}: ControlPlaneVIP/{vip_name}: spec.members: node {:?} is not a member; add it or fix --node-name",
                cp.path.display(),
                a.node_name
            );
        }
        tracing::info!(file = %cp.path.display(), vip = %ip, mode = ?vip.spec.mode, node = %a.node_name, "checkpoint loaded");
        metrics.checkpoint_generation.inc();
        metrics.checkpoint_from_previous.set(i64::from(cp.path != a.checkpoint));
        let prober = health::Prober::new(&vip.spec.health_check, &a.apiserver_tls_name).map_err(|e| {
            anyhow!("{}: ControlPlaneVIP/{vip_name}: spec.healthCheck: {e}", cp.path.display())
        })?;
        let interval = vip.spec.health_check.interval().map(|d| d.std()).unwrap_or(Duration::from_secs(1));
        let threshold = u32::try_from(vip.spec.health_check.failure_threshold).unwrap_or(3);
        let timeout = vip.spec.health_check.timeout().map(|d| d.std()).unwrap_or(Duration::from_secs(1));
        metrics.set_liveness_window(Metrics::liveness_window(interval, timeout));
        let (health_tx, health_rx) = watch::channel(false);
        let gate = health::Gate::new(interval, threshold, health::SUCCESS_THRESHOLD);
        let health_task = tokio::spawn(health::run(prober, gate, health_tx, metrics.clone()));
        let stop = wait_stop(&mut shutdown, &mut written_rx, &a.checkpoint, &cp, &metrics);
        let result = match vip.spec.mode {
            VipMode::Bgp => run_bgp(&a, &cp, ip, &addrs, health_rx, &metrics, stop).await,
            VipMode::L2 => run_l2(&a, &vip, ip, &addrs, health_rx, &metrics, stop).await,
        };
        health_task.abort();
        metrics.set_ready(false);
        match result? {
            Stop::Signal => break,
            Stop::Reload(new) => {
                tracing::info!(file = %new.path.display(), "checkpoint changed; restarting the announcement with it");
                cp = *new;
            }
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// Starts the checkpoint refresh from the local apiserver with `kubeconfig`, and the
/// watch on its client certificate's expiry.
async fn start_refresh(
    kubeconfig: &Path,
    checkpoint: &Path,
    vip_name: &str,
    written: watch::Sender<u64>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<()> {
    let config = local_config(kubeconfig).await?;
    match credentials::ClientCertificate::of(&config, kubeconfig) {
        Ok(Some(cert)) => {
            tokio::spawn(credentials::watch_expiry(cert, metrics.clone()));
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the refresh client certificate's expiry"),
    }
    let client = kube::Client::try_from(with_deadlines(config))?;
    let resync = Duration::from_secs(60);
    let path = checkpoint.to_path_buf();
    tokio::spawn(refresh::run(client, vip_name.into(), path, resync, Some(written), metrics.clone()));
    Ok(())
}

/// The client configuration of `kubeconfig`, refused unless it points at the local apiserver.
async fn local_config(kubeconfig: &Path) -> anyhow::Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let host = config.cluster_url.host().unwrap_or_default().trim_matches(['[', ']']).to_string();
    let loopback = host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        bail!(
            "{}: server {} is not the local apiserver (loopback only, never the VIP)",
            kubeconfig.display(),
            config.cluster_url
        );
    }
    Ok(config)
}

/// Deadlines on every request of the client, as in the speaker and the controller (kube's
/// defaults have no read timeout: a request the apiserver accepted and never answers would
/// wait forever). The refresh's reads have a tighter one (`refresh::CALL_TIMEOUT`); these
/// bound the watch's list and start and a stream that goes silent. The read timeout must
/// outlast a quiet watch, which the apiserver ends after the 290 s kube-runtime asks for.
fn with_deadlines(mut config: kube::Config) -> kube::Config {
    config.connect_timeout = Some(Duration::from_secs(10));
    config.write_timeout = Some(Duration::from_secs(30));
    config.read_timeout = Some(Duration::from_secs(300));
    // From when each request is sent, not from when its pooled connection went idle.
    config.reset_reader_on_write = true;
    config
}

async fn run_bgp(
    a: &RunArgs,
    cp: &checkpoint::Checkpoint,
    ip: IpAddr,
    addrs: &addr::Addresses,
    mut health: watch::Receiver<bool>,
    metrics: &Metrics,
    stop: impl std::future::Future<Output = Stop>,
) -> anyhow::Result<Stop> {
    let vip = cp.vip();
    let configs = bgp::session_configs(&cp.config, vip, &a.node_name)
        .map_err(|e| anyhow!("{}: {e}", cp.path.display()))?;
    if let Err(e) = addr::set_arp_sysctls() {
        tracing::warn!(error = %e, "cannot set arp_ignore=1/arp_announce=2; set them on the node (see README) or every node answers ARP for the VIP");
    }
    match addrs.ensure("lo", ip, addr::host_len(ip)).await {
        Ok(addr::Ensured::Foreign) => {
            tracing::warn!(%ip, "the VIP is already on lo, not added by ferrolb; leaving it")
        }
        Ok(_) => {}
        Err(e) => bail!("adding the VIP {ip} to lo: {e}"),
    }
    let announcer = bgp::Announcer::start(configs, vip, ip);
    let mut drain = bgp::Drain::new(a.drain_delay);
    metrics.set_ready(true);
    tokio::pin!(stop);
    let mut phase = drain.phase();
    let reason;
    loop {
        let deadline = drain.poll_timeout();
        tokio::select! {
            s = &mut stop => { reason = s; break }
            r = health.changed() => {
                if r.is_err() { bail!("the health checker stopped") }
                let h = *health.borrow_and_update();
                drain.set_healthy(tokio::time::Instant::now(), h);
            }
            _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                drain.handle_timeout(tokio::time::Instant::now());
            }
        }
        if drain.phase() != phase {
            phase = drain.phase();
            tracing::info!(?phase, "BGP announcement of the VIP");
            announcer.apply(phase);
            publish_phase(metrics, phase);
        }
    }
    // SIGTERM: GRACEFUL_SHUTDOWN first, withdraw after the shutdown drain.
    let mut drain = bgp::Drain::new(a.shutdown_drain);
    if phase != bgp::Phase::Withdrawn {
        drain.set_healthy(tokio::time::Instant::now(), true);
        drain.shutdown(tokio::time::Instant::now());
        tracing::info!("draining: GRACEFUL_SHUTDOWN, then withdraw");
        announcer.apply(drain.phase());
        publish_phase(metrics, drain.phase());
        if let Some(d) = drain.poll_timeout() {
            tokio::time::sleep_until(d).await;
        }
        announcer.apply(bgp::Phase::Withdrawn);
        publish_phase(metrics, bgp::Phase::Withdrawn);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    announcer.shutdown().await;
    if addrs.release("lo", ip).await? {
        tracing::info!(%ip, "VIP removed from lo");
    }
    Ok(reason)
}

fn publish_phase(metrics: &Metrics, phase: bgp::Phase) {
    metrics.vip_announced.set(i64::from(phase != bgp::Phase::Withdrawn));
    metrics.vip_draining.set(i64::from(matches!(phase, bgp::Phase::Draining { .. })));
}

async fn run_l2(
    a: &RunArgs,
    vip: &ControlPlaneVip,
    ip: IpAddr,
    addrs: &addr::Addresses,
    mut health: watch::Receiver<bool>,
    metrics: &Metrics,
    stop: impl std::future::Future<Output = Stop>,
) -> anyhow::Result<Stop> {
    let ifname = match &vip.spec.interface {
        Some(i) => i.clone(),
        None => addrs.interface_for(ip).await?.ok_or_else(|| {
            anyhow!(
                "ControlPlaneVIP: spec.interface: no interface has a subnet holding {ip}; set spec.interface"
            )
        })?,
    };
    // This process holds nothing yet. An address with our mark is one a predecessor killed
    // before it could release it (SIGKILL, OOM, crash) left behind: the kernel would keep
    // answering ARP/NDP for it beside the elected owner, so it goes now.
    match addrs.release(&ifname, ip).await {
        Ok(true) => {
            tracing::warn!(%ip, interface = %ifname, "removed the VIP a previous run left on the interface")
        }
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "removing a VIP left by a previous run"),
    }
    let (membership, announcer) = start_l2(a, vip, metrics)?;
    let members: Vec<String> = vip.spec.members.iter().map(|m| m.name.clone()).collect();
    let mut holder = Holder::new(&a.node_name, ip, members);
    let claims = watch_claims(addrs, &ifname, ip).await;
    let mut claimed = claims.as_ref().map(Claims::seen);
    let mut live = membership.live_healthy();
    // The VIP is on the interface (or someone else's equal address is) and announced.
    let mut holding = false;
    let mut released: Option<Release> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    metrics.set_ready(true);
    tokio::pin!(stop);
    let reason;
    loop {
        let timeout = holder.poll_timeout();
        tokio::select! {
            s = &mut stop => { reason = s; break }
            r = health.changed() => {
                if r.is_err() { bail!("the health checker stopped") }
                membership.set_local_health(*health.borrow_and_update());
                continue;
            }
            r = live.changed() => {
                if r.is_err() { bail!("membership stopped") }
                let view = live.borrow_and_update().clone();
                holder.handle(Instant::now(), Input::View(view));
            }
            Some(seen) = next_claim(&mut claimed) => {
                let by = claimant(addrs, &vip.spec.members, seen.mac).await;
                holder.handle(Instant::now(), Input::Claim { at: seen.at, by });
            }
            _ = sleep_until(timeout), if timeout.is_some() => holder.handle(Instant::now(), Input::Timeout),
            // Retries an address change that failed.
            _ = tick.tick() => {}
        }
        while let Some(event) = holder.poll_event() {
            match event {
                Event::HandingOver { to } => {
                    tracing::info!(%ip, successor = %to, "another member is elected; keeping the VIP until it announces it")
                }
                Event::Released(why) => released = Some(why),
                Event::Defend => {
                    tracing::info!(%ip, interface = %ifname, "another node announced the VIP; announcing it again");
                    announcer.reannounce();
                }
            }
        }
        if holder.holds() {
            match addrs.ensure(&ifname, ip, addr::host_len(ip)).await {
                Ok(addr::Ensured::Added) => {
                    tracing::info!(%ip, interface = %ifname, live_healthy = ?*live.borrow(), "took the VIP");
                }
                Ok(addr::Ensured::Foreign) if !holding => {
                    tracing::warn!(%ip, interface = %ifname, "the VIP is on the interface but not ferrolb's; leaving it")
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "adding the VIP");
                    continue;
                }
            }
            if !holding {
                // Gratuitous ARP / unsolicited NA burst now, answers while we own it.
                announcer.set_owned(owned(ip, &ifname));
            }
            holding = true;
            metrics.vip_owned.set(1);
        } else if holding {
            announcer.set_owned(Owned::new());
            match addrs.release(&ifname, ip).await {
                Ok(_) => {
                    let because = released.map_or("not elected", Release::as_str);
                    tracing::info!(%ip, interface = %ifname, live_healthy = ?*live.borrow(), because, "released the VIP");
                    holding = false;
                    metrics.vip_owned.set(0);
                }
                Err(e) => tracing::warn!(error = %e, "removing the VIP"),
            }
        }
    }
    // SIGTERM: leave membership first (peers drop us at once and elect a new owner),
    // stop answering, then release only what is ours (release() checks the mark).
    membership.leave().await;
    announcer.shutdown().await;
    if addrs.release(&ifname, ip).await? {
        tracing::info!(%ip, interface = %ifname, "VIP released on shutdown");
    }
    metrics.vip_owned.set(0);
    Ok(reason)
}

/// Watches the VIP's interface for the successor's announcement (make before break, see
/// `l2::holder`); without it a handover ends after `HANDOVER_WAIT`.
async fn watch_claims(addrs: &addr::Addresses, ifname: &str, ip: IpAddr) -> Option<Claims> {
    let watched = match addrs.link(ifname).await {
        Ok((index, Some(mac))) => Claims::watch(ifname, index, mac, ip).map_err(|e| e.to_string()),
        Ok((_, None)) => Err("the interface has no MAC address".into()),
        Err(e) => Err(e.to_string()),
    };
    watched
        .inspect_err(|e| {
            tracing::warn!(
                interface = %ifname, error = %e, wait = ?HANDOVER_WAIT,
                "cannot watch for other members announcing the VIP; a handover keeps the VIP for the wait instead"
            )
        })
        .ok()
}

/// The member whose MAC another node announced the VIP with, from the neighbour table
/// (members talk membership, so their addresses are there). None: not known.
async fn claimant(
    addrs: &addr::Addresses,
    members: &[ControlPlaneVipMember],
    mac: [u8; 6],
) -> Option<String> {
    let at = addrs
        .neighbours_at(mac)
        .await
        .inspect_err(|e| tracing::debug!(error = %e, "looking up who announced the VIP"))
        .ok()?;
    members
        .iter()
        .find(|m| m.address.parse::<IpAddr>().is_ok_and(|a| at.contains(&a)))
        .map(|m| m.name.clone())
}

/// The next announcement of the VIP by another node (never, without a watch).
async fn next_claim(claimed: &mut Option<watch::Receiver<Option<Seen>>>) -> Option<Seen> {
    if let Some(rx) = claimed
        && rx.changed().await.is_ok()
    {
        return *rx.borrow_and_update();
    }
    std::future::pending().await
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

fn owned(ip: IpAddr, ifname: &str) -> Owned {
    Owned::from([(ip, InterfaceChoice::Named(BTreeSet::from([ifname.to_string()])))])
}

/// Reads the membership key and starts membership (seeded with `spec.members` on
/// `spec.membershipPort`) and the ARP/NDP announcer for the VIP's interface.
fn start_l2(
    a: &RunArgs,
    vip: &ControlPlaneVip,
    metrics: &Metrics,
) -> anyhow::Result<(l2::SwimMembership, L2Handle)> {
    let spec = &vip.spec;
    let key_file = &spec.membership_key_file;
    let text = std::fs::read_to_string(key_file).map_err(|e| {
        anyhow!(
            "ControlPlaneVIP: spec.membershipKeyFile: {key_file}: cannot read: {e}; fix: write the members' shared key (at least 32 characters) into it, the same file on every member"
        )
    })?;
    let key = ferrolb_proto::membership::MembershipKey::parse(&text).map_err(|e| {
        anyhow!(
            "ControlPlaneVIP: spec.membershipKeyFile: {key_file}: {e}; fix: write the members' shared key (at least 32 characters) into it"
        )
    })?;
    let port = spec.membership_port;
    let mut seeds = Vec::new();
    let mut advertise = None;
    for m in &spec.members {
        let ip: IpAddr = m.address.parse().map_err(|_| {
            anyhow!("ControlPlaneVIP: spec.members: {}: address {:?} is not an IP address; fix: write the node's address", m.name, m.address)
        })?;
        let addr = SocketAddr::new(ip, port);
        if m.name == a.node_name {
            advertise = Some(addr);
        } else {
            seeds.push(Seed { name: m.name.clone(), addr });
        }
    }
    let advertise = advertise.ok_or_else(|| {
        anyhow!(
            "ControlPlaneVIP: spec.members: node {} is not listed; add it or fix --node-name",
            a.node_name
        )
    })?;
    let mut cfg = MembershipConfig::new(&a.node_name, advertise, seeds, key);
    cfg.bind = SocketAddr::new(advertise.ip(), port);
    let membership = l2::SwimMembership::start_with_metrics(cfg, metrics.membership.clone())
        .map_err(|e| anyhow!("ControlPlaneVIP: spec.membershipPort: membership cannot start: {e}"))?;
    let l2cfg = L2Config { allowed_interfaces: None, takeover: DEFAULT_TAKEOVER.to_vec() };
    let announcer = L2Announcer::spawn(l2cfg, metrics.l2.clone())
        .map_err(|e| anyhow!("L2 announcer cannot start (needs NET_RAW): {e}"))?;
    tracing::info!(advertise = %advertise, "membership started (health carried in the member name)");
    Ok((membership, announcer))
}
