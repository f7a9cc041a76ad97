//! The heartbeat's beat path allocates nothing: what the membership reader runs at
//! real-time priority for every beat it sends (tick, encode, seal) and receives (admit,
//! open, decode, the sender check, the heartbeat) is driven here for 20 000 beats on a
//! simulated clock, under a global allocator that counts this thread's allocations.
//! An allocation there could wait for the allocator's arena lock, held by any thread of
//! normal priority (the speaker's periodic `malloc_trim` holds it for milliseconds).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use ferrolb_proto::membership::MembershipMetrics;
use ferrolb_proto::membership::auth::{DropReason, Kind, Sealer};
use ferrolb_proto::membership::heartbeat::{Heartbeats, Input, Message};
use ferrolb_proto::membership::peers::Peers;
use ferrolb_proto::membership::{HeartbeatConfig, Seed};

/// Counts the allocations of threads that asked for it.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator unchanged; counting touches no heap.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const KEY: &[u8] = b"a-membership-key-of-at-least-32-characters";

/// One node: its heartbeat, its sealer, its peers, the reader's reused buffers.
struct Node {
    name: &'static str,
    hb: Heartbeats,
    sealer: Sealer,
    peers: Peers,
    payload: Vec<u8>,
    datagram: Vec<u8>,
    suspicions: u64,
}

impl Node {
    fn new(name: &'static str, session: u64, peer: &str, peer_addr: SocketAddr) -> Self {
        Node {
            name,
            hb: Heartbeats::new(HeartbeatConfig::default()),
            sealer: Sealer::new(KEY, session).unwrap(),
            peers: Peers::new(&[Seed { name: peer.into(), addr: peer_addr }]),
            payload: Vec::with_capacity(256),
            datagram: Vec::with_capacity(512),
            suspicions: 0,
        }
    }

    /// Ticks, and seals a beat for each member due one (the reader's `beat`).
    fn tick(&mut self, now: Instant, out: &mut [(String, Vec<u8>)]) {
        self.hb.handle(now, Input::Timeout);
        for to in &self.hb.poll_release() {
            Message::Release(self.name).encode_into(&mut self.payload);
            self.sealer.seal_kind_into(Kind::Beat, to, &self.payload, &mut self.datagram);
        }
        let Node { hb, sealer, payload, datagram, name, .. } = self;
        for (to, slot) in hb.poll_transmit().into_iter().flatten().zip(out.iter_mut()) {
            Message::Beat(name).encode_into(payload);
            sealer.seal_kind_into(Kind::Beat, to, payload, datagram);
            // The wire: a buffer of the test's, reused (the socket's send_to).
            slot.0.clear();
            slot.0.push_str(to);
            slot.1.clear();
            slot.1.extend_from_slice(datagram);
        }
        while self.hb.poll_event().is_some() {}
        if self.hb.suspicions_changed() != self.suspicions {
            self.suspicions = self.hb.suspicions_changed();
        }
    }

    /// Opens a datagram from `from` (the reader's `on_datagram`): true when it was a beat
    /// the heartbeat took.
    fn receive(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) -> bool {
        if self.peers.admit(now, from).is_err() {
            return false;
        }
        let Ok((payload, _, Kind::Beat)) = self.sealer.open_kind(self.name, datagram) else { return false };
        let Some(message) = Message::decode(payload) else { return false };
        if !self.peers.speaks_for(from, message.sender()) {
            return false;
        }
        match message {
            Message::Beat(name) => {
                self.hb.handle(now, Input::Beat(name));
                true
            }
            _ => false,
        }
    }
}

#[test]
fn beats_sent_and_received_allocate_nothing() {
    let (addr1, addr2): (SocketAddr, SocketAddr) =
        ("192.0.2.1:7946".parse().unwrap(), "192.0.2.2:7946".parse().unwrap());
    let mut owner = Node::new("node1", 1, "node2", addr2);
    let mut successor = Node::new("node2", 2, "node1", addr1);
    let interval = HeartbeatConfig::default().interval;
    let t0 = Instant::now();
    owner.hb.handle(t0, Input::Targets(BTreeSet::from(["node2".to_string()])));
    owner.hb.handle(t0, Input::Live(BTreeSet::from(["node1".to_string(), "node2".to_string()])));
    successor.hb.handle(t0, Input::Live(BTreeSet::from(["node1".to_string(), "node2".to_string()])));
    let mut wire = vec![(String::with_capacity(64), Vec::with_capacity(512))];
    let mut received = 0u64;
    let mut step = |k: u32, owner: &mut Node, successor: &mut Node| {
        let now = t0 + interval * k;
        owner.tick(now, &mut wire);
        // Half an interval on the wire.
        let later = now + interval / 2;
        let (_, datagram) = &wire[0];
        received += u64::from(successor.receive(later, addr1, datagram));
        successor.tick(later, &mut []);
    };
    // Warm-up: the first beat is the member's first (interned, watched), buckets and
    // replay windows are created.
    for k in 1..=100 {
        step(k, &mut owner, &mut successor);
    }
    assert_eq!(successor.hb.watched().collect::<Vec<_>>(), ["node1"]);
    // A flood's datagrams are dropped and counted on the same thread.
    let metrics = MembershipMetrics::default();
    COUNTING.with(|c| c.set(true));
    for k in 101..=20_100 {
        step(k, &mut owner, &mut successor);
        metrics.drop_packet(DropReason::UnknownSource);
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(metrics.dropped(DropReason::UnknownSource), 20_000);
    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(received, 20_100, "every beat was opened and taken");
    assert!(successor.hb.suspected().is_empty());
    assert_eq!(allocations, 0, "allocations on the beat path after warm-up");
    // The counter counts: one allocation is seen.
    COUNTING.with(|c| c.set(true));
    let v: Vec<u8> = Vec::with_capacity(std::hint::black_box(8));
    COUNTING.with(|c| c.set(false));
    drop(v);
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 1);
}
