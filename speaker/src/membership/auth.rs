//! Authenticated membership datagrams, sans-IO.
//!
//! ```text
//! "FLBM" | version 1 | sender instance (u64) | sequence (u64) | unix time ms (u64) | payload | HMAC-SHA256 (32)
//! ```
//! The MAC covers everything before it, keyed with the shared membership key.
//! Replays are dropped by a per-instance sliding window over sequence numbers (64 wide);
//! a packet older than [`MAX_AGE_MS`] (or as far in the future) is dropped as stale, so
//! a sender instance forgotten after that age cannot be replayed either.

use std::collections::HashMap;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

const MAGIC: &[u8; 4] = b"FLBM";
const VERSION: u8 = 1;
const HEADER_LEN: usize = 4 + 1 + 8 + 8 + 8;
const TAG_LEN: usize = 32;
/// Oldest (and furthest in the future) a packet may be, in milliseconds: bounds clock
/// skew between nodes and how long replay state is kept.
pub const MAX_AGE_MS: u64 = 30_000;
/// How far behind the newest sequence number a late packet may be.
const WINDOW: u64 = 64;

/// Why a received datagram was dropped; `as_str` is the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DropReason {
    /// Too short, wrong magic or version.
    #[error("not a membership datagram")]
    Malformed,
    /// The MAC does not verify: another key, or tampered with.
    #[error("authentication failed")]
    Unauthenticated,
    /// A sequence number seen before.
    #[error("replayed")]
    Replayed,
    /// Timestamp outside the accepted age.
    #[error("stale timestamp")]
    Stale,
    /// Authenticated, but the membership protocol rejected it.
    #[error("membership protocol rejected it")]
    Protocol,
}

impl DropReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::Unauthenticated => "unauthenticated",
            DropReason::Replayed => "replayed",
            DropReason::Stale => "stale",
            DropReason::Protocol => "protocol",
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    highest: u64,
    /// Bit i set: sequence `highest - i` seen.
    seen: u64,
    last_ms: u64,
}

/// Seals outgoing and opens incoming datagrams for one node.
pub struct Sealer {
    mac: Hmac<Sha256>,
    instance: u64,
    next_seq: u64,
    peers: HashMap<u64, Window>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Sealer").field("instance", &self.instance).finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer with the shared `key` and this process's random `instance` id. HMAC
    /// accepts keys of any length, so the error is only a formality of its API.
    pub fn new(key: &[u8], instance: u64) -> Result<Self, hmac::digest::InvalidLength> {
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)?;
        Ok(Sealer { mac, instance, next_seq: 0, peers: HashMap::new() })
    }

    /// Wraps `payload` for sending at `now_ms` (unix milliseconds).
    pub fn seal(&mut self, now_ms: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len() + TAG_LEN);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.instance.to_be_bytes());
        out.extend_from_slice(&self.next_seq.to_be_bytes());
        out.extend_from_slice(&now_ms.to_be_bytes());
        out.extend_from_slice(payload);
        self.next_seq += 1;
        let mut m = self.mac.clone();
        m.update(&out);
        out.extend_from_slice(&m.finalize().into_bytes());
        out
    }

    /// Verifies a received datagram at `now_ms`; returns its payload.
    pub fn open<'a>(&mut self, now_ms: u64, datagram: &'a [u8]) -> Result<&'a [u8], DropReason> {
        if datagram.len() < HEADER_LEN + TAG_LEN
            || &datagram[..4] != MAGIC
            || datagram.get(4) != Some(&VERSION)
        {
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
        let (instance, seq, ts) = (field(5), field(13), field(21));
        if now_ms.abs_diff(ts) > MAX_AGE_MS {
            return Err(DropReason::Stale);
        }
        self.check_replay(now_ms, instance, seq)?;
        Ok(&body[HEADER_LEN..])
    }

    fn check_replay(&mut self, now_ms: u64, instance: u64, seq: u64) -> Result<(), DropReason> {
        // Forget senders silent for longer than a packet may live: their old packets are stale.
        if self.peers.len() > 64 {
            self.peers.retain(|_, w| now_ms.saturating_sub(w.last_ms) <= 2 * MAX_AGE_MS);
        }
        let w = self.peers.entry(instance).or_insert(Window { highest: seq, seen: 0, last_ms: now_ms });
        w.last_ms = now_ms;
        if seq > w.highest || (w.seen == 0 && seq == w.highest) {
            let shift = seq - w.highest;
            w.seen = if shift >= WINDOW { 0 } else { w.seen << shift };
            w.seen |= 1;
            w.highest = seq;
            return Ok(());
        }
        let back = w.highest - seq;
        if back >= WINDOW {
            return Err(DropReason::Replayed);
        }
        let bit = 1u64 << back;
        if w.seen & bit != 0 {
            return Err(DropReason::Replayed);
        }
        w.seen |= bit;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn sealed_datagrams_open_once() {
        let mut a = Sealer::new(KEY, 1).unwrap();
        let mut b = Sealer::new(KEY, 2).unwrap();
        let d1 = a.seal(NOW, b"hello");
        let d2 = a.seal(NOW, b"world");
        assert_eq!(b.open(NOW, &d2), Ok(&b"world"[..]));
        // Reordered but new: accepted; the same again: replay.
        assert_eq!(b.open(NOW, &d1), Ok(&b"hello"[..]));
        assert_eq!(b.open(NOW, &d1), Err(DropReason::Replayed));
        assert_eq!(b.open(NOW, &d2), Err(DropReason::Replayed));
    }

    #[test]
    fn wrong_key_tampering_and_age_are_rejected() {
        let mut a = Sealer::new(KEY, 1).unwrap();
        let mut other = Sealer::new(b"another key, also long enough....", 3).unwrap();
        let d = a.seal(NOW, b"payload");
        assert_eq!(other.open(NOW, &d), Err(DropReason::Unauthenticated));
        let mut b = Sealer::new(KEY, 2).unwrap();
        let mut t = d.clone();
        t[HEADER_LEN] ^= 1;
        assert_eq!(b.open(NOW, &t), Err(DropReason::Unauthenticated));
        assert_eq!(b.open(NOW + MAX_AGE_MS + 1, &d), Err(DropReason::Stale));
        assert_eq!(b.open(NOW, &d[..10]), Err(DropReason::Malformed));
        assert_eq!(b.open(NOW, &d), Ok(&b"payload"[..]));
    }

    #[test]
    fn sequence_numbers_far_behind_are_replays() {
        let mut a = Sealer::new(KEY, 1).unwrap();
        let mut b = Sealer::new(KEY, 2).unwrap();
        let first = a.seal(NOW, b"x");
        let mut last = Vec::new();
        for _ in 0..100 {
            last = a.seal(NOW, b"y");
        }
        assert!(b.open(NOW, &last).is_ok());
        assert_eq!(b.open(NOW, &first), Err(DropReason::Replayed));
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
            let _ = b.open(NOW, &bytes);
        }
    }
}
