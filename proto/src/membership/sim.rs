//! SWIM membership at cluster scale in one process: N members with simulated time,
//! delay and loss (feature `sim`; `ferrolb-testbed bench membership-scale`).
//!
//! Each member is the same SWIM machine the speaker runs (foca with
//! [`super::scale::swim_config`] and its [`Resizer`](super::scale::Resizer)), the
//! driver's rejoin ticks announce to absent members as [`super::scale::round_robin`]
//! chooses, and every datagram is counted with the envelope [`super::auth`] adds and
//! the IPv4 and UDP headers. What is not simulated: the key rotation, the reader's
//! rate limits and the L2 heartbeats (their cost is [`super::heartbeat`]'s to state).
//!
//! Time is a [`Duration`] since the start; nothing reads a clock, so a run is the same
//! for the same seed.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use foca::{AccumulatingRuntime, Foca, Member, OwnedNotification, PostcardCodec, Timer};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::scale::{Resizer, round_robin};
use super::{MemberId, Timings, auth};

/// IPv4 and UDP headers: what each datagram costs on the wire beyond its payload.
pub const IP_UDP_HEADERS: usize = 28;

/// What a run simulates.
#[derive(Debug, Clone)]
pub struct Params {
    /// Members, all live and known to each other at the start.
    pub members: usize,
    /// Share of datagrams lost, each on its own (0.01 = 1 %).
    pub loss: f64,
    /// One-way delay of every datagram…
    pub delay: Duration,
    /// …plus up to this much more, uniformly.
    pub jitter: Duration,
    /// The members' SWIM timings (the speaker's defaults unless a run is about them).
    pub timings: Timings,
    /// Seeds the loss, the delays and every member's choices.
    pub seed: u64,
}

impl Params {
    /// `members` on a LAN (0.2 ms ± 0.1 ms one way) losing `loss` of the datagrams.
    pub fn lan(members: usize, loss: f64) -> Self {
        Params {
            members,
            loss,
            delay: Duration::from_micros(150),
            jitter: Duration::from_micros(100),
            timings: Timings::default(),
            seed: 1,
        }
    }
}

type Swim = Foca<MemberId, PostcardCodec, StdRng, foca::NoCustomBroadcast>;

struct Node {
    swim: Swim,
    runtime: AccumulatingRuntime<MemberId>,
    resizer: Resizer,
    up: bool,
    /// Members this one was told are down (the driver's absent seeds, as indices).
    down: BTreeSet<usize>,
    rejoin_tick: u64,
    sent_bytes: u64,
    sent_datagrams: u64,
}

enum Event {
    Deliver { to: usize, data: Bytes },
    Timer { node: usize, timer: Timer<MemberId> },
    Rejoin { node: usize },
}

/// What a run saw.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Probes of a live member that failed (direct and indirect): suspicions of the live.
    pub false_suspicions: u64,
    /// A live member declared down by some member: what would change an election.
    pub false_downs: u64,
    /// Datagrams lost.
    pub lost: u64,
    /// Datagrams delivered.
    pub delivered: u64,
}

/// N members and the network between them.
pub struct Sim {
    params: Params,
    now: Duration,
    nodes: Vec<Node>,
    index: HashMap<Arc<str>, usize>,
    queue: BinaryHeap<Reverse<(Duration, u64)>>,
    events: HashMap<u64, Event>,
    seq: u64,
    rng: u64,
    stats: Stats,
    /// When each killed member was killed, and when each other member learned it.
    deaths: HashMap<usize, (Duration, Vec<Option<Duration>>)>,
}

impl Sim {
    /// Every member live and knowing every other, as a cluster that has settled.
    pub fn settled(params: Params) -> Sim {
        let n = params.members;
        let ids: Vec<MemberId> = (0..n).map(member_id).collect();
        let mut sim = Sim {
            now: Duration::ZERO,
            nodes: Vec::with_capacity(n),
            index: ids.iter().enumerate().map(|(i, id)| (id.name.clone(), i)).collect(),
            queue: BinaryHeap::new(),
            events: HashMap::new(),
            seq: 0,
            rng: params.seed,
            stats: Stats::default(),
            deaths: HashMap::new(),
            params,
        };
        for (i, id) in ids.iter().enumerate() {
            let (resizer, config) = match Resizer::new(sim.params.timings.clone(), n) {
                Ok(r) => r,
                Err(e) => panic!("simulated timings: {e}"),
            };
            let rng = StdRng::seed_from_u64(sim.params.seed.wrapping_add(i as u64));
            let mut node = Node {
                swim: Foca::new(id.clone(), config, rng, PostcardCodec),
                runtime: AccumulatingRuntime::new(),
                resizer,
                up: true,
                down: BTreeSet::new(),
                rejoin_tick: 0,
                sent_bytes: 0,
                sent_datagrams: 0,
            };
            let others = ids.iter().filter(|o| o.name != id.name).cloned().map(Member::alive);
            if let Err(e) = node.swim.apply_many(others, false, &mut node.runtime) {
                panic!("seeding member {i}: {e}");
            }
            sim.nodes.push(node);
            // Rejoin ticks spread over the interval, as nodes that started apart.
            let phase = sim.params.timings.rejoin_interval.mul_f64(sim.uniform());
            sim.push(phase, Event::Rejoin { node: i });
        }
        for i in 0..n {
            sim.flush(i);
        }
        sim
    }

    /// Simulated time now.
    pub fn now(&self) -> Duration {
        self.now
    }

    /// Runs every event up to `until`.
    pub fn run_until(&mut self, until: Duration) {
        while let Some(Reverse((at, seq))) = self.queue.peek().copied() {
            if at > until {
                break;
            }
            self.queue.pop();
            self.now = at;
            let Some(event) = self.events.remove(&seq) else { continue };
            match event {
                Event::Deliver { to, data } => {
                    if !self.nodes[to].up {
                        continue;
                    }
                    self.stats.delivered += 1;
                    let node = &mut self.nodes[to];
                    // Junk is the reader's to drop; here every datagram is well formed.
                    let _ = node.swim.handle_data(&data, &mut node.runtime);
                    self.flush(to);
                }
                Event::Timer { node, timer } => {
                    if !self.nodes[node].up {
                        continue;
                    }
                    let n = &mut self.nodes[node];
                    let _ = n.swim.handle_timer(timer, &mut n.runtime);
                    self.flush(node);
                }
                Event::Rejoin { node } => self.rejoin(node),
            }
        }
        self.now = until;
    }

    /// Member `i` dies at once: it sends and receives nothing from now on.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].up = false;
        let learned = vec![None; self.nodes.len()];
        self.deaths.insert(i, (self.now, learned));
    }

    /// For the member killed at [`Sim::kill`]`(i)`: how long each live member took to
    /// learn it (None: not yet).
    pub fn learned(&self, i: usize) -> Vec<Option<Duration>> {
        let Some((at, learned)) = self.deaths.get(&i) else { return Vec::new() };
        learned
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i && self.nodes[*j].up)
            .map(|(_, t)| t.map(|t| t.saturating_sub(*at)))
            .collect()
    }

    /// What the run saw so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Bytes each member sent so far (payload, envelope, IP and UDP headers), and the
    /// datagrams.
    pub fn sent(&self) -> Vec<(u64, u64)> {
        self.nodes.iter().map(|n| (n.sent_bytes, n.sent_datagrams)).collect()
    }

    /// How many members member `i` holds live now (itself included).
    pub fn live_at(&self, i: usize) -> usize {
        self.nodes[i].swim.num_members() + 1
    }

    /// The driver's rejoin tick: announce to absent members, a few at a time.
    fn rejoin(&mut self, i: usize) {
        let interval = self.params.timings.rejoin_interval;
        self.push(self.now + interval, Event::Rejoin { node: i });
        if !self.nodes[i].up {
            return;
        }
        let node = &mut self.nodes[i];
        let absent: Vec<usize> = node.down.iter().copied().collect();
        let targets: Vec<usize> = round_robin(&absent, node.rejoin_tick).into_iter().copied().collect();
        node.rejoin_tick += 1;
        for t in targets {
            let id = member_id(t);
            let node = &mut self.nodes[i];
            let _ = node.swim.announce(id, &mut node.runtime);
        }
        self.flush(i);
    }

    /// Sends what member `i` wants sent, arms its timers, reads its notifications.
    fn flush(&mut self, i: usize) {
        while let Some((to, data)) = self.nodes[i].runtime.to_send() {
            let node = &mut self.nodes[i];
            node.sent_bytes += (data.len() + auth::OVERHEAD + IP_UDP_HEADERS) as u64;
            node.sent_datagrams += 1;
            let Some(&j) = self.index.get(&to.name) else { continue };
            if self.uniform() < self.params.loss {
                self.stats.lost += 1;
                continue;
            }
            let at = self.now + self.params.delay + self.params.jitter.mul_f64(self.uniform());
            self.push(at, Event::Deliver { to: j, data });
        }
        while let Some((after, timer)) = self.nodes[i].runtime.to_schedule() {
            self.push(self.now + after, Event::Timer { node: i, timer });
        }
        let mut changed = false;
        while let Some(note) = self.nodes[i].runtime.to_notify() {
            match note {
                OwnedNotification::MemberDown(id) => {
                    changed = true;
                    let Some(&j) = self.index.get(&id.name) else { continue };
                    self.nodes[i].down.insert(j);
                    if self.nodes[j].up {
                        self.stats.false_downs += 1;
                    } else if let Some((_, learned)) = self.deaths.get_mut(&j) {
                        learned[i].get_or_insert(self.now);
                    }
                }
                OwnedNotification::MemberUp(id) => {
                    changed = true;
                    if let Some(&j) = self.index.get(&id.name) {
                        self.nodes[i].down.remove(&j);
                    }
                }
                OwnedNotification::ProbeFailed(_, id)
                    if self.index.get(&id.name).is_some_and(|&j| self.nodes[j].up) =>
                {
                    self.stats.false_suspicions += 1;
                }
                _ => {}
            }
        }
        if changed {
            let node = &mut self.nodes[i];
            if let Some(config) = node.resizer.resize(node.swim.num_members() + 1) {
                let _ = node.swim.set_config(config);
            }
        }
    }

    fn push(&mut self, at: Duration, event: Event) {
        self.seq += 1;
        self.events.insert(self.seq, event);
        self.queue.push(Reverse((at, self.seq)));
    }

    /// A uniform draw in [0, 1) (splitmix64).
    fn uniform(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        #[allow(clippy::cast_precision_loss)]
        let u = (z >> 11) as f64 / (1u64 << 53) as f64;
        u
    }
}

/// Member `i`'s identity: a node name as long as a real one, an address of its own.
fn member_id(i: usize) -> MemberId {
    let octets = u128::try_from(i).unwrap_or(0) + 0x2001_0db8_0000_0000_0000_0000_0000_0000;
    MemberId {
        name: format!("worker-{i:05}.rack.example").into(),
        addr: SocketAddr::new(IpAddr::V6(Ipv6Addr::from(octets)), 7946),
        generation: 0,
        started: 1_764_000_000_000,
    }
}

#[cfg(test)]
mod tests;
