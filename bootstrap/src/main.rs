//! ferrolb-bootstrap: the apiserver VIP as a static pod (see bootstrap/README.md).
//!
//! * [`cli`]: the commands and their flags.
//! * [`init`]: `checkpoint init`, a first checkpoint and the refresh credentials.

mod cli;
mod init;

use anyhow::anyhow;
use clap::Parser;
use ferrolb_bootstrap::{credentials, manifest};

use cli::{CheckpointCommand, Cli, Command, LogFormat, ManifestArgs};

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
        Command::Checkpoint(CheckpointCommand::Init(a)) => init::init(*a),
        Command::Run(a) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(ferrolb_bootstrap::run::run(a.into()))),
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
