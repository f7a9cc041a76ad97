//! BGPPeer and BGPAdvertisement: sessions to routers and what to send them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defaults;
use crate::duration::{Duration, DurationError};

/// Spec of a BGPPeer.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "ferrolb.io",
    version = "v1alpha1",
    kind = "BGPPeer",
    root = "BgpPeer",
    plural = "bgppeers",
    shortname = "flpeer",
    category = "ferrolb",
    status = "BgpPeerStatus",
    derive = "PartialEq",
    doc = "A BGP session between the selected nodes and one router.",
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.peerAddress"),
    printcolumn(name = "ASN", type_ = "integer", json_path = ".spec.peerASN"),
    printcolumn(name = "My ASN", type_ = "integer", json_path = ".spec.myASN"),
    printcolumn(name = "BFD", type_ = "string", json_path = ".spec.bfdProfile", priority = 1),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeerSpec {
    /// Our AS number (1..=4294967295).
    #[serde(rename = "myASN")]
    #[schemars(schema_with = "defaults::asn_schema")]
    pub my_asn: u32,
    /// The router's AS number (1..=4294967295); or, instead, `dynamicASN`.
    #[serde(default, rename = "peerASN", skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "defaults::asn_schema")]
    pub peer_asn: Option<u32>,
    /// Instead of `peerASN`: `internal` (the router is in myASN) or `external` (any other
    /// AS, learned from the router's OPEN).
    #[serde(default, rename = "dynamicASN", skip_serializing_if = "Option::is_none")]
    pub dynamic_asn: Option<DynamicAsn>,
    /// The router's address, IPv4 or IPv6; or, instead, `interface`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_address: Option<String>,
    /// Instead of `peerAddress`, unnumbered peering: the router is found on this link by
    /// its IPv6 link-local address (from its router advertisements), the session runs
    /// over that address, and IPv4 routes go with an IPv6 next hop (RFC 8950).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The router's TCP port.
    #[serde(default = "defaults::peer_port")]
    #[schemars(schema_with = "defaults::port_schema")]
    pub peer_port: u16,
    /// Local address to connect from; default chosen by the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_address: Option<String>,
    /// BGP identifier (an IPv4 address); default the node's IPv4 address.
    #[serde(default, rename = "routerID", skip_serializing_if = "Option::is_none")]
    pub router_id: Option<String>,
    /// Hold time proposed in OPEN: 3s..65535s, or 0 (no keepalives) with `bfdProfile`.
    #[serde(default = "defaults::hold_time")]
    pub hold_time: String,
    /// Keepalive interval; default holdTime/3; must not exceed holdTime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive_time: Option<String>,
    /// Base of the connect retry interval.
    #[serde(default = "defaults::connect_time")]
    pub connect_time: String,
    /// Only accept connections from the router, never connect.
    #[serde(default)]
    pub passive: bool,
    /// Allow an eBGP router that is not directly connected (TTL 255).
    #[serde(default)]
    pub ebgp_multi_hop: bool,
    /// GTSM (RFC 5082): send with TTL 255 and drop the router's packets that arrive
    /// with less, so only a directly connected router can reach the session. Not with
    /// `ebgpMultiHop`.
    #[serde(default)]
    pub ttl_security: bool,
    /// Secret key holding the TCP MD5 password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<SecretKeyRef>,
    /// File holding the TCP MD5 password: static files and checkpoints only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_file: Option<String>,
    /// BFDProfile name enabling BFD for this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bfd_profile: Option<String>,
    /// RFC 4724 graceful restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graceful_restart: Option<GracefulRestart>,
    /// Address families negotiated; default both.
    #[serde(default = "defaults::address_families")]
    pub address_families: Vec<AddressFamily>,
    /// Nodes that peer with this router; default all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
}

impl BgpPeerSpec {
    /// A peer with every optional field at its default.
    pub fn new(my_asn: u32, peer_asn: u32, peer_address: impl Into<String>) -> Self {
        Self {
            my_asn,
            peer_asn: Some(peer_asn),
            dynamic_asn: None,
            peer_address: Some(peer_address.into()),
            interface: None,
            peer_port: defaults::peer_port(),
            source_address: None,
            router_id: None,
            hold_time: defaults::hold_time(),
            keepalive_time: None,
            connect_time: defaults::connect_time(),
            passive: false,
            ebgp_multi_hop: false,
            ttl_security: false,
            password_secret: None,
            password_file: None,
            bfd_profile: None,
            graceful_restart: None,
            address_families: defaults::address_families(),
            node_selectors: Vec::new(),
        }
    }

    /// Where the router is, for logs and listings: its address, or `%IFNAME` for an
    /// unnumbered peer.
    pub fn peer_location(&self) -> String {
        match (&self.peer_address, &self.interface) {
            (Some(a), _) => a.clone(),
            (None, Some(i)) => format!("%{i}"),
            (None, None) => String::new(),
        }
    }

    /// True for an iBGP session: the router is in our AS (`peerASN` = `myASN`, or
    /// `dynamicASN: internal`).
    pub fn is_ibgp(&self) -> bool {
        match (self.peer_asn, self.dynamic_asn) {
            (Some(asn), _) => asn == self.my_asn,
            (None, dynamic) => dynamic == Some(DynamicAsn::Internal),
        }
    }

    /// Parsed `holdTime`.
    pub fn hold_time(&self) -> Result<Duration, DurationError> {
        self.hold_time.parse()
    }

    /// Parsed `keepaliveTime`, defaulting to holdTime/3.
    pub fn keepalive_time(&self) -> Result<Duration, DurationError> {
        match &self.keepalive_time {
            Some(k) => k.parse(),
            None => Ok(Duration(self.hold_time()?.0 / 3)),
        }
    }

    /// Parsed `connectTime`.
    pub fn connect_time(&self) -> Result<Duration, DurationError> {
        self.connect_time.parse()
    }
}

/// `dynamicASN`: which side of our AS the router is on, its number learned from its OPEN.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum DynamicAsn {
    /// The router is in our AS (iBGP).
    #[serde(rename = "internal")]
    Internal,
    /// The router is in any other AS (eBGP).
    #[serde(rename = "external")]
    External,
}

impl std::fmt::Display for DynamicAsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DynamicAsn::Internal => "internal",
            DynamicAsn::External => "external",
        })
    }
}

/// A key of a Secret in a given namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Secret namespace.
    pub namespace: String,
    /// Key inside the Secret's data.
    pub key: String,
}

/// RFC 4724 graceful restart settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GracefulRestart {
    /// Advertise the capability and keep routes across our restarts.
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
    /// How long the router keeps our routes while we restart (at most 4095s).
    #[serde(default = "defaults::restart_time")]
    pub restart_time: String,
}

impl GracefulRestart {
    /// Parsed `restartTime`.
    pub fn restart_time(&self) -> Result<Duration, DurationError> {
        self.restart_time.parse()
    }
}

impl Default for GracefulRestart {
    fn default() -> Self {
        Self { enabled: true, restart_time: defaults::restart_time() }
    }
}

/// A BGP address family (AFI/SAFI).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema)]
pub enum AddressFamily {
    /// AFI 1, SAFI 1.
    #[serde(rename = "ipv4-unicast")]
    Ipv4Unicast,
    /// AFI 2, SAFI 1.
    #[serde(rename = "ipv6-unicast")]
    Ipv6Unicast,
}

/// Observed state of a BGPPeer.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpPeerStatus {
    /// `Valid` and other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::defaults::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Spec of a BGPAdvertisement.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "ferrolb.io",
    version = "v1alpha1",
    kind = "BGPAdvertisement",
    root = "BgpAdvertisement",
    plural = "bgpadvertisements",
    shortname = "flbgpadv",
    category = "ferrolb",
    status = "BgpAdvertisementStatus",
    derive = "PartialEq",
    doc = "Announces addresses of some pools to some BGP peers, with attributes.",
    printcolumn(name = "Pools", type_ = "string", json_path = ".spec.ipAddressPools"),
    printcolumn(name = "Peers", type_ = "string", json_path = ".spec.peers"),
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct BgpAdvertisementSpec {
    /// Pools by name; with no pools and no pool selectors, every pool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pools: Vec<String>,
    /// Pools by label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// Only Services matching one of these; default all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
    /// Only nodes matching one of these announce; default all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// BGPPeer names; default all peers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// Prefix length announced for IPv4 addresses (0..=32).
    #[serde(default = "defaults::aggregation_length")]
    pub aggregation_length: i32,
    /// Prefix length announced for IPv6 addresses (0..=128).
    #[serde(default = "defaults::aggregation_length_v6", rename = "aggregationLengthV6")]
    pub aggregation_length_v6: i32,
    /// LOCAL_PREF attribute; sent to iBGP peers only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "defaults::u32_schema")]
    pub local_pref: Option<u32>,
    /// Communities: `64512:100`, `large:64512:1:2`, or a well-known name such as `no-export`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub communities: Vec<String>,
    /// Attach the Link Bandwidth extended community (RFC 10005) so routers that honour
    /// it weight ECMP: `endpoints` (proportional to this node's serving endpoints of the
    /// Service, `externalTrafficPolicy: Local`), or a fixed rate in bits/s such as `10G`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_bandwidth: Option<String>,
}

/// A parsed `linkBandwidth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkBandwidth {
    /// Proportional to the node's serving endpoints of the Service.
    Endpoints,
    /// A fixed rate, in bits per second.
    Fixed(u64),
}

impl LinkBandwidth {
    /// What one serving endpoint counts for under `endpoints`: 1 Gbit/s. Routers weigh
    /// paths by their ratio, and FRR counts in whole Mbit/s, so the unit must not be small.
    pub const PER_ENDPOINT: u64 = 1_000_000_000;
}

impl std::str::FromStr for LinkBandwidth {
    type Err = String;

    /// `endpoints`, or a whole number of bits/s with an optional `K`, `M`, `G` or `T`
    /// (powers of 1000), at least 1M.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "endpoints" {
            return Ok(LinkBandwidth::Endpoints);
        }
        let (digits, unit) = match s.char_indices().last() {
            Some((i, 'K')) => (&s[..i], 1_000),
            Some((i, 'M')) => (&s[..i], 1_000_000),
            Some((i, 'G')) => (&s[..i], 1_000_000_000),
            Some((i, 'T')) => (&s[..i], 1_000_000_000_000u64),
            _ => (s, 1),
        };
        let rate = digits
            .parse::<u64>()
            .ok()
            .filter(|_| !digits.starts_with('+'))
            .and_then(|n| n.checked_mul(unit))
            .ok_or_else(|| format!("{s:?} is neither \"endpoints\" nor a rate such as 10G"))?;
        if !(1_000_000..=1_000_000_000_000_000).contains(&rate) {
            return Err(format!("{s:?} is outside 1M..1000T bits/s"));
        }
        Ok(LinkBandwidth::Fixed(rate))
    }
}

impl BgpAdvertisementSpec {
    /// Parsed `linkBandwidth` (`None` when unset).
    pub fn link_bandwidth(&self) -> Result<Option<LinkBandwidth>, String> {
        self.link_bandwidth.as_deref().map(str::parse).transpose()
    }

    /// Parsed `communities`.
    pub fn communities(&self) -> Result<Vec<crate::community::Community>, crate::community::CommunityError> {
        self.communities.iter().map(|c| c.parse()).collect()
    }
}

impl Default for BgpAdvertisementSpec {
    fn default() -> Self {
        Self {
            ip_address_pools: Vec::new(),
            ip_address_pool_selectors: Vec::new(),
            service_selectors: Vec::new(),
            node_selectors: Vec::new(),
            peers: Vec::new(),
            aggregation_length: defaults::aggregation_length(),
            aggregation_length_v6: defaults::aggregation_length_v6(),
            local_pref: None,
            communities: Vec::new(),
            link_bandwidth: None,
        }
    }
}

/// Observed state of a BGPAdvertisement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BgpAdvertisementStatus {
    /// `Valid` and other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::defaults::conditions_schema")]
    pub conditions: Vec<Condition>,
}
