use clap::Parser;

/// ferrolb-bootstrap (see API.md for the full flag set).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {}

fn main() -> anyhow::Result<()> {
    let _args = Args::parse();
    anyhow::bail!("ferrolb-bootstrap is not implemented yet in this build")
}
