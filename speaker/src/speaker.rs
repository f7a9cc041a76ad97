//! The speaker's event loop (holo shape): one task owns the model, the plan and the
//! announcers; the model source (the static file's watcher, or the Kubernetes watchers
//! of [`crate::cluster`]), membership, the clock and signals feed it. Both sources feed
//! the same [`ClusterModel`] calls; everything after that is one code path.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_proto::membership::MembershipKey;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::announce::bgp::BgpAnnouncer;
use crate::announce::{Announced, AnnouncedFeed};
use crate::cluster::status::{self, Desired};
use crate::cluster::{self, Feed, Update};
use crate::metrics::{KindLabel, Metrics, OwnershipLabel, ProtocolLabel, ResultLabel};
use crate::model::ClusterModel;
use crate::model::static_file::{self, LoadError};
use crate::plan::{self, Announcements};
use crate::readiness::{self, GatedPod, Readiness, RemoteAnnounced, RemoteWatch};
use ferrolb_proto::bgp::socket::Password;
use ferrolb_proto::l2::{InterfaceChoice, L2Announcer, L2Config, L2Handle, Owned};
use ferrolb_proto::membership::claim_gate::{ClaimGate, Observation, Verdict};
use ferrolb_proto::membership::{self, Membership, MembershipConfig, MembershipHandle, Seed};

mod rotation;

/// On SIGTERM this node leaves membership first, then keeps answering ARP/NDP this
/// long, so the successors (which see the departure at once) announce the addresses
/// before this node stops answering: make before break.
pub const HANDOVER_GRACE: Duration = Duration::from_secs(1);

/// After the model synced, how long the readiness gate keeps pods True that it would
/// turn False, while this (re)started speaker's sessions come up and catch up with the
/// plan (the hold ends earlier once everything planned is really announced).
pub const GATE_STARTUP_HOLD: Duration = Duration::from_secs(30);

/// Errors that stop the speaker.
#[derive(Debug, thiserror::Error)]
pub enum SpeakerError {
    /// The static file is invalid at start (there is no last good content yet).
    #[error(transparent)]
    Config(#[from] LoadError),
    /// Watching the static file's directory or installing signal handlers failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// L2 announcements cannot start (membership key, addresses, sockets).
    #[error("{0}")]
    L2(String),
}

/// Options of both modes.
#[derive(Debug, Clone)]
pub struct Options {
    /// This node's name (`--node-name`).
    pub node_name: String,
    /// loadBalancerClass served besides "none".
    pub lb_class: String,
    /// Membership bind address (`--membership-bind`).
    pub membership_bind: Option<SocketAddr>,
    /// Membership key file (`--membership-key-file`); in Kubernetes mode the Secret
    /// `ferrolb-membership` is read instead when this is absent.
    pub membership_key_file: Option<PathBuf>,
    /// `--drain-max-delay`.
    pub drain_max_delay: Duration,
    /// `--drain-on-shutdown`.
    pub drain_on_shutdown: Duration,
}

impl From<&StaticOptions> for Options {
    fn from(o: &StaticOptions) -> Self {
        Options {
            node_name: o.node_name.clone(),
            lb_class: o.lb_class.clone(),
            membership_bind: o.membership_bind,
            membership_key_file: o.membership_key_file.clone(),
            drain_max_delay: o.drain_max_delay,
            drain_on_shutdown: o.drain_on_shutdown,
        }
    }
}

/// Options of Kubernetes mode.
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// What both modes share.
    pub options: Options,
    /// The speaker's namespace (`--namespace`): where Secret `ferrolb-membership` is.
    pub namespace: String,
    /// Every new plan is sent here (tests and embedding programs follow it).
    pub plans: Option<mpsc::UnboundedSender<Announcements>>,
}

/// Options of static mode.
#[derive(Debug, Clone)]
pub struct StaticOptions {
    /// This node's name (`--node-name`).
    pub node_name: String,
    /// The static file (`--static`).
    pub file: PathBuf,
    /// loadBalancerClass served besides "none".
    pub lb_class: String,
    /// Membership bind address (`--membership-bind`); default 0.0.0.0:7946 (or [::]:7946
    /// when this node has IPv6 InternalIPs only).
    pub membership_bind: Option<SocketAddr>,
    /// Membership key file (`--membership-key-file`); needed where L2Advertisements exist.
    pub membership_key_file: Option<PathBuf>,
    /// `--drain-max-delay`: the longest a prefix stays announced as draining
    /// (GRACEFUL_SHUTDOWN) before it is withdrawn even though its cause lingers.
    pub drain_max_delay: Duration,
    /// `--drain-on-shutdown`: on SIGTERM, how long every prefix stays announced as
    /// draining before the sessions close (at most `drain_max_delay`).
    pub drain_on_shutdown: Duration,
}

/// Default of `--drain-max-delay`.
pub const DEFAULT_DRAIN_MAX_DELAY: Duration = Duration::from_secs(30);
/// Default of `--drain-on-shutdown`.
pub const DEFAULT_DRAIN_ON_SHUTDOWN: Duration = Duration::from_secs(5);

/// Tracks when each address started draining; pure apart from the `now` passed in.
#[derive(Debug, Default)]
pub struct DrainTimers {
    started: BTreeMap<IpAddr, Instant>,
    /// L2 handovers (make before break): answered for [`HANDOVER_GRACE`] more.
    handovers: BTreeMap<IpAddr, Instant>,
}

impl DrainTimers {
    /// Starts timers for newly draining addresses, forgets those no longer draining,
    /// and withdraws from `plan` those draining for `max` or longer, and those handed
    /// over by L2 for [`HANDOVER_GRACE`] or longer.
    pub fn apply(&mut self, plan: &mut Announcements, now: Instant, max: Duration) {
        let expired = Self::track(&mut self.started, &plan.draining, now, max);
        plan.expire_drains(&expired, max);
        let expired = Self::track(&mut self.handovers, &plan.l2_draining, now, HANDOVER_GRACE);
        plan.expire_l2_handovers(&expired, HANDOVER_GRACE);
    }

    fn track(
        started: &mut BTreeMap<IpAddr, Instant>,
        now_draining: &BTreeMap<IpAddr, String>,
        now: Instant,
        max: Duration,
    ) -> BTreeSet<IpAddr> {
        started.retain(|ip, _| now_draining.contains_key(ip));
        for ip in now_draining.keys() {
            started.entry(*ip).or_insert(now);
        }
        started.iter().filter(|(_, t)| now.saturating_duration_since(**t) >= max).map(|(ip, _)| *ip).collect()
    }

    /// When the next drain or handover expires (None: nothing drains or everything expired).
    pub fn next_expiry(&self, plan: &Announcements, max: Duration) -> Option<Instant> {
        let bgp = self.started.iter().filter(|(ip, _)| plan.draining.contains_key(ip)).map(|(_, t)| *t + max);
        let l2 = self
            .handovers
            .iter()
            .filter(|(ip, _)| plan.l2_draining.contains_key(ip))
            .map(|(_, t)| *t + HANDOVER_GRACE);
        bgp.chain(l2).min()
    }
}

/// Why the L2 owned set changed (log text and metric label).
struct Cause {
    label: &'static str,
    text: String,
}

impl Cause {
    fn new(label: &'static str, text: impl Into<String>) -> Self {
        Cause { label, text: text.into() }
    }
}

/// Membership and the L2 announcer, running while L2Advertisements exist.
struct L2Part {
    announcer: L2Handle,
    membership: MembershipHandle,
    live: watch::Receiver<BTreeSet<String>>,
    settled: watch::Receiver<bool>,
    /// Whether the view may be elected from: settled, not alone for a moment only, and
    /// not blind (datagrams from peers this node cannot read, nobody live).
    guard: ClaimGate,
    /// The live set last used for planning (None: not claiming).
    used: Option<BTreeSet<String>>,
}

impl L2Part {
    /// The live set to elect from, or None while this node may not claim.
    fn usable_live(&mut self, metrics: &Metrics, now: Instant) -> Option<BTreeSet<String>> {
        let settled = *self.settled.borrow_and_update();
        let live = self.live.borrow_and_update().clone();
        let seen = Observation {
            settled,
            live_others: live.len().saturating_sub(1),
            unreadable: metrics.membership.unreadable(),
        };
        (self.guard.handle(now, seen) == Verdict::Claim).then_some(live)
    }
}

/// Logs, exports and (Kubernetes mode) records on this node's Node object that it became
/// blind (it cannot read its peers: it claims no L2 address) or no longer is.
fn report_blindness(l2: Option<&mut L2Part>, metrics: &Metrics, cluster: Option<&ClusterPart>, node: &str) {
    let Some(blind) = l2.and_then(|p| p.guard.poll_event()) else { return };
    let m = &metrics.membership;
    m.set_blind(blind);
    let (warning, reason, note) = if blind {
        let note = format!(
            "membership: datagrams from other nodes arrive but none can be read ({}) and no other node is live: \
             not answering ARP/NDP for any address. Either the membership key differs between nodes \
             (--membership-key-file, or Secret ferrolb-membership) or they run a ferrolb release with another \
             membership wire version; fix the key or finish the upgrade (ferrolb_membership_dropped_packets_total \
             counts them by reason)",
            m.unreadable_summary()
        );
        tracing::error!("{note}");
        (true, "MembershipBlind", note)
    } else {
        let note = "membership: no longer blind (a peer is heard, or the unreadable datagrams stopped); \
                    electing L2 owners from the membership view again"
            .to_string();
        tracing::info!("{note}");
        (false, "MembershipRecovered", note)
    };
    if let Some(c) = cluster {
        node_event(c.client.clone(), node, warning, reason, note);
    }
}

/// Publishes an Event about Node `node` (best effort, in the background: L2 never waits
/// for the apiserver).
fn node_event(client: kube::Client, node: &str, warning: bool, reason: &'static str, note: String) {
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let reporter = Reporter { controller: cluster::status::MANAGER.into(), instance: Some(node.to_owned()) };
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.to_owned()),
        ..ObjectReference::default()
    };
    let ev = Event {
        type_: if warning { EventType::Warning } else { EventType::Normal },
        reason: reason.into(),
        note: Some(ferrolb_api::event_note(note)),
        action: "ElectL2Owners".into(),
        secondary: None,
    };
    tokio::spawn(async move {
        let recorder = Recorder::new(client, reporter);
        if let Err(e) = cluster::within(recorder.publish(&ev, &regarding)).await {
            tracing::debug!(error = %e, reason, "cannot publish the Node Event (best effort)");
        }
    });
}

/// Kubernetes mode: the watchers' feed, the status writer and the Secret reader.
struct ClusterPart {
    client: kube::Client,
    namespace: String,
    feed: Feed,
    /// The desired ServiceAnnouncements; the writer task converges the API to them.
    status: watch::Sender<Option<Desired>>,
    /// Kinds whose watch is failing (logged once when it starts and when it recovers).
    failing: BTreeSet<&'static str>,
    /// The last configuration rejection logged, so it is logged once.
    rejected: Option<String>,
    /// The BGP password Secrets last read completely (re-read when they change).
    password_refs: BTreeMap<String, ferrolb_api::SecretKeyRef>,
    /// Watches the Secrets in use, so rotated keys and passwords apply ([`rotation`]).
    secrets: cluster::secrets::SecretWatch,
    /// What of them was applied last.
    secrets_seen: watch::Receiver<cluster::secrets::Watched>,
    /// Pod readiness gates of this node's pods.
    gate: GatePart,
    /// Aborts the watchers when the speaker stops.
    _watchers: JoinSet<()>,
}

/// Kubernetes mode: the readiness gate `ferrolb.io/load-balancer-ready` of this node's
/// pods (see [`crate::readiness`] and README-readiness.md).
struct GatePart {
    /// Watches this node's pods and writes their conditions.
    readiness: Readiness,
    /// What the BGP and L2 announcers really announce.
    feed: AnnouncedFeed,
    announced: watch::Receiver<Announced>,
    /// Other nodes' ServiceAnnouncements, watched once this node has gated pods.
    remote: Option<RemoteWatch>,
    /// What they announce, recomputed when they change (None: not listed yet).
    remote_view: Option<RemoteAnnounced>,
    /// This node's pods with the gate, as last read.
    pods: Vec<GatedPod>,
    /// The startup hold ([`GATE_STARTUP_HOLD`]): None before the first evaluation.
    hold: Option<Hold>,
}

/// The readiness gate's startup hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    /// True conditions stay True until then (or until the plan is really announced).
    Until(Instant),
    /// Over.
    Done,
}

/// Whether everything `plan` announces is really announced.
fn caught_up(plan: &Announcements, announced: &Announced) -> bool {
    plan.bgp_addresses().iter().all(|p| announced.bgp.contains_key(p))
        && plan.l2.keys().all(|ip| announced.l2.contains(ip))
}

/// Which gate input changed.
enum GateSignal {
    Pods,
    Announced,
    Remote,
}

/// Clones of the gate's change receivers, so the event loop can wait on them without
/// borrowing the state (the handler marks the originals seen).
type GateWatch = (watch::Receiver<u64>, watch::Receiver<Announced>, Option<watch::Receiver<u64>>);

/// Resolves when one of the gate's inputs changed (never in static mode).
async fn gate_changed(w: Option<GateWatch>) -> GateSignal {
    let Some((mut pods, mut announced, remote)) = w else {
        return std::future::pending().await;
    };
    let remote_changed = async {
        match remote {
            Some(mut r) => r.changed().await.is_ok(),
            None => std::future::pending().await,
        }
    };
    let signal = tokio::select! {
        r = pods.changed() => r.is_ok().then_some(GateSignal::Pods),
        r = announced.changed() => r.is_ok().then_some(GateSignal::Announced),
        ok = remote_changed => ok.then_some(GateSignal::Remote),
    };
    match signal {
        Some(s) => s,
        // A closed channel never fires again: do not spin on it.
        None => std::future::pending().await,
    }
}

struct State {
    opts: Options,
    /// Static mode: the file.
    file: Option<PathBuf>,
    /// Kubernetes mode.
    cluster: Option<ClusterPart>,
    /// Where each new plan is sent, if anywhere.
    plans: Option<mpsc::UnboundedSender<Announcements>>,
    model: ClusterModel,
    passwords: BTreeMap<String, Password>,
    fingerprint: Vec<u8>,
    bgp: BgpAnnouncer,
    /// Recomputes only the Services the model marks changed.
    planner: plan::Planner,
    plan: Announcements,
    metrics: Arc<Metrics>,
    peer_errors: Vec<String>,
    l2: Option<L2Part>,
    /// The last L2 start error, logged once.
    l2_error: Option<String>,
    /// When each draining address started draining.
    drains: DrainTimers,
    /// Key and password rotation ([`rotation`]).
    rotation: rotation::Rotation,
}

impl State {
    /// The members L2 owners are elected from: membership's live set once settled
    /// (nobody before: a starting node would otherwise claim everything). Without
    /// L2Advertisements the set is unused; every Ready node of the file then counts.
    fn live_members(&mut self) -> BTreeSet<String> {
        let now = Instant::now();
        match self.l2.as_mut() {
            Some(p) => {
                let live = p.usable_live(&self.metrics, now);
                p.used.clone_from(&live);
                report_blindness(
                    self.l2.as_mut(),
                    &self.metrics,
                    self.cluster.as_ref(),
                    &self.opts.node_name,
                );
                live.unwrap_or_default()
            }
            // L2Advertisements but no membership (it could not start): own nothing.
            None if !self.model.l2_advertisements.is_empty() => BTreeSet::new(),
            None => self.model.nodes.iter().filter(|(_, n)| n.ready).map(|(name, _)| name.clone()).collect(),
        }
    }

    /// Starts or stops membership and the L2 announcer as L2Advertisements appear or go.
    async fn ensure_l2(&mut self) -> Result<(), String> {
        let wanted = !self.model.l2_advertisements.is_empty();
        match (wanted, self.l2.is_some()) {
            (true, false) => {
                let key = self.membership_key().await?;
                let part = start_l2(&self.opts, &self.model, &self.metrics, key)?;
                if let Some(c) = &self.cluster {
                    c.gate.feed.set_l2(Some(part.announcer.status()));
                }
                self.l2 = Some(part);
            }
            (false, true) => {
                if let Some(p) = self.l2.take() {
                    if let Some(c) = &self.cluster {
                        c.gate.feed.set_l2(None);
                    }
                    tracing::info!("no L2Advertisement left: leaving membership, stopping ARP/NDP answers");
                    p.membership.leave().await;
                    p.announcer.shutdown().await;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The membership key: `--membership-key-file`, else (Kubernetes mode) the Secret.
    async fn membership_key(&self) -> Result<MembershipKey, String> {
        if let Some(f) = &self.opts.membership_key_file {
            return membership::read_key_file(f);
        }
        if let Some(c) = &self.cluster {
            return cluster::secrets::membership_key(&c.client, &c.namespace).await;
        }
        let ads: Vec<&str> = self.model.l2_advertisements.keys().map(String::as_str).collect();
        Err(format!(
            "L2Advertisement {} is configured but no --membership-key-file was given: L2 announcements need \
             membership; pass --membership-key-file FILE holding the cluster's key (at least 32 characters, the \
             same on every node)",
            ads.join(", ")
        ))
    }

    /// Starts or stops L2 as configured; a failure is logged once (per distinct error)
    /// and BGP goes on.
    async fn ensure_l2_logged(&mut self) {
        match self.ensure_l2().await {
            Ok(()) => self.l2_error = None,
            Err(e) => {
                if self.l2_error.as_ref() != Some(&e) {
                    tracing::error!("{e}");
                }
                self.l2_error = Some(e);
            }
        }
        self.watch_secrets();
    }

    /// Kubernetes mode: applies one watcher update (and what else is queued) to the model.
    async fn on_updates(&mut self, first: Update, more: &mut mpsc::Receiver<Update>) {
        let Some(c) = self.cluster.as_mut() else { return };
        let was_synced = c.feed.synced();
        let mut changed = false;
        let mut config_applied = false;
        let mut next = Some(first);
        // A relist or a burst arrives as many updates: apply them all, plan once.
        while let Some(u) = next.take() {
            let kind = u.kind();
            if let Update::WatchFailed { error, .. } = &u {
                self.metrics.watch_errors.get_or_create(&KindLabel { kind: kind.into() }).inc();
                if c.failing.insert(kind) {
                    tracing::warn!(
                        kind,
                        error = %error,
                        "watch failed; keeping the model and every announcement as they are, retrying with back-off"
                    );
                }
            } else if c.failing.remove(kind) {
                tracing::info!(kind, "watch recovered");
            }
            let applied = c.feed.apply(&mut self.model, u);
            changed |= applied.changed;
            config_applied |= applied.config_applied;
            if applied.config_applied {
                c.rejected = None;
            }
            if let Some(errors) = applied.config_rejected {
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                let text = text.join("; ");
                if c.rejected.as_ref() != Some(&text) {
                    self.metrics.config_loads.get_or_create(&ResultLabel { result: "rejected".into() }).inc();
                    for e in &errors {
                        tracing::error!("invalid configuration, the last good one stays in force: {e}");
                    }
                    c.rejected = Some(text);
                }
            }
            next = more.try_recv().ok();
        }
        let synced = c.feed.synced();
        if !synced {
            tracing::debug!(waiting_for = ?c.feed.unsynced(), "waiting for the first complete lists");
            return;
        }
        // Configuration applied while other kinds were still listing was not acted on
        // then (above): the first complete model counts as a configuration load. Without
        // this, a BGPPeer listed before the last EndpointSlice never had its password read.
        let config_applied = config_applied || !was_synced;
        if config_applied {
            self.metrics.config_loads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
            // Only when the Secrets referenced change: the loop waits (at most 3 s) for them.
            let refs = cluster::secrets::password_refs(&self.model);
            if refs != c.password_refs {
                let (passwords, errors) =
                    cluster::secrets::bgp_passwords(&c.client, &refs, &self.passwords).await;
                for e in &errors {
                    tracing::error!("{e}");
                }
                self.passwords = passwords;
                c.password_refs = if errors.is_empty() { refs } else { BTreeMap::new() };
            }
            self.watch_secrets();
        }
        if !was_synced {
            self.metrics.model_synced.set(1);
            tracing::info!(
                nodes = self.model.nodes.len(),
                services = self.model.services.len(),
                "every watch listed: model synced"
            );
            if !self.model.nodes.contains_key(&self.opts.node_name) {
                tracing::warn!(node = %self.opts.node_name, "no Node of this name: nothing will be announced until it exists");
            }
        }
        if config_applied || !was_synced {
            self.ensure_l2_logged().await;
        }
        if changed || !was_synced {
            let cause = if was_synced { "API change" } else { "model synced" };
            self.replan(&Cause::new("config", cause)).await;
        }
        if !was_synced {
            self.metrics.set_ready();
        }
    }

    /// Re-elects when the live set, settledness or key-mismatch state changed.
    async fn on_l2_change(&mut self) {
        let now = Instant::now();
        let Some(p) = self.l2.as_mut() else { return };
        let before = p.used.clone();
        let after = p.usable_live(&self.metrics, now);
        report_blindness(self.l2.as_mut(), &self.metrics, self.cluster.as_ref(), &self.opts.node_name);
        if before == after {
            return;
        }
        let cause = match (&before, &after) {
            (Some(b), Some(a)) => {
                let mut parts: Vec<String> = Vec::new();
                parts.extend(a.difference(b).map(|n| format!("{n} joined membership")));
                parts.extend(b.difference(a).map(|n| format!("{n} left membership")));
                let label = if b.difference(a).next().is_some() { "member_left" } else { "member_joined" };
                Cause::new(label, parts.join(", "))
            }
            (None, Some(a)) => Cause::new(
                "membership_settled",
                format!("membership settled with {}", a.iter().cloned().collect::<Vec<_>>().join(", ")),
            ),
            (_, None) => Cause::new(
                "membership_unsettled",
                "membership view not usable (not settled, settled alone a moment ago, or blind: see the membership log)",
            ),
        };
        let joined = matches!((&before, &after), (Some(b), Some(a)) if a.difference(b).next().is_some());
        self.replan(&cause).await;
        // A member that joins may have been thought dead by itself or others for a
        // moment (a false suspicion on a starved node) and claimed our addresses;
        // clients may have followed its gratuitous ARP. Move them back.
        if joined && let Some(p) = &self.l2 {
            if !self.plan.l2.is_empty() {
                tracing::info!(reason = %cause.text, "L2: re-announcing the addresses this node still owns");
            }
            p.announcer.reannounce();
        }
    }

    async fn replan(&mut self, cause: &Cause) {
        // The Local chicken-and-egg: this node's pods waiting only for the gate count as
        // serving (slices and Services change too, so recount on every plan).
        if let Some(c) = &self.cluster {
            readiness::apply_gate_pending(&mut self.model, &c.gate.pods, &self.opts.node_name);
        }
        let live = self.live_members();
        let mut new = self.planner.plan(&mut self.model, &self.opts.node_name, &live).clone();
        self.drains.apply(&mut new, Instant::now(), self.opts.drain_max_delay);
        log_changes(&self.plan, &new);
        if let Some(p) = &self.l2 {
            for ip in new.l2.keys().filter(|ip| !self.plan.l2.contains_key(ip)) {
                tracing::info!(address = %ip, reason = %cause.text, "L2: this node now owns the address");
                self.metrics
                    .l2_ownership_changes
                    .get_or_create(&OwnershipLabel { change: "acquired".into(), reason: cause.label.into() })
                    .inc();
            }
            for ip in self.plan.l2.keys().filter(|ip| !new.l2.contains_key(ip)) {
                let owner = new.withdrawn.get(ip).cloned().unwrap_or_default();
                tracing::info!(address = %ip, reason = %cause.text, why = %owner, "L2: this node no longer owns the address");
                self.metrics
                    .l2_ownership_changes
                    .get_or_create(&OwnershipLabel { change: "released".into(), reason: cause.label.into() })
                    .inc();
            }
            p.announcer.set_owned(owned_set(&new.l2));
        }
        let errors = self.bgp.apply(&self.model, &self.passwords, &new).await;
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        if errors != self.peer_errors {
            for e in &errors {
                tracing::error!("{e}");
            }
            self.peer_errors = errors;
        }
        let bgp_addrs: BTreeSet<IpAddr> = new.bgp_addresses().iter().map(|n| n.addr()).collect();
        self.metrics
            .announced
            .get_or_create(&ProtocolLabel { protocol: "bgp".into() })
            .set(len_i64(&bgp_addrs));
        self.metrics.announced.get_or_create(&ProtocolLabel { protocol: "l2".into() }).set(len_i64(&new.l2));
        if let Some(c) = &self.cluster {
            let want = status::desired(&self.model, &new, &self.opts.node_name, &c.feed.uids);
            c.status.send_if_modified(|d| {
                let differs = d.as_ref() != Some(&want);
                if differs {
                    *d = Some(want);
                }
                differs
            });
        }
        if let Some(p) = &self.plans {
            let _ = p.send(new.clone());
        }
        self.plan = new;
        self.update_gates();
    }

    /// The clones [`gate_changed`] waits on (None in static mode).
    fn gate_watch(&self) -> Option<GateWatch> {
        let g = &self.cluster.as_ref()?.gate;
        Some((g.readiness.pod_changes(), g.announced.clone(), g.remote.as_ref().map(RemoteWatch::changes)))
    }

    /// Kubernetes mode: one of the gate's inputs changed.
    async fn on_gate_signal(&mut self, signal: GateSignal) {
        let Some(c) = self.cluster.as_mut() else { return };
        match signal {
            GateSignal::Pods => {
                c.gate.readiness.mark_pods_seen();
                let pods = c.gate.readiness.gated_pods();
                self.metrics.readiness.pods_gated.set(len_i64(&pods));
                if !pods.is_empty() && c.gate.remote.is_none() {
                    tracing::info!(
                        pods = pods.len(),
                        "pods with the readiness gate on this node: watching ServiceAnnouncements"
                    );
                    c.gate.remote = Some(RemoteWatch::start(c.client.clone()));
                }
                if pods == c.gate.pods {
                    // An evaluation skipped while this change was unseen happens now.
                    self.update_gates();
                    return;
                }
                c.gate.pods = pods;
                if !c.feed.synced() {
                    // The first plan (at sync) counts them.
                    return;
                }
                let changed =
                    readiness::apply_gate_pending(&mut self.model, &c.gate.pods, &self.opts.node_name);
                if changed.is_empty() {
                    self.update_gates();
                } else {
                    let names: Vec<String> = changed.iter().map(ToString::to_string).collect();
                    let text = format!("pods waiting for the readiness gate changed ({})", names.join(", "));
                    self.replan(&Cause::new("config", text)).await;
                }
            }
            GateSignal::Announced => {
                // Seen now, even if this evaluation is skipped: the loop must not spin on it.
                c.gate.announced.borrow_and_update();
                self.update_gates();
            }
            GateSignal::Remote => {
                if let Some(r) = c.gate.remote.as_mut() {
                    r.mark_seen();
                    // Once per change, not per evaluation: there may be many of them.
                    c.gate.remote_view = r.listed().then(|| r.remote(&self.opts.node_name));
                }
                self.update_gates();
            }
        }
    }

    /// Hands the readiness gate writer the conditions this node's gated pods should have
    /// now; not before the model is synced, this node's pods are listed and counted, and
    /// the other nodes' ServiceAnnouncements are listed. While the startup hold lasts,
    /// True conditions are not turned False.
    fn update_gates(&mut self) {
        let Some(c) = self.cluster.as_mut() else { return };
        // Not from a partial model, nor from pods not listed yet or changed but not yet
        // counted (the pod handler evaluates again).
        if !c.feed.synced() || !c.gate.readiness.pods_current() {
            return;
        }
        let announced = c.gate.announced.borrow_and_update().clone();
        let no_remote = RemoteAnnounced::default();
        let remote = match (&c.gate.remote, &c.gate.remote_view) {
            (Some(_), Some(view)) => view,
            (Some(_), None) => return,
            // No gated pod here: nothing to write.
            (None, _) => &no_remote,
        };
        let inputs = readiness::Inputs {
            model: &self.model,
            me: &self.opts.node_name,
            plan: &self.plan,
            announced: &announced,
            remote,
        };
        let mut desired = readiness::desired_all(&c.gate.pods, &inputs);
        let now = Instant::now();
        let hold = *c.gate.hold.get_or_insert(Hold::Until(now + GATE_STARTUP_HOLD));
        if let Hold::Until(t) = hold {
            if now >= t || caught_up(&self.plan, &announced) {
                c.gate.hold = Some(Hold::Done);
            } else {
                readiness::keep_true(&mut desired, &c.gate.pods);
            }
        }
        c.gate.readiness.publish(desired);
    }

    /// The startup hold ran out: evaluate without it.
    fn end_gate_hold(&mut self) {
        if let Some(c) = self.cluster.as_mut() {
            c.gate.hold = Some(Hold::Done);
        }
        self.update_gates();
    }

    /// When the readiness gate's startup hold ends (None: not running).
    fn gate_hold_until(&self) -> Option<Instant> {
        match self.cluster.as_ref()?.gate.hold? {
            Hold::Until(t) => Some(t),
            Hold::Done => None,
        }
    }

    async fn reload(&mut self) {
        let Some(file) = self.file.clone() else { return };
        match static_file::load(&file, &self.opts.lb_class) {
            Ok(l) if l.fingerprint == self.fingerprint => {}
            Ok(l) => {
                for w in &l.warnings {
                    tracing::warn!("{w}");
                }
                tracing::info!(file = %file.display(), "static file changed: applying");
                self.metrics.config_loads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
                // Only what differs is marked changed: the planner recomputes just that.
                self.model.replace_with(l.model);
                self.passwords = l.passwords;
                self.fingerprint = l.fingerprint;
                self.ensure_l2_logged().await;
                self.replan(&Cause::new("config", "static file changed")).await;
            }
            Err(e) => {
                self.metrics.config_loads.get_or_create(&ResultLabel { result: "rejected".into() }).inc();
                tracing::error!(
                    "static file rejected, the last good content stays in force: {}",
                    one_line(&e.to_string())
                );
            }
        }
    }
}

/// The announcer's desired set from the plan (no interface listed: automatic choice).
fn owned_set(l2: &BTreeMap<IpAddr, Vec<String>>) -> Owned {
    l2.iter()
        .map(|(ip, ifs)| {
            let choice = if ifs.is_empty() {
                InterfaceChoice::Auto
            } else {
                InterfaceChoice::Named(ifs.iter().cloned().collect())
            };
            (*ip, choice)
        })
        .collect()
}

/// The address membership uses for a node: its first IPv4 InternalIP, else its first.
fn membership_ip(model: &ClusterModel, node: &str) -> Option<IpAddr> {
    let addrs = &model.nodes.get(node)?.addresses;
    addrs.iter().find(|a| a.is_ipv4()).or_else(|| addrs.first()).copied()
}

/// Reads the key and starts membership (seeded with the Nodes' InternalIPs) and the
/// L2 announcer.
fn start_l2(
    opts: &Options,
    model: &ClusterModel,
    metrics: &Metrics,
    key: MembershipKey,
) -> Result<L2Part, String> {
    let port = opts.membership_bind.map_or(membership::DEFAULT_PORT, |b| b.port());
    let me = &opts.node_name;
    let advertise_ip = match opts.membership_bind.map(|b| b.ip()).filter(|ip| !ip.is_unspecified()) {
        Some(ip) => ip,
        None => membership_ip(model, me).ok_or_else(|| {
            format!(
                "node {me}: no InternalIP in status.addresses of its Node; membership needs it \
                 (or give --membership-bind ADDR:PORT)"
            )
        })?,
    };
    let bind = opts.membership_bind.unwrap_or_else(|| {
        let any: IpAddr =
            if advertise_ip.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
        SocketAddr::new(any, port)
    });
    let seeds: Vec<Seed> = model
        .nodes
        .keys()
        .filter(|n| *n != me)
        .filter_map(|n| {
            membership_ip(model, n).map(|ip| Seed { name: n.clone(), addr: SocketAddr::new(ip, port) })
        })
        .collect();
    let others = seeds.len();
    let mut cfg = MembershipConfig::new(me, SocketAddr::new(advertise_ip, port), seeds, key);
    cfg.bind = bind;
    cfg.rotation_window = membership::rotation_window();
    let announcer = L2Announcer::spawn(L2Config::default(), metrics.l2.clone()).map_err(|e| e.to_string())?;
    let membership = Membership::spawn(cfg, metrics.membership.clone()).map_err(|e| e.to_string())?;
    tracing::info!(bind = %bind, advertise = %SocketAddr::new(advertise_ip, port), seeds = others, "membership started for L2 announcements");
    Ok(L2Part {
        live: membership.live(),
        settled: membership.settled(),
        announcer,
        membership,
        guard: ClaimGate::new(others),
        used: None,
    })
}

/// Resolves when membership's live set or settledness changes (never without L2).
/// Sleeps until `t`, or forever without one.
async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

async fn l2_changed(part: Option<(watch::Receiver<BTreeSet<String>>, watch::Receiver<bool>)>) {
    let Some((mut live, mut settled)) = part else {
        return std::future::pending().await;
    };
    let ok = tokio::select! {
        r = live.changed() => r.is_ok(),
        r = settled.changed() => r.is_ok(),
    };
    if !ok {
        std::future::pending::<()>().await;
    }
}

fn len_i64<T>(c: impl IntoIterator<Item = T>) -> i64 {
    i64::try_from(c.into_iter().count()).unwrap_or(i64::MAX)
}

/// Joins a multi-line error into one line, so every error is one log line.
pub fn one_line(s: &str) -> String {
    let mut out = String::new();
    for l in s.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !out.is_empty() {
            out.push_str(if out.ends_with(':') { " " } else { "; " });
        }
        out.push_str(l);
    }
    out
}

/// One line per address whose announcement or withdrawal reason changed.
fn log_changes(old: &Announcements, new: &Announcements) {
    let (o, n) = (old.bgp_addresses(), new.bgp_addresses());
    for p in n.difference(&o) {
        let peers: Vec<&str> =
            new.bgp.iter().filter(|(_, r)| r.contains_key(p)).map(|(n, _)| n.as_str()).collect();
        tracing::info!(prefix = %p, peers = ?peers, "announcing by BGP");
    }
    for p in o.difference(&n) {
        tracing::info!(prefix = %p, "no longer announcing by BGP");
    }
    for (ip, ifs) in &new.l2 {
        if !old.l2.contains_key(ip) {
            tracing::info!(address = %ip, interfaces = ?ifs, "this node owns the address for ARP/NDP");
        }
    }
    for (ip, why) in &new.draining {
        if old.draining.get(ip) != Some(why) {
            tracing::info!(address = %ip, reason = %why, "draining: announced with GRACEFUL_SHUTDOWN (65535:0) until withdrawn");
        }
    }
    for (ip, why) in &new.l2_draining {
        if old.l2_draining.get(ip) != Some(why) {
            tracing::info!(address = %ip, reason = %why, grace = ?HANDOVER_GRACE, "L2 handover: still answering ARP/NDP while the successor announces");
        }
    }
    for (ip, why) in &new.withdrawn {
        if old.withdrawn.get(ip) != Some(why) {
            tracing::info!(address = %ip, reason = %why, "not announced");
        }
    }
}

type Signals = (tokio::signal::unix::Signal, tokio::signal::unix::Signal);

fn signals() -> Result<Signals, SpeakerError> {
    let io = |what: &str| {
        let what = what.to_owned();
        move |source| SpeakerError::Io { what, source }
    };
    let sigterm = signal(SignalKind::terminate()).map_err(io("installing the SIGTERM handler"))?;
    let sigint = signal(SignalKind::interrupt()).map_err(io("installing the SIGINT handler"))?;
    Ok((sigterm, sigint))
}

impl State {
    fn new(opts: Options, metrics: Arc<Metrics>) -> Self {
        State {
            bgp: BgpAnnouncer::new(&opts.node_name, metrics.clone()),
            model: ClusterModel::new(&opts.lb_class),
            passwords: BTreeMap::new(),
            fingerprint: Vec::new(),
            plan: Announcements::default(),
            metrics,
            peer_errors: Vec::new(),
            l2: None,
            l2_error: None,
            drains: DrainTimers::default(),
            rotation: rotation::Rotation::default(),
            planner: plan::Planner::new(),
            file: None,
            cluster: None,
            plans: None,
            opts,
        }
    }
}

/// Runs static mode until SIGTERM or SIGINT; sessions end with Cease.
pub async fn run_static(opts: StaticOptions, metrics: Arc<Metrics>) -> Result<(), SpeakerError> {
    let signals = signals()?;
    let loaded = static_file::load(&opts.file, &opts.lb_class)?;
    for w in &loaded.warnings {
        tracing::warn!("{w}");
    }
    let changes = static_file::watch(&opts.file).map_err(|source| SpeakerError::Io {
        what: format!("watching the directory of {}", opts.file.display()),
        source,
    })?;
    metrics.config_loads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
    let mut state = State::new(Options::from(&opts), metrics.clone());
    state.model = loaded.model;
    state.passwords = loaded.passwords;
    state.fingerprint = loaded.fingerprint;
    state.file = Some(opts.file.clone());
    tracing::info!(node = %state.opts.node_name, file = %opts.file.display(), "speaker started in static mode");
    if !state.model.nodes.contains_key(&state.opts.node_name) {
        tracing::warn!(
            node = %state.opts.node_name,
            "the static file has no Node of this name: nothing will be announced until it does"
        );
    }
    state.ensure_l2().await.map_err(SpeakerError::L2)?;
    state.replan(&Cause::new("config", "speaker started")).await;
    metrics.set_ready();
    serve(state, Some(changes), None, signals).await
}

/// Runs Kubernetes mode until SIGTERM or SIGINT: the model comes from watchers over the
/// API; nothing is announced (and no ServiceAnnouncement touched) before every watched
/// kind has been listed once; an unreachable apiserver changes no announcement.
pub async fn run_kube(
    opts: KubeOptions,
    client: kube::Client,
    metrics: Arc<Metrics>,
) -> Result<(), SpeakerError> {
    let signals = signals()?;
    let (tx, updates) = cluster::channel();
    let watchers = cluster::spawn_watchers(&client, &tx);
    drop(tx);
    let status = status::spawn(client.clone(), &opts.options.node_name, metrics.clone());
    let mut state = State::new(opts.options, metrics.clone());
    state.plans = opts.plans;
    tracing::info!(node = %state.opts.node_name, namespace = %opts.namespace, "speaker started in Kubernetes mode; listing");
    let feed = AnnouncedFeed::spawn(state.bgp.announced());
    let gate = GatePart {
        readiness: Readiness::start_with_metrics(
            client.clone(),
            &state.opts.node_name,
            metrics.readiness.clone(),
        ),
        announced: feed.subscribe(),
        feed,
        remote: None,
        remote_view: None,
        pods: Vec::new(),
        hold: None,
    };
    let secrets = cluster::secrets::SecretWatch::new(client.clone());
    state.cluster = Some(ClusterPart {
        gate,
        client,
        namespace: opts.namespace,
        feed: Feed::default(),
        status,
        failing: BTreeSet::new(),
        rejected: None,
        password_refs: BTreeMap::new(),
        secrets_seen: secrets.subscribe(),
        secrets,
        _watchers: watchers,
    });
    serve(state, None, Some(updates), signals).await
}

/// Receives from an optional channel (pending forever without one or once it closed).
async fn recv_opt<T>(rx: &mut Option<mpsc::Receiver<T>>) -> T {
    match rx.as_mut() {
        Some(r) => match r.recv().await {
            Some(v) => v,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

/// Receives from an optional channel: None once it closed, pending forever without one.
async fn recv_or_closed<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx.as_mut() {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// The event loop of both modes, then the shutdown sequence.
async fn serve(
    mut state: State,
    mut changes: Option<mpsc::Receiver<()>>,
    mut updates: Option<mpsc::Receiver<Update>>,
    (mut sigterm, mut sigint): Signals,
) -> Result<(), SpeakerError> {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut l2_tick = tokio::time::interval(Duration::from_millis(200));
    // Kubernetes mode: L2 that could not start (the Secret not there yet) is retried.
    let mut l2_retry = tokio::time::interval(Duration::from_secs(10));
    let mut file_poll = tokio::time::interval(rotation::FILE_POLL);
    loop {
        state.metrics.beat();
        let watched = state.l2.as_ref().map(|p| (p.live.clone(), p.settled.clone()));
        let next_drain = state.drains.next_expiry(&state.plan, state.opts.drain_max_delay);
        let retry_l2 = state.cluster.is_some() && state.l2_error.is_some();
        let gate = state.gate_watch();
        let gate_hold = state.gate_hold_until();
        let secrets = state.secrets_watch();
        let poll_files = state.polls_files();
        tokio::select! {
            () = rotation::secrets_changed(secrets) => state.on_secrets().await,
            _ = file_poll.tick(), if poll_files => state.poll_files().await,
            () = sleep_until_opt(gate_hold) => state.end_gate_hold(),
            signal = gate_changed(gate) => state.on_gate_signal(signal).await,
            () = sleep_until_opt(next_drain) => {
                state.replan(&Cause::new("drain", "--drain-max-delay or the L2 handover grace passed")).await;
            }
            () = l2_changed(watched) => state.on_l2_change().await,
            _ = l2_tick.tick(), if state.l2.is_some() => state.on_l2_change().await,
            // The watcher reads a complete file at once and debounces the rest.
            () = recv_opt(&mut changes) => state.reload().await,
            u = recv_or_closed(&mut updates) => match u {
                Some(u) => {
                    if let Some(rx) = updates.as_mut() {
                        state.on_updates(u, rx).await;
                    }
                }
                None => {
                    tracing::error!("every API watcher stopped; keeping the announcements until SIGTERM");
                    updates = None;
                }
            },
            _ = l2_retry.tick(), if retry_l2 => {
                state.ensure_l2_logged().await;
                if state.l2.is_some() {
                    state.replan(&Cause::new("config", "L2 started")).await;
                }
            }
            _ = tick.tick() => state.bgp.tick(),
            _ = sigterm.recv() => {
                tracing::info!("SIGTERM: closing sessions");
                break;
            }
            _ = sigint.recv() => {
                tracing::info!("SIGINT: closing sessions");
                break;
            }
        }
    }
    // Make before break, BGP: every prefix is re-announced with GRACEFUL_SHUTDOWN (and
    // LOCAL_PREF 0 on iBGP) so routers move traffic to other nodes; the L2 handover runs
    // during that window; the sessions close once it has passed.
    let drain_until = Instant::now() + state.opts.drain_on_shutdown.min(state.opts.drain_max_delay);
    let mut drained = state.plan.clone();
    drained.drain_all("speaker shutting down (SIGTERM)");
    if !drained.bgp_addresses().is_empty() {
        tracing::info!(
            delay = ?state.opts.drain_on_shutdown.min(state.opts.drain_max_delay),
            "draining: re-announcing every prefix with GRACEFUL_SHUTDOWN (65535:0) before closing sessions"
        );
        let _ = state.bgp.apply(&state.model, &state.passwords, &drained).await;
    }
    if let Some(p) = state.l2.take() {
        // Make before break: peers drop this node at once and their takeover
        // announcements go out while this node still answers.
        p.membership.leave().await;
        tracing::info!(grace = ?HANDOVER_GRACE, "left membership; still answering ARP/NDP during the handover grace");
        tokio::time::sleep(HANDOVER_GRACE).await;
        p.announcer.shutdown().await;
        tracing::info!("L2 announcer stopped");
    }
    if !drained.bgp_addresses().is_empty() {
        tokio::time::sleep_until(drain_until).await;
    }
    state.bgp.shutdown().await;
    tracing::info!("speaker stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const L2_FILE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: node1}\nstatus:\n  conditions: [{type: Ready, status: \"True\"}]\n  addresses: [{type: InternalIP, address: 192.0.2.11}]\n---\napiVersion: ferrolb.io/v1alpha1\nkind: IPAddressPool\nmetadata: {name: lan}\nspec: {addresses: [192.0.2.200-192.0.2.250]}\n---\napiVersion: ferrolb.io/v1alpha1\nkind: L2Advertisement\nmetadata: {name: lan-l2}\nspec: {ipAddressPools: [lan]}\n";

    fn opts(dir: &std::path::Path, key: Option<PathBuf>) -> StaticOptions {
        let file = dir.join("static.yaml");
        std::fs::write(&file, L2_FILE).unwrap();
        StaticOptions {
            node_name: "node1".into(),
            file,
            lb_class: crate::model::DEFAULT_LB_CLASS.into(),
            membership_bind: None,
            membership_key_file: key,
            drain_max_delay: DEFAULT_DRAIN_MAX_DELAY,
            drain_on_shutdown: DEFAULT_DRAIN_ON_SHUTDOWN,
        }
    }

    #[tokio::test]
    async fn l2_advertisements_without_a_key_file_stop_the_speaker_with_one_clear_line() {
        let dir = tempfile::tempdir().unwrap();
        let e = run_static(opts(dir.path(), None), Arc::new(Metrics::new())).await.unwrap_err().to_string();
        assert!(e.contains("L2Advertisement lan-l2") && e.contains("--membership-key-file"), "{e}");
        assert_eq!(one_line(&e), e);
    }

    #[tokio::test]
    async fn a_short_key_is_rejected_naming_the_file_and_never_showing_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "short-secret\n").unwrap();
        let e = run_static(opts(dir.path(), Some(key.clone())), Arc::new(Metrics::new()))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&key.display().to_string()) && e.contains("32"), "{e}");
        assert!(!e.contains("short-secret"), "{e}");
    }

    #[test]
    fn plan_interfaces_become_the_announcer_choice() {
        let a: IpAddr = "192.0.2.200".parse().unwrap();
        let b: IpAddr = "2001:db8::200".parse().unwrap();
        let l2 = BTreeMap::from([(a, vec![]), (b, vec!["eth1".to_string()])]);
        let owned = owned_set(&l2);
        assert_eq!(owned[&a], InterfaceChoice::Auto);
        assert_eq!(owned[&b], InterfaceChoice::Named(BTreeSet::from(["eth1".to_string()])));
    }

    #[test]
    fn a_drain_is_withdrawn_once_it_outlives_the_max_delay() {
        let ip: IpAddr = "203.0.113.20".parse().unwrap();
        let prefix: ipnet::IpNet = "203.0.113.20/32".parse().unwrap();
        let draining = || {
            let mut a = Announcements::default();
            let attrs = plan::RouteAttrs { draining: true, ..Default::default() };
            a.bgp.insert("r".into(), BTreeMap::from([(prefix, attrs)]));
            a.draining.insert(ip, "terminating".into());
            a
        };
        let max = Duration::from_secs(30);
        let t0 = Instant::now();
        let mut timers = DrainTimers::default();
        let mut p = draining();
        timers.apply(&mut p, t0, max);
        assert!(p.bgp_addresses().contains(&prefix), "announced while the delay runs");
        assert_eq!(timers.next_expiry(&p, max), Some(t0 + max));
        // Later replans keep the first start time.
        let mut p = draining();
        timers.apply(&mut p, t0 + Duration::from_secs(29), max);
        assert!(p.bgp_addresses().contains(&prefix));
        let mut p = draining();
        timers.apply(&mut p, t0 + max, max);
        assert!(p.bgp_addresses().is_empty(), "withdrawn after --drain-max-delay");
        assert!(p.withdrawn[&ip].contains("--drain-max-delay"));
        assert_eq!(timers.next_expiry(&p, max), None, "no timer loop after expiry");
        // The cause ends: the timer is forgotten; a new drain starts afresh.
        let mut p = Announcements::default();
        timers.apply(&mut p, t0 + Duration::from_secs(40), max);
        let mut p = draining();
        timers.apply(&mut p, t0 + Duration::from_secs(41), max);
        assert!(p.bgp_addresses().contains(&prefix));
    }

    #[test]
    fn an_l2_handover_is_answered_for_the_grace_then_released() {
        let ip: IpAddr = "192.0.2.201".parse().unwrap();
        let handing_over = || {
            let mut a = Announcements::default();
            a.l2.insert(ip, vec![]);
            a.l2_draining
                .insert(ip, "default/lan: every serving endpoint on node node1 is terminating".into());
            a
        };
        let max = Duration::from_secs(30);
        let t0 = Instant::now();
        let mut timers = DrainTimers::default();
        let mut p = handing_over();
        timers.apply(&mut p, t0, max);
        assert!(p.l2.contains_key(&ip), "still answered during the grace");
        assert_eq!(timers.next_expiry(&p, max), Some(t0 + HANDOVER_GRACE));
        let mut p = handing_over();
        timers.apply(&mut p, t0 + HANDOVER_GRACE / 2, max);
        assert!(p.l2.contains_key(&ip));
        let mut p = handing_over();
        timers.apply(&mut p, t0 + HANDOVER_GRACE, max);
        assert!(!p.l2.contains_key(&ip) && !p.l2_draining.contains_key(&ip), "released after the grace");
        assert!(p.withdrawn[&ip].contains("handover grace"), "{:?}", p.withdrawn);
        assert_eq!(timers.next_expiry(&p, max), None, "no timer loop after expiry");
        // Owned normally again (an endpoint came back): nothing to expire.
        let mut p = Announcements::default();
        p.l2.insert(ip, vec![]);
        timers.apply(&mut p, t0 + HANDOVER_GRACE * 2, max);
        assert!(p.l2.contains_key(&ip));
        assert_eq!(timers.next_expiry(&p, max), None);
    }

    #[test]
    fn the_gate_hold_ends_once_the_plan_is_really_announced() {
        let prefix: ipnet::IpNet = "203.0.113.20/32".parse().unwrap();
        let vip: IpAddr = "192.0.2.200".parse().unwrap();
        assert!(caught_up(&Announcements::default(), &Announced::default()), "nothing planned");
        let mut plan = Announcements::default();
        plan.bgp.insert("r".into(), BTreeMap::from([(prefix, plan::RouteAttrs::default())]));
        plan.l2.insert(vip, vec![]);
        let mut announced = Announced::default();
        assert!(!caught_up(&plan, &announced));
        announced.bgp.insert(prefix, BTreeSet::from(["r".to_string()]));
        assert!(!caught_up(&plan, &announced), "the L2 announcement is not out yet");
        announced.l2.insert(vip);
        assert!(caught_up(&plan, &announced));
    }

    #[test]
    fn errors_become_one_line() {
        let e = "f.yaml: invalid configuration:\n  document 1: a\n  document 2: b";
        assert_eq!(super::one_line(e), "f.yaml: invalid configuration: document 1: a; document 2: b");
    }
}
