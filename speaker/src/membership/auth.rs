//! Authenticated membership datagrams, sans-IO and clock-free.
//!
//! ```text
//! "FLBM" | version 2 | session (u64) | counter (u64) | payload | HMAC-SHA256 (32)
//! ```
//! The MAC covers everything before it, keyed with the shared membership key.
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

use std::collections::HashMap;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const MAGIC: &[u8; 4] = b"FLBM";
/// The wire version; datagrams of another version are dropped as [`DropReason::Version`].
pub const VERSION: u8 = 2;
const HEADER_LEN: usize = 4 + 1 + 8 + 8;
const TAG_LEN: usize = 32;
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
        }
    }

    /// Every reason, for metrics and sums.
    pub const ALL: [DropReason; 5] = [
        DropReason::Malformed,
        DropReason::Version,
        DropReason::Unauthenticated,
        DropReason::Replayed,
        DropReason::Protocol,
    ];

    /// True when the datagram most likely came from a ferrolb peer this node cannot
    /// read (another key, another version, or its traffic judged a replay): while such
    /// datagrams arrive and nobody is live, this node's lone view proves nothing
    /// ([`super::guard`]). Malformed datagrams are not membership traffic at all.
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

/// Seals outgoing and opens incoming datagrams for one membership instance.
pub struct Sealer {
    mac: Hmac<Sha256>,
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
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)?;
        Ok(Sealer { mac, session, next_counter: 0, sessions: HashMap::new(), opened: 0 })
    }

    /// Wraps `payload` for sending.
    pub fn seal(&mut self, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TAG_LEN);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.session.to_be_bytes());
        out.extend_from_slice(&self.next_counter.to_be_bytes());
        out.extend_from_slice(payload);
        self.next_counter += 1;
        let mut m = self.mac.clone();
        m.update(&out);
        out.extend_from_slice(&m.finalize().into_bytes());
        out
    }

    /// Verifies a received datagram; returns its payload.
    pub fn open<'a>(&mut self, datagram: &'a [u8]) -> Result<&'a [u8], DropReason> {
        if datagram.len() < 5 || &datagram[..4] != MAGIC {
            return Err(DropReason::Malformed);
        }
        if datagram[4] != VERSION {
            return Err(DropReason::Version);
        }
        if datagram.len() < HEADER_LEN + TAG_LEN {
            return Err(DropReason::Malformed);
        }
        let (body, tag) = datagram.split_at(datagram.len() - TAG_LEN);
        let mut m = self.mac.clone();
        m.update(body);
        m.verify_slice(tag).map_err(|_| DropReason::Unauthenticated)?;
        let field = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&body[at..at + 8]);
            u64::from_be_bytes(b)
        };
        self.check_replay(field(5), field(13))?;
        Ok(&body[HEADER_LEN..])
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn sealed_datagrams_open_once() {
        let mut a = Sealer::new(KEY, 1).unwrap();
        let mut b = Sealer::new(KEY, 2).unwrap();
        let d1 = a.seal(b"hello");
        let d2 = a.seal(b"world");
        assert_eq!(b.open(&d2), Ok(&b"world"[..]));
        // Reordered but new: accepted; the same again: replay.
        assert_eq!(b.open(&d1), Ok(&b"hello"[..]));
        assert_eq!(b.open(&d1), Err(DropReason::Replayed));
        assert_eq!(b.open(&d2), Err(DropReason::Replayed));
    }

    /// The header as version 1 wrote it: "FLBM" 1, instance, sequence, unix ms.
    fn v1_datagram(key: &[u8], unix_ms: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = b"FLBM\x01".to_vec();
        out.extend_from_slice(&7u64.to_be_bytes());
        out.extend_from_slice(&0u64.to_be_bytes());
        out.extend_from_slice(&unix_ms.to_be_bytes());
        out.extend_from_slice(payload);
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
        m.update(&out);
        out.extend_from_slice(&m.finalize().into_bytes());
        out
    }

    /// Version 1 stamped datagrams with the sender's wall clock and dropped any more than
    /// 30 s off the receiver's: a node 60 s ahead heard nobody. Version 2 carries no time
    /// (sealing and opening take no clock), so skew cannot matter (the membership tests
    /// run peers whose clocks are 60 s and 1 h off); a version 1 datagram, whatever its
    /// time, is named as another version (a peer of another release), not as garbage.
    #[test]
    fn version_1_datagrams_are_named_another_version() {
        let now_ms = 1_700_000_000_000u64;
        let mut b = Sealer::new(KEY, 2).unwrap();
        for skew_ms in [0i64, 60_000, 3_600_000, -60_000, -3_600_000] {
            let sent_at = now_ms.saturating_add_signed(skew_ms);
            assert_eq!(b.open(&v1_datagram(KEY, sent_at, b"x")), Err(DropReason::Version), "skew {skew_ms}");
        }
    }

    #[test]
    fn wrong_key_tampering_and_garbage_are_rejected() {
        let mut a = Sealer::new(KEY, 1).unwrap();
        let mut other = Sealer::new(b"another key, also long enough....", 3).unwrap();
        let d = a.seal(b"payload");
        assert_eq!(other.open(&d), Err(DropReason::Unauthenticated));
        let mut b = Sealer::new(KEY, 2).unwrap();
        // Any bit of the header or payload flipped (session, counter, payload): forged.
        for at in [5, 13, HEADER_LEN] {
            let mut t = d.clone();
            t[at] ^= 1;
            assert_eq!(b.open(&t), Err(DropReason::Unauthenticated), "byte {at} flipped");
        }
        let mut t = d.clone();
        let last = t.len() - 1;
        t[last] ^= 1;
        assert_eq!(b.open(&t), Err(DropReason::Unauthenticated), "tag flipped");
        assert_eq!(b.open(&d[..10]), Err(DropReason::Malformed));
        assert_eq!(
            b.open(b"garbage that is long enough to be a datagram, but no"),
            Err(DropReason::Malformed)
        );
        let mut v = d.clone();
        v[4] = 3;
        assert_eq!(b.open(&v), Err(DropReason::Version));
        // None of that used up the genuine datagram.
        assert_eq!(b.open(&d), Ok(&b"payload"[..]));
    }

    #[test]
    fn counters_far_behind_are_replays() {
        let mut a = Sealer::new(KEY, 1).unwrap();
        let mut b = Sealer::new(KEY, 2).unwrap();
        let first = a.seal(b"x");
        let mut last = Vec::new();
        for _ in 0..100 {
            last = a.seal(b"y");
        }
        assert!(b.open(&last).is_ok());
        assert_eq!(b.open(&first), Err(DropReason::Replayed));
    }

    /// A restarted peer (a new session) is heard at once, however far its counter is
    /// behind the old session's; the old session's datagrams stay replays.
    #[test]
    fn a_restart_is_a_new_session_and_the_old_one_stays_closed() {
        let mut b = Sealer::new(KEY, 2).unwrap();
        let mut old = Sealer::new(KEY, 100).unwrap();
        let old_datagrams: Vec<Vec<u8>> = (0..200).map(|_| old.seal(b"old")).collect();
        for d in &old_datagrams {
            assert!(b.open(d).is_ok());
        }
        let mut new = Sealer::new(KEY, 101).unwrap();
        assert_eq!(b.open(&new.seal(b"new")), Ok(&b"new"[..]));
        for d in &old_datagrams {
            assert_eq!(b.open(d), Err(DropReason::Replayed));
        }
        assert_eq!(b.open(&new.seal(b"new2")), Ok(&b"new2"[..]));
    }

    /// Sessions beyond MAX_SESSIONS forget the least recently heard, not an active one.
    #[test]
    fn the_least_recently_heard_session_is_forgotten_first() {
        let mut b = Sealer::new(KEY, 0).unwrap();
        let mut active = Sealer::new(KEY, 1).unwrap();
        let kept = active.seal(b"a");
        assert!(b.open(&kept).is_ok());
        for s in 2..=(MAX_SESSIONS as u64 + 10) {
            assert!(b.open(&Sealer::new(KEY, s).unwrap().seal(b"s")).is_ok());
            if s % 512 == 0 {
                assert!(b.open(&active.seal(b"a")).is_ok());
            }
        }
        assert!(b.sessions.len() <= MAX_SESSIONS);
        assert_eq!(b.open(&kept), Err(DropReason::Replayed), "the active session was forgotten");
        assert!(!b.sessions.contains_key(&2), "the oldest session is still remembered");
    }

    #[test]
    fn debug_never_shows_the_key() {
        let s = Sealer::new(KEY, 1).unwrap();
        assert!(!format!("{s:?}").contains("0123456789"));
    }

    proptest! {
        #[test]
        fn open_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut b = Sealer::new(KEY, 2).unwrap();
            let _ = b.open(&bytes);
        }
    }
}
