//! Service reconciliation: decide under the allocator lock, then write status,
//! annotation and Events without it.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::{ANNOTATION_IP_ALLOCATED_FROM_POOL, set_condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use crate::context::Context;
use crate::error::Error;
use crate::ipam::{Assigned, Placement, ServiceKey};
use crate::metallb_notice;
use crate::model::{self, CachedService, Class};
use crate::service_write::{Part, Sent, Writes, is_conflict};

/// What the allocator decided for one Service.
enum Decision {
    /// The Service is gone; whatever it held was released.
    Gone,
    /// Another loadBalancerClass: never touched.
    Foreign,
    /// The cache holds a version a later write of ours superseded: the newer one is on
    /// its way and queues the Service again.
    Superseded,
    /// Not a LoadBalancer (any more): released; clear what we wrote.
    NotServed(Arc<CachedService>),
    /// Holds these addresses.
    Assigned(Arc<CachedService>, Vec<Assigned>),
    /// Could not allocate; `announce` when the message is new.
    Failed(Arc<CachedService>, String, bool),
}

fn decide(key: &ServiceKey, ctx: &Context) -> Decision {
    // Read from the cache under the lock: the allocator must see the newest spec, and a
    // Service deleted meanwhile must not get an address (a deletion releases after the
    // cache forgets it, so checking the cache under the lock closes that race).
    let mut ipam = ctx.ipam();
    let Some(cur) = ctx.services.get(key) else {
        drop(ipam);
        ctx.release(key);
        return Decision::Gone;
    };
    if ctx.superseded.is_superseded(&cur) {
        return Decision::Superseded;
    }
    let key = key.clone();
    match model::classify(&cur, &ctx.settings.lb_class) {
        Class::Foreign => Decision::Foreign,
        Class::NotLoadBalancer => {
            drop(ipam);
            ctx.release(&key);
            Decision::NotServed(cur)
        }
        Class::Served => {
            let labels = ctx.namespace_labels(key.namespace());
            let result = model::service_request(&cur, &labels)
                .map_err(|e| e.to_string())
                .and_then(|req| ipam.alloc.allocate(req).map_err(|e| format!("service {key}: {e}")));
            match result {
                Ok(addrs) => {
                    ipam.pending.remove(&key);
                    ipam.reported.remove(&key);
                    Decision::Assigned(cur, addrs)
                }
                Err(msg) => {
                    ipam.pending.insert(key.clone());
                    let announce = ipam.reported.get(&key) != Some(&msg);
                    ipam.reported.insert(key, msg.clone());
                    Decision::Failed(cur, msg, announce)
                }
            }
        }
    }
}

/// How soon a Service whose allocation failed is tried again without a change. It is
/// retried sooner when addresses free up or pools change ([`Context::retry_pending`]).
pub const RETRY_ALLOCATION: Duration = Duration::from_secs(300);

/// How soon a Service whose reconcile failed (a write) is reconciled again.
pub const RETRY_ERROR: Duration = Duration::from_secs(2);

/// Reconciles one Service: allocate (idempotent) and make status, annotation and Events
/// say so. Returns when to reconcile it again if nothing changes, if ever; on error, it
/// is retried after [`RETRY_ERROR`] (see [`failed`]).
pub async fn reconcile(key: &ServiceKey, ctx: &Context) -> Result<Option<Duration>, Error> {
    ctx.metrics.reconciles.inc();
    match decide(key, ctx) {
        Decision::Gone | Decision::Foreign | Decision::Superseded => Ok(None),
        Decision::NotServed(cur) => {
            clear(&cur, ctx).await?;
            Ok(None)
        }
        Decision::Assigned(cur, addrs) => {
            metallb_notice::notify(&cur, ctx).await;
            write(&cur, &addrs, ctx).await?;
            Ok(None)
        }
        Decision::Failed(cur, msg, announce) => {
            metallb_notice::notify(&cur, ctx).await;
            if announce {
                warn!(service = %cur.key, "{msg}");
                ctx.metrics.allocation("failed");
                ctx.event(&cur.object_ref(), EventType::Warning, "AllocationFailed", msg).await;
            }
            Ok(Some(RETRY_ALLOCATION))
        }
    }
}

/// Counts and logs a failed reconcile; the allocator state is already right, only I/O is
/// retried, after [`RETRY_ERROR`]. A write refused because the Service changed since it
/// was read (409) is not an incident: the watch brings the newer version and queues the
/// Service, whose next reconcile decides again from it; the retry is only a backstop.
pub fn failed(key: &ServiceKey, err: &Error, ctx: &Context) -> Duration {
    if is_conflict(err) {
        debug!(service = %key, error = %err, "the Service changed since it was read; deciding again");
    } else {
        warn!(service = %key, error = %err, "reconcile failed; retrying");
    }
    ctx.metrics
        .reconcile_errors
        .get_or_create(&vec![("error".to_owned(), err.metric_label().to_owned())])
        .inc();
    RETRY_ERROR
}

fn ingress(addrs: &[IpAddr]) -> Value {
    Value::Array(addrs.iter().map(|a| json!({"ip": a.to_string(), "ipMode": "VIP"})).collect())
}

/// Whether status already lists exactly these addresses, in order, with ipMode VIP.
fn status_matches(svc: &CachedService, addrs: &[IpAddr]) -> bool {
    svc.ingress.len() == addrs.len()
        && svc.ingress.iter().zip(addrs).all(|(i, a)| i.as_written && i.ip == Some(*a))
}

async fn write(svc: &CachedService, assigned: &[Assigned], ctx: &Context) -> Result<(), Error> {
    let key = &svc.key;
    let addrs: Vec<IpAddr> = assigned.iter().map(|a| a.addr).collect();
    let mut writes = Writes::new(svc, ctx);
    let changed = !status_matches(svc, &addrs);
    if changed {
        let patch = json!({"status": {"loadBalancer": {"ingress": ingress(&addrs)}}});
        if writes.send(Part::Status, "status.loadBalancer", patch).await? == Sent::Gone {
            return Ok(());
        }
    }
    if let Some(conditions) = orphan_conditions(svc, assigned) {
        // The whole list is written: the version guard also keeps a concurrent writer's
        // condition from being silently dropped.
        let patch = json!({"status": {"conditions": conditions}});
        if writes.send(Part::Status, "status.conditions", patch).await? == Sent::Gone {
            return Ok(());
        }
    }
    let pools = model::pool_annotation(assigned);
    if model::current_pool_annotation(svc) != pools.as_deref() {
        let patch = json!({"metadata": {"annotations": {ANNOTATION_IP_ALLOCATED_FROM_POOL: pools}}});
        if writes.send(Part::Metadata, "metadata.annotations", patch).await? == Sent::Gone {
            return Ok(());
        }
    }
    writes.done();
    if changed {
        ctx.metrics.allocation("assigned");
        ctx.pools_dirty.notify_one();
        let list: Vec<String> = assigned
            .iter()
            .map(|a| match &a.placement {
                Placement::Pool(p) => format!("{} from pool {p}", a.addr),
                Placement::Orphaned(why) => format!("{} ({why})", a.addr),
            })
            .collect();
        let note = format!("assigned {}", list.join(", "));
        info!(service = %key, "{note}");
        ctx.event(&svc.object_ref(), EventType::Normal, "IPAllocated", note).await;
    } else {
        debug!(service = %key, "status already up to date");
    }
    Ok(())
}

/// Condition type on a Service: False while one of its addresses is in no pool.
pub const CONDITION_ADDRESS_IN_POOL: &str = "ferrolb.io/AddressInPool";

/// The Service's conditions with ours updated, or `None` when nothing changes. The
/// condition appears only once an address is orphaned, and turns True when none is.
fn orphan_conditions(svc: &CachedService, assigned: &[Assigned]) -> Option<Vec<Condition>> {
    let current: Vec<Condition> = svc.conditions.clone();
    let ours = current.iter().find(|c| c.type_ == CONDITION_ADDRESS_IN_POOL);
    let orphans: Vec<String> = assigned
        .iter()
        .filter_map(|a| match &a.placement {
            Placement::Orphaned(why) => Some(format!("address {}: {why}", a.addr)),
            Placement::Pool(_) => None,
        })
        .collect();
    let (status, reason, message) = if orphans.is_empty() {
        ours?;
        ("True", "InPool", "every address is in a pool".to_owned())
    } else {
        ("False", "Orphaned", orphans.join("; "))
    };
    if ours.is_some_and(|c| c.status == status && c.message == message) {
        return None;
    }
    let mut conditions = current;
    set_condition(
        &mut conditions,
        Condition {
            type_: CONDITION_ADDRESS_IN_POOL.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            observed_generation: svc.generation,
            last_transition_time: Time(Timestamp::now()),
        },
    );
    Some(conditions)
}

/// A Service that stopped being a LoadBalancer: remove the ingress and annotation we wrote.
async fn clear(svc: &CachedService, ctx: &Context) -> Result<(), Error> {
    let key = &svc.key;
    let ours = model::current_pool_annotation(svc).is_some();
    let has_ingress = !model::ingress_ips(svc).is_empty();
    if !ours && !has_ingress {
        return Ok(());
    }
    let mut writes = Writes::new(svc, ctx);
    if has_ingress {
        let patch = json!({"status": {"loadBalancer": {"ingress": null}}});
        if writes.send(Part::Status, "status.loadBalancer", patch).await? == Sent::Gone {
            return Ok(());
        }
    }
    if ours {
        let patch = json!({"metadata": {"annotations": {ANNOTATION_IP_ALLOCATED_FROM_POOL: null}}});
        if writes.send(Part::Metadata, "metadata.annotations", patch).await? == Sent::Gone {
            return Ok(());
        }
    }
    writes.done();
    info!(service = %key, "released its load-balancer address: no longer type LoadBalancer");
    ctx.event(
        &svc.object_ref(),
        EventType::Normal,
        "IPReleased",
        "released the load-balancer address: the service is no longer type LoadBalancer".into(),
    )
    .await;
    Ok(())
}
