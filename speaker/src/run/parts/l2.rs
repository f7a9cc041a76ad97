//! L2 claims: membership and the L2 announcer run while L2Advertisements exist, and
//! this node elects owners only from a view the [`Claim`] allows.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ferrolb_proto::membership::claim::Verdict;
use ferrolb_proto::membership::claim::{Blindness, Claim, Wording};
use ferrolb_proto::membership::join_grace::JoinGrace;
use ferrolb_proto::membership::{
    self, HeartbeatConfig, Membership, MembershipConfig, MembershipHandle, MembershipKey, Renewal, Seed,
};
use tokio::sync::watch;
use tokio::time::Instant;

use super::drain::HANDOVER_GRACE;
use crate::announce::l2::L2Announcer;
use crate::cluster;
use crate::metrics::Metrics;
use crate::model::ClusterModel;
use crate::run::input::Cause;

/// How the claim's log lines name the speaker's things.
const WORDING: Wording = Wording {
    peers: "nodes",
    key: "--membership-key-file, or Secret ferrolb-membership",
    blind: "not answering ARP/NDP for any address",
    recovered: "electing L2 owners from the membership view again",
};

/// Membership and the L2 announcer, running while L2Advertisements exist.
pub(in crate::run) struct L2Part {
    pub(in crate::run) announcer: L2Announcer,
    pub(in crate::run) membership: MembershipHandle,
    pub(in crate::run) live: watch::Receiver<BTreeSet<String>>,
    pub(in crate::run) settled: watch::Receiver<bool>,
    /// Members whose heartbeats stopped (SWIM has not declared them down yet).
    pub(in crate::run) suspected: watch::Receiver<BTreeSet<String>>,
    /// Changes when a member that missed this node's heartbeats took its addresses over.
    pub(in crate::run) taken_over: watch::Receiver<u64>,
    /// Changes when this node was told it is down and rejoined ([`L2Part::on_renewal`]).
    pub(in crate::run) renewed: watch::Receiver<Renewal>,
    /// Whether the view may be elected from: settled, not alone for a moment only, and
    /// not blind (datagrams from peers this node cannot read, nobody live).
    pub(in crate::run) claim: Claim,
    /// A change of blindness not yet recorded as a Node Event.
    pub(in crate::run) blindness: Option<Blindness>,
    /// Members that join count as candidates after [`HANDOVER_GRACE`]: make before
    /// break when a node comes back (`ferrolb_proto::membership::join_grace`).
    pub(in crate::run) joins: JoinGrace,
    /// The view last used for planning (None: not claiming).
    pub(in crate::run) used: Option<View>,
}

/// The members this node elects L2 owners from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(in crate::run) struct View {
    /// Live to SWIM and counted (a joiner once its grace passed).
    pub(in crate::run) counted: BTreeSet<String>,
    /// Those of them whose heartbeats to this node stopped: left out of single-owner
    /// elections only (`crate::plan`).
    pub(in crate::run) suspected: BTreeSet<String>,
}

impl View {
    /// The members single-owner elections are made from.
    pub(in crate::run) fn reachable(&self) -> BTreeSet<String> {
        self.counted.difference(&self.suspected).cloned().collect()
    }

    /// Why the elections run again when the view of node `me` turns from `before` to
    /// `after`.
    pub(in crate::run) fn cause(before: Option<&View>, after: Option<&View>, me: &str) -> Cause {
        let (b, a) = match (before, after) {
            (Some(b), Some(a)) => (b, a),
            (None, Some(a)) => {
                let names: Vec<&str> = a.counted.iter().map(String::as_str).collect();
                return Cause::new(
                    "membership_settled",
                    format!("membership settled with {}", names.join(", ")),
                );
            }
            (_, None) => {
                return Cause::new(
                    "membership_unsettled",
                    "membership view not usable (not settled, settled alone a moment ago, or blind: see the \
                     membership log)",
                );
            }
        };
        // This node itself leaves its view when it was declared down, and comes back after
        // its join grace (`JoinGrace::renewed`).
        let stood_back = b.counted.contains(me) && !a.counted.contains(me);
        let back = !b.counted.contains(me) && a.counted.contains(me);
        let others =
            |set: &BTreeSet<String>| set.iter().filter(|n| *n != me).cloned().collect::<BTreeSet<_>>();
        let (bc, ac) = (others(&b.counted), others(&a.counted));
        let me_text = stood_back
            .then(|| "this node was declared down: it stands back for its join grace".to_string())
            .into_iter()
            .chain(back.then(|| "this node counts itself again after its join grace".to_string()));
        let joined = ac.difference(&bc).map(|n| format!("{n} joined membership"));
        let left = bc.difference(&ac).map(|n| format!("{n} left membership"));
        let missed = a.suspected.difference(&b.suspected).map(|n| format!("{n} stopped sending heartbeats"));
        let resumed = b
            .suspected
            .difference(&a.suspected)
            .filter(|n| a.counted.contains(*n))
            .map(|n| format!("{n} sends heartbeats again"));
        let label = if stood_back {
            "declared_down"
        } else if back {
            "rejoined"
        } else if a.suspected.difference(&b.suspected).next().is_some() {
            "heartbeat_missed"
        } else if bc.difference(&ac).next().is_some() {
            "member_left"
        } else if ac.difference(&bc).next().is_some() {
            "member_joined"
        } else {
            "heartbeat_resumed"
        };
        let text = me_text.chain(joined).chain(resumed).chain(left).chain(missed).collect::<Vec<_>>();
        Cause::new(label, text.join(", "))
    }
}

/// What [`l2_changed`] waits on: membership's live set, settledness, heartbeat suspects,
/// takeovers and this node's renewals.
pub(in crate::run) type L2Watch = (
    watch::Receiver<BTreeSet<String>>,
    watch::Receiver<bool>,
    watch::Receiver<BTreeSet<String>>,
    watch::Receiver<u64>,
    watch::Receiver<Renewal>,
);

impl L2Part {
    /// When a joining member becomes a candidate: the event loop re-elects then.
    pub(in crate::run) fn next_join(&self) -> Option<Instant> {
        self.joins.poll_timeout(HANDOVER_GRACE).map(Instant::from_std)
    }

    /// The view to elect from, or None while this node may not claim.
    pub(in crate::run) fn usable_live(&mut self, metrics: &Metrics, now: Instant) -> Option<View> {
        let settled = *self.settled.borrow_and_update();
        let live = self.live.borrow_and_update().clone();
        let suspected = self.suspected.borrow_and_update().clone();
        let reachable = live.difference(&suspected).count();
        let (verdict, blindness) =
            self.claim.handle(now.into_std(), settled, reachable.saturating_sub(1), &metrics.membership);
        if blindness.is_some() {
            self.blindness = blindness;
        }
        if self.renewed.has_changed().unwrap_or(false) {
            let told_by = self.renewed.borrow_and_update().told_by.clone();
            self.on_renewal(told_by, now);
        }
        if verdict != Verdict::Claim {
            self.joins.reset();
            return None;
        }
        let counted = self.joins.candidates(now.into_std(), live, HANDOVER_GRACE);
        if self.joins.left_early() {
            // It may have announced this node's addresses as its own: clients that
            // followed it come back.
            tracing::info!(
                "a member left before its join grace passed: re-announcing the addresses this node owns"
            );
            self.announcer.renew();
        }
        let suspected = suspected.intersection(&counted).cloned().collect();
        Some(View { counted, suspected })
    }

    /// This node rejoined under a renewed identity, told it was down by `told_by`: it
    /// stands back for the join grace if a member it counts said so
    /// ([`JoinGrace::renewed`]).
    fn on_renewal(&mut self, told_by: Option<Arc<str>>, now: Instant) {
        if self.joins.renewed(now.into_std(), self.membership.name(), told_by.as_deref()) {
            tracing::info!(by = ?told_by, grace = ?HANDOVER_GRACE, "this node was declared down and rejoined: electing itself again after the join grace");
        } else {
            tracing::info!(
                by = ?told_by,
                "this node rejoined, told it was down by a member it does not count (a partition healing): electing as before"
            );
        }
    }

    /// Records on this node's Node object (Kubernetes mode) that it became blind (it
    /// cannot read its peers: it claims no L2 address) or no longer is; the log line and
    /// the metric are the claim's.
    pub(in crate::run) fn report_blindness(&mut self, client: Option<&kube::Client>, node: &str) {
        let Some(b) = self.blindness.take() else { return };
        let reason = if b.blind { "MembershipBlind" } else { "MembershipRecovered" };
        if let Some(client) = client {
            node_event(client.clone(), node, b.blind, reason, b.note);
        }
    }

    /// The receivers [`l2_changed`] waits on.
    pub(in crate::run) fn watch(&self) -> L2Watch {
        (
            self.live.clone(),
            self.settled.clone(),
            self.suspected.clone(),
            self.taken_over.clone(),
            self.renewed.clone(),
        )
    }
}

/// Records an `AddressConflict` Event on this node's Node for every address conflict the
/// L2 announcer reports (another MAC answers for an owned address), once per change; ends
/// with the announcer.
pub(in crate::run) async fn conflict_events(
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

/// The address membership uses for a node: its first IPv4 InternalIP, else its first.
fn membership_ip(model: &ClusterModel, node: &str) -> Option<IpAddr> {
    let addrs = &model.nodes.get(node)?.addresses;
    addrs.iter().find(|a| a.is_ipv4()).or_else(|| addrs.first()).copied()
}

/// The membership port (`--membership-bind`'s): every node's is this node's.
pub(in crate::run) fn membership_port(bind: Option<SocketAddr>) -> u16 {
    bind.map_or(membership::DEFAULT_PORT, |b| b.port())
}

/// Every address of every Node at the membership port: where membership datagrams may
/// come from, and for whom they may speak ([`membership::peers`]).
pub(in crate::run) fn node_addresses(model: &ClusterModel, port: u16) -> Vec<Seed> {
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
pub(in crate::run) fn start_l2(
    me: &str,
    membership_bind: Option<SocketAddr>,
    heartbeat: HeartbeatConfig,
    (model, metrics): (&ClusterModel, &Metrics),
    key: MembershipKey,
) -> Result<L2Part, String> {
    let port = membership_port(membership_bind);
    let advertise_ip = match membership_bind.map(|b| b.ip()).filter(|ip| !ip.is_unspecified()) {
        Some(ip) => ip,
        None => membership_ip(model, me).ok_or_else(|| {
            format!(
                "node {me}: no InternalIP in status.addresses of its Node; membership needs it \
                 (or give --membership-bind ADDR:PORT)"
            )
        })?,
    };
    let bind = membership_bind.unwrap_or_else(|| {
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
    cfg.heartbeat = heartbeat;
    // A joining node's active-active buckets wait for the others' join grace.
    let announcer = L2Announcer::spawn(me, metrics, HANDOVER_GRACE)?;
    let membership = Membership::spawn(cfg, metrics.membership.clone()).map_err(|e| e.to_string())?;
    membership.set_nodes(&node_addresses(model, port));
    tracing::info!(bind = %bind, advertise = %SocketAddr::new(advertise_ip, port), seeds = others, "membership started for L2 announcements");
    Ok(L2Part {
        live: membership.live(),
        settled: membership.settled(),
        suspected: membership.suspected(),
        taken_over: membership.taken_over(),
        renewed: membership.renewed(),
        announcer,
        membership,
        claim: Claim::new(others, WORDING),
        blindness: None,
        joins: JoinGrace::default(),
        used: None,
    })
}

/// Resolves when membership's live set, settledness, heartbeat suspects, takeovers or this
/// node's identity change (never without L2).
pub(in crate::run) async fn l2_changed(part: Option<L2Watch>) {
    let Some((mut live, mut settled, mut suspected, mut taken_over, mut renewed)) = part else {
        return std::future::pending().await;
    };
    let ok = tokio::select! {
        r = live.changed() => r.is_ok(),
        r = settled.changed() => r.is_ok(),
        r = suspected.changed() => r.is_ok(),
        r = taken_over.changed() => r.is_ok(),
        r = renewed.changed() => r.is_ok(),
    };
    if !ok {
        std::future::pending::<()>().await;
    }
}
