//! The incremental planner: keeps what every Service contributes and, on a change,
//! recomputes only the Services the model marked, then re-merges only the addresses
//! and prefixes their old and new contributions touch.
//!
//! A Service's contribution depends on the Service, its EndpointSlices and what is
//! global (nodes, configuration, this node, the live members); a global change
//! recomputes everything. Services sharing an address, or a prefix through
//! aggregation, meet only in the merge, which always reads every contributor.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::{Announcements, Fragment, Globals, RouteAttrs, fragment, merge_interfaces};
use crate::model::{Changes, ClusterModel, ServiceKey};

/// The Services holding one address or prefix, in key order. Nearly always one: a
/// sorted Vec of one costs 56 bytes where a one-entry BTreeMap cost a 632-byte node,
/// 12.6 MB of the speaker's peak heap with 10k Services (dhat).
#[derive(Debug, Default)]
struct Holders(Vec<(ServiceKey, Arc<Fragment>)>);

impl Holders {
    /// The Services at indexes `run` (in key order) of `frags`.
    fn of<T>(frags: &[(ServiceKey, Arc<Fragment>)], run: &[(T, usize)]) -> Self {
        let mut h = Vec::with_capacity(run.len());
        h.extend(run.iter().map(|(_, i)| frags[*i].clone()));
        Holders(h)
    }

    fn insert(&mut self, key: ServiceKey, f: Arc<Fragment>) {
        match self.0.binary_search_by(|(k, _)| k.cmp(&key)) {
            Ok(i) => self.0[i].1 = f,
            Err(i) => {
                // Exactly: a pushed Vec holds room for 4 (160 bytes for the usual one
                // holder, 3.2 MB of the peak heap with 10k Services, dhat).
                self.0.reserve_exact(1);
                self.0.insert(i, (key, f));
            }
        }
    }

    fn remove(&mut self, key: &ServiceKey) {
        if let Ok(i) = self.0.binary_search_by(|(k, _)| k.cmp(key)) {
            self.0.remove(i);
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn fragments(&self) -> impl Iterator<Item = &Arc<Fragment>> {
        self.0.iter().map(|(_, f)| f)
    }
}

/// Plans incrementally: [`Planner::plan`] gives what [`super::plan`] gives from scratch.
#[derive(Debug, Default)]
pub struct Planner {
    /// The node and live set of the last plan (None: nothing planned yet).
    me: Option<String>,
    live: BTreeSet<String>,
    fragments: BTreeMap<ServiceKey, Arc<Fragment>>,
    /// The Services having an address, or a route for a prefix (with their
    /// contributions, so a merge needs no lookup).
    by_ip: BTreeMap<IpAddr, Holders>,
    by_prefix: BTreeMap<IpNet, Holders>,
    /// How many prefixes of each (IPv4?, length) exist, to find the routes covering an address.
    prefix_lengths: BTreeMap<(bool, u8), usize>,
    /// Addresses announced as draining by some Service, before the check that no
    /// normal route covers them.
    drain_candidates: BTreeMap<IpAddr, String>,
    out: Announcements,
    recomputed: usize,
}

impl Planner {
    /// A planner that has planned nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Brings the plan up to date with what changed in `model` since the last call
    /// (taking the model's change set) and returns it.
    pub fn plan(&mut self, model: &mut ClusterModel, me: &str, live: &BTreeSet<String>) -> &Announcements {
        let changes = model.take_changes();
        self.update(model, changes, me, live)
    }

    /// How many Services the last plan recomputed.
    pub fn recomputed(&self) -> usize {
        self.recomputed
    }

    pub(super) fn into_announcements(self) -> Announcements {
        self.out
    }

    pub(super) fn update(
        &mut self,
        model: &ClusterModel,
        changes: Changes,
        me: &str,
        live: &BTreeSet<String>,
    ) -> &Announcements {
        let all = changes.all || self.me.as_deref() != Some(me) || self.live != *live;
        let empty = BTreeMap::new();
        let g = Globals::of(model, me, live, &empty);
        if all {
            let fresh = Planner { me: Some(me.to_owned()), live: live.clone(), ..Planner::default() };
            let old = std::mem::replace(self, fresh);
            let entries = old.fragments.len();
            crate::drop_later(old, entries);
            g.sessions(&mut self.out);
            self.build(model, &g);
            self.filter_draining();
            return &self.out;
        }
        let keys: Vec<ServiceKey> = changes.services.into_iter().collect();
        self.recomputed = keys.len();
        let mut ips = BTreeSet::new();
        let mut prefixes = BTreeSet::new();
        for key in keys {
            let new = model.services.get(&key).map(|svc| Arc::new(fragment(model, &g, &key, svc)));
            let old = self.fragments.remove(&key);
            if old == new {
                if let Some(f) = old {
                    self.fragments.insert(key, f);
                }
                continue;
            }
            if let Some(f) = old {
                self.unindex(&key, &f, &mut ips, &mut prefixes);
            }
            if let Some(f) = new {
                self.index(&key, &f, &mut ips, &mut prefixes);
                self.fragments.insert(key, f);
            }
        }
        for p in prefixes {
            self.merge_prefix(p);
        }
        for ip in ips {
            self.merge_ip(ip);
        }
        self.filter_draining();
        &self.out
    }

    /// Builds the state of a fresh planner from every Service at once: the indexes are
    /// sorted and built in one pass each rather than entry by entry (a static file of
    /// 50k Services, the first list, a global change).
    fn build(&mut self, model: &ClusterModel, g: &Globals<'_>) {
        let frags: Vec<(ServiceKey, Arc<Fragment>)> = model
            .services
            .iter()
            .map(|(key, svc)| (key.clone(), Arc::new(fragment(model, g, key, svc))))
            .collect();
        self.recomputed = frags.len();
        // (address or prefix, index in `frags`): sorted, each Service's holdings come in
        // key order, as `Holders` keeps them.
        let mut by_ip: Vec<(IpAddr, usize)> = Vec::new();
        let mut by_prefix: Vec<(IpNet, usize)> = Vec::new();
        for (i, (_, f)) in frags.iter().enumerate() {
            by_ip.extend(f.outcomes.iter().map(|o| (o.ip, i)));
            by_prefix.extend(f.routes.iter().map(|(_, p, _)| (*p, i)));
        }
        by_ip.sort_unstable();
        by_ip.dedup();
        by_prefix.sort_unstable();
        by_prefix.dedup();
        self.by_ip =
            by_ip.chunk_by(|a, b| a.0 == b.0).map(|run| (run[0].0, Holders::of(&frags, run))).collect();
        self.by_prefix =
            by_prefix.chunk_by(|a, b| a.0 == b.0).map(|run| (run[0].0, Holders::of(&frags, run))).collect();
        for p in self.by_prefix.keys() {
            *self.prefix_lengths.entry(length_of(p)).or_default() += 1;
        }
        self.fragments = frags.into_iter().collect();
        let prefixes: Vec<IpNet> = self.by_prefix.keys().copied().collect();
        for p in prefixes {
            self.merge_prefix(p);
        }
        let ips: Vec<IpAddr> = self.by_ip.keys().copied().collect();
        for ip in ips {
            self.merge_ip(ip);
        }
    }

    fn index(
        &mut self,
        key: &ServiceKey,
        f: &Arc<Fragment>,
        ips: &mut BTreeSet<IpAddr>,
        prefixes: &mut BTreeSet<IpNet>,
    ) {
        for o in &f.outcomes {
            self.by_ip.entry(o.ip).or_default().insert(key.clone(), f.clone());
            ips.insert(o.ip);
        }
        for (_, p, _) in &f.routes {
            let holders = self.by_prefix.entry(*p).or_default();
            if holders.is_empty() {
                *self.prefix_lengths.entry(length_of(p)).or_default() += 1;
            }
            holders.insert(key.clone(), f.clone());
            prefixes.insert(*p);
        }
    }

    fn unindex(
        &mut self,
        key: &ServiceKey,
        f: &Fragment,
        ips: &mut BTreeSet<IpAddr>,
        prefixes: &mut BTreeSet<IpNet>,
    ) {
        for o in &f.outcomes {
            if let Some(holders) = self.by_ip.get_mut(&o.ip) {
                holders.remove(key);
                if holders.is_empty() {
                    self.by_ip.remove(&o.ip);
                }
            }
            ips.insert(o.ip);
        }
        for (_, p, _) in &f.routes {
            if let Some(holders) = self.by_prefix.get_mut(p) {
                holders.remove(key);
                if holders.is_empty() {
                    self.by_prefix.remove(p);
                    let l = length_of(p);
                    if let Some(n) = self.prefix_lengths.get_mut(&l) {
                        *n -= 1;
                        if *n == 0 {
                            self.prefix_lengths.remove(&l);
                        }
                    }
                }
            }
            prefixes.insert(*p);
        }
    }

    /// Re-merges every route for `prefix` from the Services holding it.
    fn merge_prefix(&mut self, prefix: IpNet) {
        let mut merged: BTreeMap<&str, RouteAttrs> = BTreeMap::new();
        for f in self.by_prefix.get(&prefix).into_iter().flat_map(Holders::fragments) {
            for (peer, _, a) in f.routes.iter().filter(|(_, p, _)| *p == prefix) {
                merged.entry(&**peer).and_modify(|e| e.merge(a)).or_insert_with(|| a.clone());
            }
        }
        for (peer, routes) in &mut self.out.bgp {
            match merged.remove(peer.as_str()) {
                Some(mut a) => {
                    a.mark_draining(self.out.ibgp.contains(peer));
                    routes.insert(prefix, a);
                }
                None => {
                    routes.remove(&prefix);
                }
            }
        }
    }

    /// Re-merges L2 ownership, the withdrawal reason and the drain of `ip` from the
    /// Services holding it, in Service order.
    fn merge_ip(&mut self, ip: IpAddr) {
        let mut announced = false;
        let mut reasons: Option<Vec<&str>> = None;
        let mut draining: Option<&String> = None;
        let mut l2: Option<Vec<String>> = None;
        let mut handover: Option<(Vec<String>, &String)> = None;
        let mut successors: Vec<String> = Vec::new();
        let mut unowned = false;
        for f in self.by_ip.get(&ip).into_iter().flat_map(Holders::fragments) {
            for o in f.outcomes.iter().filter(|o| o.ip == ip) {
                announced |= o.done;
                unowned |= o.l2_unowned;
                if !o.done {
                    reasons.get_or_insert_with(Vec::new).extend(o.why.iter().map(String::as_str));
                }
                if draining.is_none() {
                    draining = o.draining.as_ref();
                }
                if let Some(ifs) = &o.l2 {
                    merge_interfaces(l2.get_or_insert_with(|| ifs.clone()), ifs);
                    for next in &o.l2_successors {
                        if !successors.contains(next) {
                            successors.push(next.clone());
                        }
                    }
                }
                if let Some((ifs, why)) = &o.l2_handover {
                    merge_interfaces(&mut handover.get_or_insert_with(|| (ifs.clone(), why)).0, ifs);
                }
            }
        }
        let out = &mut self.out;
        out.l2.remove(&ip);
        out.l2_draining.remove(&ip);
        out.l2_successors.remove(&ip);
        out.withdrawn.remove(&ip);
        if unowned {
            out.l2_unowned.insert(ip);
        } else {
            out.l2_unowned.remove(&ip);
        }
        self.drain_candidates.remove(&ip);
        match (l2, handover) {
            (Some(ifs), _) => {
                out.l2.insert(ip, ifs);
                if !successors.is_empty() {
                    out.l2_successors.insert(ip, successors);
                }
            }
            (None, Some((ifs, why))) => {
                out.l2.insert(ip, ifs);
                out.l2_draining.insert(ip, why.clone());
            }
            (None, None) => {}
        }
        if let Some(why) = draining {
            self.drain_candidates.insert(ip, why.clone());
        }
        if let (false, Some(mut why)) = (announced, reasons) {
            why.dedup();
            out.withdrawn.insert(ip, why.join("; "));
        }
    }

    /// An address also announced normally (another Service, another advertisement, an
    /// aggregate) is not draining.
    fn filter_draining(&mut self) {
        let out = &mut self.out;
        let lengths = &self.prefix_lengths;
        let covered_normally = |ip: &IpAddr| {
            lengths.keys().filter(|(v4, _)| *v4 == ip.is_ipv4()).any(|(_, len)| {
                let Ok(p) = IpNet::new(*ip, *len).map(|p| p.trunc()) else { return false };
                out.bgp.values().any(|r| r.get(&p).is_some_and(|a| !a.draining))
            })
        };
        let draining: BTreeMap<IpAddr, String> = self
            .drain_candidates
            .iter()
            .filter(|(ip, _)| !covered_normally(ip))
            .map(|(ip, w)| (*ip, w.clone()))
            .collect();
        out.draining = draining;
    }
}

fn length_of(p: &IpNet) -> (bool, u8) {
    (matches!(p, IpNet::V4(_)), p.prefix_len())
}
