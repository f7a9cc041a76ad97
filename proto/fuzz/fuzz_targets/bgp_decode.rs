//! Feeds arbitrary bytes to the BGP decoder in both AS-number modes. Anything it
//! accepts must re-encode to a message that decodes to the same value.
//! The body lives in `src/lib.rs`, shared with the corpus replay in `cargo test`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferrolb_proto_fuzz::bgp_decode(data));
