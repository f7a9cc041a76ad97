//! The BFD Control packet (RFC 5880 §4.1), without the optional authentication section.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |Vers |  Diag   |Sta|P|F|C|A|D|M|  Detect Mult  |    Length     |
//! |                       My Discriminator                        |
//! |                      Your Discriminator                       |
//! |                    Desired Min TX Interval                    |
//! |                   Required Min RX Interval                    |
//! |                 Required Min Echo RX Interval                 |
//! ```
use bytes::{Buf, BufMut, BytesMut};

/// Length of a Control packet without authentication.
pub const LEN: usize = 24;
/// The only protocol version (RFC 5880 §4.1).
pub const VERSION: u8 = 1;

/// bfd.SessionState / the State (Sta) field (RFC 5880 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// 0: administratively held down.
    AdminDown,
    /// 1: down, or not yet up.
    Down,
    /// 2: the remote system is heard, the three-way handshake is under way.
    Init,
    /// 3: up.
    Up,
}

impl State {
    fn from_bits(b: u8) -> Self {
        match b & 0b11 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }

    fn bits(self) -> u8 {
        match self {
            State::AdminDown => 0,
            State::Down => 1,
            State::Init => 2,
            State::Up => 3,
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::AdminDown => "AdminDown",
            State::Down => "Down",
            State::Init => "Init",
            State::Up => "Up",
        })
    }
}

/// bfd.LocalDiag / the Diagnostic field (RFC 5880 §4.1): why the session last changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Diagnostic {
    /// 0: No Diagnostic.
    None,
    /// 1: Control Detection Time Expired.
    ControlDetectionTimeExpired,
    /// 2: Echo Function Failed.
    EchoFunctionFailed,
    /// 3: Neighbor Signaled Session Down.
    NeighborSignaledSessionDown,
    /// 4: Forwarding Plane Reset.
    ForwardingPlaneReset,
    /// 5: Path Down.
    PathDown,
    /// 6: Concatenated Path Down.
    ConcatenatedPathDown,
    /// 7: Administratively Down.
    AdministrativelyDown,
    /// 8: Reverse Concatenated Path Down.
    ReverseConcatenatedPathDown,
    /// 9–31: reserved; kept so a packet re-encodes as received.
    Reserved(u8),
}

impl Diagnostic {
    /// The 5-bit code.
    pub fn code(self) -> u8 {
        match self {
            Diagnostic::None => 0,
            Diagnostic::ControlDetectionTimeExpired => 1,
            Diagnostic::EchoFunctionFailed => 2,
            Diagnostic::NeighborSignaledSessionDown => 3,
            Diagnostic::ForwardingPlaneReset => 4,
            Diagnostic::PathDown => 5,
            Diagnostic::ConcatenatedPathDown => 6,
            Diagnostic::AdministrativelyDown => 7,
            Diagnostic::ReverseConcatenatedPathDown => 8,
            Diagnostic::Reserved(c) => c & 0x1f,
        }
    }

    /// The diagnostic of a 5-bit code (higher bits ignored).
    pub fn from_code(c: u8) -> Self {
        match c & 0x1f {
            0 => Diagnostic::None,
            1 => Diagnostic::ControlDetectionTimeExpired,
            2 => Diagnostic::EchoFunctionFailed,
            3 => Diagnostic::NeighborSignaledSessionDown,
            4 => Diagnostic::ForwardingPlaneReset,
            5 => Diagnostic::PathDown,
            6 => Diagnostic::ConcatenatedPathDown,
            7 => Diagnostic::AdministrativelyDown,
            8 => Diagnostic::ReverseConcatenatedPathDown,
            c => Diagnostic::Reserved(c),
        }
    }
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Diagnostic::None => f.write_str("no diagnostic"),
            Diagnostic::ControlDetectionTimeExpired => f.write_str("control detection time expired"),
            Diagnostic::EchoFunctionFailed => f.write_str("echo function failed"),
            Diagnostic::NeighborSignaledSessionDown => f.write_str("neighbor signaled session down"),
            Diagnostic::ForwardingPlaneReset => f.write_str("forwarding plane reset"),
            Diagnostic::PathDown => f.write_str("path down"),
            Diagnostic::ConcatenatedPathDown => f.write_str("concatenated path down"),
            Diagnostic::AdministrativelyDown => f.write_str("administratively down"),
            Diagnostic::ReverseConcatenatedPathDown => f.write_str("reverse concatenated path down"),
            Diagnostic::Reserved(c) => write!(f, "reserved diagnostic {c}"),
        }
    }
}

/// A BFD Control packet; intervals are in microseconds as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlPacket {
    /// Diag.
    pub diag: Diagnostic,
    /// Sta: the transmitting system's bfd.SessionState.
    pub state: State,
    /// P: Poll, the sender asks for verification of a parameter change.
    pub poll: bool,
    /// F: Final, the answer to a Poll.
    pub final_: bool,
    /// C: Control Plane Independent.
    pub control_plane_independent: bool,
    /// D: Demand mode wished by the sender.
    pub demand: bool,
    /// Detect Mult.
    pub detect_mult: u8,
    /// My Discriminator (never 0 in a valid packet).
    pub my_discr: u32,
    /// Your Discriminator (0 while the sender does not know ours).
    pub your_discr: u32,
    /// Desired Min TX Interval, µs.
    pub desired_min_tx: u32,
    /// Required Min RX Interval, µs.
    pub required_min_rx: u32,
    /// Required Min Echo RX Interval, µs (0: no Echo function).
    pub required_min_echo_rx: u32,
}

/// Why a received packet is discarded (the checks of RFC 5880 §6.8.6 that need no session).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the fixed header.
    #[error("BFD packet of {0} bytes is shorter than the 24-byte header")]
    Truncated(usize),
    /// Vers is not 1.
    #[error("BFD version {0} is not supported (only 1)")]
    Version(u8),
    /// Length field below 24 (26 with A) or beyond the datagram.
    #[error("BFD Length field {length} does not fit the {received}-byte datagram")]
    Length { length: u8, received: usize },
    /// The A bit is set; ferrolb sessions use no authentication, so §6.8.6 discards it.
    #[error("BFD packet carries authentication, which ferrolb sessions do not use")]
    Authenticated,
    /// Detect Mult is zero.
    #[error("BFD Detect Mult is zero")]
    ZeroDetectMult,
    /// The M (multipoint) bit is set.
    #[error("BFD Multipoint bit is set")]
    Multipoint,
    /// My Discriminator is zero.
    #[error("BFD My Discriminator is zero")]
    ZeroMyDiscriminator,
}

const FLAG_P: u8 = 0x20;
const FLAG_F: u8 = 0x10;
const FLAG_C: u8 = 0x08;
const FLAG_A: u8 = 0x04;
const FLAG_D: u8 = 0x02;
const FLAG_M: u8 = 0x01;

impl ControlPacket {
    /// Decodes one packet from a datagram, applying the session-independent checks of
    /// RFC 5880 §6.8.6. Consumes Length bytes on success; never panics.
    pub fn decode(buf: &mut impl Buf) -> Result<Self, DecodeError> {
        let received = buf.remaining();
        if received < LEN {
            return Err(DecodeError::Truncated(received));
        }
        let b0 = buf.get_u8();
        let version = b0 >> 5;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let b1 = buf.get_u8();
        let detect_mult = buf.get_u8();
        let length = buf.get_u8();
        let authenticated = b1 & FLAG_A != 0;
        let min = if authenticated { LEN + 2 } else { LEN };
        if usize::from(length) < min || usize::from(length) > received {
            return Err(DecodeError::Length { length, received });
        }
        // §6.8.6: "If the A bit is set and no authentication is in use, discard."
        if authenticated {
            return Err(DecodeError::Authenticated);
        }
        if detect_mult == 0 {
            return Err(DecodeError::ZeroDetectMult);
        }
        if b1 & FLAG_M != 0 {
            return Err(DecodeError::Multipoint);
        }
        let p = ControlPacket {
            diag: Diagnostic::from_code(b0),
            state: State::from_bits(b1 >> 6),
            poll: b1 & FLAG_P != 0,
            final_: b1 & FLAG_F != 0,
            control_plane_independent: b1 & FLAG_C != 0,
            demand: b1 & FLAG_D != 0,
            detect_mult,
            my_discr: buf.get_u32(),
            your_discr: buf.get_u32(),
            desired_min_tx: buf.get_u32(),
            required_min_rx: buf.get_u32(),
            required_min_echo_rx: buf.get_u32(),
        };
        if p.my_discr == 0 {
            return Err(DecodeError::ZeroMyDiscriminator);
        }
        // Bytes past the header up to Length belong to this packet; nothing is defined there.
        buf.advance(usize::from(length) - LEN);
        Ok(p)
    }

    /// Appends the 24-byte packet (A and M clear, Length 24).
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(LEN);
        out.put_u8((VERSION << 5) | self.diag.code());
        let mut b1 = self.state.bits() << 6;
        for (set, flag) in [
            (self.poll, FLAG_P),
            (self.final_, FLAG_F),
            (self.control_plane_independent, FLAG_C),
            (self.demand, FLAG_D),
        ] {
            if set {
                b1 |= flag;
            }
        }
        out.put_u8(b1);
        out.put_u8(self.detect_mult);
        out.put_u8(LEN as u8);
        out.put_u32(self.my_discr);
        out.put_u32(self.your_discr);
        out.put_u32(self.desired_min_tx);
        out.put_u32(self.required_min_rx);
        out.put_u32(self.required_min_echo_rx);
    }

    /// The encoded packet.
    pub fn to_bytes(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(LEN);
        self.encode(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// FRR bfdd's first packet of a session: Down, no diag, mult 3, 300 ms/300 ms,
    /// desired TX raised to 1 s while not Up (RFC 5880 §6.8.3), echo 50 ms.
    const FRR_DOWN: [u8; 24] = [
        0x20, 0x40, 0x03, 0x18, // v1 diag 0, Down, no flags, mult 3, len 24
        0x6b, 0x8b, 0x45, 0x67, // my discr
        0x00, 0x00, 0x00, 0x00, // your discr
        0x00, 0x0f, 0x42, 0x40, // desired min tx 1 000 000 µs
        0x00, 0x04, 0x93, 0xe0, // required min rx 300 000 µs
        0x00, 0x00, 0xc3, 0x50, // required min echo rx 50 000 µs
    ];

    fn frr_down() -> ControlPacket {
        ControlPacket {
            diag: Diagnostic::None,
            state: State::Down,
            poll: false,
            final_: false,
            control_plane_independent: false,
            demand: false,
            detect_mult: 3,
            my_discr: 0x6b8b_4567,
            your_discr: 0,
            desired_min_tx: 1_000_000,
            required_min_rx: 300_000,
            required_min_echo_rx: 50_000,
        }
    }

    /// An Up packet with Poll and diag 1 (Control Detection Time Expired, kept from the
    /// last Down), as sent when switching to the fast timers after coming Up.
    const UP_POLL: [u8; 24] = [
        0x21, 0xe0, 0x05, 0x18, // v1 diag 1, Up + P, mult 5, len 24
        0x00, 0x00, 0x00, 0x01, //
        0xde, 0xad, 0xbe, 0xef, //
        0x00, 0x00, 0x27, 0x10, // 10 ms
        0x00, 0x00, 0x4e, 0x20, // 20 ms
        0x00, 0x00, 0x00, 0x00,
    ];

    fn up_poll() -> ControlPacket {
        ControlPacket {
            diag: Diagnostic::ControlDetectionTimeExpired,
            state: State::Up,
            poll: true,
            detect_mult: 5,
            my_discr: 1,
            your_discr: 0xdead_beef,
            desired_min_tx: 10_000,
            required_min_rx: 20_000,
            required_min_echo_rx: 0,
            ..frr_down()
        }
    }

    #[test]
    fn golden_packets_decode() {
        assert_eq!(ControlPacket::decode(&mut &FRR_DOWN[..]), Ok(frr_down()));
        assert_eq!(ControlPacket::decode(&mut &UP_POLL[..]), Ok(up_poll()));
    }

    #[test]
    fn golden_packets_encode() {
        assert_eq!(&frr_down().to_bytes()[..], &FRR_DOWN[..]);
        assert_eq!(&up_poll().to_bytes()[..], &UP_POLL[..]);
    }

    #[test]
    fn every_flag_has_its_own_bit() {
        let p = ControlPacket {
            final_: true,
            control_plane_independent: true,
            demand: true,
            state: State::AdminDown,
            diag: Diagnostic::AdministrativelyDown,
            ..frr_down()
        };
        let b = p.to_bytes();
        assert_eq!(b[0], 0x27);
        assert_eq!(b[1], 0x1a);
        assert_eq!(ControlPacket::decode(&mut &b[..]), Ok(p));
    }

    fn with(mutate: impl FnOnce(&mut [u8; 24])) -> Result<ControlPacket, DecodeError> {
        let mut b = FRR_DOWN;
        mutate(&mut b);
        ControlPacket::decode(&mut &b[..])
    }

    #[test]
    fn section_6_8_6_discards() {
        assert_eq!(ControlPacket::decode(&mut &FRR_DOWN[..23]), Err(DecodeError::Truncated(23)));
        assert_eq!(with(|b| b[0] = 0x40), Err(DecodeError::Version(2)));
        assert_eq!(with(|b| b[3] = 23), Err(DecodeError::Length { length: 23, received: 24 }));
        assert_eq!(with(|b| b[3] = 25), Err(DecodeError::Length { length: 25, received: 24 }));
        assert_eq!(with(|b| b[2] = 0), Err(DecodeError::ZeroDetectMult));
        assert_eq!(with(|b| b[1] |= FLAG_M), Err(DecodeError::Multipoint));
        assert_eq!(with(|b| b[4..8].fill(0)), Err(DecodeError::ZeroMyDiscriminator));
    }

    #[test]
    fn authenticated_packets_are_discarded() {
        // A bit with a 24-byte Length: too short for an auth section.
        assert_eq!(with(|b| b[1] |= FLAG_A), Err(DecodeError::Length { length: 24, received: 24 }));
        // A bit with a Simple Password section (type 1, len 4, key id 1, "x").
        let mut b = FRR_DOWN.to_vec();
        b[1] |= FLAG_A;
        b[3] = 28;
        b.extend_from_slice(&[1, 4, 1, b'x']);
        assert_eq!(ControlPacket::decode(&mut &b[..]), Err(DecodeError::Authenticated));
    }

    #[test]
    fn bytes_beyond_length_are_left_in_the_buffer() {
        let mut b = FRR_DOWN.to_vec();
        b.extend_from_slice(&[0xaa, 0xbb]);
        let mut buf = &b[..];
        assert_eq!(ControlPacket::decode(&mut buf), Ok(frr_down()));
        assert_eq!(buf, &[0xaa, 0xbb]);
    }

    fn arb_packet() -> impl Strategy<Value = ControlPacket> {
        (
            (0u8..32, 0u8..4, any::<[bool; 4]>(), 1u8..=255),
            (1u32.., any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
        )
            .prop_map(|((diag, sta, f, mult), (my, your, tx, rx, echo))| ControlPacket {
                diag: Diagnostic::from_code(diag),
                state: State::from_bits(sta),
                poll: f[0],
                final_: f[1],
                control_plane_independent: f[2],
                demand: f[3],
                detect_mult: mult,
                my_discr: my,
                your_discr: your,
                desired_min_tx: tx,
                required_min_rx: rx,
                required_min_echo_rx: echo,
            })
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut buf = &bytes[..];
            if let Ok(p) = ControlPacket::decode(&mut buf) {
                // Anything accepted re-encodes to a packet that decodes the same.
                prop_assert_eq!(ControlPacket::decode(&mut &p.to_bytes()[..]), Ok(p));
            }
        }

        #[test]
        fn round_trip(p in arb_packet()) {
            let wire = p.to_bytes();
            prop_assert_eq!(wire.len(), LEN);
            prop_assert_eq!(ControlPacket::decode(&mut &wire[..]), Ok(p));
        }
    }
}
