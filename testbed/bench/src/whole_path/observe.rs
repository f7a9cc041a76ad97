//! What the bench observes while it times: its own watch on the Services (each one's
//! first ingress address) and a poller of BIRD's RIB (each prefix's first appearance),
//! both reporting to [`Seen`] through one channel; and BIRD's view of the speaker's
//! session.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::{BIRD_POLL, NS};
use crate::bird_ctl::BirdCtl;
use ferrolb_lab::routers::bird::parse_routes;
use ferrolb_lab::{Error, kubeapi};

/// What the watch and the RIB poller report.
#[derive(Debug)]
pub(super) enum Observed {
    /// The watch has listed the namespace once.
    Listed,
    /// A Service's first ingress address, when the watch delivered it.
    Ingress { name: String, ip: IpAddr, at: Instant },
    /// A prefix's first appearance in BIRD's RIB.
    Route { ip: IpAddr, at: Instant },
}

/// Everything observed so far.
pub(super) struct Seen {
    rx: mpsc::Receiver<Observed>,
    listed: bool,
    ingress: HashMap<String, (IpAddr, Instant)>,
    routes: HashMap<IpAddr, Instant>,
}

impl Seen {
    pub(super) fn new(rx: mpsc::Receiver<Observed>) -> Self {
        Seen { rx, listed: false, ingress: HashMap::new(), routes: HashMap::new() }
    }

    /// Takes one observation, waiting until `deadline`; false when none came.
    fn take(&mut self, deadline: Instant) -> bool {
        let wait = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(wait) {
            Ok(Observed::Listed) => self.listed = true,
            Ok(Observed::Ingress { name, ip, at }) => {
                self.ingress.entry(name).or_insert((ip, at));
            }
            Ok(Observed::Route { ip, at }) => {
                self.routes.entry(ip).or_insert(at);
            }
            Err(_) => return false,
        }
        true
    }

    pub(super) fn wait_watch_listed(&mut self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        while !self.listed {
            if !self.take(deadline) {
                return Err(Error::Timeout {
                    what: format!("the watch on Services in {NS} to list"),
                    after: timeout,
                    last: "not listed".into(),
                });
            }
        }
        Ok(())
    }

    /// Waits until `name` has an address and that address a route: (when the ingress was
    /// seen, when the route was).
    pub(super) fn wait_route(&mut self, name: &str, timeout: Duration) -> Option<(Instant, Instant)> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((ip, ingress)) = self.ingress.get(name)
                && let Some(route) = self.routes.get(ip)
            {
                return Some((*ingress, *route));
            }
            if !self.take(deadline) {
                return None;
            }
        }
    }

    pub(super) fn wait_addressed(&mut self, n: usize, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        while self.ingress.len() < n {
            if !self.take(deadline) {
                return Err(Error::Timeout {
                    what: format!("{n} Services in {NS} with an address"),
                    after: timeout,
                    last: format!("{} addressed", self.ingress.len()),
                });
            }
        }
        Ok(())
    }
}

/// Watches the bench's Services and reports each one's first ingress address.
pub(super) fn spawn_ingress_watch(
    rt: &tokio::runtime::Runtime,
    api: Api<Service>,
    tx: mpsc::Sender<Observed>,
) -> tokio::task::JoinHandle<()> {
    rt.spawn(async move {
        let mut reported: HashSet<String> = HashSet::new();
        let events = watcher::watcher(api, watcher::Config::default()).default_backoff();
        let mut events = std::pin::pin!(events);
        while let Some(ev) = events.next().await {
            let svc = match ev {
                Ok(Event::Apply(s) | Event::InitApply(s)) => s,
                Ok(Event::InitDone) => {
                    let _ = tx.send(Observed::Listed);
                    continue;
                }
                _ => continue,
            };
            let at = Instant::now();
            let Some(name) = svc.metadata.name.clone() else { continue };
            let ip = kubeapi::ingress_ips(&svc).into_iter().find_map(|s| s.parse::<IpAddr>().ok());
            if let Some(ip) = ip
                && reported.insert(name.clone())
            {
                let _ = tx.send(Observed::Ingress { name, ip, at });
            }
        }
    })
}

/// Polls BIRD's RIB on its own thread and reports each prefix's first appearance.
pub(super) struct RibPoller {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<PollStats>,
}

/// How the polls went.
#[derive(Debug, Default)]
pub(super) struct PollStats {
    pub(super) polls: u64,
    busy: Duration,
}

impl PollStats {
    pub(super) fn mean(&self) -> Duration {
        self.busy / u32::try_from(self.polls.max(1)).unwrap_or(u32::MAX)
    }
}

impl RibPoller {
    pub(super) fn start(socket: &Path, tx: mpsc::Sender<Observed>) -> Result<Self, Error> {
        let mut ctl = BirdCtl::connect(socket)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut stats = PollStats::default();
            let mut known: HashSet<IpAddr> = HashSet::new();
            while !flag.load(Ordering::Relaxed) {
                let t = Instant::now();
                let Ok(text) = ctl.command("show route") else { break };
                let at = Instant::now();
                stats.polls += 1;
                stats.busy += at - t;
                for p in parse_routes(&text) {
                    let ip = p.prefix.split('/').next().and_then(|a| a.parse::<IpAddr>().ok());
                    if let Some(ip) = ip
                        && known.insert(ip)
                    {
                        let _ = tx.send(Observed::Route { ip, at });
                    }
                }
                std::thread::sleep(BIRD_POLL);
            }
            stats
        });
        Ok(RibPoller { stop, thread })
    }

    pub(super) fn stop(self) -> PollStats {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// What BIRD says about the session with one neighbour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PeerState {
    pub(super) established: bool,
    pub(super) gr_active: bool,
    /// Routes imported from it, over its channels (stale ones included).
    pub(super) imported: usize,
}

/// The state of the BGP protocol whose neighbour is `neighbor`, from `show protocols all`.
pub(super) fn peer_state(text: &str, neighbor: IpAddr) -> Option<PeerState> {
    let mut block: Vec<&str> = Vec::new();
    let mut found = None;
    let mut check = |block: &[&str]| {
        let mine = block.iter().any(|l| {
            l.trim().strip_prefix("Neighbor address:").and_then(|a| a.trim().parse::<IpAddr>().ok())
                == Some(neighbor)
        });
        if mine && found.is_none() {
            let imported = block
                .iter()
                .filter_map(|l| l.trim().strip_prefix("Routes:"))
                .filter_map(|r| r.split_whitespace().next()?.parse::<usize>().ok())
                .sum();
            found = Some(PeerState {
                established: block.iter().any(|l| l.trim() == "BGP state:          Established"),
                gr_active: block.iter().any(|l| l.contains("Neighbor graceful restart active")),
                imported,
            });
        }
    };
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            check(&block);
            block.clear();
        }
        block.push(line);
    }
    check(&block);
    found
}
