//! `kubectl-ferrolb`: a kubectl plugin (`kubectl ferrolb status|peers|pools|explain`).

use std::process::ExitCode;

use clap::Parser as _;
use kubectl_ferrolb::cli::{self, Cli, LogFormat};
use tracing_subscriber::EnvFilter;

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Cli::parse();
    init_logging(args.log_format);
    let result = async {
        let (client, namespace) = cli::client(&args).await?;
        cli::run(&args, &client, &namespace).await
    }
    .await;
    match result {
        Ok(printed) => {
            print!("{}", printed.stdout);
            eprint!("{}", printed.stderr);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
