#![no_main]
//! The protected handshake's packets, rewritten by the fuzzer, into endpoints that
//! know the real ones: the client's Initials (without and with a retry token), the
//! server's Retry and Accept, and a protected packet after them. A server that keeps
//! the real connection meets each rewrite as a repeat, a forgery or a new client
//! (retry tokens, routing, the handshake's state); one time in sixteen the rewrite of
//! an Initial also goes to a server without address validation, which runs the Noise
//! handshake on it. Never a panic, and the real connection carries on.
//!
//! The real handshake is made once per process, so an input costs no Diffie-Hellman
//! work but in that sixteenth.

use fencepost_proto::{ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Instant, ProtectionConfig, TransportConfig};
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;

struct World {
    server: Endpoint<u8>,
    client: Endpoint<u8>,
    open_server: Endpoint<u8>,
    handle: ConnectionHandle,
    templates: Vec<Vec<u8>>,
}

fn world() -> World {
    let mut server = Endpoint::new(EndpointConfig::server(TransportConfig::default()), 2);
    let mut client = Endpoint::new(EndpointConfig::client(TransportConfig::default()), 1);
    let mut open = TransportConfig::default();
    if let ProtectionConfig::Noise(n) = &mut open.protection {
        n.validate_addresses = false;
    }
    let open_server = Endpoint::new(EndpointConfig::server(open), 3);
    let now = Instant::from_millis(1);
    let handle = client.connect(now, 1u8);
    let (mut buf, mut response) = (vec![0u8; 2048], vec![0u8; 2048]);
    let mut templates = Vec::new();
    // Initial, Retry, Initial with the token, Accept, then the client's first protected packet.
    while templates.len() < 5 {
        let (_, t) = client.poll_transmit(now, &mut buf).expect("the client speaks");
        let packet = buf[..t.size].to_vec();
        templates.push(packet.clone());
        match server.handle_datagram(now, 0, &packet, &mut response) {
            Some(DatagramEvent::Response { transmit, .. }) => {
                templates.push(response[..transmit.size].to_vec());
                let retry = response[..transmit.size].to_vec();
                client.handle_datagram(now, 1, &retry, &mut response);
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                server.accept(incoming).expect("the real Initial is accepted");
                let (_, t) = server.poll_transmit(now, &mut buf).expect("an Accept");
                let accept = buf[..t.size].to_vec();
                templates.push(accept.clone());
                client.handle_datagram(now, 1, &accept, &mut response);
            }
            _ => {}
        }
    }
    World { server, client, open_server, handle, templates }
}

thread_local! {
    static WORLD: RefCell<Option<World>> = const { RefCell::new(None) };
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    WORLD.with(|cell| {
        let mut slot = cell.borrow_mut();
        let w = slot.get_or_insert_with(world);
        let which = data[0] as usize % w.templates.len();
        let mut packet = w.templates[which].clone();
        let edits = &data[1..];
        for pair in edits.chunks(2) {
            match pair {
                [at, xor] if !packet.is_empty() => {
                    let at = *at as usize * 7 % packet.len();
                    packet[at] ^= xor;
                }
                [cut] => packet.truncate(*cut as usize * 3),
                _ => packet.extend_from_slice(pair),
            }
        }
        let now = Instant::from_millis(2);
        let mut response = vec![0u8; 2048];
        let to_server = matches!(which, 0 | 2 | 4);
        if to_server {
            let _ = w.server.handle_datagram(now, 0, &packet, &mut response);
            if which != 4 && data[0] / 16 == 0 {
                if let Some(DatagramEvent::NewConnection(incoming)) = w.open_server.handle_datagram(now, 9, &packet, &mut response) {
                    if let Ok(h) = w.open_server.accept(incoming) {
                        w.open_server.remove(h);
                    }
                }
            }
        } else {
            let _ = w.client.handle_datagram(now, 1, &packet, &mut response);
        }
        let mut buf = vec![0u8; 2048];
        while w.server.poll_transmit(now, &mut buf).is_some() {}
        while w.client.poll_transmit(now, &mut buf).is_some() {}
        while w.server.poll_event().is_some() {}
        while w.client.poll_event().is_some() {}
        assert!(w.client.connection(w.handle).is_some_and(|c| c.is_established()), "a rewritten packet ended the real connection");
    });
});
