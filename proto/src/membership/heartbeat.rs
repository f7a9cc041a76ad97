//! L2 heartbeats: failover in tens of milliseconds on top of SWIM, sans-IO.
//!
//! SWIM finds a dead member in a few hundred milliseconds (a probe period, an ack
//! timeout, the suspicion time) and could go faster only by suspecting more often
//! wrongly. Only one node needs to know at once that an address's owner died: the
//! address's **successor**, the node the election picks when the owner leaves the
//! candidates. So every owner sends a small authenticated beat ([`super::auth::Kind::Beat`],
//! on the membership port) every `interval` to the successors of the addresses it owns,
//! and a node that hears beats from a member watches it: after `misses` intervals of
//! silence it **suspects** it, and the speaker elects without it, which makes this node
//! claim exactly the addresses it is successor of (rendezvous hashing moves only the dead
//! owner's addresses). The rest of the cluster learns of the death through SWIM, as before.
//!
//! False suspicions are what a fast detector must not make:
//! * **Nothing is watched before it beat.** A member is watched from its first beat on,
//!   so a starting owner, or one on a release without heartbeats, is left to SWIM.
//! * **Local health first** (as Lifeguard has it): silence is judged only when this
//!   node's own ticks have come on time for `misses` intervals. A node starved of CPU
//!   (its tick late by an interval or more) does not accuse anyone: the beats it missed
//!   may be queued in its own socket. The driver reads every queued datagram before it
//!   judges, and judges as of the instant it found the socket empty, so a beat that
//!   arrived while the driver was descheduled after reading is never taken for silence.
//!   For `max_silence` after it was starved, it allows twice the silence: CI saw the
//!   sender's next beat come 20 ms late, right after the starved node's first judgement.
//!   What the beat thread cannot see, the kernel reports: while this host's tasks wait
//!   for a CPU or memory ([`Input::Pressure`], from PSI: [`super::pressure`]), a beat may
//!   wait in a deferred network softirq, so the silence is stretched by
//!   [`pressure::multiplier`] (up to 5 times, never past `max_silence`).
//! * **The silence adapts to the sender** (Lifeguard's other half, and the idea of
//!   phi-accrual detectors): a member whose beats come irregularly (its node's CPUs
//!   saturated, its beat thread without real-time priority) is given `MARGIN` times the
//!   longest gap seen between its beats, that peak halving every `PEAK_HALF_LIFE`; never
//!   less than the configured silence, never more than `max_silence`. On a quiet network
//!   every gap is an interval and the configured silence (20 ms by default) rules; a gap
//!   that ends a false suspicion (beats resumed) is seen too, so one false suspicion
//!   makes the next one unlikely. A gap longer than `max_silence` is an outage (a cut
//!   link that came back), not jitter: it teaches nothing, and the next failover after
//!   a link flap is as fast as the first.
//! * **The beat loop runs at real-time priority** in its driver (SCHED_FIFO where the
//!   node allows it), so an owner whose cores are saturated still beats on time.
//! * **An owner that cannot beat on time says so.** Refused real-time priority and
//!   nice -20 (no CAP_SYS_NICE), its beat thread waits among the node's other tasks, so
//!   it sends [`Message::SlowBeat`], and its successors allow it `max_silence` from its
//!   first beat on. Learning its lateness from its gaps took a false suspicion first, and
//!   a successor on another host sees none of the owner's pressure. Failover from such an
//!   owner takes up to `max_silence` (250 ms by default) instead of the silence.
//! * **A suspicion is bounded.** Beats that resume clear it at once (the owner lives:
//!   it keeps its addresses). A suspicion SWIM does not confirm within `hold` (the owner
//!   is live to SWIM but its beats do not reach this node) is dropped and the member is
//!   no longer watched until it beats again: two nodes never both claim for longer.
//! * **An owner that stops beating a node says so.** When a node leaves an owner's
//!   targets (the owner handed its addresses over, or their successor changed), the
//!   owner sends it [`Message::Release`] at that tick and the next
//!   [`RELEASE_SENDS`]` - 1`, and the node ends its watch without suspicion. Without
//!   it, every change of successor would end in a false suspicion of a live owner:
//!   during a rolling upgrade the former successor elected without the owner and
//!   answered for the owner's other addresses beside it.
//!
//! `handle(now, Input)` feeds beats, ticks, targets and the live set; `poll_transmit()`
//! names the members to beat at this tick; `poll_release()` the former ones to release;
//! `poll_timeout()` is the next tick;
//! `poll_event()` reports suspicions and their end. [`Heartbeats::suspected`] is the set
//! to remove from the live set before electing.
//!
//! **No allocation per beat.** The driver runs this at real-time priority beside threads
//! that allocate (and a `malloc_trim` that holds the allocator's locks for milliseconds):
//! a beat received ([`Input::Beat`] borrows the name), a tick and the beats it sends
//! ([`Message::encode_into`] a reused buffer) allocate nothing once every member was
//! heard once. Member names are interned as `Arc<str>` at their first beat, so events
//! carry them without allocating. (`proto/tests/heartbeat_alloc.rs` counts.)

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::pressure;

/// What a heartbeat datagram says: its payload under [`super::auth::Kind::Beat`], a
/// type byte and the sender's node name (borrowed from the datagram).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// "I live": from an owner to its successors.
    Beat(&'a str),
    /// "I live, and my beats may come late": from an owner whose beat thread runs at
    /// normal priority. Its successors allow it `max_silence` (see the module doc).
    SlowBeat(&'a str),
    /// "I took over your addresses": from a successor to the member it suspects. A member
    /// that reads it is alive after all (a false suspicion): it announces its addresses
    /// again, so clients that followed the successor's gratuitous ARP come back once the
    /// successor, hearing its beats, lets go.
    TookOver(&'a str),
    /// "I no longer beat you": from an owner to a node that left its targets. The node
    /// stops watching it (silence from now on means nothing) until it beats again.
    Release(&'a str),
}

impl<'a> Message<'a> {
    /// The payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// The payload, in `out` (cleared first; no allocation once it is large enough).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let (kind, name) = match self {
            Message::Beat(n) => (0u8, n),
            Message::TookOver(n) => (1u8, n),
            Message::Release(n) => (2u8, n),
            Message::SlowBeat(n) => (3u8, n),
        };
        out.clear();
        out.push(kind);
        out.extend_from_slice(name.as_bytes());
    }

    /// A payload read back; None for anything else.
    pub fn decode(payload: &'a [u8]) -> Option<Message<'a>> {
        let (kind, name) = payload.split_first()?;
        let name = std::str::from_utf8(name).ok().filter(|n| !n.is_empty())?;
        match kind {
            0 => Some(Message::Beat(name)),
            1 => Some(Message::TookOver(name)),
            2 => Some(Message::Release(name)),
            3 => Some(Message::SlowBeat(name)),
            _ => None,
        }
    }

    /// The node that sent it.
    pub fn sender(&self) -> &'a str {
        match self {
            Message::Beat(n) | Message::SlowBeat(n) | Message::TookOver(n) | Message::Release(n) => n,
        }
    }
}

/// How many ticks in a row an owner sends [`Message::Release`] to a node that left its
/// targets: a datagram lost, or overtaken by the last beat, is made good by the next.
pub const RELEASE_SENDS: u8 = 3;

/// A member's silence is judged against this many times the longest gap seen recently
/// between its beats (when that is more than the configured silence).
pub const MARGIN: u32 = 2;

/// The longest gap seen between a member's beats counts half as much after this long:
/// a load that comes back every few seconds keeps the silence stretched, a quiet
/// minute brings it back to the configured one.
pub const PEAK_HALF_LIFE: Duration = Duration::from_secs(20);

/// At most this many members are beaten. The election spreads the successors of an
/// owner's addresses over the cluster: an owner of 1 000 addresses among 1 000 nodes has
/// about 630 of them, and beating each every 5 ms would be 126 000 datagrams a second.
/// The members that are successor of the most addresses are beaten; the others learn of
/// the owner's death through SWIM, as without heartbeats.
pub const MAX_TARGETS: usize = 16;

/// The members to beat, from the successors of each address owned: the
/// [`MAX_TARGETS`] named for the most addresses (ties by name).
pub fn targets<'a, S>(successors: impl IntoIterator<Item = S>) -> BTreeSet<String>
where
    S: IntoIterator<Item = &'a String>,
{
    let mut count: BTreeMap<&String, usize> = BTreeMap::new();
    for name in successors.into_iter().flatten() {
        *count.entry(name).or_default() += 1;
    }
    let mut ranked: Vec<(&String, usize)> = count.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    ranked.into_iter().take(MAX_TARGETS).map(|(n, _)| n.clone()).collect()
}

/// Heartbeat timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// How often an owner beats its successors; zero turns heartbeats off (SWIM alone).
    pub interval: Duration,
    /// Intervals of silence after which a watched member is suspected.
    pub misses: u32,
    /// How long a suspicion SWIM does not confirm lasts.
    pub hold: Duration,
    /// The most a member's irregular beats may stretch its silence to (see the module
    /// doc); the configured silence when shorter.
    pub max_silence: Duration,
}

impl Default for HeartbeatConfig {
    /// 5 ms beats, suspected after 20 ms of silence (up to 250 ms for a member whose
    /// beats come irregularly), suspicion held up to 3 s.
    fn default() -> Self {
        HeartbeatConfig {
            interval: Duration::from_millis(5),
            misses: 4,
            hold: Duration::from_secs(3),
            max_silence: Duration::from_millis(250),
        }
    }
}

impl HeartbeatConfig {
    /// False when heartbeats are off.
    pub fn enabled(&self) -> bool {
        !self.interval.is_zero() && self.misses > 0
    }

    /// The silence after which a watched member whose beats came regularly is suspected.
    pub fn silence(&self) -> Duration {
        self.interval.saturating_mul(self.misses)
    }
}

/// An input at an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<'a> {
    /// An authenticated beat from member `0`.
    Beat(&'a str),
    /// An authenticated [`Message::SlowBeat`] from member `0`.
    SlowBeat(&'a str),
    /// An authenticated [`Message::Release`] from member `0`: it no longer beats this node.
    Released(&'a str),
    /// The tick [`Heartbeats::poll_timeout`] asked for (or any wake-up: early ones do nothing).
    Timeout,
    /// The members to beat from now on: the successors of the addresses this node owns.
    Targets(BTreeSet<String>),
    /// SWIM's live set: watches of members no longer in it end (SWIM took over).
    Live(BTreeSet<String>),
    /// How much of the time this host's tasks wait for a CPU or memory, in permille
    /// ([`super::pressure`]): the silence allowed is stretched by
    /// [`pressure::multiplier`] of it.
    Pressure(u16),
}

/// Why a suspicion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleared {
    /// Beats came again: the member lives (a false suspicion, or it restarted).
    BeatsResumed,
    /// SWIM did not confirm it within `hold`; the member is not watched until it beats.
    Expired,
    /// The member said it no longer beats this node ([`Message::Release`]): its silence
    /// was no death. It is not watched until it beats again.
    Released,
}

impl Cleared {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Cleared::BeatsResumed => "beats_resumed",
            Cleared::Expired => "expired",
            Cleared::Released => "released",
        }
    }
}

/// What happened, for the driver. Names are the interned ones: no allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Member `0` beats this node (its first beat, or the first since its watch ended):
    /// it is watched from now on.
    Watching(Arc<str>),
    /// Member `0` fell silent for its allowance ([`Heartbeats::allowance`]): elect
    /// without it.
    Suspected(Arc<str>),
    /// Member `0`, watched and not suspected, no longer beats this node (this node is no
    /// longer successor of its addresses): it is not watched until it beats again.
    Released(Arc<str>),
    /// The suspicion of member `name` ended.
    Cleared {
        /// The member.
        name: Arc<str>,
        /// Why.
        why: Cleared,
    },
}

#[derive(Debug, Clone, Copy)]
struct Watch {
    heard: Instant,
    suspected: Option<Instant>,
    /// The longest gap between its beats, and when it was seen ([`PEAK_HALF_LIFE`]).
    peak: Duration,
    peak_at: Instant,
    /// It said its beats may come late ([`Message::SlowBeat`]).
    slow: bool,
}

impl Watch {
    fn new(now: Instant, slow: bool) -> Self {
        Watch { heard: now, suspected: None, peak: Duration::ZERO, peak_at: now, slow }
    }

    /// The peak gap as it counts at `now`.
    fn peak(&self, now: Instant) -> Duration {
        let halvings =
            now.saturating_duration_since(self.peak_at).as_secs_f64() / PEAK_HALF_LIFE.as_secs_f64();
        self.peak.mul_f64(0.5f64.powf(halvings))
    }

    /// A beat at `now`: the gap since the last one counts toward the peak, unless it is
    /// longer than `max_silence`: that was an outage (a cut link, a stopped process),
    /// not jitter, and a link that flapped must not slow the next failover.
    fn beat(&mut self, now: Instant, max_silence: Duration) {
        let gap = now.saturating_duration_since(self.heard);
        if gap <= max_silence && gap >= self.peak(now) {
            self.peak = gap;
            self.peak_at = now;
        }
        self.heard = now;
    }

    /// The silence after which it is suspected at `now`, on a host under `pressure`.
    fn allowance(&self, now: Instant, cfg: &HeartbeatConfig, pressure: u16) -> Duration {
        let floor = cfg.silence();
        if self.slow {
            return cfg.max_silence.max(floor);
        }
        let stretched = floor.saturating_mul(pressure::multiplier(pressure)).min(cfg.max_silence);
        self.peak(now).saturating_mul(MARGIN).min(cfg.max_silence).max(stretched).max(floor)
    }
}

/// A silence allowance doubled (never past `max_silence`, never below it) while this node
/// recovers from a starvation: judging its first on-time ticks, it is the least reliable
/// judge (on a saturated host the sender's next beat may still wait in a deferred
/// softirq, which CI saw take over 20 ms), and its suspicion would move addresses.
fn recovery_stretch(allowance: Duration, recovering: bool, cfg: &HeartbeatConfig) -> Duration {
    if recovering { allowance.max(allowance.saturating_mul(2).min(cfg.max_silence)) } else { allowance }
}

/// The heartbeat state of one node.
#[derive(Debug)]
pub struct Heartbeats {
    cfg: HeartbeatConfig,
    targets: BTreeSet<String>,
    /// Former targets still to be told [`Message::Release`], with the sends left.
    releasing: BTreeMap<String, u8>,
    /// When the next tick is due (None before the first input).
    due: Option<Instant>,
    /// Members heard beating, by their interned name.
    watched: BTreeMap<Arc<str>, Watch>,
    /// Since when this node's own ticks came on time.
    on_time_since: Option<Instant>,
    /// This host's pressure, in permille ([`Input::Pressure`]).
    pressure: u16,
    /// Ticks that came an interval or more late (this node was starved).
    late_ticks: u64,
    /// When the last late tick came: for `max_silence` after it, silences are allowed
    /// twice as long ([`Heartbeats::allowance`]).
    late_at: Option<Instant>,
    /// Changes of the suspected set so far.
    suspicions_changed: u64,
    beat_now: bool,
    release_now: bool,
    events: VecDeque<Event>,
}

impl Heartbeats {
    /// A node beating nobody and watching nobody.
    pub fn new(cfg: HeartbeatConfig) -> Self {
        Heartbeats {
            cfg,
            targets: BTreeSet::new(),
            releasing: BTreeMap::new(),
            due: None,
            watched: BTreeMap::new(),
            on_time_since: None,
            pressure: 0,
            late_ticks: 0,
            late_at: None,
            suspicions_changed: 0,
            beat_now: false,
            release_now: false,
            events: VecDeque::with_capacity(16),
        }
    }

    /// The configuration.
    pub fn config(&self) -> HeartbeatConfig {
        self.cfg
    }

    /// Feeds one input at `now`.
    pub fn handle(&mut self, now: Instant, input: Input<'_>) {
        if !self.cfg.enabled() {
            return;
        }
        let due = *self.due.get_or_insert(now + self.cfg.interval);
        self.on_time_since.get_or_insert(now);
        match input {
            Input::Beat(name) => self.on_beat(now, name, false),
            Input::SlowBeat(name) => self.on_beat(now, name, true),
            Input::Released(name) => self.on_released(name),
            Input::Timeout if now >= due => self.tick(now, due),
            Input::Timeout => {}
            Input::Targets(t) => {
                if self.targets.is_empty() && !t.is_empty() {
                    // The first successor hears a beat at once, not an interval later.
                    self.beat_now = true;
                }
                for gone in self.targets.difference(&t) {
                    self.releasing.insert(gone.clone(), RELEASE_SENDS);
                }
                self.releasing.retain(|name, _| !t.contains(name));
                self.release_now = !self.releasing.is_empty();
                self.targets = t;
            }
            Input::Pressure(p) => self.pressure = p,
            Input::Live(live) => {
                let before = self.watched.values().filter(|w| w.suspected.is_some()).count();
                self.watched.retain(|name, _| live.contains(&**name));
                if self.watched.values().filter(|w| w.suspected.is_some()).count() != before {
                    self.suspicions_changed += 1;
                }
            }
        }
    }

    fn on_beat(&mut self, now: Instant, name: &str, slow: bool) {
        // A tick overdue by an interval: this node was starved, and the beats it reads now
        // waited in its socket. Their gaps are this node's, not the sender's.
        let starved = self.due.is_some_and(|d| now.saturating_duration_since(d) >= self.cfg.interval);
        match self.watched.get_mut(name) {
            Some(w) => {
                w.slow = slow;
                if starved {
                    w.heard = now;
                } else {
                    w.beat(now, self.cfg.max_silence);
                }
                if w.suspected.take().is_some() {
                    self.suspicions_changed += 1;
                    let name = self.intern(name);
                    self.events.push_back(Event::Cleared { name, why: Cleared::BeatsResumed });
                }
            }
            None => {
                let name: Arc<str> = Arc::from(name);
                self.watched.insert(name.clone(), Watch::new(now, slow));
                self.events.push_back(Event::Watching(name));
            }
        }
    }

    /// The interned name of a watched member (a reference count, no allocation).
    fn intern(&self, name: &str) -> Arc<str> {
        self.watched.get_key_value(name).map_or_else(|| Arc::from(name), |(k, _)| k.clone())
    }

    fn on_released(&mut self, name: &str) {
        let Some((name, w)) = self.watched.remove_entry(name) else { return };
        self.events.push_back(match w.suspected {
            Some(_) => {
                self.suspicions_changed += 1;
                Event::Cleared { name, why: Cleared::Released }
            }
            None => Event::Released(name),
        });
    }

    fn tick(&mut self, now: Instant, due: Instant) {
        let interval = self.cfg.interval;
        if now.saturating_duration_since(due) >= interval {
            // This node was starved: what it did not hear may be queued behind it.
            self.late_ticks += 1;
            self.late_at = Some(now);
            self.on_time_since = Some(now);
        }
        // The next tick keeps the beat's rhythm; after a stall it restarts from now.
        let mut next = due + interval;
        if next <= now {
            next = now + interval;
        }
        self.due = Some(next);
        self.beat_now = !self.targets.is_empty();
        self.release_now = !self.releasing.is_empty();
        let judging =
            self.on_time_since.is_some_and(|t| now.saturating_duration_since(t) >= self.cfg.silence());
        let hold = self.cfg.hold;
        let recovering = self.recovering(now);
        let mut expired = false;
        for (name, w) in &mut self.watched {
            match w.suspected {
                None if judging => {
                    let silence =
                        recovery_stretch(w.allowance(now, &self.cfg, self.pressure), recovering, &self.cfg);
                    if now.saturating_duration_since(w.heard) >= silence {
                        w.suspected = Some(now);
                        self.suspicions_changed += 1;
                        self.events.push_back(Event::Suspected(name.clone()));
                    }
                }
                Some(at) if now.saturating_duration_since(at) >= hold => expired = true,
                _ => {}
            }
        }
        if expired {
            let events = &mut self.events;
            self.watched.retain(|name, w| {
                let gone = w.suspected.is_some_and(|at| now.saturating_duration_since(at) >= hold);
                if gone {
                    events.push_back(Event::Cleared { name: name.clone(), why: Cleared::Expired });
                }
                !gone
            });
            self.suspicions_changed += 1;
        }
    }

    /// The members to beat now, once per tick (empty when no beat is due).
    pub fn poll_transmit(&mut self) -> Option<&BTreeSet<String>> {
        std::mem::take(&mut self.beat_now).then_some(&self.targets)
    }

    /// The former targets to send [`Message::Release`] now: at once when they leave the
    /// targets, then once per tick until each was told [`RELEASE_SENDS`] times.
    pub fn poll_release(&mut self) -> Vec<String> {
        if !std::mem::take(&mut self.release_now) {
            return Vec::new();
        }
        let names = self.releasing.keys().cloned().collect();
        self.releasing.retain(|_, left| {
            *left -= 1;
            *left > 0
        });
        names
    }

    /// When the next tick is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.due
    }

    /// The next event, until None.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The members suspected now.
    pub fn suspected(&self) -> BTreeSet<String> {
        self.watched.iter().filter(|(_, w)| w.suspected.is_some()).map(|(n, _)| n.to_string()).collect()
    }

    /// Counts the changes of [`Heartbeats::suspected`]: build the set again only when
    /// this moved.
    pub fn suspicions_changed(&self) -> u64 {
        self.suspicions_changed
    }

    /// The members watched now (heard beating).
    pub fn watched(&self) -> impl Iterator<Item = &str> {
        self.watched.keys().map(|k| &**k)
    }

    /// The silence after which member `name` would be suspected at `now` (None when it is
    /// not watched): the configured one, or more for a member whose beats came irregularly.
    pub fn allowance(&self, now: Instant, name: &str) -> Option<Duration> {
        let recovering = self.recovering(now);
        self.watched
            .get(name)
            .map(|w| recovery_stretch(w.allowance(now, &self.cfg, self.pressure), recovering, &self.cfg))
    }

    /// Whether this node was starved (a late tick) less than `max_silence` ago.
    fn recovering(&self, now: Instant) -> bool {
        self.late_at.is_some_and(|t| now.saturating_duration_since(t) < self.cfg.max_silence)
    }

    /// Ticks that came an interval or more late: the times this node was starved.
    pub fn late_ticks(&self) -> u64 {
        self.late_ticks
    }

    /// What the host's pressure multiplies the silence by now ([`pressure::multiplier`]).
    pub fn stretch(&self) -> u32 {
        pressure::multiplier(self.pressure)
    }
}

#[cfg(test)]
mod tests;
