//! SWIM membership between speakers: who is alive, so every speaker elects the same
//! L2 owner from the same live set.
//!
//! [`foca`] is the sans-IO SWIM core (with suspicion, indirect probes, periodic gossip
//! and announce-to-down extensions); [`auth`] seals every datagram with HMAC-SHA256
//! under the shared key and drops unauthenticated and replayed ones, without looking at
//! any clock. [`Membership::spawn`] starts a task ([`driver`]) that runs SWIM's timers and publishes
//! the live set on a watch channel, and a thread ([`reader`]) that reads the UDP socket,
//! opens every datagram and runs the L2 [`heartbeat`] at real-time priority. [`claim`] decides whether a
//! lone view may be trusted (a node that cannot read its peers must claim nothing).
//!
//! Identities carry the node name, its address, a generation and the start time; a
//! member that was declared down (a partition) renews its identity (generation + 1)
//! and rejoins by itself, and every `rejoin_interval` each node announces itself to
//! seeds it does not see live. Nothing needs the nodes' clocks to agree: the start time
//! only breaks ties between identities of one name, and a restart whose clock stepped
//! back (its start time older than its previous identity's) is told it is down by the
//! peers that remember the previous identity and renews until it wins.

pub mod auth;
pub mod claim;
mod driver;
pub mod heartbeat;
pub mod join_grace;
pub mod key;
mod metrics;
pub mod peers;
pub mod pressure;
mod reader;
pub mod scale;
pub mod settle;
#[cfg(feature = "sim")]
pub mod sim;

pub use key::{KEY_MIN_LEN, MembershipKey, MembershipKeyError, Reread};
pub use metrics::MembershipMetrics;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicU16;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foca::{Foca, PostcardCodec};
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use auth::Sealer;
pub use heartbeat::HeartbeatConfig;

/// Environment variable that shortens the key rotation window, in milliseconds: for
/// tests only (the lab rotates keys in seconds); production uses [`auth::ROTATION_WINDOW`].
pub const TEST_ROTATION_WINDOW_ENV: &str = "FERROLB_TEST_MEMBERSHIP_ROTATION_WINDOW_MS";

/// The key rotation window: [`auth::ROTATION_WINDOW`], unless a test set
/// [`TEST_ROTATION_WINDOW_ENV`].
pub fn rotation_window() -> Duration {
    ferrolb_runtime::test_env::test_override(TEST_ROTATION_WINDOW_ENV)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(auth::ROTATION_WINDOW, Duration::from_millis)
}

/// The speakers' membership port (API.md).
pub const DEFAULT_PORT: u16 = 7946;

/// A set of node names, for the tests of the membership modules.
#[cfg(test)]
use ferrolb_testkit::names;

/// Reads a membership key file (`--membership-key-file`). The error names the file
/// and the fix, never the key.
pub fn read_key_file(path: &std::path::Path) -> Result<MembershipKey, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--membership-key-file {}: cannot read: {e}", path.display()))?;
    MembershipKey::parse(&text).map_err(|e| {
        format!(
            "--membership-key-file {}: {e}; write the cluster's key (at least 32 characters) into it",
            path.display()
        )
    })
}

/// A member's identity on the wire: node name, where it listens, and (generation,
/// start time), which orders the identities of one name: the greater one wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberId {
    /// Node name (unique in the cluster); shared, so that SWIM, which compares the names
    /// of every member to find the one an update is about, copies no string to do so.
    pub name: Arc<str>,
    /// Where it receives membership datagrams.
    pub addr: SocketAddr,
    /// Renewals of this instance's identity: +1 every time it was declared down (a
    /// partition) or lost to an identity of its name that peers still remember.
    pub generation: u32,
    /// Wall-clock start time in unix ms: breaks ties between equal generations, so a
    /// restart normally wins at once; when the clock stepped back it loses, is told it
    /// is down and renews. No other node's clock is ever compared with it.
    pub started: u64,
}

impl foca::Identity for MemberId {
    type Addr = Arc<str>;

    fn renew(&self) -> Option<Self> {
        let generation = self.generation.checked_add(1)?;
        Some(MemberId { generation, ..self.clone() })
    }

    fn addr(&self) -> Arc<str> {
        self.name.clone()
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        (self.generation, self.started) > (adversary.generation, adversary.started)
    }
}

/// A member to contact at start: (name, address), from the Nodes' InternalIPs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    /// Node name.
    pub name: String,
    /// Membership address (InternalIP:7946).
    pub addr: SocketAddr,
}

/// SWIM timings; the defaults detect a dead member on a LAN in well under a second.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timings {
    /// How often a member is probed.
    pub probe_period: Duration,
    /// How long to wait for a direct ack before asking others to probe.
    pub probe_rtt: Duration,
    /// How long a suspect stays suspect before it is declared down.
    pub suspect_to_down_after: Duration,
    /// How often updates are gossiped besides probes.
    pub gossip_interval: Duration,
    /// How often seeds not seen live (and down members) are announced to.
    pub rejoin_interval: Duration,
    /// How long a starting node waits to join before it takes its lone view as
    /// settled (see [`MembershipHandle::settled`]).
    pub join_timeout: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            probe_period: Duration::from_millis(100),
            probe_rtt: Duration::from_millis(50),
            suspect_to_down_after: Duration::from_millis(250),
            gossip_interval: Duration::from_millis(100),
            rejoin_interval: Duration::from_secs(1),
            join_timeout: Duration::from_secs(1),
        }
    }
}

/// Configuration of a membership instance.
#[derive(Debug, Clone)]
pub struct MembershipConfig {
    /// This node's name.
    pub name: String,
    /// Where to bind the UDP socket (`--membership-bind`, default 0.0.0.0:7946).
    pub bind: SocketAddr,
    /// The address peers reach this node at (its InternalIP and the port).
    pub advertise: SocketAddr,
    /// Members to contact; this node's own entry is skipped.
    pub seeds: Vec<Seed>,
    /// The shared key.
    pub key: MembershipKey,
    /// SWIM timings.
    pub timings: Timings,
    /// The identity's start time in unix ms (default: the wall clock at spawn). Tests
    /// set it to play a node whose clock is off.
    pub started_ms: Option<u64>,
    /// How long a key change takes to be sealed with, and then to retire the old key
    /// ([`auth::ROTATION_WINDOW`]; see [`MembershipHandle::set_key`]).
    pub rotation_window: Duration,
    /// L2 heartbeats ([`heartbeat`]; on by default, beating whom
    /// [`MembershipHandle::set_successors`] names).
    pub heartbeat: HeartbeatConfig,
}

impl MembershipConfig {
    /// A configuration with default bind (0.0.0.0:7946) and timings.
    pub fn new(name: &str, advertise: SocketAddr, seeds: Vec<Seed>, key: MembershipKey) -> Self {
        MembershipConfig {
            name: name.into(),
            bind: SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), advertise.port()),
            advertise,
            seeds,
            key,
            timings: Timings::default(),
            started_ms: None,
            rotation_window: auth::ROTATION_WINDOW,
            heartbeat: HeartbeatConfig::default(),
        }
    }
}

/// Errors starting membership.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// The UDP socket could not be bound.
    #[error("membership: cannot bind UDP {addr}: {source}; pick a free --membership-bind address")]
    Bind { addr: SocketAddr, source: std::io::Error },
    /// Timings that SWIM cannot run with.
    #[error("membership timings: {0}")]
    Timings(String),
    /// The key could not be used (never shows the key).
    #[error("membership key unusable for HMAC-SHA256")]
    Key,
}

/// Starts membership.
#[derive(Debug)]
pub struct Membership;

impl Membership {
    /// Binds the socket (in the calling thread's network namespace) and starts the
    /// membership task on the current tokio runtime.
    pub fn spawn(
        cfg: MembershipConfig,
        metrics: MembershipMetrics,
    ) -> Result<MembershipHandle, MembershipError> {
        let bind_err = |source| MembershipError::Bind { addr: cfg.bind, source };
        let std_sock =
            bind_udp(cfg.bind).and_then(|s| s.set_nonblocking(true).map(|()| s)).map_err(bind_err)?;
        let reader_sock = std_sock.try_clone().map_err(bind_err)?;
        let socket = UdpSocket::from_std(std_sock).map_err(bind_err)?;
        let seeds: Vec<Seed> = cfg.seeds.into_iter().filter(|s| s.name != cfg.name).collect();
        // Sized for every Node (this one too); resized as the live set grows or shrinks.
        let size = seeds.len() + 1;
        let (resizer, config) = scale::Resizer::new(cfg.timings.clone(), size)?;
        let sealer = Sealer::with_window(cfg.key.expose(), rand::random(), cfg.rotation_window)
            .map_err(|_| MembershipError::Key)?;
        let opener = Sealer::with_window(cfg.key.expose(), rand::random(), cfg.rotation_window)
            .map_err(|_| MembershipError::Key)?;
        let (key_tx, key_rx) = watch::channel(cfg.key.clone());
        let started = cfg.started_ms.unwrap_or_else(unix_ms);
        let me = MemberId { name: cfg.name.as_str().into(), addr: cfg.advertise, generation: 0, started };
        let rng: StdRng = rand::make_rng();
        let foca = Foca::new(me, config, rng, PostcardCodec);
        let (live_tx, live_rx) = watch::channel(BTreeSet::from([cfg.name.clone()]));
        let (members_tx, members_rx) = watch::channel(BTreeMap::new());
        let (successors_tx, successors_rx) = watch::channel(BTreeSet::new());
        let (suspected_tx, suspected_rx) = watch::channel(BTreeSet::new());
        let (taken_over_tx, taken_over_rx) = watch::channel(0);
        let (renewed_tx, renewed_rx) = watch::channel(Renewal::default());
        let (swim_tx, swim_rx) = mpsc::channel(1024);
        let (nodes_tx, nodes_rx) = watch::channel(seeds.clone());
        // This host's pressure in permille: the driver samples it, the reader stretches
        // the heartbeat silence by it ([`pressure`]).
        let host_pressure = Arc::new(AtomicU16::new(0));
        let reader = reader::Reader {
            name: cfg.name.clone(),
            socket: reader_sock,
            sealer: opener,
            heartbeats: heartbeat::Heartbeats::new(cfg.heartbeat),
            metrics: metrics.clone(),
            swim: swim_tx,
            key: key_tx.subscribe(),
            successors: successors_rx,
            members: members_rx,
            suspected: suspected_tx,
            taken_over: taken_over_tx,
            late_reported: 0,
            addresses: BTreeMap::new(),
            published: 0,
            peers: peers::Peers::new(&seeds),
            nodes: nodes_rx,
            pressure: host_pressure.clone(),
            pressure_fed: 0,
            slow: false,
        }
        .spawn()
        .map_err(bind_err)?;
        let (cmd_tx, cmd_rx) = mpsc::channel(4);
        let settle = settle::Settle::new(
            std::time::Instant::now(),
            seeds.iter().map(|s| s.name.clone()).collect(),
            cfg.timings.join_timeout,
        );
        let (settled_tx, settled_rx) = watch::channel(settle.settled());
        let driver = driver::Driver {
            foca,
            runtime: foca::AccumulatingRuntime::new(),
            timers: BTreeMap::new(),
            timer_seq: 0,
            sealer,
            socket,
            seeds,
            rejoin_interval: cfg.timings.rejoin_interval,
            resizer,
            rejoin_tick: 0,
            name: cfg.name.clone(),
            live: live_tx,
            members: members_tx,
            settled: settled_tx,
            renewed: renewed_tx,
            sender: None,
            settle,
            metrics,
            key: Some(key_rx),
            swim: swim_rx,
            _reader: reader,
            refused: (0, None),
            pressure: cfg.heartbeat.enabled().then(|| pressure::Sampler::new(host_pressure)),
        };
        metrics_size(&driver);
        let task = tokio::spawn(driver.run(cmd_rx));
        Ok(MembershipHandle {
            live: live_rx,
            settled: settled_rx,
            cmd: cmd_tx,
            key: key_tx,
            successors: successors_tx,
            suspected: suspected_rx,
            taken_over: taken_over_rx,
            renewed: renewed_rx,
            nodes: nodes_tx,
            name: cfg.name,
            task,
        })
    }
}

/// How long [`bind_udp`] waits for the port to come free.
const BIND_RETRY_FOR: Duration = Duration::from_secs(1);

/// Binds the membership socket. A port in use is tried again for up to
/// [`BIND_RETRY_FOR`]: the previous membership instance of this process (stopped, or
/// aborted as a crash is simulated) may still be closing its socket and reader thread.
fn bind_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    let deadline = std::time::Instant::now() + BIND_RETRY_FOR;
    loop {
        match std::net::UdpSocket::bind(addr) {
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

fn metrics_size(d: &driver::Driver) {
    d.metrics.size.set(i64::try_from(d.live.borrow().len()).unwrap_or(i64::MAX));
}

/// This node's last identity renewal ([`MembershipHandle::renewed`]: the watch changes at
/// each, even when the same member told it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Renewal {
    /// The member whose datagram told this node it is down, the last time (None when the
    /// datagram's sender could not be read).
    pub told_by: Option<Arc<str>>,
}

/// Drives a running membership instance.
#[derive(Debug)]
pub struct MembershipHandle {
    live: watch::Receiver<BTreeSet<String>>,
    settled: watch::Receiver<bool>,
    cmd: mpsc::Sender<oneshot::Sender<()>>,
    key: watch::Sender<MembershipKey>,
    successors: watch::Sender<BTreeSet<String>>,
    suspected: watch::Receiver<BTreeSet<String>>,
    taken_over: watch::Receiver<u64>,
    renewed: watch::Receiver<Renewal>,
    nodes: watch::Sender<Vec<Seed>>,
    name: String,
    task: JoinHandle<()>,
}

impl MembershipHandle {
    /// Names of the live members, this node included; updated on every change.
    pub fn live(&self) -> watch::Receiver<BTreeSet<String>> {
        self.live.clone()
    }

    /// True once this node joined the cluster, or waited `join_timeout` with no seed
    /// answering (the first node up). Elect owners only from a settled view: before it,
    /// a starting node sees only itself and would claim every address for a moment.
    pub fn settled(&self) -> watch::Receiver<bool> {
        self.settled.clone()
    }

    /// Rotates to `key` without a split ([`auth::Keyring`]): accepted at once, sealed with
    /// after the rotation window, the old key retired after twice the window. The key in
    /// use again changes nothing.
    pub fn set_key(&self, key: MembershipKey) {
        self.key.send_if_modified(|k| {
            let differs = *k != key;
            if differs {
                *k = key;
            }
            differs
        });
    }

    /// The members to send L2 heartbeats to: the successors of the addresses this node
    /// owns ([`heartbeat`]). The same set again changes nothing.
    pub fn set_successors(&self, names: BTreeSet<String>) {
        self.successors.send_if_modified(|s| {
            let differs = *s != names;
            if differs {
                *s = names;
            }
            differs
        });
    }

    /// The Nodes' membership addresses, as the model has them now (a name once per
    /// address); this node's own entries are skipped. Datagrams from anywhere else are
    /// dropped unopened, and a member's messages must come from its own addresses
    /// ([`peers`]). The seeds are the first such list; the same list again changes nothing.
    pub fn set_nodes(&self, nodes: &[Seed]) {
        let nodes: Vec<Seed> = nodes.iter().filter(|s| s.name != self.name).cloned().collect();
        self.nodes.send_if_modified(|cur| {
            let differs = *cur != nodes;
            if differs {
                *cur = nodes;
            }
            differs
        });
    }

    /// Members that beat this node and fell silent: elect without them (SWIM has not
    /// declared them down yet). Updated on every change.
    pub fn suspected(&self) -> watch::Receiver<BTreeSet<String>> {
        self.suspected.clone()
    }

    /// Counts the notices of members that missed this node's heartbeats and took its
    /// addresses over: on a change, announce the addresses this node still owns again.
    pub fn taken_over(&self) -> watch::Receiver<u64> {
        self.taken_over.clone()
    }

    /// This node's renewals of its identity: each time a member told it that it is down
    /// and it rejoined. Told by a member this node counts, that member declared it down
    /// (this node was paused longer than SWIM's suspicion, a node starved of CPU, or cut
    /// off one way) and counts it as a joiner from then on, as this node's elections
    /// should ([`join_grace::JoinGrace::renewed`]). Told by a member it had itself
    /// declared down, or only just counts again (a partition healing: both sides renew),
    /// it says more about that member's stale view.
    pub fn renewed(&self) -> watch::Receiver<Renewal> {
        self.renewed.clone()
    }

    /// The name this node is a member by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Announces that this node leaves (peers drop it at once) and stops.
    pub async fn leave(self) {
        let (tx, rx) = oneshot::channel();
        if self.cmd.send(tx).await.is_ok() {
            let _ = rx.await;
        }
        let _ = self.task.await;
    }

    /// Stops without a word, as a crash would (peers detect it by probing).
    pub fn abort(self) {
        self.task.abort();
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod wire_tests {
    use super::*;

    /// The identity as releases before the shared name wrote it.
    #[derive(Serialize)]
    struct Before {
        name: String,
        addr: SocketAddr,
        generation: u32,
        started: u64,
    }

    #[test]
    fn a_member_identity_is_written_as_before_the_name_was_shared() {
        let addr: SocketAddr = "192.0.2.11:7946".parse().unwrap();
        let now = MemberId { name: "node1".into(), addr, generation: 3, started: 1_764_000_000_000 };
        let before = Before { name: "node1".into(), addr, generation: 3, started: 1_764_000_000_000 };
        let bytes = postcard::to_allocvec(&now).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&before).unwrap());
        assert_eq!(postcard::from_bytes::<MemberId>(&bytes).unwrap(), now);
    }
}
