//! Feeds arbitrary bytes to the ARP frame decoder. Anything it accepts must re-encode
//! to a frame that decodes to the same header and packet.
#![no_main]
use ferrolb_speaker::l2::arp::{ArpPacket, decode_frame, encode_frame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = ArpPacket::decode(&mut &data[..]);
    if let Ok((eth, arp)) = decode_frame(data) {
        let wire = encode_frame(eth.dst, eth.src, &arp);
        assert_eq!(decode_frame(&wire), Ok((eth, arp)), "re-encoding changed the frame");
    }
});
