//! BGP mode: every healthy member announces the VIP as a host route to its peers (ECMP
//! at the router), with the VIP on `lo`. Turning unhealthy re-announces the route with
//! GRACEFUL_SHUTDOWN (65535:0, RFC 8326), then withdraws it after the drain delay.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::settings::{NodeSide, peer_session_config, router_id};
use ferrolb_api::{BgpPeer, Community as ApiCommunity, ControlPlaneVip, ValidConfig};
use ferrolb_proto::bgp::session::{self, Routes, SessionConfig, SessionHandle};
use ferrolb_proto::bgp::socket::Password;
use ferrolb_proto::bgp::{Community, LargeCommunity, Origin, PathAttributes};
use ipnet::IpNet;
use kube::ResourceExt;
use tokio::time::Instant;

/// What the peers are told about the VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Nothing announced.
    Withdrawn,
    /// Announced with the configured communities.
    Announced,
    /// Announced with GRACEFUL_SHUTDOWN added, withdrawn at `until`.
    Draining {
        /// When the route is withdrawn.
        until: Instant,
    },
}

/// What the drain learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The health monitor's verdict changed (or was re-asserted).
    Health(bool),
    /// Shutting down: drain whatever is announced.
    Shutdown,
    /// [`Drain::poll_timeout`] passed.
    Timeout,
}

/// The announce/drain state machine of one node, sans IO: driven by [`Drain::handle`],
/// drained by [`Drain::poll_event`] (the phase to apply) and [`Drain::poll_timeout`]
/// (when to call `handle(now, Input::Timeout)`).
#[derive(Debug, Clone)]
pub struct Drain {
    phase: Phase,
    delay: Duration,
    change: Option<Phase>,
}

impl Drain {
    /// Starts withdrawn; `delay` is how long a draining route stays announced.
    pub fn new(delay: Duration) -> Self {
        Self { phase: Phase::Withdrawn, delay, change: None }
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Processes one input at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        let phase = match (self.phase, input) {
            (_, Input::Health(true)) => Phase::Announced,
            (Phase::Announced, Input::Health(false) | Input::Shutdown) => {
                Phase::Draining { until: now + self.delay }
            }
            // A drain that is due ends in a withdrawal.
            (Phase::Draining { until }, Input::Timeout) if now >= until => Phase::Withdrawn,
            (p, _) => p,
        };
        if phase != self.phase {
            self.phase = phase;
            self.change = Some(phase);
        }
    }

    /// The new phase, once after it changed (call after every [`Drain::handle`]).
    pub fn poll_event(&mut self) -> Option<Phase> {
        self.change.take()
    }

    /// When to call `handle(now, Input::Timeout)` next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Draining { until } => Some(until),
            _ => None,
        }
    }
}

/// Why a checkpoint cannot run in BGP mode; one line, names object and field.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BgpConfigError(pub String);

/// Session configs for every peer of the VIP.
pub fn session_configs(
    config: &ValidConfig,
    vip: &ControlPlaneVip,
    node: &str,
) -> Result<Vec<SessionConfig>, BgpConfigError> {
    let names = vip.spec.bgp.as_ref().map(|b| b.peers.clone()).unwrap_or_default();
    let member = vip
        .spec
        .members
        .iter()
        .find(|m| m.name == node)
        .and_then(|m| m.address.trim().parse::<IpAddr>().ok());
    let mut out = Vec::new();
    for name in names {
        let peer = config
            .peers
            .iter()
            .find(|p| p.name_any() == name)
            .ok_or_else(|| BgpConfigError(format!("BGPPeer {name:?} is not in the checkpoint")))?;
        out.push(session_config(peer, member)?);
    }
    Ok(out)
}

/// One peer's session through the speaker's translation of BGPPeer fields
/// ([`peer_session_config`]); bootstrap adds its own rules: no passive or unnumbered peers, the
/// router id defaulting to the member's IPv4 address, the password from `passwordFile`,
/// and the member's address as the next hop of its family for the other family's
/// session (an IPv6 VIP over an IPv4 session needs an IPv6 member address).
fn session_config(peer: &BgpPeer, member: Option<IpAddr>) -> Result<SessionConfig, BgpConfigError> {
    let name = peer.name_any();
    let s = &peer.spec;
    let err = |field: &str, what: String| BgpConfigError(format!("BGPPeer/{name}: {field}: {what}"));
    let member_v4 = match member {
        Some(IpAddr::V4(a)) => Some(a),
        _ => None,
    };
    let member_v6 = match member {
        Some(IpAddr::V6(a)) => Some(a),
        _ => None,
    };
    let router_id =
        router_id(&name, s, member_v4, "this member").map_err(|e| BgpConfigError(e.to_string()))?;
    if let Some(i) = &s.interface {
        return Err(err(
            "spec.interface",
            format!(
                "unnumbered peering ({i}) is the speaker's: bootstrap cannot wait for a router to \
                 advertise before the apiserver is reachable; set peerAddress to the router's address"
            ),
        ));
    }
    if s.passive {
        return Err(err(
            "spec.passive",
            "bootstrap only opens sessions (the node's port 179 belongs to the speaker); set passive: false"
                .into(),
        ));
    }
    let password = match &s.password_file {
        Some(file) => {
            let pw = std::fs::read_to_string(file)
                .map_err(|e| err("spec.passwordFile", format!("cannot read {file}: {e}")))?;
            Some(Password::new(pw.trim().to_owned()))
        }
        None => None,
    };
    // A new process: announce the restart (RFC 4724 §4.1); the VIP stays on `lo`
    // across a restart, so forwarding is preserved.
    let node = NodeSide { router_id, next_hop_v4: member_v4, next_hop_v6: member_v6, found: None };
    peer_session_config(&name, s, password, node, true, false).map_err(|e| BgpConfigError(e.to_string()))
}

/// The VIP route's attributes: configured communities, plus GRACEFUL_SHUTDOWN when draining.
pub fn attributes(vip: &ControlPlaneVip, draining: bool) -> PathAttributes {
    let mut a = PathAttributes { origin: Some(Origin::Igp), ..Default::default() };
    for c in vip.spec.bgp.iter().flat_map(|b| b.communities.iter()) {
        match c.parse::<ApiCommunity>() {
            Ok(ApiCommunity::Standard(x, y)) => a.communities.push(Community::new(x, y)),
            Ok(ApiCommunity::Large(g, l1, l2)) => {
                a.large_communities.push(LargeCommunity { global: g, local1: l1, local2: l2 })
            }
            Err(_) => {} // the validator rejected these already
        }
    }
    if draining && !a.communities.contains(&Community::GRACEFUL_SHUTDOWN) {
        a.communities.push(Community::GRACEFUL_SHUTDOWN);
    }
    a
}

/// The running BGP side: one session per peer, all fed the same routes.
#[derive(Debug)]
pub struct Announcer {
    sessions: Vec<SessionHandle>,
    prefix: IpNet,
    normal: Arc<PathAttributes>,
    draining: Arc<PathAttributes>,
}

impl Announcer {
    /// Starts the sessions (call within a tokio runtime).
    pub fn start(configs: Vec<SessionConfig>, vip: &ControlPlaneVip, ip: IpAddr) -> Self {
        let sessions = configs.into_iter().map(session::spawn).collect();
        Self {
            sessions,
            prefix: IpNet::from(ip),
            normal: Arc::new(attributes(vip, false)),
            draining: Arc::new(attributes(vip, true)),
        }
    }

    /// Makes every session announce what `phase` says.
    pub fn apply(&self, phase: Phase) {
        let mut routes = Routes::new();
        match phase {
            Phase::Withdrawn => {}
            Phase::Announced => {
                routes.insert(self.prefix, self.normal.clone());
            }
            Phase::Draining { .. } => {
                routes.insert(self.prefix, self.draining.clone());
            }
        }
        for s in &self.sessions {
            s.set_desired(routes.clone());
        }
    }

    /// Peers whose session is Established.
    pub fn established(&self) -> BTreeMap<IpAddr, bool> {
        self.sessions.iter().map(|s| (s.peer(), s.status().is_up())).collect()
    }

    /// Closes every session with Cease / administrative shutdown.
    pub async fn shutdown(self) {
        for s in &self.sessions {
            s.shutdown(2).await;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn unhealthy_drains_then_withdraws() {
        let t0 = Instant::now();
        let d5 = Duration::from_secs(5);
        let mut d = Drain::new(d5);
        assert_eq!(d.phase(), Phase::Withdrawn);
        d.handle(t0, Input::Health(false));
        assert_eq!(d.phase(), Phase::Withdrawn, "never announced, nothing to drain");
        d.handle(t0, Input::Health(true));
        assert_eq!(d.phase(), Phase::Announced);
        let t1 = t0 + Duration::from_secs(10);
        d.handle(t1, Input::Health(false));
        assert_eq!(d.phase(), Phase::Draining { until: t1 + d5 });
        // Re-asserting unhealthy does not push the deadline.
        d.handle(t1 + Duration::from_secs(1), Input::Health(false));
        assert_eq!(d.poll_timeout(), Some(t1 + d5));
        d.handle(t1 + Duration::from_secs(4), Input::Timeout);
        assert!(matches!(d.phase(), Phase::Draining { .. }));
        d.handle(t1 + d5, Input::Timeout);
        assert_eq!(d.phase(), Phase::Withdrawn);
        assert_eq!(d.poll_timeout(), None);
    }

    #[test]
    fn healthy_again_while_draining_announces_at_once() {
        let t0 = Instant::now();
        let mut d = Drain::new(Duration::from_secs(5));
        d.handle(t0, Input::Health(true));
        d.handle(t0, Input::Health(false));
        d.handle(t0 + Duration::from_secs(1), Input::Health(true));
        assert_eq!(d.phase(), Phase::Announced);
    }

    #[test]
    fn shutdown_drains_only_what_is_announced() {
        let t0 = Instant::now();
        let mut d = Drain::new(Duration::from_secs(2));
        d.handle(t0, Input::Shutdown);
        assert_eq!(d.phase(), Phase::Withdrawn);
        d.handle(t0, Input::Health(true));
        d.handle(t0, Input::Shutdown);
        assert_eq!(d.phase(), Phase::Draining { until: t0 + Duration::from_secs(2) });
    }

    fn checkpoint(peer_spec: &str, member: &str) -> (ValidConfig, ControlPlaneVip) {
        let text = format!(
            "apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {{name: router-a}}
spec: {peer_spec}
---
apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata: {{name: apiserver}}
spec:
  address: 2001:db8:3::100
  mode: BGP
  members: [{{name: node1, address: \"{member}\"}}]
  bgp: {{peers: [router-a]}}
"
        );
        let config = ferrolb_api::parse_stream("cp", &text).unwrap().validated_config("cp").unwrap();
        let vip = config.control_plane_vips[0].clone();
        (config, vip)
    }

    #[test]
    fn peer_fields_reach_the_session_through_the_speakers_translation() {
        let (config, vip) = checkpoint(
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, holdTime: 9s, keepaliveTime: 3s, connectTime: 1s, gracefulRestart: {enabled: true, restartTime: 60s}}",
            "192.0.2.11",
        );
        let c = session_configs(&config, &vip, "node1").unwrap().remove(0);
        assert_eq!(c.peer_addr, "192.0.2.1:179".parse().unwrap());
        assert_eq!((c.peer.hold_time, c.peer.keepalive_time), (9, Some(3)));
        assert_eq!(c.peer.connect_retry, Duration::from_secs(1));
        assert_eq!(c.peer.router_id, "192.0.2.11".parse::<std::net::Ipv4Addr>().unwrap());
        let gr = c.peer.graceful_restart.unwrap();
        assert!(gr.restarting, "a new process announces its restart");
        assert_eq!(gr.restart_time, 60);
        assert!(!c.peer.passive);
    }

    #[test]
    fn an_ipv6_member_is_the_ipv6_next_hop_over_an_ipv4_session() {
        let (config, vip) = checkpoint(
            "{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, routerID: 192.0.2.11}",
            "2001:db8::11",
        );
        let c = session_configs(&config, &vip, "node1").unwrap().remove(0);
        assert_eq!(c.export.next_hop_v6, Some("2001:db8::11".parse().unwrap()));
    }

    #[test]
    fn passive_peers_and_missing_router_ids_are_refused_naming_the_field() {
        let (config, vip) =
            checkpoint("{myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, passive: true}", "192.0.2.11");
        let e = session_configs(&config, &vip, "node1").unwrap_err().to_string();
        assert!(e.contains("BGPPeer/router-a: spec.passive"), "{e}");
        let (config, vip) =
            checkpoint("{myASN: 64513, peerASN: 64512, peerAddress: \"2001:db8::1\"}", "2001:db8::11");
        let e = session_configs(&config, &vip, "node1").unwrap_err().to_string();
        assert!(e.contains("BGPPeer/router-a: spec.routerID"), "{e}");
    }

    #[test]
    fn draining_attributes_add_graceful_shutdown_once() {
        let mut vip =
            ControlPlaneVip::new("apiserver", ferrolb_api::ControlPlaneVipSpec::new("203.0.113.100"));
        vip.spec.bgp = Some(ferrolb_api::ControlPlaneVipBgp {
            peers: vec!["r".into()],
            communities: vec!["64512:7".into(), "large:1:2:3".into()],
        });
        let a = attributes(&vip, false);
        assert_eq!(a.communities, vec![Community::new(64512, 7)]);
        assert_eq!(a.large_communities, vec![LargeCommunity { global: 1, local1: 2, local2: 3 }]);
        let g = attributes(&vip, true);
        assert_eq!(g.communities, vec![Community::new(64512, 7), Community::GRACEFUL_SHUTDOWN]);
    }
}
