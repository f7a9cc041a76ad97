//! What the API should show for this node: per Service, its ServiceAnnouncements and why
//! it is not announced ([`Shown`]), from the plan; and the [`Tracker`] that recomputes,
//! on each plan, only the Services that plan could have changed.
//!
//! A Service's status reads the Service (its addresses and uid) and the plan's entries
//! for those addresses: who owns them for ARP/NDP (and whether every node serves them),
//! which peers get a route covering them, why they are withdrawn. So the Services to
//! recompute are those the model changed, those whose uid changed, and those holding an
//! address whose entries differ between the last plan and this one. At 10 000 Services
//! the whole set took most of a plan's time and a copy of every record to the writer;
//! one changed Service now costs one.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ferrolb_api::AnnouncementProtocol;

use super::record::{Interner, Record};
use crate::model::{self, ClusterModel, ServiceInfo, ServiceKey};
use crate::plan::diff::{PlanChange, differing, differing_keys};
use crate::plan::{PeerRoutes, Plan};

/// What this node shows for one Service: its ServiceAnnouncements (at most one per
/// protocol, named by [`object_name`](super::object_name) from the Service, the node and
/// the protocol) and why it is not announced (by some protocol) where it is not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shown {
    /// What each ServiceAnnouncement says, by protocol.
    pub objects: Box<[Record]>,
    /// Why some of its addresses are not announced.
    pub reason: Option<Box<str>>,
    /// The Service's uid (owner reference and Event target), shared with the model's.
    pub uid: Arc<str>,
    /// Whether its L2 addresses are served by every node at once (mode `ActiveActive`):
    /// then, as by BGP, every serving node announces it alike.
    pub shared: bool,
}

/// What `plan` implies for this node, every Service at once (those showing something):
/// what the [`Tracker`]'s changes add up to.
pub fn desired(
    model: &ClusterModel,
    plan: &Plan,
    uids: &BTreeMap<ServiceKey, Arc<str>>,
) -> BTreeMap<ServiceKey, Shown> {
    let mut names = Interner::default();
    model
        .services
        .iter()
        .filter_map(|(key, svc)| Some((key.clone(), shown(svc, plan, uids.get(key)?, &mut names)?)))
        .collect()
}

/// What `plan` implies for a Service (`svc`, with uid `uid`) on this node; None when
/// nothing: not announced and no reason. Peer and interface lists come from `names`.
pub fn shown(svc: &ServiceInfo, plan: &Plan, uid: &Arc<str>, names: &mut Interner) -> Option<Shown> {
    let mut bgp_addrs = Vec::new();
    let mut peers = BTreeSet::new();
    let mut l2_addrs = Vec::new();
    let mut ifs = BTreeSet::new();
    let mut why = Vec::new();
    for ip in &svc.ingress {
        if let Some(i) = plan.l2.get(ip) {
            l2_addrs.push(*ip);
            ifs.extend(i.iter().map(String::as_str));
        }
        let to: Vec<&str> = plan
            .bgp
            .iter()
            .filter(|(_, routes)| covered(routes, *ip))
            .map(|(peer, _)| peer.as_str())
            .collect();
        if !to.is_empty() && !plan.withdrawn.contains_key(ip) {
            bgp_addrs.push(*ip);
            peers.extend(to);
        }
        if let Some(w) = plan.withdrawn.get(ip) {
            why.push(format!("{ip}: {w}"));
        }
    }
    if why.is_empty() && bgp_addrs.is_empty() && l2_addrs.is_empty() {
        return None;
    }
    let shared = l2_addrs.iter().any(|ip| plan.l2_active_active.contains_key(ip));
    let mut objects = Vec::with_capacity(2);
    let mut add = |protocol, addresses: Vec<IpAddr>, via: BTreeSet<&str>| {
        if !addresses.is_empty() {
            let via = names.names(&via.into_iter().collect::<Vec<_>>());
            objects.push(Record { protocol, addresses: addresses.into(), via, owner: uid.clone() });
        }
    };
    add(AnnouncementProtocol::Bgp, bgp_addrs, peers);
    add(AnnouncementProtocol::L2, l2_addrs, ifs);
    Some(Shown {
        objects: objects.into(),
        reason: (!why.is_empty()).then(|| why.join("; ").into()),
        uid: uid.clone(),
        shared,
    })
}

/// Whether a route covers `ip`: its host prefix or an aggregate of it.
pub(super) fn covered(routes: &PeerRoutes, ip: IpAddr) -> bool {
    crate::announce::covered_by(ip, |n| routes.contains_key(n))
}

/// What changed in the status since the last plan: each Service's new status (None:
/// nothing to show). `complete`: every Service is in it (the first set), so whatever
/// the API holds for a Service not named is stale.
#[derive(Debug, Default)]
pub struct Update {
    pub services: BTreeMap<ServiceKey, Option<Arc<Shown>>>,
    pub complete: bool,
}

/// Follows the plans and says which Services' status each one changed.
#[derive(Debug, Default)]
pub struct Tracker {
    /// What was last said for each Service showing something.
    shown: BTreeMap<ServiceKey, Arc<Shown>>,
    /// The addresses each Service was indexed under, and the Services by address (one
    /// entry per pair: most addresses belong to one Service).
    ingress: BTreeMap<ServiceKey, Box<[IpAddr]>>,
    by_ip: BTreeSet<(IpAddr, ServiceKey)>,
    /// The peer and interface lists the statuses share.
    names: Interner,
    started: bool,
}

impl Tracker {
    /// The status changes from plan `old` to plan `new`, `changed` naming the Services
    /// whose Service, slices or uid changed since (all of them: every Service is
    /// recomputed). The first call says it covers every Service (`complete`); None when
    /// nothing changed.
    pub fn update(
        &mut self,
        model: &ClusterModel,
        plans: &PlanChange<'_>,
        uids: &BTreeMap<ServiceKey, Arc<str>>,
        changed: &model::Changes,
    ) -> Option<Update> {
        let complete = !self.started;
        self.started = true;
        let dirty: BTreeSet<ServiceKey> = if complete || changed.all {
            let gone: Vec<ServiceKey> =
                self.ingress.keys().filter(|k| !model.services.contains_key(*k)).cloned().collect();
            for key in &gone {
                self.index(key, None);
            }
            for (key, svc) in &model.services {
                self.index(key, Some(svc));
            }
            model.services.keys().chain(self.shown.keys()).cloned().collect()
        } else {
            for key in &changed.services {
                self.index(key, model.services.get(key));
            }
            let mut dirty = changed.services.clone();
            self.holders_of_changes(plans, &mut dirty);
            dirty
        };
        let mut out = Update { services: BTreeMap::new(), complete };
        for key in dirty {
            let now = model
                .services
                .get(&key)
                .zip(uids.get(&key))
                .and_then(|(svc, uid)| shown(svc, plans.new, uid, &mut self.names));
            let before = self.shown.get(&key).cloned();
            if !complete && before.as_deref() == now.as_ref() {
                continue;
            }
            let now = now.map(Arc::new);
            match &now {
                Some(s) => self.shown.insert(key.clone(), s.clone()),
                None => self.shown.remove(&key),
            };
            if now.is_some() || before.is_some() {
                out.services.insert(key, now);
            }
        }
        (complete || !out.services.is_empty()).then_some(out)
    }

    /// Indexes Service `key` under its current addresses (`svc`; None: gone).
    fn index(&mut self, key: &ServiceKey, svc: Option<&ServiceInfo>) {
        let now: &[IpAddr] = svc.map_or(&[], |s| &s.ingress);
        let before = self.ingress.remove(key).unwrap_or_default();
        if *before != *now {
            for ip in &before {
                self.by_ip.remove(&(*ip, key.clone()));
            }
            for ip in now {
                self.by_ip.insert((*ip, key.clone()));
            }
        }
        if !now.is_empty() {
            self.ingress.insert(key.clone(), if *before == *now { before } else { now.into() });
        }
    }

    /// The Services indexed under addresses `from..=to`.
    fn holders(&self, from: IpAddr, to: IpAddr) -> impl Iterator<Item = &ServiceKey> {
        // The lowest key sorts before any Service's (the range needs a pair to start at).
        let lowest = ServiceKey { namespace: Arc::from(""), name: Arc::from("") };
        self.by_ip.range((from, lowest)..).take_while(move |(ip, _)| *ip <= to).map(|(_, key)| key)
    }

    /// Adds to `dirty` the Services holding an address whose entries differ between the
    /// plans (one walk of each map, no allocation but the keys found).
    fn holders_of_changes(&self, plans: &PlanChange<'_>, dirty: &mut BTreeSet<ServiceKey>) {
        let (old, new) = (plans.old, plans.new);
        let mut ips: BTreeSet<IpAddr> = BTreeSet::new();
        differing(&old.l2, &new.l2, |ip| {
            ips.insert(*ip);
        });
        differing(&old.withdrawn, &new.withdrawn, |ip| {
            ips.insert(*ip);
        });
        // Whether every node serves an address, not which ones do.
        differing_keys(&old.l2_active_active, &new.l2_active_active, |ip| {
            ips.insert(*ip);
        });
        // Only which peers get a route matters here, not its attributes.
        for p in &plans.bgp_prefixes {
            if p.prefix_len() == p.max_prefix_len() {
                ips.insert(p.addr());
            } else {
                dirty.extend(self.holders(p.network(), p.broadcast()).cloned());
            }
        }
        for ip in ips {
            dirty.extend(self.holders(ip, ip).cloned());
        }
    }
}
