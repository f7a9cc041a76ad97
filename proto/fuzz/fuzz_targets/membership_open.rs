//! Feeds arbitrary bytes to the membership datagram opener, and checks that any
//! payload sealed with the key opens to itself exactly once.
//! The body lives in `src/lib.rs`, shared with the corpus replay in `cargo test`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| ferrolb_proto_fuzz::membership_open(data));
