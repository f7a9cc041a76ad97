//! A session's routes kept in step with the plan. Each plan's routes for a peer are
//! compared with the last plan's by the nodes that changed ([`PeerRoutes`] is a
//! persistent map), only the changed routes are converted, and the session is handed a
//! new version of its last [`Routes`] that shares every other node: a new Service among
//! 50 000 costs the announcer and the session one route each, not 50 000 (issue #39).

use std::collections::BTreeMap;
use std::sync::Arc;

use imbl::ordmap::DiffItem;

use crate::plan::{PeerRoutes, RouteAttrs};
use ferrolb_proto::bgp::attributes::{
    AS_TRANS, Community, ExtendedCommunity, LargeCommunity, PathAttributes,
};
use ferrolb_proto::bgp::session::Routes;

/// Attribute sets kept for reuse before the unused ones are dropped.
const PRUNE_FROM: usize = 1024;

/// One session's routes and the plan they were made from.
#[derive(Debug)]
pub(super) struct SessionRoutes {
    /// The plan's routes for the peer that `routes` were made from.
    planned: PeerRoutes,
    /// What the session was handed last.
    routes: Routes,
    /// One `Arc` per distinct attribute set: routes with equal attributes share it (one
    /// set in memory, compared by pointer in the RIB-Out).
    shared: BTreeMap<RouteAttrs, Arc<PathAttributes>>,
    /// `shared` is pruned of sets no route uses once it holds this many.
    prune_at: usize,
    /// Signs the Link Bandwidth community: the local AS, AS_TRANS for a four-octet one.
    signer: u16,
}

impl SessionRoutes {
    /// No routes yet, for a session whose local AS is `local_as`.
    pub(super) fn new(local_as: u32) -> Self {
        SessionRoutes {
            planned: PeerRoutes::new(),
            routes: Routes::new(),
            shared: BTreeMap::new(),
            prune_at: PRUNE_FROM,
            signer: u16::try_from(local_as).unwrap_or(AS_TRANS as u16),
        }
    }

    /// Brings the routes to `planned`: the routes to hand the session when any changed.
    pub(super) fn update(&mut self, planned: &PeerRoutes) -> Option<Routes> {
        let SessionRoutes { planned: last, routes, shared, signer, .. } = self;
        let mut changed = false;
        for d in last.diff(planned) {
            changed = true;
            match d {
                DiffItem::Add(p, a) | DiffItem::Update { new: (p, a), .. } => {
                    let attrs =
                        shared.entry(a.clone()).or_insert_with(|| Arc::new(path_attributes(a, *signer)));
                    routes.insert(*p, attrs.clone());
                }
                DiffItem::Remove(p, _) => {
                    routes.remove(p);
                }
            }
        }
        self.planned = planned.clone();
        if self.shared.len() >= self.prune_at {
            // Held by a route of this map (or a version the session still has) or dropped.
            self.shared.retain(|_, a| Arc::strong_count(a) > 1);
            self.prune_at = (2 * self.shared.len()).max(PRUNE_FROM);
        }
        changed.then(|| self.routes.clone())
    }
}

/// The path attributes of a plan route; `signer` signs the Link Bandwidth community.
fn path_attributes(a: &RouteAttrs, signer: u16) -> PathAttributes {
    PathAttributes {
        local_pref: a.local_pref,
        communities: a.communities.iter().map(|c| Community(*c)).collect(),
        large_communities: a
            .large_communities
            .iter()
            .map(|(g, l1, l2)| LargeCommunity { global: *g, local1: *l1, local2: *l2 })
            .collect(),
        // RFC 10005 §3 counts bytes per second.
        extended_communities: a
            .link_bandwidth
            .map(|bits| ExtendedCommunity::link_bandwidth(signer, bits as f32 / 8.0))
            .into_iter()
            .collect(),
        ..PathAttributes::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ipnet::IpNet;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn routes_of(planned: &[(&str, RouteAttrs)]) -> Routes {
        let planned: PeerRoutes = planned.iter().map(|(p, a)| (net(p), a.clone())).collect();
        SessionRoutes::new(64513).update(&planned).unwrap_or_default()
    }

    #[test]
    fn equal_attributes_share_one_allocation() {
        let a = RouteAttrs { local_pref: Some(5), ..Default::default() };
        let r = routes_of(&[("203.0.113.1/32", a.clone()), ("203.0.113.2/32", a)]);
        let v: Vec<_> = r.values().collect();
        assert!(Arc::ptr_eq(v[0], v[1]));
        assert_eq!(v[0].local_pref, Some(5));
    }

    #[test]
    fn link_bandwidth_is_sent_in_bytes_per_second_signed_by_our_as() {
        let a = RouteAttrs { link_bandwidth: Some(3_000_000_000), ..Default::default() };
        let planned: PeerRoutes = [(net("203.0.113.1/32"), a)].into_iter().collect();
        for (local_as, signer) in [(64513u32, [0xfc, 0x01]), (4_200_000_000, [0x5b, 0xa0])] {
            let r = SessionRoutes::new(local_as).update(&planned).unwrap();
            let ext = &r.values().next().unwrap().extended_communities;
            assert_eq!(ext.len(), 1);
            assert_eq!(ext[0].as_link_bandwidth(), Some(375_000_000.0), "3 Gbit/s");
            assert_eq!(ext[0].0[2..4], signer, "AS {local_as}");
        }
        let none = routes_of(&[("203.0.113.1/32", RouteAttrs::default())]);
        assert!(none.values().next().unwrap().extended_communities.is_empty());
    }

    /// The routes follow the plan through adds, changes and removals; an unchanged plan
    /// hands the session nothing, and a change converts only the routes that changed:
    /// every other route keeps its `Arc`.
    #[test]
    fn each_plan_changes_only_the_routes_that_changed() {
        let mut s = SessionRoutes::new(64513);
        let host = |i: u32| IpNet::from(std::net::IpAddr::from(std::net::Ipv4Addr::from(0xC612_0000 + i)));
        let mut planned: PeerRoutes = (0..1000).map(|i| (host(i), RouteAttrs::default())).collect();
        let first = s.update(&planned).unwrap();
        assert_eq!(first.len(), 1000);
        assert!(s.update(&planned).is_none(), "the same plan again changes nothing");

        let drained = RouteAttrs { draining: true, communities: [0xFFFF_0000].into(), ..Default::default() };
        planned.insert(net("198.18.0.5/32"), drained);
        planned.remove(&net("198.18.0.7/32"));
        planned.insert(net("203.0.113.1/32"), RouteAttrs::default());
        let second = s.update(&planned).unwrap();
        assert_eq!(second.len(), 1000);
        assert_eq!(second[&net("198.18.0.5/32")].communities, vec![Community(0xFFFF_0000)]);
        assert!(!second.contains_key(&net("198.18.0.7/32")));
        assert!(second.contains_key(&net("203.0.113.1/32")));
        // The first version is untouched (the session may still hold it).
        assert!(
            first.contains_key(&net("198.18.0.7/32")) && first[&net("198.18.0.5/32")].communities.is_empty()
        );
        let diff: Vec<IpNet> = first
            .diff(&second)
            .map(|d| match d {
                DiffItem::Add(p, _) | DiffItem::Remove(p, _) | DiffItem::Update { new: (p, _), .. } => *p,
            })
            .collect();
        assert_eq!(diff, [net("198.18.0.5/32"), net("198.18.0.7/32"), net("203.0.113.1/32")]);
        let unchanged = net("198.18.0.6/32");
        assert!(Arc::ptr_eq(&first[&unchanged], &second[&unchanged]));
    }

    /// Attribute sets no route uses any more are dropped once there are many, and the
    /// ones in use stay shared.
    #[test]
    fn unused_attribute_sets_are_dropped() {
        let mut s = SessionRoutes::new(64513);
        let p = net("203.0.113.1/32");
        for bits in 0..(2 * PRUNE_FROM as u64) {
            let a = RouteAttrs { link_bandwidth: Some(bits + 1), ..Default::default() };
            let planned: PeerRoutes = [(p, a)].into_iter().collect();
            drop(s.update(&planned));
        }
        assert!(s.shared.len() < PRUNE_FROM, "{}", s.shared.len());
        assert_eq!(s.routes.len(), 1);
        let in_use = &s.routes[&p];
        assert!(s.shared.values().any(|a| Arc::ptr_eq(a, in_use)));
    }
}
