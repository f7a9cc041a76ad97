//! What changes with the cluster's size, sans-IO: SWIM's settings for `n` members and
//! which seeds a tick announces to.
//!
//! The defaults ([`Timings`]) are tuned for a handful of nodes: a dead member is found in
//! about 350 ms. In a larger cluster two things need more room, as memberlist and
//! foca's `Config::new_lan` scale them:
//! * **An update must reach everyone.** Each member passes an update on at most
//!   `max_transmissions` times (piggybacked on probes and gossip); the share of members
//!   it never reaches falls like `e^-max_transmissions`, so the bound grows with
//!   `log10(n)`: 6 up to 30 members, 15 at 5 000.
//! * **A refutation must arrive before the suspicion ends.** A live member that was
//!   suspected (a lost ping and its indirect probes) refutes; the refutation spreads in
//!   about `log(n)` gossip rounds, so the suspicion lasts the configured time times
//!   `max(1, log10(n))`: 250 ms up to 10 members, about 0.9 s at 5 000.
//!
//! * **A lost datagram must not look like a death.** A probe fails when the ping or its
//!   ack is lost *and* every indirect probe through another member fails too. At 1 %
//!   loss a direct probe fails 2 % of the time and each indirect path (four datagrams)
//!   4 %: with memberlist's three paths, one probe in 800 000 suspects a live member,
//!   about 200 an hour among 5 000 members probing ten times a second. One more path per
//!   decade of members (3 below 10, 6 from 1 000) makes that one in three days; they cost
//!   datagrams only when a direct probe failed.
//!
//! Probing itself does not change (one probe per member per `probe_period`), so each
//! member's traffic stays flat as the cluster grows.
//!
//! Seeds that are not live are announced to every `rejoin_interval`; that heals a
//! partition quickly, but in a cluster of thousands that starts at once (or with many
//! Nodes gone) one announce per non-live seed per tick would be thousands of datagrams a
//! second per member. [`announce_targets`] takes at most [`ANNOUNCES_PER_TICK`] of them,
//! round-robin, so every seed is still tried within `⌈non-live / ANNOUNCES_PER_TICK⌉`
//! ticks and a small cluster (up to that many others) keeps trying all at once.

use std::collections::BTreeSet;
use std::num::{NonZeroU8, NonZeroUsize};
use std::time::Duration;

use foca::{Config, PeriodicParams};

use super::{MembershipError, Seed, Timings};

/// At most this many non-live seeds are announced to per rejoin tick.
pub const ANNOUNCES_PER_TICK: usize = 8;

/// SWIM's settings for a cluster of `members` (this node included) from `t`.
pub fn swim_config(t: &Timings, members: usize) -> Result<Config, MembershipError> {
    if t.probe_rtt.is_zero() || t.probe_rtt >= t.probe_period || t.suspect_to_down_after.is_zero() {
        return Err(MembershipError::Timings(
            "probe_rtt must be non-zero and shorter than probe_period; suspect_to_down_after non-zero".into(),
        ));
    }
    let n = |v: usize| NonZeroUsize::new(v).unwrap_or(NonZeroUsize::MIN);
    Ok(Config {
        probe_period: t.probe_period,
        probe_rtt: t.probe_rtt,
        num_indirect_probes: n(indirect_probes(members)),
        max_transmissions: max_transmissions(members),
        suspect_to_down_after: suspicion(t.suspect_to_down_after, members),
        remove_down_after: Some(Duration::from_secs(3600)),
        max_packet_size: n(1400),
        notify_down_members: true,
        periodic_announce: Some(PeriodicParams { frequency: t.rejoin_interval * 10, num_members: n(1) }),
        periodic_announce_to_down_members: Some(PeriodicParams {
            frequency: t.rejoin_interval,
            num_members: n(2),
        }),
        periodic_gossip: Some(PeriodicParams { frequency: t.gossip_interval, num_members: n(2) }),
    })
}

/// How many times each member passes an update on: `max(6, ⌈4·log10(members + 1)⌉)`.
pub fn max_transmissions(members: usize) -> NonZeroU8 {
    let scaled = (4.0 * log10(members.saturating_add(1))).ceil();
    // At most 4·log10(2^64) ≈ 78: always a u8.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let scaled = scaled as u8;
    NonZeroU8::new(scaled.max(6)).unwrap_or(NonZeroU8::MIN)
}

/// How many members are asked to probe one that did not answer: `3 + ⌊log10(members)⌋`.
pub fn indirect_probes(members: usize) -> usize {
    3 + usize::try_from(members.max(1).ilog10()).unwrap_or(0)
}

/// How long a suspicion lasts among `members`: `base · max(1, log10(members))`.
pub fn suspicion(base: Duration, members: usize) -> Duration {
    base.mul_f64(log10(members).max(1.0))
}

/// The size class a configuration was made for: the settings change only when the
/// cluster's size crosses a power of two, so a member coming and going does not make
/// every node reconfigure.
pub fn size_class(members: usize) -> u32 {
    members.max(1).ilog2()
}

/// Keeps SWIM's settings sized to the live set.
#[derive(Debug)]
pub struct Resizer {
    timings: Timings,
    class: u32,
}

impl Resizer {
    /// Settings for `members` first ([`swim_config`]); fails on timings SWIM cannot run.
    pub fn new(timings: Timings, members: usize) -> Result<(Self, Config), MembershipError> {
        let config = swim_config(&timings, members)?;
        Ok((Resizer { timings, class: size_class(members) }, config))
    }

    /// The live set has `members` now: new settings when its size class changed.
    pub fn resize(&mut self, members: usize) -> Option<Config> {
        let class = size_class(members);
        if class == self.class {
            return None;
        }
        self.class = class;
        swim_config(&self.timings, members).ok()
    }
}

/// The seeds to announce to at rejoin tick number `tick`: at most
/// [`ANNOUNCES_PER_TICK`] of those not in `live`, taken round-robin.
pub fn announce_targets<'a>(seeds: &'a [Seed], live: &BTreeSet<String>, tick: u64) -> Vec<&'a Seed> {
    let absent: Vec<&Seed> = seeds.iter().filter(|s| !live.contains(&s.name)).collect();
    round_robin(&absent, tick).into_iter().copied().collect()
}

/// At most [`ANNOUNCES_PER_TICK`] of `absent` for tick number `tick`, each in turn.
pub fn round_robin<T>(absent: &[T], tick: u64) -> Vec<&T> {
    if absent.len() <= ANNOUNCES_PER_TICK {
        return absent.iter().collect();
    }
    let len = absent.len() as u64;
    let start = tick.wrapping_mul(ANNOUNCES_PER_TICK as u64) % len;
    (0..ANNOUNCES_PER_TICK as u64).map(|i| &absent[usize::try_from((start + i) % len).unwrap_or(0)]).collect()
}

#[allow(clippy::cast_precision_loss)]
fn log10(n: usize) -> f64 {
    (n as f64).log10()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn seeds(n: usize) -> Vec<Seed> {
        let addr: SocketAddr = "192.0.2.1:7946".parse().unwrap();
        (0..n).map(|i| Seed { name: format!("node{i}"), addr }).collect()
    }

    #[test]
    fn a_small_cluster_keeps_the_tuned_defaults() {
        let t = Timings::default();
        for n in 1..=10 {
            let c = swim_config(&t, n).unwrap();
            assert_eq!(c.suspect_to_down_after, t.suspect_to_down_after, "{n} members");
            assert_eq!(c.max_transmissions.get(), 6, "{n} members");
        }
    }

    #[test]
    fn dissemination_and_suspicion_grow_with_the_log_of_the_cluster() {
        let t = Timings::default();
        let at = |n| swim_config(&t, n).unwrap();
        assert_eq!(at(100).max_transmissions.get(), 9);
        assert_eq!(at(1000).max_transmissions.get(), 13);
        assert_eq!(at(5000).max_transmissions.get(), 15);
        assert_eq!(at(100).suspect_to_down_after, Duration::from_millis(500));
        assert_eq!(at(1000).suspect_to_down_after, Duration::from_millis(750));
        let big = at(5000).suspect_to_down_after;
        assert!(big > Duration::from_millis(900) && big < Duration::from_millis(950), "{big:?}");
        // Probing is per member: it does not change with the size; a failed one asks more
        // members to try.
        assert_eq!(at(5000).probe_period, at(3).probe_period);
        let paths = |n| at(n).num_indirect_probes.get();
        assert_eq!((paths(3), paths(9), paths(10), paths(100), paths(1000), paths(5000)), (3, 3, 4, 5, 6, 6));
    }

    #[test]
    fn the_settings_change_when_the_size_crosses_a_power_of_two_only() {
        assert_eq!(size_class(0), size_class(1));
        let (mut r, first) = Resizer::new(Timings::default(), 1000).unwrap();
        assert_eq!(first.max_transmissions.get(), 13);
        assert!(r.resize(1023).is_none() && r.resize(600).is_none());
        assert_eq!(r.resize(1024).map(|c| c.max_transmissions.get()), Some(13));
        assert_eq!(
            r.resize(3).map(|c| c.suspect_to_down_after),
            Some(Timings::default().suspect_to_down_after)
        );
    }

    #[test]
    fn a_tick_announces_to_a_bounded_share_of_the_absent_seeds_and_every_one_in_turn() {
        let all = seeds(100);
        let live: BTreeSet<String> = all[..40].iter().map(|s| s.name.clone()).collect();
        let mut reached = BTreeSet::new();
        let ticks = 60usize.div_ceil(ANNOUNCES_PER_TICK) as u64;
        for tick in 0..ticks {
            let chosen = announce_targets(&all, &live, tick);
            assert_eq!(chosen.len(), ANNOUNCES_PER_TICK);
            assert!(chosen.iter().all(|s| !live.contains(&s.name)), "a live seed was announced to");
            reached.extend(chosen.iter().map(|s| s.name.clone()));
        }
        assert_eq!(reached.len(), 60, "every absent seed within ⌈60 / {ANNOUNCES_PER_TICK}⌉ ticks");
    }

    #[test]
    fn a_small_cluster_announces_to_every_absent_seed_at_each_tick() {
        let all = seeds(5);
        let live = BTreeSet::from(["node0".to_owned()]);
        assert_eq!(announce_targets(&all, &live, 7).len(), 4);
        assert!(announce_targets(&all, &all.iter().map(|s| s.name.clone()).collect(), 7).is_empty());
    }
}
