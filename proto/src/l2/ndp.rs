//! ICMPv6 Neighbor Solicitation / Advertisement with their options (RFC 4861 §4.3,
//! §4.4, §4.6.1), sans-IO. Messages start at the ICMPv6 type byte, as a raw ICMPv6
//! socket takes them (the kernel computes the checksum of what it sends); received ones
//! come in whole Ethernet frames ([`decode_frame`], which checks the checksum), since a
//! raw socket sees only what the kernel delivers locally.

use std::net::Ipv6Addr;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::arp::Mac;

/// ICMPv6 type of a Neighbor Solicitation.
pub const TYPE_NS: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement.
pub const TYPE_NA: u8 = 136;
/// The hop limit every ND message is sent with and must arrive with (RFC 4861 §7.1).
pub const ND_HOP_LIMIT: u8 = 255;
/// All-nodes multicast, where unsolicited advertisements go.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// Fixed part of NS and NA: type, code, checksum, flags/reserved, target.
const FIXED_LEN: usize = 24;

const OPT_SOURCE_LL: u8 = 1;
const OPT_TARGET_LL: u8 = 2;

/// An ND option (RFC 4861 §4.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NdOption {
    /// Source link-layer address (Ethernet).
    SourceLinkLayer(Mac),
    /// Target link-layer address (Ethernet).
    TargetLinkLayer(Mac),
    /// Any other option, kept as its body (after type and length), padded to 8-byte units.
    Other { kind: u8, body: Bytes },
}

/// Neighbor Solicitation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighborSolicitation {
    /// Address being resolved.
    pub target: Ipv6Addr,
    /// Options in wire order.
    pub options: Vec<NdOption>,
}

/// Neighbor Advertisement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighborAdvertisement {
    /// R flag: the sender is a router.
    pub router: bool,
    /// S flag: an answer to a solicitation.
    pub solicited: bool,
    /// O flag: replace the cached link-layer address.
    pub override_flag: bool,
    /// Address advertised.
    pub target: Ipv6Addr,
    /// Options in wire order.
    pub options: Vec<NdOption>,
}

/// An NS or an NA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NdMessage {
    /// Neighbor Solicitation.
    Solicitation(NeighborSolicitation),
    /// Neighbor Advertisement.
    Advertisement(NeighborAdvertisement),
}

/// Why bytes are not a valid NS/NA.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the message needs.
    #[error("NDP: truncated, {got} bytes where {need} are needed")]
    Truncated { need: usize, got: usize },
    /// Another ICMPv6 type.
    #[error("NDP: ICMPv6 type {0} is neither NS nor NA")]
    Type(u8),
    /// ICMPv6 code must be 0 (RFC 4861 §7.1.1).
    #[error("NDP: ICMPv6 code {0}, must be 0")]
    Code(u8),
    /// The target is a multicast address (RFC 4861 §7.1.1).
    #[error("NDP: multicast target {0}")]
    MulticastTarget(Ipv6Addr),
    /// An option of length zero (RFC 4861 §4.6: must be silently discarded).
    #[error("NDP: option {kind} has length 0")]
    ZeroLengthOption { kind: u8 },
    /// An option longer than what is left of the message.
    #[error("NDP: option {kind} of {len} bytes overruns the message ({left} left)")]
    OptionOverrun { kind: u8, len: usize, left: usize },
}

impl NdMessage {
    /// Decodes an NS or NA starting at the ICMPv6 type byte; consumes all of `buf`.
    pub fn decode(buf: &mut impl Buf) -> Result<NdMessage, DecodeError> {
        if buf.remaining() < FIXED_LEN {
            return Err(DecodeError::Truncated { need: FIXED_LEN, got: buf.remaining() });
        }
        let kind = buf.get_u8();
        let code = buf.get_u8();
        let _checksum = buf.get_u16();
        let flags = buf.get_u32();
        let target = Ipv6Addr::from(buf.get_u128());
        if kind != TYPE_NS && kind != TYPE_NA {
            return Err(DecodeError::Type(kind));
        }
        if code != 0 {
            return Err(DecodeError::Code(code));
        }
        if target.is_multicast() {
            return Err(DecodeError::MulticastTarget(target));
        }
        let options = decode_options(buf)?;
        Ok(if kind == TYPE_NS {
            NdMessage::Solicitation(NeighborSolicitation { target, options })
        } else {
            NdMessage::Advertisement(NeighborAdvertisement {
                router: flags & 0x8000_0000 != 0,
                solicited: flags & 0x4000_0000 != 0,
                override_flag: flags & 0x2000_0000 != 0,
                target,
                options,
            })
        })
    }

    /// Appends the message with a zero checksum (the kernel fills it in on send).
    pub fn encode(&self, buf: &mut BytesMut) {
        let (kind, flags, target, options) = match self {
            NdMessage::Solicitation(ns) => (TYPE_NS, 0, ns.target, &ns.options),
            NdMessage::Advertisement(na) => {
                let flags = (u32::from(na.router) << 31)
                    | (u32::from(na.solicited) << 30)
                    | (u32::from(na.override_flag) << 29);
                (TYPE_NA, flags, na.target, &na.options)
            }
        };
        buf.put_u8(kind);
        buf.put_u8(0);
        buf.put_u16(0);
        buf.put_u32(flags);
        buf.put_u128(target.into());
        for o in options {
            encode_option(o, buf);
        }
    }

    /// The encoded message.
    pub fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::with_capacity(32);
        self.encode(&mut b);
        b.freeze()
    }

    /// The address the message is about.
    pub fn target(&self) -> Ipv6Addr {
        match self {
            NdMessage::Solicitation(ns) => ns.target,
            NdMessage::Advertisement(na) => na.target,
        }
    }
}

impl NeighborSolicitation {
    /// The solicitor's source link-layer address option, if present.
    pub fn source_mac(&self) -> Option<Mac> {
        self.options.iter().find_map(|o| match o {
            NdOption::SourceLinkLayer(m) => Some(*m),
            _ => None,
        })
    }
}

impl NeighborAdvertisement {
    /// The advertiser's target link-layer address option, if present.
    pub fn target_mac(&self) -> Option<Mac> {
        self.options.iter().find_map(|o| match o {
            NdOption::TargetLinkLayer(m) => Some(*m),
            _ => None,
        })
    }
}

/// A probe for `target` (RFC 4862 §5.4.2's duplicate address detection form: from the
/// unspecified address, no options): whoever answers for `target` advertises it.
pub fn probe(target: Ipv6Addr) -> NdMessage {
    NdMessage::Solicitation(NeighborSolicitation { target, options: Vec::new() })
}

/// The NA `mac` sends for `target`: solicited or not; Override set either way, since the
/// owner is authoritative for a service address and must replace a stale cached MAC.
pub fn advertisement(target: Ipv6Addr, mac: Mac, solicited: bool) -> NdMessage {
    NdMessage::Advertisement(NeighborAdvertisement {
        router: false,
        solicited,
        override_flag: true,
        target,
        options: vec![NdOption::TargetLinkLayer(mac)],
    })
}

/// The solicited-node multicast group of `addr` (RFC 4291 §2.7.1): ff02::1:ffXX:XXXX.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::new(0xff02, 0, 0, 0, 0, 1, 0xff00 | u16::from(o[13]), u16::from_be_bytes([o[14], o[15]]))
}

/// An ICMPv6 message as it arrived, in its Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdFrame<'a> {
    /// Ethernet destination.
    pub dst_mac: Mac,
    /// Ethernet source.
    pub src_mac: Mac,
    /// IPv6 source.
    pub src: Ipv6Addr,
    /// IPv6 destination.
    pub dst: Ipv6Addr,
    /// The hop limit it arrived with.
    pub hop_limit: u8,
    /// The ICMPv6 message, from its type byte.
    pub message: &'a [u8],
}

/// Reads an Ethernet frame carrying IPv6 whose next header is ICMPv6 (ND messages carry
/// no extension headers); None for anything else, a truncated packet or a wrong
/// checksum. Never panics on input.
pub fn decode_frame(frame: &[u8]) -> Option<NdFrame<'_>> {
    const ETH: usize = 14;
    const IP6: usize = 40;
    let mac = |at: usize| -> Option<Mac> { frame.get(at..at + 6)?.try_into().ok() };
    let (dst_mac, src_mac) = (mac(0)?, mac(6)?);
    if frame.get(12..14)? != [0x86, 0xdd] {
        return None;
    }
    let ip = frame.get(ETH..)?;
    let header = ip.get(..IP6)?;
    if header[0] >> 4 != 6 || header[6] != 58 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([header[4], header[5]]));
    let addr = |at: usize| -> Option<Ipv6Addr> {
        let b: [u8; 16] = header.get(at..at + 16)?.try_into().ok()?;
        Some(Ipv6Addr::from(b))
    };
    let (src, dst) = (addr(8)?, addr(24)?);
    let message = ip.get(IP6..IP6 + len)?;
    (checksum(src, dst, message) == 0).then_some(NdFrame {
        dst_mac,
        src_mac,
        src,
        dst,
        hop_limit: header[7],
        message,
    })
}

/// The ICMPv6 checksum of `msg` between `src` and `dst` (RFC 4443 §2.3), for tests and tools.
pub fn checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    let mut add = |bytes: &[u8]| {
        for c in bytes.chunks(2) {
            let hi = c.first().copied().unwrap_or(0);
            let lo = c.get(1).copied().unwrap_or(0);
            sum += u64::from(u16::from_be_bytes([hi, lo]));
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&u32::try_from(msg.len()).unwrap_or(u32::MAX).to_be_bytes());
    add(&[0, 0, 0, 58]);
    add(msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn decode_options(buf: &mut impl Buf) -> Result<Vec<NdOption>, DecodeError> {
    let mut options = Vec::new();
    while buf.remaining() >= 2 {
        let kind = buf.get_u8();
        let units = buf.get_u8();
        if units == 0 {
            return Err(DecodeError::ZeroLengthOption { kind });
        }
        let len = usize::from(units) * 8;
        let body_len = len - 2;
        if buf.remaining() < body_len {
            return Err(DecodeError::OptionOverrun { kind, len, left: buf.remaining() + 2 });
        }
        let body = buf.copy_to_bytes(body_len);
        let option = match (kind, &body[..]) {
            (OPT_SOURCE_LL | OPT_TARGET_LL, [a, b, c, d, e, f]) => {
                let mac = [*a, *b, *c, *d, *e, *f];
                if kind == OPT_SOURCE_LL {
                    NdOption::SourceLinkLayer(mac)
                } else {
                    NdOption::TargetLinkLayer(mac)
                }
            }
            _ => NdOption::Other { kind, body },
        };
        options.push(option);
    }
    // A single trailing byte cannot be an option; ignore it like padding.
    buf.advance(buf.remaining());
    Ok(options)
}

fn encode_option(o: &NdOption, buf: &mut BytesMut) {
    match o {
        NdOption::SourceLinkLayer(mac) | NdOption::TargetLinkLayer(mac) => {
            buf.put_u8(if matches!(o, NdOption::SourceLinkLayer(_)) { OPT_SOURCE_LL } else { OPT_TARGET_LL });
            buf.put_u8(1);
            buf.put_slice(mac);
        }
        NdOption::Other { kind, body } => {
            // Pad the body so the option fills whole 8-byte units (at most 255 of them).
            let max_body = 255 * 8 - 2;
            let body = &body[..body.len().min(max_body)];
            let units = (body.len() + 2).div_ceil(8);
            buf.put_u8(*kind);
            buf.put_u8(u8::try_from(units).unwrap_or(u8::MAX));
            buf.put_slice(body);
            buf.put_bytes(0, units * 8 - 2 - body.len());
        }
    }
}

#[cfg(test)]
mod frame_tests {
    use super::*;

    /// An Ethernet frame carrying `msg` from `src` to `dst`, its checksum set.
    fn frame(src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, msg: &[u8]) -> Vec<u8> {
        let mut msg = msg.to_vec();
        msg[2..4].fill(0);
        let sum = checksum(src, dst, &msg);
        msg[2..4].copy_from_slice(&sum.to_be_bytes());
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x86, 0xdd];
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&u16::try_from(msg.len()).unwrap().to_be_bytes());
        f.extend_from_slice(&[58, hop_limit]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(&msg);
        f
    }

    #[test]
    fn a_unicast_solicitation_in_a_frame_is_read_and_a_bad_one_is_not() {
        let (client, vip): (Ipv6Addr, Ipv6Addr) =
            ("2001:db8::100".parse().unwrap(), "2001:db8::200".parse().unwrap());
        let ns = probe(vip).to_bytes();
        let f = frame(client, vip, 255, &ns);
        let got = decode_frame(&f).unwrap();
        assert_eq!((got.src, got.dst, got.hop_limit), (client, vip, 255));
        assert_eq!(got.dst_mac, [2, 0, 0, 0, 0, 1]);
        assert_eq!(got.src_mac, [2, 0, 0, 0, 0, 2]);
        assert_eq!(NdMessage::decode(&mut &got.message[..]).unwrap(), probe(vip));
        let mut bad = f.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(decode_frame(&bad), None, "wrong checksum");
        for cut in 0..f.len() {
            assert_eq!(decode_frame(&f[..cut]), None, "truncated at {cut}");
        }
        let mut udp = f.clone();
        udp[14 + 6] = 17;
        assert_eq!(decode_frame(&udp), None, "not ICMPv6");
        let mut v4 = f;
        v4[12..14].copy_from_slice(&[0x08, 0x00]);
        assert_eq!(decode_frame(&v4), None, "not IPv6");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CLIENT_MAC: Mac = [0x00, 0x00, 0x5e, 0x00, 0x53, 0xc1];
    const NODE_MAC: Mac = [0x00, 0x00, 0x5e, 0x00, 0x53, 0x11];

    fn vip() -> Ipv6Addr {
        "2001:db8::200".parse().unwrap()
    }

    /// NS from 2001:db8::100 for 2001:db8::200 as the Linux kernel sends it (checksum included).
    fn ns_bytes() -> Vec<u8> {
        let mut b = vec![135, 0, 0, 0, 0, 0, 0, 0];
        b.extend_from_slice(&vip().octets());
        b.extend_from_slice(&[1, 1]);
        b.extend_from_slice(&CLIENT_MAC);
        let c = checksum("2001:db8::100".parse().unwrap(), solicited_node(vip()), &b);
        b[2..4].copy_from_slice(&c.to_be_bytes());
        b
    }

    #[test]
    fn golden_solicitation_decodes() {
        let b = ns_bytes();
        let msg = NdMessage::decode(&mut &b[..]).unwrap();
        let NdMessage::Solicitation(ns) = &msg else { panic!("{msg:?}") };
        assert_eq!(ns.target, vip());
        assert_eq!(ns.source_mac(), Some(CLIENT_MAC));
        // Our encoding leaves the checksum to the kernel; everything else is identical.
        let mut again = msg.to_bytes().to_vec();
        again[2..4].copy_from_slice(&b[2..4]);
        assert_eq!(again, b);
        assert_eq!(checksum("2001:db8::100".parse().unwrap(), solicited_node(vip()), &b), 0);
    }

    #[test]
    fn golden_unsolicited_advertisement_encodes() {
        let bytes = advertisement(vip(), NODE_MAC, false).to_bytes();
        let mut want = vec![136, 0, 0, 0, 0x20, 0, 0, 0];
        want.extend_from_slice(&vip().octets());
        want.extend_from_slice(&[2, 1, 0x00, 0x00, 0x5e, 0x00, 0x53, 0x11]);
        assert_eq!(&bytes[..], &want[..]);
        let solicited = advertisement(vip(), NODE_MAC, true).to_bytes();
        assert_eq!(solicited[4], 0x60, "S and O set");
    }

    #[test]
    fn solicited_node_group() {
        assert_eq!(solicited_node(vip()), "ff02::1:ff00:200".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            solicited_node("2001:db8::abcd:1234:5678".parse().unwrap()),
            "ff02::1:ff34:5678".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let b = ns_bytes();
        assert!(matches!(NdMessage::decode(&mut &b[..10]), Err(DecodeError::Truncated { .. })));
        let mut x = b.clone();
        x[0] = 128;
        assert_eq!(NdMessage::decode(&mut &x[..]), Err(DecodeError::Type(128)));
        let mut x = b.clone();
        x[1] = 1;
        assert_eq!(NdMessage::decode(&mut &x[..]), Err(DecodeError::Code(1)));
        let mut x = b.clone();
        x[8] = 0xff;
        assert!(matches!(NdMessage::decode(&mut &x[..]), Err(DecodeError::MulticastTarget(_))));
        let mut x = b.clone();
        x[25] = 0;
        assert_eq!(NdMessage::decode(&mut &x[..]), Err(DecodeError::ZeroLengthOption { kind: 1 }));
        let mut x = b.clone();
        x[25] = 2;
        assert!(matches!(NdMessage::decode(&mut &x[..]), Err(DecodeError::OptionOverrun { .. })));
    }

    #[test]
    fn unknown_options_are_kept() {
        let mut b = ns_bytes();
        b.extend_from_slice(&[14, 1, 1, 2, 3, 4, 5, 6]); // nonce option
        let msg = NdMessage::decode(&mut &b[..]).unwrap();
        let NdMessage::Solicitation(ns) = &msg else { panic!("{msg:?}") };
        assert_eq!(
            ns.options[1],
            NdOption::Other { kind: 14, body: Bytes::from_static(&[1, 2, 3, 4, 5, 6]) }
        );
    }

    fn arb_option() -> impl Strategy<Value = NdOption> {
        prop_oneof![
            any::<Mac>().prop_map(NdOption::SourceLinkLayer),
            any::<Mac>().prop_map(NdOption::TargetLinkLayer),
            (3u8..=255, 0usize..4).prop_map(|(kind, units)| NdOption::Other {
                kind,
                body: Bytes::from(vec![kind; units * 8 + 6]),
            }),
        ]
    }

    fn arb_target() -> impl Strategy<Value = Ipv6Addr> {
        any::<u128>().prop_map(Ipv6Addr::from).prop_filter("unicast", |a| !a.is_multicast())
    }

    fn arb_message() -> impl Strategy<Value = NdMessage> {
        let opts = || proptest::collection::vec(arb_option(), 0..4);
        prop_oneof![
            (arb_target(), opts()).prop_map(|(target, options)| NdMessage::Solicitation(
                NeighborSolicitation { target, options }
            )),
            (any::<(bool, bool, bool)>(), arb_target(), opts()).prop_map(|((r, s, o), target, options)| {
                NdMessage::Advertisement(NeighborAdvertisement {
                    router: r,
                    solicited: s,
                    override_flag: o,
                    target,
                    options,
                })
            }),
        ]
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = NdMessage::decode(&mut &bytes[..]);
        }

        #[test]
        fn round_trip(m in arb_message()) {
            let bytes = m.to_bytes();
            prop_assert_eq!(NdMessage::decode(&mut &bytes[..]), Ok(m));
        }
    }
}
