//! Feeds arbitrary bytes to the NS/NA decoder. Anything it accepts must re-encode to
//! a message that decodes to the same value.
#![no_main]
use ferrolb_speaker::l2::ndp::NdMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = NdMessage::decode(&mut &data[..]) {
        let wire = msg.to_bytes();
        assert_eq!(NdMessage::decode(&mut &wire[..]), Ok(msg), "re-encoding changed the message");
    }
});
