//! What the event loop owns (the parts), and the one path every change ends in:
//! [`State::replan`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use ferrolb_proto::bgp::socket::Password;
use ipnet::IpNet;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::input::{Cause, Wakeups};
use super::options::Options;
use super::parts::cluster::ClusterPart;
use super::parts::drain::{DrainTimers, HANDOVER_GRACE};
use super::parts::feed::FeedPart;
use super::parts::l2::L2Part;
use super::parts::rotation;
use crate::announce::bgp::BgpAnnouncer;
use crate::metrics::{Metrics, OwnershipLabel, ProtocolLabel};
use crate::model::ClusterModel;
use crate::plan::diff::{self, PlanChange};
use crate::plan::{self, Plan};
use crate::readiness;

/// Everything the event loop owns.
pub(super) struct State {
    pub(super) opts: Options,
    /// When the input being processed came: the one clock of every handler.
    pub(super) now: Instant,
    /// Static mode: the file.
    pub(super) file: Option<PathBuf>,
    /// Kubernetes mode (and its replay): the watchers' updates into the model.
    pub(super) feed: Option<FeedPart>,
    /// Kubernetes mode: the API side.
    pub(super) cluster: Option<ClusterPart>,
    /// Where each new plan is sent, if anywhere.
    pub(super) plans: Option<mpsc::UnboundedSender<Plan>>,
    pub(super) model: ClusterModel,
    pub(super) passwords: BTreeMap<String, Password>,
    pub(super) fingerprint: u128,
    pub(super) bgp: BgpAnnouncer,
    /// Recomputes only the Services the model marks changed.
    pub(super) planner: plan::Planner,
    pub(super) plan: Plan,
    /// How many prefixes `plan` announces by BGP (to some peer).
    pub(super) bgp_announced: usize,
    pub(super) metrics: Arc<Metrics>,
    pub(super) peer_errors: Vec<String>,
    pub(super) l2: Option<L2Part>,
    /// The last L2 start error, logged once.
    pub(super) l2_error: Option<String>,
    /// When each draining address started draining.
    pub(super) drains: DrainTimers,
    /// Key and password rotation ([`rotation`]).
    pub(super) rotation: rotation::Rotation,
}

impl State {
    pub(super) fn new(opts: Options, metrics: Arc<Metrics>) -> Self {
        State {
            bgp: BgpAnnouncer::new(&opts.node_name, metrics.clone()),
            model: ClusterModel::new(&opts.lb_class),
            passwords: BTreeMap::new(),
            fingerprint: 0,
            plan: Plan::default(),
            bgp_announced: 0,
            metrics,
            peer_errors: Vec::new(),
            l2: None,
            l2_error: None,
            drains: DrainTimers::new(opts.drain_max_delay),
            rotation: rotation::Rotation::default(),
            planner: plan::Planner::new(),
            now: Instant::now(),
            file: None,
            feed: None,
            cluster: None,
            plans: None,
            opts,
        }
    }

    /// Plans anew and hands the plan to the announcers, the status writer and the gates.
    pub(super) async fn replan(&mut self, cause: &Cause) {
        // The wall clock, not the input's: a metric of what the plan cost.
        let started = std::time::Instant::now();
        // The Local chicken-and-egg: this node's pods waiting only for the gate count as
        // serving (slices and Services change too, so recount on every plan).
        if let Some(c) = &self.cluster {
            readiness::apply_gate_pending(&mut self.model, &c.gate.pods, &self.opts.node_name);
        }
        let live = self.live_members();
        let changes = self.model.take_changes();
        // What the status needs to know of them (the planner takes them).
        let mut changed = crate::model::Changes { all: changes.all, services: changes.services.clone() };
        let (me, suspected) = (&self.opts.node_name, &live.suspected);
        let mut new = self.planner.update(&self.model, changes, me, &live.counted, suspected).clone();
        self.drains.handle(self.now, &mut new);
        if let Some(p) = &mut self.l2 {
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
            p.announcer.apply(&new);
            p.membership.set_successors(new.heartbeat_targets());
        }
        let errors = self.bgp.apply(&self.model, &self.passwords, &new).await;
        // Logged once the sessions have the routes: with 50k of them, comparing the
        // plans would delay the first UPDATE.
        let change = PlanChange::between(&self.plan, &new);
        let (announced, unannounced) = change.bgp_addresses();
        log_changes(&change, (&announced, &unannounced));
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        if errors != self.peer_errors {
            for e in &errors {
                tracing::error!("{e}");
            }
            self.peer_errors = errors;
        }
        // Counted from the change, not the whole plan.
        self.bgp_announced = (self.bgp_announced + announced.len()).saturating_sub(unannounced.len());
        self.metrics
            .announced
            .get_or_create(&ProtocolLabel { protocol: "bgp".into() })
            .set(i64::try_from(self.bgp_announced).unwrap_or(i64::MAX));
        self.metrics.announced.get_or_create(&ProtocolLabel { protocol: "l2".into() }).set(len_i64(&new.l2));
        self.metrics.l2_unowned.set(len_i64(&new.l2_unowned));
        // Kubernetes mode, where the feed also is.
        if let (Some(c), Some(f)) = (&mut self.cluster, &mut self.feed) {
            changed.services.append(&mut f.feed.uids_changed);
            if let Some(u) = c.tracker.update(&self.model, &change, &f.feed.uids, &changed) {
                c.status.send(u);
            }
        }
        if let Some(p) = &self.plans {
            let _ = p.send(new.clone());
        }
        let old = std::mem::replace(&mut self.plan, new);
        // The old plan's routes share every node with the new one's but those of the
        // Services this plan recomputed: only a rebuild leaves much to free.
        crate::drop_later(old, self.planner.recomputed());
        self.update_gates();
        self.metrics.replan_seconds.observe(started.elapsed().as_secs_f64());
    }

    /// Whether every watched kind has been listed (Kubernetes mode).
    pub(super) fn synced(&self) -> bool {
        self.feed.as_ref().is_some_and(FeedPart::synced)
    }

    /// Hands the readiness gate writer the conditions this node's gated pods should have
    /// now (Kubernetes mode).
    pub(super) fn update_gates(&mut self) {
        let synced = self.synced();
        if let Some(c) = self.cluster.as_mut() {
            c.gate.evaluate(self.now, synced, &self.model, &self.opts.node_name, &self.plan);
        }
    }

    /// What to wake up for at this turn.
    pub(super) fn wakeups(&self) -> Wakeups {
        let cluster = self.cluster.as_ref();
        Wakeups {
            secrets: cluster.map(|c| c.secrets_seen.clone()),
            poll_files: (self.l2.is_some() && self.opts.membership_key_file.is_some()) || self.file.is_some(),
            gate: cluster.map(|c| c.gate.watch()),
            gate_hold: cluster.and_then(|c| c.gate.hold_until()),
            drain: self.drains.poll_timeout(),
            l2: self.l2.as_ref().map(L2Part::watch),
            join: self.l2.as_ref().and_then(L2Part::next_join),
            l2_ticks: self.l2.is_some(),
            retry_l2: cluster.is_some() && self.l2_error.is_some(),
        }
    }
}

/// One line per address whose announcement or withdrawal reason changed.
/// Logs what a new plan changed: each address at debug, and at info one summary line
/// per change with counts and the first few addresses (a 50k-Service file must not
/// write 50k info lines, nor cost their formatting).
fn log_changes(change: &PlanChange<'_>, (announced, unannounced): (&[IpNet], &[IpNet])) {
    let (old, new) = (change.old, change.new);
    // Only what differs is visited: one ordered walk of each map (10k addresses, one changed).
    fn changed<'a>(
        a: &BTreeMap<IpAddr, String>,
        b: &'a BTreeMap<IpAddr, String>,
    ) -> Vec<(&'a IpAddr, &'a String)> {
        let mut out = Vec::new();
        diff::differing(a, b, |ip| out.extend(b.get_key_value(ip)));
        out
    }
    let mut owned = Vec::new();
    diff::differing_keys(&old.l2, &new.l2, |ip| owned.extend(new.l2.get_key_value(ip).map(|(ip, _)| ip)));
    let draining = changed(&old.draining, &new.draining);
    let handover = changed(&old.l2_draining, &new.l2_draining);
    let withdrawn = changed(&old.withdrawn, &new.withdrawn);
    if tracing::enabled!(tracing::Level::DEBUG) {
        for p in announced {
            let peers: Vec<&str> =
                new.bgp.iter().filter(|(_, r)| r.contains_key(p)).map(|(n, _)| n.as_str()).collect();
            tracing::debug!(prefix = %p, peers = ?peers, "announcing by BGP");
        }
        for p in unannounced {
            tracing::debug!(prefix = %p, "no longer announcing by BGP");
        }
        for ip in &owned {
            tracing::debug!(address = %ip, interfaces = ?new.l2[ip], "this node owns the address for ARP/NDP");
        }
        for (ip, why) in &draining {
            tracing::debug!(address = %ip, reason = %why, "draining: announced with GRACEFUL_SHUTDOWN (65535:0) until withdrawn");
        }
        for (ip, why) in &handover {
            tracing::debug!(address = %ip, reason = %why, grace = ?HANDOVER_GRACE, "L2 handover: still answering ARP/NDP while the successor announces");
        }
        for (ip, why) in &withdrawn {
            tracing::debug!(address = %ip, reason = %why, "not announced");
        }
    }
    let counts =
        [announced.len(), unannounced.len(), owned.len(), draining.len(), handover.len(), withdrawn.len()];
    if counts.iter().any(|c| *c > 0) {
        tracing::info!(
            bgp_announced = announced.len(),
            bgp_withdrawn = unannounced.len(),
            l2_owned = owned.len(),
            draining = draining.len(),
            l2_handover = handover.len(),
            not_announced = withdrawn.len(),
            first = %first_few(announced.iter().map(|p| p.to_string())
                .chain(unannounced.iter().map(|p| format!("-{p}")))
                .chain(owned.iter().map(|ip| format!("l2:{ip}")))
                .chain(draining.iter().map(|(ip, _)| format!("draining:{ip}")))
                .chain(handover.iter().map(|(ip, _)| format!("handover:{ip}")))
                .chain(withdrawn.iter().map(|(ip, why)| format!("{ip} ({why})"))), counts.iter().sum()),
            "announcements changed (each address at debug)"
        );
    }
}

/// The first three of `total` items, then how many more (formats only those three).
pub(super) fn first_few(items: impl Iterator<Item = String>, total: usize) -> String {
    let mut out: Vec<String> = items.take(3).collect();
    if total > out.len() {
        out.push(format!("… +{} more", total - out.len()));
    }
    out.join(", ")
}

pub(super) fn len_i64<T>(c: impl IntoIterator<Item = T>) -> i64 {
    i64::try_from(c.into_iter().count()).unwrap_or(i64::MAX)
}
