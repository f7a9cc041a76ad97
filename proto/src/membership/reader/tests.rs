use super::*;

/// The reader sleeps until the heartbeat's tick to the nanosecond: a tick less than a
/// millisecond away is a wait of that long, not 0 (which made it poll without waiting
/// until the tick came, a fifth of every 5 ms interval).
#[test]
fn the_reader_waits_for_the_tick_to_the_nanosecond() {
    let now = Instant::now();
    let wait = |after: Duration| poll_wait(Some(now + after), now);
    assert_eq!(wait(Duration::from_micros(400)), Duration::from_micros(400));
    assert_eq!(wait(Duration::from_micros(4_970)), Duration::from_micros(4_970));
    let spec = TimeSpec::from_duration(wait(Duration::from_micros(400)));
    assert_eq!((spec.tv_sec(), spec.tv_nsec()), (0, 400_000), "ppoll is given what remains");
    // A tick already due: no wait; none due, or far off: the idle wait.
    assert_eq!(poll_wait(Some(now), now + Duration::from_millis(1)), Duration::ZERO);
    assert_eq!(poll_wait(None, now), IDLE_WAIT);
    assert_eq!(wait(Duration::from_secs(60)), IDLE_WAIT);
}
