//! Who may speak on the membership port, and for whom: sans-IO, clock from the caller.
//!
//! The shared key proves a datagram came from *some* node, not which one. So the reader
//! holds every datagram to the Nodes' own membership addresses (from the model: the
//! Nodes' InternalIPs, or a static file, or bootstrap's checkpoint):
//!
//! * **Before any MAC work**, a datagram whose source is no Node's membership address is
//!   dropped ([`DropReason::UnknownSource`]). Junk from elsewhere costs a hash lookup,
//!   and is no evidence of a mis-keyed peer: a lone restarting node does not turn
//!   blind because someone sends it keyless datagrams.
//! * **Per source, a token bucket** ([`RATE`] a second, [`BURST`] at once) bounds what one
//!   address may make this node verify; a peer sends a few hundred datagrams a second
//!   at most (beats every 5 ms, SWIM every 100 ms), so only a flood meets it
//!   ([`DropReason::RateLimited`]).
//! * **A member speaks only for itself.** A beat, release or take-over notice names its
//!   sender, and so does a SWIM header: the name must be the node whose address the
//!   datagram came from ([`Peers::speaks_for`]), else it is dropped
//!   ([`DropReason::Impersonation`]). A holder of the key on node2 cannot beat,
//!   release or take over for node1.
//!
//! Source addresses can be spoofed on a LAN; this binds messages to the Nodes'
//! addresses, it does not authenticate each node (that would take a key per node).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use super::Seed;
use super::auth::DropReason;

/// Datagrams a second one source may make this node open, sustained.
pub const RATE: u32 = 2000;
/// Datagrams one source may send at once above [`RATE`].
pub const BURST: u32 = 400;

/// A token bucket for one source.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The Nodes' membership addresses by name, and a bucket per address.
#[derive(Debug, Clone, Default)]
pub struct Peers {
    names: HashMap<SocketAddr, Vec<String>>,
    buckets: HashMap<SocketAddr, Bucket>,
}

impl Peers {
    /// Peers from `seeds` (a name may come several times: each of its addresses).
    pub fn new(seeds: &[Seed]) -> Self {
        let mut p = Peers::default();
        p.set(seeds);
        p
    }

    /// Replaces the known addresses; the buckets of addresses still known are kept.
    pub fn set(&mut self, seeds: &[Seed]) {
        self.names.clear();
        for s in seeds {
            let names = self.names.entry(canonical(s.addr)).or_default();
            if !names.contains(&s.name) {
                names.push(s.name.clone());
            }
        }
        self.buckets.retain(|a, _| self.names.contains_key(a));
    }

    /// Whether a datagram from `from` may be opened at `now` (counts it against the
    /// source's bucket). No allocation once the source was heard.
    pub fn admit(&mut self, now: Instant, from: SocketAddr) -> Result<(), DropReason> {
        let from = canonical(from);
        if !self.names.contains_key(&from) {
            return Err(DropReason::UnknownSource);
        }
        let full = f64::from(BURST);
        let b = self.buckets.entry(from).or_insert(Bucket { tokens: full, at: now });
        let elapsed = now.saturating_duration_since(b.at);
        b.tokens = (b.tokens + elapsed.as_secs_f64() * f64::from(RATE)).min(full);
        b.at = now;
        if b.tokens < 1.0 {
            return Err(DropReason::RateLimited);
        }
        b.tokens -= 1.0;
        Ok(())
    }

    /// True when `name` is a node that listens at `from`: a datagram from `from` may
    /// speak for `name`.
    pub fn speaks_for(&self, from: SocketAddr, name: &str) -> bool {
        self.names.get(&canonical(from)).is_some_and(|names| names.iter().any(|n| n == name))
    }
}

/// The address as peers list it: an IPv4 peer reaching a dual-stack socket shows up as
/// `::ffff:a.b.c.d`.
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(a.ip().to_canonical(), a.port())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn seed(name: &str, addr: &str) -> Seed {
        Seed { name: name.into(), addr: addr.parse().unwrap() }
    }

    fn peers() -> Peers {
        Peers::new(&[
            seed("node1", "192.0.2.1:7946"),
            seed("node1", "[2001:db8::1]:7946"),
            seed("node2", "192.0.2.2:7946"),
        ])
    }

    #[test]
    fn a_datagram_from_no_node_is_dropped_before_it_is_opened() {
        let mut p = peers();
        let now = Instant::now();
        assert_eq!(p.admit(now, "192.0.2.9:7946".parse().unwrap()), Err(DropReason::UnknownSource));
        // A Node's address from another port is not its membership socket.
        assert_eq!(p.admit(now, "192.0.2.1:40000".parse().unwrap()), Err(DropReason::UnknownSource));
        assert_eq!(p.admit(now, "192.0.2.1:7946".parse().unwrap()), Ok(()));
        assert_eq!(p.admit(now, "[2001:db8::1]:7946".parse().unwrap()), Ok(()));
        // An IPv4 peer reaching a dual-stack socket.
        assert_eq!(p.admit(now, "[::ffff:192.0.2.2]:7946".parse().unwrap()), Ok(()));
    }

    #[test]
    fn a_member_speaks_only_for_itself() {
        let p = peers();
        let node1: SocketAddr = "192.0.2.1:7946".parse().unwrap();
        let node2: SocketAddr = "192.0.2.2:7946".parse().unwrap();
        assert!(p.speaks_for(node1, "node1"));
        assert!(p.speaks_for("[2001:db8::1]:7946".parse().unwrap(), "node1"));
        assert!(!p.speaks_for(node2, "node1"), "node2 forging node1");
        assert!(!p.speaks_for("192.0.2.9:7946".parse().unwrap(), "node1"));
    }

    #[test]
    fn one_source_is_held_to_its_rate_and_others_are_not_affected() {
        let mut p = peers();
        let t0 = Instant::now();
        let node1: SocketAddr = "192.0.2.1:7946".parse().unwrap();
        let node2: SocketAddr = "192.0.2.2:7946".parse().unwrap();
        let admitted = (0..10 * BURST).filter(|_| p.admit(t0, node1).is_ok()).count();
        assert_eq!(admitted, BURST as usize, "a burst, then nothing at the same instant");
        assert_eq!(p.admit(t0, node1), Err(DropReason::RateLimited));
        assert_eq!(p.admit(t0, node2), Ok(()), "another source keeps its own bucket");
        // A second later the source has RATE datagrams more (capped at BURST).
        let t1 = t0 + Duration::from_secs(1);
        let admitted = (0..10 * RATE).filter(|_| p.admit(t1, node1).is_ok()).count();
        assert_eq!(admitted, BURST.min(RATE) as usize);
        // A peer at its real pace (a beat every 5 ms and SWIM) is never limited.
        let mut t = t1 + Duration::from_secs(1);
        for _ in 0..10_000 {
            t += Duration::from_millis(1);
            assert_eq!(p.admit(t, node2), Ok(()));
        }
    }

    #[test]
    fn a_new_view_of_the_nodes_replaces_the_old_one() {
        let mut p = peers();
        let node3: SocketAddr = "192.0.2.3:7946".parse().unwrap();
        assert_eq!(p.admit(Instant::now(), node3), Err(DropReason::UnknownSource));
        p.set(&[seed("node3", "192.0.2.3:7946")]);
        assert_eq!(p.admit(Instant::now(), node3), Ok(()));
        assert!(p.speaks_for(node3, "node3"));
        assert_eq!(
            p.admit(Instant::now(), "192.0.2.1:7946".parse().unwrap()),
            Err(DropReason::UnknownSource)
        );
    }
}
