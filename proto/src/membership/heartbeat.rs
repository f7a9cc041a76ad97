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
//!   may be queued in its own socket. The driver also reads every queued datagram before
//!   it judges.
//! * **The beat loop runs at real-time priority** in its driver (SCHED_FIFO where the
//!   node allows it), so an owner whose cores are saturated still beats on time.
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

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

/// What a heartbeat datagram says: its payload under [`super::auth::Kind::Beat`], a
/// type byte and the sender's node name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// "I live": from an owner to its successors.
    Beat(String),
    /// "I took over your addresses": from a successor to the member it suspects. A member
    /// that reads it is alive after all (a false suspicion): it announces its addresses
    /// again, so clients that followed the successor's gratuitous ARP come back once the
    /// successor, hearing its beats, lets go.
    TookOver(String),
    /// "I no longer beat you": from an owner to a node that left its targets. The node
    /// stops watching it (silence from now on means nothing) until it beats again.
    Release(String),
}

impl Message {
    /// The payload.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, name) = match self {
            Message::Beat(n) => (0u8, n),
            Message::TookOver(n) => (1u8, n),
            Message::Release(n) => (2u8, n),
        };
        let mut out = Vec::with_capacity(1 + name.len());
        out.push(kind);
        out.extend_from_slice(name.as_bytes());
        out
    }

    /// A payload read back; None for anything else.
    pub fn decode(payload: &[u8]) -> Option<Message> {
        let (kind, name) = payload.split_first()?;
        let name = std::str::from_utf8(name).ok().filter(|n| !n.is_empty())?.to_owned();
        match kind {
            0 => Some(Message::Beat(name)),
            1 => Some(Message::TookOver(name)),
            2 => Some(Message::Release(name)),
            _ => None,
        }
    }
}

/// How many ticks in a row an owner sends [`Message::Release`] to a node that left its
/// targets: a datagram lost, or overtaken by the last beat, is made good by the next.
pub const RELEASE_SENDS: u8 = 3;

/// Heartbeat timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// How often an owner beats its successors; zero turns heartbeats off (SWIM alone).
    pub interval: Duration,
    /// Intervals of silence after which a watched member is suspected.
    pub misses: u32,
    /// How long a suspicion SWIM does not confirm lasts.
    pub hold: Duration,
}

impl Default for HeartbeatConfig {
    /// 5 ms beats, suspected after 20 ms of silence, suspicion held up to 3 s.
    fn default() -> Self {
        HeartbeatConfig { interval: Duration::from_millis(5), misses: 4, hold: Duration::from_secs(3) }
    }
}

impl HeartbeatConfig {
    /// False when heartbeats are off.
    pub fn enabled(&self) -> bool {
        !self.interval.is_zero() && self.misses > 0
    }

    /// The silence after which a watched member is suspected.
    pub fn silence(&self) -> Duration {
        self.interval.saturating_mul(self.misses)
    }
}

/// An input at an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// An authenticated beat from member `0`.
    Beat(String),
    /// An authenticated [`Message::Release`] from member `0`: it no longer beats this node.
    Released(String),
    /// The tick [`Heartbeats::poll_timeout`] asked for (or any wake-up: early ones do nothing).
    Timeout,
    /// The members to beat from now on: the successors of the addresses this node owns.
    Targets(BTreeSet<String>),
    /// SWIM's live set: watches of members no longer in it end (SWIM took over).
    Live(BTreeSet<String>),
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

/// What happened, for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Member `0` beats this node (its first beat, or the first since its watch ended):
    /// it is watched from now on.
    Watching(String),
    /// Member `0` fell silent: elect without it.
    Suspected(String),
    /// Member `0`, watched and not suspected, no longer beats this node (this node is no
    /// longer successor of its addresses): it is not watched until it beats again.
    Released(String),
    /// The suspicion of member `name` ended.
    Cleared {
        /// The member.
        name: String,
        /// Why.
        why: Cleared,
    },
}

#[derive(Debug, Clone, Copy)]
struct Watch {
    heard: Instant,
    suspected: Option<Instant>,
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
    /// Members heard beating, by name.
    watched: BTreeMap<String, Watch>,
    /// Since when this node's own ticks came on time.
    on_time_since: Option<Instant>,
    /// Ticks that came an interval or more late (this node was starved).
    late_ticks: u64,
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
            late_ticks: 0,
            beat_now: false,
            release_now: false,
            events: VecDeque::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> HeartbeatConfig {
        self.cfg
    }

    /// Feeds one input at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        if !self.cfg.enabled() {
            return;
        }
        let due = *self.due.get_or_insert(now + self.cfg.interval);
        self.on_time_since.get_or_insert(now);
        match input {
            Input::Beat(name) => self.on_beat(now, name),
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
            Input::Live(live) => self.watched.retain(|name, _| live.contains(name)),
        }
    }

    fn on_beat(&mut self, now: Instant, name: String) {
        match self.watched.get_mut(&name) {
            Some(w) => {
                w.heard = now;
                if w.suspected.take().is_some() {
                    self.events.push_back(Event::Cleared { name, why: Cleared::BeatsResumed });
                }
            }
            None => {
                self.watched.insert(name.clone(), Watch { heard: now, suspected: None });
                self.events.push_back(Event::Watching(name));
            }
        }
    }

    fn on_released(&mut self, name: String) {
        if let Some(w) = self.watched.remove(&name) {
            self.events.push_back(match w.suspected {
                Some(_) => Event::Cleared { name, why: Cleared::Released },
                None => Event::Released(name),
            });
        }
    }

    fn tick(&mut self, now: Instant, due: Instant) {
        let interval = self.cfg.interval;
        if now.saturating_duration_since(due) >= interval {
            // This node was starved: what it did not hear may be queued behind it.
            self.late_ticks += 1;
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
        let silence = self.cfg.silence();
        let judging = self.on_time_since.is_some_and(|t| now.saturating_duration_since(t) >= silence);
        let hold = self.cfg.hold;
        let mut expired = Vec::new();
        for (name, w) in &mut self.watched {
            match w.suspected {
                None if judging && now.saturating_duration_since(w.heard) >= silence => {
                    w.suspected = Some(now);
                    self.events.push_back(Event::Suspected(name.clone()));
                }
                Some(at) if now.saturating_duration_since(at) >= hold => expired.push(name.clone()),
                _ => {}
            }
        }
        for name in expired {
            self.watched.remove(&name);
            self.events.push_back(Event::Cleared { name, why: Cleared::Expired });
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
        self.watched.iter().filter(|(_, w)| w.suspected.is_some()).map(|(n, _)| n.clone()).collect()
    }

    /// The members watched now (heard beating).
    pub fn watched(&self) -> impl Iterator<Item = &str> {
        self.watched.keys().map(String::as_str)
    }

    /// Ticks that came an interval or more late: the times this node was starved.
    pub fn late_ticks(&self) -> u64 {
        self.late_ticks
    }
}

#[cfg(test)]
mod tests;
