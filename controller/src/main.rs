//! `ferrolb-controller`: the run mode by default; subcommands (e.g. migration) beside it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};
use ferrolb_controller::http::{self, Health};
use ferrolb_controller::leader::LeaseConfig;
use ferrolb_controller::metrics::Metrics;
use ferrolb_controller::{Settings, run};
use ferrolb_runtime::kube_client::{self, Limits};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tracing::info;
use tracing_subscriber::EnvFilter;

/// ferrolb controller: assigns addresses to LoadBalancer Services from IPAddressPools.
#[derive(Parser, Debug)]
#[command(name = "ferrolb-controller", version = env!("FERROLB_VERSION"), about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
}

/// Modes other than running the controller.
#[derive(Subcommand, Debug)]
enum Command {
    /// Print MetalLB's configuration (metallb.io objects, Service annotations) in FILE
    /// as ferrolb objects on stdout; fields it cannot convert go to stderr, one a line.
    MigrateFromMetallb {
        /// YAML stream or List, e.g. from `kubectl get -A -o yaml ipaddresspools,...,services`; `-` reads stdin.
        file: PathBuf,
        /// Write the BGP password Secrets the conversion creates in ferrolb-system (they
        /// hold the passwords) to this new file, mode 0600; they are never printed.
        #[arg(long, value_name = "FILE")]
        secrets_file: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Kubeconfig file; default: in-cluster config, else $KUBECONFIG or ~/.kube/config.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// loadBalancerClass served besides Services with no class.
    #[arg(long, value_name = "CLASS", default_value = ferrolb_api::DEFAULT_LOAD_BALANCER_CLASS)]
    lb_class: String,
    /// Address for /metrics (OpenMetrics), /healthz and /readyz.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7472")]
    metrics_addr: SocketAddr,
    /// Run leader election on a Lease so that several replicas can run; one allocates.
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the Lease and the membership Secret; default: $POD_NAMESPACE, the
    /// service account's namespace, else ferrolb-system.
    #[arg(long, value_name = "NS")]
    namespace: Option<String>,
    /// Identity in the Lease and in Events; default: $POD_NAME, else the host name.
    #[arg(long, value_name = "ID")]
    identity: Option<String>,
    /// How long a leader holds the Lease without renewing it (whole seconds, e.g. 15s).
    #[arg(long, value_name = "DURATION", default_value = "15s")]
    lease_duration: ferrolb_api::Duration,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn default_identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "ferrolb-controller".into())
}

async fn client(kubeconfig: Option<&PathBuf>, metrics: &Metrics) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}: cannot read it", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("--kubeconfig {}: unusable", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no Kubernetes configuration: not in a cluster and no kubeconfig; pass --kubeconfig FILE",
        )?,
    };
    kube_client::client(config, Limits::CONTROLLER, &metrics.kube_received)
        .context("cannot build a Kubernetes client")
}

/// Registers the SIGTERM handler now (before "starting" is logged, so a SIGTERM right after
/// start is never fatal) and resolves on SIGTERM or SIGINT.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot install the SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => info!("SIGTERM received"),
            _ = tokio::signal::ctrl_c() => info!("SIGINT received"),
        }
    })
}

async fn run_controller(args: RunArgs) -> anyhow::Result<()> {
    let lease_duration: Duration = args.lease_duration.into();
    if args.leader_elect && lease_duration < Duration::from_secs(1) {
        anyhow::bail!("--lease-duration {}: must be at least 1s", args.lease_duration);
    }
    let listener = http::bind(args.metrics_addr)
        .await
        .with_context(|| format!("--metrics-addr {}: cannot listen", args.metrics_addr))?;
    let metrics = Metrics::new();
    let client = client(args.kubeconfig.as_ref(), &metrics).await?;
    let namespace = args.namespace.unwrap_or_else(ferrolb_api::default_namespace);
    let identity = args.identity.unwrap_or_else(default_identity);
    let leader = args.leader_elect.then(|| LeaseConfig {
        namespace: namespace.clone(),
        name: "ferrolb-controller".into(),
        identity: identity.clone(),
        duration: lease_duration,
        retry: (lease_duration / 5).max(Duration::from_millis(200)),
    });
    let settings = Settings { lb_class: args.lb_class, namespace, identity, leader };
    let health = Health::default();
    let shutdown = shutdown_signal()?;
    let server = tokio::spawn(http::serve(listener, metrics.clone(), health.clone()));
    info!(lb_class = %settings.lb_class, namespace = %settings.namespace, identity = %settings.identity,
          leader_elect = settings.leader.is_some(), version = env!("CARGO_PKG_VERSION"), "starting");
    let result = run(client, settings, metrics, health, shutdown).await;
    server.abort();
    result.map_err(Into::into)
}

/// Counts live heap bytes for `ferrolb_controller_heap_bytes`.
#[global_allocator]
static ALLOC: ferrolb_runtime::heap::Counting = ferrolb_runtime::heap::Counting;

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One clear line on bad flags: clap's first line names the flag and the problem.
            let text = e.render().to_string();
            eprintln!("ferrolb-controller: {}", text.lines().next().unwrap_or("invalid arguments"));
            std::process::exit(2);
        }
    };
    init_logging(cli.log_format);
    let result = match cli.command {
        None => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")
            .and_then(|rt| rt.block_on(run_controller(cli.run))),
        Some(Command::MigrateFromMetallb { file, secrets_file }) => {
            migrate_from_metallb(&file, secrets_file.as_deref())
        }
    };
    if let Err(e) = result {
        // One line: the chain of causes, joined.
        eprintln!("ferrolb-controller: {e:#}");
        std::process::exit(1);
    }
}

/// A new file only its owner can read: it holds passwords.
fn write_secrets(path: &std::path::Path, yaml: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    f.write_all(yaml.as_bytes())?;
    f.sync_all()
}

fn migrate_from_metallb(
    file: &std::path::Path,
    secrets_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let name = file.display().to_string();
    let input = if name == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{name}: {e}"))?
    };
    let conversion = ferrolb_controller::migrate::convert(&input, &name)?;
    for u in &conversion.unconverted {
        eprintln!("not converted: {u}");
    }
    for e in &conversion.invalid {
        eprintln!("invalid after conversion: {e}");
    }
    if conversion.objects.is_empty() {
        anyhow::bail!("{name}: nothing to convert: no MetalLB objects or MetalLB-annotated Services");
    }
    match secrets_file {
        Some(path) if !conversion.secrets.is_empty() => write_secrets(path, &conversion.secrets_yaml()?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?,
        Some(_) => {}
        None => {
            for s in &conversion.secrets {
                eprintln!(
                    "not written: Secret {}/{} (BGPPeer {}'s password): rerun with --secrets-file FILE and \
                     apply FILE first",
                    s.namespace, s.name, s.peer
                );
            }
        }
    }
    for c in &conversion.commands {
        eprintln!("run before applying: {c}");
    }
    std::io::stdout().write_all(conversion.to_yaml()?.as_bytes())?;
    Ok(())
}
