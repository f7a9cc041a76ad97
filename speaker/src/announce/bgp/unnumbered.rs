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
    /// Only interfaces the sessions were built from count: one whose peers' settings
    /// failed is replanned by the change that fixes them, not on every tick.
    pub(super) fn changed(&self) -> bool {
        moved(&self.used, |i| self.by_interface.get(i).and_then(RouterFinder::found))
    }
}

/// Whether any interface in `used` now finds another router than the one recorded.
fn moved(
    used: &BTreeMap<String, Option<SocketAddrV6>>,
    found_now: impl Fn(&str) -> Option<SocketAddrV6>,
) -> bool {
    used.iter().any(|(i, u)| found_now(i) != *u)
}

/// This node's IPv6 link-local address on `interface` (the source of BFD on the link).
pub(super) fn link_local_of(interface: &str) -> Option<Ipv6Addr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|a| {
        let v6 = a.address.as_ref()?.as_sockaddr_in6()?.ip();
        (a.interface_name == interface && v6.is_unicast_link_local()).then_some(v6)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(last: u16) -> SocketAddrV6 {
        SocketAddrV6::new(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, last), 179, 0, 7)
    }

    #[test]
    fn a_router_found_lost_or_replaced_is_a_change() {
        let used = BTreeMap::from([("swp1".to_owned(), Some(router(1)))]);
        assert!(!moved(&used, |_| Some(router(1))));
        assert!(moved(&used, |_| Some(router(2))));
        assert!(moved(&used, |_| None));
        let unheard = BTreeMap::from([("swp1".to_owned(), None)]);
        assert!(moved(&unheard, |_| Some(router(1))));
    }

    #[test]
    fn an_interface_whose_peers_were_never_built_is_not_a_change_every_tick() {
        // A BGPPeer on swp2 whose settings fail (say, a missing BFDProfile) keeps the
        // finder running but never records what it found: that is not a change.
        let used = BTreeMap::from([("swp1".to_owned(), Some(router(1)))]);
        let found_now = |i: &str| Some(router(if i == "swp1" { 1 } else { 9 }));
        assert!(!moved(&used, found_now));
        assert!(!moved(&BTreeMap::new(), found_now));
    }
}
