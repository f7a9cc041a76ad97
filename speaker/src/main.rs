use clap::Parser;

/// ferrolb-speaker (see API.md for the full flag set).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {}

fn main() -> anyhow::Result<()> {
    let _args = Args::parse();
    anyhow::bail!("ferrolb-speaker is not implemented yet in this build")
}
