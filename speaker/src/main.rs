//! `ferrolb-speaker`: the node agent (see speaker/README.md and API.md).
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ferrolb_proto::membership::HeartbeatConfig;
use ferrolb_runtime::kube_client::{self, Limits};
use ferrolb_speaker::error::one_line;
use ferrolb_speaker::metrics::Metrics;
use ferrolb_speaker::model::DEFAULT_LB_CLASS;
use ferrolb_speaker::run::{self, KubeOptions, Options, StaticOptions};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// ferrolb speaker: announces this node's service addresses by BGP (and ARP/NDP).
#[derive(Parser, Debug)]
#[command(version = env!("FERROLB_VERSION"), about)]
struct Args {
    /// This node's name, as in its Node object.
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// Read Nodes, Services, EndpointSlices and ferrolb objects from this YAML stream
    /// instead of the API; re-read whenever it changes.
    #[arg(long = "static", value_name = "FILE", conflicts_with = "kubeconfig")]
    static_file: Option<PathBuf>,
    /// Kubeconfig for Kubernetes mode (default: in-cluster, else $KUBECONFIG or ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Kubernetes mode: the speaker's namespace, where Secret ferrolb-membership is read
    /// (default: $POD_NAMESPACE, the service account's namespace, else ferrolb-system).
    #[arg(long, value_name = "NS", conflicts_with = "static_file")]
    namespace: Option<String>,
    /// Serve /metrics, /healthz and /readyz on this address.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_addr: Option<SocketAddr>,
    /// Membership (SWIM) bind address, default 0.0.0.0:7946; its port is also the
    /// port of the other nodes. Used only where L2 announcements are configured.
    #[arg(long, value_name = "ADDR:PORT")]
    membership_bind: Option<SocketAddr>,
    /// File holding the membership key (at least 32 characters, the same on every node).
    /// Needed only where L2Advertisements exist; in Kubernetes mode the default is the
    /// Secret ferrolb-membership (data key `key`) in the speaker's namespace.
    #[arg(long, value_name = "FILE")]
    membership_key_file: Option<PathBuf>,
    /// Longest time a prefix stays announced as draining (GRACEFUL_SHUTDOWN 65535:0,
    /// LOCAL_PREF 0 on iBGP) before it is withdrawn, e.g. 30s, 500ms.
    #[arg(long, value_name = "D", default_value = "30s", value_parser = duration_flag)]
    drain_max_delay: Duration,
    /// On SIGTERM, how long every prefix stays announced as draining before the BGP
    /// sessions close with Cease (capped by --drain-max-delay).
    #[arg(long, value_name = "D", default_value = "5s", value_parser = duration_flag)]
    drain_on_shutdown: Duration,
    /// L2: how often the owner of an address sends a heartbeat to the node that takes
    /// it over if the owner fails; 0 turns heartbeats off (failover then takes SWIM's
    /// few hundred milliseconds).
    #[arg(long, value_name = "D", default_value = "5ms", value_parser = duration_flag)]
    l2_heartbeat_interval: Duration,
    /// L2: missed heartbeats after which the successor takes the owner's addresses over.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..))]
    l2_heartbeat_misses: u32,
    /// loadBalancerClass served besides Services without one.
    #[arg(long, default_value = DEFAULT_LB_CLASS)]
    lb_class: String,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// `--drain-*`: "30s", "500ms", "2m" or plain seconds, read by [`ferrolb_api::Duration`];
/// whole numbers of s, ms or m only, as these flags always took.
fn duration_flag(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration; write e.g. 30s, 500ms or 2m");
    let unit = s.trim_start_matches(|c: char| c.is_ascii_digit());
    if unit.len() == s.len() || !matches!(unit, "" | "s" | "ms" | "m") {
        return Err(bad());
    }
    let text = if unit.is_empty() { format!("{s}s") } else { s.to_owned() };
    text.parse::<ferrolb_api::Duration>().map(ferrolb_api::Duration::std).map_err(|_| bad())
}

fn init_logs(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("ferrolb-speaker: {}", one_line(msg));
    ExitCode::FAILURE
}

async fn client(kubeconfig: Option<&PathBuf>, metrics: &Metrics) -> Result<kube::Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .map_err(|e| format!("--kubeconfig {}: cannot read it: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("--kubeconfig {}: unusable: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            format!(
                "no Kubernetes configuration ({e}): not in a cluster and no kubeconfig; pass --kubeconfig FILE \
                 or --static FILE"
            )
        })?,
    };
    kube_client::client(config, Limits::SPEAKER, &metrics.kube_received)
        .map_err(|e| format!("cannot build a Kubernetes client: {e}"))
}

/// Heap profiling build (`--features dhat-heap`): every allocation is counted.
#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Counts live heap bytes for `ferrolb_speaker_heap_bytes`.
#[cfg(not(feature = "dhat-heap"))]
#[global_allocator]
static ALLOC: ferrolb_runtime::heap::Counting = ferrolb_runtime::heap::Counting;

fn main() -> ExitCode {
    // Writes dhat-heap.json in the working directory when main returns (SIGTERM).
    #[cfg(feature = "dhat-heap")]
    let _profiler = dhat::Profiler::new_heap();
    let args = Args::parse();
    init_logs(args.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    let options = Options {
        node_name: args.node_name,
        lb_class: args.lb_class,
        membership_bind: args.membership_bind,
        membership_key_file: args.membership_key_file,
        drain_max_delay: args.drain_max_delay,
        drain_on_shutdown: args.drain_on_shutdown,
        heartbeat: HeartbeatConfig {
            interval: args.l2_heartbeat_interval,
            misses: args.l2_heartbeat_misses,
            ..HeartbeatConfig::default()
        },
    };
    let static_file = args.static_file;
    let kubeconfig = args.kubeconfig;
    let namespace = args.namespace.unwrap_or_else(ferrolb_api::default_namespace);
    let result = runtime.block_on(async {
        tokio::spawn(trim_heap());
        let metrics = Arc::new(Metrics::new());
        if let Some(addr) = args.metrics_addr {
            metrics
                .clone()
                .serve(addr)
                .await
                .map_err(|e| format!("--metrics-addr {addr}: cannot listen: {e}; pick a free address"))?;
        }
        match static_file {
            Some(file) => {
                let opts = StaticOptions { options, file };
                run::run_static(opts, metrics).await.map_err(|e| e.to_string())
            }
            None => {
                let client = client(kubeconfig.as_ref(), &metrics).await?;
                let opts = KubeOptions { options, namespace, plans: None, record: None };
                run::run_kube(opts, client, metrics).await.map_err(|e| e.to_string())
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Hands freed heap back to the kernel every 10 s. glibc keeps what a burst allocated
/// (10 000 Services announced and withdrawn) and RSS stayed at its peak, +30 % after a
/// second burst, with nothing left to announce (testbed/tests/service_churn.rs); a trim
/// costs milliseconds, during which it holds the arenas' locks. The membership reader's
/// real-time heartbeat thread never waits for it: its beat path allocates nothing (no
/// arena lock is ever taken there; `proto/tests/heartbeat_alloc.rs`), and it writes no
/// log line (its notes go to a thread of normal priority).
#[allow(unsafe_code)]
async fn trim_heap() {
    let mut every = tokio::time::interval(Duration::from_secs(10));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only releases free memory of glibc's own arenas; it takes
        // their locks, so it is safe beside any allocation on other threads (and a thread
        // that allocates waits for it: the heartbeat thread does not allocate per beat).
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_and_bad_ones_say_how_to_write_them() {
        assert_eq!(duration_flag("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration_flag("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration_flag("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration_flag("7"), Ok(Duration::from_secs(7)));
        for bad in ["", "s", "1h", "-1s", "1.5s"] {
            let e = duration_flag(bad).unwrap_err();
            assert!(e.contains("30s, 500ms or 2m"), "{e}");
        }
    }
}
