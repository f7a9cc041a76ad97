//! The nftables table that does the per-packet work of [`super::Spread`], as the text
//! `nft -f` reads. Replacing the whole table in one transaction is atomic: no packet
//! sees half a ruleset.
//!
//! * `netdev ferrolb` holds one `ingress` chain per interface, before everything: a
//!   frame sent to a virtual MAC is the host's (`meta pkttype set host`, which only the
//!   netdev family may set), or IP would drop it as another host's.
//! * `buckets` hooks `prerouting` at -350, after defragmentation (-400: a fragment
//!   carries no port, the reassembled packet does) and before conntrack (-200): packets
//!   of buckets this node does not own are dropped there and cost no conntrack entry.
//! * `grace` hooks `prerouting` at -150, after conntrack and before kube-proxy's DNAT
//!   (-100): the buckets in transition keep or drop by conntrack state.
//!
//! * `buckets` and `grace` live in `inet ferrolb`.
//!
//! Nothing else on the node is touched: ferrolb owns these two tables only.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::IpAddr;

use super::{Address, BUCKETS, Bucket, Spread, seed, virtual_mac};
use crate::l2::arp::mac_to_string;

/// The table ferrolb owns.
pub const TABLE: &str = "ferrolb";

/// The script that makes the kernel's `ferrolb` tables match `spread`, receiving on
/// `devices` (interface names; a name nft could not quote is skipped).
pub fn ruleset(spread: &Spread, devices: &BTreeSet<String>) -> String {
    // Creating a table first makes its delete valid when it does not exist yet.
    let mut s = String::new();
    for family in ["netdev", "inet"] {
        let _ = writeln!(s, "table {family} {TABLE} {{}}\ndelete table {family} {TABLE}");
    }
    let addrs = spread.addresses();
    if addrs.is_empty() {
        return s;
    }
    let devices: Vec<&String> = devices.iter().filter(|d| quotable(d)).collect();
    if !devices.is_empty() {
        let _ = writeln!(s, "table netdev {TABLE} {{");
        let macs: BTreeSet<String> = addrs.keys().map(|ip| mac_to_string(&virtual_mac(*ip))).collect();
        let _ = writeln!(s, "  set vmacs {{ type ether_addr; elements = {{ {} }}; }}", join(macs));
        for (i, dev) in devices.iter().enumerate() {
            let _ = writeln!(
                s,
                "  chain ingress{i} {{ type filter hook ingress device \"{dev}\" priority -500; policy accept; \
                 ether daddr @vmacs meta pkttype set host; }}"
            );
        }
        s.push_str("}\n");
    }
    let _ = writeln!(s, "table inet {TABLE} {{");
    let _ = writeln!(s, "  chain buckets {{ type filter hook prerouting priority -350; policy accept;");
    dispatch(&mut s, addrs.keys().copied(), "a");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain grace {{ type filter hook prerouting priority -150; policy accept;");
    dispatch(&mut s, addrs.iter().filter(|(_, a)| !a.settled()).map(|(ip, _)| *ip), "g");
    let _ = writeln!(s, "  }}");
    for (ip, a) in addrs {
        let drop = format!("goto {}", chain("n", *ip));
        let first = verdicts(a, |b| if b == Bucket::NotMine { &drop } else { "accept" });
        let _ = writeln!(s, "  chain {} {{ {} vmap {{ {first} }}; }}", chain("a", *ip), hash(*ip));
        // Its own chain, so its counter is the address's packets dropped as not mine.
        let _ = writeln!(s, "  chain {drop_chain} {{ counter drop; }}", drop_chain = chain("n", *ip));
        if !a.settled() {
            let then = verdicts(a, |b| match b {
                Bucket::Acquiring(_) => "goto acquiring",
                Bucket::Draining(_) => "goto draining",
                Bucket::Mine | Bucket::NotMine => "",
            });
            let _ = writeln!(s, "  chain {} {{ {} vmap {{ {then} }}; }}", chain("g", *ip), hash(*ip));
        }
    }
    // A new owner keeps its own flows and new ones; a TCP segment of a flow it never
    // saw (no SYN) is the previous owner's.
    let _ = writeln!(
        s,
        "  chain acquiring {{ ct state established,related counter accept; \
         meta l4proto tcp tcp flags & (syn | ack) != syn counter drop; }}"
    );
    let _ = writeln!(s, "  chain draining {{ ct state established,related counter accept; counter drop; }}");
    s.push_str("}\n");
    s
}

/// The address → per-address chain lookups, one per family.
fn dispatch(s: &mut String, ips: impl Iterator<Item = IpAddr> + Clone, prefix: &str) {
    for (family, v4) in [("ip", true), ("ip6", false)] {
        let items: Vec<String> = ips
            .clone()
            .filter(|ip| ip.is_ipv4() == v4)
            .map(|ip| format!("{ip} : goto {}", chain(prefix, ip)))
            .collect();
        if !items.is_empty() {
            let _ = writeln!(s, "    {family} daddr vmap {{ {} }}", items.join(", "));
        }
    }
}

/// A per-address chain's name: the address with its separators made name characters.
fn chain(prefix: &str, ip: IpAddr) -> String {
    format!("{prefix}_{}", ip.to_string().replace(['.', ':'], "_"))
}

/// The addresses a loaded `inet ferrolb` table (as `nft list table` prints it) filters.
pub fn addresses_in(listing: &str) -> Vec<IpAddr> {
    listing
        .lines()
        .filter_map(|l| l.trim().strip_prefix("chain a_")?.split_whitespace().next())
        .filter_map(|name| {
            let parts: Vec<&str> = name.split('_').collect();
            if parts.len() == 4 && parts.iter().all(|p| p.parse::<u8>().is_ok()) {
                parts.join(".").parse().ok()
            } else {
                name.replace('_', ":").parse().ok()
            }
        })
        .collect()
}

/// The flow's bucket, as nftables computes it.
fn hash(ip: IpAddr) -> String {
    let family = if ip.is_ipv4() { "ip" } else { "ip6" };
    format!("jhash {family} saddr . th sport mod {BUCKETS} seed {:#010x}", seed(ip))
}

/// The buckets' verdicts as map elements, runs of one verdict as ranges; buckets
/// whose verdict is empty are left out.
fn verdicts<'a>(a: &Address, of: impl Fn(Bucket) -> &'a str) -> String {
    let mut out = Vec::new();
    let mut start = 0;
    for b in 1..=a.buckets.len() {
        let v = of(a.buckets[start]);
        if b < a.buckets.len() && of(a.buckets[b]) == v {
            continue;
        }
        if !v.is_empty() {
            let end = b - 1;
            out.push(if end == start { format!("{start} : {v}") } else { format!("{start}-{end} : {v}") });
        }
        start = b;
    }
    out.join(", ")
}

fn join(items: BTreeSet<String>) -> String {
    items.into_iter().collect::<Vec<_>>().join(", ")
}

/// Interface names nft can take between quotes.
fn quotable(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
}
