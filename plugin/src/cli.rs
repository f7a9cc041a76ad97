//! Command line and the commands, from arguments and a client to printed text.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::fetch::{self, Scope};
use crate::render::{self, Format};
use crate::report;

/// kubectl ferrolb: what ferrolb announces, where, and why (read-only).
#[derive(Parser, Debug)]
#[command(name = "kubectl-ferrolb", bin_name = "kubectl ferrolb", version = env!("FERROLB_VERSION"), about)]
pub struct Cli {
    /// What to show.
    #[command(subcommand)]
    pub command: Command,
    /// Kubeconfig file; default: $KUBECONFIG, else ~/.kube/config, else in-cluster.
    #[arg(long, value_name = "FILE", global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context; default: its current context.
    #[arg(long, value_name = "NAME", global = true)]
    pub context: Option<String>,
    /// Namespace; default: the context's namespace, else `default`.
    #[arg(short = 'n', long, value_name = "NS", global = true)]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, global = true, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Table, global = true)]
    pub output: Format,
    /// Log format (logs go to stderr).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Per LoadBalancer Service: addresses, pool, protocol, announcing nodes, peers,
    /// readiness gate, latest Event.
    Status {
        /// Only this Service.
        service: Option<String>,
    },
    /// Per node and BGPPeer: which Services and addresses the node sends to the peer.
    Peers,
    /// Per IPAddressPool and address family: assigned, available, usage, Valid.
    Pools,
    /// Why a Service is or is not announced.
    Explain {
        /// The Service (in -n NAMESPACE).
        service: String,
    },
}

/// Log formats.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Text.
    Text,
    /// JSON lines.
    Json,
}

/// What a command prints.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Printed {
    /// For stdout.
    pub stdout: String,
    /// For stderr (notes like kubectl's "No resources found").
    pub stderr: String,
}

/// A client and the default namespace, from the kubeconfig flags as kubectl reads them.
pub async fn client(cli: &Cli) -> anyhow::Result<(kube::Client, String)> {
    let options = KubeConfigOptions { context: cli.context.clone(), ..KubeConfigOptions::default() };
    let config = match (&cli.kubeconfig, &cli.context) {
        (Some(path), _) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}: cannot read it", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .with_context(|| format!("--kubeconfig {}: unusable", path.display()))?
        }
        (None, Some(ctx)) => kube::Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("--context {ctx}: not usable from $KUBECONFIG or ~/.kube/config"))?,
        (None, None) => kube::Config::infer()
            .await
            .context("no Kubernetes configuration: set KUBECONFIG or pass --kubeconfig FILE")?,
    };
    let namespace = config.default_namespace.clone();
    Ok((kube::Client::try_from(config).context("cannot build a Kubernetes client")?, namespace))
}

/// Runs the command with `client`; `default_namespace` applies without -n / -A.
pub async fn run(cli: &Cli, client: &kube::Client, default_namespace: &str) -> anyhow::Result<Printed> {
    let namespace = cli.namespace.clone().unwrap_or_else(|| default_namespace.to_owned());
    let scope = if cli.all_namespaces { Scope::All } else { Scope::Namespace(namespace.clone()) };
    let mut out = Printed::default();
    match &cli.command {
        Command::Status { service } => {
            let snap = fetch::for_services(client, &scope).await?;
            let rows = report::status(&snap, service.as_deref());
            if let (Some(s), true) = (service, rows.is_empty()) {
                anyhow::bail!("LoadBalancer Service {s:?} not found in {}", where_(&scope));
            }
            if rows.is_empty() && cli.output == Format::Table {
                out.stderr = format!("No LoadBalancer Services found in {}.\n", where_(&scope));
            } else {
                out.stdout = emit(&rows, cli.output, |r| render::status_table(r, cli.all_namespaces))?;
            }
        }
        Command::Pools => {
            let rows = report::pools(&fetch::for_pools(client).await?);
            if rows.is_empty() && cli.output == Format::Table {
                out.stderr = "No IPAddressPools found.\n".into();
            } else {
                out.stdout = emit(&rows, cli.output, render::pools_table)?;
            }
        }
        Command::Peers => {
            let rows = report::peers(&fetch::for_peers(client).await?);
            if rows.is_empty() && cli.output == Format::Table {
                out.stderr = "No BGPPeers select any node.\n".into();
            } else {
                out.stdout = emit(&rows, cli.output, render::peers_table)?;
            }
            out.stderr.push_str(&format!("Note: {}\n", report::PEERS_NOTE));
        }
        Command::Explain { service } => {
            anyhow::ensure!(!cli.all_namespaces, "explain takes one Service: use -n NAMESPACE, not -A");
            let snap = fetch::for_services(client, &scope).await?;
            let e = report::explain(&snap, &namespace, service)
                .with_context(|| format!("Service {service:?} not found in namespace {namespace}"))?;
            out.stdout = match cli.output {
                Format::Table => render::explanation_text(&e),
                f => render::structured(&e, f)?,
            };
        }
    }
    Ok(out)
}

fn where_(scope: &Scope) -> String {
    match scope {
        Scope::All => "any namespace".into(),
        Scope::Namespace(ns) => format!("namespace {ns}"),
    }
}

fn emit<T: serde::Serialize>(
    rows: &[T],
    format: Format,
    table: impl Fn(&[T]) -> String,
) -> anyhow::Result<String> {
    match format {
        Format::Table => Ok(table(rows)),
        f => render::structured(&rows, f),
    }
}
