//! The fixed addressing of every lab (documentation ranges only).
//!
//! ```text
//!                       LAN segment 192.0.2.0/24, 2001:db8::/64 (bridge br0 in ns "sw")
//!   ┌──────────┬────────────┬────────────┬─────────────┐
//!   r1 eth0    node1 eth0   node2 eth0   …  nodeN      client eth0
//!   .1  ::1    .11  ::11    .12  ::12       .1N ::1N   .100 ::100
//!   r1 eth1 ─────── routed link 198.51.100.0/24, 2001:db8:1::/64 ─────── client eth1
//!   .1  ::1                                                              .100 ::100
//! ```
//!
//! A lab may also have on-link clients `lan1`, `lan2`, … (`LabConfig::lan_clients`) on the
//! LAN at .101, .102, … (::101, …), with no route through r1.
//!
//! MAC addresses come from the RFC 7042 documentation block 00:00:5e:00:53:00/24.
//! The client routes the BGP service ranges (203.0.113.0/24, 2001:db8:3::/64) and the
//! bulk range 198.18.0.0/15 through r1's routed link; nodes route the routed link back
//! through r1. There is no default route anywhere and no link to the host namespace.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The LAN segment, IPv4.
pub const LAN_V4: &str = "192.0.2.0/24";
/// The LAN segment, IPv6.
pub const LAN_V6: &str = "2001:db8::/64";
/// The routed router↔client link, IPv4.
pub const LINK_V4: &str = "198.51.100.0/24";
/// The routed router↔client link, IPv6.
pub const LINK_V6: &str = "2001:db8:1::/64";
/// Service addresses announced by BGP, IPv4.
pub const BGP_POOL_V4: &str = "203.0.113.0/24";
/// Service addresses announced by BGP, IPv6.
pub const BGP_POOL_V6: &str = "2001:db8:3::/64";
/// Bulk prefixes for scale benchmarks.
pub const BULK_V4: &str = "198.18.0.0/15";
/// The ClusterIPs, IPv4 (the first of the cluster's service CIDRs).
pub const SERVICES_V4: &str = "198.19.240.0/20";
/// Pod addresses of the real kubelets' pods that are not hostNetwork (a /24 per node,
/// [`node_pod_v4`]), below the ClusterIPs (198.19.240.0/20) at the top of the bulk range.
pub const POD_V4: &str = "198.19.224.0/20";
/// First and last L2 VIP (on the LAN), IPv4.
pub const L2_POOL_V4: (&str, &str) = ("192.0.2.200", "192.0.2.250");
/// First and last L2 VIP (on the LAN), IPv6.
pub const L2_POOL_V6: (&str, &str) = ("2001:db8::200", "2001:db8::250");

/// The router's ASN.
pub const ROUTER_ASN: u32 = 64512;
/// The nodes' (speakers') ASN for eBGP.
pub const NODE_ASN: u32 = 64513;

/// r1's LAN address, IPv4.
pub const ROUTER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// r1's LAN address, IPv6.
pub const ROUTER_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
/// r1's routed-link address, IPv4.
pub const ROUTER_LINK_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// r1's routed-link address, IPv6.
pub const ROUTER_LINK_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
/// The client's LAN address, IPv4.
pub const CLIENT_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
/// The client's LAN address, IPv6.
pub const CLIENT_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x100);
/// The client's routed-link address, IPv4.
pub const CLIENT_LINK_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 100);
/// The client's routed-link address, IPv6.
pub const CLIENT_LINK_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x100);

/// r1's LAN MAC.
pub const ROUTER_MAC: &str = "00:00:5e:00:53:01";
/// r1's routed-link MAC.
pub const ROUTER_LINK_MAC: &str = "00:00:5e:00:53:02";
/// The client's LAN MAC.
pub const CLIENT_MAC: &str = "00:00:5e:00:53:c1";
/// The client's routed-link MAC.
pub const CLIENT_LINK_MAC: &str = "00:00:5e:00:53:c2";

/// Most nodes a lab can have (addresses .11 – .19).
pub const MAX_NODES: usize = 9;

/// Node `i`'s (1-based) LAN address, IPv4: 192.0.2.1i.
pub fn node_v4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 10 + node_index(i))
}

/// Node `i`'s (1-based) pod subnet in [`POD_V4`]: 198.19.(224+i).0/24.
pub fn node_pod_v4(i: usize) -> String {
    format!("198.19.{}.0/24", 224 + i)
}

/// Node `i`'s (1-based) LAN address, IPv6: 2001:db8::1i.
pub fn node_v6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10 + u16::from(node_index(i)))
}

/// Node `i`'s (1-based) LAN MAC: 00:00:5e:00:53:1i.
pub fn node_mac(i: usize) -> String {
    format!("00:00:5e:00:53:{:02x}", 0x10 + node_index(i))
}

/// On-link clients a lab may have besides the client.
pub const MAX_LAN_CLIENTS: usize = 9;

/// On-link client `k`'s (1-based) IPv4 address: 192.0.2.10`k`, beside the client's .100.
pub fn lan_client_v4(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(192, 0, 2, 100 + k.clamp(1, MAX_LAN_CLIENTS) as u8)
}

/// On-link client `k`'s IPv6 address: 2001:db8::10`k`.
pub fn lan_client_v6(k: usize) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x100 + k.clamp(1, MAX_LAN_CLIENTS) as u16)
}

/// On-link client `k`'s MAC.
pub fn lan_client_mac(k: usize) -> String {
    format!("00:00:5e:00:53:{:02x}", 0xd0 + k.clamp(1, MAX_LAN_CLIENTS))
}

/// Node `i`'s name inside the lab ("node1", …).
pub fn node_name(i: usize) -> String {
    format!("node{i}")
}

/// Node `i`'s IPv4 LAN address as an [`IpAddr`].
pub fn node_ip(i: usize) -> IpAddr {
    node_v4(i).into()
}

/// Node `i`'s IPv6 LAN address as an [`IpAddr`].
pub fn node_ip6(i: usize) -> IpAddr {
    node_v6(i).into()
}

/// An address of the LAN (192.0.2.0/24): 192.0.2.`last`.
pub fn lan_v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, last))
}

/// An address of the LAN (2001:db8::/64): 2001:db8::`last` (hex digits as written).
pub fn lan_v6(last: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last))
}

/// The node among `members` (lab indexes) that ferrolb's election picks for `vip`
/// (0 only when `members` is empty).
pub fn owner(vip: IpAddr, members: &[usize]) -> usize {
    let names: Vec<String> = members.iter().map(|i| node_name(*i)).collect();
    let winner = ferrolb_proto::election::owner(vip, names.iter().map(String::as_str));
    members.iter().copied().find(|i| Some(node_name(*i).as_str()) == winner).unwrap_or(0)
}

/// The first of 192.0.2.200–250 that the election gives node `node` among `members`.
pub fn l2_vip_of(node: usize, members: &[usize]) -> IpAddr {
    (200..=250).map(lan_v4).find(|v| owner(*v, members) == node).unwrap_or(lan_v4(200))
}

/// The MACs of lab nodes `nodes`, as the client's ARP/NDP answers show them.
pub fn node_macs(nodes: &[usize]) -> std::collections::BTreeSet<String> {
    nodes.iter().map(|i| node_mac(*i)).collect()
}

/// An L2 address pair one node owns among node1 and node2: 192.0.2.200 and the first
/// of 2001:db8::200–250 the same node wins; and that node.
pub fn l2_vip_pair() -> ([IpAddr; 2], usize) {
    let a = lan_v4(200);
    let o = owner(a, &[1, 2]);
    let b = (0x200..=0x250).map(lan_v6).find(|b| owner(*b, &[1, 2]) == o).unwrap_or(lan_v6(0x200));
    ([a, b], o)
}

/// A service address from the BGP range: 203.0.113.n.
pub fn bgp_vip_v4(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(203, 0, 113, n))
}

/// A service address from the BGP range: 2001:db8:3::n (n in hex digits as written).
pub fn bgp_vip_v6(n: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, n))
}

fn node_index(i: usize) -> u8 {
    u8::try_from(i.clamp(1, MAX_NODES)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_addresses_read_like_their_number() {
        assert_eq!(node_v4(1).to_string(), "192.0.2.11");
        assert_eq!(node_v6(2).to_string(), "2001:db8::12");
        assert_eq!(node_mac(3), "00:00:5e:00:53:13");
        assert_eq!(bgp_vip_v6(0x10).to_string(), "2001:db8:3::10");
    }
}
