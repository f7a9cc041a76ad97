//! What differs between two plans, found without a copy of either: with 10 000 Services
//! every plan is about as large, and a change touches one. A peer's routes are compared
//! by the nodes that changed ([`super::PeerRoutes`] is persistent); the smaller maps in
//! one ordered walk of each.

use std::collections::BTreeSet;

use imbl::ordmap::DiffItem;
use ipnet::IpNet;

use super::{PeerRoutes, Plan};
pub use ferrolb_proto::diff::{differing, differing_keys};

/// One plan against the one before it, with the prefixes whose set of peers differs
/// (found once per plan: the logs, the gauges and the status all read them).
#[derive(Debug)]
pub struct PlanChange<'a> {
    pub old: &'a Plan,
    pub new: &'a Plan,
    pub bgp_prefixes: BTreeSet<IpNet>,
}

impl<'a> PlanChange<'a> {
    /// What differs from `old` to `new`: each peer's routes compared by what changed.
    pub fn between(old: &'a Plan, new: &'a Plan) -> Self {
        let none = PeerRoutes::new();
        let peers: BTreeSet<&String> = old.bgp.keys().chain(new.bgp.keys()).collect();
        let mut bgp_prefixes = BTreeSet::new();
        for peer in peers {
            let (a, b) = (old.bgp.get(peer).unwrap_or(&none), new.bgp.get(peer).unwrap_or(&none));
            for d in a.diff(b) {
                if let DiffItem::Add(p, _) | DiffItem::Remove(p, _) = d {
                    bgp_prefixes.insert(*p);
                }
            }
        }
        PlanChange { old, new, bgp_prefixes }
    }

    /// Prefixes announced by BGP (to some peer) in `new` and not in `old`, and the reverse.
    pub fn bgp_addresses(&self) -> (Vec<IpNet>, Vec<IpNet>) {
        let anywhere = |plan: &Plan, p: &IpNet| plan.bgp.values().any(|r| r.contains_key(p));
        let (mut announced, mut withdrawn) = (Vec::new(), Vec::new());
        for p in &self.bgp_prefixes {
            match (anywhere(self.old, p), anywhere(self.new, p)) {
                (false, true) => announced.push(*p),
                (true, false) => withdrawn.push(*p),
                _ => {}
            }
        }
        (announced, withdrawn)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::plan::RouteAttrs;

    fn plan(peers: &[(&str, &[&str])]) -> Plan {
        let mut p = Plan::default();
        for (peer, prefixes) in peers {
            let routes =
                prefixes.iter().map(|s| (s.parse::<IpNet>().unwrap(), RouteAttrs::default())).collect();
            p.bgp.insert((*peer).to_owned(), routes);
        }
        p
    }

    fn nets(s: &[&str]) -> Vec<IpNet> {
        s.iter().map(|p| p.parse().unwrap()).collect()
    }

    #[test]
    fn an_address_counts_as_announced_while_any_peer_gets_it() {
        let old = plan(&[("a", &["203.0.113.1/32", "203.0.113.2/32"]), ("b", &["203.0.113.2/32"])]);
        // .1 moves from peer a to peer b (still announced); .2 leaves both; .3 is new.
        let new = plan(&[("a", &["203.0.113.3/32"]), ("b", &["203.0.113.1/32"])]);
        let (announced, withdrawn) = PlanChange::between(&old, &new).bgp_addresses();
        assert_eq!(announced, nets(&["203.0.113.3/32"]));
        assert_eq!(withdrawn, nets(&["203.0.113.2/32"]));
        // A peer gone entirely withdraws what only it had.
        let gone = plan(&[("b", &["203.0.113.2/32"])]);
        let (_, withdrawn) = PlanChange::between(&old, &gone).bgp_addresses();
        assert_eq!(withdrawn, nets(&["203.0.113.1/32"]));
    }
}
