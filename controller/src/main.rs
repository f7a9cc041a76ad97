use clap::Parser;

/// ferrolb-controller (see API.md for the full flag set).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {}

fn main() -> anyhow::Result<()> {
    let _args = Args::parse();
    anyhow::bail!("ferrolb-controller is not implemented yet in this build")
}
