//! Real routers started in a lab namespace from generated configs, and what they learned.

pub mod bird;
pub mod exabgp;
pub mod frr;
pub mod gobgp;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use serde_json::Value;

use crate::netns::Netns;
use crate::{Error, addressing, wait};

pub use bird::Bird;
pub use exabgp::{ExaBgp, ExaNeighbor, StaticRoute};
pub use frr::Frr;
pub use gobgp::GoBgp;

/// Which ASN a passive router accepts from its neighbour range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerAs {
    /// Exactly this ASN (eBGP when it differs from the router's, iBGP when equal).
    Asn(u32),
    /// Any ASN other than the router's.
    External,
}

/// Configuration shared by every router driver.
#[derive(Debug, Clone)]
pub struct RouterSpec {
    /// The router's own ASN.
    pub asn: u32,
    /// The router id.
    pub router_id: std::net::Ipv4Addr,
    /// What the neighbours' ASN must be.
    pub peer_as: PeerAs,
    /// Neighbour ranges it listens for (passive).
    pub ranges: Vec<String>,
    /// Explicitly listed neighbours (GoBGP with MD5 cannot use ranges).
    pub neighbors: Vec<IpAddr>,
    /// TCP MD5 password (RFC 2385).
    pub password: Option<String>,
    /// Graceful restart (RFC 4724) as the receiving speaker, with this restart time.
    pub graceful_restart: Option<Duration>,
    /// Hold time offered.
    pub hold_time: Option<u16>,
    /// Single-hop BFD sessions (RFC 5881) with these neighbours; None: no BFD.
    pub bfd: Option<BfdSpec>,
    /// GTSM (RFC 5082; BIRD only: `ttl security on`).
    pub ttl_security: bool,
    /// Neighbours this many hops away (BIRD only: `multihop N`); None: directly connected.
    pub multihop: Option<u8>,
    /// Connect to the explicitly listed `neighbors` instead of waiting for them (BIRD only).
    pub active: bool,
    /// Unnumbered neighbours: the one speaker on each of these point-to-point links, over
    /// link-local addresses, the router advertising itself there.
    pub interfaces: Vec<Unnumbered>,
}

/// An unnumbered neighbour (`RouterSpec::interfaces`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unnumbered {
    /// The router's end of the point-to-point link.
    pub interface: String,
    /// The speaker's link-local address on it: BIRD must be told it; FRR learns it from
    /// the speaker's router advertisements (`neighbor IFNAME interface`).
    pub neighbor: std::net::Ipv6Addr,
}

/// BFD sessions a router runs (BIRD `protocol bfd`, FRR bfdd `peer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdSpec {
    /// Neighbour addresses, each reached through `interface`.
    pub neighbors: Vec<IpAddr>,
    /// The router's interface towards them.
    pub interface: String,
    /// Desired Min TX and Required Min RX interval.
    pub interval: Duration,
    /// Detect Mult.
    pub multiplier: u8,
}

impl BfdSpec {
    /// Sessions with `neighbors` over the LAN (`eth0`), 300 ms × 3 as BFDProfile's defaults.
    pub fn lan(neighbors: &[IpAddr]) -> Self {
        BfdSpec {
            neighbors: neighbors.to_vec(),
            interface: "eth0".into(),
            interval: Duration::from_millis(300),
            multiplier: 3,
        }
    }
}

impl Default for RouterSpec {
    fn default() -> Self {
        RouterSpec {
            asn: addressing::ROUTER_ASN,
            router_id: addressing::ROUTER_V4,
            peer_as: PeerAs::Asn(addressing::NODE_ASN),
            ranges: vec![addressing::LAN_V4.into(), addressing::LAN_V6.into()],
            neighbors: Vec::new(),
            password: None,
            graceful_restart: None,
            hold_time: None,
            bfd: None,
            ttl_security: false,
            multihop: None,
            active: false,
            interfaces: Vec::new(),
        }
    }
}

impl RouterSpec {
    /// iBGP: neighbours share the router's ASN.
    pub fn ibgp(mut self) -> Self {
        self.peer_as = PeerAs::Asn(self.asn);
        self
    }

    /// Sets a TCP MD5 password.
    pub fn password(mut self, pw: &str) -> Self {
        self.password = Some(pw.into());
        self
    }

    /// Enables graceful restart with this restart time.
    pub fn graceful_restart(mut self, restart: Duration) -> Self {
        self.graceful_restart = Some(restart);
        self
    }

    /// Runs BFD sessions as described.
    pub fn bfd(mut self, bfd: BfdSpec) -> Self {
        self.bfd = Some(bfd);
        self
    }

    /// The neighbours' ASN, if it is fixed.
    pub fn peer_asn(&self) -> Option<u32> {
        match self.peer_as {
            PeerAs::Asn(a) => Some(a),
            PeerAs::External => None,
        }
    }
}

/// One path in a router's RIB.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RibPath {
    /// Prefix in CIDR notation (`203.0.113.10/32`).
    pub prefix: String,
    /// BGP NEXT_HOP (the global one for IPv6).
    pub next_hop: Option<IpAddr>,
    /// The neighbour it came from, where the router says.
    pub peer: Option<IpAddr>,
    /// AS_PATH, flattened.
    pub as_path: Vec<u32>,
    /// LOCAL_PREF.
    pub local_pref: Option<u32>,
    /// MED.
    pub med: Option<u32>,
    /// Standard communities as `asn:value`.
    pub communities: Vec<String>,
    /// Large communities as `global:local1:local2`.
    pub large_communities: Vec<String>,
}

/// What every router driver can be asked.
pub trait Router {
    /// Short name of the implementation ("bird", "frr", "gobgp", "exabgp").
    fn kind(&self) -> &'static str;
    /// The namespace it runs in.
    fn netns(&self) -> &Netns;
    /// Addresses of neighbours whose session is Established.
    fn established(&self) -> Result<BTreeSet<IpAddr>, Error>;
    /// Every path in the RIB (IPv4 and IPv6 unicast).
    fn rib(&self) -> Result<Vec<RibPath>, Error>;
    /// State of each BFD session by neighbour ("up", "down", "init", "admindown").
    fn bfd_sessions(&self) -> Result<BTreeMap<IpAddr, String>, Error> {
        Err(Error::Missing(format!("the {} driver runs no BFD", self.kind())))
    }
    /// The router's kernel routing table (both families).
    fn kernel_routes(&self) -> Result<Vec<KernelRoute>, Error> {
        kernel_routes(self.netns())
    }
}

/// A route in a namespace's kernel table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    /// Destination in CIDR notation.
    pub prefix: String,
    /// Gateways, sorted (several for ECMP).
    pub via: Vec<IpAddr>,
    /// Routing protocol that installed it ("bird", "bgp", "kernel", …).
    pub protocol: String,
}

/// Reads the main table of `ns`, IPv4 and IPv6.
pub fn kernel_routes(ns: &Netns) -> Result<Vec<KernelRoute>, Error> {
    let mut out = Vec::new();
    for fam in ["-4", "-6"] {
        let text = ns.ip(&["-j", fam, "route", "show", "table", "main"])?;
        let v: Value =
            serde_json::from_str(text.trim()).map_err(|e| Error::Parse(format!("ip -j route: {e}")))?;
        for r in v.as_array().into_iter().flatten() {
            let Some(dst) = r["dst"].as_str() else { continue };
            let prefix = normalize_prefix(dst, fam == "-6");
            let mut via: Vec<IpAddr> = Vec::new();
            if let Some(g) = r["gateway"].as_str().and_then(|g| g.parse().ok()) {
                via.push(g);
            }
            for nh in r["nexthops"].as_array().into_iter().flatten() {
                if let Some(g) = nh["gateway"].as_str().and_then(|g| g.parse().ok()) {
                    via.push(g);
                }
            }
            via.sort();
            let protocol = r["protocol"].as_str().unwrap_or("boot").to_string();
            out.push(KernelRoute { prefix, via, protocol });
        }
    }
    Ok(out)
}

/// `203.0.113.10` → `203.0.113.10/32`; leaves CIDRs alone.
pub fn normalize_prefix(dst: &str, v6: bool) -> String {
    if dst.contains('/') || dst == "default" {
        dst.to_string()
    } else if v6 {
        format!("{dst}/128")
    } else {
        format!("{dst}/32")
    }
}

/// Waits until the router has Established sessions with all of `peers`.
pub fn wait_established(
    r: &dyn Router,
    peers: &[IpAddr],
    timeout: Duration,
) -> Result<BTreeSet<IpAddr>, Error> {
    let want: BTreeSet<IpAddr> = peers.iter().copied().collect();
    wait::until_value(
        &format!("{} sessions with {want:?}", r.kind()),
        timeout,
        || r.established(),
        |got| want.is_subset(got),
    )
}

/// Waits until the RIB holds `prefix` with exactly these next hops; returns those paths.
pub fn wait_rib(
    r: &dyn Router,
    prefix: &str,
    next_hops: &[IpAddr],
    timeout: Duration,
) -> Result<Vec<RibPath>, Error> {
    let want: BTreeSet<IpAddr> = next_hops.iter().copied().collect();
    let paths = wait::until_value(
        &format!("{} RIB entry {prefix} via {want:?}", r.kind()),
        timeout,
        || Ok(r.rib()?.into_iter().filter(|p| p.prefix == prefix).collect::<Vec<_>>()),
        |paths: &Vec<RibPath>| paths.iter().filter_map(|p| p.next_hop).collect::<BTreeSet<_>>() == want,
    )?;
    Ok(paths)
}

/// Waits until the RIB no longer holds `prefix`.
pub fn wait_rib_gone(r: &dyn Router, prefix: &str, timeout: Duration) -> Result<(), Error> {
    wait::until_value(
        &format!("{} RIB without {prefix}", r.kind()),
        timeout,
        || Ok(r.rib()?.into_iter().filter(|p| p.prefix == prefix).collect::<Vec<_>>()),
        |paths| paths.is_empty(),
    )?;
    Ok(())
}

/// Waits until the kernel table of `ns` routes `prefix` via exactly `via` (empty: absent).
pub fn wait_kernel_route(ns: &Netns, prefix: &str, via: &[IpAddr], timeout: Duration) -> Result<(), Error> {
    let mut want: Vec<IpAddr> = via.to_vec();
    want.sort();
    wait::until_value(
        &format!("kernel route {prefix} via {want:?} in {}", ns.name()),
        timeout,
        || Ok(kernel_routes(ns)?.into_iter().find(|r| r.prefix == prefix)),
        |found| match found {
            Some(r) => r.via == want,
            None => want.is_empty(),
        },
    )?;
    Ok(())
}

/// Waits until the router's BFD session with `peer` is in `state` ("up", "down", …).
pub fn wait_bfd(r: &dyn Router, peer: IpAddr, state: &str, timeout: Duration) -> Result<(), Error> {
    wait::until_value(
        &format!("{} BFD session with {peer} {state}", r.kind()),
        timeout,
        || Ok(r.bfd_sessions()?.get(&peer).cloned()),
        |s| s.as_deref() == Some(state),
    )?;
    Ok(())
}

/// Parses `asn:value` communities given as one 32-bit number.
pub fn community_from_u32(c: u64) -> String {
    format!("{}:{}", c >> 16, c & 0xffff)
}
