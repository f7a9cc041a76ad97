use super::*;
use proptest::prelude::*;

const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
/// The receiver of the datagrams these tests seal.
const TO: &str = "node2";

/// One session numbers the datagrams it sends to every receiver: node3 has not seen
/// the counters sent to node2. A datagram sealed for node2 and replayed to node3 is
/// refused by node3's MAC, while node3 opens what was sealed for it.
#[test]
fn a_datagram_sealed_for_one_receiver_is_refused_by_another() {
    let mut node1 = Sealer::new(KEY, 1).unwrap();
    let mut node2 = Sealer::new(KEY, 2).unwrap();
    let mut node3 = Sealer::new(KEY, 3).unwrap();
    let to_node2 = node1.seal("node2", b"ping");
    let to_node3 = node1.seal("node3", b"ping");
    assert_eq!(node3.open("node3", &to_node2), Err(DropReason::Unauthenticated), "replayed across receivers");
    assert_eq!(node2.open("node2", &to_node2), Ok(&b"ping"[..]));
    assert_eq!(node3.open("node3", &to_node3), Ok(&b"ping"[..]));
    // Names that are prefixes of one another are told apart too.
    let to_node = node1.seal_kind(Kind::Beat, "node", b"beat");
    assert_eq!(node2.open_kind("node2", &to_node).map(|_| ()), Err(DropReason::Unauthenticated));
    let to_nod = node1.seal_kind(Kind::Beat, "nod", b"ebeat");
    assert_eq!(node3.open_kind("node", &to_nod).map(|_| ()), Err(DropReason::Unauthenticated));
}

#[test]
fn sealed_datagrams_open_once() {
    let mut a = Sealer::new(KEY, 1).unwrap();
    let mut b = Sealer::new(KEY, 2).unwrap();
    let d1 = a.seal(TO, b"hello");
    let d2 = a.seal(TO, b"world");
    assert_eq!(b.open(TO, &d2), Ok(&b"world"[..]));
    // Reordered but new: accepted; the same again: replay.
    assert_eq!(b.open(TO, &d1), Ok(&b"hello"[..]));
    assert_eq!(b.open(TO, &d1), Err(DropReason::Replayed));
    assert_eq!(b.open(TO, &d2), Err(DropReason::Replayed));
}

/// A heartbeat is its own kind under the MAC: a SWIM reader (`open`, as every release
/// before heartbeats) takes it for no membership datagram at all, which is not a sign of
/// an unreadable peer; and relabelling one kind as the other breaks the MAC.
#[test]
fn heartbeats_are_their_own_kind() {
    let mut a = Sealer::new(KEY, 1).unwrap();
    let mut b = Sealer::new(KEY, 2).unwrap();
    let beat = a.seal_kind(Kind::Beat, TO, b"node1");
    assert_eq!(b.open_kind(TO, &beat).map(|(p, _, k)| (p.to_vec(), k)), Ok((b"node1".to_vec(), Kind::Beat)));
    let beat = a.seal_kind(Kind::Beat, TO, b"node1");
    assert_eq!(b.open(TO, &beat), Err(DropReason::Malformed));
    assert!(!DropReason::Malformed.from_unreadable_peer());
    let mut relabelled = a.seal_kind(Kind::Beat, TO, b"node1");
    relabelled[..4].copy_from_slice(b"FLBM");
    assert_eq!(b.open_kind(TO, &relabelled).map(|_| ()), Err(DropReason::Unauthenticated));
    let swim = a.seal(TO, b"swim");
    assert_eq!(b.open_kind(TO, &swim).map(|(p, _, k)| (p.to_vec(), k)), Ok((b"swim".to_vec(), Kind::Swim)));
}

/// The header as version 1 wrote it: "FLBM" 1, instance, sequence, unix ms.
fn v1_datagram(key: &[u8], unix_ms: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = b"FLBM\x01".to_vec();
    out.extend_from_slice(&7u64.to_be_bytes());
    out.extend_from_slice(&0u64.to_be_bytes());
    out.extend_from_slice(&unix_ms.to_be_bytes());
    out.extend_from_slice(payload);
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    m.update(&out);
    out.extend_from_slice(&m.finalize().into_bytes());
    out
}

/// Version 1 stamped datagrams with the sender's wall clock and dropped any more than
/// 30 s off the receiver's: a node 60 s ahead heard nobody. Version 2 carries no time
/// (sealing and opening take no clock), so skew cannot matter (the membership tests
/// run peers whose clocks are 60 s and 1 h off); a version 1 datagram, whatever its
/// time, is named as another version (a peer of another release), not as garbage.
/// (Version 3 binds a datagram to its receiver: see
/// `a_datagram_sealed_for_one_receiver_is_refused_by_another`.)
#[test]
fn version_1_datagrams_are_named_another_version() {
    let now_ms = 1_700_000_000_000u64;
    let mut b = Sealer::new(KEY, 2).unwrap();
    for skew_ms in [0i64, 60_000, 3_600_000, -60_000, -3_600_000] {
        let sent_at = now_ms.saturating_add_signed(skew_ms);
        assert_eq!(b.open(TO, &v1_datagram(KEY, sent_at, b"x")), Err(DropReason::Version), "skew {skew_ms}");
    }
}

#[test]
fn wrong_key_tampering_and_garbage_are_rejected() {
    let mut a = Sealer::new(KEY, 1).unwrap();
    let mut other = Sealer::new(b"another key, also long enough....", 3).unwrap();
    let d = a.seal(TO, b"payload");
    assert_eq!(other.open(TO, &d), Err(DropReason::Unauthenticated));
    let mut b = Sealer::new(KEY, 2).unwrap();
    // Any bit of the header or payload flipped (session, counter, payload): forged.
    for at in [5, 13, HEADER_LEN] {
        let mut t = d.clone();
        t[at] ^= 1;
        assert_eq!(b.open(TO, &t), Err(DropReason::Unauthenticated), "byte {at} flipped");
    }
    let mut t = d.clone();
    let last = t.len() - 1;
    t[last] ^= 1;
    assert_eq!(b.open(TO, &t), Err(DropReason::Unauthenticated), "tag flipped");
    assert_eq!(b.open(TO, &d[..10]), Err(DropReason::Malformed));
    assert_eq!(
        b.open(TO, b"garbage that is long enough to be a datagram, but no"),
        Err(DropReason::Malformed)
    );
    let mut v = d.clone();
    v[4] = 2; // the previous release (receivers not bound)
    assert_eq!(b.open(TO, &v), Err(DropReason::Version));
    // None of that used up the genuine datagram.
    assert_eq!(b.open(TO, &d), Ok(&b"payload"[..]));
}

#[test]
fn counters_far_behind_are_replays() {
    let mut a = Sealer::new(KEY, 1).unwrap();
    let mut b = Sealer::new(KEY, 2).unwrap();
    let first = a.seal(TO, b"x");
    let mut last = Vec::new();
    for _ in 0..100 {
        last = a.seal(TO, b"y");
    }
    assert!(b.open(TO, &last).is_ok());
    assert_eq!(b.open(TO, &first), Err(DropReason::Replayed));
}

/// A restarted peer (a new session) is heard at once, however far its counter is
/// behind the old session's; the old session's datagrams stay replays.
#[test]
fn a_restart_is_a_new_session_and_the_old_one_stays_closed() {
    let mut b = Sealer::new(KEY, 2).unwrap();
    let mut old = Sealer::new(KEY, 100).unwrap();
    let old_datagrams: Vec<Vec<u8>> = (0..200).map(|_| old.seal(TO, b"old")).collect();
    for d in &old_datagrams {
        assert!(b.open(TO, d).is_ok());
    }
    let mut new = Sealer::new(KEY, 101).unwrap();
    assert_eq!(b.open(TO, &new.seal(TO, b"new")), Ok(&b"new"[..]));
    for d in &old_datagrams {
        assert_eq!(b.open(TO, d), Err(DropReason::Replayed));
    }
    assert_eq!(b.open(TO, &new.seal(TO, b"new2")), Ok(&b"new2"[..]));
}

/// Sessions beyond MAX_SESSIONS forget the least recently heard, not an active one.
#[test]
fn the_least_recently_heard_session_is_forgotten_first() {
    let mut b = Sealer::new(KEY, 0).unwrap();
    let mut active = Sealer::new(KEY, 1).unwrap();
    let kept = active.seal(TO, b"a");
    assert!(b.open(TO, &kept).is_ok());
    for s in 2..=(MAX_SESSIONS as u64 + 10) {
        assert!(b.open(TO, &Sealer::new(KEY, s).unwrap().seal(TO, b"s")).is_ok());
        if s % 512 == 0 {
            assert!(b.open(TO, &active.seal(TO, b"a")).is_ok());
        }
    }
    assert!(b.sessions.len() <= MAX_SESSIONS);
    assert_eq!(b.open(TO, &kept), Err(DropReason::Replayed), "the active session was forgotten");
    assert!(!b.sessions.contains_key(&2), "the oldest session is still remembered");
}

const K2: &[u8] = b"the second key, long enough too..";
const K3: &[u8] = b"and a third key, still long enough";
const W: Duration = Duration::from_secs(30);

fn sealer(key: &[u8], session: u64) -> Sealer {
    Sealer::with_window(key, session, W).unwrap()
}

fn events(s: &mut Sealer) -> Vec<KeyEvent> {
    std::iter::from_fn(|| s.keys().poll_event()).collect()
}

/// Whether a node holding only `key` can open what `s` seals now.
fn sealed_with(s: &mut Sealer, key: &[u8]) -> bool {
    sealer(key, 99).open(TO, &s.seal(TO, b"x")).is_ok()
}

/// Whether `s` opens a datagram sealed with `key` (by a new session each time).
fn accepts(s: &mut Sealer, key: &[u8]) -> Option<KeyRole> {
    s.open_kind(TO, &sealer(key, rand::random()).seal(TO, b"x")).ok().map(|(_, r, _)| r)
}

/// Learn at t0: both keys accepted, sealing with the old until t0 + W, with the new
/// from t0 + W, the old accepted until t0 + 2W and not a moment longer.
#[test]
fn a_new_key_is_accepted_at_once_sealed_with_after_w_and_the_old_retired_after_2w() {
    let t0 = Instant::now();
    let mut a = sealer(KEY, 1);
    assert_eq!(a.keys().phase(), RotationPhase::Steady);
    assert_eq!(a.keys().poll_timeout(), None);
    assert_eq!(a.keys().learn(t0, K2), Ok(true));
    assert_eq!(events(&mut a), [KeyEvent::Learned { seal_from: t0 + W }]);
    assert_eq!(a.keys().phase(), RotationPhase::AcceptingNew);
    assert_eq!(a.keys().poll_timeout(), Some(t0 + W));
    assert_eq!(accepts(&mut a, KEY), Some(KeyRole::Sealing));
    assert_eq!(accepts(&mut a, K2), Some(KeyRole::Next), "a peer that switched first is heard");
    assert_eq!(accepts(&mut a, K3), None);

    a.keys().handle_timeout(t0 + W - Duration::from_nanos(1));
    assert!(sealed_with(&mut a, KEY) && !sealed_with(&mut a, K2), "still sealing with the old key");
    assert!(events(&mut a).is_empty());

    a.keys().handle_timeout(t0 + W);
    assert_eq!(events(&mut a), [KeyEvent::Sealing { previous_until: t0 + 2 * W }]);
    assert_eq!(a.keys().phase(), RotationPhase::RetiringOld);
    assert!(sealed_with(&mut a, K2) && !sealed_with(&mut a, KEY), "sealing with the new key");
    assert_eq!(accepts(&mut a, KEY), Some(KeyRole::Previous), "a peer that has not switched is heard");
    assert_eq!(accepts(&mut a, K2), Some(KeyRole::Sealing));
    assert_eq!(a.keys().poll_timeout(), Some(t0 + 2 * W));

    a.keys().handle_timeout(t0 + 2 * W - Duration::from_nanos(1));
    assert_eq!(accepts(&mut a, KEY), Some(KeyRole::Previous));
    a.keys().handle_timeout(t0 + 2 * W);
    assert_eq!(events(&mut a), [KeyEvent::Retired]);
    assert_eq!(accepts(&mut a, KEY), None, "the old key is retired");
    let mut old = sealer(KEY, 5);
    assert_eq!(a.open(TO, &old.seal(TO, b"x")), Err(DropReason::Unauthenticated));
    assert_eq!(a.keys().phase(), RotationPhase::Steady);
    assert_eq!(a.keys().poll_timeout(), None);
}

/// The key in use (or the one being rotated to) again: no change, no event.
#[test]
fn learning_the_current_key_changes_nothing() {
    let t0 = Instant::now();
    let mut a = sealer(KEY, 1);
    assert_eq!(a.keys().learn(t0, KEY), Ok(false));
    assert_eq!(a.keys().learn(t0, K2), Ok(true));
    assert_eq!(a.keys().learn(t0 + W / 2, K2), Ok(false));
    assert_eq!(events(&mut a), [KeyEvent::Learned { seal_from: t0 + W }]);
    assert_eq!(a.keys().poll_timeout(), Some(t0 + W), "the schedule did not move");
}

/// K2 at t0, K3 at t0 + W/2 (before sealing switched): sealing goes K1 → K2 at t0 + W
/// → K3 at t0 + 1.5W; K1 is accepted until t0 + 2W, K2 until t0 + 2.5W; the key being
/// sealed with is accepted all along.
#[test]
fn a_second_change_during_a_rotation_is_scheduled_after_it() {
    let t0 = Instant::now();
    let t1 = t0 + W / 2;
    let mut a = sealer(KEY, 1);
    a.keys().learn(t0, K2).unwrap();
    a.keys().learn(t1, K3).unwrap();
    assert_eq!(
        events(&mut a),
        [KeyEvent::Learned { seal_from: t0 + W }, KeyEvent::Learned { seal_from: t1 + W }]
    );
    for k in [KEY, K2, K3] {
        assert!(accepts(&mut a, k).is_some());
    }
    assert!(sealed_with(&mut a, KEY));
    a.keys().handle_timeout(t0 + W);
    assert_eq!(events(&mut a), [KeyEvent::Sealing { previous_until: t0 + 2 * W }]);
    assert!(sealed_with(&mut a, K2), "the first change is sealed with on its own schedule");
    assert_eq!(a.keys().phase(), RotationPhase::AcceptingNew);
    a.keys().handle_timeout(t1 + W);
    assert_eq!(events(&mut a), [KeyEvent::Sealing { previous_until: t1 + 2 * W }]);
    assert!(sealed_with(&mut a, K3));
    for k in [KEY, K2, K3] {
        assert!(accepts(&mut a, k).is_some());
    }
    a.keys().handle_timeout(t0 + 2 * W);
    assert_eq!(events(&mut a), [KeyEvent::Retired]);
    assert_eq!(accepts(&mut a, KEY), None);
    assert_eq!(accepts(&mut a, K2), Some(KeyRole::Previous));
    a.keys().handle_timeout(t1 + 2 * W);
    assert_eq!(events(&mut a), [KeyEvent::Retired]);
    assert_eq!(accepts(&mut a, K2), None);
    assert_eq!(accepts(&mut a, K3), Some(KeyRole::Sealing));
    assert_eq!(a.keys().phase(), RotationPhase::Steady);
}

/// Back to the old key mid-rotation: K1 is never out of the accepted set, and the
/// schedule ends sealing with K1 alone.
#[test]
fn a_rotation_reverted_midway_keeps_the_old_key_accepted() {
    let t0 = Instant::now();
    let mut a = sealer(KEY, 1);
    a.keys().learn(t0, K2).unwrap();
    a.keys().learn(t0 + W / 2, KEY).unwrap();
    for ms in (0..=4 * W.as_millis() as u64).step_by(500) {
        a.keys().handle_timeout(t0 + Duration::from_millis(ms));
        assert!(accepts(&mut a, KEY).is_some(), "K1 refused at {ms} ms");
    }
    assert!(sealed_with(&mut a, KEY));
    assert_eq!(accepts(&mut a, K2), None);
    assert_eq!(a.keys().phase(), RotationPhase::Steady);
}

/// Changes faster than the schedule drains keep at most MAX_KEYS keys to try.
#[test]
fn the_accepted_set_stays_bounded() {
    let t0 = Instant::now();
    let mut a = sealer(KEY, 1);
    for i in 0..20u32 {
        let key = format!("key number {i:02} padded to be long enough");
        a.keys().learn(t0 + Duration::from_secs(u64::from(i)), key.as_bytes()).unwrap();
        assert!(a.keys().accepted() <= MAX_KEYS);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// The bargain, simulated: nodes learn each of up to three changes at any time
    /// within W of each other (a second change may come before the first finished);
    /// at every moment, every datagram any node seals is opened by every other node.
    #[test]
    fn no_node_ever_seals_what_another_cannot_open(
        nodes in 2usize..5,
        changes in proptest::collection::vec((0u64..90_000, proptest::collection::vec(0u64..30_000, 5)), 1..4),
    ) {
        let t0 = Instant::now();
        let keys: Vec<Vec<u8>> = (0..=changes.len()).map(|i| format!("key {i} of the rotation, long enough.").into_bytes()).collect();
        let mut sealers: Vec<Sealer> = (0..nodes).map(|n| sealer(&keys[0], n as u64)).collect();
        // Change i starts at its own time (sorted, so changes come in order) and each
        // node learns it up to W (exclusive) later.
        let mut starts: Vec<u64> = changes.iter().map(|c| c.0).collect();
        starts.sort_unstable();
        let mut learn: Vec<(u64, usize, usize)> = Vec::new();
        for (i, start) in starts.iter().enumerate() {
            for n in 0..nodes {
                let delay = changes[i].1[n] % (W.as_millis() as u64);
                learn.push((start + delay, n, i + 1));
            }
        }
        // A node learns changes in order even when the delays cross.
        for n in 0..nodes {
            let mut last = 0;
            for i in 1..=changes.len() {
                let e = learn.iter_mut().find(|e| e.1 == n && e.2 == i).unwrap();
                e.0 = e.0.max(last);
                last = e.0;
            }
        }
        let end = starts.last().copied().unwrap_or(0) + 4 * W.as_millis() as u64;
        for ms in (0..=end).step_by(250) {
            let now = t0 + Duration::from_millis(ms);
            for (at, n, i) in &learn {
                if *at <= ms && *at + 250 > ms {
                    sealers[*n].keys().learn(t0 + Duration::from_millis(*at), &keys[*i]).unwrap();
                }
            }
            for s in &mut sealers {
                s.keys().handle_timeout(now);
            }
            for from in 0..nodes {
                let d = sealers[from].seal(TO, b"ping");
                for to in (0..nodes).filter(|t| *t != from) {
                    prop_assert!(sealers[to].open(TO, &d).is_ok(), "node {to} cannot open node {from}'s datagram at {ms} ms");
                }
            }
        }
        for s in &mut sealers {
            prop_assert_eq!(s.keys().phase(), RotationPhase::Steady);
        }
    }
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
        let _ = b.open(TO, &bytes);
    }
}
