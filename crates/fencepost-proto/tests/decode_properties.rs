//! Random bytes into every decoder: never a panic, and whatever parses
//! re-encodes to the same bytes. Runs in `make test`; `fuzz/` has the
//! coverage-guided versions of the same targets.

use fencepost_proto::wire::{Header, Packet};
use fencepost_proto::{Connection, ConnectionSecrets, DatagramEvent, Endpoint, EndpointConfig, Instant, TransportConfig};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::sync::Arc;

/// Valid packets of every type (the docs' test vectors) to mutate.
const SEEDS: &[&str] = &[
    "01 01 00000000 01 0a0b0c0d 00000064 00000000 05b4 00000400",
    "01 01 0a0b0c0d 02 11223344 000000c8 00000064 05b4 00000200",
    "01 02 11223344 00000007 000003e8 68656c6c6f",
    "01 03 0a0b0c0d 00000005 000003e8 000000fa 00000020 0004 0d000080",
    "01 04 11223344 00000008 000007d0",
    "01 05 11223344 00",
    "01 06 0a0b0c0d 00002710",
];

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

fn inputs(count: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(99);
    let seeds: Vec<Vec<u8>> = SEEDS.iter().map(|s| hex(s)).collect();
    (0..count).map(move |i| {
        if i % 2 == 0 {
            let len = (rng.next_u32() % 64) as usize;
            let mut v = vec![0u8; len];
            rng.fill_bytes(&mut v);
            // Half of the random inputs get a valid version and type so parsing goes deep.
            if len >= 2 && i % 4 == 0 {
                v[0] = 1;
                v[1] = 1 + (rng.next_u32() % 6) as u8;
            }
            v
        } else {
            let mut v = seeds[(rng.next_u32() as usize) % seeds.len()].clone();
            for _ in 0..1 + rng.next_u32() % 4 {
                match rng.next_u32() % 4 {
                    0 if !v.is_empty() => {
                        let at = (rng.next_u32() as usize) % v.len();
                        v[at] ^= 1 << (rng.next_u32() % 8);
                    }
                    1 if !v.is_empty() => {
                        let cut = (rng.next_u32() as usize) % v.len();
                        v.truncate(cut);
                    }
                    2 => v.push(rng.next_u32() as u8),
                    _ if !v.is_empty() => {
                        let at = (rng.next_u32() as usize) % v.len();
                        v[at] = rng.next_u32() as u8;
                    }
                    _ => {}
                }
            }
            v
        }
    })
}

#[test]
fn decoders_never_panic_and_round_trip() {
    let (mut parsed, mut rejected) = (0, 0);
    let mut buf = vec![0u8; 70_000];
    for input in inputs(300_000) {
        let _ = Header::peek(&input);
        match Packet::parse(&input) {
            Ok(packet) => {
                parsed += 1;
                let n = packet.emit(&mut buf).expect("a parsed packet re-encodes");
                assert_eq!(&buf[..n], &input[..], "re-encoding changed {packet:?}");
            }
            Err(_) => rejected += 1,
        }
    }
    assert!(parsed > 10_000 && rejected > 10_000, "inputs exercise both paths: {parsed} parsed, {rejected} rejected");
}

#[test]
fn endpoints_and_connections_count_and_drop_garbage() {
    let mut server: Endpoint<u32> = Endpoint::new(EndpointConfig::server(TransportConfig::default()), 5);
    let mut client_side = Connection::client(Arc::new(TransportConfig::default()), Instant::ZERO, 0x0a0b0c0d, &ConnectionSecrets::from_seed(3));
    let mut out = vec![0u8; 2048];
    let mut t = 0u64;
    for (i, input) in inputs(50_000).enumerate() {
        t += 100;
        let now = Instant::from_micros(t);
        if let Some(DatagramEvent::NewConnection(incoming)) = server.handle_datagram(now, (i % 7) as u32, &input, &mut out) {
            let _ = server.accept(incoming);
        }
        client_side.handle_datagram(now, &input);
        server.handle_timeout(now);
        client_side.handle_timeout(now);
        while server.poll_transmit(now, &mut out).is_some() {}
        while server.poll_event().is_some() {}
        while client_side.poll_transmit(now, &mut out).is_some() {}
    }
    let stats = server.stats();
    assert_eq!(stats.datagrams_received, 50_000);
    assert!(stats.malformed > 0 && stats.unknown_connection > 0, "{stats:?}");
}
