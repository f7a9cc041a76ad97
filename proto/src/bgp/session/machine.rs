//! One BGP session, sans-IO: the RFC 4271 [`Fsm`] and the [`RibOut`] behind one
//! `handle`. UPDATEs and ROUTE-REFRESH answers leave through [`Machine::poll_transmit`]
//! like every other message, so the driver only moves bytes and keeps the clock.
//!
//! Inputs ([`Input`]): the FSM's events, a connection's local address (its next hops
//! default to it), and the routes to advertise. Outputs: [`Machine::poll_transmit`],
//! [`Machine::poll_event`] (the FSM's events), [`Machine::poll_timeout`], and
//! [`Machine::take_synced`] once the UPDATEs of a sync are queued.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use imbl::ordmap::DiffItem;
use ipnet::IpNet;

use super::Routes;
use crate::bgp::fsm::{self, ConnId, Event, Fsm, PeerConfig, State, Transmit};
use crate::bgp::message::Message;
use crate::bgp::rib_out::{ExportConfig, RibOut};

/// An input at an instant.
// FSM inputs (messages) dominate; boxing them would allocate per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Input {
    /// An RFC 4271 event for the FSM.
    Fsm(fsm::Input),
    /// The local address of connection `0`, given before its first FSM input.
    Local(ConnId, SocketAddr),
    /// The routes to advertise from now on.
    Routes(Arc<Routes>),
}

/// One session's FSM and RIB-Out.
#[derive(Debug)]
pub struct Machine {
    fsm: Fsm,
    rib: RibOut,
    /// The configured export settings; next hops left unset take the connection's.
    export: ExportConfig,
    locals: HashMap<ConnId, SocketAddr>,
    routes: Arc<Routes>,
    /// Whether the RIB-Out was last synced to `routes` and nothing since made it forget
    /// (session down, ROUTE-REFRESH): new routes then need only their differences looked at.
    rib_current: bool,
    transmit: VecDeque<Transmit>,
    events: VecDeque<Event>,
    synced: bool,
}

impl Machine {
    /// A session in Idle advertising nothing.
    pub fn new(peer: PeerConfig, export: ExportConfig) -> Self {
        Machine {
            fsm: Fsm::new(peer),
            rib: RibOut::new(export.clone()),
            export,
            locals: HashMap::new(),
            routes: Arc::default(),
            rib_current: false,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            synced: false,
        }
    }

    /// Feeds one input at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        match input {
            Input::Local(id, local) => {
                self.locals.insert(id, local);
            }
            Input::Routes(routes) => {
                // Nodes both versions share are skipped: a new version made from the last
                // one by a few changes costs those few.
                let changed = self.rib_current.then(|| {
                    self.routes
                        .diff(&routes)
                        .map(|d| match d {
                            DiffItem::Add(p, _) | DiffItem::Remove(p, _) => *p,
                            DiffItem::Update { new: (p, _), .. } => *p,
                        })
                        .collect::<BTreeSet<IpNet>>()
                });
                self.routes = routes;
                self.sync_changed(changed.as_ref());
            }
            Input::Fsm(input) => {
                let refresh = match &input {
                    fsm::Input::Message(_, Message::RouteRefresh(rr))
                        if self.fsm.state() == State::Established =>
                    {
                        Some(rr.family)
                    }
                    _ => None,
                };
                if let Some(family) = refresh {
                    self.rib.refresh(family);
                    self.rib_current = false;
                    self.sync();
                }
                if let fsm::Input::TcpConnectionFails(id) = &input {
                    self.locals.remove(id);
                }
                self.fsm.handle(now, input);
                self.drain_fsm();
            }
        }
    }

    /// Moves the FSM's messages and events out, acting on session up and down.
    fn drain_fsm(&mut self) {
        while let Some(t) = self.fsm.poll_transmit() {
            self.transmit.push_back(t);
        }
        while let Some(ev) = self.fsm.poll_event() {
            match &ev {
                Event::SessionUp(n) => {
                    let local = self.locals.get(&n.conn).copied();
                    self.rib.set_export(export_for(&self.export, local));
                    self.rib.session_up(n);
                    self.events.push_back(ev);
                    self.sync();
                    continue;
                }
                Event::SessionDown(_) => {
                    self.rib.session_down();
                    self.rib_current = false;
                }
                Event::Close(id) => {
                    self.locals.remove(id);
                }
                _ => {}
            }
            self.events.push_back(ev);
        }
    }

    /// Queues the UPDATEs taking the peer to the routes (nothing unless Established).
    fn sync(&mut self) {
        self.sync_changed(None);
    }

    /// [`Machine::sync`], looking only at `changed` when given (the RIB-Out is current
    /// but for those).
    fn sync_changed(&mut self, changed: Option<&BTreeSet<IpNet>>) {
        let Some(conn) = self.fsm.negotiated().map(|n| n.conn) else { return };
        if self.fsm.state() != State::Established {
            return;
        }
        let updates = match changed {
            Some(c) => self.rib.sync_changed(&self.routes, c),
            None => self.rib.sync(&self.routes),
        };
        for u in updates {
            self.transmit.push_back(Transmit { conn, message: Message::Update(u) });
        }
        self.rib_current = true;
        self.synced = true;
    }

    /// The next message to write.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmit.pop_front()
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When to feed [`fsm::Input::Timeout`].
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.fsm.poll_timeout()
    }

    /// True once after a sync queued its UPDATEs: when they are written, the peer has
    /// been sent [`Machine::advertised_prefixes`].
    pub fn take_synced(&mut self) -> bool {
        std::mem::take(&mut self.synced)
    }

    /// The FSM (state, negotiated parameters, back-off).
    pub fn fsm(&self) -> &Fsm {
        &self.fsm
    }

    /// The prefixes the RIB-Out has sent UPDATEs for.
    pub fn advertised_prefixes(&self) -> &super::Prefixes {
        self.rib.advertised_prefixes()
    }

    /// How many prefixes are advertised.
    pub fn advertised(&self) -> usize {
        self.rib.advertised()
    }
}

/// Export settings with next hops defaulting to the connection's local address.
fn export_for(configured: &ExportConfig, local: Option<SocketAddr>) -> ExportConfig {
    let mut e = configured.clone();
    match local.map(|a| a.ip()) {
        Some(IpAddr::V4(a)) if e.next_hop_v4.is_none() => e.next_hop_v4 = Some(a),
        Some(IpAddr::V6(a)) => {
            if let Some(v4) = a.to_ipv4_mapped() {
                e.next_hop_v4 = e.next_hop_v4.or(Some(v4));
            } else {
                e.next_hop_v6 = e.next_hop_v6.or(Some(a));
            }
        }
        _ => {}
    }
    e
}
