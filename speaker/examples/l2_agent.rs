//! A stand-in speaker for lab tests and the L2 demo: runs the L2 announcer and,
//! optionally, membership + election, inside whatever network namespace it starts in.
//!
//! ```text
//! l2_agent --name node1 --vip 192.0.2.200 --vip 2001:db8::200 [--own] [--elect]
//!          [--membership 192.0.2.11:7946 --seed node2=192.0.2.12:7946 --key-file F]
//!          [--interface eth0] [--metrics-file F]
//! ```
//! Ownership: `--own` owns every VIP from the start; SIGUSR1 owns them all, SIGUSR2
//! none; `--elect` makes the rendezvous-hash owner among the live members own each VIP.
//! SIGTERM leaves the cluster gracefully and exits 0. Prints one line per change:
//! `OWNED`, `STATUS`, `LIVE`; rewrites the metrics file (OpenMetrics text) every 100 ms.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use ferrolb_speaker::election;
use ferrolb_speaker::l2::{InterfaceChoice, L2Announcer, L2Config, L2Metrics, L2Status, Owned};
use ferrolb_speaker::membership::{self, Membership, MembershipConfig, MembershipMetrics, Seed};
use prometheus_client::registry::Registry;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser, Debug)]
struct Args {
    /// This node's name.
    #[arg(long)]
    name: String,
    /// Service addresses.
    #[arg(long = "vip")]
    vips: Vec<IpAddr>,
    /// Own every VIP from the start.
    #[arg(long)]
    own: bool,
    /// Elect owners among live members (needs --membership).
    #[arg(long)]
    elect: bool,
    /// Membership address to bind and advertise.
    #[arg(long)]
    membership: Option<SocketAddr>,
    /// Membership seeds, NAME=ADDR:PORT.
    #[arg(long = "seed")]
    seeds: Vec<String>,
    /// Membership key file.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Only answer on this interface.
    #[arg(long)]
    interface: Option<String>,
    /// Where to write the metrics.
    #[arg(long)]
    metrics_file: Option<PathBuf>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let mut registry = Registry::default();
    let l2_metrics = L2Metrics::new(&mut registry);
    let mem_metrics = MembershipMetrics::new(&mut registry);
    let cfg = L2Config {
        allowed_interfaces: args.interface.clone().map(|i| BTreeSet::from([i])),
        ..L2Config::default()
    };
    let l2 = L2Announcer::spawn(cfg, l2_metrics)?;

    let membership = match args.membership {
        Some(addr) => {
            let key_path = args.key_file.as_ref().context("--membership needs --key-file")?;
            let key = membership::read_key_file(key_path).map_err(anyhow::Error::msg)?;
            let mut seeds = Vec::new();
            for s in &args.seeds {
                let (name, a) = s.split_once('=').context("--seed is NAME=ADDR:PORT")?;
                seeds.push(Seed { name: name.into(), addr: a.parse().context("--seed address")? });
            }
            let mut cfg = MembershipConfig::new(&args.name, addr, seeds, key);
            cfg.bind = addr;
            Some(Membership::spawn(cfg, mem_metrics)?)
        }
        None => None,
    };
    let mut live = membership.as_ref().map(|m| m.live());
    if let Some(m) = &membership {
        // Elect only from a settled view: before joining, a node sees only itself.
        let _ = m.settled().wait_for(|s| *s).await;
    }

    let all: Owned = args.vips.iter().map(|v| (*v, InterfaceChoice::Auto)).collect();
    let mut static_own = args.own;
    let mut status = l2.status();
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let mut usr2 = signal(SignalKind::user_defined2())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut last_owned: Option<Owned> = None;
    let mut last_status = L2Status::default();
    println!("STARTED {}", args.name);
    loop {
        let owned: Owned = if args.elect {
            let members = live.as_ref().map(|l| l.borrow().clone()).unwrap_or_default();
            all.iter()
                .filter(|(vip, _)| {
                    election::owner(**vip, members.iter().map(String::as_str)) == Some(args.name.as_str())
                })
                .map(|(v, c)| (*v, c.clone()))
                .collect()
        } else if static_own {
            all.clone()
        } else {
            BTreeMap::new()
        };
        if last_owned.as_ref() != Some(&owned) {
            println!("OWNED {}", owned.keys().map(|a| a.to_string()).collect::<Vec<_>>().join(","));
            l2.set_owned(owned.clone());
            last_owned = Some(owned);
        }
        tokio::select! {
            _ = usr1.recv() => static_own = true,
            _ = usr2.recv() => static_own = false,
            _ = term.recv() => break,
            r = async { match live.as_mut() { Some(l) => l.changed().await, None => std::future::pending().await } } => {
                if r.is_ok() && let Some(l) = &live {
                    println!("LIVE {}", l.borrow().iter().cloned().collect::<Vec<_>>().join(","));
                }
            }
            _ = status.changed() => {
                let s = status.borrow().clone();
                if s != last_status {
                    let parts: Vec<String> = s.addresses.iter().map(|(a, st)| {
                        format!("{a}={}:{}", st.interfaces.iter().cloned().collect::<Vec<_>>().join("+"), if st.gratuitous_sent { "sent" } else { "pending" })
                    }).collect();
                    println!("STATUS {}", parts.join(","));
                    last_status = s;
                }
            }
            _ = tick.tick() => {
                if let Some(path) = &args.metrics_file {
                    let mut text = String::new();
                    if prometheus_client::encoding::text::encode(&mut text, &registry).is_ok() {
                        let tmp = path.with_extension("tmp");
                        if std::fs::write(&tmp, text).is_ok() {
                            let _ = std::fs::rename(&tmp, path);
                        }
                    }
                }
            }
        }
    }
    if let Some(m) = membership {
        m.leave().await;
    }
    l2.shutdown().await;
    println!("STOPPED");
    Ok(())
}
