//! Authenticated membership datagrams, sans-IO and clock-free.
//!
//! ```text
//! "FLBM" | version 3 | session (u64) | counter (u64) | payload | HMAC-SHA256 (32)
//! ```
//! The MAC covers everything before it and the receiver's member name (not sent: the
//! receiver supplies its own), keyed with the shared membership key. The magic
//! names the [`Kind`]: "FLBM" carries SWIM, "FLBH" an L2 heartbeat
//! ([`super::heartbeat`]). A release without heartbeats drops "FLBH" as
//! [`DropReason::Malformed`] (not a sign of an unreadable peer), so both kinds share
//! the membership port through a rolling upgrade.
//!
//! **Replay protection without clocks.** Each [`Sealer`] (one per membership instance:
//! a process start, or a bootstrap rejoin) picks a random 64-bit *session* and numbers
//! its datagrams with a counter that only grows. A receiver keeps, per session, the
//! highest counter seen and a 64-wide bitmap behind it (the IPsec sliding window, so
//! UDP reordering costs nothing): a counter seen before, or further behind than the
//! window, is a replay. A session never seen is accepted (a peer that started); sessions
//! are forgotten only when more than [`MAX_SESSIONS`] are known, least recently heard
//! first. Nothing depends on the wall clock, so nodes whose clocks disagree by any
//! amount still hear each other. (Version 1 carried a timestamp and dropped datagrams
//! more than 30 s off the receiver's clock: a node 60 s ahead heard nobody, settled
//! alone and claimed every L2 address.)
//!
//! **The trade-off.** A receiver cannot tell a session it never saw from one it has
//! forgotten: after the *receiver* restarts (or a bootstrap member rejoins with a new
//! instance) datagrams captured from an earlier session can be replayed to it once each.
//! An attacker cannot forge anything without the key, and a replay is a stale
//! conversation: SWIM drops every message not addressed to the receiver's current
//! identity (its start time is part of it) except an announce, and an announce of an
//! identity older than the one its node runs now loses the identity conflict; what is
//! left is a dead member that looks alive until its first probe fails (well under a
//! second), then is ignored as down for `remove_down_after`. A wall-clock bound on a
//! session's age would shorten that exposure but bring back the dependence on clocks
//! agreeing that this format removes; we take the small exposure instead. Within the
//! life of a receiver, replays are always caught, whatever their age.
//!
//! **Bound to its receiver.** A session's counter numbers every datagram it sends, to
//! whomever: the window of one receiver knows nothing of the counters sent to another.
//! So the MAC also covers the name of the member the datagram is for, and a datagram
//! captured on its way to node2 and replayed to node3 fails node3's MAC (version 2 did
//! not: node3 accepted it once). The name costs nothing on the wire.
//!
//! **Key rotation without a split** ([`Keyring`]). A plain switch partitions: a node that
//! changed seals with the new key, a node that has not yet cannot read it, thinks it dead
//! and claims its addresses. So a node that learns a new key at `t` keeps *sealing* with
//! the old one but *opens* with either; it seals with the new one from `t + W` and stops
//! accepting the old one at `t + 2W` ([`ROTATION_WINDOW`] = W). Provided a change reaches
//! every node within W of the first (the operator's side of the bargain), no node ever
//! receives a key it cannot open: when X seals with the new key (`t_x + W`) every Y has
//! learned it (`t_y < t_x + W`) and opens it; while Y still seals with the old one (until
//! `t_y + W < t_x + 2W`) X still accepts it. Every change is scheduled the same way, a
//! change arriving during a rotation too: keys are sealed with in the order learned, each
//! from W after it was learned, and a key stays accepted until 2W after the change that
//! superseded it was learned, which is all the same argument needs. The schedule takes
//! `now` from the caller; nothing here reads a clock.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// What a datagram carries; its magic says which, under the MAC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A SWIM message ("FLBM").
    Swim,
    /// An L2 heartbeat ("FLBH", [`super::heartbeat`]).
    Beat,
}

impl Kind {
    fn magic(self) -> &'static [u8; 4] {
        match self {
            Kind::Swim => b"FLBM",
            Kind::Beat => b"FLBH",
        }
    }

    fn of(magic: &[u8]) -> Option<Kind> {
        [Kind::Swim, Kind::Beat].into_iter().find(|k| k.magic() == magic)
    }
}

/// The wire version; datagrams of another version are dropped as [`DropReason::Version`].
pub const VERSION: u8 = 3;
const HEADER_LEN: usize = 4 + 1 + 8 + 8;
const TAG_LEN: usize = 32;
/// What sealing adds to a payload: the header before it and the MAC after it.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;
/// How far behind the newest counter of a session a late datagram may be.
const WINDOW: u64 = 64;
/// Sessions remembered per receiver; beyond, the least recently heard is forgotten.
/// Only holders of the key create sessions (one per membership start), so this bounds
/// memory, not an attacker's reach.
pub const MAX_SESSIONS: usize = 4096;

/// Why a received datagram was dropped; `as_str` is the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DropReason {
    /// Too short or not a membership datagram at all.
    #[error("not a membership datagram")]
    Malformed,
    /// A membership datagram of another wire version (another ferrolb release).
    #[error("another membership wire version")]
    Version,
    /// The MAC does not verify: another key, or tampered with.
    #[error("authentication failed")]
    Unauthenticated,
    /// A (session, counter) seen before, or too far behind its session's newest.
    #[error("replayed")]
    Replayed,
    /// Authenticated, but the membership protocol rejected it.
    #[error("membership protocol rejected it")]
    Protocol,
    /// From an address that is no Node's membership address ([`super::peers`]): dropped
    /// before it is opened.
    #[error("not from a node")]
    UnknownSource,
    /// From a node that sent more than its rate ([`super::peers::RATE`]).
    #[error("over the source's rate")]
    RateLimited,
    /// Authenticated, but it speaks for another node than the one it came from.
    #[error("speaks for another node")]
    Impersonation,
}

impl DropReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::Version => "version",
            DropReason::Unauthenticated => "unauthenticated",
            DropReason::Replayed => "replayed",
            DropReason::Protocol => "protocol",
            DropReason::UnknownSource => "unknown_source",
            DropReason::RateLimited => "rate_limited",
            DropReason::Impersonation => "impersonation",
        }
    }

    /// Every reason, for metrics and sums.
    pub const ALL: [DropReason; 8] = [
        DropReason::Malformed,
        DropReason::Version,
        DropReason::Unauthenticated,
        DropReason::Replayed,
        DropReason::Protocol,
        DropReason::UnknownSource,
        DropReason::RateLimited,
        DropReason::Impersonation,
    ];

    /// True when the datagram most likely came from a ferrolb peer this node cannot
    /// read (another key, another version, or its traffic judged a replay): while such
    /// datagrams arrive and nobody is live, this node's lone view proves nothing
    /// ([`super::claim`]). Malformed datagrams are not membership traffic at all,
    /// and datagrams from no Node's address, or over a node's rate, were never opened.
    pub fn from_unreadable_peer(self) -> bool {
        matches!(self, DropReason::Version | DropReason::Unauthenticated | DropReason::Replayed)
    }
}

/// What a receiver remembers of one sender session.
#[derive(Debug, Clone, Copy)]
struct Window {
    highest: u64,
    /// Bit i set: counter `highest - i` seen.
    seen: u64,
    /// The receiver's datagram count when this session was last heard (LRU order).
    heard: u64,
}

/// How long a node keeps sealing with the old key after it learned a new one, and then
/// keeps accepting the old one after it seals with the new one. A key change must reach
/// every node within this window (see the module documentation).
pub const ROTATION_WINDOW: Duration = Duration::from_secs(30);

/// Keys accepted at once at most: the one sealed with, those learned after it and those
/// retiring. Only several changes within 2W fill it; then the retiring key that expires
/// first is forgotten early (and a rotation that fast may split the cluster for a moment).
pub const MAX_KEYS: usize = 4;

/// A change of the key schedule, for the driver to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyEvent {
    /// A new key is accepted from now; datagrams are sealed with it from `seal_from`.
    Learned {
        /// When sealing switches to it.
        seal_from: Instant,
    },
    /// Datagrams are sealed with the next key now; the previous one is still accepted.
    Sealing {
        /// Until when the previous key is accepted.
        previous_until: Instant,
    },
    /// A previous key is no longer accepted.
    Retired,
}

/// Where a rotation stands (`ferrolb_membership_key_rotation_phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationPhase {
    /// One key, sealed with and accepted.
    Steady = 0,
    /// A new key is accepted; sealing still uses the old one.
    AcceptingNew = 1,
    /// Sealing uses the new key; the old one is still accepted.
    RetiringOld = 2,
}

/// Which key of the schedule opened a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRole {
    /// The key this node seals with.
    Sealing,
    /// A key learned but not yet sealed with (a peer switched before this node).
    Next,
    /// A key this node sealed with before (a peer has not switched yet).
    Previous,
}

/// One key: its MAC state and a digest to tell keys apart (never the key).
#[derive(Clone)]
struct Slot {
    mac: Hmac<Sha256>,
    id: [u8; 32],
    /// When the change that superseded this key was learned plus 2W: accepted until then.
    until: Option<Instant>,
}

impl Slot {
    fn new(key: &[u8]) -> Result<Self, hmac::digest::InvalidLength> {
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)?;
        let mut id = [0u8; 32];
        id.copy_from_slice(&Sha256::digest(key));
        Ok(Slot { mac, id, until: None })
    }
}

/// The membership key schedule (see the module documentation): sans-IO, driven by
/// [`Keyring::learn`] and [`Keyring::handle_timeout`] with the caller's `now`.
pub struct Keyring {
    window: Duration,
    sealing: Slot,
    /// Learned, not yet sealed with, in order, each with when sealing switches to it.
    next: VecDeque<(Slot, Instant)>,
    /// Sealed with before, accepted until their `until`.
    previous: Vec<Slot>,
    events: VecDeque<KeyEvent>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never a key.
        f.debug_struct("Keyring")
            .field("window", &self.window)
            .field("next", &self.next.len())
            .field("previous", &self.previous.len())
            .finish_non_exhaustive()
    }
}

impl Keyring {
    /// A schedule holding `key` alone; changes take `window` to seal with, 2 × `window`
    /// to retire the old key.
    pub fn new(key: &[u8], window: Duration) -> Result<Self, hmac::digest::InvalidLength> {
        Ok(Keyring {
            window,
            sealing: Slot::new(key)?,
            next: VecDeque::new(),
            previous: Vec::new(),
            events: VecDeque::new(),
        })
    }

    /// The key to reach, the last learned: `key` again changes nothing.
    fn target(&self) -> &Slot {
        self.next.back().map_or(&self.sealing, |(s, _)| s)
    }

    /// This node learned `key` at `now`: accepted at once, sealed with from `now + W`;
    /// the key it supersedes stays accepted until `now + 2W`. The current key again is no
    /// change (returns false).
    pub fn learn(&mut self, now: Instant, key: &[u8]) -> Result<bool, hmac::digest::InvalidLength> {
        let slot = Slot::new(key)?;
        if self.target().id == slot.id {
            return Ok(false);
        }
        let until = now + self.window * 2;
        match self.next.back_mut() {
            Some((s, _)) => s.until = Some(until),
            None => self.sealing.until = Some(until),
        }
        let seal_from = now + self.window;
        self.next.push_back((slot, seal_from));
        while self.accepted() > MAX_KEYS {
            if let Some(i) = (0..self.previous.len()).min_by_key(|i| self.previous[*i].until) {
                self.previous.remove(i);
            } else if self.next.len() > 1 {
                self.next.pop_front();
            } else {
                break;
            }
        }
        self.events.push_back(KeyEvent::Learned { seal_from });
        Ok(true)
    }

    fn accepted(&self) -> usize {
        1 + self.next.len() + self.previous.len()
    }

    /// Advances the schedule to `now`: switches sealing, retires old keys.
    pub fn handle_timeout(&mut self, now: Instant) {
        while self.next.front().is_some_and(|(_, at)| *at <= now) {
            let Some((slot, _)) = self.next.pop_front() else { break };
            let old = std::mem::replace(&mut self.sealing, slot);
            let previous_until = old.until.unwrap_or(now);
            self.previous.push(old);
            self.events.push_back(KeyEvent::Sealing { previous_until });
        }
        let before = self.previous.len();
        self.previous.retain(|s| s.until.is_some_and(|u| u > now));
        for _ in self.previous.len()..before {
            self.events.push_back(KeyEvent::Retired);
        }
    }

    /// When [`Keyring::handle_timeout`] has something to do next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let switch = self.next.front().map(|(_, at)| *at);
        let retire = self.previous.iter().filter_map(|s| s.until).min();
        switch.into_iter().chain(retire).min()
    }

    /// The next change to log.
    pub fn poll_event(&mut self) -> Option<KeyEvent> {
        self.events.pop_front()
    }

    /// Where the rotation stands.
    pub fn phase(&self) -> RotationPhase {
        if !self.next.is_empty() {
            RotationPhase::AcceptingNew
        } else if !self.previous.is_empty() {
            RotationPhase::RetiringOld
        } else {
            RotationPhase::Steady
        }
    }

    fn sealing_mac(&self) -> &Hmac<Sha256> {
        &self.sealing.mac
    }

    /// The key whose MAC over `body` for `receiver` is `tag`, trying each accepted key once.
    fn verify(&self, body: &[u8], receiver: &str, tag: &[u8]) -> Option<KeyRole> {
        let candidates = std::iter::once((&self.sealing, KeyRole::Sealing))
            .chain(self.next.iter().map(|(s, _)| (s, KeyRole::Next)))
            .chain(self.previous.iter().rev().map(|s| (s, KeyRole::Previous)));
        // On the stack: the heartbeat reader opens every datagram without allocating.
        let mut tried: [Option<&[u8; 32]>; MAX_KEYS] = [None; MAX_KEYS];
        for (at, (slot, role)) in candidates.enumerate() {
            if tried.contains(&Some(&slot.id)) {
                continue;
            }
            if let Some(t) = tried.get_mut(at) {
                *t = Some(&slot.id);
            }
            let mut m = slot.mac.clone();
            mac_input(&mut m, body, receiver);
            if m.verify_slice(tag).is_ok() {
                return Some(role);
            }
        }
        None
    }
}

/// Seals outgoing and opens incoming datagrams for one membership instance.
pub struct Sealer {
    keys: Keyring,
    session: u64,
    next_counter: u64,
    sessions: HashMap<u64, Window>,
    /// Datagrams accepted so far: a clock-free order for forgetting sessions.
    opened: u64,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Sealer").field("session", &self.session).finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer with the shared `key` and this instance's random `session`. HMAC
    /// accepts keys of any length, so the error is only a formality of its API.
    pub fn new(key: &[u8], session: u64) -> Result<Self, hmac::digest::InvalidLength> {
        Self::with_window(key, session, ROTATION_WINDOW)
    }

    /// Like [`Sealer::new`] with another rotation window (tests).
    pub fn with_window(
        key: &[u8],
        session: u64,
        window: Duration,
    ) -> Result<Self, hmac::digest::InvalidLength> {
        let keys = Keyring::new(key, window)?;
        Ok(Sealer { keys, session, next_counter: 0, sessions: HashMap::new(), opened: 0 })
    }

    /// The key schedule, to rotate the key ([`Keyring::learn`]) and drive it.
    pub fn keys(&mut self) -> &mut Keyring {
        &mut self.keys
    }

    /// Wraps a SWIM `payload` for the member named `to`.
    pub fn seal(&mut self, to: &str, payload: &[u8]) -> Vec<u8> {
        self.seal_kind(Kind::Swim, to, payload)
    }

    /// Wraps `payload` of `kind` for the member named `to`.
    pub fn seal_kind(&mut self, kind: Kind, to: &str, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TAG_LEN);
        self.seal_kind_into(kind, to, payload, &mut out);
        out
    }

    /// [`Sealer::seal_kind`] into `out` (cleared first): no allocation once `out` is
    /// large enough, for the heartbeat's real-time thread.
    pub fn seal_kind_into(&mut self, kind: Kind, to: &str, payload: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(kind.magic());
        out.push(VERSION);
        out.extend_from_slice(&self.session.to_be_bytes());
        out.extend_from_slice(&self.next_counter.to_be_bytes());
        out.extend_from_slice(payload);
        self.next_counter += 1;
        let mut m = self.keys.sealing_mac().clone();
        mac_input(&mut m, out, to);
        out.extend_from_slice(&m.finalize().into_bytes());
    }

    /// Verifies a SWIM datagram received by the member named `me`; returns its payload
    /// (a heartbeat is [`DropReason::Malformed`] here).
    pub fn open<'a>(&mut self, me: &str, datagram: &'a [u8]) -> Result<&'a [u8], DropReason> {
        match self.open_kind(me, datagram)? {
            (p, _, Kind::Swim) => Ok(p),
            (_, _, Kind::Beat) => Err(DropReason::Malformed),
        }
    }

    /// Verifies a datagram of either kind received by the member named `me`; returns its
    /// payload, which key of the schedule opened it, and its kind.
    pub fn open_kind<'a>(
        &mut self,
        me: &str,
        datagram: &'a [u8],
    ) -> Result<(&'a [u8], KeyRole, Kind), DropReason> {
        let kind = datagram.get(..4).and_then(Kind::of).ok_or(DropReason::Malformed)?;
        match datagram.get(4) {
            None => return Err(DropReason::Malformed),
            Some(v) if *v != VERSION => return Err(DropReason::Version),
            Some(_) => {}
        }
        if datagram.len() < HEADER_LEN + TAG_LEN {
            return Err(DropReason::Malformed);
        }
        let (body, tag) = datagram.split_at(datagram.len() - TAG_LEN);
        let role = self.keys.verify(body, me, tag).ok_or(DropReason::Unauthenticated)?;
        let field = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&body[at..at + 8]);
            u64::from_be_bytes(b)
        };
        self.check_replay(field(5), field(13))?;
        Ok((&body[HEADER_LEN..], role, kind))
    }

    fn check_replay(&mut self, session: u64, counter: u64) -> Result<(), DropReason> {
        self.opened += 1;
        let heard = self.opened;
        if !self.sessions.contains_key(&session) && self.sessions.len() >= MAX_SESSIONS {
            let oldest = self.sessions.iter().min_by_key(|(_, w)| w.heard).map(|(s, _)| *s);
            if let Some(s) = oldest {
                self.sessions.remove(&s);
            }
        }
        let w = self.sessions.entry(session).or_insert(Window { highest: counter, seen: 0, heard });
        if counter > w.highest || (w.seen == 0 && counter == w.highest) {
            let shift = counter - w.highest;
            w.seen = if shift >= WINDOW { 0 } else { w.seen << shift };
            w.seen |= 1;
            w.highest = counter;
            w.heard = heard;
            return Ok(());
        }
        let back = w.highest - counter;
        if back >= WINDOW {
            return Err(DropReason::Replayed);
        }
        let bit = 1u64 << back;
        if w.seen & bit != 0 {
            return Err(DropReason::Replayed);
        }
        w.seen |= bit;
        w.heard = heard;
        Ok(())
    }
}

/// What the MAC covers: the datagram before the tag, then the receiver's name with its
/// length (so no name is a prefix of another's input).
fn mac_input(m: &mut Hmac<Sha256>, body: &[u8], receiver: &str) {
    m.update(body);
    m.update(receiver.as_bytes());
    m.update(&u64::try_from(receiver.len()).unwrap_or(u64::MAX).to_be_bytes());
}

#[cfg(test)]
mod tests;
