//! Runs one single-hop BFD session and prints every state change as a line:
//!
//! ```text
//! bfd-peer --local 192.0.2.11 --peer 192.0.2.1 --interval-ms 100 --multiplier 3
//! started local_discr=123456 source_port=50123
//! state=Init diag="no diagnostic" remote=Down downs=0
//! state=Up diag="no diagnostic" remote=Init downs=0
//! ```
//!
//! The testbed starts it inside a node's network namespace to test against real routers.
use clap::Parser;
use ferrolb_proto::bfd::{Bfd, BfdConfig, SessionConfig, Timers};
use std::io::Write;
use std::net::IpAddr;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "One BFD session; prints its state changes")]
struct Args {
    /// Our address (the session's sockets bind it).
    #[arg(long)]
    local: IpAddr,
    /// The peer's address on the same link.
    #[arg(long)]
    peer: IpAddr,
    /// Desired Min TX and Required Min RX interval, milliseconds.
    #[arg(long, default_value_t = 300)]
    interval_ms: u64,
    /// Detect Mult.
    #[arg(long, default_value_t = 3)]
    multiplier: u8,
    /// Passive role: wait for the peer's first packet.
    #[arg(long)]
    passive: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let interval = Duration::from_millis(args.interval_ms);
    let session = SessionConfig {
        timers: Timers { desired_min_tx: interval, required_min_rx: interval, detect_mult: args.multiplier },
        passive: args.passive,
    };
    let bfd = Bfd::new(None);
    let handle = bfd.spawn(BfdConfig::new(args.local, args.peer, session))?;
    let mut out = std::io::stdout();
    writeln!(out, "started local_discr={}", handle.local_discr())?;
    out.flush()?;
    let mut state = handle.state();
    while state.changed().await.is_ok() {
        let s = *state.borrow_and_update();
        writeln!(out, "state={} diag=\"{}\" remote={} downs={}", s.state, s.diag, s.remote_state, s.downs)?;
        out.flush()?;
    }
    Ok(())
}
