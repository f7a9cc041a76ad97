//! Choosing addresses for a request (requested ones checked, else picked from the
//! candidate pools), and whether the addresses a Service holds still fit its request.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::placement::{Assigned, Placement};
use super::{Allocator, Held, primary_first};
use crate::ipam::ShareRefusal;
use crate::ipam::error::AllocError;
use crate::ipam::range::Family;
use crate::ipam::service::{FamilyPolicy, ServiceKey, ServiceRequest};

impl Allocator {
    /// Whether held addresses still satisfy a (possibly changed) request.
    pub(super) fn still_fits(&self, req: &ServiceRequest, held: &Held) -> bool {
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
    pub(super) fn choose_addresses(
        &self,
        req: &ServiceRequest,
        keep: &[IpAddr],
    ) -> Result<Vec<Assigned>, AllocError> {
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
}
