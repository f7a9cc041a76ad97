//! The BGP announcer: one session per BGPPeer this node peers with, each converged to
//! the plan's routes for that peer.
//!
//! Owned by the speaker's event loop (not shared): `apply` after every plan, `tick`
//! once a second for metrics and the MD5 hint, `shutdown` on SIGTERM.
//!
//! A BGPPeer with `bfdProfile` also gets a BFD session (RFC 5880/5881) from the BGP
//! session's source address (`spec.sourceAddress`, else the address the kernel picks
//! towards the peer); a task watches it and, when BFD fails, resets the BGP session at
//! once and holds it down until BFD is Up again (RFC 5882 §4.3,
//! [`SessionHandle::set_bfd_up`]). The peer going AdminDown does not count as a failure.
//! The BGP session starts without waiting for BFD. The hold-down ends when BFD is Up
//! again or after [`BFD_HOLD_DOWN_MAX`], whichever comes first: a router that runs BFD
//! only for a live BGP connection (FRR `bgp listen range`) never brings BFD Up while
//! the session is held down, so without the limit the session would stay down for
//! good. If the path is still broken the reconnect fails or BFD fails again.
//!
//! A BGPPeer with `interface` (unnumbered) gets its session once a router advertises on
//! that link ([`unnumbered`]), to the router's link-local address, offering IPv4 routes
//! over the link's IPv6 next hop (RFC 8950); a router found or lost later restarts it
//! (the event loop asks [`BgpAnnouncer::routers_changed`] every second).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV6};
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::BgpPeerSpec;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::{Metrics, PeerLabel};
use crate::model::ClusterModel;
use crate::plan::Plan;
use ferrolb_api::settings::{self, PeerError};
use ferrolb_proto::bfd::{self, Bfd, BfdConfig, BfdHandle, BfdState};
use ferrolb_proto::bgp::error::subcode;
use ferrolb_proto::bgp::fsm::State;
use ferrolb_proto::bgp::session::{self, Listener, Prefixes, SessionConfig, SessionHandle, SessionStatus};
use ferrolb_proto::bgp::socket::Password;

mod routes;
mod unnumbered;

use routes::SessionRoutes;

/// Everything a session is built from; a change means a new session.
#[derive(Debug, Clone, PartialEq)]
struct PeerSettings {
    spec: BgpPeerSpec,
    password: Option<Password>,
    router_id: Ipv4Addr,
    next_hop_v4: Option<Ipv4Addr>,
    next_hop_v6: Option<std::net::Ipv6Addr>,
    /// The BFD parameters of `spec.bfdProfile`.
    bfd: Option<bfd::SessionConfig>,
    /// Unnumbered (`spec.interface`): the router found on the link.
    found: Option<SocketAddrV6>,
}

/// A BGP peer's BFD session and the task that drives the BGP session from it.
struct BfdLink {
    /// Dropping the last handle ends the BFD session (telling the peer AdminDown).
    _handle: BfdHandle,
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for BfdLink {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// What this node's BGP sessions really announce: per BGPPeer, the prefixes whose
/// UPDATE has been written to its Established session (and not withdrawn since).
/// A peer whose session is not Established has no entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BgpAnnounced {
    /// BGPPeer name → prefixes the peer holds from us: the session's own set
    /// ([`SessionStatus::advertised`]), shared, not copied.
    pub by_peer: BTreeMap<String, Prefixes>,
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Mirrors one session's really-advertised prefixes into the announcer's [`BgpAnnounced`].
async fn forward_announced(
    peer: String,
    mut status: watch::Receiver<SessionStatus>,
    out: Arc<watch::Sender<BgpAnnounced>>,
) {
    loop {
        let adv = {
            let s = status.borrow_and_update();
            if s.is_up() { s.advertised.clone() } else { Prefixes::new() }
        };
        out.send_if_modified(|a| match a.by_peer.get(&peer) {
            Some(cur) if *cur == adv => false,
            None if adv.is_empty() => false,
            _ if adv.is_empty() => a.by_peer.remove(&peer).is_some(),
            _ => {
                a.by_peer.insert(peer.clone(), adv);
                true
            }
        });
        if status.changed().await.is_err() {
            break;
        }
    }
    out.send_if_modified(|a| a.by_peer.remove(&peer).is_some());
}

struct PeerSession {
    settings: PeerSettings,
    handle: SessionHandle,
    /// Feeds [`BgpAnnouncer::announced`] from this session's status.
    forwarder: AbortOnDrop,
    bfd: Option<BfdLink>,
    started: Instant,
    md5_hint_logged: bool,
    last: SessionStatus,
    /// The routes it was handed, kept in step with the plan.
    routes: SessionRoutes,
}

/// Builds the session config of a BGPPeer for this node.
fn session_config(name: &str, s: &PeerSettings, restarting: bool) -> Result<SessionConfig, PeerError> {
    let node = settings::NodeSide {
        router_id: s.router_id,
        next_hop_v4: s.next_hop_v4,
        next_hop_v6: s.next_hop_v6,
        found: s.found,
    };
    settings::peer_session_config(name, &s.spec, s.password.clone(), node, restarting, s.bfd.is_some())
}

/// Owns the BGP sessions of this node.
pub struct BgpAnnouncer {
    node: String,
    sessions: BTreeMap<String, PeerSession>,
    listeners: BTreeMap<u16, Option<Listener>>,
    /// Unnumbered peers: the router found on each interface they name.
    finders: unnumbered::Finders,
    metrics: Arc<Metrics>,
    /// No session of this process has come up yet: announce a restart (RFC 4724).
    fresh_process: bool,
    /// Starts the BFD sessions of peers with a `bfdProfile`.
    bfd: Bfd,
    /// What the sessions really announce, for readiness gates and status.
    announced: Arc<watch::Sender<BgpAnnounced>>,
}

impl BgpAnnouncer {
    /// An announcer for node `node`.
    pub fn new(node: &str, metrics: Arc<Metrics>) -> Self {
        Self {
            node: node.to_owned(),
            sessions: BTreeMap::new(),
            listeners: BTreeMap::new(),
            finders: unnumbered::Finders::default(),
            fresh_process: true,
            // BFD sessions report into the speaker's registry (`ferrolb_bfd_*`).
            bfd: Bfd::new(Some(metrics.bfd.clone())),
            metrics,
            announced: Arc::new(watch::channel(BgpAnnounced::default()).0),
        }
    }

    /// What the sessions really announce: a prefix appears for a peer once its UPDATE
    /// went out on the Established session, and disappears when it is withdrawn or the
    /// session goes down.
    pub fn announced(&self) -> watch::Receiver<BgpAnnounced> {
        self.announced.subscribe()
    }

    /// Number of sessions currently Established.
    pub fn established(&self) -> usize {
        self.sessions.values().filter(|s| s.handle.status().is_up()).count()
    }

    /// Status of the session with `peer`, if there is one.
    pub fn status(&self, peer: &str) -> Option<SessionStatus> {
        self.sessions.get(peer).map(|s| s.handle.status())
    }

    fn settings(
        &self,
        model: &ClusterModel,
        passwords: &BTreeMap<String, Password>,
        name: &str,
    ) -> Result<PeerSettings, PeerError> {
        let peer = model.peers.get(name).ok_or_else(|| PeerError {
            peer: name.to_owned(),
            field: "metadata.name",
            problem: "no such BGPPeer".into(),
            fix: "internal: the plan named a peer the model lacks",
        })?;
        let spec = peer.spec.clone();
        let node_addrs = model.nodes.get(&self.node).map(|n| n.addresses.clone()).unwrap_or_default();
        let node_v4 = node_addrs.iter().find_map(|a| match a {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        });
        let node_v6 = node_addrs.iter().find_map(|a| match a {
            IpAddr::V6(v6) => Some(*v6),
            IpAddr::V4(_) => None,
        });
        let router_id = settings::router_id(name, &spec, node_v4, &format!("node {}", self.node))?;
        // Static mode: from passwordFile; Kubernetes mode: from the passwordSecret.
        let password = passwords.get(name).cloned();
        let bfd = match &spec.bfd_profile {
            None => None,
            Some(profile) => {
                let p = model.bfd_profiles.get(profile).ok_or_else(|| PeerError {
                    peer: name.to_owned(),
                    field: "spec.bfdProfile",
                    problem: format!("no BFDProfile is named {profile:?}"),
                    fix: "create the BFDProfile or remove spec.bfdProfile",
                })?;
                Some(settings::bfd_session_config(p).map_err(|e| PeerError {
                    peer: name.to_owned(),
                    field: "spec.bfdProfile",
                    problem: e.to_string(),
                    fix: "fix the BFDProfile",
                })?)
            }
        };
        Ok(PeerSettings {
            spec,
            password,
            router_id,
            next_hop_v4: node_v4,
            next_hop_v6: node_v6,
            bfd,
            found: None,
        })
    }

    /// Converges sessions and routes to `plan`: new peers get a session, changed peers
    /// a new one (the old one ends with Cease / Other Configuration Change), removed
    /// peers end with Cease / Peer De-configured. Returns the peers that could not be set up.
    pub async fn apply(
        &mut self,
        model: &ClusterModel,
        passwords: &BTreeMap<String, Password>,
        plan: &Plan,
    ) -> Vec<PeerError> {
        let mut errors = Vec::new();
        let removed: Vec<String> =
            self.sessions.keys().filter(|n| !plan.bgp.contains_key(*n)).cloned().collect();
        for name in removed {
            if let Some(s) = self.sessions.remove(&name) {
                tracing::info!(peer = %name, "BGPPeer no longer applies to this node: closing its session (Cease, peer de-configured)");
                self.stop(&name, s, subcode::CEASE_PEER_DECONFIGURED).await;
                self.metrics.forget_peer(&name);
            }
        }
        let interfaces = plan.bgp.keys().filter_map(|n| model.peers.get(n)?.spec.interface.clone()).collect();
        let failed = self.finders.keep(&interfaces);
        for (name, routes) in &plan.bgp {
            let mut settings = match self.settings(model, passwords, name) {
                Ok(s) => s,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            if let Some(i) = settings.spec.interface.clone() {
                if let Some(why) = failed.get(&i) {
                    errors.push(PeerError {
                        peer: name.clone(),
                        field: "spec.interface",
                        problem: format!("cannot look for the router on {i}: {why}"),
                        fix: "name an interface of this node (the speaker needs CAP_NET_RAW)",
                    });
                    continue;
                }
                settings.found = self.finders.found(&i);
                if settings.found.is_none() {
                    // No router advertises on the link (yet, or any more): no session.
                    if let Some(s) = self.sessions.remove(name) {
                        self.stop(name, s, subcode::CEASE_OTHER_CONFIG_CHANGE).await;
                    }
                    continue;
                }
            }
            if self.sessions.get(name).is_some_and(|s| s.settings != settings)
                && let Some(s) = self.sessions.remove(name)
            {
                tracing::info!(peer = %name, "BGPPeer changed: restarting its session (Cease, other configuration change)");
                self.stop(name, s, subcode::CEASE_OTHER_CONFIG_CHANGE).await;
            }
            if !self.sessions.contains_key(name) {
                let cfg = match session_config(name, &settings, self.fresh_process) {
                    Ok(c) => c,
                    Err(e) => {
                        errors.push(e);
                        continue;
                    }
                };
                let local = cfg.local_addr;
                let routes = SessionRoutes::new(settings.spec.my_asn);
                let handle = self.start(name, cfg);
                let bfd = settings.bfd.and_then(|b| self.start_bfd(name, &settings, local, b, &handle));
                let forwarder = AbortOnDrop(tokio::spawn(forward_announced(
                    name.clone(),
                    handle.watch_status(),
                    self.announced.clone(),
                )));
                let s = PeerSession {
                    settings,
                    handle,
                    forwarder,
                    bfd,
                    started: Instant::now(),
                    md5_hint_logged: false,
                    last: SessionStatus::default(),
                    routes,
                };
                self.sessions.insert(name.clone(), s);
            }
            if let Some(s) = self.sessions.get_mut(name)
                && let Some(routes) = s.routes.update(routes)
            {
                s.handle.set_desired(routes);
            }
        }
        errors
    }

    fn start(&mut self, name: &str, cfg: SessionConfig) -> SessionHandle {
        tracing::info!(
            peer = %name,
            address = %cfg.peer_addr,
            local_as = cfg.peer.local_as,
            peer_as = %cfg.peer.peer_as,
            passive = cfg.peer.passive,
            md5 = cfg.password.is_some(),
            graceful_restart = cfg.peer.graceful_restart.is_some(),
            "starting BGP session"
        );
        let port = cfg.peer_addr.port();
        let password = cfg.password.clone();
        let handle = session::spawn(cfg);
        // Passive peers and connection collisions need a listener on the peer's port.
        let listener = self.listeners.entry(port).or_insert_with(|| {
            match Listener::bind(SocketAddr::new(IpAddr::from([0u16; 8]), port)) {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::warn!(port, error = %e, "cannot listen for BGP connections: passive peers will not connect");
                    None
                }
            }
        });
        if let Some(l) = listener
            && let Err(e) = l.add_peer(&handle, password.as_ref())
        {
            tracing::warn!(peer = %name, error = %e, "cannot accept connections from this peer");
        }
        handle
    }

    /// Starts the BFD session of a peer and the task that drives its BGP session.
    fn start_bfd(
        &self,
        name: &str,
        settings: &PeerSettings,
        source: Option<IpAddr>,
        cfg: bfd::SessionConfig,
        session: &SessionHandle,
    ) -> Option<BfdLink> {
        let peer = session.peer();
        let node_addr = if peer.is_ipv4() {
            settings.next_hop_v4.map(IpAddr::V4)
        } else {
            settings.next_hop_v6.map(IpAddr::V6)
        };
        // Unnumbered: between the link-local addresses, on the link.
        let (link_local, scope) = match (&settings.spec.interface, settings.found) {
            (Some(i), Some(at)) => (unnumbered::link_local_of(i).map(IpAddr::V6), at.scope_id()),
            _ => (None, 0),
        };
        let Some(local) = link_local.or(source).or_else(|| route_source(peer)).or(node_addr) else {
            tracing::warn!(peer = %name, address = %peer, "BGPPeer/{name}: spec.bfdProfile: no local address towards {peer} for BFD; set spec.sourceAddress");
            return None;
        };
        let handle = match self.bfd.spawn(BfdConfig::new(local, peer, cfg).on_link(scope)) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(peer = %name, %local, error = %e, "BGPPeer/{name}: spec.bfdProfile: cannot start BFD from {local}; the BGP session runs without it");
                return None;
            }
        };
        tracing::info!(peer = %name, %local, address = %peer, "starting BFD session");
        let watcher =
            tokio::spawn(watch_bfd(name.to_owned(), handle.state(), session.clone(), BFD_HOLD_DOWN_MAX));
        Some(BfdLink { _handle: handle, watcher })
    }

    async fn stop(&mut self, name: &str, mut s: PeerSession, cease: u8) {
        let port = s.settings.spec.peer_port;
        if let Some(Some(l)) = self.listeners.get(&port)
            && let Err(e) = l.remove_peer(s.handle.peer())
        {
            tracing::debug!(peer = %name, error = %e, "removing the peer from the listener");
        }
        // The forwarder is gone before the entry is removed, so it cannot put it back.
        s.forwarder.0.abort();
        let _ = (&mut s.forwarder.0).await;
        self.announced.send_if_modified(|a| a.by_peer.remove(name).is_some());
        drop(s.bfd);
        s.handle.shutdown(cease).await;
        self.metrics.session_up.get_or_create(&PeerLabel { peer: name.to_owned() }).set(0);
    }

    /// Whether a router was found (or lost) on an interface an unnumbered BGPPeer names
    /// since the sessions were last applied: apply the plan again.
    pub fn routers_changed(&self) -> bool {
        self.finders.changed()
    }

    /// Updates metrics from the sessions and logs the MD5 hint for sessions that never came up.
    pub fn tick(&mut self) {
        for (name, s) in &mut self.sessions {
            let st = s.handle.status();
            let label = PeerLabel { peer: name.clone() };
            let m = &self.metrics;
            m.session_up.get_or_create(&label).set(i64::from(st.is_up()));
            m.updates_sent.get_or_create(&label).inc_by(st.updates_sent.saturating_sub(s.last.updates_sent));
            m.prefixes_sent
                .get_or_create(&label)
                .inc_by(st.prefixes_announced.saturating_sub(s.last.prefixes_announced));
            m.updates_received
                .get_or_create(&label)
                .inc_by(st.updates_received.saturating_sub(s.last.updates_received));
            m.prefixes_received
                .get_or_create(&label)
                .inc_by(st.prefixes_received.saturating_sub(s.last.prefixes_received));
            if st.established_count > 0 {
                self.fresh_process = false;
            }
            let connect = s.settings.spec.connect_time().map(|d| d.0).unwrap_or(Duration::from_secs(5));
            let patience = (connect * 3).max(Duration::from_secs(5));
            if s.settings.password.is_some()
                && !s.md5_hint_logged
                && !s.settings.spec.passive
                && st.established_count == 0
                && st.state != State::Established
                && s.started.elapsed() >= patience
            {
                let address = s.handle.peer();
                tracing::warn!(peer = %name, %address, "no answer from {address}: check the TCP MD5 password on both sides");
                s.md5_hint_logged = true;
            }
            s.last = st;
        }
    }

    /// Closes every session with Cease / Administrative Shutdown, all at once.
    pub async fn shutdown(&mut self) {
        let mut set = tokio::task::JoinSet::new();
        for (name, s) in std::mem::take(&mut self.sessions) {
            tracing::info!(peer = %name, "closing BGP session (Cease, administrative shutdown)");
            set.spawn(async move {
                // BGP goes first: BFD AdminDown would make the peer drop the session anyway.
                s.handle.shutdown(subcode::CEASE_ADMIN_SHUTDOWN).await;
                drop(s.bfd);
            });
        }
        while set.join_next().await.is_some() {}
        self.listeners.clear();
        self.announced.send_if_modified(|a| !std::mem::take(&mut a.by_peer).is_empty());
    }
}

/// The source address the kernel picks towards `peer` (no packet is sent).
fn route_source(peer: IpAddr) -> Option<IpAddr> {
    let any: IpAddr =
        if peer.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { std::net::Ipv6Addr::UNSPECIFIED.into() };
    let sock = std::net::UdpSocket::bind(SocketAddr::new(any, 0)).ok()?;
    sock.connect(SocketAddr::new(peer, 3784)).ok()?;
    sock.local_addr().ok().map(|a| a.ip()).filter(|ip| !ip.is_unspecified())
}

/// The longest a BFD failure holds a BGP session down while BFD stays down.
pub const BFD_HOLD_DOWN_MAX: Duration = Duration::from_secs(10);

/// Drives `session` from the BFD state: a failure (`downs` grew, RFC 5882 §3.2: not the
/// peer's AdminDown) resets it and holds it down; BFD Up, or `max_hold` passing,
/// releases it.
async fn watch_bfd(
    name: String,
    mut state: tokio::sync::watch::Receiver<BfdState>,
    session: SessionHandle,
    max_hold: Duration,
) {
    let mut seen = *state.borrow_and_update();
    let mut held = false;
    let release = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(release);
    loop {
        tokio::select! {
            changed = state.changed() => if changed.is_err() { break },
            () = &mut release, if held => {
                tracing::info!(
                    peer = %name,
                    address = %session.peer(),
                    "BFD still down after {max_hold:?}: letting BGP reconnect (the router may run BFD only with a BGP session)"
                );
                held = false;
                session.set_bfd_up(true).await;
                continue;
            }
        }
        let now = *state.borrow_and_update();
        if now.downs > seen.downs && !held {
            tracing::warn!(
                peer = %name,
                address = %session.peer(),
                diag = ?now.diag,
                "BFD session down: tearing the BGP session down now"
            );
            held = true;
            release.as_mut().reset(Instant::now() + max_hold);
            session.set_bfd_up(false).await;
        }
        if held && now.is_up() {
            tracing::info!(peer = %name, address = %session.peer(), "BFD session up: BGP may reconnect");
            held = false;
            session.set_bfd_up(true).await;
        }
        seen = now;
    }
}

#[cfg(test)]
mod tests;
