//! Active-active L2: one address served by every eligible node.
//!
//! Every eligible node answers ARP/NDP for the address with the same *virtual MAC*
//! ([`virtual_mac`]): locally administered, derived from the address, and never the
//! source of a frame (answers and announcements leave from the node's own MAC), so a
//! switch never learns where it lives and floods its frames to every port. Each node
//! then keeps, in the kernel, only the flows whose bucket it owns:
//!
//! * a flow's bucket is `jhash(source address . source port) mod` [`BUCKETS`] with the
//!   address's own seed ([`seed`]), computed by nftables on every node alike;
//! * each bucket has one owner among the eligible live nodes, chosen by rendezvous
//!   hashing ([`owners`]), so a membership change moves only the buckets it must: a
//!   dead node's buckets go to the survivors, a joining node takes only what it wins;
//! * a bucket that changes owner goes through a grace period ([`Bucket::Acquiring`],
//!   [`Bucket::Draining`]) in which the old owner keeps its conntrack-established
//!   flows and refuses new ones, while the new owner takes new flows and refuses
//!   packets of flows it never saw (make before break).
//!
//! [`Spread`] is the sans-IO state of one node: fed the eligible nodes of each
//! address ([`Input::Desired`]) and the clock ([`Input::Timeout`]); [`nft`] renders
//! it as the nftables table that does the per-packet work.

pub mod nft;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::arp::Mac;
use crate::election;

/// Buckets per address: 256 gives every one of up to 16 nodes its share within a few
/// per cent, and keeps each address's table small.
pub const BUCKETS: usize = 256;

/// How long a bucket that changed owner keeps the old owner's established flows.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(600);

/// A stable hash of `address`: the election's weight under a name no node can have
/// (Kubernetes node names never hold NUL).
fn address_hash(tag: &str, address: IpAddr) -> u64 {
    election::weight(tag, address)
}

/// The shared MAC every node answers for `address` with: locally administered
/// unicast (02:…), the rest from the address. Pinned across versions (golden test):
/// changing it would split the address between old and new speakers.
pub fn virtual_mac(address: IpAddr) -> Mac {
    let h = address_hash("\0mac", address).to_be_bytes();
    [0x02, h[0], h[1], h[2], h[3], h[4]]
}

/// The seed of the address's flow hash (nftables `jhash … seed`).
pub fn seed(address: IpAddr) -> u32 {
    (address_hash("\0seed", address) & 0xffff_ffff) as u32
}

/// The owner of every bucket of `address`, as an index into `nodes` (empty: none).
/// The same on every node whatever the order of `nodes`.
///
/// Rendezvous hashing with bounded loads: every (bucket, node) pair has a score, and
/// the pairs are taken from the highest score down, each bucket going to the first of
/// its nodes that still has room. Every node gets `BUCKETS / nodes` buckets, give or
/// take one (plain rendezvous leaves a node of three up to 15 % off its share), and a
/// membership change still moves few buckets besides those it must.
pub fn owners<S: AsRef<str>>(address: IpAddr, nodes: &[S]) -> Vec<usize> {
    let n = nodes.len();
    if n == 0 {
        return Vec::new();
    }
    // Room: the remainder goes to the nodes first by name, so every node agrees.
    let mut by_name: Vec<usize> = (0..n).collect();
    by_name.sort_by(|&x, &y| nodes[x].as_ref().cmp(nodes[y].as_ref()));
    let mut room = vec![BUCKETS / n; n];
    for &i in by_name.iter().take(BUCKETS % n) {
        room[i] += 1;
    }
    let weights: Vec<u64> = nodes.iter().map(|node| election::weight(node.as_ref(), address)).collect();
    let mut pairs: Vec<(u64, usize, usize)> = Vec::with_capacity(BUCKETS * n);
    for b in 0..BUCKETS {
        let salt = election::splitmix64((b as u64).wrapping_add(0x6275_636b));
        for (i, w) in weights.iter().enumerate() {
            pairs.push((election::splitmix64(w ^ salt), b, i));
        }
    }
    // Highest score first; equal scores (vanishingly rare) by bucket, then name.
    pairs.sort_unstable_by(|x, y| {
        y.0.cmp(&x.0).then(x.1.cmp(&y.1)).then_with(|| nodes[x.2].as_ref().cmp(nodes[y.2].as_ref()))
    });
    let mut owner = vec![usize::MAX; BUCKETS];
    let mut left = BUCKETS;
    for (_, b, i) in pairs {
        if owner[b] == usize::MAX && room[i] > 0 {
            owner[b] = i;
            room[i] -= 1;
            left -= 1;
            if left == 0 {
                break;
            }
        }
    }
    owner
}

/// One bucket of an address, as this node holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// Owned: every packet is kept.
    Mine,
    /// Someone else's: every packet is dropped before conntrack.
    NotMine,
    /// Owned since recently, until the instant: new flows and this node's established
    /// flows are kept; packets of flows it never saw (held by the previous owner) are
    /// dropped.
    Acquiring(Instant),
    /// Owned until recently, until the instant: only this node's established flows are
    /// kept; new flows belong to the new owner.
    Draining(Instant),
}

impl Bucket {
    /// Owned (new flows are kept here).
    pub fn owned(self) -> bool {
        matches!(self, Bucket::Mine | Bucket::Acquiring(_))
    }

    /// Acquiring or draining: the decision needs conntrack.
    pub fn in_transition(self) -> bool {
        matches!(self, Bucket::Acquiring(_) | Bucket::Draining(_))
    }

    fn until(self) -> Option<Instant> {
        match self {
            Bucket::Acquiring(t) | Bucket::Draining(t) => Some(t),
            Bucket::Mine | Bucket::NotMine => None,
        }
    }

    /// The next state when the bucket is now `owned` (or not) by this node.
    fn to(self, owned: bool, until: Instant) -> Bucket {
        match (self, owned) {
            (Bucket::Mine | Bucket::Acquiring(_), true) | (Bucket::NotMine | Bucket::Draining(_), false) => {
                self
            }
            (Bucket::NotMine | Bucket::Draining(_), true) => Bucket::Acquiring(until),
            (Bucket::Mine | Bucket::Acquiring(_), false) => Bucket::Draining(until),
        }
    }
}

/// One active-active address on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// Its buckets, [`BUCKETS`] of them.
    pub buckets: Vec<Bucket>,
    /// The eligible nodes it was last spread over (sorted); empty once it left the
    /// desired set, while its last buckets drain.
    pub nodes: Vec<String>,
}

impl Address {
    /// Buckets this node owns (takes new flows of).
    pub fn owned(&self) -> usize {
        self.buckets.iter().filter(|b| b.owned()).count()
    }

    /// Whether every bucket is settled (no grace running).
    pub fn settled(&self) -> bool {
        !self.buckets.iter().any(|b| b.in_transition())
    }
}

/// An input of [`Spread::handle`].
#[derive(Debug, Clone)]
pub enum Input {
    /// Every active-active address this node serves → its eligible live nodes (this
    /// node among them). Addresses left out drain and then go.
    Desired(BTreeMap<IpAddr, Vec<String>>),
    /// The clock reached [`Spread::poll_timeout`].
    Timeout,
}

/// This node's buckets of every active-active address.
#[derive(Debug, Clone)]
pub struct Spread {
    me: String,
    grace: Duration,
    addresses: BTreeMap<IpAddr, Address>,
    /// How long a node that joins waits before it takes buckets ([`Spread::with_join_hold`]).
    join_hold: Duration,
    /// Until when it waits; None until it is first among an address's nodes.
    held_until: Option<Instant>,
    /// The hold is over (or there is none).
    held: bool,
    /// The last desired set, applied again when the hold ends.
    last: BTreeMap<IpAddr, Vec<String>>,
}

impl Spread {
    /// A node's state before its first input; `grace` is how long a bucket that
    /// changed owner keeps the old owner's flows.
    pub fn new(me: &str, grace: Duration) -> Self {
        Spread {
            me: me.to_owned(),
            grace,
            addresses: BTreeMap::new(),
            join_hold: Duration::ZERO,
            held_until: None,
            held: true,
            last: BTreeMap::new(),
        }
    }

    /// A node that joins takes no bucket for `hold` after it is first among an
    /// address's nodes: the other nodes count a member that joins only after their join
    /// grace (`membership::join_grace`), and keep its buckets until then. Taking them
    /// at once would have both owners accept the same new flow (two SYN-ACKs: the
    /// client resets the loser's, the loser resets the client's); waiting as long
    /// leaves at most a moment when neither does (the client's SYN is sent again).
    pub fn with_join_hold(mut self, hold: Duration) -> Self {
        self.join_hold = hold;
        self.held = hold.is_zero();
        self
    }

    /// Feeds an input at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Desired(desired) => self.desired(now, desired),
            Input::Timeout => {
                if !self.held && self.held_until.is_some_and(|t| t <= now) {
                    self.held = true;
                    let last = std::mem::take(&mut self.last);
                    self.desired(now, last);
                }
            }
        }
        self.expire(now);
    }

    fn desired(&mut self, now: Instant, desired: BTreeMap<IpAddr, Vec<String>>) {
        let until = now + self.grace;
        if self.held_until.is_none() && desired.values().any(|nodes| nodes.contains(&self.me)) {
            self.held_until = Some(now + self.join_hold);
        }
        let held = !self.held && self.held_until.is_none_or(|t| now < t);
        self.last.clone_from(&desired);
        for (ip, mut nodes) in desired.clone() {
            nodes.sort();
            nodes.dedup();
            let owners = owners(ip, &nodes);
            let me = nodes.iter().position(|n| *n == self.me);
            let mine = |b: usize| !held && me.is_some() && me == owners.get(b).copied();
            // An address new to this node holds no flows here, but may on other nodes
            // (this node just became eligible): its buckets are acquired through the
            // grace. (A restart adopts what the previous run left: [`Spread::adopt`].)
            let entry = self.addresses.entry(ip).or_insert_with(|| {
                let start = |b: usize| if mine(b) { Bucket::Acquiring(until) } else { Bucket::NotMine };
                Address { buckets: (0..BUCKETS).map(start).collect(), nodes: Vec::new() }
            });
            for (b, state) in entry.buckets.iter_mut().enumerate() {
                *state = state.to(mine(b), until);
            }
            entry.nodes = nodes;
        }
        for (ip, a) in &mut self.addresses {
            if !desired.contains_key(ip) {
                a.nodes.clear();
                for b in &mut a.buckets {
                    *b = b.to(false, until);
                }
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        for a in self.addresses.values_mut() {
            for b in &mut a.buckets {
                match *b {
                    Bucket::Acquiring(t) if t <= now => *b = Bucket::Mine,
                    Bucket::Draining(t) if t <= now => *b = Bucket::NotMine,
                    _ => {}
                }
            }
        }
        // An address no longer desired goes once its last flows drained.
        self.addresses.retain(|_, a| !a.nodes.is_empty() || !a.settled());
    }

    /// Takes over `addresses` from a table a previous run left in the kernel, before
    /// this run knows anything: every bucket drains (established flows kept, new ones
    /// refused) until the first [`Input::Desired`] says which are this node's.
    pub fn adopt(&mut self, now: Instant, addresses: impl IntoIterator<Item = IpAddr>) {
        let until = now + self.grace;
        for ip in addresses {
            self.addresses.entry(ip).or_insert_with(|| Address {
                buckets: vec![Bucket::Draining(until); BUCKETS],
                nodes: Vec::new(),
            });
        }
    }

    /// When [`Input::Timeout`] is due next (a grace or the join hold ends).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let hold = self.held_until.filter(|_| !self.held);
        self.addresses.values().flat_map(|a| a.buckets.iter().filter_map(|b| b.until())).chain(hold).min()
    }

    /// Every address this node filters: desired ones, and those still draining.
    pub fn addresses(&self) -> &BTreeMap<IpAddr, Address> {
        &self.addresses
    }
}

#[cfg(test)]
mod tests;
