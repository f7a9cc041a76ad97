//! The allocator: which Service holds which address, from which pool.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use thiserror::Error;

use super::error::{AllocError, ShareRefusal};
use super::pool::{Pool, PoolSpec};
use super::range::Family;
use super::service::{FamilyPolicy, ServiceKey, ServiceRequest};

/// An address held by a Service and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assigned {
    /// The address.
    pub addr: IpAddr,
    /// The pool it belongs to, or why it belongs to none.
    pub placement: Placement,
}

/// Which pool an address is attributed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// The address is in this pool (for `ferrolb.io/ip-allocated-from-pool`).
    Pool(String),
    /// The address is in no pool; the Service keeps it and the controller reports why.
    Orphaned(OrphanReason),
}

/// Why a held address is in no pool.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OrphanReason {
    /// Its pool was deleted and no other pool holds it.
    #[error(
        "pool {pool} was deleted and no other pool contains the address; the service keeps it until its request changes"
    )]
    PoolDeleted {
        /// The deleted pool.
        pool: String,
    },
    /// Its pool was edited to exclude it and no other pool holds it.
    #[error(
        "pool {pool} no longer contains the address and no other pool does; the service keeps it until its request changes"
    )]
    PoolShrunk {
        /// The edited pool.
        pool: String,
    },
    /// Replayed from Service status while no pool holds it.
    #[error("the address is not in any pool; the service keeps it until its request changes")]
    NotInAnyPool,
}

/// A Service that lost an address while status was replayed, to be re-allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evicted {
    /// The Service that lost all its addresses.
    pub service: ServiceKey,
    /// The disputed address.
    pub addr: IpAddr,
    /// The older Service that keeps it.
    pub kept_by: ServiceKey,
    /// Why they may not share.
    pub reason: ShareRefusal,
}

/// The result of replaying one Service's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// What the Service now holds.
    pub addrs: Vec<Assigned>,
    /// Younger Services that held the same addresses and lost them.
    pub evicted: Vec<Evicted>,
}

/// A held address whose pool attribution changed after a pool change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The Service holding it.
    pub service: ServiceKey,
    /// The address.
    pub addr: IpAddr,
    /// The new attribution.
    pub placement: Placement,
}

/// Assigned and available addresses of one family in one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FamilyStats {
    /// Usable addresses (saturates at u128::MAX, only reachable with `::/0`).
    pub capacity: u128,
    /// Addresses in use by at least one Service (a shared address counts once).
    pub assigned: u128,
    /// Addresses free; convert with `u64::try_from(..).unwrap_or(u64::MAX)` for status.
    pub available: u128,
}

/// Per-family statistics of one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// IPv4.
    pub v4: FamilyStats,
    /// IPv6.
    pub v6: FamilyStats,
}

impl PoolStats {
    /// The statistics of one family.
    pub fn family(&self, family: Family) -> FamilyStats {
        match family {
            Family::V4 => self.v4,
            Family::V6 => self.v6,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    req: ServiceRequest,
    addrs: Vec<Assigned>,
}

/// Address management for LoadBalancer Services: pure state, no I/O, deterministic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allocator {
    pools: BTreeMap<String, Pool>,
    /// Boxed: a B-tree leaf holds 11 entries and is about half full after ascending
    /// inserts, so each unboxed `Held` (256 bytes) cost nearly twice its size in nodes.
    services: BTreeMap<ServiceKey, Box<Held>>,
    /// Who holds each address in use.
    /// A sorted Vec, not a BTreeSet: almost every address has one holder, and a BTreeSet
    /// leaf node costs ~500 bytes per address (measured: ~40% of the heap in the bench).
    users: BTreeMap<IpAddr, Vec<ServiceKey>>,
    /// Addresses in use per sharing key (with a user count), so a sharer finds a
    /// compatible address without scanning pools.
    sharing: BTreeMap<String, Vec<(IpAddr, usize)>>,
}

impl fmt::Display for FamilyPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            FamilyPolicy::SingleStack(_) => "SingleStack",
            FamilyPolicy::PreferDualStack(_) => "PreferDualStack",
            FamilyPolicy::RequireDualStack(_) => "RequireDualStack",
        };
        let fams: Vec<String> = self.families().iter().map(ToString::to_string).collect();
        write!(f, "{name} {}", fams.join(","))
    }
}

/// Primary family first, as Kubernetes orders `status.loadBalancer.ingress`.
fn primary_first(req: &ServiceRequest, addrs: &mut [Assigned]) {
    let order = req.families.families();
    addrs.sort_by_key(|a| order.iter().position(|f| *f == Family::of(&a.addr)));
}

impl Allocator {
    /// An allocator with no pools and no Services.
    pub fn new() -> Self {
        Allocator::default()
    }

    // ---- pools -------------------------------------------------------------------------

    /// Adds or replaces a pool. Held addresses are never taken away: those that leave every
    /// pool become orphaned; the returned list says whose attribution changed.
    pub fn set_pool(&mut self, spec: PoolSpec) -> Vec<Moved> {
        // Watches resend unchanged pools; rebuilding would cost O(k log n) for nothing.
        if self.pools.get(&spec.name).is_some_and(|p| p.spec == spec) {
            return Vec::new();
        }
        let name = spec.name.clone();
        let mut pool = Pool::new(spec);
        let mut affected = self.in_use_within(&pool);
        for &addr in &affected {
            pool.take(addr);
        }
        if let Some(old) = self.pools.insert(name.clone(), pool) {
            affected.extend(self.in_use_within(&old));
        }
        self.reattribute(&affected, &name, false)
    }

    /// Removes a pool; its held addresses move to another pool holding them or become orphaned.
    pub fn remove_pool(&mut self, name: &str) -> Vec<Moved> {
        let Some(old) = self.pools.remove(name) else {
            return Vec::new();
        };
        let affected = self.in_use_within(&old);
        self.reattribute(&affected, name, true)
    }

    /// Statistics of one pool.
    pub fn pool_stats(&self, name: &str) -> Option<PoolStats> {
        let pool = self.pools.get(name)?;
        let stats = |f: Family| {
            let space = pool.space(f);
            FamilyStats {
                capacity: space.capacity(),
                assigned: space.capacity().saturating_sub(space.available()),
                available: space.available(),
            }
        };
        Some(PoolStats { v4: stats(Family::V4), v6: stats(Family::V6) })
    }

    /// The pool names, in order.
    pub fn pool_names(&self) -> impl Iterator<Item = &str> {
        self.pools.keys().map(String::as_str)
    }

    // ---- services ----------------------------------------------------------------------

    /// Crash recovery: records that a Service already holds `addrs` (from its status).
    /// Call for every Service before any [`Allocator::allocate`]. If an older Service holds
    /// one of the addresses and they may not share, this one gets [`AllocError::Conflict`]
    /// and holds nothing; younger holders are evicted instead and listed in the result.
    pub fn assign_existing(&mut self, req: ServiceRequest, addrs: &[IpAddr]) -> Result<Replayed, AllocError> {
        self.detach(&req.key);
        let addrs: Vec<IpAddr> = addrs.iter().copied().collect::<BTreeSet<_>>().into_iter().collect();
        let mut evicted = Vec::new();
        for &addr in &addrs {
            for user in self.users.get(&addr).into_iter().flatten() {
                let Some(other) = self.services.get(user) else {
                    continue;
                };
                let Some(reason) = req.share_refusal(&other.req) else {
                    continue;
                };
                if other.req.seniority() < req.seniority() {
                    return Err(AllocError::Conflict { addr, holder: user.clone(), reason });
                }
                evicted.push(Evicted { service: user.clone(), addr, kept_by: req.key.clone(), reason });
            }
        }
        for e in &evicted {
            self.detach(&e.service);
        }
        if addrs.is_empty() {
            return Ok(Replayed { addrs: Vec::new(), evicted });
        }
        let mut assigned: Vec<Assigned> = addrs
            .into_iter()
            .map(|addr| Assigned {
                addr,
                placement: match self.attribute(addr, &req, None) {
                    Some(pool) => Placement::Pool(pool),
                    None => Placement::Orphaned(OrphanReason::NotInAnyPool),
                },
            })
            .collect();
        primary_first(&req, &mut assigned);
        self.attach(req, assigned.clone());
        Ok(Replayed { addrs: assigned, evicted })
    }

    /// Gives a Service addresses for its request, or confirms the ones it holds. Held
    /// addresses are kept while they still satisfy the request; otherwise new ones are
    /// chosen, and if that fails the Service keeps its old addresses and gets the error.
    pub fn allocate(&mut self, req: ServiceRequest) -> Result<Vec<Assigned>, AllocError> {
        if let Some(held) = self.services.get(&req.key)
            && self.still_fits(&req, held)
        {
            let mut addrs = held.addrs.clone();
            // ipFamilies may have been reordered; status lists the primary family first.
            primary_first(&req, &mut addrs);
            let old = self.detach(&req.key);
            debug_assert!(old.is_some());
            self.attach(req, addrs.clone());
            return Ok(addrs);
        }
        let old = self.detach(&req.key);
        // Keep whichever old addresses still qualify (e.g. SingleStack -> DualStack keeps
        // the IPv4 address and adds IPv6) rather than jumping to the lowest free one.
        let keep: Vec<IpAddr> = old.iter().flat_map(|h| h.addrs.iter().map(|a| a.addr)).collect();
        match self.choose_addresses(&req, &keep) {
            Ok(addrs) => {
                self.attach(req, addrs.clone());
                Ok(addrs)
            }
            Err(e) => {
                if let Some(old) = old {
                    self.attach(old.req, old.addrs);
                }
                Err(e)
            }
        }
    }

    /// Releases everything a Service holds (deleted, or no longer a LoadBalancer of ours).
    /// A shared address is freed when its last holder goes. Returns whether it held anything.
    pub fn release(&mut self, key: &ServiceKey) -> bool {
        self.detach(key).is_some()
    }

    /// What a Service holds, primary family first.
    pub fn assignment(&self, key: &ServiceKey) -> Option<&[Assigned]> {
        self.services.get(key).map(|h| h.addrs.as_slice())
    }

    /// Every Service holding an address that is in no pool, with that address.
    pub fn orphans(&self) -> impl Iterator<Item = (&ServiceKey, &Assigned)> {
        self.services.iter().flat_map(|(k, h)| {
            h.addrs.iter().filter(|a| matches!(a.placement, Placement::Orphaned(_))).map(move |a| (k, a))
        })
    }

    /// The Services holding an address.
    pub fn holders(&self, addr: IpAddr) -> impl Iterator<Item = &ServiceKey> {
        self.users.get(&addr).into_iter().flatten()
    }

    /// Every Service holding addresses, in key order.
    pub fn services(&self) -> impl Iterator<Item = (&ServiceKey, &[Assigned])> {
        self.services.iter().map(|(k, h)| (k, h.addrs.as_slice()))
    }

    // ---- internals ---------------------------------------------------------------------

    /// In-use addresses within a pool's ranges: O(k log n) for k addresses in use there.
    fn in_use_within(&self, pool: &Pool) -> BTreeSet<IpAddr> {
        pool.spec
            .ranges
            .iter()
            .flat_map(|r| self.users.range(r.first()..=r.last()).map(|(&a, _)| a))
            .collect()
    }

    /// Recomputes the pool attribution of held addresses after pool `changed` changed.
    fn reattribute(&mut self, addrs: &BTreeSet<IpAddr>, changed: &str, removed: bool) -> Vec<Moved> {
        let mut moves = Vec::new();
        for &addr in addrs {
            for key in self.users.get(&addr).into_iter().flatten() {
                let Some(held) = self.services.get(key) else {
                    continue;
                };
                for a in held.addrs.iter().filter(|a| a.addr == addr) {
                    let current = match &a.placement {
                        Placement::Pool(p) => Some(p.as_str()),
                        Placement::Orphaned(_) => None,
                    };
                    let placement = match self.attribute(addr, &held.req, current) {
                        Some(pool) => Placement::Pool(pool),
                        None => match &a.placement {
                            Placement::Orphaned(reason) => Placement::Orphaned(reason.clone()),
                            Placement::Pool(_) if removed => {
                                Placement::Orphaned(OrphanReason::PoolDeleted { pool: changed.to_owned() })
                            }
                            Placement::Pool(_) => {
                                Placement::Orphaned(OrphanReason::PoolShrunk { pool: changed.to_owned() })
                            }
                        },
                    };
                    if placement != a.placement {
                        moves.push(Moved { service: key.clone(), addr, placement });
                    }
                }
            }
        }
        for m in &moves {
            if let Some(held) = self.services.get_mut(&m.service) {
                for a in held.addrs.iter_mut().filter(|a| a.addr == m.addr) {
                    a.placement = m.placement.clone();
                }
            }
        }
        moves
    }

    /// The pool an address is attributed to: the current one if it still holds it, else
    /// the annotated pool, else the first pool (by name) that allows the Service, else
    /// the first pool that holds it at all.
    fn attribute(&self, addr: IpAddr, req: &ServiceRequest, current: Option<&str>) -> Option<String> {
        let holds = |name: &str| self.pools.get(name).is_some_and(|p| p.contains(addr));
        if let Some(c) = current.filter(|c| holds(c)) {
            return Some(c.to_owned());
        }
        if let Some(p) = req.pool.as_deref().filter(|p| holds(p)) {
            return Some(p.to_owned());
        }
        let mut containing = self.pools.iter().filter(|(_, p)| p.contains(addr));
        let first = containing.clone().next().map(|(n, _)| n.clone());
        containing.find(|(_, p)| p.allows(req)).map(|(n, _)| n.clone()).or(first)
    }

    /// Whether held addresses still satisfy a (possibly changed) request.
    fn still_fits(&self, req: &ServiceRequest, held: &Held) -> bool {
        let families: Vec<Family> = held.addrs.iter().map(|a| Family::of(&a.addr)).collect();
        if !req.families.accepts(&families) {
            return false;
        }
        if !req.requested.is_empty() {
            let want: BTreeSet<&IpAddr> = req.requested.iter().collect();
            let have: BTreeSet<&IpAddr> = held.addrs.iter().map(|a| &a.addr).collect();
            if want != have {
                return false;
            }
        }
        held.addrs.iter().all(|a| {
            self.refusal(a.addr, req).is_none()
                && match &a.placement {
                    // Never yank an orphaned address while the user asks for the same thing.
                    Placement::Orphaned(_) => held.req.placement_fields() == req.placement_fields(),
                    Placement::Pool(_) => match &req.pool {
                        Some(name) => {
                            self.pools.get(name).is_some_and(|p| p.contains(a.addr) && p.allows(req))
                        }
                        None => self.pools.values().any(|p| p.contains(a.addr) && p.allows(req)),
                    },
                }
        })
    }

    /// The first holder of `addr` (other than the Service itself) it may not share with.
    fn refusal(&self, addr: IpAddr, req: &ServiceRequest) -> Option<(ServiceKey, ShareRefusal)> {
        self.users.get(&addr).into_iter().flatten().filter(|k| **k != req.key).find_map(|k| {
            let other = &self.services.get(k)?.req;
            req.share_refusal(other).map(|r| (k.clone(), r))
        })
    }

    /// Chooses addresses for a request without changing any state.
    fn choose_addresses(&self, req: &ServiceRequest, keep: &[IpAddr]) -> Result<Vec<Assigned>, AllocError> {
        if !req.requested.is_empty() {
            return self.check_requested(req);
        }
        let candidates = self.candidates(req)?;
        let wanted = req.families.families();
        let in_pool =
            |addr: IpAddr, pool: &str| Assigned { addr, placement: Placement::Pool(pool.to_owned()) };
        // One pool for every family when possible, so the Service's addresses share a pool.
        for name in &candidates {
            let picks: Option<Vec<Assigned>> =
                wanted.iter().map(|&f| self.pick(name, f, req, keep).map(|a| in_pool(a, name))).collect();
            if let Some(picks) = picks {
                return Ok(picks);
            }
        }
        let mut out = Vec::new();
        for &family in &wanted {
            let found = candidates
                .iter()
                .find_map(|name| self.pick(name, family, req, keep).map(|a| in_pool(a, name)));
            match (found, req.families) {
                (Some(a), _) => out.push(a),
                (None, FamilyPolicy::PreferDualStack(_)) => {}
                (None, _) => return Err(self.exhausted(req, &candidates, family)),
            }
        }
        if out.is_empty() {
            let primary = wanted.first().copied().unwrap_or(Family::V4);
            return Err(self.exhausted(req, &candidates, primary));
        }
        Ok(out)
    }

    /// An address of `family` from pool `name`: one the Service held before if still
    /// usable, else an address already shared under its sharing key if it may join it,
    /// else the lowest free one. O(log n), plus the addresses in use under the same key.
    fn pick(&self, name: &str, family: Family, req: &ServiceRequest, keep: &[IpAddr]) -> Option<IpAddr> {
        let pool = self.pools.get(name)?;
        // The Service itself was detached, so an old address is either free or held only
        // by others, whom `refusal` checks.
        let kept = keep
            .iter()
            .copied()
            .find(|&a| Family::of(&a) == family && pool.contains(a) && self.refusal(a, req).is_none());
        if kept.is_some() {
            return kept;
        }
        if let Some(shared) = req.sharing_key.as_ref().and_then(|k| self.sharing.get(k)) {
            let joinable = shared
                .iter()
                .map(|&(a, _)| a)
                .find(|&a| Family::of(&a) == family && pool.contains(a) && self.refusal(a, req).is_none());
            if joinable.is_some() {
                return joinable;
            }
        }
        pool.space(family).first_free()
    }

    /// Pools to allocate from automatically, in order: the annotated pool alone; else the
    /// autoAssign pools whose serviceAllocation matches (priority, unset last, then name),
    /// then the autoAssign pools without serviceAllocation (by name).
    fn candidates(&self, req: &ServiceRequest) -> Result<Vec<String>, AllocError> {
        if let Some(name) = &req.pool {
            let pool = self.pools.get(name).ok_or_else(|| AllocError::UnknownPool { pool: name.clone() })?;
            if !pool.allows(req) {
                return Err(AllocError::PoolNotAllowed { pool: name.clone(), service: req.key.clone() });
            }
            return Ok(vec![name.clone()]);
        }
        let mut matching = Vec::new();
        let mut open = Vec::new();
        for (name, pool) in &self.pools {
            if !pool.spec.auto_assign {
                continue;
            }
            match &pool.spec.allocation {
                Some(a) if a.matches(req) => {
                    matching.push((a.priority.is_none(), a.priority.unwrap_or(0), name.clone()))
                }
                Some(_) => {}
                None => open.push(name.clone()),
            }
        }
        matching.sort();
        let list: Vec<String> = matching.into_iter().map(|(_, _, n)| n).chain(open).collect();
        if list.is_empty() {
            return Err(AllocError::NoPoolAllows {
                namespace: req.key.namespace().to_owned(),
                service: req.key.clone(),
            });
        }
        Ok(list)
    }

    fn exhausted(&self, req: &ServiceRequest, candidates: &[String], family: Family) -> AllocError {
        let pools: Vec<String> = candidates
            .iter()
            .filter(|n| self.pools.get(*n).is_some_and(|p| p.space(family).capacity() > 0))
            .cloned()
            .collect();
        if pools.is_empty() {
            AllocError::NoPoolForFamily { service: req.key.clone(), family }
        } else {
            AllocError::Exhausted { pools, family }
        }
    }

    /// Checks explicitly requested addresses: in a pool that allows the Service (the
    /// annotated one if set), shareable with their holders, and fitting the family policy.
    fn check_requested(&self, req: &ServiceRequest) -> Result<Vec<Assigned>, AllocError> {
        let families: Vec<Family> = req.requested.iter().map(Family::of).collect();
        if !req.families.accepts(&families) {
            return Err(AllocError::FamilyMismatch {
                requested: req.requested.clone(),
                policy: req.families.to_string(),
            });
        }
        let mut out = Vec::new();
        for &addr in &req.requested {
            let pool = match &req.pool {
                Some(name) => {
                    let pool =
                        self.pools.get(name).ok_or_else(|| AllocError::UnknownPool { pool: name.clone() })?;
                    if !pool.contains(addr) {
                        return Err(if pool.covers(addr) {
                            AllocError::BuggyAddress { addr, pool: name.clone() }
                        } else {
                            AllocError::NotInPool { addr, pool: name.clone() }
                        });
                    }
                    if !pool.allows(req) {
                        return Err(AllocError::PoolNotAllowed {
                            pool: name.clone(),
                            service: req.key.clone(),
                        });
                    }
                    name.clone()
                }
                None => {
                    let mut containing = self.pools.iter().filter(|(_, p)| p.contains(addr)).peekable();
                    let Some((first, _)) = containing.peek() else {
                        return Err(match self.pools.iter().find(|(_, p)| p.covers(addr)) {
                            Some((name, _)) => AllocError::BuggyAddress { addr, pool: name.clone() },
                            None => AllocError::NotInAnyPool { addr },
                        });
                    };
                    let first = (*first).clone();
                    containing
                        .find(|(_, p)| p.allows(req))
                        .map(|(n, _)| n.clone())
                        .ok_or(AllocError::PoolNotAllowed { pool: first, service: req.key.clone() })?
                }
            };
            if let Some((holder, reason)) = self.refusal(addr, req) {
                return Err(AllocError::InUse { addr, holder, reason });
            }
            out.push(Assigned { addr, placement: Placement::Pool(pool) });
        }
        primary_first(req, &mut out);
        Ok(out)
    }

    /// Records a Service's addresses; the first holder of an address takes it from every
    /// pool that contains it (pools may overlap).
    fn attach(&mut self, req: ServiceRequest, addrs: Vec<Assigned>) {
        for a in &addrs {
            let users = self.users.entry(a.addr).or_default();
            if users.is_empty() {
                for pool in self.pools.values_mut() {
                    pool.take(a.addr);
                }
            }
            if let Err(i) = users.binary_search(&req.key) {
                users.insert(i, req.key.clone());
            }
            if let Some(k) = &req.sharing_key {
                let shared = self.sharing.entry(k.clone()).or_default();
                match shared.binary_search_by_key(&a.addr, |&(x, _)| x) {
                    Ok(i) => shared[i].1 += 1,
                    Err(i) => shared.insert(i, (a.addr, 1)),
                }
            }
        }
        self.services.insert(req.key.clone(), Box::new(Held { req, addrs }));
    }

    /// Forgets a Service; an address goes back to its pools when its last holder goes.
    fn detach(&mut self, key: &ServiceKey) -> Option<Box<Held>> {
        let held = self.services.remove(key)?;
        for a in &held.addrs {
            if let Some(users) = self.users.get_mut(&a.addr) {
                if let Ok(i) = users.binary_search(key) {
                    users.remove(i);
                }
                if users.is_empty() {
                    self.users.remove(&a.addr);
                    for pool in self.pools.values_mut() {
                        pool.give_back(a.addr);
                    }
                }
            }
            if let Some(k) = &held.req.sharing_key
                && let Some(addrs) = self.sharing.get_mut(k)
            {
                if let Ok(i) = addrs.binary_search_by_key(&a.addr, |&(x, _)| x) {
                    addrs[i].1 -= 1;
                    if addrs[i].1 == 0 {
                        addrs.remove(i);
                    }
                }
                if addrs.is_empty() {
                    self.sharing.remove(k);
                }
            }
        }
        Some(held)
    }
}
