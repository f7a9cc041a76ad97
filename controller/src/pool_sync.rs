//! IPAddressPools: validated with the one validator, fed to the allocator (an invalid pool
//! keeps its last good config), and their status (counts, `Valid` as every kind writes
//! it: [`crate::validity`]) kept current.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ferrolb_api::validate::kind::IP_ADDRESS_POOL;
use ferrolb_api::{
    Config, IpAddressPool, IpAddressPoolStatus, Origin, ValidationError, errors_for, validate,
};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use serde_json::json;
use tracing::{debug, info, warn};

use crate::context::Context;
use crate::ipam::{Moved, Placement, PoolSpec};
use crate::model;
use crate::validity::{ConfigKind, Unseen, announce, valid_update};

/// The pool side of the controller; owned by the pool task.
pub struct PoolSync {
    pools: Store<IpAddressPool>,
    /// What the allocator holds per pool: the last config that passed validation.
    in_force: BTreeMap<String, PoolSpec>,
    /// Current validation errors per pool (empty = valid).
    errors: BTreeMap<String, Vec<ValidationError>>,
    /// Pools whose status write the cache does not show yet.
    unseen: Unseen,
    /// When each pool's status was last written, for [`STATUS_INTERVAL`].
    written: BTreeMap<String, Instant>,
    /// When the earliest count write held back by [`STATUS_INTERVAL`] is due.
    due: Option<Instant>,
}

/// A pool's counts are written at most this often: while Services are addressed in a
/// burst (50 000 at a cold start take the controller's 50 writes a second for most of an
/// hour), a write per round trip would be a fifth of its writes and a watch event to every
/// speaker each time. The first change after a quiet spell is written at once, and a
/// change of the `Valid` condition always is.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(2);

fn saturate(x: u128) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

impl PoolSync {
    /// A pool side reading from this watch cache.
    pub fn new(pools: Store<IpAddressPool>) -> Self {
        PoolSync {
            pools,
            in_force: BTreeMap::new(),
            errors: BTreeMap::new(),
            unseen: Unseen::default(),
            written: BTreeMap::new(),
            due: None,
        }
    }

    /// When counts held back by [`STATUS_INTERVAL`] are due to be written
    /// ([`PoolSync::write_statuses`] again), if any are.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// Re-validates every pool and applies what changed to the allocator. Only the Services
    /// the allocator reports as moved (plus any waiting for addresses) are reconciled again.
    pub async fn resync(&mut self, ctx: &Context) {
        let objects = self.pools.state();
        let config = Config { pools: objects.iter().map(|p| (**p).clone()).collect(), ..Config::default() };
        let all_errors = validate(&config, Origin::Cluster);
        let mut moved: Vec<Moved> = Vec::new();
        let mut changed = false;
        {
            let mut ipam = ctx.ipam();
            for pool in &objects {
                let name = pool.name_any();
                let mut errs: Vec<ValidationError> =
                    errors_for(&all_errors, IP_ADDRESS_POOL, &name).cloned().collect();
                if errs.is_empty() {
                    match model::pool_spec(pool) {
                        Ok(spec) if self.in_force.get(&name) != Some(&spec) => {
                            moved.extend(ipam.alloc.set_pool(spec.clone()));
                            self.in_force.insert(name.clone(), spec);
                            changed = true;
                        }
                        Ok(_) => {}
                        Err(problem) => errs.push(ValidationError {
                            kind: IP_ADDRESS_POOL,
                            name: name.clone(),
                            field: "spec.addresses".into(),
                            problem,
                            fix: "write CIDRs or ranges of one family each".into(),
                        }),
                    }
                }
                self.errors.insert(name.clone(), errs);
            }
            let live: Vec<String> = objects.iter().map(|p| p.name_any()).collect();
            let gone: Vec<String> = self.in_force.keys().filter(|n| !live.contains(n)).cloned().collect();
            for name in gone {
                moved.extend(ipam.alloc.remove_pool(&name));
                self.in_force.remove(&name);
                self.errors.remove(&name);
                ctx.metrics.remove_pool(&name);
                changed = true;
                info!(pool = %name, "pool deleted");
            }
            self.errors.retain(|n, _| live.contains(n));
        }
        ctx.metrics.invalid_pools.set(self.errors.values().filter(|e| !e.is_empty()).count() as i64);
        for m in &moved {
            ctx.enqueue(&m.service);
            if let Placement::Orphaned(why) = &m.placement {
                warn!(service = %m.service, addr = %m.addr, "address orphaned: {why}");
                ctx.event(
                    &ctx.service_ref(&m.service),
                    EventType::Warning,
                    "AddressOrphaned",
                    format!("address {}: {why}", m.addr),
                )
                .await;
            }
        }
        if changed {
            ctx.retry_pending();
        }
        self.write_statuses(ctx).await;
    }

    /// Writes every pool's status (counts and `Valid`) where it differs from what is stored,
    /// with an Event when `Valid` flips or its errors change; nothing until the Services
    /// are replayed (the replay asks for a write when done), so a restart that changes
    /// nothing writes nothing.
    pub async fn write_statuses(&mut self, ctx: &Context) {
        self.due = None;
        if !ctx.counts_known() {
            return;
        }
        let api: Api<IpAddressPool> = Api::all(ctx.client.clone());
        let objects = self.pools.state();
        let (stats, orphans) = {
            let ipam = ctx.ipam();
            let stats: BTreeMap<String, _> = objects
                .iter()
                .filter_map(|p| ipam.alloc.pool_stats(&p.name_any()).map(|s| (p.name_any(), s)))
                .collect();
            (stats, ipam.alloc.orphans().count())
        };
        ctx.metrics.orphaned.set(i64::try_from(orphans).unwrap_or(i64::MAX));
        self.written.retain(|name, _| objects.iter().any(|p| p.name_any() == *name));
        for pool in &objects {
            let name = pool.name_any();
            let stat = stats.get(&name);
            if let Some(s) = stat {
                ctx.metrics.set_pool(&name, s);
            }
            if self.unseen.pending(IpAddressPool::KIND, &**pool) {
                // Its watch event is on the way and brings another pass.
                continue;
            }
            let current = pool.status.clone().unwrap_or_default();
            let errs = self.errors.get(&name).cloned().unwrap_or_default();
            let (conditions, change) = valid_update(&current.conditions, &errs, pool.metadata.generation);
            let mut desired = IpAddressPoolStatus { conditions, ..Default::default() };
            if let Some(s) = stat {
                desired.assigned_ipv4 = saturate(s.v4.assigned);
                desired.assigned_ipv6 = saturate(s.v6.assigned);
                desired.available_ipv4 = saturate(s.v4.available);
                desired.available_ipv6 = saturate(s.v6.available);
            }
            if desired == current {
                continue;
            }
            if change.is_none()
                && let Some(at) = self.written.get(&name)
                && at.elapsed() < STATUS_INTERVAL
            {
                let when = *at + STATUS_INTERVAL;
                self.due = Some(self.due.map_or(when, |d| d.min(when)));
                continue;
            }
            // Conditional on the version the counts and conditions were computed against,
            // so that an old leader's write still on the wire cannot land over the new
            // leader's (a 409; the newer version's watch event brings another pass).
            let patch = json!({"metadata": {"resourceVersion": pool.resource_version()}, "status": desired});
            match ctx.call(api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))).await {
                Ok(_) => {
                    self.unseen.wrote(IpAddressPool::KIND, &**pool);
                    self.written.insert(name.clone(), Instant::now());
                    if let Some(change) = change {
                        let while_invalid = if self.in_force.contains_key(&name) {
                            IpAddressPool::WHILE_INVALID
                        } else {
                            "the pool is not used until it is fixed"
                        };
                        announce(ctx, &**pool, IpAddressPool::KIND, &errs, change, while_invalid).await;
                    }
                }
                Err(e) if e.status() == Some(404) => {}
                Err(e) if e.status() == Some(409) => {
                    debug!(pool = %name, "the pool changed since it was read; writing its status again from the new version");
                }
                // The next change or watch event writes it again.
                Err(e) => warn!(pool = %name, error = %e, "cannot write IPAddressPool status"),
            }
        }
    }
}
