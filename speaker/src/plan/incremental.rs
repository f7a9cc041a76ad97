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

use super::{Fragment, Globals, NOBODY, PeerRoutes, Plan, RouteAttrs, fragment, merge_interfaces};
use crate::model::{Changes, ClusterModel, NodeLabels, ServiceInfo, ServiceKey};

/// The Services holding one address or prefix, in key order. Nearly always one, kept
/// inline: no allocation of its own (two per Service; indexing a static file of 50k
/// Services took 22 ms with a Vec each, 16 ms inline), where a one-entry BTreeMap cost
/// a 632-byte node (dhat, 10k Services).
#[derive(Debug)]
enum Holders {
    One(ServiceKey, Arc<Fragment>),
    Many(Vec<(ServiceKey, Arc<Fragment>)>),
}

impl Holders {
    /// The Services at indexes `run` (in key order) of `frags`.
    fn of<T>(frags: &[(ServiceKey, Arc<Fragment>)], run: &[(T, usize)]) -> Self {
        match run {
            [(_, i)] => {
                let (k, f) = &frags[*i];
                Holders::One(k.clone(), f.clone())
            }
            _ => Holders::Many(run.iter().map(|(_, i)| frags[*i].clone()).collect()),
        }
    }

    fn insert(&mut self, key: ServiceKey, f: Arc<Fragment>) {
        match self {
            Holders::One(k, held) if *k == key => *held = f,
            Holders::One(k, held) => {
                let one = (k.clone(), held.clone());
                let mut v = Vec::with_capacity(2);
                if key < one.0 {
                    v.extend([(key, f), one]);
                } else {
                    v.extend([one, (key, f)]);
                }
                *self = Holders::Many(v);
            }
            Holders::Many(v) => match v.binary_search_by(|(k, _)| k.cmp(&key)) {
                Ok(i) => v[i].1 = f,
                Err(i) => {
                    // Exactly: a pushed Vec holds room for 4.
                    v.reserve_exact(1);
                    v.insert(i, (key, f));
                }
            },
        }
    }

    fn remove(&mut self, key: &ServiceKey) {
        match self {
            Holders::One(k, _) if k == key => *self = Holders::Many(Vec::new()),
            Holders::One(..) => {}
            Holders::Many(v) => {
                if let Ok(i) = v.binary_search_by(|(k, _)| k.cmp(key)) {
                    v.remove(i);
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Holders::Many(v) if v.is_empty())
    }

    fn fragments(&self) -> impl Iterator<Item = &Arc<Fragment>> {
        let (one, many) = match self {
            Holders::One(_, f) => (Some(f), &[][..]),
            Holders::Many(v) => (None, &v[..]),
        };
        one.into_iter().chain(many.iter().map(|(_, f)| f))
    }
}

impl Default for Holders {
    fn default() -> Self {
        Holders::Many(Vec::new())
    }
}

/// Plans incrementally: [`Planner::plan`] gives what [`super::plan`] gives from scratch.
#[derive(Debug, Default)]
pub struct Planner {
    /// The node, live set and heartbeat suspects of the last plan (None: nothing
    /// planned yet).
    me: Option<String>,
    live: BTreeSet<String>,
    suspected: BTreeSet<String>,
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
    out: Plan,
    recomputed: usize,
}

impl Planner {
    /// A planner that has planned nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Brings the plan up to date with what changed in `model` since the last call
    /// (taking the model's change set) and returns it.
    pub fn plan(&mut self, model: &mut ClusterModel, me: &str, live: &BTreeSet<String>) -> &Plan {
        let changes = model.take_changes();
        self.update(model, changes, me, live, &NOBODY)
    }

    /// How many Services the last plan recomputed.
    pub fn recomputed(&self) -> usize {
        self.recomputed
    }

    pub(super) fn into_announcements(self) -> Plan {
        self.out
    }

    /// [`Planner::plan`] with the model's changes already taken (`changes`), and the
    /// members of `live` whose L2 heartbeats stopped (`suspected`): they are left out
    /// of single-owner elections only (the planner's `Globals::suspected` says why).
    pub fn update(
        &mut self,
        model: &ClusterModel,
        changes: Changes,
        me: &str,
        live: &BTreeSet<String>,
        suspected: &BTreeSet<String>,
    ) -> &Plan {
        let all = changes.all
            || self.me.as_deref() != Some(me)
            || self.live != *live
            || self.suspected != *suspected;
        let empty = NodeLabels::default();
        let g = Globals::of(model, me, (live, suspected), &empty);
        if all {
            let fresh = Planner {
                me: Some(me.to_owned()),
                live: live.clone(),
                suspected: suspected.clone(),
                ..Planner::default()
            };
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
        let services: Vec<(&ServiceKey, &ServiceInfo)> = model.services.iter().collect();
        let frags = on_every_core(&services, |run| {
            run.iter().map(|(key, svc)| ((*key).clone(), Arc::new(fragment(model, g, key, svc)))).collect()
        });
        self.recomputed = frags.len();
        // The two indexes are independent: a big plan builds them side by side.
        let by_ip = |frags: &[_]| index(frags, |all, f, i| all.extend(f.outcomes.iter().map(|o| (o.ip, i))));
        let by_prefix =
            |frags: &[_]| index(frags, |all, f, i| all.extend(f.routes.iter().map(|(_, p, _)| (*p, i))));
        (self.by_ip, self.by_prefix) = if frags.len() < PARALLEL_FROM {
            (by_ip(&frags), by_prefix(&frags))
        } else {
            std::thread::scope(|scope| {
                let ips = scope.spawn(|| by_ip(&frags));
                let prefixes = by_prefix(&frags);
                (ips.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), prefixes)
            })
        };
        for p in self.by_prefix.keys() {
            *self.prefix_lengths.entry(length_of(p)).or_default() += 1;
        }
        self.fragments = frags.into_iter().collect();
        // Every prefix in order, each peer's routes collected and built in one pass
        // (inserting 50k routes one by one walks the tree 50k times).
        let mut routes: BTreeMap<&str, Vec<(IpNet, RouteAttrs)>> =
            self.out.bgp.keys().map(|peer| (peer.as_str(), Vec::new())).collect();
        for (prefix, holders) in &self.by_prefix {
            for (peer, a) in merged_routes(*prefix, holders) {
                if let Some(r) = routes.get_mut(&*peer) {
                    r.push((*prefix, a));
                }
            }
        }
        let mut built: BTreeMap<String, PeerRoutes> = BTreeMap::new();
        for (peer, r) in routes {
            let ibgp = self.out.ibgp.contains(peer);
            let r = r.into_iter().map(|(p, mut a)| {
                a.mark_draining(ibgp);
                (p, a)
            });
            built.insert(peer.to_owned(), r.collect());
        }
        self.out.bgp = built;
        // Walked in order rather than looked up address by address (50k searches).
        for (ip, holders) in &self.by_ip {
            merge_ip(*ip, Some(holders), &mut self.out, &mut self.drain_candidates);
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
        let mut merged = match self.by_prefix.get(&prefix) {
            Some(holders) => merged_routes(prefix, holders),
            None => Vec::new(),
        };
        for (peer, routes) in &mut self.out.bgp {
            match merged.iter().position(|(p, _)| **p == **peer) {
                Some(i) => {
                    let (_, mut a) = merged.swap_remove(i);
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
        merge_ip(ip, self.by_ip.get(&ip), &mut self.out, &mut self.drain_candidates);
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

/// Re-merges L2 ownership, the withdrawal reason and the drain of `ip` into `out` and
/// `drain_candidates` from `holders`, the Services holding it, in Service order.
fn merge_ip(
    ip: IpAddr,
    holders: Option<&Holders>,
    out: &mut Plan,
    drain_candidates: &mut BTreeMap<IpAddr, String>,
) {
    let mut announced = false;
    let mut reasons: Option<Vec<&str>> = None;
    let mut draining: Option<&String> = None;
    let mut l2: Option<Vec<String>> = None;
    let mut handover: Option<(Vec<String>, &String)> = None;
    let mut successors: Vec<String> = Vec::new();
    let mut unowned = false;
    let mut shared: Option<Vec<String>> = None;
    for f in holders.into_iter().flat_map(Holders::fragments) {
        for o in f.outcomes.iter().filter(|o| o.ip == ip) {
            announced |= o.done;
            unowned |= o.l2_unowned;
            if !o.done {
                reasons.get_or_insert_with(Vec::new).extend(o.why.iter().map(String::as_str));
            }
            if draining.is_none() {
                draining = o.draining.as_ref();
            }
            if let Some(nodes) = &o.l2_active_active {
                // Services sharing the address: every node serving one of them.
                let all = shared.get_or_insert_with(Vec::new);
                all.extend(nodes.iter().cloned());
                all.sort();
                all.dedup();
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
    out.l2.remove(&ip);
    out.l2_draining.remove(&ip);
    out.l2_successors.remove(&ip);
    out.l2_active_active.remove(&ip);
    out.withdrawn.remove(&ip);
    if unowned {
        out.l2_unowned.insert(ip);
    } else {
        out.l2_unowned.remove(&ip);
    }
    drain_candidates.remove(&ip);
    if let (Some(nodes), Some(_)) = (shared, &l2) {
        out.l2_active_active.insert(ip, nodes);
    }
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
        drain_candidates.insert(ip, why.clone());
    }
    if let (false, Some(mut why)) = (announced, reasons) {
        why.dedup();
        out.withdrawn.insert(ip, why.join("; "));
    }
}

/// The route for `prefix` to each peer, merged from its holders in Service order (before
/// draining is marked); nearly always one holder and one peer.
fn merged_routes(prefix: IpNet, holders: &Holders) -> Vec<(Arc<str>, RouteAttrs)> {
    let mut merged: Vec<(Arc<str>, RouteAttrs)> = Vec::new();
    for f in holders.fragments() {
        for (peer, _, a) in f.routes.iter().filter(|(_, p, _)| *p == prefix) {
            match merged.iter_mut().find(|(p, _)| p == peer) {
                Some((_, e)) => e.merge(a),
                None => merged.push((peer.clone(), a.clone())),
            }
        }
    }
    merged
}

fn length_of(p: &IpNet) -> (bool, u8) {
    (matches!(p, IpNet::V4(_)), p.prefix_len())
}

/// The Services of `frags` (in key order) holding each key that `held` adds, as
/// (key, index in `frags`), for a fragment at an index.
fn index<K: Ord + Copy>(
    frags: &[(ServiceKey, Arc<Fragment>)],
    held: impl Fn(&mut Vec<(K, usize)>, &Fragment, usize),
) -> BTreeMap<K, Holders> {
    // Sorted, each key's holders come in key order, as `Holders` keeps them.
    let mut all: Vec<(K, usize)> = Vec::with_capacity(frags.len());
    for (i, (_, f)) in frags.iter().enumerate() {
        held(&mut all, f, i);
    }
    all.sort_unstable();
    all.dedup();
    all.chunk_by(|a, b| a.0 == b.0).map(|run| (run[0].0, Holders::of(frags, run))).collect()
}

/// Below this many Services one thread computes their fragments and indexes: threads
/// cost more than they save.
const PARALLEL_FROM: usize = 2048;
/// The speaker's other tasks (BGP sessions, L2) keep running beside a big plan.
const MAX_THREADS: usize = 4;

/// `f` of contiguous runs of `items`, on every core (up to [`MAX_THREADS`]), joined in
/// order: what one `f(items)` would give. A full plan of 50k Services computes their
/// fragments this way, each independent of the others.
fn on_every_core<T: Sync, U: Send>(items: &[T], f: impl Fn(&[T]) -> Vec<U> + Sync) -> Vec<U> {
    let threads = std::thread::available_parallelism().map_or(1, usize::from).min(MAX_THREADS);
    if threads < 2 || items.len() < PARALLEL_FROM {
        return f(items);
    }
    let f = &f;
    std::thread::scope(|scope| {
        let handles: Vec<_> =
            items.chunks(items.len().div_ceil(threads)).map(|run| scope.spawn(move || f(run))).collect();
        let mut out = Vec::with_capacity(items.len());
        for h in handles {
            out.extend(h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        out
    })
}
