//! The allocator: which Service holds which address, from which pool.
//!
//! This file holds the [`Allocator`] and its public operations. The parts:
//! * `placement`: what it hands back (held addresses, their pool, replay and move results);
//! * `stats`: per-pool address counts;
//! * `choose`: choosing addresses for a request, and whether held ones still fit;
//! * `holdings`: the books of who holds what (attach, detach, pool re-attribution).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use super::error::AllocError;
use super::pool::{Pool, PoolSpec};
use super::range::Family;
use super::service::{FamilyPolicy, ServiceKey, ServiceRequest};

mod choose;
mod holdings;
mod placement;
mod stats;

pub use placement::{Assigned, Evicted, Moved, OrphanReason, Placement, Replayed};
pub use stats::{FamilyStats, PoolStats};

/// A Service's request and the addresses it holds.
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
}
