use super::*;

/// Bytes each member sent per second between `from` and `to`, the mean over members.
fn bytes_per_member_second(sim: &mut Sim, from: Duration, to: Duration) -> f64 {
    sim.run_until(from);
    let before: Vec<u64> = sim.sent().iter().map(|s| s.0).collect();
    sim.run_until(to);
    let after: Vec<u64> = sim.sent().iter().map(|s| s.0).collect();
    let total: u64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
    total as f64 / before.len() as f64 / (to - from).as_secs_f64()
}

#[test]
fn a_death_reaches_every_member_and_no_live_member_is_declared_down() {
    let mut sim = Sim::settled(Params::lan(64, 0.01));
    sim.run_until(Duration::from_secs(10));
    sim.kill(7);
    sim.run_until(Duration::from_secs(15));
    let learned = sim.learned(7);
    assert_eq!(learned.len(), 63);
    let slowest = learned.iter().map(|t| t.expect("a member never learned the death")).max().unwrap();
    assert!(slowest < Duration::from_secs(5), "the last member learned after {slowest:?}");
    assert_eq!(sim.stats().false_downs, 0, "{:?}", sim.stats());
    assert!(sim.stats().lost > 0, "1 % loss lost nothing: the loss is not simulated");
    assert!((0..64).filter(|&i| i != 7).all(|i| sim.live_at(i) == 63), "a member's view is not 63 live");
}

#[test]
fn what_a_member_sends_does_not_grow_with_the_cluster() {
    let (from, to) = (Duration::from_secs(2), Duration::from_secs(12));
    let small = bytes_per_member_second(&mut Sim::settled(Params::lan(16, 0.0)), from, to);
    let large = bytes_per_member_second(&mut Sim::settled(Params::lan(256, 0.0)), from, to);
    // Probing is one member per period whatever the size; at rest nothing else is sent
    // but the periodic announce every 10 s.
    assert!(small > 0.0 && large < small * 1.5, "16 members: {small:.0} B/s each, 256: {large:.0} B/s");
}

#[test]
fn without_loss_nobody_is_suspected() {
    let mut sim = Sim::settled(Params::lan(32, 0.0));
    sim.run_until(Duration::from_secs(20));
    assert_eq!((sim.stats().false_suspicions, sim.stats().false_downs), (0, 0), "{:?}", sim.stats());
    assert!(sim.stats().delivered > 32 * 20 * 10, "fewer datagrams than probes: {:?}", sim.stats());
}

#[test]
fn members_killed_are_announced_to_a_few_at_a_time() {
    let mut sim = Sim::settled(Params::lan(64, 0.0));
    sim.run_until(Duration::from_secs(2));
    for i in 0..24 {
        sim.kill(i);
    }
    // Once every death is known, each survivor's rejoin tick announces to at most
    // ANNOUNCES_PER_TICK of the 24 absent members a second, not to all of them.
    let at_rest = bytes_per_member_second(&mut sim, Duration::from_secs(15), Duration::from_secs(25));
    let mut calm = Sim::settled(Params::lan(40, 0.0));
    let calm_rate = bytes_per_member_second(&mut calm, Duration::from_secs(15), Duration::from_secs(25));
    let per_announce = (IP_UDP_HEADERS + auth::OVERHEAD + 100) as f64;
    let extra = at_rest - calm_rate;
    assert!(
        extra < per_announce * (super::super::scale::ANNOUNCES_PER_TICK as f64 + 2.0),
        "{extra:.0} B/s more per member with 24 members dead than in a calm cluster of 40"
    );
}
