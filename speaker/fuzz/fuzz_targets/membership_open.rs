//! Feeds arbitrary bytes to the membership datagram opener, and checks that any
//! payload sealed with the key opens to itself exactly once.
#![no_main]
use ferrolb_speaker::membership::auth::{DropReason, Sealer};
use libfuzzer_sys::fuzz_target;

const KEY: &[u8] = b"fuzz-membership-key-0123456789abcdef";
const NOW: u64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    let Ok(mut rx) = Sealer::new(KEY, 2) else { return };
    let _ = rx.open(NOW, data);
    let Ok(mut tx) = Sealer::new(KEY, 1) else { return };
    let sealed = tx.seal(NOW, data);
    assert_eq!(rx.open(NOW, &sealed), Ok(data));
    assert_eq!(rx.open(NOW, &sealed), Err(DropReason::Replayed));
});
