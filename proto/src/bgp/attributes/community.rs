//! BGP communities: standard (RFC 1997), extended (RFC 4360) and large (RFC 8092).

/// A standard community (RFC 1997), `asn:value` in its two halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Community(pub u32);

impl Community {
    /// GRACEFUL_SHUTDOWN (RFC 8326).
    pub const GRACEFUL_SHUTDOWN: Community = Community(0xffff_0000);
    /// NO_EXPORT (RFC 1997).
    pub const NO_EXPORT: Community = Community(0xffff_ff01);

    /// Builds `high:low`.
    pub fn new(high: u16, low: u16) -> Self {
        Community(u32::from(high) << 16 | u32::from(low))
    }
}

/// A large community (RFC 8092): global administrator and two local data parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LargeCommunity {
    /// Global administrator (an ASN).
    pub global: u32,
    /// Local data part 1.
    pub local1: u32,
    /// Local data part 2.
    pub local2: u32,
}

/// An extended community (RFC 4360): eight octets, type and sub-type first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ExtendedCommunity(pub [u8; 8]);

impl ExtendedCommunity {
    /// Link Bandwidth (RFC 10005 §3): two-octet AS-specific type, sub-type 0x04.
    const LINK_BANDWIDTH: [u8; 2] = [0x00, 0x04];
    /// The non-transitive bit of the type octet (RFC 4360 §2).
    const NON_TRANSITIVE: u8 = 0x40;

    /// Link Bandwidth of `bytes_per_second` (an IEEE float, RFC 10005 §3) from `asn`
    /// (AS_TRANS for a four-octet AS). Sent transitive: FRR before 10.5 weighs
    /// multipath only by the transitive form, and RFC 10005 receivers ignore the bit.
    pub fn link_bandwidth(asn: u16, bytes_per_second: f32) -> Self {
        let [a, b] = asn.to_be_bytes();
        let [c, d, e, f] = bytes_per_second.to_be_bytes();
        let [t, s] = Self::LINK_BANDWIDTH;
        ExtendedCommunity([t, s, a, b, c, d, e, f])
    }

    /// The bandwidth in bytes per second, when this is a Link Bandwidth community
    /// (transitive or not).
    pub fn as_link_bandwidth(&self) -> Option<f32> {
        let [t, s, _, _, c, d, e, f] = self.0;
        ([t & !Self::NON_TRANSITIVE, s] == Self::LINK_BANDWIDTH).then(|| f32::from_be_bytes([c, d, e, f]))
    }
}
