//! L2 mode: one owner among `spec.members`, elected with `ferrolb_proto::election`'s
//! rendezvous hash among members that are live AND healthy; the owner puts the VIP on
//! the interface (marked as ferrolb's, see [`crate::addr`]) and announces it by
//! gratuitous ARP / unsolicited NA (`ferrolb_proto::l2::L2Announcer`, the speaker's
//! too). When no member is healthy the current owner keeps the VIP: an apiserver that
//! answers badly beats no apiserver.
//!
//! * [`holder`]: whether this member holds the VIP (sans IO), handing over make before
//!   break: a holder lets go only once its successor announced the VIP.
//! * [`claims`]: sees other nodes announce the VIP (the successor's announcement).
//! * [`key`]: following `spec.membershipKeyFile`, rotating like the speaker.
//! * here: the membership that carries health.
//!
//! Health travels in the membership identity: [`SwimMembership`] runs the SWIM
//! membership (`ferrolb_proto::membership`) under the node's name while the local
//! apiserver is healthy, and under `NAME~unhealthy` while it is not (`~` cannot occur in
//! a Kubernetes node name). A health change leaves membership (peers drop the old name
//! at once) and joins again under the other name. So an unhealthy member still sees the
//! others (it must, to release the VIP when a healthy one appears), a dead member
//! disappears under either name, and [`SwimMembership::live_healthy`] is the set of live
//! members under their plain name.
//!
//! The key file is re-read while membership runs ([`SwimMembership::start_with_key_file`])
//! and a new key rotates without a split. A rejoin starts its instance with the key the
//! members seal with by then: the latest once it was learned at least the rotation window
//! W ago, else the previous one, handed the latest at once (see [`key`] for the rule and
//! its residual edges).

pub mod claims;
pub mod holder;
pub mod key;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use ferrolb_proto::membership::claim::Verdict;
use ferrolb_proto::membership::claim::{Claim, Wording};
use ferrolb_proto::membership::{
    Membership, MembershipConfig, MembershipError, MembershipHandle, MembershipMetrics, Seed,
};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// A member that settled alone although others are listed waits this long before
/// claiming, listening for datagrams it cannot read (the speaker's rule, one copy).
pub const ALONE_WAIT: Duration = ferrolb_proto::membership::claim::ALONE_WAIT;

/// How the claim's log lines name bootstrap's things.
const WORDING: Wording = Wording {
    peers: "members",
    key: "spec.membershipKeyFile",
    blind: "claiming nothing (a VIP held stays held)",
    recovered: "electing the VIP's owner from the membership view again",
};

/// Suffix of the membership name of a member whose local apiserver is unhealthy.
pub const UNHEALTHY_SUFFIX: &str = "~unhealthy";

/// The names this node runs membership under, by health.
pub fn membership_name(node: &str, healthy: bool) -> String {
    if healthy { node.to_string() } else { format!("{node}{UNHEALTHY_SUFFIX}") }
}

/// Live and healthy members from membership's live set (names without the suffix).
///
/// A name live under both of its names is changing health, and the plain one may be
/// the stale one (a member that just turned unhealthy, not yet dropped by everyone):
/// it does not count as healthy until the other name is gone.
pub fn healthy_of(live: &BTreeSet<String>) -> BTreeSet<String> {
    live.iter()
        .filter(|n| !n.ends_with(UNHEALTHY_SUFFIX) && !live.contains(&membership_name(n, false)))
        .cloned()
        .collect()
}

/// SWIM membership carrying this node's health in its membership name (see the module).
#[derive(Debug)]
pub struct SwimMembership {
    local: watch::Sender<bool>,
    out: watch::Receiver<BTreeSet<String>>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl SwimMembership {
    /// Starts membership as unhealthy (`cfg.name` is the node name; binds now, so a bind
    /// error is returned here). Call within a tokio runtime.
    pub fn start(cfg: MembershipConfig) -> Result<Self, MembershipError> {
        Self::start_with_metrics(cfg, MembershipMetrics::default())
    }

    /// Like [`SwimMembership::start`], counting into `metrics` (register them with
    /// [`MembershipMetrics::new`] to export `ferrolb_membership_*`, among them
    /// `ferrolb_membership_blind`).
    pub fn start_with_metrics(
        cfg: MembershipConfig,
        metrics: MembershipMetrics,
    ) -> Result<Self, MembershipError> {
        Self::start_inner(cfg, metrics, None)
    }

    /// Like [`SwimMembership::start_with_metrics`], following the key file `cfg.key` was
    /// read from (`spec.membershipKeyFile`): re-read every [`key::KEY_FILE_POLL`], a new
    /// key rotates in `cfg.rotation_window` ([`key`]); an unusable one leaves the current
    /// key in force, logged and counted (`ferrolb_membership_key_changes`) once.
    pub fn start_with_key_file(
        cfg: MembershipConfig,
        metrics: MembershipMetrics,
        key_file: impl Into<PathBuf>,
    ) -> Result<Self, MembershipError> {
        Self::start_inner(cfg, metrics, Some(key_file.into()))
    }

    fn start_inner(
        cfg: MembershipConfig,
        metrics: MembershipMetrics,
        key_file: Option<PathBuf>,
    ) -> Result<Self, MembershipError> {
        let first = spawn(&cfg, false, &metrics)?;
        let keys = key::Keys::new(&cfg, key_file);
        let (local, local_rx) = watch::channel(false);
        let (tx, out) = watch::channel(BTreeSet::new());
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(drive(cfg, keys, first, metrics, local_rx, tx, stop_rx));
        Ok(Self { local, out, stop: Some(stop), task })
    }

    /// Publishes this node's health (rejoins under the matching name when it changed).
    pub fn set_local_health(&self, healthy: bool) {
        self.local.send_replace(healthy);
    }

    /// Members that are live and healthy (this node included when it is healthy). The
    /// others are taken from a settled view only; until the first one, none.
    pub fn live_healthy(&self) -> watch::Receiver<BTreeSet<String>> {
        self.out.clone()
    }

    /// Leaves membership (peers drop this node at once) and stops.
    pub async fn leave(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// The membership configuration of node `cfg.name` while its health is `healthy`.
///
/// Every other member is seeded under both of its names: SWIM (foca) accepts an
/// announcement only when it is addressed to the receiver's current name, so seeds under
/// the plain name alone never reach a member running as `NAME~unhealthy` — members
/// unhealthy together never met, and a member turning healthy was found only by the
/// others' periodic announcements (up to a `rejoin_interval` later).
pub fn member_config(cfg: &MembershipConfig, healthy: bool) -> MembershipConfig {
    let mut c = cfg.clone();
    c.name = membership_name(&cfg.name, healthy);
    // Our own seed entry (if any) is skipped by name: keep it out under either name.
    c.seeds = cfg
        .seeds
        .iter()
        .filter(|s| s.name != cfg.name)
        .flat_map(|s| [true, false].map(|h| Seed { name: membership_name(&s.name, h), addr: s.addr }))
        .collect();
    c
}

fn spawn(
    cfg: &MembershipConfig,
    healthy: bool,
    metrics: &MembershipMetrics,
) -> Result<MembershipHandle, MembershipError> {
    Membership::spawn(member_config(cfg, healthy), metrics.clone())
}

async fn drive(
    mut cfg: MembershipConfig,
    mut keys: key::Keys,
    mut handle: MembershipHandle,
    metrics: MembershipMetrics,
    mut local: watch::Receiver<bool>,
    out: watch::Sender<BTreeSet<String>>,
    mut stop: oneshot::Receiver<()>,
) {
    let node = cfg.name.clone();
    let mut healthy = false;
    // The claim rule (the speaker's too), kept across rejoins: a member that settled alone waits
    // ALONE_WAIT, and one that never saw another member while datagrams it cannot read
    // arrive (another key, another version, replays) is blind: it must not claim the
    // VIP from its lone view.
    let mut claim = Claim::new(cfg.seeds.iter().filter(|s| s.name != node).count(), WORDING);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut key_poll =
        tokio::time::interval_at(tokio::time::Instant::now() + key::KEY_FILE_POLL, key::KEY_FILE_POLL);
    key_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let follows_file = keys.follows_file();
    loop {
        let mut live = handle.live();
        let mut settled = handle.settled();
        loop {
            if !*settled.borrow_and_update() {
                tokio::select! {
                    _ = &mut stop => { handle.leave().await; return }
                    r = local.changed() => {
                        if r.is_err() { handle.leave().await; return }
                        let h = *local.borrow_and_update();
                        if h != healthy { healthy = h; break }
                    }
                    r = settled.changed() => if r.is_err() { tracing::warn!("membership stopped"); return },
                    _ = key_poll.tick(), if follows_file => keys.poll(&handle, &metrics),
                }
                continue;
            }
            // A settled view: the other healthy members.
            let view = live.borrow_and_update().clone();
            let mut set = healthy_of(&view);
            set.remove(&node);
            let (verdict, _) =
                claim.handle(std::time::Instant::now(), true, view.len().saturating_sub(1), &metrics);
            if healthy {
                set.insert(node.clone());
            }
            if verdict != Verdict::Claim {
                // Claim nothing (keep what is held, see holder).
                set.clear();
            }
            out.send_if_modified(|cur| {
                if *cur != set {
                    *cur = set;
                    true
                } else {
                    false
                }
            });
            tokio::select! {
                _ = &mut stop => { handle.leave().await; return }
                r = local.changed() => {
                    if r.is_err() { handle.leave().await; return }
                    let h = *local.borrow_and_update();
                    if h != healthy { healthy = h; break }
                }
                r = live.changed() => if r.is_err() { tracing::warn!("membership stopped"); return },
                r = settled.changed() => if r.is_err() { tracing::warn!("membership stopped"); return },
                _ = key_poll.tick(), if follows_file => keys.poll(&handle, &metrics),
                _ = tick.tick() => {}
            }
        }
        // Health changed: rejoin under the new name. Nothing is published until the new
        // view settles: a view from before the change is stale. (A settled one may
        // still be, for a moment: the holder never releases on a view alone.)
        handle.leave().await;
        tracing::info!(name = %membership_name(&node, healthy), "rejoining membership with the new health");
        handle = loop {
            let then = keys.for_rejoin(&mut cfg);
            match spawn(&cfg, healthy, &metrics) {
                Ok(h) => {
                    if let Some(k) = then {
                        h.set_key(k);
                    }
                    break h;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "membership cannot restart; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    pub(super) use ferrolb_testkit::names as set;

    #[test]
    fn health_travels_in_the_membership_name() {
        assert_eq!(membership_name("node1", true), "node1");
        assert_eq!(membership_name("node1", false), "node1~unhealthy");
        let live = set(&["node1", "node2~unhealthy", "node3"]);
        assert_eq!(healthy_of(&live), set(&["node1", "node3"]));
        // Under both names: changing health, not counted healthy until one is gone.
        let live = set(&["node1", "node3", "node3~unhealthy"]);
        assert_eq!(healthy_of(&live), set(&["node1"]));
    }

    pub(super) fn config(name: &str, port: u16, others: &[(&str, u16)]) -> MembershipConfig {
        let at = |p: u16| std::net::SocketAddr::from(([127, 0, 0, 1], p));
        let seeds = others.iter().map(|(n, p)| Seed { name: n.to_string(), addr: at(*p) }).collect();
        let key =
            ferrolb_proto::membership::MembershipKey::parse("0123456789abcdef0123456789abcdef-l2").unwrap();
        let mut c = MembershipConfig::new(name, at(port), seeds, key);
        c.bind = at(port);
        c
    }

    #[test]
    fn other_members_are_seeded_under_both_names_and_we_under_none() {
        let c = config("node1", 1, &[("node1", 1), ("node2", 2)]);
        let names = |c: &MembershipConfig| c.seeds.iter().map(|s| s.name.clone()).collect::<BTreeSet<_>>();
        for healthy in [true, false] {
            let m = member_config(&c, healthy);
            assert_eq!(m.name, membership_name("node1", healthy));
            assert_eq!(names(&m), set(&["node2", "node2~unhealthy"]));
            assert!(m.seeds.iter().all(|s| s.addr.port() == 2));
        }
    }

    /// Two members, both unhealthy, started together: each reaches the other although
    /// neither runs under the name the other's `spec.members` gives it.
    #[tokio::test]
    async fn unhealthy_members_find_each_other() {
        let [p1, p2] = ferrolb_testkit::free_udp_ports();
        let metrics = MembershipMetrics::new(&mut Default::default());
        let members = [("node1", p1), ("node2", p2)];
        let start = |name: &str, port: u16| {
            Membership::spawn(member_config(&config(name, port, &members), false), metrics.clone()).unwrap()
        };
        let (a, b) = (start("node1", p1), start("node2", p2));
        let both = set(&["node1~unhealthy", "node2~unhealthy"]);
        for h in [&a, &b] {
            let mut live = h.live();
            tokio::time::timeout(Duration::from_secs(5), live.wait_for(|l| *l == both))
                .await
                .expect("the unhealthy members never met")
                .unwrap();
        }
        a.leave().await;
        b.leave().await;
    }

    /// The guard with real membership: a healthy member whose only peer sends datagrams
    /// it cannot read — one sealed datagram replayed (a capture), or wire version 1 stamped
    /// 60 s ahead (a member of the previous release whose clock is off) — never counts
    /// itself healthy-and-alone (it would take the VIP), for twice ALONE_WAIT; it reports
    /// blindness, and once the datagrams stop its lone view is believed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_that_cannot_read_the_others_claims_nothing() {
        use ferrolb_proto::membership::auth::Sealer;
        use ferrolb_proto::membership::claim::UNREADABLE_MEMORY;
        for replayed in [true, false] {
            let [p1] = ferrolb_testkit::free_udp_ports();
            let peer = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let p2 = peer.local_addr().unwrap().port();
            let metrics = MembershipMetrics::default();
            let cfg = config("node1", p1, &[("node1", p1), ("node2", p2)]);
            let m = SwimMembership::start_with_metrics(cfg, metrics.clone()).unwrap();
            m.set_local_health(true);
            let mut sealer = Sealer::new(b"0123456789abcdef0123456789abcdef-l2", 7).unwrap();
            let captured = sealer.seal("node1", b"a datagram captured on the wire");
            let mut v1 = b"FLBM\x01".to_vec();
            let ahead = std::time::SystemTime::now() + Duration::from_secs(60);
            let ahead_ms = ahead.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
            v1.extend(1u64.to_be_bytes().into_iter().chain(0u64.to_be_bytes()).chain(ahead_ms.to_be_bytes()));
            v1.extend_from_slice(&[0u8; 40]);
            let datagram = if replayed { captured } else { v1 };
            let live = m.live_healthy();
            let t = std::time::Instant::now();
            while t.elapsed() < ALONE_WAIT * 2 {
                peer.send_to(&datagram, ("127.0.0.1", p1)).await.unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
                assert!(
                    live.borrow().is_empty(),
                    "replayed={replayed}: claimed from a lone view: {:?}",
                    *live.borrow()
                );
            }
            assert!(metrics.unreadable() >= 10, "replayed={replayed}: datagrams counted");
            assert!(metrics.blind(), "replayed={replayed}: blindness reported (ferrolb_membership_blind)");
            // Quiet: the peer is gone, the lone view is true.
            let mut live = m.live_healthy();
            let all = set(&["node1"]);
            tokio::time::timeout(UNREADABLE_MEMORY * 2, live.wait_for(|l| *l == all))
                .await
                .expect("never claimed once the datagrams stopped")
                .unwrap();
            assert!(!metrics.blind());
            m.leave().await;
        }
    }

    /// One member in memory: real membership, the [`holder::Holder`], and a shared wire
    /// on which a member taking the VIP (or defending it) announces it to the others.
    struct Member {
        membership: SwimMembership,
        /// The last view the holder processed and whether it holds.
        state: watch::Receiver<(BTreeSet<String>, bool)>,
        released: std::sync::Arc<std::sync::Mutex<Vec<holder::Release>>>,
        task: JoinHandle<()>,
    }

    type Wire = tokio::sync::broadcast::Sender<(String, std::time::Instant)>;

    fn member(name: &'static str, port: u16, all: &[(&'static str, u16)], wire: &Wire) -> Member {
        use holder::{Event, Holder, Input};
        use std::time::Instant;
        let ip: std::net::IpAddr = "192.0.2.200".parse().unwrap();
        let membership = SwimMembership::start(config(name, port, all)).unwrap();
        let mut live = membership.live_healthy();
        let mut h = Holder::new(name, ip, all.iter().map(|(n, _)| n.to_string()).collect());
        let (tx, state) = watch::channel((BTreeSet::new(), false));
        let released = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (wire, mut heard) = (wire.clone(), wire.subscribe());
        let log = released.clone();
        let task = tokio::spawn(async move {
            loop {
                let timeout = h.poll_timeout();
                let before = h.holds();
                tokio::select! {
                    r = live.changed() => {
                        if r.is_err() { return }
                        let view = live.borrow_and_update().clone();
                        h.handle(Instant::now(), Input::View(view));
                    }
                    Ok((from, at)) = heard.recv() => if from != name {
                        h.handle(Instant::now(), Input::Claim { at, by: Some(from) })
                    },
                    _ = ferrolb_proto::time::sleep_until(timeout), if timeout.is_some() => {
                        h.handle(Instant::now(), Input::Timeout)
                    }
                }
                let mut announce = h.holds() && !before;
                while let Some(e) = h.poll_event() {
                    match e {
                        Event::Defend => announce = true,
                        Event::Released(why) => log.lock().unwrap().push(why),
                        Event::HandingOver { .. } => {}
                    }
                }
                if announce {
                    let _ = wire.send((name.to_string(), Instant::now()));
                }
                tx.send_replace((live.borrow().clone(), h.holds()));
            }
        });
        Member { membership, state, released, task }
    }

    async fn until(m: &Member, what: &str, f: impl Fn(&(BTreeSet<String>, bool)) -> bool) {
        ferrolb_fakeapi::wait::until_watched_within(what, Duration::from_secs(10), &mut m.state.clone(), f)
            .await;
    }

    async fn both_healthy(ms: &[Member]) -> usize {
        for m in ms {
            m.membership.set_local_health(true);
        }
        let all = set(&["node1", "node2"]);
        for m in ms {
            until(m, "both members healthy", |(view, _)| *view == all).await;
        }
        let owner =
            ferrolb_proto::election::owner("192.0.2.200".parse().unwrap(), ["node1", "node2"]).unwrap();
        let owner = if owner == "node1" { 0 } else { 1 };
        until(&ms[owner], "the winner holding the VIP", |(_, holds)| *holds).await;
        until(&ms[1 - owner], "the other member holding nothing", |(_, holds)| !*holds).await;
        owner
    }

    async fn stop(ms: Vec<Member>) {
        for m in ms {
            m.task.abort();
            m.membership.leave().await;
        }
    }

    /// The race: both members turn unhealthy at the same moment (an etcd outage fails
    /// every /readyz at once). The holder's first view after its rejoin may still show
    /// the other under its healthy name; one of them must keep the VIP (nobody is
    /// healthy). When a holder released on the view alone, about one run of 20 rounds
    /// in two lost the VIP.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn members_turning_unhealthy_together_leave_the_vip_with_one_of_them() {
        for round in 0..30 {
            let [p1, p2] = ferrolb_testkit::free_udp_ports();
            let all = [("node1", p1), ("node2", p2)];
            let wire = tokio::sync::broadcast::channel(16).0;
            let ms = vec![member("node1", p1, &all, &wire), member("node2", p2, &all, &wire)];
            both_healthy(&ms).await;
            for m in &ms {
                m.membership.set_local_health(false);
            }
            for m in &ms {
                until(m, "nobody healthy", |(view, _)| view.is_empty()).await;
            }
            // Either may hold it: the other may have been healthy for a moment after
            // the owner left, and taken it (make before break) — for a moment both do,
            // until the old holder hears the new one announce it. Nobody healthy takes
            // it afresh, so a VIP dropped by both stays dropped: exactly one holder
            // must be reached, and soon.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let holding: Vec<bool> = ms.iter().map(|m| m.state.borrow().1).collect();
                if holding.iter().filter(|h| **h).count() == 1 {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "round {round}: holders {holding:?} for 10 s"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            stop(ms).await;
        }
    }

    /// Make before break with real membership: the owner turning unhealthy hands over to
    /// the healthy member, and lets go when that one announces the VIP — not after
    /// HANDOVER_WAIT.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_owner_turning_unhealthy_releases_when_the_successor_announces() {
        let [p1, p2] = ferrolb_testkit::free_udp_ports();
        let all = [("node1", p1), ("node2", p2)];
        let wire = tokio::sync::broadcast::channel(16).0;
        let ms = vec![member("node1", p1, &all, &wire), member("node2", p2, &all, &wire)];
        let owner = both_healthy(&ms).await;
        let other = 1 - owner;
        ms[owner].membership.set_local_health(false);
        until(&ms[other], "the successor holding the VIP", |(_, holds)| *holds).await;
        until(&ms[owner], "the old owner releasing the VIP", |(_, holds)| !*holds).await;
        assert_eq!(*ms[owner].released.lock().unwrap(), vec![holder::Release::SuccessorAnnounced]);
        stop(ms).await;
    }
}
