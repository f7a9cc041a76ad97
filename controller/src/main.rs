use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// ferrolb-controller (see API.md for the full flag set).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print MetalLB's configuration (metallb.io objects, Service annotations) in FILE
    /// as ferrolb objects on stdout; fields it cannot convert go to stderr, one a line.
    MigrateFromMetallb {
        /// YAML stream or List, e.g. from `kubectl get -A -o yaml ipaddresspools,...,services`; `-` reads stdin.
        file: PathBuf,
    },
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    match args.command {
        Some(Command::MigrateFromMetallb { file }) => migrate_from_metallb(&file),
        None => anyhow::bail!("ferrolb-controller is not implemented yet in this build"),
    }
}

fn migrate_from_metallb(file: &std::path::Path) -> anyhow::Result<()> {
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
    std::io::stdout().write_all(conversion.to_yaml()?.as_bytes())?;
    Ok(())
}
