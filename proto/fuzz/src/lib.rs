//! The bodies of the fuzz targets, one function per target. `fuzz_targets/*.rs` hand
//! libFuzzer's input to them; `proto/tests/fuzz_corpus.rs` includes this file and
//! replays every committed corpus through the same functions in the normal test suite.
//! Each panics when the code under test panics or breaks a round-trip property.
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrolb_proto::bfd::{ControlPacket, Input, Session, SessionConfig};
use ferrolb_proto::bgp::message::frame_len;
use ferrolb_proto::bgp::{DecodeContext, EncodeContext, Message};
use ferrolb_proto::l2::arp::{ArpPacket, decode_frame, encode_frame};
use ferrolb_proto::l2::ndp::NdMessage;
use ferrolb_proto::membership::auth::{DropReason, Sealer};

/// A target's body: panics on a bug.
pub type Target = fn(&[u8]);

/// Every target, by the name of its binary and corpus directory.
pub const TARGETS: [(&str, Target); 5] = [
    ("bgp_decode", bgp_decode),
    ("bfd_decode", bfd_decode),
    ("arp_decode", arp_decode),
    ("ndp_decode", ndp_decode),
    ("membership_open", membership_open),
];

/// BGP decoder in both AS-number modes: anything it accepts re-encodes to a message
/// that decodes to the same value.
pub fn bgp_decode(data: &[u8]) {
    let _ = frame_len(data);
    for four_octet_as in [true, false] {
        let dctx = DecodeContext { four_octet_as };
        let ectx = EncodeContext { four_octet_as };
        let mut buf = Bytes::copy_from_slice(data);
        // Decode every message in the buffer, as the session reader would.
        while let Ok(msg) = Message::decode(&mut buf, &dctx) {
            let wire = msg.to_bytes(&ectx);
            assert!(wire.len() <= 4096 || matches!(msg, Message::Update(_)), "oversized re-encoding");
            if let Message::Update(u) = &msg
                && (!u.errors.is_empty() || wire.len() > 4096)
            {
                // Errors dropped attributes: the re-encoding legitimately differs.
                continue;
            }
            let again = Message::decode(&mut wire.clone(), &dctx);
            assert_eq!(again.as_ref(), Ok(&msg), "re-encoding changed the message");
        }
    }
}

/// BFD Control packets: anything accepted re-encodes to 24 bytes that decode to the
/// same packet, and feeding it to a session does not panic either.
pub fn bfd_decode(data: &[u8]) {
    let mut buf = data;
    if let Ok(p) = ControlPacket::decode(&mut buf) {
        let wire = p.to_bytes();
        assert_eq!(wire.len(), 24, "re-encoding is not 24 bytes");
        assert_eq!(ControlPacket::decode(&mut &wire[..]), Ok(p), "re-encoding changed the packet");
        let now = Instant::now();
        let mut s = Session::new(now, SessionConfig::default(), p.your_discr.max(1), 1);
        s.handle(now, Input::Packet(p));
        s.handle(now + Duration::from_secs(3600), Input::Timeout);
        while s.poll_transmit().is_some() {}
    }
}

/// ARP frames: anything accepted re-encodes to a frame that decodes to the same header
/// and packet.
pub fn arp_decode(data: &[u8]) {
    let _ = ArpPacket::decode(&mut &data[..]);
    if let Ok((eth, arp)) = decode_frame(data) {
        let wire = encode_frame(eth.dst, eth.src, &arp);
        assert_eq!(decode_frame(&wire), Ok((eth, arp)), "re-encoding changed the frame");
    }
}

/// NS/NA messages: anything accepted re-encodes to a message that decodes to the same
/// value; the same bytes read as an Ethernet frame never panic, and a frame accepted
/// carries a message within it.
pub fn ndp_decode(data: &[u8]) {
    if let Some(f) = ferrolb_proto::l2::ndp::decode_frame(data) {
        assert!(f.message.len() + 54 <= data.len(), "the message lies within the frame");
    }
    if let Ok(msg) = NdMessage::decode(&mut &data[..]) {
        let wire = msg.to_bytes();
        assert_eq!(NdMessage::decode(&mut &wire[..]), Ok(msg), "re-encoding changed the message");
    }
}

const MEMBERSHIP_KEY: &[u8] = b"fuzz-membership-key-0123456789abcdef";

/// Membership datagrams: arbitrary bytes never open, and any payload sealed with the
/// key opens to itself exactly once, for the receiver it was sealed for alone.
pub fn membership_open(data: &[u8]) {
    let Ok(mut rx) = Sealer::new(MEMBERSHIP_KEY, 2) else { return };
    let _ = rx.open("rx", data);
    let Ok(mut tx) = Sealer::new(MEMBERSHIP_KEY, 1) else { return };
    let sealed = tx.seal("rx", data);
    assert_eq!(rx.open("another", &sealed), Err(DropReason::Unauthenticated));
    assert_eq!(rx.open("rx", &sealed), Ok(data));
    assert_eq!(rx.open("rx", &sealed), Err(DropReason::Replayed));
}
