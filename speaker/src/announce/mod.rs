//! Announcers: take the plan's desired set and converge to it.
//!
//! [`bgp`] owns the BGP sessions; [`l2`] hands [`crate::plan::Plan::l2`] to
//! the ARP/NDP responder of [`ferrolb_proto::l2`].
//!
//! Both report what they *really* announce, which can lag the plan: a BGP prefix
//! counts once its UPDATE was written to an Established session
//! ([`bgp::BgpAnnouncer::announced`]), an L2 address once its first gratuitous ARP /
//! unsolicited NA went out ([`ferrolb_proto::l2::L2Status::announced`]). [`AnnouncedFeed`]
//! merges the two into one [`Announced`] watch, which pod readiness gates read
//! ([`crate::readiness`]).
pub mod active_active;
pub mod bgp;
pub mod l2;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use tokio::sync::watch;

use bgp::BgpAnnounced;
use ferrolb_proto::bgp::session::Prefixes;
use ferrolb_proto::l2::L2Status;

/// What this node really announces right now (not what it plans to).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Announced {
    /// BGP: BGPPeer → the prefixes its Established session was sent the UPDATE of (the
    /// sessions' own sets, shared: merging them costs a pointer per peer).
    pub bgp: BTreeMap<String, Prefixes>,
    /// L2: owned addresses whose first gratuitous announcement went out.
    pub l2: BTreeSet<IpAddr>,
}

impl Announced {
    /// Merges the two announcers' states (`l2` None: no L2 announcer runs).
    pub fn from_parts(bgp: &BgpAnnounced, l2: Option<&L2Status>) -> Self {
        Announced { bgp: bgp.by_peer.clone(), l2: l2.map(L2Status::announced).unwrap_or_default() }
    }

    /// The peers holding a prefix that covers `ip` (an aggregate covers its members).
    pub fn bgp_peers(&self, ip: IpAddr) -> BTreeSet<&str> {
        self.bgp.iter().filter(|(_, p)| covered(p, ip)).map(|(peer, _)| peer.as_str()).collect()
    }

    /// True when `ip` is announced by BGP to at least one peer or by L2.
    pub fn covers(&self, ip: IpAddr) -> bool {
        self.l2.contains(&ip) || self.bgp.values().any(|p| covered(p, ip))
    }

    /// True when some peer holds `prefix` itself.
    pub fn holds(&self, prefix: &IpNet) -> bool {
        self.bgp.values().any(|p| p.contains(prefix))
    }
}

/// Whether `prefixes` hold `ip`'s host prefix or an aggregate of it.
fn covered(prefixes: &Prefixes, ip: IpAddr) -> bool {
    !prefixes.is_empty() && covered_by(ip, |n| prefixes.contains(n))
}

/// Whether `holds` says yes to `ip`'s host prefix or to an aggregate of it: one lookup per
/// prefix length, not a scan of every prefix (10 000 Services × 10 000 routes would not do).
pub(crate) fn covered_by(ip: IpAddr, holds: impl Fn(&IpNet) -> bool) -> bool {
    let max: u8 = if ip.is_ipv4() { 32 } else { 128 };
    (0..=max).rev().any(|len| IpNet::new(ip, len).is_ok_and(|n| holds(&n.trunc())))
}

/// Keeps an [`Announced`] watch up to date from the BGP announcer and, while one runs,
/// the L2 announcer. Dropping it stops its task.
#[derive(Debug)]
pub struct AnnouncedFeed {
    tx: Arc<watch::Sender<Announced>>,
    l2: watch::Sender<Option<watch::Receiver<L2Status>>>,
    task: tokio::task::JoinHandle<()>,
}

impl AnnouncedFeed {
    /// Starts merging `bgp` (from [`bgp::BgpAnnouncer::announced`]); call within a tokio runtime.
    pub fn spawn(bgp: watch::Receiver<BgpAnnounced>) -> Self {
        let tx = Arc::new(watch::channel(Announced::default()).0);
        let (l2, l2_rx) = watch::channel(None);
        let task = tokio::spawn(merge(bgp, l2_rx, tx.clone()));
        AnnouncedFeed { tx, l2, task }
    }

    /// Follows this L2 announcer's status from now on (None: L2 stopped, nothing is
    /// announced by L2).
    pub fn set_l2(&self, status: Option<watch::Receiver<L2Status>>) {
        self.l2.send_replace(status);
    }

    /// The merged state, updated on every change.
    pub fn subscribe(&self) -> watch::Receiver<Announced> {
        self.tx.subscribe()
    }
}

impl Drop for AnnouncedFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn merge(
    mut bgp: watch::Receiver<BgpAnnounced>,
    mut l2_source: watch::Receiver<Option<watch::Receiver<L2Status>>>,
    out: Arc<watch::Sender<Announced>>,
) {
    let mut l2: Option<watch::Receiver<L2Status>> = None;
    loop {
        let now = {
            let l2_status = l2.as_mut().map(|r| r.borrow_and_update().clone());
            Announced::from_parts(&bgp.borrow_and_update(), l2_status.as_ref())
        };
        out.send_if_modified(|cur| {
            let changed = *cur != now;
            *cur = now;
            changed
        });
        let l2_changed = async {
            match l2.as_mut() {
                Some(r) => r.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = bgp.changed() => if r.is_err() {
                // The BGP announcer is gone: it announces nothing any more.
                bgp = watch::channel(BgpAnnounced::default()).1;
            },
            r = l2_source.changed() => {
                if r.is_err() {
                    return;
                }
                l2 = l2_source.borrow_and_update().clone();
            }
            ok = l2_changed => if !ok {
                // The L2 announcer ended: nothing is answered for any more.
                l2 = None;
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ferrolb_proto::l2::AddressStatus;
    use ferrolb_testkit::ip;
    use std::time::Duration;

    async fn until(rx: &mut watch::Receiver<Announced>, f: impl Fn(&Announced) -> bool) -> Announced {
        ferrolb_fakeapi::wait::until_watched_within("the announced set", Duration::from_secs(5), rx, f).await
    }

    #[test]
    fn aggregates_cover_their_members_and_l2_counts_only_sent_announcements() {
        let mut bgp = BgpAnnounced::default();
        bgp.by_peer.insert("a".into(), Prefixes::unit("203.0.113.0/24".parse().unwrap()));
        bgp.by_peer.insert("b".into(), Prefixes::unit("203.0.113.10/32".parse().unwrap()));
        let mut l2 = L2Status::default();
        l2.addresses.insert(ip("192.0.2.200"), AddressStatus { gratuitous_sent: true, ..Default::default() });
        l2.addresses.insert(ip("192.0.2.201"), AddressStatus::default());
        let a = Announced::from_parts(&bgp, Some(&l2));
        assert_eq!(a.bgp_peers(ip("203.0.113.10")), BTreeSet::from(["a", "b"]));
        assert_eq!(a.bgp_peers(ip("203.0.113.11")), BTreeSet::from(["a"]));
        assert!(a.covers(ip("203.0.113.99")) && a.covers(ip("192.0.2.200")));
        assert!(!a.covers(ip("192.0.2.201")), "owned but not yet announced");
        assert!(!a.covers(ip("198.51.100.1")));
    }

    #[tokio::test]
    async fn the_feed_follows_both_announcers_and_l2_restarts() {
        let (bgp_tx, bgp_rx) = watch::channel(BgpAnnounced::default());
        let feed = AnnouncedFeed::spawn(bgp_rx);
        let mut rx = feed.subscribe();
        let p: IpNet = "203.0.113.10/32".parse().unwrap();
        bgp_tx.send_modify(|a| {
            a.by_peer.insert("r".into(), Prefixes::unit(p));
        });
        until(&mut rx, |a| a.bgp.get("r").is_some_and(|prefixes| prefixes.contains(&p))).await;

        let (l2_tx, l2_rx) = watch::channel(L2Status::default());
        feed.set_l2(Some(l2_rx));
        let vip = ip("192.0.2.200");
        l2_tx.send_modify(|s| {
            s.addresses.insert(vip, AddressStatus::default());
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(rx.borrow().l2.is_empty(), "owned, no gratuitous announcement yet");
        l2_tx.send_modify(|s| {
            s.addresses.insert(vip, AddressStatus { gratuitous_sent: true, ..Default::default() });
        });
        until(&mut rx, |a| a.l2.contains(&vip)).await;

        // The L2 announcer stops: its addresses are no longer announced.
        drop(l2_tx);
        until(&mut rx, |a| a.l2.is_empty()).await;
        // BGP withdrawal.
        bgp_tx.send_modify(|a| a.by_peer.clear());
        let now = until(&mut rx, |a| a.bgp.is_empty()).await;
        assert_eq!(now, Announced::default());
    }
}
