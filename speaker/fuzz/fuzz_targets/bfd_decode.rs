//! Feeds arbitrary bytes to the BFD Control packet decoder. Anything it accepts must
//! re-encode to 24 bytes that decode to the same packet, and feeding it to a session must
//! not panic either.
#![no_main]
use ferrolb_speaker::bfd::{ControlPacket, Input, Session, SessionConfig};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
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
});
