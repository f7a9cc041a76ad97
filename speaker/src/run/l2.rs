//! L2 claims: membership and the L2 announcer run while L2Advertisements exist, and
//! this node elects owners only from a view the [`ClaimGate`] allows.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ferrolb_proto::membership::claim_gate::{ClaimGate, Observation, Verdict};
use ferrolb_proto::membership::join_grace::JoinGrace;
use ferrolb_proto::membership::{self, Membership, MembershipConfig, MembershipHandle, MembershipKey, Seed};
use tokio::sync::watch;
use tokio::time::Instant;

use super::drain::HANDOVER_GRACE;
use super::kube::ClusterPart;
use super::options::Options;
use super::state::{Cause, State};
use crate::announce::l2::L2Announcer;
use crate::cluster;
use crate::metrics::Metrics;
use crate::model::ClusterModel;

/// Membership and the L2 announcer, running while L2Advertisements exist.
pub(super) struct L2Part {
    pub(super) announcer: L2Announcer,
    pub(super) membership: MembershipHandle,
    pub(super) live: watch::Receiver<BTreeSet<String>>,
    pub(super) settled: watch::Receiver<bool>,
    /// Members whose heartbeats stopped (SWIM has not declared them down yet).
    pub(super) suspected: watch::Receiver<BTreeSet<String>>,
    /// Changes when a member that missed this node's heartbeats took its addresses over.
    pub(super) taken_over: watch::Receiver<u64>,
    /// Whether the view may be elected from: settled, not alone for a moment only, and
    /// not blind (datagrams from peers this node cannot read, nobody live).
    guard: ClaimGate,
    /// Members that join count as candidates after [`HANDOVER_GRACE`]: make before
    /// break when a node comes back (`ferrolb_proto::membership::join_grace`).
    joins: JoinGrace,
    /// The live set last used for planning (None: not claiming).
    used: Option<BTreeSet<String>>,
}

impl L2Part {
    /// When a joining member becomes a candidate: the event loop re-elects then.
    pub(super) fn next_join(&self) -> Option<Instant> {
        self.joins.next_change(HANDOVER_GRACE).map(Instant::from_std)
    }

    /// The live set to elect from, or None while this node may not claim.
    fn usable_live(&mut self, metrics: &Metrics, now: Instant) -> Option<BTreeSet<String>> {
        let settled = *self.settled.borrow_and_update();
        let mut live = self.live.borrow_and_update().clone();
        for gone in self.suspected.borrow_and_update().iter() {
            live.remove(gone);
        }
        let seen = Observation {
            settled,
            live_others: live.len().saturating_sub(1),
            unreadable: metrics.membership.unreadable(),
        };
        if self.guard.handle(now, seen) != Verdict::Claim {
            self.joins.reset();
            return None;
        }
        let candidates = self.joins.candidates(now.into_std(), live, HANDOVER_GRACE);
        if self.joins.left_early() {
            // It may have announced this node's addresses as its own: clients that
            // followed it come back.
            tracing::info!(
                "a member left before its join grace passed: re-announcing the addresses this node owns"
            );
            self.announcer.renew();
        }
        Some(candidates)
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

/// Records an `AddressConflict` Event on this node's Node for every address conflict the
/// L2 announcer reports (another MAC answers for an owned address), once per change; ends
/// with the announcer.
async fn conflict_events(
    mut status: watch::Receiver<ferrolb_proto::l2::L2Status>,
    client: kube::Client,
    node: String,
) {
    use ferrolb_proto::l2::arp::mac_to_string;
    let mut seen: std::collections::BTreeMap<IpAddr, ferrolb_proto::l2::Conflict> = Default::default();
    while status.changed().await.is_ok() {
        let now: std::collections::BTreeMap<IpAddr, ferrolb_proto::l2::Conflict> = status
            .borrow_and_update()
            .addresses
            .iter()
            .filter_map(|(a, st)| st.conflict.map(|c| (*a, c)))
            .collect();
        for (addr, c) in now.iter().filter(|(a, c)| seen.get(a) != Some(c)) {
            let other = mac_to_string(&c.other);
            let note = match (c.won, c.foreign) {
                (_, true) => format!(
                    "{other} keeps answering ARP/NDP for {addr} although this node outranks it: it is no ferrolb \
                     node of this release; remove {addr} from that device or from the address pool"
                ),
                (true, false) => format!(
                    "{other} also answers ARP/NDP for {addr}; this node outranks it, keeps the address and \
                     announces it again (membership between the two nodes is split, or a device holds the address)"
                ),
                (false, false) => format!(
                    "{other} also answers ARP/NDP for {addr} and outranks this node: this node stopped answering \
                     for it (membership between the two nodes is split, or a device holds the address)"
                ),
            };
            node_event(client.clone(), &node, true, "AddressConflict", note);
        }
        seen = now;
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

impl State {
    /// The members L2 owners are elected from: membership's live set once settled
    /// (nobody before: a starting node would otherwise claim everything). Without
    /// L2Advertisements the set is unused; every Ready node of the file then counts.
    pub(super) fn live_members(&mut self) -> BTreeSet<String> {
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
    pub(super) async fn ensure_l2(&mut self) -> Result<(), String> {
        let wanted = !self.model.l2_advertisements.is_empty();
        match (wanted, self.l2.is_some()) {
            (true, false) => {
                let key = self.membership_key().await?;
                let part = start_l2(&self.opts, &self.model, &self.metrics, key)?;
                if let Some(c) = &self.cluster {
                    c.gate.feed.set_l2(Some(part.announcer.status()));
                    let status = part.announcer.status();
                    tokio::spawn(conflict_events(status, c.client.clone(), self.opts.node_name.clone()));
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
            (true, true) => {
                if let Some(p) = &self.l2 {
                    p.membership.set_nodes(&node_addresses(&self.model, membership_port(&self.opts)));
                }
            }
            (false, false) => {}
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
    pub(super) async fn ensure_l2_logged(&mut self) {
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

    /// Re-elects when the live set, settledness or key-mismatch state changed.
    pub(super) async fn on_l2_change(&mut self) {
        let now = Instant::now();
        let Some(p) = self.l2.as_mut() else { return };
        if p.taken_over.has_changed().unwrap_or(false) {
            p.taken_over.borrow_and_update();
            // A false suspicion: clients may have followed the successor's announcement.
            p.announcer.renew();
        }
        let before = p.used.clone();
        let after = p.usable_live(&self.metrics, now);
        let suspected = p.suspected.borrow().clone();
        report_blindness(self.l2.as_mut(), &self.metrics, self.cluster.as_ref(), &self.opts.node_name);
        if before == after {
            return;
        }
        let cause = match (&before, &after) {
            (Some(b), Some(a)) => {
                let mut parts: Vec<String> = Vec::new();
                parts.extend(a.difference(b).map(|n| format!("{n} joined membership")));
                parts.extend(b.difference(a).map(|n| {
                    if suspected.contains(n) {
                        format!("{n} stopped sending heartbeats")
                    } else {
                        format!("{n} left membership")
                    }
                }));
                let label = match b.difference(a).next() {
                    Some(n) if suspected.contains(n) => "heartbeat_missed",
                    Some(_) => "member_left",
                    None => "member_joined",
                };
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
        let left = matches!((&before, &after), (Some(b), Some(a)) if b.difference(a).next().is_some());
        self.replan(&cause).await;
        // A member left: an address this node yielded to it on the wire is this node's
        // again now, not once that member has been silent for a while (its hand-over
        // grace, then the conflict's release): answer it at once.
        if left
            && !joined
            && let Some(p) = &self.l2
        {
            p.announcer.renew();
        }
        // A member that joins may have been thought dead by itself or others for a
        // moment (a false suspicion on a starved node) and claimed our addresses;
        // clients may have followed its gratuitous ARP. Move them back.
        if joined && let Some(p) = &self.l2 {
            if !self.plan.l2.is_empty() {
                tracing::info!(reason = %cause.text, "L2: re-announcing the addresses this node still owns");
            }
            p.announcer.renew();
        }
    }
}

/// The address membership uses for a node: its first IPv4 InternalIP, else its first.
fn membership_ip(model: &ClusterModel, node: &str) -> Option<IpAddr> {
    let addrs = &model.nodes.get(node)?.addresses;
    addrs.iter().find(|a| a.is_ipv4()).or_else(|| addrs.first()).copied()
}

/// The membership port: every node's is this node's.
fn membership_port(opts: &Options) -> u16 {
    opts.membership_bind.map_or(membership::DEFAULT_PORT, |b| b.port())
}

/// Every address of every Node at the membership port: where membership datagrams may
/// come from, and for whom they may speak ([`membership::peers`]).
fn node_addresses(model: &ClusterModel, port: u16) -> Vec<Seed> {
    let mut out = Vec::new();
    for (name, node) in &model.nodes {
        out.extend(
            node.addresses.iter().map(|ip| Seed { name: name.clone(), addr: SocketAddr::new(*ip, port) }),
        );
    }
    out
}

/// Reads the key and starts membership (seeded with the Nodes' InternalIPs) and the
/// L2 announcer.
fn start_l2(
    opts: &Options,
    model: &ClusterModel,
    metrics: &Metrics,
    key: MembershipKey,
) -> Result<L2Part, String> {
    let port = membership_port(opts);
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
    cfg.heartbeat = opts.heartbeat;
    let announcer = L2Announcer::spawn(metrics)?;
    let membership = Membership::spawn(cfg, metrics.membership.clone()).map_err(|e| e.to_string())?;
    membership.set_nodes(&node_addresses(model, port));
    tracing::info!(bind = %bind, advertise = %SocketAddr::new(advertise_ip, port), seeds = others, "membership started for L2 announcements");
    Ok(L2Part {
        live: membership.live(),
        settled: membership.settled(),
        suspected: membership.suspected(),
        taken_over: membership.taken_over(),
        announcer,
        membership,
        guard: ClaimGate::new(others),
        joins: JoinGrace::default(),
        used: None,
    })
}

/// What [`l2_changed`] waits on: membership's live set, settledness and heartbeat suspects.
pub(super) type L2Watch = (
    watch::Receiver<BTreeSet<String>>,
    watch::Receiver<bool>,
    watch::Receiver<BTreeSet<String>>,
    watch::Receiver<u64>,
);

impl L2Part {
    /// The receivers [`l2_changed`] waits on.
    pub(super) fn watch(&self) -> L2Watch {
        (self.live.clone(), self.settled.clone(), self.suspected.clone(), self.taken_over.clone())
    }
}

/// Resolves when membership's live set, settledness or heartbeat suspects change (never
/// without L2).
pub(super) async fn l2_changed(part: Option<L2Watch>) {
    let Some((mut live, mut settled, mut suspected, mut taken_over)) = part else {
        return std::future::pending().await;
    };
    let ok = tokio::select! {
        r = live.changed() => r.is_ok(),
        r = settled.changed() => r.is_ok(),
        r = suspected.changed() => r.is_ok(),
        r = taken_over.changed() => r.is_ok(),
    };
    if !ok {
        std::future::pending::<()>().await;
    }
}
