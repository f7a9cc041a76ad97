//! OPEN capabilities (RFC 5492): multiprotocol (RFC 4760), route refresh (RFC 2918),
//! extended next hop (RFC 8950), graceful restart (RFC 4724) and 4-octet AS numbers
//! (RFC 6793).
use super::nlri::Family;
use super::reader::Reader;
use bytes::{BufMut, Bytes, BytesMut};

/// Capability codes (IANA "Capability Codes").
pub mod cap_code {
    /// Multiprotocol Extensions (RFC 4760).
    pub const MULTIPROTOCOL: u8 = 1;
    /// Route Refresh (RFC 2918).
    pub const ROUTE_REFRESH: u8 = 2;
    /// Extended Next Hop Encoding (RFC 8950).
    pub const EXTENDED_NEXT_HOP: u8 = 5;
    /// Graceful Restart (RFC 4724).
    pub const GRACEFUL_RESTART: u8 = 64;
    /// 4-octet AS number (RFC 6793).
    pub const FOUR_OCTET_AS: u8 = 65;
}

/// One family in the graceful restart capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrFamily {
    /// The address family.
    pub family: Family,
    /// F-bit: forwarding state was preserved across the restart.
    pub forwarding_preserved: bool,
}

/// Graceful restart capability (RFC 4724 §3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct GracefulRestart {
    /// R-bit: the sender has restarted.
    pub restarting: bool,
    /// Restart time in seconds (12 bits, at most 4095).
    pub restart_time: u16,
    /// Families whose forwarding state the sender can preserve.
    pub families: Vec<GrFamily>,
}

/// One tuple of the extended next hop capability (RFC 8950 §3): routes of AFI `afi` and
/// SAFI `safi` may carry a next hop of address family `next_hop_afi`. The SAFI takes two
/// octets here, one everywhere else: it is kept as sent, so a tuple naming no family we
/// know still re-encodes as it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NextHopFamily {
    /// The NLRI's AFI.
    pub afi: u16,
    /// The NLRI's SAFI, as the capability carries it.
    pub safi: u16,
    /// The next hop's AFI.
    pub next_hop_afi: u16,
}

impl NextHopFamily {
    /// IPv4 unicast routes with an IPv6 next hop: what unnumbered peering needs.
    pub const IPV4_OVER_IPV6: NextHopFamily = NextHopFamily {
        afi: Family::IPV4_UNICAST.afi,
        safi: Family::IPV4_UNICAST.safi as u16,
        next_hop_afi: 2,
    };
}

/// A capability advertised in OPEN.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Capability {
    /// Multiprotocol extensions for one AFI/SAFI.
    Multiprotocol(Family),
    /// Route refresh.
    RouteRefresh,
    /// Extended next hop encoding: the families whose routes may carry a next hop of
    /// another address family.
    ExtendedNextHop(Vec<NextHopFamily>),
    /// Graceful restart.
    GracefulRestart(GracefulRestart),
    /// Support for 4-octet AS numbers, carrying the sender's AS.
    FourOctetAs(u32),
    /// Any other capability, kept as raw bytes.
    Unknown {
        /// Capability code.
        code: u8,
        /// Capability value.
        value: Bytes,
    },
}

impl Capability {
    /// Appends code, length and value.
    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Capability::Multiprotocol(f) => {
                out.put_slice(&[cap_code::MULTIPROTOCOL, 4]);
                out.put_u16(f.afi);
                out.put_u8(0);
                out.put_u8(f.safi);
            }
            Capability::RouteRefresh => out.put_slice(&[cap_code::ROUTE_REFRESH, 0]),
            Capability::ExtendedNextHop(tuples) => {
                // Six octets a tuple (the SAFI takes two here): at most 42 fit in 255.
                let tuples = tuples.get(..tuples.len().min(42)).unwrap_or_default();
                out.put_u8(cap_code::EXTENDED_NEXT_HOP);
                out.put_u8((6 * tuples.len()) as u8);
                for t in tuples {
                    out.put_u16(t.afi);
                    out.put_u16(t.safi);
                    out.put_u16(t.next_hop_afi);
                }
            }
            Capability::FourOctetAs(asn) => {
                out.put_slice(&[cap_code::FOUR_OCTET_AS, 4]);
                out.put_u32(*asn);
            }
            Capability::GracefulRestart(gr) => {
                // A capability value is at most 255 bytes: at most 63 families fit.
                let fams = gr.families.get(..gr.families.len().min(63)).unwrap_or_default();
                out.put_u8(cap_code::GRACEFUL_RESTART);
                out.put_u8((2 + 4 * fams.len()) as u8);
                let r = if gr.restarting { 0x8000 } else { 0 };
                out.put_u16(r | (gr.restart_time & 0x0fff));
                for f in fams {
                    out.put_u16(f.family.afi);
                    out.put_u8(f.family.safi);
                    out.put_u8(if f.forwarding_preserved { 0x80 } else { 0 });
                }
            }
            Capability::Unknown { code, value } => {
                let v = value.get(..value.len().min(255)).unwrap_or_default();
                out.put_u8(*code);
                out.put_u8(v.len() as u8);
                out.put_slice(v);
            }
        }
    }

    /// Reads one capability; `None` when it is malformed.
    pub(crate) fn decode(r: &mut Reader) -> Option<Capability> {
        let code = r.u8()?;
        let len = r.u8()?;
        let value = r.take(usize::from(len))?;
        let mut v = Reader::new(value.clone());
        let cap = match code {
            cap_code::MULTIPROTOCOL if len == 4 => {
                let afi = v.u16()?;
                let _reserved = v.u8()?;
                let safi = v.u8()?;
                Capability::Multiprotocol(Family { afi, safi })
            }
            cap_code::ROUTE_REFRESH if len == 0 => Capability::RouteRefresh,
            cap_code::EXTENDED_NEXT_HOP if len > 0 && len % 6 == 0 => {
                let mut tuples = Vec::new();
                while !v.is_empty() {
                    tuples.push(NextHopFamily { afi: v.u16()?, safi: v.u16()?, next_hop_afi: v.u16()? });
                }
                Capability::ExtendedNextHop(tuples)
            }
            cap_code::FOUR_OCTET_AS if len == 4 => Capability::FourOctetAs(v.u32()?),
            cap_code::GRACEFUL_RESTART if len >= 2 && (len - 2) % 4 == 0 => {
                let flags_time = v.u16()?;
                let mut families = Vec::new();
                while !v.is_empty() {
                    let afi = v.u16()?;
                    let safi = v.u8()?;
                    let flags = v.u8()?;
                    families.push(GrFamily {
                        family: Family { afi, safi },
                        forwarding_preserved: flags & 0x80 != 0,
                    });
                }
                Capability::GracefulRestart(GracefulRestart {
                    restarting: flags_time & 0x8000 != 0,
                    restart_time: flags_time & 0x0fff,
                    families,
                })
            }
            cap_code::MULTIPROTOCOL
            | cap_code::ROUTE_REFRESH
            | cap_code::EXTENDED_NEXT_HOP
            | cap_code::FOUR_OCTET_AS
            | cap_code::GRACEFUL_RESTART => return None,
            _ => Capability::Unknown { code, value },
        };
        Some(cap)
    }
}
