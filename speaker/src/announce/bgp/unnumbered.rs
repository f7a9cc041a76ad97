//! Unnumbered peering for the announcer: one router finder
//! ([`ferrolb_proto::bgp::unnumbered`]) per interface a BGPPeer names, and what each
//! found when the sessions were last built from it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv6Addr, SocketAddrV6};

use ferrolb_proto::bgp::unnumbered::RouterFinder;

/// The router finders of the interfaces BGPPeers name (`spec.interface`).
#[derive(Debug, Default)]
pub(super) struct Finders {
    by_interface: BTreeMap<String, RouterFinder>,
    /// What [`Finders::found`] last said per interface.
    used: BTreeMap<String, Option<SocketAddrV6>>,
}

impl Finders {
    /// Keeps a finder on each of `interfaces` (starting the missing ones) and drops the
    /// rest; returns the interfaces where none could start, with why.
    pub(super) fn keep(&mut self, interfaces: &BTreeSet<String>) -> BTreeMap<String, String> {
        self.by_interface.retain(|i, _| interfaces.contains(i));
        self.used.retain(|i, _| interfaces.contains(i));
        let mut failed = BTreeMap::new();
        for i in interfaces {
            if self.by_interface.contains_key(i) {
                continue;
            }
            match RouterFinder::spawn(i) {
                Ok(f) => {
                    tracing::info!(interface = %i, "unnumbered BGP: looking for the router on the link");
                    self.by_interface.insert(i.clone(), f);
                }
                Err(e) => {
                    failed.insert(i.clone(), e.to_string());
                }
            }
        }
        failed
    }

    /// The router found on `interface` (with the interface as its scope), remembered as
    /// what the sessions are built from.
    pub(super) fn found(&mut self, interface: &str) -> Option<SocketAddrV6> {
        let found = self.by_interface.get(interface).and_then(RouterFinder::found);
        self.used.insert(interface.to_owned(), found);
        found
    }

    /// Whether a finder found another router (or lost it) since the sessions were built.
    pub(super) fn changed(&self) -> bool {
        self.by_interface.iter().any(|(i, f)| self.used.get(i).is_none_or(|u| *u != f.found()))
    }
}

/// This node's IPv6 link-local address on `interface` (the source of BFD on the link).
pub(super) fn link_local_of(interface: &str) -> Option<Ipv6Addr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
        let v6 = a.address.as_ref()?.as_sockaddr_in6()?.ip();
        (a.interface_name == interface && v6.is_unicast_link_local()).then_some(v6)
    })
}
