//! The command line: the `run`, `manifest` and `checkpoint` commands and their flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ferrolb_bootstrap::manifest;

/// Announces the kube-apiserver VIP from a checkpoint, gated on the local apiserver's health.
#[derive(Parser, Debug)]
#[command(version = env!("FERROLB_VERSION"), about)]
pub(crate) struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub(crate) log_format: LogFormat,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Announce the VIP of a checkpoint (the static pod's command).
    Run(RunArgs),
    /// Print the static pod manifest.
    Manifest(ManifestArgs),
    /// Checkpoint tools.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// The checkpoint file; FILE.prev is the fallback.
    #[arg(long, default_value = manifest::defaults::CHECKPOINT)]
    pub(crate) checkpoint: PathBuf,
    /// This node's name (as in spec.members).
    #[arg(long, env = "NODE_NAME")]
    pub(crate) node_name: String,
    /// Metrics (/metrics), liveness (/healthz) and readiness (/readyz) endpoint.
    #[arg(long, alias = "health-addr", default_value = manifest::defaults::METRICS_ADDR)]
    pub(crate) metrics_addr: SocketAddr,
    /// Kubeconfig for the checkpoint refresh; default `bootstrap.kubeconfig` next to the checkpoint.
    #[arg(long)]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Name verified in the apiserver certificate when probing a loopback URL.
    #[arg(long, default_value = "kubernetes")]
    pub(crate) apiserver_tls_name: String,
    /// BGP: how long a draining route (GRACEFUL_SHUTDOWN) stays before its withdrawal.
    #[arg(long, default_value = "5s")]
    pub(crate) drain_delay: ferrolb_api::Duration,
    /// BGP: keep announcing this long after SIGTERM before withdrawing (GRACEFUL_SHUTDOWN meanwhile).
    #[arg(long, default_value = "2s")]
    pub(crate) shutdown_drain: ferrolb_api::Duration,
}

impl From<RunArgs> for ferrolb_bootstrap::run::RunOptions {
    fn from(a: RunArgs) -> Self {
        ferrolb_bootstrap::run::RunOptions {
            checkpoint: a.checkpoint,
            node_name: a.node_name,
            metrics_addr: a.metrics_addr,
            kubeconfig: a.kubeconfig,
            apiserver_tls_name: a.apiserver_tls_name,
            drain_delay: a.drain_delay,
            shutdown_drain: a.shutdown_drain,
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct ManifestArgs {
    /// Container image.
    #[arg(long)]
    pub(crate) image: Option<String>,
    /// Checkpoint path (inside --config-dir).
    #[arg(long, default_value = manifest::defaults::CHECKPOINT)]
    pub(crate) checkpoint: String,
    /// Host directory mounted into the pod.
    #[arg(long, default_value = manifest::defaults::CONFIG_DIR)]
    pub(crate) config_dir: String,
    /// Cluster CA mounted read-only.
    #[arg(long, default_value = manifest::defaults::CA_FILE)]
    pub(crate) ca_file: String,
    /// Metrics and health endpoint of the pod (loopback; the probes use it).
    #[arg(long, alias = "health-addr", default_value = manifest::defaults::METRICS_ADDR)]
    pub(crate) metrics_addr: String,
    /// RUST_LOG of the container.
    #[arg(long, default_value = "info")]
    pub(crate) log_level: String,
}

#[derive(Subcommand, Debug)]
pub(crate) enum CheckpointCommand {
    /// Write a first checkpoint (and refresh credentials); needs no apiserver.
    Init(Box<InitArgs>),
    /// Print the read-only RBAC the refresh credentials need.
    Rbac,
}

#[derive(Args, Debug)]
pub(crate) struct InitArgs {
    /// Checkpoint to write (FILE.prev keeps the previous one).
    #[arg(long, default_value = manifest::defaults::CHECKPOINT)]
    pub(crate) checkpoint: PathBuf,
    /// Take the ControlPlaneVIP (and its BGPPeers/BFDProfiles) from this YAML file of objects.
    #[arg(long, conflicts_with_all = ["address"])]
    pub(crate) from: Option<PathBuf>,
    /// ControlPlaneVIP name.
    #[arg(long, default_value = "apiserver")]
    pub(crate) name: String,
    /// The VIP.
    #[arg(long, required_unless_present = "from")]
    pub(crate) address: Option<String>,
    /// Apiserver port behind the VIP.
    #[arg(long, default_value_t = 6443)]
    pub(crate) port: u16,
    /// L2 or BGP.
    #[arg(long, default_value = "L2", value_parser = ["L2", "BGP"])]
    pub(crate) mode: String,
    /// L2 interface (default: the one whose subnet holds the VIP).
    #[arg(long)]
    pub(crate) interface: Option<String>,
    /// A member as NAME=ADDRESS; repeat per control-plane node.
    #[arg(long = "member")]
    pub(crate) members: Vec<String>,
    /// L2: the membership key file (spec.membershipKeyFile; default as in API.md).
    #[arg(long)]
    pub(crate) membership_key_file: Option<String>,
    /// L2: the membership UDP port (spec.membershipPort; default 7947).
    #[arg(long)]
    pub(crate) membership_port: Option<u16>,
    /// A BGP peer as NAME=ADDRESS; repeat.
    #[arg(long = "bgp-peer")]
    pub(crate) peers: Vec<String>,
    /// Our ASN towards the BGP peers.
    #[arg(long, default_value_t = 64513)]
    pub(crate) my_asn: u32,
    /// The peers' ASN.
    #[arg(long, default_value_t = 64512)]
    pub(crate) peer_asn: u32,
    /// Community on the VIP route; repeat.
    #[arg(long = "community")]
    pub(crate) communities: Vec<String>,
    /// Health check URL.
    #[arg(long)]
    pub(crate) health_url: Option<String>,
    /// CA verifying the local apiserver (health check and refresh).
    #[arg(long, default_value = manifest::defaults::CA_FILE)]
    pub(crate) ca_file: PathBuf,
    /// CA key signing the refresh client certificate.
    #[arg(long, default_value = "/etc/kubernetes/pki/ca.key")]
    pub(crate) ca_key: PathBuf,
    /// Node name for the refresh certificate (CN system:ferrolb-bootstrap:NODE).
    #[arg(long, env = "NODE_NAME")]
    pub(crate) node_name: Option<String>,
    /// Local apiserver URL for the refresh kubeconfig.
    #[arg(long, default_value = "https://127.0.0.1:6443")]
    pub(crate) server: String,
    /// Name verified in the apiserver's certificate.
    #[arg(long, default_value = "kubernetes")]
    pub(crate) apiserver_tls_name: String,
    /// Do not make refresh credentials (the checkpoint then never refreshes).
    #[arg(long)]
    pub(crate) no_credentials: bool,
}
