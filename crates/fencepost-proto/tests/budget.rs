//! Forty peers pin out-of-order data at one server (each withholds its first data
//! packet, so everything after it is held): the server's received data never
//! exceeds its endpoint's buffer budget, and once the holes are filled every
//! stream completes and the budget is given back.
//!
//! Plaintext, so the test can tell each connection's first data packet on the
//! wire; the budget sits below packet protection and works the same under it.

use fencepost_proto::time::Duration;
use fencepost_proto::{ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Instant, TransportConfig};
use std::collections::{HashMap, HashSet};

const PEERS: usize = 40;
const BUDGET: usize = 8 << 20;
const PER_PEER: usize = 1 << 20;

type Peer = Endpoint<u8>;

/// The server's application: reads whatever each connection has readable.
fn read_everything(server: &mut Peer, read: &mut [u8], mut take: impl FnMut(ConnectionHandle, &[u8])) {
    let open: Vec<_> = server.handles().collect();
    for h in open {
        while let Some(Ok(n)) = server.connection_mut(h).map(|c| c.read(read)) {
            if n == 0 {
                break;
            }
            take(h, &read[..n]);
        }
    }
}

/// The clock's next step: 100 µs while packets moved, else to the earlier end's next timer.
fn advance(client: &mut Peer, server: &mut Peer, now: Instant, moved: bool) -> Instant {
    if moved {
        return now + Duration::from_micros(100);
    }
    let next = match (client.poll_timeout(), server.poll_timeout()) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => now + Duration::from_millis(1),
    }
    .max(now);
    client.handle_timeout(next);
    server.handle_timeout(next);
    next
}

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
        read_everything(&mut server, &mut read, |h, bytes| *received.entry(h.0).or_default() += bytes.len());
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
        now = advance(&mut client, &mut server, now, moved);
    }
    panic!("the transfers did not finish: {} of {} bytes (withhold {withhold}, first packets dropped {}, peak {peak}, server connections {}, now {now:?})", received.values().sum::<usize>(), PEERS * PER_PEER, dropped_first.len(), server.len());
}

/// Twenty peers that send FEC repairs (a block code, two repairs per four packets) to a
/// server whose application reads everything at once: what the server's decoders keep
/// for those repairs (up to 512 packets each, about 12 MB for twenty) counts against the
/// same budget as received data, so the two together stay within it; the decoders forget
/// what they kept when it is spent, and every stream still arrives whole.
#[test]
fn what_decoders_keep_for_repairs_counts_against_the_budget() {
    use fencepost_proto::redundancy::{FecCode, RedundancyConfig};
    const FEC_PEERS: usize = 20;
    const FEC_BUDGET: usize = 2 << 20;
    const FEC_PER_PEER: usize = 2 << 20;
    let transport = TransportConfig::default().insecure();
    let sending = TransportConfig { redundancy: RedundancyConfig::Fec(FecCode::Block { k: 4, n: 6 }), ..transport.clone() };
    let mut client = Endpoint::new(EndpointConfig::client(sending), 1);
    let mut server_config = EndpointConfig::server(transport);
    server_config.buffer_budget = FEC_BUDGET;
    let mut server = Endpoint::new(server_config, 2);
    let mut now = Instant::from_millis(1);
    let handles: Vec<_> = (0..FEC_PEERS).map(|_| client.connect(now, 1u8)).collect();
    let mut written: HashMap<u32, usize> = HashMap::new();
    let mut received: HashMap<u32, Vec<u8>> = HashMap::new();
    let (mut buf, mut response, mut read) = (vec![0u8; 2048], vec![0u8; 2048], vec![0u8; 1 << 16]);
    let mut peak_kept = 0;
    for step in 0..400_000u64 {
        for h in &handles {
            let done = written.entry(h.0).or_default();
            if let Some(conn) = client.connection_mut(*h) {
                if conn.is_established() && *done < FEC_PER_PEER {
                    let chunk: Vec<u8> = (*done..(*done + (1 << 16)).min(FEC_PER_PEER)).map(|i| (i % 251) as u8).collect();
                    *done += conn.write(&chunk).unwrap_or(0);
                    if *done == FEC_PER_PEER {
                        conn.close(now);
                    }
                }
            }
        }
        let mut moved = false;
        while let Some((_, t)) = client.poll_transmit(now, &mut buf) {
            moved = true;
            if let Some(DatagramEvent::NewConnection(incoming)) = server.handle_datagram(now, 0, &buf[..t.size], &mut response) {
                server.accept(incoming).unwrap();
            }
        }
        while let Some((_, t)) = server.poll_transmit(now, &mut buf) {
            moved = true;
            client.handle_datagram(now, 1, &buf[..t.size], &mut response);
        }
        read_everything(&mut server, &mut read, |h, bytes| received.entry(h.0).or_default().extend_from_slice(bytes));
        let open: Vec<_> = server.handles().collect();
        while server.poll_event().is_some() {}
        while client.poll_event().is_some() {}
        let kept: usize = open.iter().filter_map(|h| server.connection(*h)).map(|c| c.repair_state_bytes()).sum();
        let data: usize = open.iter().filter_map(|h| server.connection(*h)).map(|c| c.buffered_bytes()).sum();
        peak_kept = peak_kept.max(kept);
        assert!(kept + data <= FEC_BUDGET + FEC_PEERS * 1500, "step {step}: {kept} bytes kept for repairs and {data} of data held");
        if received.values().map(Vec::len).sum::<usize>() == FEC_PEERS * FEC_PER_PEER {
            let shed: u64 = open.iter().filter_map(|h| server.connection(*h)).map(|c| c.stats().repair_state_shed).sum();
            let repairs: u64 = open.iter().filter_map(|h| server.connection(*h)).map(|c| c.stats().repairs_received).sum();
            assert!(repairs > 1000, "the peers sent repairs: {repairs}");
            assert!(shed > 0, "the decoders never reached the budget (peak {peak_kept} bytes kept)");
            assert!(peak_kept >= FEC_BUDGET / 2, "the decoders kept up to the budget: {peak_kept}");
            let expected: Vec<u8> = (0..FEC_PER_PEER).map(|i| (i % 251) as u8).collect();
            for (id, bytes) in &received {
                assert!(bytes == &expected, "connection {id}: the stream arrived altered");
            }
            return;
        }
        now = advance(&mut client, &mut server, now, moved);
    }
    panic!("the transfers did not finish: {} of {} bytes", received.values().map(Vec::len).sum::<usize>(), FEC_PEERS * FEC_PER_PEER);
}
