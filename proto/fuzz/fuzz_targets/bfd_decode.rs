//! Feeds arbitrary bytes to the BFD Control packet decoder. Anything it accepts must
//! re-encode to 24 bytes that decode to the same packet, and feeding it to a session must
//! not panic either.
//! The body lives in `src/lib.rs`, shared with the corpus replay in `cargo test`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferrolb_proto_fuzz::bfd_decode(data));
