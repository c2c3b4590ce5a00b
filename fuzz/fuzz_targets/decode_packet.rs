#![no_main]
//! The packet decoder: never panics; whatever parses re-encodes to the same bytes.

use fencepost_proto::wire::{Header, Packet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Header::peek(data);
    if let Ok(packet) = Packet::parse(data) {
        let mut buf = vec![0u8; packet.encoded_len()];
        let n = packet.emit(&mut buf).expect("a parsed packet re-encodes");
        assert_eq!(&buf[..n], data);
    }
});
