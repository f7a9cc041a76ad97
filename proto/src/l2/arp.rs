//! ARP for Ethernet/IPv4 (RFC 826), sans-IO: bytes in, packets out, never a panic.
//!
//! [`ArpPacket`] is the 28-byte ARP payload; [`decode_frame`] / [`encode_frame`] add the
//! 14-byte Ethernet header the AF_PACKET socket sees.

use std::net::Ipv4Addr;

use bytes::{Buf, BufMut, BytesMut};

/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Hardware type Ethernet.
const HTYPE_ETHERNET: u16 = 1;
/// Protocol type IPv4.
const PTYPE_IPV4: u16 = 0x0800;
/// Length of an Ethernet/IPv4 ARP payload.
pub const ARP_LEN: usize = 28;
/// Length of an Ethernet header.
pub const ETHERNET_HEADER_LEN: usize = 14;
/// Shortest Ethernet frame without FCS; shorter frames are padded.
const MIN_FRAME_LEN: usize = 60;
/// The Ethernet broadcast address.
pub const BROADCAST_MAC: [u8; 6] = [0xff; 6];

/// A MAC address.
pub type Mac = [u8; 6];

/// ARP operation (RFC 826 `ar$op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Who has `target_ip`?
    Request,
    /// `sender_ip` is at `sender_mac`.
    Reply,
}

impl Operation {
    fn code(self) -> u16 {
        match self {
            Operation::Request => 1,
            Operation::Reply => 2,
        }
    }
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpPacket {
    /// Request or reply.
    pub operation: Operation,
    /// Sender hardware address.
    pub sender_mac: Mac,
    /// Sender protocol address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in requests).
    pub target_mac: Mac,
    /// Target protocol address.
    pub target_ip: Ipv4Addr,
}

/// Why bytes are not an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the packet needs.
    #[error("ARP: truncated, {got} bytes where {need} are needed")]
    Truncated { need: usize, got: usize },
    /// The Ethernet frame does not carry ARP.
    #[error("ARP: ethertype {0:#06x} is not ARP")]
    NotArp(u16),
    /// Not Ethernet hardware.
    #[error("ARP: hardware type {0} is not Ethernet")]
    HardwareType(u16),
    /// Not IPv4.
    #[error("ARP: protocol type {0:#06x} is not IPv4")]
    ProtocolType(u16),
    /// Address lengths other than 6 and 4.
    #[error("ARP: address lengths {hlen}/{plen}, expected 6/4")]
    AddressLengths { hlen: u8, plen: u8 },
    /// Neither request nor reply (RARP, InARP, …).
    #[error("ARP: unsupported operation {0}")]
    Operation(u16),
}

impl ArpPacket {
    /// Decodes the ARP payload (after the Ethernet header). Trailing bytes (padding) stay in `buf`.
    pub fn decode(buf: &mut impl Buf) -> Result<ArpPacket, DecodeError> {
        if buf.remaining() < ARP_LEN {
            return Err(DecodeError::Truncated { need: ARP_LEN, got: buf.remaining() });
        }
        let htype = buf.get_u16();
        let ptype = buf.get_u16();
        let (hlen, plen) = (buf.get_u8(), buf.get_u8());
        let op = buf.get_u16();
        if htype != HTYPE_ETHERNET {
            return Err(DecodeError::HardwareType(htype));
        }
        if ptype != PTYPE_IPV4 {
            return Err(DecodeError::ProtocolType(ptype));
        }
        if (hlen, plen) != (6, 4) {
            return Err(DecodeError::AddressLengths { hlen, plen });
        }
        let operation = match op {
            1 => Operation::Request,
            2 => Operation::Reply,
            other => return Err(DecodeError::Operation(other)),
        };
        let mut sender_mac = [0; 6];
        buf.copy_to_slice(&mut sender_mac);
        let sender_ip = Ipv4Addr::from(buf.get_u32());
        let mut target_mac = [0; 6];
        buf.copy_to_slice(&mut target_mac);
        let target_ip = Ipv4Addr::from(buf.get_u32());
        Ok(ArpPacket { operation, sender_mac, sender_ip, target_mac, target_ip })
    }

    /// Appends the 28-byte ARP payload.
    pub fn encode(&self, buf: &mut BytesMut) {
        buf.reserve(ARP_LEN);
        buf.put_u16(HTYPE_ETHERNET);
        buf.put_u16(PTYPE_IPV4);
        buf.put_u8(6);
        buf.put_u8(4);
        buf.put_u16(self.operation.code());
        buf.put_slice(&self.sender_mac);
        buf.put_u32(self.sender_ip.into());
        buf.put_slice(&self.target_mac);
        buf.put_u32(self.target_ip.into());
    }

    /// The reply `my_mac` gives to this request (RFC 826: swap, fill in, op = reply).
    pub fn reply(&self, my_mac: Mac) -> ArpPacket {
        ArpPacket {
            operation: Operation::Reply,
            sender_mac: my_mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }

    /// A gratuitous ARP sent as a REQUEST (sender IP = target IP): Linux updates an
    /// existing entry from it unconditionally, unlike a gratuitous reply (TESTBED.md).
    pub fn gratuitous(mac: Mac, ip: Ipv4Addr) -> ArpPacket {
        ArpPacket {
            operation: Operation::Request,
            sender_mac: mac,
            sender_ip: ip,
            target_mac: [0; 6],
            target_ip: ip,
        }
    }

    /// A probe for `ip` from `mac` (RFC 5227 §2.1.1: sender IP 0.0.0.0, so no cache
    /// learns from it): whoever answers for `ip` replies to `mac`.
    pub fn probe(mac: Mac, ip: Ipv4Addr) -> ArpPacket {
        ArpPacket {
            operation: Operation::Request,
            sender_mac: mac,
            sender_ip: Ipv4Addr::UNSPECIFIED,
            target_mac: [0; 6],
            target_ip: ip,
        }
    }

    /// Whether this is a gratuitous announcement (sender IP = target IP), which needs no answer.
    pub fn is_gratuitous(&self) -> bool {
        self.sender_ip == self.target_ip
    }
}

/// The Ethernet header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetHeader {
    /// Destination MAC.
    pub dst: Mac,
    /// Source MAC.
    pub src: Mac,
    /// EtherType.
    pub ethertype: u16,
}

/// Decodes an Ethernet frame carrying ARP (as an AF_PACKET SOCK_RAW socket delivers it).
pub fn decode_frame(frame: &[u8]) -> Result<(EthernetHeader, ArpPacket), DecodeError> {
    let mut buf = frame;
    if buf.remaining() < ETHERNET_HEADER_LEN {
        return Err(DecodeError::Truncated { need: ETHERNET_HEADER_LEN + ARP_LEN, got: buf.remaining() });
    }
    let mut dst = [0; 6];
    buf.copy_to_slice(&mut dst);
    let mut src = [0; 6];
    buf.copy_to_slice(&mut src);
    let ethertype = buf.get_u16();
    if ethertype != ETHERTYPE_ARP {
        return Err(DecodeError::NotArp(ethertype));
    }
    let arp = ArpPacket::decode(&mut buf)?;
    Ok((EthernetHeader { dst, src, ethertype }, arp))
}

/// Encodes `arp` in an Ethernet frame from `src` to `dst`, padded to the 60-byte minimum.
pub fn encode_frame(dst: Mac, src: Mac, arp: &ArpPacket) -> BytesMut {
    let mut buf = BytesMut::with_capacity(MIN_FRAME_LEN);
    buf.put_slice(&dst);
    buf.put_slice(&src);
    buf.put_u16(ETHERTYPE_ARP);
    arp.encode(&mut buf);
    buf.resize(MIN_FRAME_LEN, 0);
    buf
}

/// Formats a MAC the way `ip neigh` prints it.
pub fn mac_to_string(mac: &Mac) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAC_A: Mac = [0x00, 0x00, 0x5e, 0x00, 0x53, 0x11];
    const MAC_C: Mac = [0x00, 0x00, 0x5e, 0x00, 0x53, 0xc1];

    /// A request from 192.0.2.100 for 192.0.2.200, as `arping` sends it.
    const REQUEST_FRAME: [u8; 60] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst broadcast
        0x00, 0x00, 0x5e, 0x00, 0x53, 0xc1, // src client
        0x08, 0x06, // ARP
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // Ethernet/IPv4, request
        0x00, 0x00, 0x5e, 0x00, 0x53, 0xc1, 192, 0, 2, 100, // sender
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 192, 0, 2, 200, // target
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding
    ];

    #[test]
    fn golden_request_decodes() {
        let (eth, arp) = decode_frame(&REQUEST_FRAME).unwrap();
        assert_eq!(eth, EthernetHeader { dst: BROADCAST_MAC, src: MAC_C, ethertype: ETHERTYPE_ARP });
        assert_eq!(
            arp,
            ArpPacket {
                operation: Operation::Request,
                sender_mac: MAC_C,
                sender_ip: Ipv4Addr::new(192, 0, 2, 100),
                target_mac: [0; 6],
                target_ip: Ipv4Addr::new(192, 0, 2, 200),
            }
        );
        assert!(!arp.is_gratuitous());
        assert_eq!(&encode_frame(eth.dst, eth.src, &arp)[..], &REQUEST_FRAME[..]);
    }

    #[test]
    fn golden_reply_encodes() {
        let (_, req) = decode_frame(&REQUEST_FRAME).unwrap();
        let reply = req.reply(MAC_A);
        let frame = encode_frame(req.sender_mac, MAC_A, &reply);
        let want: [u8; 42] = [
            0x00, 0x00, 0x5e, 0x00, 0x53, 0xc1, 0x00, 0x00, 0x5e, 0x00, 0x53, 0x11, 0x08, 0x06, //
            0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, //
            0x00, 0x00, 0x5e, 0x00, 0x53, 0x11, 192, 0, 2, 200, //
            0x00, 0x00, 0x5e, 0x00, 0x53, 0xc1, 192, 0, 2, 100,
        ];
        assert_eq!(&frame[..42], &want[..]);
        assert_eq!(frame.len(), 60);
        assert!(frame[42..].iter().all(|b| *b == 0));
    }

    #[test]
    fn gratuitous_is_a_request_with_sender_ip_equal_target_ip() {
        let g = ArpPacket::gratuitous(MAC_A, Ipv4Addr::new(192, 0, 2, 200));
        let mut buf = BytesMut::new();
        g.encode(&mut buf);
        assert_eq!(&buf[6..8], &[0, 1], "op must be request");
        assert_eq!(&buf[14..18], &buf[24..28], "sender IP = target IP");
        assert!(g.is_gratuitous());
    }

    #[test]
    fn malformed_inputs_are_errors() {
        assert!(matches!(decode_frame(&REQUEST_FRAME[..20]), Err(DecodeError::Truncated { .. })));
        assert!(matches!(decode_frame(&[]), Err(DecodeError::Truncated { .. })));
        let mut f = REQUEST_FRAME;
        f[12] = 0x08;
        f[13] = 0x00;
        assert_eq!(decode_frame(&f), Err(DecodeError::NotArp(0x0800)));
        let mut f = REQUEST_FRAME;
        f[15] = 6; // IEEE 802
        assert_eq!(decode_frame(&f), Err(DecodeError::HardwareType(6)));
        let mut f = REQUEST_FRAME;
        f[16] = 0x86;
        f[17] = 0xdd;
        assert_eq!(decode_frame(&f), Err(DecodeError::ProtocolType(0x86dd)));
        let mut f = REQUEST_FRAME;
        f[18] = 8;
        assert_eq!(decode_frame(&f), Err(DecodeError::AddressLengths { hlen: 8, plen: 4 }));
        let mut f = REQUEST_FRAME;
        f[21] = 3; // RARP request
        assert_eq!(decode_frame(&f), Err(DecodeError::Operation(3)));
    }

    fn arb_packet() -> impl Strategy<Value = ArpPacket> {
        (any::<bool>(), any::<Mac>(), any::<u32>(), any::<Mac>(), any::<u32>()).prop_map(
            |(req, sm, si, tm, ti)| ArpPacket {
                operation: if req { Operation::Request } else { Operation::Reply },
                sender_mac: sm,
                sender_ip: Ipv4Addr::from(si),
                target_mac: tm,
                target_ip: Ipv4Addr::from(ti),
            },
        )
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = decode_frame(&bytes);
            let _ = ArpPacket::decode(&mut &bytes[..]);
        }

        #[test]
        fn round_trip(p in arb_packet(), dst in any::<Mac>(), src in any::<Mac>()) {
            let frame = encode_frame(dst, src, &p);
            let (eth, back) = decode_frame(&frame).unwrap();
            prop_assert_eq!(back, p);
            prop_assert_eq!((eth.dst, eth.src), (dst, src));
        }
    }
}
