#![no_main]
//! Version 2's cleartext decoders and the AEAD's open on arbitrary bytes: never a panic;
//! what parses re-encodes to a packet that parses the same; nothing random authenticates.

use fencepost_proto::crypto::{AeadProtection, SessionKeys};
use fencepost_proto::wire::{SecureHandshake, StatelessReset};
use fencepost_proto::{Cipher, PacketProtection};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = vec![0u8; 70_000];
    if let Ok(hs) = SecureHandshake::parse(data) {
        let n = hs.emit(&mut buf).expect("a parsed handshake re-encodes");
        assert_eq!(SecureHandshake::parse(&buf[..n]).expect("re-encoded parses"), hs);
    }
    if let Ok(reset) = StatelessReset::parse(data) {
        let n = reset.emit(&mut buf).unwrap();
        assert_eq!(&buf[..n], data);
    }
    let keys = SessionKeys { client_to_server: [1; 32], server_to_client: [2; 32] };
    for cipher in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305] {
        let mut open = AeadProtection::new(cipher, &keys, false);
        let mut scratch = Vec::new();
        assert!(open.open(data, &mut scratch).is_err(), "random bytes authenticated");
    }
});
