//! L2 mode: one owner among `spec.members`, elected with the speaker's rendezvous hash
//! among members that are live AND healthy; the owner puts the VIP on the interface
//! (marked as ferrolb's, see [`crate::addr`]) and announces it by gratuitous ARP /
//! unsolicited NA (the speaker's `L2Announcer`). When no member is healthy the current
//! owner keeps the VIP: an apiserver that answers badly beats no apiserver.
//!
//! Health travels in the membership identity: [`SwimMembership`] runs the speaker's SWIM
//! membership (`ferrolb_speaker::membership`) under the node's name while the local
//! apiserver is healthy, and under `NAME~unhealthy` while it is not (`~` cannot occur in
//! a Kubernetes node name). A health change leaves membership (peers drop the old name
//! at once) and joins again under the other name. So an unhealthy member still sees the
//! others (it must, to release the VIP when a healthy one appears), a dead member
//! disappears under either name, and [`SwimMembership::live_healthy`] is the set of live
//! members under their plain name.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use ferrolb_speaker::election;
use ferrolb_speaker::membership::auth::DropReason;
use ferrolb_speaker::membership::{
    Membership, MembershipConfig, MembershipError, MembershipHandle, MembershipMetrics, Seed,
};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// A member that settled alone although others are listed waits this long before
/// claiming, listening for datagrams that fail authentication (a key mismatch).
pub const ALONE_WAIT: Duration = Duration::from_secs(2);

/// Suffix of the membership name of a member whose local apiserver is unhealthy.
pub const UNHEALTHY_SUFFIX: &str = "~unhealthy";

/// The names this node runs membership under, by health.
pub fn membership_name(node: &str, healthy: bool) -> String {
    if healthy { node.to_string() } else { format!("{node}{UNHEALTHY_SUFFIX}") }
}

/// Live and healthy members from membership's live set (names without the suffix).
pub fn healthy_of(live: &BTreeSet<String>) -> BTreeSet<String> {
    live.iter().filter(|n| !n.ends_with(UNHEALTHY_SUFFIX)).cloned().collect()
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
        let node = cfg.name.clone();
        let metrics = MembershipMetrics::new(&mut Default::default());
        let first = spawn(&cfg, false, &metrics)?;
        let (local, local_rx) = watch::channel(false);
        let (tx, out) = watch::channel(BTreeSet::new());
        let (stop, stop_rx) = oneshot::channel();
        let task = tokio::spawn(drive(cfg, node, first, metrics, local_rx, tx, stop_rx));
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
    cfg: MembershipConfig,
    node: String,
    mut handle: MembershipHandle,
    metrics: MembershipMetrics,
    mut local: watch::Receiver<bool>,
    out: watch::Sender<BTreeSet<String>>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut healthy = false;
    // Key-mismatch guard (as the speaker's): a node that never saw another member
    // while datagrams fail authentication has another key than the others; it must not
    // claim the VIP from its lone view.
    let has_seeds = cfg.seeds.iter().any(|s| s.name != node);
    let mut ever_joined = false;
    let mut mismatch_logged = false;
    let mut alone_since: Option<tokio::time::Instant> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
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
                }
                continue;
            }
            // A settled view: the other healthy members.
            let view = live.borrow_and_update().clone();
            let mut set = healthy_of(&view);
            set.remove(&node);
            ever_joined |= view.len() > 1;
            let alone = has_seeds && !ever_joined;
            let waiting =
                alone && alone_since.get_or_insert_with(tokio::time::Instant::now).elapsed() < ALONE_WAIT;
            let mismatch = alone && metrics.dropped(DropReason::Unauthenticated) > 0;
            if mismatch && !mismatch_logged {
                tracing::error!(
                    "membership: datagrams from other members fail authentication and no member answers this one: \
                     the key in spec.membershipKeyFile differs between members; claiming nothing until it is fixed"
                );
            }
            mismatch_logged = mismatch;
            if healthy {
                set.insert(node.clone());
            }
            if mismatch || waiting {
                // Claim nothing (keep what is held, see should_hold).
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
                _ = tick.tick() => {}
            }
        }
        // Health changed: rejoin under the new name. Nothing is published until the new
        // view settles: a view from before the change may be stale (members turning
        // unhealthy at the same moment would each release the VIP to the other).
        handle.leave().await;
        tracing::info!(name = %membership_name(&node, healthy), "rejoining membership with the new health");
        handle = loop {
            match spawn(&cfg, healthy, &metrics) {
                Ok(h) => break h,
                Err(e) => {
                    tracing::warn!(error = %e, "membership cannot restart; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
    }
}

/// Whether `me` should hold `ip` now.
///
/// The owner is the rendezvous winner among live, healthy members; with none, whoever
/// holds the VIP keeps it (`holding`).
pub fn should_hold(
    me: &str,
    ip: IpAddr,
    members: &[String],
    live_healthy: &BTreeSet<String>,
    holding: bool,
) -> bool {
    let candidates = members.iter().filter(|m| live_healthy.contains(*m)).map(String::as_str);
    match election::owner(ip, candidates) {
        Some(owner) => owner == me,
        None => holding,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn exactly_one_healthy_member_holds() {
        let ip: IpAddr = "192.0.2.200".parse().unwrap();
        let members: Vec<String> = ["node1", "node2", "node3"].map(String::from).to_vec();
        let live = set(&["node1", "node2", "node3"]);
        let holders: Vec<&String> =
            members.iter().filter(|m| should_hold(m, ip, &members, &live, false)).collect();
        assert_eq!(holders.len(), 1);
        // The owner turning unhealthy moves the VIP to another healthy member.
        let owner = holders[0].clone();
        let live2: BTreeSet<String> = live.iter().filter(|m| **m != owner).cloned().collect();
        assert!(!should_hold(&owner, ip, &members, &live2, true));
        let holders2: Vec<&String> =
            members.iter().filter(|m| should_hold(m, ip, &members, &live2, false)).collect();
        assert_eq!(holders2.len(), 1);
        assert_ne!(*holders2[0], owner);
    }

    #[test]
    fn with_no_healthy_member_the_holder_keeps_it() {
        let ip: IpAddr = "192.0.2.200".parse().unwrap();
        let members: Vec<String> = ["node1", "node2"].map(String::from).to_vec();
        let none = BTreeSet::new();
        assert!(should_hold("node1", ip, &members, &none, true));
        assert!(!should_hold("node2", ip, &members, &none, false));
    }

    #[test]
    fn health_travels_in_the_membership_name() {
        assert_eq!(membership_name("node1", true), "node1");
        assert_eq!(membership_name("node1", false), "node1~unhealthy");
        let live = set(&["node1", "node2~unhealthy", "node3"]);
        assert_eq!(healthy_of(&live), set(&["node1", "node3"]));
    }

    fn config(name: &str, port: u16, others: &[(&str, u16)]) -> MembershipConfig {
        let at = |p: u16| std::net::SocketAddr::from(([127, 0, 0, 1], p));
        let seeds = others.iter().map(|(n, p)| Seed { name: n.to_string(), addr: at(*p) }).collect();
        let key = ferrolb_api::MembershipKey::parse("0123456789abcdef0123456789abcdef-l2").unwrap();
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
        let sock = || std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (s1, s2) = (sock(), sock());
        let (p1, p2) = (s1.local_addr().unwrap().port(), s2.local_addr().unwrap().port());
        drop((s1, s2));
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

    #[test]
    fn non_members_are_never_candidates() {
        let ip: IpAddr = "192.0.2.200".parse().unwrap();
        let members: Vec<String> = vec!["node1".into()];
        let live = set(&["node1", "intruder"]);
        assert!(should_hold("node1", ip, &members, &live, false));
        assert!(!should_hold("intruder", ip, &members, &live, false));
    }
}
