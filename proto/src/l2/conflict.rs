//! Address conflict detection: an owner that sees another MAC answer or announce one
//! of its addresses settles it on the wire, with no message between the two nodes.
//! Sans-IO: `handle(now, Input)`, then `poll_transmit()` (addresses to probe),
//! `poll_event()` and `poll_timeout()`; [`Conflicts::yielded`] is what not to answer.
//!
//! Membership can split while the LAN still carries ARP (a host firewall dropping the
//! membership port, a congested link): both sides then elect an owner for every address
//! and two nodes answer for each. So every owner **probes** its addresses (an ARP
//! request from `0.0.0.0`, as RFC 5227 probes: it changes no client's cache), at most
//! every [`PROBE_EVERY`] each and [`MAX_PROBES`] a second in all, and watches every ARP
//! frame whose sender address is one it owns: another MAC there is **evidence**. A
//! node that would lose yields only once the conflict is **confirmed**: the same MAC seen
//! again at least [`CONFIRM_GAP`] later (a probe follows the first evidence at once), so
//! the instant of a hand-over, when the old owner answers once more before its own
//! replan, is not one. A node that would win acts on the first sighting.
//!
//! **Arbitration** is a rule both sides compute alike from what both see: the MAC with
//! the higher [`rank`] for the address keeps it (a rendezvous hash, so the losses spread
//! over nodes). The loser **yields**: it stops answering the address, keeps probing, and
//! answers again (with a fresh announcement) once the winner has not been seen for
//! [`RELEASE_AFTER`] — the winner died, or membership healed and elected the loser. A
//! winner that still sees the other MAC [`FRESH`] after the first sighting (so it is no
//! previous owner finishing its hand-over) announces the address again, so clients that
//! followed the loser come back. A
//! winner that still sees the other MAC [`FOREIGN_AFTER`] after the conflict was
//! confirmed faces something that does not follow the rule: a device that is no ferrolb
//! node (or one of an older release) holds the address, which it reports once.
//!
//! An address stays exempt from probing, and from yielding, for [`FRESH`] after it became
//! owned: the previous owner answers (and may still send the announcements of its own
//! earlier takeover) during its hand-over grace, and a new owner that yielded to it would
//! leave the address unanswered once it lets go (make before break). An address being
//! handed over (quiet) is neither probed nor judged.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::arp::Mac;

/// How often each owned address is probed at most.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);
/// How often an address under conflict is probed.
pub const PROBE_CONFLICT: Duration = Duration::from_millis(100);
/// Probes a second, all addresses together: with many addresses each is probed less
/// often than [`PROBE_EVERY`] (1 000 addresses: every 20 s).
pub const MAX_PROBES: u32 = 50;
/// The same other MAC seen again this much later confirms a conflict.
pub const CONFIRM_GAP: Duration = Duration::from_millis(100);
/// A conflict ends when the other MAC was not seen for this long (four probes of an
/// address under conflict).
pub const RELEASE_AFTER: Duration = Duration::from_millis(400);
/// A winner still seeing the other MAC this long after confirming reports a device
/// that does not yield.
pub const FOREIGN_AFTER: Duration = Duration::from_secs(2);
/// How long after an address became owned it is not probed.
pub const FRESH: Duration = Duration::from_millis(1500);

/// An input at an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The owned addresses, and those of them being handed over (quiet).
    Owned { owned: BTreeSet<IpAddr>, quiet: BTreeSet<IpAddr> },
    /// An ARP frame (or NA) whose sender address is `addr`, from `mac`.
    Seen { addr: IpAddr, mac: Mac },
    /// The moment [`Conflicts::poll_timeout`] asked for (early calls do nothing).
    Timeout,
    /// Membership elected this node for its owned addresses again after a split (it
    /// hears the other side once more): every owned address starts afresh, as a new
    /// owner's would ([`FRESH`]), and a yielded one is answered again. The other side
    /// now learns from membership whom the address belongs to, and lets go (a yielded
    /// owner waiting for the other to fall silent would leave the address unanswered
    /// between that node's hand-over and its own return).
    Renew,
}

/// What a conflict came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Another MAC answers for `addr`; `won`: this node keeps it (and announces it
    /// again), else it stopped answering.
    Conflict { addr: IpAddr, other: Mac, won: bool },
    /// This node won `addr` and `other` went on answering for [`FRESH`]: announce the
    /// address again, so clients that followed `other` come back.
    Reclaim { addr: IpAddr, other: Mac },
    /// `other` still answers for `addr` long after it lost: no ferrolb node, or one
    /// that does not follow the rule.
    Foreign { addr: IpAddr, other: Mac },
    /// `other` is no longer seen for `addr`; `resumed`: this node had yielded and
    /// answers again (announce it).
    Resolved { addr: IpAddr, other: Mac, resumed: bool },
    /// The conflict with `other` over `addr` was left to membership ([`Input::Renew`]);
    /// `resumed`: this node had yielded and answers again.
    Renewed { addr: IpAddr, other: Mac, resumed: bool },
}

/// The rank of `mac` for `addr`: of two MACs answering for one address, the higher
/// keeps it, on both sides alike.
pub fn rank(addr: IpAddr, mac: Mac) -> [u8; 32] {
    let mut h = Sha256::new();
    match addr {
        IpAddr::V4(a) => h.update(a.octets()),
        IpAddr::V6(a) => h.update(a.octets()),
    }
    h.update(mac);
    h.finalize().into()
}

#[derive(Debug, Clone, Copy)]
struct Other {
    mac: Mac,
    first: Instant,
    last: Instant,
    /// Some once confirmed: whether this node won.
    won: Option<bool>,
    reclaimed: bool,
    foreign_reported: bool,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// When it became owned.
    since: Instant,
    next_probe: Instant,
    other: Option<Other>,
}

/// Conflict detection for one interface's owned addresses.
#[derive(Debug, Clone)]
pub struct Conflicts {
    me: Mac,
    entries: BTreeMap<IpAddr, Entry>,
    quiet: BTreeSet<IpAddr>,
    /// Probe budget (a token bucket of [`MAX_PROBES`] a second).
    tokens: f64,
    refilled: Option<Instant>,
    transmit: VecDeque<IpAddr>,
    events: VecDeque<Event>,
}

impl Conflicts {
    /// Detection for the interface whose MAC is `me`.
    pub fn new(me: Mac) -> Self {
        Conflicts {
            me,
            entries: BTreeMap::new(),
            quiet: BTreeSet::new(),
            tokens: 1.0,
            refilled: None,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// Feeds one input.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Owned { owned, quiet } => self.set_owned(now, owned, quiet),
            Input::Seen { addr, mac } => self.seen(now, addr, mac),
            Input::Timeout => self.tick(now),
            Input::Renew => self.renew(now),
        }
    }

    fn renew(&mut self, now: Instant) {
        for (addr, e) in &mut self.entries {
            if self.quiet.contains(addr) {
                continue;
            }
            if let Some(o) = e.other.take()
                && o.won.is_some()
            {
                let resumed = o.won == Some(false);
                self.events.push_back(Event::Renewed { addr: *addr, other: o.mac, resumed });
            }
            *e = Entry { since: now, next_probe: now + FRESH, other: None };
        }
    }

    fn set_owned(&mut self, now: Instant, owned: BTreeSet<IpAddr>, quiet: BTreeSet<IpAddr>) {
        self.entries.retain(|a, _| owned.contains(a));
        for a in owned {
            self.entries.entry(a).or_insert(Entry { since: now, next_probe: now + FRESH, other: None });
        }
        for a in &quiet {
            if let Some(e) = self.entries.get_mut(a) {
                e.other = None;
            }
        }
        self.quiet = quiet;
    }

    fn seen(&mut self, now: Instant, addr: IpAddr, mac: Mac) {
        if mac == self.me || self.quiet.contains(&addr) {
            return;
        }
        let Some(e) = self.entries.get_mut(&addr) else { return };
        let fresh = now.saturating_duration_since(e.since) < FRESH;
        match &mut e.other {
            Some(o) if o.mac == mac => {
                o.last = now;
                if o.won.is_none() && !fresh && now.saturating_duration_since(o.first) >= CONFIRM_GAP {
                    let won = rank(addr, self.me) > rank(addr, mac);
                    o.won = Some(won);
                    self.events.push_back(Event::Conflict { addr, other: mac, won });
                }
            }
            // A second other MAC while one is tracked: keep the first (a rare three-way
            // case settles one pair at a time).
            Some(_) => {}
            None => {
                // The winner acts on the first sighting: announcing an address it owns
                // again costs nothing, and the loser may yield before a second one.
                let won = (rank(addr, self.me) > rank(addr, mac)).then_some(true);
                if won.is_some() {
                    self.events.push_back(Event::Conflict { addr, other: mac, won: true });
                }
                e.other = Some(Other {
                    mac,
                    first: now,
                    last: now,
                    won,
                    reclaimed: false,
                    foreign_reported: false,
                });
                // Confirm at once rather than at the next periodic probe.
                e.next_probe = now + CONFIRM_GAP;
            }
        }
    }

    fn tick(&mut self, now: Instant) {
        let elapsed = self.refilled.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.refilled = Some(now);
        let cap = f64::from(MAX_PROBES);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * cap).min(cap);
        for (addr, e) in &mut self.entries {
            if let Some(o) = e.other
                && now.saturating_duration_since(o.last) >= RELEASE_AFTER
            {
                e.other = None;
                if o.won.is_some() {
                    let resumed = o.won == Some(false);
                    self.events.push_back(Event::Resolved { addr: *addr, other: o.mac, resumed });
                }
            }
            if let Some(o) = &mut e.other
                && o.won == Some(true)
                && !o.reclaimed
                && o.last.saturating_duration_since(o.first) >= FRESH
            {
                o.reclaimed = true;
                self.events.push_back(Event::Reclaim { addr: *addr, other: o.mac });
            }
            if let Some(o) = &mut e.other
                && o.won == Some(true)
                && !o.foreign_reported
                && o.last.saturating_duration_since(o.first) >= FOREIGN_AFTER
            {
                o.foreign_reported = true;
                self.events.push_back(Event::Foreign { addr: *addr, other: o.mac });
            }
            if self.quiet.contains(addr) || e.next_probe > now || self.tokens < 1.0 {
                continue;
            }
            self.tokens -= 1.0;
            self.transmit.push_back(*addr);
            e.next_probe = now + if e.other.is_some() { PROBE_CONFLICT } else { PROBE_EVERY };
        }
    }

    /// The next address to probe.
    pub fn poll_transmit(&mut self) -> Option<IpAddr> {
        self.transmit.pop_front()
    }

    /// The next conflict event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to call [`Input::Timeout`] next (None: nothing owned).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let probe =
            self.entries.iter().filter(|(a, _)| !self.quiet.contains(a)).map(|(_, e)| e.next_probe).min();
        let release = self.entries.values().filter_map(|e| e.other.map(|o| o.last + RELEASE_AFTER)).min();
        // A probe also waits for the budget; a release does not.
        let refill =
            self.refilled.filter(|_| self.tokens < 1.0).map(|t| t + Duration::from_secs(1) / MAX_PROBES);
        let probe = probe.map(|p| refill.map_or(p, |r| p.max(r)));
        [probe, release].into_iter().flatten().min()
    }

    /// How many owned addresses this node yielded.
    pub fn yielded_count(&self) -> usize {
        self.entries.values().filter(|e| e.other.is_some_and(|o| o.won == Some(false))).count()
    }

    /// True while this node lost `addr` to another MAC: do not answer for it.
    pub fn yielded(&self, addr: &IpAddr) -> bool {
        self.entries.get(addr).and_then(|e| e.other).is_some_and(|o| o.won == Some(false))
    }
}

#[cfg(test)]
mod tests;
