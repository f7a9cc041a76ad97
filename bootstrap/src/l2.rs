//! L2 mode: one owner among `spec.members`, elected with the speaker's rendezvous hash
//! among members that are live AND healthy; the owner puts the VIP on the interface
//! (marked as ferrolb's, see [`crate::addr`]) and announces it by gratuitous ARP /
//! unsolicited NA. When no member is healthy the current owner keeps the VIP: an
//! apiserver that answers badly beats no apiserver.
//!
//! Health reaches the other members through membership metadata: every member stays
//! in membership whatever its health (so liveness and health stay separate facts), and
//! publishes its health with [`Membership::set_local_health`]; the election reads
//! [`Membership::live_healthy`]. Membership itself (SWIM, `speaker::membership`) and the
//! ARP/NDP sender (`speaker::l2`) are behind the two traits below.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use ferrolb_speaker::election;
use tokio::sync::watch;

/// Membership as the L2 election needs it.
pub trait Membership: Send + Sync {
    /// Publishes this node's health in its membership metadata.
    fn set_local_health(&self, healthy: bool);
    /// Members that are live and report themselves healthy (this node included when it is).
    fn live_healthy(&self) -> watch::Receiver<BTreeSet<String>>;
}

/// Sends gratuitous ARP (IPv4) or unsolicited NA (IPv6) for a newly owned address.
pub trait Announce: Send + Sync {
    /// Tells the segment on `ifname` that `ip` is now here.
    fn announce(&self, ifname: &str, ip: IpAddr) -> std::io::Result<()>;
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

/// Test membership: the other members' live+healthy set comes from a file (one node
/// name per line, re-read every 200 ms), this node's entry from its own health gate.
/// It stands in for SWIM membership; everything downstream is the real code path.
#[derive(Debug)]
pub struct FileMembership {
    local: watch::Sender<bool>,
    out: watch::Receiver<BTreeSet<String>>,
}

impl FileMembership {
    /// Starts the file poller (call within a tokio runtime).
    pub fn start(me: String, file: PathBuf) -> Self {
        let (local, mut local_rx) = watch::channel(false);
        let (tx, out) = watch::channel(BTreeSet::new());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    r = local_rx.changed() => if r.is_err() { return },
                }
                let text = tokio::fs::read_to_string(&file).await.unwrap_or_default();
                let mut set: BTreeSet<String> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && *l != me)
                    .map(String::from)
                    .collect();
                if *local_rx.borrow() {
                    set.insert(me.clone());
                }
                tx.send_if_modified(|cur| {
                    if *cur != set {
                        *cur = set;
                        true
                    } else {
                        false
                    }
                });
            }
        });
        Self { local, out }
    }
}

impl Membership for FileMembership {
    fn set_local_health(&self, healthy: bool) {
        self.local.send_replace(healthy);
    }

    fn live_healthy(&self) -> watch::Receiver<BTreeSet<String>> {
        self.out.clone()
    }
}

/// Placeholder announcer until `speaker::l2` is wired: logs that no gratuitous ARP/NA
/// was sent, so clients that cached the old owner's MAC re-resolve only when their
/// neighbour entry expires.
#[derive(Debug, Default)]
pub struct NotWired;

impl Announce for NotWired {
    fn announce(&self, ifname: &str, ip: IpAddr) -> std::io::Result<()> {
        tracing::warn!(%ip, interface = ifname, "gratuitous ARP/NA not sent: the speaker's L2 sender is not wired into bootstrap yet");
        Ok(())
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
    fn non_members_are_never_candidates() {
        let ip: IpAddr = "192.0.2.200".parse().unwrap();
        let members: Vec<String> = vec!["node1".into()];
        let live = set(&["node1", "intruder"]);
        assert!(should_hold("node1", ip, &members, &live, false));
        assert!(!should_hold("intruder", ip, &members, &live, false));
    }
}
