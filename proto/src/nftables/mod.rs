//! nf_tables spoken over netlink, as `nft` speaks it, without `nft`: the speaker's
//! image has no nftables userland, and a batch built here needs no parser between
//! the plan and the kernel.
//!
//! [`Table`] describes a table the way the kernel holds it (chains, sets with their
//! elements, rules as expressions on registers); [`batch`] encodes tables as one
//! nfnetlink batch that replaces them atomically (the kernel commits the whole batch
//! or nothing, so no packet sees half a ruleset). [`decode`] reads the kernel's
//! answers and dumps; [`socket`] is the netlink socket that carries them.
//!
//! Numbers are those of `linux/netfilter/nf_tables.h` and `linux/netfilter/nfnetlink.h`.

pub mod decode;
mod encode;
pub mod socket;

pub use encode::{Batch, batch, dump_request};

/// `nfgenmsg.nfgen_family` of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    /// IPv4 and IPv6 (`inet`).
    Inet,
    /// Per-interface, before IP (`netdev`).
    Netdev,
}

impl Family {
    /// The NFPROTO number.
    pub fn number(self) -> u8 {
        match self {
            Family::Inet => 1,
            Family::Netdev => 5,
        }
    }

    /// The name `nft` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Netdev => "netdev",
        }
    }
}

/// `meta nfproto` of IPv4 and IPv6 packets.
pub const NFPROTO_IPV4: u8 = 2;
/// See [`NFPROTO_IPV4`].
pub const NFPROTO_IPV6: u8 = 10;

/// One table, whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    /// Chains, base chains with their hook.
    pub chains: Vec<Chain>,
    /// Named sets and maps.
    pub sets: Vec<Set>,
    /// Rules, each appended to its chain in this order.
    pub rules: Vec<Rule>,
}

/// A chain; `hook` makes it a base chain (type filter, policy accept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// Its name.
    pub name: String,
    /// Where packets enter it, if they enter it from the kernel.
    pub hook: Option<Hook>,
}

/// A base chain's hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hook {
    /// `NF_INET_*` (prerouting 0) or `NF_NETDEV_*` (ingress 0).
    pub number: u32,
    /// Lower runs first.
    pub priority: i32,
    /// The interface of a netdev hook.
    pub device: Option<String>,
}

/// What a set holds as keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    /// 6-byte Ethernet addresses.
    EtherAddr,
    /// IPv4 addresses.
    Ipv4Addr,
    /// IPv6 addresses.
    Ipv6Addr,
    /// A 32-bit number in host order (a hash's result).
    U32,
}

impl KeyType {
    /// `nft`'s datatype number (what `nft list` prints the keys as) and the key's length.
    fn number_and_len(self) -> (u32, u32) {
        match self {
            KeyType::EtherAddr => (9, 6),
            KeyType::Ipv4Addr => (7, 4),
            KeyType::Ipv6Addr => (8, 16),
            KeyType::U32 => (4, 4),
        }
    }
}

/// A named set, or with verdicts a map (`vmap`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set {
    /// Its name (sets and chains have separate names).
    pub name: String,
    /// Its keys' type.
    pub key: KeyType,
    /// Whether elements carry a verdict.
    pub map: bool,
    /// Keys (in the register's byte order) and, in a map, their verdicts.
    pub elements: Vec<(Vec<u8>, Option<Verdict>)>,
}

/// What a rule or a map decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `accept`
    Accept,
    /// `drop`
    Drop,
    /// `goto CHAIN`: falling off its end ends the base chain with its policy.
    Goto(String),
}

/// A rule: expressions run in order until one does not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Its chain.
    pub chain: String,
    /// Its expressions.
    pub exprs: Vec<Expr>,
}

/// Registers: 16-byte `NFT_REG_1`, and the 4-byte `NFT_REG32_00`… that overlay it.
pub const REG_1: u32 = 1;
/// The first 4-byte register (the same bytes as [`REG_1`]'s first four).
pub const REG32_00: u32 = 8;

/// Where a payload expression reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    /// The link-layer header.
    Link = 0,
    /// The network header.
    Network = 1,
    /// The transport header.
    Transport = 2,
}

/// `meta` keys used here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaKey {
    /// The input interface's type (ARPHRD_*, 2 bytes host order).
    IifType = 8,
    /// The packet's family (1 byte).
    NfProto = 15,
    /// The transport protocol (1 byte).
    L4Proto = 16,
    /// PACKET_HOST, PACKET_OTHERHOST… (1 byte).
    PktType = 19,
}

/// An expression on the registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// Loads a meta value into `dreg`.
    Meta { key: MetaKey, dreg: u32 },
    /// Sets a meta value from `sreg`.
    MetaSet { key: MetaKey, sreg: u32 },
    /// Matches when `sreg`'s first bytes are (`eq`) or are not equal to `data`.
    Cmp { sreg: u32, eq: bool, data: Vec<u8> },
    /// Loads `len` bytes at `offset` of a header into `dreg` (zero-padded to 4 bytes).
    Payload { base: Base, offset: u32, len: u32, dreg: u32 },
    /// Looks `sreg` up in a set: no match without the key; in a map, its verdict.
    Lookup { set: String, sreg: u32, map: bool },
    /// `jhash(sreg's len bytes, seed) mod modulus` into `dreg`.
    Jhash { sreg: u32, len: u32, modulus: u32, seed: u32, dreg: u32 },
    /// Stores `data` into `dreg`.
    Immediate { dreg: u32, data: Vec<u8> },
    /// Decides.
    Verdict(Verdict),
    /// Loads the conntrack state bits (4 bytes host order) into `dreg`.
    CtState { dreg: u32 },
    /// `dreg = sreg & mask` over `mask`'s length.
    And { sreg: u32, dreg: u32, mask: Vec<u8> },
    /// Counts packets and bytes.
    Counter,
}
