//! The membership task: runs SWIM (foca) with its timers, seals what it sends, opens
//! nothing itself (the [`super::reader`] thread hands it opened payloads), and publishes
//! the live set, the members' addresses and settledness.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use foca::{Codec, Foca, OwnedNotification, PostcardCodec, Timer};
use rand::rngs::StdRng;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::auth::{DropReason, KeyEvent, KeyRole, Sealer};
use super::metrics::{KeyLabels, ResultLabels};
use super::{MemberId, MembershipKey, MembershipMetrics, Renewal, Seed, pressure, reader, scale, settle};
use crate::time::sleep_until;

pub(super) type Swim = Foca<MemberId, PostcardCodec, StdRng, foca::NoCustomBroadcast>;

pub(super) struct Driver {
    pub(super) foca: Swim,
    pub(super) runtime: foca::AccumulatingRuntime<MemberId>,
    pub(super) timers: BTreeMap<(Instant, u64), Timer<MemberId>>,
    pub(super) timer_seq: u64,
    pub(super) sealer: Sealer,
    pub(super) socket: UdpSocket,
    pub(super) seeds: Vec<Seed>,
    pub(super) rejoin_interval: Duration,
    /// Keeps SWIM's settings sized to the live set ([`scale`]).
    pub(super) resizer: scale::Resizer,
    /// Rejoin ticks so far: which seeds the next one announces to.
    pub(super) rejoin_tick: u64,
    pub(super) name: String,
    pub(super) live: watch::Sender<BTreeSet<String>>,
    /// Live members other than this node and where they listen, for the heartbeats.
    pub(super) members: watch::Sender<BTreeMap<String, SocketAddr>>,
    pub(super) settled: watch::Sender<bool>,
    /// Renewals of this node's identity ([`super::MembershipHandle::renewed`]).
    pub(super) renewed: watch::Sender<Renewal>,
    /// While a datagram is handled: the member that sent it.
    pub(super) sender: Option<Arc<str>>,
    /// When the view may be elected from ([`settle`]).
    pub(super) settle: settle::Settle,
    pub(super) metrics: MembershipMetrics,
    /// Key changes from [`MembershipHandle::set_key`] (None once the handle is gone).
    pub(super) key: Option<watch::Receiver<MembershipKey>>,
    /// Opened SWIM payloads from the reader thread.
    pub(super) swim: mpsc::Receiver<(Vec<u8>, KeyRole)>,
    /// Stops the reader thread with the task.
    pub(super) _reader: reader::ReaderGuard,
    /// Datagrams dropped unopened (no Node's address, or over a node's rate) when last
    /// logged, and when: one line a minute at most.
    pub(super) refused: (u64, Option<Instant>),
    /// This host's pressure, sampled for the reader thread (None with heartbeats off:
    /// nothing to stretch).
    pub(super) pressure: Option<pressure::Sampler>,
}

/// How many joined and left names a membership change logs at most.
const LOGGED_NAMES: usize = 10;

/// How often the refused datagrams are logged at most.
const REFUSED_LOG_EVERY: Duration = Duration::from_secs(60);

impl Driver {
    pub(super) async fn run(mut self, mut cmds: mpsc::Receiver<oneshot::Sender<()>>) {
        self.announce_to_seeds().await;
        let mut rejoin = tokio::time::interval(self.rejoin_interval);
        rejoin.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sample = tokio::time::interval(pressure::SAMPLE_EVERY);
        sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let next_timer = self.timers.keys().next().map(|(t, _)| *t);
            let settle_wait = self.settle.deadline().map(Instant::from_std);
            let key_timer = self.sealer.keys().poll_timeout().map(Instant::from_std);
            let key_changed = async {
                match self.key.as_mut() {
                    Some(k) => k.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                ok = key_changed => self.on_key_change(ok),
                _ = sleep_until(key_timer), if key_timer.is_some() => self.on_key_timer(),
                opened = self.swim.recv() => match opened {
                    Some((payload, role)) => self.on_payload(&payload, role).await,
                    None => {
                        tracing::error!(node = %self.name, "membership: the socket reader stopped; membership stops");
                        return;
                    }
                },
                _ = sleep_until(next_timer), if next_timer.is_some() => self.fire_timers().await,
                _ = sample.tick(), if self.pressure.is_some() => {
                    if let Some(p) = self.pressure.as_mut() { p.sample(&self.name) }
                }
                _ = rejoin.tick() => {
                    self.log_refused();
                    self.announce_to_seeds().await;
                }
                _ = sleep_until(settle_wait), if settle_wait.is_some() => {
                    let reason = self.settle.on_deadline(std::time::Instant::now());
                    self.on_settled(reason);
                }
                cmd = cmds.recv() => {
                    let res = self.foca.leave_cluster(&mut self.runtime);
                    if let Err(e) = res {
                        tracing::warn!(error = %e, "membership: leave failed");
                    }
                    self.flush().await;
                    tracing::info!(node = %self.name, "membership: left the cluster");
                    if let Some(done) = cmd {
                        let _ = done.send(());
                    }
                    return;
                }
            }
        }
    }

    /// SWIM's settings for a live set of `members`, when its size class changed
    /// ([`scale`]): longer suspicions and more retransmissions in a larger cluster.
    fn resize(&mut self, members: usize) {
        let Some(config) = self.resizer.resize(members) else { return };
        match self.foca.set_config(config) {
            Ok(()) => tracing::debug!(node = %self.name, members, "membership: SWIM settings resized"),
            Err(e) => {
                tracing::warn!(node = %self.name, error = %e, "membership: cannot resize SWIM's settings")
            }
        }
    }

    /// One line when datagrams were dropped unopened since the last: the reader thread
    /// counts them and never logs.
    fn log_refused(&mut self) {
        let m = &self.metrics;
        let (unknown, limited) = (m.dropped(DropReason::UnknownSource), m.dropped(DropReason::RateLimited));
        let (logged, at) = self.refused;
        let now = Instant::now();
        if unknown + limited == logged || at.is_some_and(|t| now < t + REFUSED_LOG_EVERY) {
            return;
        }
        tracing::warn!(
            node = %self.name, not_from_a_node = unknown, over_rate = limited,
            "membership: dropped datagrams unopened: from addresses that are no Node's membership address \
             (junk, a flood, or a node whose source address is not its InternalIP) or over one node's rate; \
             see ferrolb_membership_dropped_packets"
        );
        self.refused = (unknown + limited, Some(now));
    }

    /// A new key from the handle (`ok`), or the handle is gone.
    fn on_key_change(&mut self, ok: bool) {
        let key = match self.key.as_mut() {
            Some(k) if ok => k.borrow_and_update().clone(),
            _ => {
                self.key = None;
                return;
            }
        };
        match self.sealer.keys().learn(Instant::now().into_std(), key.expose()) {
            Ok(true) => {
                self.metrics.key_changes.get_or_create(&ResultLabels { result: "applied".into() }).inc();
            }
            Ok(false) => {}
            Err(_) => self.metrics.key_rejected(),
        }
        self.report_key_events();
    }

    fn on_key_timer(&mut self) {
        self.sealer.keys().handle_timeout(Instant::now().into_std());
        self.report_key_events();
    }

    /// One log line per step of a rotation; the phase gauge.
    fn report_key_events(&mut self) {
        let now = std::time::Instant::now();
        let node = &self.name;
        while let Some(e) = self.sealer.keys().poll_event() {
            match e {
                KeyEvent::Learned { seal_from } => tracing::info!(
                    %node,
                    seal_in = ?seal_from.saturating_duration_since(now),
                    "membership key changed: accepting both keys, sealing with the new key after the rotation window \
                     (every node must have the new key by then)"
                ),
                KeyEvent::Sealing { previous_until } => tracing::info!(
                    %node,
                    retire_in = ?previous_until.saturating_duration_since(now),
                    "membership key rotation: sealing with the new key; the old key is still accepted"
                ),
                KeyEvent::Retired => tracing::info!(%node, "membership key rotation: old key retired"),
            }
        }
        self.metrics.rotation_phase.set(self.sealer.keys().phase() as i64);
    }

    /// A SWIM payload the reader opened, with the key that opened it.
    async fn on_payload(&mut self, payload: &[u8], role: KeyRole) {
        let key = match role {
            KeyRole::Sealing => None,
            KeyRole::Next => Some("next"),
            KeyRole::Previous => Some("previous"),
        };
        if let Some(key) = key {
            self.metrics.rotation_opened.get_or_create(&KeyLabels { key: key.into() }).inc();
        }
        // A renewal it causes was told by the sender.
        let header: Option<foca::Header<MemberId>> = PostcardCodec.decode_header(payload).ok();
        self.sender = header.map(|h| h.src.name);
        if let Err(e) = self.foca.handle_data(payload, &mut self.runtime) {
            tracing::trace!(error = %e, "membership: foca rejected a datagram");
            self.metrics.drop_packet(DropReason::Protocol);
        }
        self.flush().await;
        self.sender = None;
    }

    async fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let timer = entry.remove();
            if let Err(e) = self.foca.handle_timer(timer, &mut self.runtime) {
                tracing::debug!(error = %e, "membership: timer failed");
            }
        }
        self.flush().await;
    }

    async fn announce_to_seeds(&mut self) {
        let live = self.live.borrow().clone();
        let targets: Vec<MemberId> = scale::announce_targets(&self.seeds, &live, self.rejoin_tick)
            .into_iter()
            .map(|s| MemberId { name: s.name.as_str().into(), addr: s.addr, generation: 0, started: 0 })
            .collect();
        self.rejoin_tick += 1;
        for t in targets {
            if let Err(e) = self.foca.announce(t, &mut self.runtime) {
                tracing::debug!(error = %e, "membership: announce failed");
            }
        }
        self.flush().await;
    }

    /// Sends what foca wants sent, arms its timers, publishes membership changes.
    async fn flush(&mut self) {
        while let Some((to, data)) = self.runtime.to_send() {
            let sealed = self.sealer.seal(&to.name, &data);
            if let Err(e) = self.socket.send_to(&sealed, to.addr).await {
                tracing::debug!(to = %to.addr, error = %e, "membership send failed");
            }
        }
        let now = Instant::now();
        while let Some((after, timer)) = self.runtime.to_schedule() {
            self.timer_seq += 1;
            self.timers.insert((now + after, self.timer_seq), timer);
        }
        let mut changed = false;
        let mut joined = false;
        while let Some(n) = self.runtime.to_notify() {
            match &n {
                OwnedNotification::MemberUp(_)
                | OwnedNotification::MemberDown(_)
                | OwnedNotification::Rename(..)
                | OwnedNotification::Idle => changed = true,
                OwnedNotification::Active => {
                    changed = true;
                    joined = true;
                }
                OwnedNotification::Rejoin(id) => {
                    tracing::info!(node = %self.name, generation = id.generation, by = ?self.sender, "membership: told this identity is down (a partition, or peers remember an earlier identity of this name that outranks it); rejoined");
                    let by = self.sender.clone();
                    self.renewed.send_modify(|r| r.told_by = by);
                    changed = true;
                }
                OwnedNotification::Defunct => {
                    tracing::warn!(node = %self.name, "membership: declared down");
                    changed = true;
                }
                // The simulator's build (feature `sim`) also reports data and failed probes.
                #[allow(unreachable_patterns)]
                _ => {}
            }
        }
        if changed {
            let mut live: BTreeSet<String> =
                self.foca.iter_members().map(|m| m.id().name.to_string()).collect();
            live.insert(self.name.clone());
            // The gauge first: whoever sees the new live set sees the matching size.
            self.metrics.size.set(i64::try_from(live.len()).unwrap_or(i64::MAX));
            let members: BTreeMap<String, SocketAddr> =
                self.foca.iter_members().map(|m| (m.id().name.to_string(), m.id().addr)).collect();
            let others: BTreeSet<String> = members.keys().cloned().collect();
            self.members.send_if_modified(|cur| {
                let differs = *cur != members;
                if differs {
                    *cur = members;
                }
                differs
            });
            self.resize(live.len());
            self.live.send_if_modified(|cur| {
                if *cur == live {
                    return false;
                }
                // What changed, not the whole set: thousands of names on every node at
                // every change would flood the logs of a large cluster.
                let joined: Vec<&String> = live.difference(cur).take(LOGGED_NAMES).collect();
                let left: Vec<&String> = cur.difference(&live).take(LOGGED_NAMES).collect();
                tracing::info!(
                    node = %self.name, size = live.len(), ?joined, ?left,
                    "membership changed (at most {LOGGED_NAMES} names each)"
                );
                *cur = live.clone();
                true
            });
            // After the live set: whoever sees settled sees the view it settled on.
            let now = std::time::Instant::now();
            let reason =
                if joined { self.settle.on_joined(now, &others) } else { self.settle.on_view(now, &others) };
            self.on_settled(reason);
        }
    }

    /// Publishes a settled view (`reason` Some), once, with why.
    fn on_settled(&mut self, reason: Option<settle::Reason>) {
        let Some(reason) = reason else { return };
        let live = self.live.borrow().len();
        let seeds = self.seeds.len();
        match reason {
            settle::Reason::Alone => {
                tracing::info!(node = %self.name, seeds, "membership: no seed answered in time; settled alone")
            }
            settle::Reason::AllSeeds => {
                tracing::info!(node = %self.name, live, seeds, "membership: settled, every seed live")
            }
            settle::Reason::Quiet => tracing::info!(
                node = %self.name, live, seeds, quiet = ?settle::QUIET,
                "membership: settled, the view stopped growing (the seeds not in it did not answer)"
            ),
            settle::Reason::Bound => tracing::info!(
                node = %self.name, live, seeds,
                "membership: settled at join_timeout after joining, the view still growing"
            ),
        }
        self.settled.send_replace(true);
    }
}
