//! Feeds arbitrary bytes to the BGP decoder in both AS-number modes. Anything it
//! accepts must re-encode to a message that decodes to the same value.
#![no_main]
use bytes::Bytes;
use ferrolb_speaker::bgp::message::frame_len;
use ferrolb_speaker::bgp::{DecodeContext, EncodeContext, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
});
