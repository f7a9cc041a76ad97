//! How long a draining address stays announced: BGP drains for `--drain-max-delay`,
//! L2 handovers for [`HANDOVER_GRACE`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use crate::plan::Plan;

/// On SIGTERM this node leaves membership first, then keeps answering ARP/NDP this
/// long, so the successors (which see the departure at once) announce the addresses
/// before this node stops answering: make before break.
pub const HANDOVER_GRACE: Duration = Duration::from_secs(1);

/// When each draining address started draining, and which drains ran out. Sans-IO, in
/// the project's spelling: [`DrainTimers::handle`] with every fresh plan,
/// [`DrainTimers::poll_timeout`] for when to replan; the event loop owns the clock. What
/// ran out shows in the plan (`withdrawn`), so there are no events.
#[derive(Debug)]
pub struct DrainTimers {
    /// `--drain-max-delay`.
    max: Duration,
    /// BGP drains.
    drains: Timers,
    /// L2 handovers (make before break): answered for [`HANDOVER_GRACE`] more.
    handovers: Timers,
}

impl DrainTimers {
    /// Timers withdrawing BGP drains after `max` (`--drain-max-delay`).
    pub fn new(max: Duration) -> Self {
        DrainTimers { max, drains: Timers::default(), handovers: Timers::default() }
    }

    /// Starts timers for newly draining addresses, forgets those no longer draining,
    /// and withdraws from `plan` those draining for `--drain-max-delay` or longer, and
    /// those handed over by L2 for [`HANDOVER_GRACE`] or longer.
    pub fn handle(&mut self, now: Instant, plan: &mut Plan) {
        let expired = self.drains.handle(now, &plan.draining, self.max);
        plan.expire_drains(&expired, self.max);
        let expired = self.handovers.handle(now, &plan.l2_draining, HANDOVER_GRACE);
        plan.expire_l2_handovers(&expired, HANDOVER_GRACE);
    }

    /// When the next drain or handover runs out, to replan then (None: nothing drains
    /// or everything ran out).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let bgp = self.drains.poll_timeout(self.max);
        let l2 = self.handovers.poll_timeout(HANDOVER_GRACE);
        bgp.into_iter().chain(l2).min()
    }
}

/// One kind of drain: when each address started, and those past the limit at the last
/// [`Timers::handle`].
#[derive(Debug, Default)]
struct Timers {
    started: BTreeMap<IpAddr, Instant>,
    expired: BTreeSet<IpAddr>,
}

impl Timers {
    /// Follows `now_draining` and returns the addresses draining for `limit` or longer.
    fn handle(
        &mut self,
        now: Instant,
        now_draining: &BTreeMap<IpAddr, String>,
        limit: Duration,
    ) -> BTreeSet<IpAddr> {
        self.started.retain(|ip, _| now_draining.contains_key(ip));
        for ip in now_draining.keys() {
            self.started.entry(*ip).or_insert(now);
        }
        self.expired = self
            .started
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(**t) >= limit)
            .map(|(ip, _)| *ip)
            .collect();
        self.expired.clone()
    }

    /// When the first drain that has not run out yet does.
    fn poll_timeout(&self, limit: Duration) -> Option<Instant> {
        self.started.iter().filter(|(ip, _)| !self.expired.contains(ip)).map(|(_, t)| *t + limit).min()
    }
}
