//! The node's interfaces as rtnetlink reports them, and which of them may answer for
//! an address. The table is pure data fed by link/address messages, so the policy is
//! unit-testable without a kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{InfoKind, LinkAttribute, LinkFlags, LinkInfo, LinkMessage};

use super::arp::Mac;

/// Where an owned address is announced.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum InterfaceChoice {
    /// The allowed interfaces whose subnet holds the address; all allowed interfaces
    /// when none does.
    #[default]
    Auto,
    /// Exactly these interfaces (by name), when they exist, are up and have a MAC.
    Named(BTreeSet<String>),
}

/// One interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Interface name.
    pub name: String,
    /// Ethernet address, if the link has one.
    pub mac: Option<Mac>,
    /// Administratively up.
    pub up: bool,
    /// The loopback device.
    pub loopback: bool,
    /// IFF_NOARP set.
    pub noarp: bool,
    /// IFF_SLAVE set (a bond port).
    pub bond_port: bool,
    /// The bridge/bond/VRF this link is a port of.
    pub controller: Option<u32>,
    /// rtnetlink link kind ("bridge", "bond", "veth", …).
    pub kind: Option<String>,
    /// Addresses with their prefixes.
    pub prefixes: BTreeSet<IpNet>,
}

impl Link {
    /// A plain up Ethernet link, for tests and tools.
    pub fn ethernet(index: u32, name: &str, mac: Mac) -> Link {
        Link {
            index,
            name: name.into(),
            mac: Some(mac),
            up: true,
            loopback: false,
            noarp: false,
            bond_port: false,
            controller: None,
            kind: None,
            prefixes: BTreeSet::new(),
        }
    }

    fn usable(&self) -> bool {
        self.up && !self.noarp && self.mac.is_some_and(|m| m != [0; 6])
    }
}

/// Every interface of the node, keyed by index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkTable {
    links: BTreeMap<u32, Link>,
}

impl LinkTable {
    /// Applies one rtnetlink message; returns whether anything changed.
    pub fn apply(&mut self, msg: &RouteNetlinkMessage) -> bool {
        let before = self.clone();
        match msg {
            RouteNetlinkMessage::NewLink(m) => self.upsert_link(m),
            RouteNetlinkMessage::DelLink(m) => {
                self.links.remove(&m.header.index);
            }
            RouteNetlinkMessage::NewAddress(m) => {
                if let Some((index, net)) = address(m)
                    && let Some(l) = self.links.get_mut(&index)
                {
                    l.prefixes.insert(net);
                }
            }
            RouteNetlinkMessage::DelAddress(m) => {
                if let Some((index, net)) = address(m)
                    && let Some(l) = self.links.get_mut(&index)
                {
                    l.prefixes.remove(&net);
                }
            }
            _ => {}
        }
        *self != before
    }

    /// Inserts or replaces a link from an RTM_NEWLINK (keeping its known addresses).
    pub fn upsert_link(&mut self, m: &LinkMessage) {
        let index = m.header.index;
        let flags = m.header.flags;
        let mut link = Link {
            index,
            name: String::new(),
            mac: None,
            up: flags.contains(LinkFlags::Up),
            loopback: flags.contains(LinkFlags::Loopback),
            noarp: flags.contains(LinkFlags::Noarp),
            bond_port: flags.contains(LinkFlags::Port),
            controller: None,
            kind: None,
            prefixes: self.links.get(&index).map(|l| l.prefixes.clone()).unwrap_or_default(),
        };
        for a in &m.attributes {
            match a {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Address(b) => link.mac = <Mac>::try_from(&b[..]).ok(),
                LinkAttribute::Controller(c) => link.controller = Some(*c),
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        if let LinkInfo::Kind(k) = i {
                            link.kind = Some(kind_name(k));
                        }
                    }
                }
                _ => {}
            }
        }
        self.links.insert(index, link);
    }

    /// Inserts a link as is (tests, tools).
    pub fn insert(&mut self, link: Link) {
        self.links.insert(link.index, link);
    }

    /// The link with this index.
    pub fn get(&self, index: u32) -> Option<&Link> {
        self.links.get(&index)
    }

    /// All links.
    pub fn iter(&self) -> impl Iterator<Item = &Link> {
        self.links.values()
    }

    /// The default policy: up, not loopback, ARP-capable with a MAC, not a port of a
    /// bridge or bond (the bridge or bond itself answers).
    pub fn default_allowed(&self, l: &Link) -> bool {
        if !l.usable() || l.loopback || l.bond_port {
            return false;
        }
        match l.controller.and_then(|c| self.links.get(&c)) {
            Some(c) => !matches!(c.kind.as_deref(), Some("bridge" | "bond" | "team")),
            // A controller we do not know (yet) is most likely a bridge: stay out.
            None => l.controller.is_none(),
        }
    }

    /// The links that answer for `addr` given the node's allow-list (None: the default
    /// policy) and the address's interface choice.
    pub fn interfaces_for(
        &self,
        addr: IpAddr,
        choice: &InterfaceChoice,
        allowed: Option<&BTreeSet<String>>,
    ) -> Vec<&Link> {
        let allowed_link = |l: &&Link| match allowed {
            Some(names) => names.contains(&l.name) && l.usable(),
            None => self.default_allowed(l),
        };
        match choice {
            InterfaceChoice::Named(names) => {
                self.links.values().filter(|l| names.contains(&l.name) && l.usable()).collect()
            }
            InterfaceChoice::Auto => {
                let candidates: Vec<&Link> = self.links.values().filter(allowed_link).collect();
                let on_subnet: Vec<&Link> = candidates
                    .iter()
                    .copied()
                    .filter(|l| l.prefixes.iter().any(|p| p.prefix_len() > 0 && p.contains(&addr)))
                    .collect();
                if on_subnet.is_empty() { candidates } else { on_subnet }
            }
        }
    }
}

fn address(m: &AddressMessage) -> Option<(u32, IpNet)> {
    // IFA_ADDRESS is the peer on point-to-point links; IFA_LOCAL, when present, is ours.
    let local = m.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    let addr = local.or_else(|| {
        m.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })?;
    let net = IpNet::new(addr, m.header.prefix_len).ok()?;
    Some((m.header.index, net))
}

fn kind_name(k: &InfoKind) -> String {
    match k {
        InfoKind::Bridge => "bridge".into(),
        InfoKind::Bond => "bond".into(),
        InfoKind::Veth => "veth".into(),
        InfoKind::Vlan => "vlan".into(),
        InfoKind::MacVlan => "macvlan".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> LinkTable {
        let mut t = LinkTable::default();
        let mut lo = Link::ethernet(1, "lo", [0; 6]);
        lo.loopback = true;
        t.insert(lo);
        let mut eth0 = Link::ethernet(2, "eth0", [2, 0, 0, 0, 0, 2]);
        eth0.prefixes.insert("192.0.2.11/24".parse().unwrap());
        t.insert(eth0);
        let mut eth1 = Link::ethernet(3, "eth1", [2, 0, 0, 0, 0, 3]);
        eth1.prefixes.insert("198.51.100.11/24".parse().unwrap());
        t.insert(eth1);
        let mut br = Link::ethernet(4, "br0", [2, 0, 0, 0, 0, 4]);
        br.kind = Some("bridge".into());
        t.insert(br);
        let mut port = Link::ethernet(5, "eth2", [2, 0, 0, 0, 0, 5]);
        port.controller = Some(4);
        t.insert(port);
        let mut slave = Link::ethernet(6, "eth3", [2, 0, 0, 0, 0, 6]);
        slave.bond_port = true;
        t.insert(slave);
        let mut down = Link::ethernet(7, "eth4", [2, 0, 0, 0, 0, 7]);
        down.up = false;
        t.insert(down);
        let mut noarp = Link::ethernet(8, "kube-ipvs0", [2, 0, 0, 0, 0, 8]);
        noarp.noarp = true;
        t.insert(noarp);
        t
    }

    fn names(v: Vec<&Link>) -> Vec<String> {
        v.into_iter().map(|l| l.name.clone()).collect()
    }

    #[test]
    fn default_policy_skips_loopback_ports_down_and_noarp() {
        let t = table();
        let all = names(t.interfaces_for("203.0.113.1".parse().unwrap(), &InterfaceChoice::Auto, None));
        assert_eq!(all, ["eth0", "eth1", "br0"]);
    }

    #[test]
    fn auto_prefers_the_interface_whose_subnet_holds_the_address() {
        let t = table();
        let v = names(t.interfaces_for("192.0.2.200".parse().unwrap(), &InterfaceChoice::Auto, None));
        assert_eq!(v, ["eth0"]);
    }

    #[test]
    fn explicit_allow_list_and_named_choice() {
        let t = table();
        let allow: BTreeSet<String> = ["eth1".to_string()].into();
        let v = names(t.interfaces_for("192.0.2.200".parse().unwrap(), &InterfaceChoice::Auto, Some(&allow)));
        assert_eq!(v, ["eth1"]);
        let named = InterfaceChoice::Named(["eth2".to_string(), "eth4".to_string()].into());
        let v = names(t.interfaces_for("192.0.2.200".parse().unwrap(), &named, None));
        assert_eq!(v, ["eth2"], "named choice is honoured but a down link never answers");
    }
}
