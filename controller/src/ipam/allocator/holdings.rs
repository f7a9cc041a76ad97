//! The books of who holds what: attaching and detaching a Service's addresses (taking
//! them from and giving them back to the pools), and re-attributing held addresses to
//! pools after a pool changes.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::placement::{Assigned, Moved, OrphanReason, Placement};
use super::{Allocator, Held};
use crate::ipam::pool::Pool;
use crate::ipam::service::{ServiceKey, ServiceRequest};

impl Allocator {
    /// In-use addresses within a pool's ranges: O(k log n) for k addresses in use there.
    pub(super) fn in_use_within(&self, pool: &Pool) -> BTreeSet<IpAddr> {
        pool.spec
            .ranges
            .iter()
            .flat_map(|r| self.users.range(r.first()..=r.last()).map(|(&a, _)| a))
            .collect()
    }

    /// Recomputes the pool attribution of held addresses after pool `changed` changed.
    pub(super) fn reattribute(
        &mut self,
        addrs: &BTreeSet<IpAddr>,
        changed: &str,
        removed: bool,
    ) -> Vec<Moved> {
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
    pub(super) fn attribute(
        &self,
        addr: IpAddr,
        req: &ServiceRequest,
        current: Option<&str>,
    ) -> Option<String> {
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

    /// Records a Service's addresses; the first holder of an address takes it from every
    /// pool that contains it (pools may overlap).
    pub(super) fn attach(&mut self, req: ServiceRequest, addrs: Vec<Assigned>) {
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
    pub(super) fn detach(&mut self, key: &ServiceKey) -> Option<Box<Held>> {
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
