//! The session machine (FSM and RIB-Out) against a plain FSM, in memory: UPDATEs leave
//! through its `poll_transmit` once the session is up, with the connection's address as
//! next hop, and a ROUTE-REFRESH is answered the same way.
use crate::bgp::fsm::{self, ConnId, Fsm, PeerConfig, State};
use crate::bgp::message::RouteRefresh;
use crate::bgp::rib_out::ExportConfig;
use crate::bgp::session::Routes;
use crate::bgp::session::machine::{Input, Machine};
use crate::bgp::*;
use ipnet::IpNet;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

const CONN: ConnId = ConnId(1);
const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn routes() -> Arc<Routes> {
    let attrs = Arc::new(PathAttributes::default());
    Arc::new(
        ["198.51.100.10/32", "198.51.100.11/32"]
            .iter()
            .map(|p| (p.parse::<IpNet>().expect("prefix"), attrs.clone()))
            .collect(),
    )
}

struct Bed {
    now: Instant,
    machine: Machine,
    router: Fsm,
    /// UPDATEs the router was sent.
    updates: Vec<Update>,
}

impl Bed {
    fn new() -> Self {
        let mine = PeerConfig::new(65001, 65002, LOCAL);
        let export = ExportConfig {
            local_as: 65001,
            ebgp: true,
            next_hop_v4: None,
            next_hop_v6: None,
            next_hop_v6_link_local: None,
        };
        let mut router = PeerConfig::new(65002, 65001, Ipv4Addr::new(192, 0, 2, 2));
        router.passive = true;
        Bed {
            now: Instant::now(),
            machine: Machine::new(mine, export),
            router: Fsm::new(router),
            updates: Vec::new(),
        }
    }

    /// Delivers everything both sides want to send until both are quiet.
    fn exchange(&mut self) {
        loop {
            let mut moved = false;
            while let Some(t) = self.machine.poll_transmit() {
                if let Message::Update(u) = &t.message {
                    self.updates.push(u.clone());
                }
                self.router.handle(self.now, fsm::Input::Message(CONN, t.message));
                moved = true;
            }
            while let Some(t) = self.router.poll_transmit() {
                self.machine.handle(self.now, Input::Fsm(fsm::Input::Message(CONN, t.message)));
                moved = true;
            }
            while self.machine.poll_event().is_some() {}
            while self.router.poll_event().is_some() {}
            if !moved {
                return;
            }
        }
    }

    fn up(&mut self) {
        self.machine.handle(self.now, Input::Fsm(fsm::Input::ManualStart));
        self.router.handle(self.now, fsm::Input::ManualStart);
        self.machine.handle(self.now, Input::Local(CONN, SocketAddr::new(LOCAL.into(), 40179)));
        self.machine.handle(self.now, Input::Fsm(fsm::Input::TcpCrAcked(CONN)));
        self.router.handle(self.now, fsm::Input::TcpConnectionConfirmed(CONN));
        self.exchange();
        assert_eq!(self.machine.fsm().state(), State::Established);
        assert_eq!(self.router.state(), State::Established);
    }

    fn announced(&self) -> Vec<String> {
        self.updates.iter().flat_map(Update::announced).map(|p| p.to_string()).collect()
    }
}

/// Routes given before the session is up go out when it comes up, from the machine's
/// own `poll_transmit`, with the connection's address as next hop; a change goes out at
/// once; a ROUTE-REFRESH is answered with the family again.
#[test]
fn updates_and_route_refresh_leave_through_the_machine() {
    let mut b = Bed::new();
    b.machine.handle(b.now, Input::Routes(routes()));
    assert!(b.machine.poll_transmit().is_none(), "nothing before the session is up");
    b.up();
    assert_eq!(b.announced(), ["198.51.100.10/32", "198.51.100.11/32"]);
    assert!(b.updates.iter().filter(|u| !u.nlri.is_empty()).all(|u| u.attributes.next_hop == Some(LOCAL)));
    assert!(b.machine.take_synced());
    assert_eq!(b.machine.advertised(), 2);

    b.updates.clear();
    let mut fewer = (*routes()).clone();
    fewer.remove(&"198.51.100.11/32".parse::<IpNet>().expect("prefix"));
    b.machine.handle(b.now, Input::Routes(Arc::new(fewer)));
    b.exchange();
    let withdrawn: Vec<String> =
        b.updates.iter().flat_map(Update::withdrawn_prefixes).map(|p| p.to_string()).collect();
    assert_eq!(withdrawn, ["198.51.100.11/32"]);
    assert!(b.announced().is_empty());

    b.updates.clear();
    let refresh = RouteRefresh { family: Family::IPV4_UNICAST, subtype: 0 };
    b.machine.handle(b.now, Input::Fsm(fsm::Input::Message(CONN, Message::RouteRefresh(refresh))));
    b.exchange();
    assert_eq!(b.announced(), ["198.51.100.10/32"], "the family advertised again");
}
