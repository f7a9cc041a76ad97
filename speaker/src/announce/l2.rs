//! The L2 announcer as the speaker drives it: the plan's L2 addresses handed to the
//! ARP/NDP responder of [`ferrolb_proto::l2`], as [`super::bgp`] hands routes to sessions.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ferrolb_proto::l2::{self, InterfaceChoice, L2Config, L2Handle, L2Status, Owned};
use tokio::sync::watch;

use super::active_active::BucketFilter;
use crate::metrics::Metrics;
use crate::plan::Plan;

/// Answers ARP/NDP for the addresses the plan gives this node, and filters the flows
/// of the active-active ones ([`BucketFilter`]).
#[derive(Debug)]
pub struct L2Announcer {
    handle: L2Handle,
    filter: BucketFilter,
    /// The active-active addresses the filter holds when this announcer stops: empty
    /// after [`L2Announcer::hand_over_all`] (every bucket drains).
    keep: BTreeMap<IpAddr, Vec<String>>,
}

impl L2Announcer {
    /// Starts the responder of node `me` (it answers for nothing until [`L2Announcer::apply`]);
    /// the other nodes count it `join_grace` after they see it join.
    pub fn spawn(me: &str, metrics: &Metrics, join_grace: std::time::Duration) -> Result<Self, String> {
        let handle =
            l2::L2Announcer::spawn(L2Config::default(), metrics.l2.clone()).map_err(|e| e.to_string())?;
        let filter = BucketFilter::spawn(me, join_grace, handle.status(), metrics.active_active.clone());
        Ok(L2Announcer { handle, filter, keep: BTreeMap::new() })
    }

    /// Converges to the plan's L2 addresses; those it hands over to a successor are
    /// answered but no longer announced (owned set first: see [`L2Handle::set_quiet`]).
    /// Active-active ones are answered with their virtual MAC (set before they are
    /// owned, so no announcement carries this node's own MAC).
    pub fn apply(&mut self, plan: &Plan) {
        self.handle.set_shared(plan.l2_active_active.keys().copied().collect());
        self.handle.set_owned(owned_set(&plan.l2));
        self.handle.set_quiet(plan.l2_draining.keys().copied().collect());
        self.filter.set(&plan.l2_active_active);
        self.keep.clone_from(&plan.l2_active_active);
    }

    /// Shutdown: every owned address is handed over; it stays answered for the grace,
    /// and this node announces none of them any more. Active-active buckets drain: the
    /// other nodes take new flows, this one keeps its established ones.
    pub fn hand_over_all(&mut self) {
        self.handle.set_quiet(self.handle.owned());
        self.keep.clear();
        self.filter.set(&BTreeMap::new());
    }

    /// Waits (at most `within`) until the kernel's bucket filter is what the last
    /// [`L2Announcer::apply`] or [`L2Announcer::hand_over_all`] asked
    /// ([`BucketFilter::loaded`]); false if it is not by then.
    pub async fn filtered(&self, within: std::time::Duration) -> bool {
        self.filter.loaded(within).await
    }

    /// Membership changed who owns what: every owned address starts afresh (an address
    /// yielded on the wire to a node membership no longer gives it to is answered at
    /// once, see `ferrolb_proto::l2::conflict::Input::Renew`) and gets the takeover
    /// burst again (a member that rejoined after a false suspicion, or that left, may
    /// have drawn clients away).
    pub fn renew(&self) {
        self.handle.renew();
    }

    /// What is really announced ([`crate::announce::AnnouncedFeed::set_l2`]).
    pub fn status(&self) -> watch::Receiver<L2Status> {
        self.handle.status()
    }

    /// Stops answering; the bucket filter's tables stay in the kernel.
    pub async fn shutdown(self) {
        self.filter.stop(self.keep).await;
        self.handle.shutdown().await;
    }
}

/// The announcer's desired set from the plan (no interface listed: automatic choice).
fn owned_set(l2: &BTreeMap<IpAddr, Vec<String>>) -> Owned {
    l2.iter()
        .map(|(ip, ifs)| {
            let choice = if ifs.is_empty() {
                InterfaceChoice::Auto
            } else {
                InterfaceChoice::Named(ifs.iter().cloned().collect())
            };
            (*ip, choice)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn plan_interfaces_become_the_announcer_choice() {
        let a: IpAddr = "192.0.2.200".parse().unwrap();
        let b: IpAddr = "2001:db8::200".parse().unwrap();
        let l2 = BTreeMap::from([(a, vec![]), (b, vec!["eth1".to_string()])]);
        let owned = owned_set(&l2);
        assert_eq!(owned[&a], InterfaceChoice::Auto);
        assert_eq!(owned[&b], InterfaceChoice::Named(BTreeSet::from(["eth1".to_string()])));
    }
}
