#![no_main]
//! A real protected handshake and the first packets after it, in which the fuzzer
//! rewrites one packet of its choosing (bytes changed, cut, lengthened) and delivers
//! the rewrite before the original. Never a panic; the connection still completes.

use fencepost_proto::{DatagramEvent, Endpoint, EndpointConfig, Instant, TransportConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let target = data[0] as usize % 8;
    let cut = data[1] as usize;
    let edits = &data[2..];
    let mut client = Endpoint::new(EndpointConfig::client(TransportConfig::default()), 1);
    let mut server = Endpoint::new(EndpointConfig::server(TransportConfig::default()), 2);
    let now = Instant::from_millis(1);
    let handle = client.connect(now, 1u8);
    let mut buf = vec![0u8; 2048];
    let mut response = vec![0u8; 2048];
    let mut index = 0usize;
    let rewrite = |packet: &[u8]| -> Vec<u8> {
        let mut v = packet.to_vec();
        for pair in edits.chunks(2) {
            if pair.len() == 2 && !v.is_empty() {
                let at = pair[0] as usize % v.len();
                v[at] ^= pair[1];
            } else {
                v.extend_from_slice(pair);
            }
        }
        if cut > 0 && cut < v.len() && cut % 3 == 0 {
            v.truncate(cut);
        }
        v
    };
    for _ in 0..20 {
        if let Some(c) = client.connection_mut(handle) {
            if c.is_established() && c.stats().bytes_written == 0 {
                let _ = c.write(b"after the handshake");
            }
        }
        let mut moved = false;
        while let Some((_, t)) = client.poll_transmit(now, &mut buf) {
            moved = true;
            let packet = buf[..t.size].to_vec();
            let mut sends = vec![packet.clone()];
            if index == target {
                sends.insert(0, rewrite(&packet));
            }
            index += 1;
            for datagram in sends {
                match server.handle_datagram(now, 0, &datagram, &mut response) {
                    Some(DatagramEvent::NewConnection(incoming)) => {
                        let _ = server.accept(incoming);
                    }
                    Some(DatagramEvent::Response { transmit, .. }) => {
                        let answer = response[..transmit.size].to_vec();
                        client.handle_datagram(now, 1, &answer, &mut buf.clone());
                    }
                    _ => {}
                }
            }
        }
        while let Some((_, t)) = server.poll_transmit(now, &mut buf) {
            moved = true;
            let packet = buf[..t.size].to_vec();
            if index == target {
                client.handle_datagram(now, 1, &rewrite(&packet), &mut response);
            }
            index += 1;
            client.handle_datagram(now, 1, &packet, &mut response);
        }
        while client.poll_event().is_some() {}
        while server.poll_event().is_some() {}
        if !moved {
            break;
        }
    }
    assert!(client.connection(handle).is_some_and(|c| c.is_established()), "a rewritten packet stopped the handshake");
});
