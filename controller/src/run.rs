//! The controller's life: wait for the leader lease, rebuild allocations from Service
//! status, then watch and reconcile until shutdown or lost leadership.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolb_api::{BfdProfile, BgpAdvertisement, BgpPeer, ControlPlaneVip, IpAddressPool, L2Advertisement};
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

use crate::context::{Context, Ipam, REPORTING_CONTROLLER, Settings};
use crate::error::Error;
use crate::fence::{Fence, Term};
use crate::http::Health;
use crate::ipam::{AllocError, Placement, ServiceKey};
use crate::leader::Elector;
use crate::metrics::Metrics;
use crate::model::{self, CachedNamespace, Class, WatchedService};
use crate::pool_sync::PoolSync;
use crate::queue::{Retries, WorkQueue};
use crate::service_cache::{Change, Relist, ServiceCache};
use crate::validity::ConfigStores;
use crate::{membership_secret, node_facts, reconcile};

/// Runs the controller until `shutdown` resolves (then returns `Ok` after releasing the
/// lease) or leadership is lost (an error: the process should exit and restart as standby).
pub async fn run(
    client: kube::Client,
    settings: Settings,
    metrics: Metrics,
    health: Health,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    tokio::pin!(shutdown);
    let mut elector = settings.leader.clone().map(|cfg| Elector::new(client.clone(), cfg));
    let mut term = None;
    if let Some(e) = &mut elector {
        // A standby is healthy and ready: it is doing its job, waiting.
        health.set_ready(true);
        tokio::select! {
            t = e.acquire() => term = Some(t),
            _ = &mut shutdown => return Ok(()),
        }
        health.set_ready(false);
    }
    // Every write of the leader's work goes through the fence: none once the term ended.
    // Dropping `serve` when `hold` returns is not enough on its own: its spawned tasks run
    // on other threads until aborted, and it may be polled before `hold` in the wake-up
    // after the term's end.
    let fence = term.as_ref().map_or_else(Fence::open, Term::fence);
    metrics.leader.set(1);
    let result = tokio::select! {
        r = serve(client, settings, fence, metrics.clone(), health.clone()) => r,
        _ = hold(elector.as_mut(), term.as_ref()) => Err(Error::LostLeadership),
        _ = &mut shutdown => {
            info!("shutting down");
            Ok(())
        }
    };
    // `serve` is dropped (its tasks aborted) before the lease goes: never two leaders at work.
    metrics.leader.set(0);
    health.set_ready(false);
    if let Some(e) = &elector {
        e.release().await;
    }
    result
}

async fn hold(elector: Option<&mut Elector>, term: Option<&Term>) {
    match (elector, term) {
        (Some(e), Some(t)) => e.hold(t).await,
        _ => std::future::pending().await,
    }
}

/// Starts a watch, retrying with [`watch_backoff`]; returns its stream of events.
fn watch_events<K>(api: Api<K>) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: ferrolb_api::Watched,
{
    watcher::watcher(api, watcher::Config::default()).backoff(watch_backoff())
}

/// Starts a watch driving a reflector; returns the stream of events after the cache applied them.
fn watch<K>(api: Api<K>, writer: Writer<K>) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send
where
    K: ferrolb_api::Watched,
{
    watch_events(api).reflect(writer)
}

/// How many Services are reconciled at once: their API writes overlap.
const CONCURRENCY: usize = 16;

/// How a failed watch retries: 0.5 s doubling to 5 s, with jitter, back to the start after
/// a success — the speaker's schedule (`ferrolb_speaker::cluster::WatchBackoff`). kube's
/// default (client-go's: up to 30 s, twice that with jitter, reset only after 2 minutes)
/// left a leader blind for a minute after a short apiserver outage: new Services waited
/// that long for an address (testbed/tests/real_ha.rs).
pub(crate) fn watch_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// The leader's work: every task lives in one JoinSet, so dropping this future (shutdown,
/// lost lease, or a test aborting it to simulate a crash) stops all of it.
async fn serve(
    client: kube::Client,
    settings: Settings,
    fence: Fence,
    metrics: Metrics,
    health: Health,
) -> Result<(), Error> {
    let (ns_reader, ns_writer) = reflector::store::<CachedNamespace>();
    let (pool_reader, pool_writer) = reflector::store::<IpAddressPool>();
    let queue = Arc::new(WorkQueue::default());
    let reporter =
        Reporter { controller: REPORTING_CONTROLLER.into(), instance: Some(settings.identity.clone()) };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        fence,
        metrics,
        settings,
        ipam: Mutex::new(Ipam::default()),
        services: ServiceCache::default(),
        namespaces: ns_reader.clone(),
        queue: queue.clone(),
        pools_dirty: Notify::new(),
        replayed: AtomicBool::new(false),
        metallb_notices: Default::default(),
        config_dirty: Notify::new(),
        superseded: Default::default(),
    });
    let mut tasks: JoinSet<Result<(), Error>> = JoinSet::new();

    tasks.spawn(services_task(ctx.clone(), watch_events(Api::<WatchedService>::all(client.clone()))));
    tasks.spawn(namespaces_task(ctx.clone(), watch(Api::all(client.clone()), ns_writer)));
    let (synced_tx, synced_rx) = oneshot::channel();
    tasks.spawn(pools_task(
        ctx.clone(),
        pool_reader.clone(),
        watch(Api::all(client.clone()), pool_writer),
        synced_tx,
    ));
    tasks.spawn(membership_task(ctx.clone()));
    let (stores, config_events) = config_watches(&client, pool_reader.clone());
    let (l2_tx, l2_rx) = tokio::sync::watch::channel(None);
    tasks.spawn(config_task(ctx.clone(), stores, config_events, l2_tx));
    tasks.spawn(node_facts::task(ctx.clone(), l2_rx));

    // Crash consistency: every pool, namespace and Service is known, and every address in
    // Service status replayed, before the first allocation.
    let ready = async {
        ctx.services.wait_until_ready().await;
        let _ = ns_reader.wait_until_ready().await;
        let _ = synced_rx.await;
        // Before the first reconcile, so that no notice is published twice.
        crate::metallb_notice::load(&ctx).await;
    };
    tokio::select! {
        _ = ready => {}
        r = tasks.join_next() => return task_ended(r),
    }
    replay(&ctx).await;
    health.set_ready(true);
    info!("state rebuilt from the API; allocating");

    // Up to CONCURRENCY reconciles at once, each Service in at most one (the queue sees
    // to that), each retried at the time its outcome asks for.
    let mut offered = Box::pin(queue.clone().stream());
    let mut running = FuturesUnordered::new();
    let mut retries = Retries::default();
    loop {
        tokio::select! {
            r = tasks.join_next() => return task_ended(r),
            Some(key) = offered.next(), if running.len() < CONCURRENCY => {
                let ctx = &ctx;
                running.push(async move {
                    let again = match reconcile::reconcile(&key, ctx).await {
                        Ok(again) => again,
                        Err(e) => Some(reconcile::failed(&key, &e, ctx)),
                    };
                    (key, again)
                });
            }
            Some((key, again)) = running.next(), if !running.is_empty() => {
                queue.done(&key);
                if let Some(after) = again {
                    retries.schedule(key, after);
                }
            }
            key = retries.due() => queue.push(key),
        }
    }
}

fn task_ended(r: Option<Result<Result<(), Error>, tokio::task::JoinError>>) -> Result<(), Error> {
    match r {
        Some(Ok(Err(e))) => Err(e),
        _ => Err(Error::WatchStopped("controller")),
    }
}

/// Replays every served Service's `status.loadBalancer.ingress` into the allocator. Two
/// Services holding one address they may not share: the older keeps it (the IPAM decides),
/// the other is re-allocated by its reconcile, and both get an Event.
async fn replay(ctx: &Context) {
    let mut services = ctx.services.state();
    services.sort_by(|a, b| a.key.cmp(&b.key));
    let mut conflicts: Vec<(ServiceKey, ServiceKey, std::net::IpAddr, String)> = Vec::new();
    let mut orphans = Vec::new();
    let mut replayed = 0usize;
    {
        let mut ipam = ctx.ipam();
        for svc in &services {
            // The snapshot was taken before the lock: a Service deleted since then had its
            // release (which needs the lock) run before this replay could assign it, and
            // assigning it now would leak its address. The cache forgets a Service before
            // its deletion is released, so checking it under the lock closes the race.
            if ctx.services.get(&svc.key).is_none() {
                continue;
            }
            if model::classify(svc, &ctx.settings.lb_class) != Class::Served {
                continue;
            }
            let ips = model::ingress_ips(svc);
            if ips.is_empty() {
                continue;
            }
            let key = svc.key.clone();
            let req = model::replay_request(svc, &ctx.namespace_labels(key.namespace()));
            match ipam.alloc.assign_existing(req, &ips) {
                Ok(r) => {
                    replayed += 1;
                    for e in r.evicted {
                        conflicts.push((e.service, e.kept_by, e.addr, e.reason.to_string()));
                    }
                    for a in r.addrs {
                        if let Placement::Orphaned(why) = a.placement {
                            orphans.push((key.clone(), a.addr, why.to_string()));
                        }
                    }
                }
                Err(AllocError::Conflict { addr, holder, reason }) => {
                    conflicts.push((key, holder, addr, reason.to_string()));
                }
                Err(e) => warn!(service = %key, error = %e, "cannot replay status"),
            }
        }
    }
    info!(
        services = replayed,
        conflicts = conflicts.len(),
        orphans = orphans.len(),
        "replayed Service status"
    );
    ctx.metrics.conflicts.inc_by(conflicts.len() as u64);
    for (loser, winner, addr, reason) in conflicts {
        let note = format!(
            "address {addr} was held by both {loser} and the older {winner} ({reason}); {winner} keeps it and {loser} gets a new address"
        );
        warn!("{note}");
        ctx.event(&ctx.service_ref(&loser), EventType::Warning, "AddressConflict", note.clone()).await;
        ctx.event(&ctx.service_ref(&winner), EventType::Warning, "AddressConflict", note).await;
    }
    for (key, addr, why) in orphans {
        ctx.event(
            &ctx.service_ref(&key),
            EventType::Warning,
            "AddressOrphaned",
            format!("address {addr}: {why}"),
        )
        .await;
    }
    ctx.replayed.store(true, Ordering::Release);
    ctx.pools_dirty.notify_one();
}

/// Service events: the cache applies each; changes queue a reconcile, deletions release
/// at once (after the cache forgot the Service: see [`reconcile`]'s `decide`).
async fn services_task(
    ctx: Arc<Context>,
    events: impl Stream<Item = Result<Event<WatchedService>, watcher::Error>>,
) -> Result<(), Error> {
    let mut events = std::pin::pin!(events);
    let mut relist = Relist::default();
    while let Some(ev) = events.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                warn!(error = %e, "Service watch failed; retrying");
                continue;
            }
        };
        match ctx.services.apply(&mut relist, ev) {
            Change::Applied(key) => ctx.queue.push(key),
            Change::Deleted(key) => {
                ctx.release(&key);
            }
            Change::Relisted => {
                // The cache now holds the full set. Release Services deleted while the watch
                // was down, and reconcile everything (allocate is idempotent).
                let gone: Vec<ServiceKey> = {
                    let ipam = ctx.ipam();
                    ipam.alloc
                        .services()
                        .map(|(k, _)| k)
                        .filter(|k| ctx.services.get(k).is_none())
                        .cloned()
                        .collect()
                };
                for k in &gone {
                    ctx.release(k);
                }
                for s in ctx.services.state() {
                    ctx.queue.push(s.key.clone());
                }
            }
            Change::None => {}
        }
    }
    Err(Error::WatchStopped("Service"))
}

/// Namespace label changes re-reconcile only the Services of that namespace.
async fn namespaces_task(
    ctx: Arc<Context>,
    events: impl Stream<Item = Result<Event<CachedNamespace>, watcher::Error>>,
) -> Result<(), Error> {
    let mut events = std::pin::pin!(events);
    let mut labels: BTreeMap<String, Arc<BTreeMap<String, String>>> = BTreeMap::new();
    let mut changed_during_init: Vec<String> = Vec::new();
    let touch = |ns: &str| {
        for key in ctx.services.keys_in(ns) {
            ctx.queue.push(key);
        }
    };
    while let Some(ev) = events.next().await {
        match ev {
            Ok(Event::Apply(ns)) | Ok(Event::InitApply(ns)) => {
                let name = ns.name_any();
                let new = ns.labels.clone();
                let before = labels.insert(name.clone(), new.clone());
                if before.is_some_and(|b| b != new) {
                    debug!(namespace = %name, "namespace labels changed");
                    if ctx.namespaces.get(&ObjectRef::from_obj(&ns)).is_some_and(|c| c.labels == new) {
                        touch(&name);
                    } else {
                        // During a relist the cache is swapped at InitDone.
                        changed_during_init.push(name);
                    }
                }
            }
            Ok(Event::Delete(ns)) => {
                labels.remove(&ns.name_any());
            }
            Ok(Event::InitDone) => {
                for ns in std::mem::take(&mut changed_during_init) {
                    touch(&ns);
                }
            }
            Ok(Event::Init) => {}
            Err(e) => warn!(error = %e, "Namespace watch failed; retrying"),
        }
    }
    Err(Error::WatchStopped("Namespace"))
}

/// Pool events and pool-status refreshes.
async fn pools_task(
    ctx: Arc<Context>,
    store: Store<IpAddressPool>,
    events: impl Stream<Item = Result<Event<IpAddressPool>, watcher::Error>>,
    synced: oneshot::Sender<()>,
) -> Result<(), Error> {
    let mut events = std::pin::pin!(events);
    let mut sync = PoolSync::new(store.clone());
    let mut synced = Some(synced);
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                None => return Err(Error::WatchStopped("IPAddressPool")),
                Some(Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone)) => {
                    sync.resync(&ctx).await;
                    // The other kinds refer to pools: they are judged again.
                    ctx.config_dirty.notify_one();
                    if let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => warn!(error = %e, "IPAddressPool watch failed (is the CRD installed?); retrying"),
            },
            _ = ctx.pools_dirty.notified(), if synced.is_none() => {
                sync.write_statuses(&ctx).await;
            }
            () = until(sync.due()) => sync.write_statuses(&ctx).await,
        }
    }
}

/// Sleeps until `at`; forever when there is none.
async fn until(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// What a configuration watch reported, whatever the kind.
enum ConfigEvent {
    /// The cache changed (or was listed afresh).
    Changed,
    /// Nothing the configuration depends on.
    Nothing,
    /// The watch failed (it retries by itself).
    Failed(&'static str, watcher::Error),
}

/// One watch of a configuration kind, its events reduced to [`ConfigEvent`].
fn config_watch<K: crate::validity::ConfigKind>(
    client: &kube::Client,
) -> (Store<K>, futures::stream::BoxStream<'static, ConfigEvent>) {
    let (reader, writer) = reflector::store::<K>();
    let events = watch(Api::<K>::all(client.clone()), writer)
        .map(|ev| match ev {
            Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => ConfigEvent::Changed,
            Ok(Event::Init | Event::InitApply(_)) => ConfigEvent::Nothing,
            Err(e) => ConfigEvent::Failed(K::KIND, e),
        })
        .boxed();
    (reader, events)
}

/// Watches of every configuration kind but pools (whose watch the pool task owns).
fn config_watches(
    client: &kube::Client,
    pools: Store<IpAddressPool>,
) -> (ConfigStores, impl Stream<Item = ConfigEvent> + Send + 'static) {
    let (peers, a) = config_watch::<BgpPeer>(client);
    let (bgp_advertisements, b) = config_watch::<BgpAdvertisement>(client);
    let (l2_advertisements, c) = config_watch::<L2Advertisement>(client);
    let (bfd_profiles, d) = config_watch::<BfdProfile>(client);
    let (control_plane_vips, e) = config_watch::<ControlPlaneVip>(client);
    let stores = ConfigStores {
        pools,
        peers,
        bgp_advertisements,
        l2_advertisements,
        bfd_profiles,
        control_plane_vips,
    };
    (stores, futures::stream::select_all([a, b, c, d, e]))
}

/// How soon a `Valid` condition that could not be written is tried again.
const CONFIG_RETRY: Duration = Duration::from_secs(5);

/// Keeps every configuration object's `Valid` condition current: once every kind is
/// listed, after every change of any kind (pools included), and again after a failed write.
/// Tells `l2` whether an L2Advertisement exists, once they are listed.
async fn config_task(
    ctx: Arc<Context>,
    stores: ConfigStores,
    events: impl Stream<Item = ConfigEvent>,
    l2: tokio::sync::watch::Sender<Option<bool>>,
) -> Result<(), Error> {
    let mut events = std::pin::pin!(events);
    let ready = stores.wait_until_ready();
    let mut ready = std::pin::pin!(ready);
    let (mut listed, mut dirty, mut retry) = (false, false, false);
    let mut unseen = crate::validity::Unseen::default();
    loop {
        tokio::select! {
            _ = &mut ready, if !listed => {
                listed = true;
                dirty = true;
            }
            ev = events.next() => match ev {
                None => return Err(Error::WatchStopped("configuration")),
                Some(ConfigEvent::Changed) => dirty = true,
                Some(ConfigEvent::Nothing) => {}
                Some(ConfigEvent::Failed(kind, e)) => {
                    warn!(kind, error = %e, "watch failed (is the CRD installed?); retrying");
                }
            },
            _ = ctx.config_dirty.notified() => dirty = true,
            _ = tokio::time::sleep(CONFIG_RETRY), if retry => dirty = true,
        }
        if listed && dirty {
            dirty = false;
            let any = !stores.l2_advertisements.is_empty();
            l2.send_if_modified(|v| v.replace(any) != Some(any));
            retry = !stores.sync(&ctx, &mut unseen).await;
        }
    }
}

/// Creates the membership Secret when absent, retrying until it exists.
async fn membership_task(ctx: Arc<Context>) -> Result<(), Error> {
    loop {
        match membership_secret::ensure_secret(&ctx.client, &ctx.fence, &ctx.settings.namespace).await {
            Ok(true) => {
                info!(namespace = %ctx.settings.namespace, "created the membership Secret");
                break;
            }
            Ok(false) => break,
            Err(e) => warn!(error = %e, "membership Secret; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    // Done; stay in the JoinSet so that a finished task is not mistaken for a failure.
    std::future::pending::<()>().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use kube::runtime::utils::Backoff;

    use super::*;

    /// The retry schedule stays short (kube's default reaches 30–60 s) and starts over
    /// after a success.
    #[test]
    fn watch_retries_stay_within_ten_seconds_and_restart_after_a_success() {
        let mut b = watch_backoff();
        let delays: Vec<Duration> = b.by_ref().take(12).collect();
        assert!(delays[0] <= Duration::from_secs(1), "{delays:?}");
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(10)), "{delays:?}");
        assert!(delays[11] >= Duration::from_secs(5), "doubles up to 5 s: {delays:?}");
        b.reset();
        assert!(b.next().is_some_and(|d| d <= Duration::from_secs(1)));
    }
}
