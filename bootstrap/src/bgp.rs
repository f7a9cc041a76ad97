//! BGP mode: every healthy member announces the VIP as a host route to its peers (ECMP
//! at the router), with the VIP on `lo`. Turning unhealthy re-announces the route with
//! GRACEFUL_SHUTDOWN (65535:0, RFC 8326), then withdraws it after the drain delay.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::{AddressFamily, BgpPeer, Community as ApiCommunity, ControlPlaneVip, ValidConfig};
use ferrolb_speaker::bgp::fsm::{GracefulRestartConfig, PeerConfig};
use ferrolb_speaker::bgp::session::{self, Routes, SessionConfig, SessionHandle};
use ferrolb_speaker::bgp::socket::Password;
use ferrolb_speaker::bgp::{Community, Family, LargeCommunity, Origin, PathAttributes};
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

/// Pure announce/drain state machine of one node.
#[derive(Debug, Clone)]
pub struct Drain {
    phase: Phase,
    delay: Duration,
}

impl Drain {
    /// Starts withdrawn; `delay` is how long a draining route stays announced.
    pub fn new(delay: Duration) -> Self {
        Self { phase: Phase::Withdrawn, delay }
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Health changed (or was re-asserted) at `now`.
    pub fn set_healthy(&mut self, now: Instant, healthy: bool) {
        self.phase = match (self.phase, healthy) {
            (_, true) => Phase::Announced,
            (Phase::Announced, false) => Phase::Draining { until: now + self.delay },
            (p, false) => p,
        };
    }

    /// Shutting down: drain whatever is announced.
    pub fn shutdown(&mut self, now: Instant) {
        if self.phase == Phase::Announced {
            self.phase = Phase::Draining { until: now + self.delay };
        }
    }

    /// When [`Self::handle_timeout`] must run next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Draining { until } => Some(until),
            _ => None,
        }
    }

    /// Time passed: a drain that is due ends in a withdrawal.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Phase::Draining { until } = self.phase
            && now >= until
        {
            self.phase = Phase::Withdrawn;
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
    let member_v4 = vip
        .spec
        .members
        .iter()
        .find(|m| m.name == node)
        .and_then(|m| m.address.trim().parse::<Ipv4Addr>().ok());
    let mut out = Vec::new();
    for name in names {
        let peer = config
            .peers
            .iter()
            .find(|p| p.name_any() == name)
            .ok_or_else(|| BgpConfigError(format!("BGPPeer {name:?} is not in the checkpoint")))?;
        out.push(session_config(peer, member_v4)?);
    }
    Ok(out)
}

fn session_config(peer: &BgpPeer, member_v4: Option<Ipv4Addr>) -> Result<SessionConfig, BgpConfigError> {
    let name = peer.name_any();
    let s = &peer.spec;
    let err = |field: &str, what: String| BgpConfigError(format!("BGPPeer/{name}: {field}: {what}"));
    let peer_ip: IpAddr =
        s.peer_address.trim().parse().map_err(|_| err("spec.peerAddress", "not an IP address".into()))?;
    let source: Option<IpAddr> = match &s.source_address {
        Some(a) => Some(a.trim().parse().map_err(|_| err("spec.sourceAddress", "not an IP address".into()))?),
        None => None,
    };
    let router_id: Ipv4Addr = match &s.router_id {
        Some(r) => r.trim().parse().map_err(|_| err("spec.routerID", "not an IPv4 address".into()))?,
        None => member_v4
            .or(match source {
                Some(IpAddr::V4(a)) => Some(a),
                _ => None,
            })
            .ok_or_else(|| {
                err(
                    "spec.routerID",
                    "no default: this node has no IPv4 member address; set routerID or an IPv4 sourceAddress"
                        .into(),
                )
            })?,
    };
    if s.passive {
        return Err(err(
            "spec.passive",
            "bootstrap only opens sessions (the node's port 179 belongs to the speaker); set passive: false"
                .into(),
        ));
    }
    let mut p = PeerConfig::new(s.my_asn, s.peer_asn, router_id);
    let secs = |d: Result<ferrolb_api::Duration, _>, field: &str| -> Result<u16, BgpConfigError> {
        let d: ferrolb_api::Duration =
            d.map_err(|e: ferrolb_api::DurationError| err(field, e.to_string()))?;
        u16::try_from(d.std().as_secs()).map_err(|_| err(field, "too long".into()))
    };
    p.hold_time = secs(s.hold_time.parse(), "spec.holdTime")?;
    if s.keepalive_time.is_some() {
        p.keepalive_time = Some(secs(peer.spec.keepalive_time(), "spec.keepaliveTime")?);
    }
    p.connect_retry =
        s.connect_time().map(|d| d.std()).map_err(|e| err("spec.connectTime", e.to_string()))?;
    p.families = s
        .address_families
        .iter()
        .map(|f| match f {
            AddressFamily::Ipv4Unicast => Family::IPV4_UNICAST,
            AddressFamily::Ipv6Unicast => Family::IPV6_UNICAST,
        })
        .collect();
    if let Some(gr) = &s.graceful_restart
        && gr.enabled
    {
        let t = secs(gr.restart_time(), "spec.gracefulRestart.restartTime")?;
        p.graceful_restart = Some(GracefulRestartConfig {
            restart_time: t.min(4095),
            restarting: true,
            forwarding_preserved: false,
        });
    }
    let mut c = SessionConfig::new(p, SocketAddr::new(peer_ip, s.peer_port));
    c.local_addr = source;
    c.ebgp_multihop = s.ebgp_multi_hop;
    if let Some(file) = &s.password_file {
        let pw = std::fs::read_to_string(file)
            .map_err(|e| err("spec.passwordFile", format!("cannot read {file}: {e}")))?;
        c.password = Some(Password::new(pw.trim().to_owned()));
    }
    Ok(c)
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
        d.set_healthy(t0, false);
        assert_eq!(d.phase(), Phase::Withdrawn, "never announced, nothing to drain");
        d.set_healthy(t0, true);
        assert_eq!(d.phase(), Phase::Announced);
        let t1 = t0 + Duration::from_secs(10);
        d.set_healthy(t1, false);
        assert_eq!(d.phase(), Phase::Draining { until: t1 + d5 });
        // Re-asserting unhealthy does not push the deadline.
        d.set_healthy(t1 + Duration::from_secs(1), false);
        assert_eq!(d.poll_timeout(), Some(t1 + d5));
        d.handle_timeout(t1 + Duration::from_secs(4));
        assert!(matches!(d.phase(), Phase::Draining { .. }));
        d.handle_timeout(t1 + d5);
        assert_eq!(d.phase(), Phase::Withdrawn);
        assert_eq!(d.poll_timeout(), None);
    }

    #[test]
    fn healthy_again_while_draining_announces_at_once() {
        let t0 = Instant::now();
        let mut d = Drain::new(Duration::from_secs(5));
        d.set_healthy(t0, true);
        d.set_healthy(t0, false);
        d.set_healthy(t0 + Duration::from_secs(1), true);
        assert_eq!(d.phase(), Phase::Announced);
    }

    #[test]
    fn shutdown_drains_only_what_is_announced() {
        let t0 = Instant::now();
        let mut d = Drain::new(Duration::from_secs(2));
        d.shutdown(t0);
        assert_eq!(d.phase(), Phase::Withdrawn);
        d.set_healthy(t0, true);
        d.shutdown(t0);
        assert_eq!(d.phase(), Phase::Draining { until: t0 + Duration::from_secs(2) });
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
