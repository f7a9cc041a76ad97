//! The watchers: one per kind, each turning its stream into [`Update`]s for the event
//! loop, and how a failed watch retries.
//!
//! **Nodes by scope** ([`NodeScope`]): other Nodes matter to L2 only (elections read
//! their labels, readiness and addresses; membership their addresses). Without an
//! L2Advertisement the speaker watches its own Node alone, so the kubelets' status
//! writes (each Node at least every 5 minutes, every one to every speaker: about 17 a
//! second at 5 000 nodes) and a restart's list of every Node cost a BGP speaker nothing.
//! With L2Advertisements it reads the other nodes from the facts the controller
//! publishes (ConfigMaps written only when a fact changes) and watches every Node only
//! where those are not published.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ferrolb_api::{BfdProfile, BgpAdvertisement, BgpPeer, FactsNode, IpAddressPool, L2Advertisement, Slim};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::{Change, Update, slim};

/// How a failed watch retries: doubling from [`WatchBackoff::MIN`] up to
/// [`WatchBackoff::MAX`], each delay plus up to half again at random, back to the start
/// after any success.
///
/// kube's default is client-go's reflector's (0.8 s doubling to 30 s, up to twice that
/// with jitter, forgotten only after 2 minutes without an error): after a 20 s apiserver
/// outage a speaker stayed blind for 60–70 s (testbed/tests/real_ha.rs), a minute in which
/// a Local Service's endpoints can move without the announcements following. A dead
/// apiserver refuses a retry at once and a live one answers it cheaply, and a recovering
/// one sees each speaker's relists spread over the jitter, so a short cap costs little.
///
/// **A thundering herd spread with the cluster.** Every speaker's watches fail together
/// when the apiserver restarts, and each first retry may be a relist: 5 000 speakers
/// times ten kinds within half a second. So the first retry after a success waits up to
/// [`RELIST_SPREAD_PER_NODE`] more per Node in the cluster ([`set_cluster_size`]), at
/// random: 10 s for 5 000 Nodes, nothing noticeable for a handful. A speaker watching
/// its own Node only ([`NodeScope::Own`]) cannot count them and spreads for
/// [`UNCOUNTED_CLUSTER`] Nodes.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
    /// The Nodes to spread for; None: the cluster's, as last synced.
    nodes: Option<usize>,
}

impl WatchBackoff {
    /// The first delay (before the cluster's spread).
    pub const MIN: Duration = Duration::from_millis(500);
    /// The longest delay before jitter (with it, at most 1.5 × this).
    pub const MAX: Duration = Duration::from_secs(5);
}

/// How much the first retry of a failed watch is spread per Node in the cluster.
pub const RELIST_SPREAD_PER_NODE: Duration = Duration::from_millis(2);

/// The cluster size a speaker spreads for when it watches its own Node only: the largest
/// measured (`bench scale`), so a big cluster's herd stays spread over 10 s. Counting the
/// Nodes would cost each speaker a second Node list per restart (`remainingItemCount` of a
/// list of one), and one list per kind is the restart budget (`tests/request_budget.rs`).
/// The price is a small cluster's: a BGP-only speaker's first retry after an apiserver
/// restart waits up to 10 s instead of a few milliseconds, announcing meanwhile what it has.
pub const UNCOUNTED_CLUSTER: usize = 5000;

/// The Nodes in the cluster, as last synced: what the first retry's spread is made of.
static CLUSTER_SIZE: AtomicUsize = AtomicUsize::new(0);

/// Records the number of Nodes, for the spread of every watch's first retry.
pub fn set_cluster_size(nodes: usize) {
    CLUSTER_SIZE.store(nodes, Ordering::Relaxed);
}

/// The window the first retry of a failed watch is spread over, for `nodes` Nodes.
pub fn relist_spread(nodes: usize) -> Duration {
    RELIST_SPREAD_PER_NODE.saturating_mul(u32::try_from(nodes).unwrap_or(u32::MAX))
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff { next: Self::MIN, nodes: None }
    }
}

impl WatchBackoff {
    /// A backoff spreading its first retry for `nodes` Nodes, whatever the cluster's.
    pub fn for_nodes(nodes: usize) -> Self {
        WatchBackoff { next: Self::MIN, nodes: Some(nodes) }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.next;
        let nodes = self.nodes.unwrap_or_else(|| CLUSTER_SIZE.load(Ordering::Relaxed));
        let spread = if base == Self::MIN { relist_spread(nodes) } else { Duration::ZERO };
        self.next = (self.next * 2).min(Self::MAX);
        Some(base.mul_f64(1.0 + rand::random::<f64>() / 2.0) + spread.mul_f64(rand::random::<f64>()))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::MIN;
    }
}

/// How many updates may wait for the event loop. A watcher finding the queue full waits
/// (and stops reading its watch, so the apiserver holds the rest) rather than buffering
/// without bound while the loop is busy, e.g. writing ServiceAnnouncements for a burst.
/// A queue, not latest-state-wins: every Delete and every whole relist must reach the
/// [`Feed`], and the loop already plans once for everything queued.
pub const UPDATE_QUEUE: usize = 256;

/// The channel from the watchers to the event loop, [`UPDATE_QUEUE`] deep.
pub fn channel() -> (mpsc::Sender<Update>, mpsc::Receiver<Update>) {
    mpsc::channel(UPDATE_QUEUE)
}

/// One watched kind: its name (in logs), its [`Update`] variant, and what the speaker
/// keeps of each object (Nodes, Services and EndpointSlices are read as [`Slim`] objects,
/// Nodes cut further by [`slim`]; the configuration kinds are few objects, kept whole
/// until the feed strips them).
struct Kind<K, T = K> {
    name: &'static str,
    wrap: fn(Change<T>) -> Update,
    keep: fn(K) -> T,
}

fn whole<K>(o: K) -> K {
    o
}

/// Turns one watcher into [`Update`]s: single events pass through, a (re)list is
/// collected and sent whole once complete, errors are reported (the stream backs off).
/// Each object is cut to what the speaker keeps of it as it arrives.
async fn pump<K, T>(api: Api<K>, kind: Kind<K, T>, tx: mpsc::Sender<Update>)
where
    K: ferrolb_api::Watched,
{
    pump_with(api, watcher::Config::default(), kind, tx).await;
}

/// [`pump`] with a watcher configuration of its own (a field selector).
async fn pump_with<K, T>(api: Api<K>, config: watcher::Config, kind: Kind<K, T>, tx: mpsc::Sender<Update>)
where
    K: ferrolb_api::Watched,
{
    let Kind { name, wrap, keep } = kind;
    let stream = watcher::watcher(api, config).backoff(WatchBackoff::default());
    let mut stream = std::pin::pin!(stream);
    let mut listing: Vec<T> = Vec::new();
    while let Some(ev) = stream.next().await {
        let update = match ev {
            Ok(Event::Init) => {
                listing.clear();
                continue;
            }
            Ok(Event::InitApply(o)) => {
                listing.push(keep(o));
                continue;
            }
            Ok(Event::InitDone) => wrap(Change::Listed(std::mem::take(&mut listing))),
            Ok(Event::Apply(o)) => wrap(Change::Apply(Box::new(keep(o)))),
            Ok(Event::Delete(o)) => wrap(Change::Delete(Box::new(keep(o)))),
            Err(e) => Update::WatchFailed { kind: name, error: crate::error::one_line(&e.to_string()) },
        };
        if tx.send(update).await.is_err() {
            return;
        }
    }
}

/// Which Nodes the speaker watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeScope {
    /// Every Node ([`Update::Node`]): while L2Advertisements exist and the controller does
    /// not publish the Nodes' facts.
    All,
    /// This node's own Node only ([`Update::OwnNode`]): BGP needs nothing of the others.
    Own,
    /// This node's own Node ([`Update::OwnNode`]) and the published facts of the others
    /// ([`Update::NodeFacts`]): while L2Advertisements exist and every Node's facts are
    /// published.
    Facts,
}

/// The running watchers, the scope of their Node watch and whether the published Nodes'
/// facts are watched.
#[derive(Debug)]
pub struct Watchers {
    /// Aborts every watcher when dropped.
    _set: JoinSet<()>,
    scope: watch::Sender<Option<NodeScope>>,
    facts: watch::Sender<bool>,
}

impl Watchers {
    /// Watches the Nodes of `scope` from now on (the Node watch waits for the first).
    pub fn set_node_scope(&self, scope: NodeScope) {
        let changed = self.scope.send_if_modified(|s| {
            let changed = *s != Some(scope);
            *s = Some(scope);
            changed
        });
        if changed {
            match scope {
                NodeScope::All => tracing::info!(
                    "L2Advertisements exist and the controller publishes no Node facts: watching every Node"
                ),
                NodeScope::Own => tracing::info!("no L2Advertisement: watching this node's own Node only"),
                NodeScope::Facts => tracing::info!(
                    "L2Advertisements exist: watching this node's own Node and the Node facts the controller publishes"
                ),
            }
        }
    }

    /// Watches the published Nodes' facts from now on, or no longer.
    pub fn set_facts_watch(&self, on: bool) {
        self.facts.send_if_modified(|f| std::mem::replace(f, on) != on);
    }
}

/// The watch of the published Nodes' facts in `api`'s namespace, while `on` says so.
async fn facts(api: Api<ConfigMap>, mut on: watch::Receiver<bool>, tx: mpsc::Sender<Update>) {
    loop {
        if on.wait_for(|on| *on).await.is_err() {
            return;
        }
        let config = watcher::Config::default().labels(&ferrolb_api::node_facts::selector());
        let kind = Kind { name: "NodeFacts", wrap: Update::NodeFacts, keep: whole };
        tokio::select! {
            () = pump_with(api.clone(), config, kind, tx.clone()) => return,
            r = on.wait_for(|on| !*on) => if r.is_err() { return },
        }
    }
}

/// The Node watch: none until the scope is known, then that scope's, started afresh
/// (listing again) whenever the scope changes.
async fn nodes(
    api: Api<FactsNode>,
    me: String,
    mut scope: watch::Receiver<Option<NodeScope>>,
    tx: mpsc::Sender<Update>,
) {
    loop {
        let Ok(current) = scope.wait_for(Option::is_some).await.map(|s| *s) else { return };
        let run = match current {
            Some(NodeScope::Own | NodeScope::Facts) => {
                let config = watcher::Config::default().fields(&format!("metadata.name={me}"));
                let kind = Kind { name: "Node", wrap: Update::OwnNode, keep: slim::facts_node };
                futures::future::Either::Left(pump_with(api.clone(), config, kind, tx.clone()))
            }
            _ => {
                let kind = Kind { name: "Node", wrap: Update::Node, keep: slim::facts_node };
                futures::future::Either::Right(pump(api.clone(), kind, tx.clone()))
            }
        };
        let mut run = std::pin::pin!(run);
        tokio::select! {
            () = &mut run => return,
            changed = scope.changed() => {
                if changed.is_err() {
                    return run.await;
                }
            }
        }
    }
}

/// Starts one watcher per kind, the Node watch for node `me` once told its scope, the
/// watch of the Nodes' facts published in `namespace` when told to; they run until the
/// returned [`Watchers`] are dropped.
pub fn spawn_watchers(
    client: &kube::Client,
    tx: &mpsc::Sender<Update>,
    me: &str,
    namespace: &str,
) -> Watchers {
    let mut set = JoinSet::new();
    let c = || client.clone();
    let t = || tx.clone();
    let (scope, scope_rx) = watch::channel(None);
    set.spawn(nodes(Api::<FactsNode>::all(c()), me.to_owned(), scope_rx, t()));
    let (facts_on, facts_rx) = watch::channel(false);
    set.spawn(facts(Api::<ConfigMap>::namespaced(c(), namespace), facts_rx, t()));
    set.spawn(pump(
        Api::<Slim<Service>>::all(c()),
        Kind { name: "Service", wrap: Update::Service, keep: Slim::into_inner },
        t(),
    ));
    set.spawn(pump(
        Api::<Slim<EndpointSlice>>::all(c()),
        Kind { name: "EndpointSlice", wrap: Update::EndpointSlice, keep: Slim::into_inner },
        t(),
    ));
    set.spawn(pump(
        Api::<IpAddressPool>::all(c()),
        Kind { name: "IPAddressPool", wrap: Update::Pool, keep: whole },
        t(),
    ));
    set.spawn(pump(Api::<BgpPeer>::all(c()), Kind { name: "BGPPeer", wrap: Update::Peer, keep: whole }, t()));
    set.spawn(pump(
        Api::<BgpAdvertisement>::all(c()),
        Kind { name: "BGPAdvertisement", wrap: Update::BgpAdvertisement, keep: whole },
        t(),
    ));
    set.spawn(pump(
        Api::<L2Advertisement>::all(c()),
        Kind { name: "L2Advertisement", wrap: Update::L2Advertisement, keep: whole },
        t(),
    ));
    set.spawn(pump(
        Api::<BfdProfile>::all(c()),
        Kind { name: "BFDProfile", wrap: Update::BfdProfile, keep: whole },
        t(),
    ));
    Watchers { _set: set, scope, facts: facts_on }
}
