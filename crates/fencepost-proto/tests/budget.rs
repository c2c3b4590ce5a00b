//! Forty peers pin out-of-order data at one server (each withholds its first data
//! packet, so everything after it is held): the server's received data never
//! exceeds its endpoint's buffer budget, and once the holes are filled every
//! stream completes and the budget is given back.
//!
//! Plaintext, so the test can tell each connection's first data packet on the
//! wire; the budget sits below packet protection and works the same under it.

use fencepost_proto::time::Duration;
use fencepost_proto::{DatagramEvent, Endpoint, EndpointConfig, Instant, TransportConfig};
use std::collections::{HashMap, HashSet};

const PEERS: usize = 40;
const BUDGET: usize = 8 << 20;
const PER_PEER: usize = 1 << 20;

#[test]
fn forty_peers_pinning_out_of_order_data_stay_within_the_budget() {
    let transport = TransportConfig::default().insecure();
    let mut client = Endpoint::new(EndpointConfig::client(transport.clone()), 1);
    let mut server_config = EndpointConfig::server(transport);
    server_config.buffer_budget = BUDGET;
    let mut server = Endpoint::new(server_config, 2);
    let mut now = Instant::from_millis(1);
    let handles: Vec<_> = (0..PEERS).map(|_| client.connect(now, 1u8)).collect();
    let mut written: HashMap<u32, usize> = HashMap::new();
    let mut received: HashMap<u32, usize> = HashMap::new();
    let mut buf = vec![0u8; 2048];
    let mut response = vec![0u8; 2048];
    let mut read = vec![0u8; 1 << 16];
    let mut withhold = true;
    let mut peak = 0;
    let mut dropped_first: HashSet<u32> = HashSet::new();
    for step in 0..200_000u64 {
        // The clients write as the send buffers allow.
        for h in &handles {
            let done = written.entry(h.0).or_default();
            if let Some(conn) = client.connection_mut(*h) {
                if conn.is_established() && *done < PER_PEER {
                    let chunk = vec![(h.0 & 0xff) as u8; (PER_PEER - *done).min(1 << 16)];
                    *done += conn.write(&chunk).unwrap_or(0);
                    if *done == PER_PEER {
                        conn.close(now);
                    }
                }
            }
        }
        let mut moved = false;
        while let Some((_, t)) = client.poll_transmit(now, &mut buf) {
            moved = true;
            let datagram = &buf[..t.size];
            // Sequence 0 of every connection's data never arrives while the peers pin.
            let is_first_data = datagram[1] == 2 && datagram[6..10] == [0, 0, 0, 0];
            if withhold && is_first_data {
                dropped_first.insert(u32::from_be_bytes([datagram[2], datagram[3], datagram[4], datagram[5]]));
                continue;
            }
            if let Some(DatagramEvent::NewConnection(incoming)) = server.handle_datagram(now, 0, datagram, &mut response) {
                server.accept(incoming).unwrap();
            }
        }
        while let Some((_, t)) = server.poll_transmit(now, &mut buf) {
            moved = true;
            client.handle_datagram(now, 1, &buf[..t.size], &mut response);
        }
        // The server's application reads whatever is readable.
        let open: Vec<_> = server.handles().collect();
        for h in open {
            while let Some(Ok(n)) = server.connection_mut(h).map(|c| c.read(&mut read)) {
                if n == 0 {
                    break;
                }
                *received.entry(h.0).or_default() += n;
            }
        }
        while server.poll_event().is_some() {}
        while client.poll_event().is_some() {}
        peak = peak.max(server.buffered_bytes());
        assert!(server.buffered_bytes() <= BUDGET + PEERS * 1500, "step {step}: {} bytes held", server.buffered_bytes());
        let refused: u64 = server.handles().filter_map(|h| server.connection(h)).map(|c| c.stats().over_budget_packets).sum();
        if withhold && dropped_first.len() == PEERS && peak >= BUDGET * 9 / 10 && refused > 1000 {
            // The pinning peers have filled the budget and go on being refused; now let the holes fill.
            println!("released at {now:?}: peak {peak} of {BUDGET}, {refused} packets refused");
            withhold = false;
        }
        assert!(!withhold || now < Instant::from_millis(60_000), "the peers never filled the budget: {peak} of {BUDGET}, {refused} refused");
        if received.values().sum::<usize>() == PEERS * PER_PEER {
            assert!(!withhold);
            assert_eq!(server.buffered_bytes(), 0, "everything read: the budget is given back");
            return;
        }
        if !moved {
            now = match (client.poll_timeout(), server.poll_timeout()) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => now + Duration::from_millis(1),
            }
            .max(now);
            client.handle_timeout(now);
            server.handle_timeout(now);
        } else {
            now += Duration::from_micros(100);
        }
    }
    panic!("the transfers did not finish: {} of {} bytes (withhold {withhold}, first packets dropped {}, peak {peak}, server connections {}, now {now:?})", received.values().sum::<usize>(), PEERS * PER_PEER, dropped_first.len(), server.len());
}
