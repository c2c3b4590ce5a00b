//! Seeded mutations of the protected path (wire format version 2): real
//! handshakes and transfers in which every packet is also delivered mutated
//! (bits flipped, bytes changed, cut short, lengthened, spliced with another
//! packet). Nothing panics, no mutation is taken for a packet, and every
//! stream still arrives byte-exact. Runs in `make test`; `fuzz/` has the
//! coverage-guided targets `decode_v2` and `handshake`.

use fencepost_proto::crypto::AeadProtection;
use fencepost_proto::wire::{SecureHandshake, StatelessReset};
use fencepost_proto::{ConnectionStats, DatagramEvent, Endpoint, EndpointConfig, Instant, PacketProtection, TransportConfig};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

fn mutate(rng: &mut Xoshiro256PlusPlus, packet: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = packet.to_vec();
    for _ in 0..1 + rng.next_u32() % 3 {
        match rng.next_u32() % 6 {
            0 if !v.is_empty() => {
                let at = (rng.next_u32() as usize) % v.len();
                v[at] ^= 1 << (rng.next_u32() % 8);
            }
            1 if !v.is_empty() => {
                let at = (rng.next_u32() as usize) % v.len();
                v[at] = rng.next_u32() as u8;
            }
            2 if !v.is_empty() => v.truncate((rng.next_u32() as usize) % v.len()),
            3 => v.extend((0..1 + rng.next_u32() % 40).map(|_| rng.next_u32() as u8)),
            4 if !other.is_empty() => {
                // The header of one packet on the body of another.
                let cut = (rng.next_u32() as usize) % v.len().max(1);
                v.truncate(cut);
                let from = (rng.next_u32() as usize) % other.len();
                v.extend_from_slice(&other[from..]);
            }
            _ if v.len() > 10 => {
                // Only the packet number, which the header authenticates.
                v[6 + (rng.next_u32() as usize) % 4] ^= 1 << (rng.next_u32() % 8);
            }
            _ => {}
        }
    }
    v
}

fn refused(s: &ConnectionStats) -> u64 {
    s.unauthenticated_packets + s.replayed_packets + s.malformed_packets + s.foreign_packets
}

#[test]
fn mutated_protected_packets_are_refused_and_the_streams_stay_exact() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(2026);
    let mut delivered_mutants = 0u64;
    for round in 0..24u64 {
        let mut client = Endpoint::new(EndpointConfig::client(TransportConfig::default()), 100 + round);
        let mut server = Endpoint::new(EndpointConfig::server(TransportConfig::default()), 200 + round);
        let mut now = Instant::from_millis(1);
        let handle = client.connect(now, 1u8);
        let message: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8 ^ round as u8).collect();
        let mut written = 0;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 2048];
        let mut response = vec![0u8; 2048];
        let mut read = vec![0u8; 1 << 16];
        let mut last = Vec::new();
        let mut server_conn = None;
        let mut server_closed = false;
        for _ in 0..20_000 {
            if let Some(conn) = client.connection_mut(handle) {
                if conn.is_established() && written < message.len() {
                    written += conn.write(&message[written..]).unwrap();
                    if written == message.len() {
                        conn.close(now);
                    }
                }
            }
            let mut moved = false;
            let mut to_server = Vec::new();
            while let Some((_, t)) = client.poll_transmit(now, &mut buf) {
                to_server.push(buf[..t.size].to_vec());
            }
            for packet in to_server {
                moved = true;
                // The mutant goes first: a forgery must not spoil the real packet after it.
                let mutant = mutate(&mut rng, &packet, &last);
                for datagram in [mutant, packet.clone()] {
                    match server.handle_datagram(now, 0, &datagram, &mut response) {
                        Some(DatagramEvent::NewConnection(incoming)) => {
                            if let Ok(h) = server.accept(incoming) {
                                server_conn = server_conn.or(Some(h));
                            }
                        }
                        // A Retry (or a stateless reset): the endpoint's own answer, kept nowhere.
                        Some(DatagramEvent::Response { transmit, .. }) => {
                            let answer = response[..transmit.size].to_vec();
                            client.handle_datagram(now, 1, &answer, &mut buf);
                        }
                        _ => {}
                    }
                }
                delivered_mutants += 1;
                last = packet;
            }
            let mut to_client = Vec::new();
            while let Some((_, t)) = server.poll_transmit(now, &mut buf) {
                to_client.push(buf[..t.size].to_vec());
            }
            for packet in to_client {
                moved = true;
                let mutant = mutate(&mut rng, &packet, &last);
                client.handle_datagram(now, 1, &mutant, &mut response);
                client.handle_datagram(now, 1, &packet, &mut response);
                delivered_mutants += 1;
                last = packet;
            }
            if let Some(h) = server_conn {
                while let Some(Ok(n)) = server.connection_mut(h).map(|c| c.read(&mut read)) {
                    if n == 0 {
                        if !server_closed {
                            server.connection_mut(h).unwrap().close(now);
                            server_closed = true;
                        }
                        break;
                    }
                    got.extend_from_slice(&read[..n]);
                }
            }
            while client.poll_event().is_some() {}
            while server.poll_event().is_some() {}
            if server_closed && client.connection(handle).is_some_and(|c| c.is_closed()) {
                break;
            }
            if !moved {
                let next = [client.poll_timeout(), server.poll_timeout()].into_iter().flatten().min();
                now = next.unwrap_or(now).max(now + fencepost_proto::Duration::from_micros(1));
                client.handle_timeout(now);
                server.handle_timeout(now);
            }
        }
        assert!(
            got == message,
            "round {round}: {} of {} bytes, and not byte-exact; client {:?} {:?}; server {:?}; endpoint {:?}",
            got.len(),
            message.len(),
            client.connection(handle).map(|c| (c.state(), c.error().cloned())),
            client.connection(handle).map(|c| c.stats().clone()),
            server_conn.and_then(|h| server.connection(h)).map(|c| (c.state(), c.stats().clone())),
            server.stats()
        );
        let c = client.connection(handle).unwrap().stats().clone();
        let s = server.connection(server_conn.unwrap()).unwrap().stats().clone();
        assert_eq!(c.protocol_violations + s.protocol_violations, 0, "round {round}: a mutant was taken for a packet");
        assert!(refused(&c) + refused(&s) > 0);
    }
    assert!(delivered_mutants > 2_000, "{delivered_mutants}");
}

#[test]
fn the_v2_decoders_never_panic_on_random_bytes() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let keys = fencepost_proto::crypto::SessionKeys { client_to_server: [1; 32], server_to_client: [2; 32] };
    let mut open = AeadProtection::new(fencepost_proto::Cipher::Aes256Gcm, &keys, false);
    let mut scratch = Vec::new();
    let mut buf = vec![0u8; 600];
    let (mut parsed, mut opened) = (0, 0);
    for i in 0..200_000 {
        let len = (rng.next_u32() % 300) as usize;
        let mut v = vec![0u8; len];
        rng.fill_bytes(&mut v);
        if len >= 7 && i % 2 == 0 {
            v[0] = 2;
            v[1] = if i % 4 == 0 { 1 } else { 7 };
            v[6] = 1 + (rng.next_u32() % 3) as u8;
        }
        if i % 8 == 1 {
            // A well-formed handshake packet with random contents, then one byte changed.
            let token: Vec<u8> = (0..rng.next_u32() % 30).map(|_| rng.next_u32() as u8).collect();
            let noise: Vec<u8> = (0..rng.next_u32() % 150).map(|_| rng.next_u32() as u8).collect();
            let packet = match rng.next_u32() % 3 {
                0 => SecureHandshake::Initial { src_cid: rng.next_u32() | 1, timestamp: rng.next_u32(), pattern: 1, cipher: 2, token: &token, noise: &noise },
                1 => SecureHandshake::Retry { dst_cid: rng.next_u32() | 1, echo_timestamp: rng.next_u32(), token: &token },
                _ => SecureHandshake::Accept { dst_cid: rng.next_u32() | 1, src_cid: rng.next_u32() | 1, echo_timestamp: 5, noise: &noise },
            };
            let n = packet.emit(&mut buf).unwrap();
            v = buf[..n].to_vec();
            let at = (rng.next_u32() as usize) % v.len();
            v[at] ^= rng.next_u32() as u8;
        }
        if let Ok(hs) = SecureHandshake::parse(&v) {
            parsed += 1;
            let n = hs.emit(&mut buf).expect("a parsed handshake re-encodes");
            assert_eq!(SecureHandshake::parse(&buf[..n]).unwrap(), hs);
        }
        if let Ok(r) = StatelessReset::parse(&v) {
            let n = r.emit(&mut buf).unwrap();
            assert_eq!(&buf[..n], &v[..]);
        }
        if open.open(&v, &mut scratch).is_ok() {
            opened += 1;
        }
    }
    assert!(parsed > 100, "inputs reach the parsers: {parsed}");
    assert_eq!(opened, 0, "random bytes never authenticate");
}
