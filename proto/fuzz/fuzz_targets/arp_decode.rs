//! Feeds arbitrary bytes to the ARP frame decoder. Anything it accepts must re-encode
//! to a frame that decodes to the same header and packet.
//! The body lives in `src/lib.rs`, shared with the corpus replay in `cargo test`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferrolb_proto_fuzz::arp_decode(data));
