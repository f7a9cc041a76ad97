//! BGP communities: standard (RFC 1997) and large (RFC 8092).

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
