//! BFD metrics: `ferrolb_bfd_session_up{peer}` and
//! `ferrolb_bfd_state_transitions_total{peer,from,to}`.
use super::packet::State;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::net::IpAddr;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    peer: String,
    from: String,
    to: String,
}

/// The BFD metric families; clones share the values.
#[derive(Clone, Debug, Default)]
pub struct BfdMetrics {
    session_up: Family<PeerLabels, Gauge>,
    transitions: Family<TransitionLabels, Counter>,
}

impl BfdMetrics {
    /// New families, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = BfdMetrics::default();
        registry.register(
            "ferrolb_bfd_session_up",
            "1 while the BFD session with peer is Up",
            m.session_up.clone(),
        );
        registry.register(
            "ferrolb_bfd_state_transitions",
            "BFD session state changes by peer, old and new state",
            m.transitions.clone(),
        );
        m
    }

    pub(crate) fn set_up(&self, peer: IpAddr, up: bool) {
        self.session_up.get_or_create(&PeerLabels { peer: peer.to_string() }).set(i64::from(up));
    }

    /// Records a state change of the session with `peer`.
    pub fn transition(&self, peer: IpAddr, from: State, to: State) {
        let labels = TransitionLabels { peer: peer.to_string(), from: from.to_string(), to: to.to_string() };
        self.transitions.get_or_create(&labels).inc();
        self.set_up(peer, to == State::Up);
    }

    pub(crate) fn remove(&self, peer: IpAddr) {
        self.session_up.remove(&PeerLabels { peer: peer.to_string() });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn families_render_with_the_ferrolb_prefix() {
        let mut reg = Registry::default();
        let m = BfdMetrics::register(&mut reg);
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        m.transition(peer, State::Down, State::Init);
        m.transition(peer, State::Init, State::Up);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(text.contains("ferrolb_bfd_session_up{peer=\"192.0.2.1\"} 1"), "{text}");
        assert!(
            text.contains(
                "ferrolb_bfd_state_transitions_total{peer=\"192.0.2.1\",from=\"Init\",to=\"Up\"} 1"
            ),
            "{text}"
        );
        m.transition(peer, State::Up, State::Down);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(text.contains("ferrolb_bfd_session_up{peer=\"192.0.2.1\"} 0"), "{text}");
    }
}
