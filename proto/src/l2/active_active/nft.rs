//! The nftables tables that do the per-packet work of [`super::Spread`], as one
//! [`nftables`](crate::nftables) batch: replacing both tables in one transaction is
//! atomic, no packet sees half a ruleset.
//!
//! * `netdev ferrolb` holds one `ingress` chain per interface, before everything: a
//!   frame sent to a virtual MAC is the host's (`meta pkttype set host`, which only the
//!   netdev family may set), or IP would drop it as another host's.
//! * `inet ferrolb`:
//!   * `buckets` hooks `prerouting` at -350, after defragmentation (-400: a fragment
//!     carries no port, the reassembled packet does) and before conntrack (-200):
//!     packets of buckets this node does not own are dropped there and cost no
//!     conntrack entry;
//!   * `grace` hooks `prerouting` at -150, after conntrack and before kube-proxy's
//!     DNAT (-100): the buckets in transition keep or drop by conntrack state;
//!   * `forward` drops a packet still sent to the address when the node would route
//!     it on: nothing (kube-proxy's DNAT, a local socket) took it here, e.g. a Service
//!     whose DNAT rules are not there yet. The node resolves the address to the
//!     virtual MAC like everyone, so forwarding would flood a copy back to every other
//!     node, and conntrack would confirm the flow un-NATed: its retransmissions would
//!     miss the DNAT even once the rules are there (found on the real cluster: the
//!     first connection to a new Service hung). Dropped before conntrack confirms it,
//!     the flow's next packet is looked at afresh.
//!
//! In `nft` words (what `nft list table inet ferrolb` shows, give or take its spelling):
//!
//! ```text
//! chain buckets { ip daddr vmap @addresses4; ip6 daddr vmap @addresses6 }   # → goto a_X
//! chain a_X     { jhash ip saddr . th sport mod 256 seed S vmap @a_X }      # not mine → goto n_X
//! chain n_X     { counter drop }                                            # the address's not-mine packets
//! chain grace   { ip daddr vmap @grace4; ip6 daddr vmap @grace6 }           # → goto g_X
//! chain g_X     { jhash … vmap @g_X }                                       # → goto acquiring | draining
//! chain acquiring { ct state established,related counter accept; tcp flags & (syn|ack) != syn counter drop }
//! chain draining  { ct state established,related counter accept; counter drop }
//! chain forward   { ip daddr @served4 counter drop; ip6 daddr @served6 counter drop }
//! ```
//!
//! A bucket missing from a map falls off the end of its `goto` chain, which ends the
//! base chain with its policy: accept.
//!
//! Nothing else on the node is touched: ferrolb owns these two tables only.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::{Address, BUCKETS, Bucket, Spread, seed, virtual_mac};
use crate::nftables::decode::ChainInfo;
use crate::nftables::{
    Base, Chain, Expr, Family, Hook, KeyType, MetaKey, NFPROTO_IPV4, NFPROTO_IPV6, REG_1, REG32_00, Rule,
    Set, Table, Verdict, batch,
};

/// The tables' name, in both families.
pub const TABLE: &str = "ferrolb";

/// Priorities, before defragmentation's -400 is the only thing that must run first.
const INGRESS_PRIORITY: i32 = -500;
const BUCKETS_PRIORITY: i32 = -350;
const GRACE_PRIORITY: i32 = -150;
const FORWARD_PRIORITY: i32 = 0;
/// `NF_INET_PRE_ROUTING`, `NF_INET_FORWARD`.
const PREROUTING: u32 = 0;
const FORWARD: u32 = 2;
const ARPHRD_ETHER: u16 = 1;
const PACKET_HOST: u8 = 0;
const IPPROTO_TCP: u8 = 6;
const CT_ESTABLISHED_RELATED: u32 = 0x2 | 0x4;
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

/// The batch that makes the kernel's `ferrolb` tables match `spread`, receiving on
/// `devices` (interface names).
pub fn ruleset(spread: &Spread, devices: &BTreeSet<String>) -> crate::nftables::Batch {
    let (netdev, inet) = tables(spread, devices);
    batch(&[(Family::Netdev, TABLE, netdev.as_ref()), (Family::Inet, TABLE, inet.as_ref())])
}

/// The two tables, each `None` when it would hold nothing.
pub fn tables(spread: &Spread, devices: &BTreeSet<String>) -> (Option<Table>, Option<Table>) {
    let addrs = spread.addresses();
    if addrs.is_empty() {
        return (None, None);
    }
    let netdev = (!devices.is_empty()).then(|| ingress(addrs.keys().copied(), devices));
    (netdev, Some(inet(addrs)))
}

fn ingress(addrs: impl Iterator<Item = IpAddr>, devices: &BTreeSet<String>) -> Table {
    let macs: BTreeSet<[u8; 6]> = addrs.map(virtual_mac).collect();
    let set = Set {
        name: "vmacs".into(),
        key: KeyType::EtherAddr,
        map: false,
        elements: macs.into_iter().map(|m| (m.to_vec(), None)).collect(),
    };
    let mut t = Table { sets: vec![set], ..Table::default() };
    for (i, dev) in devices.iter().enumerate() {
        let name = format!("ingress{i}");
        let hook = Hook { number: 0, priority: INGRESS_PRIORITY, device: Some(dev.clone()) };
        t.chains.push(Chain { name: name.clone(), hook: Some(hook) });
        // ether daddr @vmacs meta pkttype set host
        let exprs = vec![
            Expr::Meta { key: MetaKey::IifType, dreg: REG_1 },
            Expr::Cmp { sreg: REG_1, eq: true, data: ARPHRD_ETHER.to_ne_bytes().to_vec() },
            Expr::Payload { base: Base::Link, offset: 0, len: 6, dreg: REG_1 },
            Expr::Lookup { set: "vmacs".into(), sreg: REG_1, map: false },
            Expr::Immediate { dreg: REG_1, data: vec![PACKET_HOST] },
            Expr::MetaSet { key: MetaKey::PktType, sreg: REG_1 },
        ];
        t.rules.push(Rule { chain: name, exprs });
    }
    t
}

fn inet(addrs: &BTreeMap<IpAddr, Address>) -> Table {
    let mut t = Table::default();
    let base = |name: &str, number, priority| Chain {
        name: name.into(),
        hook: Some(Hook { number, priority, device: None }),
    };
    t.chains.push(base("buckets", PREROUTING, BUCKETS_PRIORITY));
    t.chains.push(base("grace", PREROUTING, GRACE_PRIORITY));
    t.chains.push(base("forward", FORWARD, FORWARD_PRIORITY));
    for name in ["acquiring", "draining"] {
        t.chains.push(Chain { name: name.into(), hook: None });
    }
    dispatch(&mut t, "buckets", "addresses", addrs.keys().copied(), Some("a"));
    let moving = addrs.iter().filter(|(_, a)| !a.settled()).map(|(ip, _)| *ip);
    dispatch(&mut t, "grace", "grace", moving, Some("g"));
    dispatch(&mut t, "forward", "served", addrs.keys().copied(), None);
    for (ip, a) in addrs {
        let (all, not_mine) = (chain("a", *ip), chain("n", *ip));
        let to_n = Verdict::Goto(not_mine.clone());
        by_bucket(&mut t, *ip, &all, a, |b| (b == Bucket::NotMine).then(|| to_n.clone()));
        t.chains.push(Chain { name: not_mine.clone(), hook: None });
        // Its own chain, so its counter is the address's packets dropped as not mine.
        t.rules.push(Rule { chain: not_mine, exprs: vec![Expr::Counter, Expr::Verdict(Verdict::Drop)] });
        if !a.settled() {
            by_bucket(&mut t, *ip, &chain("g", *ip), a, |b| match b {
                Bucket::Acquiring(_) => Some(Verdict::Goto("acquiring".into())),
                Bucket::Draining(_) => Some(Verdict::Goto("draining".into())),
                Bucket::Mine | Bucket::NotMine => None,
            });
        }
    }
    let established = [
        Expr::CtState { dreg: REG_1 },
        Expr::And { sreg: REG_1, dreg: REG_1, mask: CT_ESTABLISHED_RELATED.to_ne_bytes().to_vec() },
        Expr::Cmp { sreg: REG_1, eq: false, data: 0u32.to_ne_bytes().to_vec() },
        Expr::Counter,
        Expr::Verdict(Verdict::Accept),
    ];
    // A new owner keeps its own flows and new ones; a TCP segment of a flow it never
    // saw (no SYN) is the previous owner's.
    let foreign_tcp = vec![
        Expr::Meta { key: MetaKey::L4Proto, dreg: REG_1 },
        Expr::Cmp { sreg: REG_1, eq: true, data: vec![IPPROTO_TCP] },
        Expr::Payload { base: Base::Transport, offset: 13, len: 1, dreg: REG_1 },
        Expr::And { sreg: REG_1, dreg: REG_1, mask: vec![TCP_SYN | TCP_ACK] },
        Expr::Cmp { sreg: REG_1, eq: false, data: vec![TCP_SYN] },
        Expr::Counter,
        Expr::Verdict(Verdict::Drop),
    ];
    t.rules.push(Rule { chain: "acquiring".into(), exprs: established.to_vec() });
    t.rules.push(Rule { chain: "acquiring".into(), exprs: foreign_tcp });
    t.rules.push(Rule { chain: "draining".into(), exprs: established.to_vec() });
    t.rules.push(Rule { chain: "draining".into(), exprs: vec![Expr::Counter, Expr::Verdict(Verdict::Drop)] });
    t
}

/// `ip daddr vmap @{set}4; ip6 daddr vmap @{set}6` in `chain`, each address → `goto
/// {prefix}_X`; without a prefix, `ip daddr @{set}4 counter drop` (and IPv6).
fn dispatch(
    t: &mut Table,
    chain_name: &str,
    set: &str,
    ips: impl Iterator<Item = IpAddr>,
    prefix: Option<&str>,
) {
    let ips: Vec<IpAddr> = ips.collect();
    for (v4, nfproto, offset, len, key) in
        [(true, NFPROTO_IPV4, 16, 4, KeyType::Ipv4Addr), (false, NFPROTO_IPV6, 24, 16, KeyType::Ipv6Addr)]
    {
        let elements: Vec<(Vec<u8>, Option<Verdict>)> = ips
            .iter()
            .filter(|ip| ip.is_ipv4() == v4)
            .map(|ip| (octets(*ip), prefix.map(|p| Verdict::Goto(chain(p, *ip)))))
            .collect();
        if elements.is_empty() {
            continue;
        }
        let name = format!("{set}{}", if v4 { 4 } else { 6 });
        let map = prefix.is_some();
        t.sets.push(Set { name: name.clone(), key, map, elements });
        let mut exprs = vec![
            Expr::Meta { key: MetaKey::NfProto, dreg: REG_1 },
            Expr::Cmp { sreg: REG_1, eq: true, data: vec![nfproto] },
            Expr::Payload { base: Base::Network, offset, len, dreg: REG_1 },
            Expr::Lookup { set: name, sreg: REG_1, map },
        ];
        if !map {
            exprs.extend([Expr::Counter, Expr::Verdict(Verdict::Drop)]);
        }
        t.rules.push(Rule { chain: chain_name.into(), exprs });
    }
}

/// A chain and its map, both named `name`: the flow's bucket → `verdict` (buckets
/// without one are left out).
fn by_bucket(
    t: &mut Table,
    ip: IpAddr,
    name: &str,
    a: &Address,
    verdict: impl Fn(Bucket) -> Option<Verdict>,
) {
    let elements = a
        .buckets
        .iter()
        .enumerate()
        .filter_map(|(b, state)| {
            Some((u32::try_from(b).ok()?.to_ne_bytes().to_vec(), Some(verdict(*state)?)))
        })
        .collect();
    t.chains.push(Chain { name: name.into(), hook: None });
    t.sets.push(Set { name: name.into(), key: KeyType::U32, map: true, elements });
    // jhash ip saddr . th sport mod 256 seed S: the address in 4-byte registers from
    // the first, the port in the one after (zero-padded), hashed together.
    let (offset, len) = if ip.is_ipv4() { (12, 4) } else { (8, 16) };
    let exprs = vec![
        Expr::Payload { base: Base::Network, offset, len, dreg: REG32_00 },
        Expr::Payload { base: Base::Transport, offset: 0, len: 2, dreg: REG32_00 + len / 4 },
        Expr::Jhash { sreg: REG32_00, len: len + 4, modulus: BUCKETS as u32, seed: seed(ip), dreg: REG_1 },
        Expr::Lookup { set: name.into(), sreg: REG_1, map: true },
    ];
    t.rules.push(Rule { chain: name.into(), exprs });
}

fn octets(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// A per-address chain's name: the address with its separators made name characters.
fn chain(prefix: &str, ip: IpAddr) -> String {
    format!("{prefix}_{}", ip.to_string().replace(['.', ':'], "_"))
}

/// The address of a per-address chain named `{prefix}_X`.
fn address_of(prefix: &str, name: &str) -> Option<IpAddr> {
    let rest = name.strip_prefix(prefix)?.strip_prefix('_')?;
    let parts: Vec<&str> = rest.split('_').collect();
    if parts.len() == 4 && parts.iter().all(|p| p.parse::<u8>().is_ok()) {
        parts.join(".").parse().ok()
    } else {
        rest.replace('_', ":").parse().ok()
    }
}

/// The addresses a loaded `inet ferrolb` table filters, from its chains.
pub fn addresses_in(chains: &[ChainInfo]) -> Vec<IpAddr> {
    chains.iter().filter_map(|c| address_of("a", &c.name)).collect()
}

/// The interfaces a loaded `netdev ferrolb` table receives on, from its chains.
pub fn devices_in(chains: &[ChainInfo]) -> BTreeSet<String> {
    chains.iter().filter_map(|c| c.device.clone()).collect()
}

/// Each address's packets dropped as not this node's, from the rules of a loaded
/// `inet ferrolb` table (chain, packets).
pub fn not_mine(rules: &[(String, u64)]) -> BTreeMap<IpAddr, u64> {
    rules.iter().filter_map(|(chain, n)| Some((address_of("n", chain)?, *n))).collect()
}
