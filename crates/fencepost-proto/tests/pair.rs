//! Two connections back to back: handshake, data, loss recovery, close, timeouts.

mod common;

use common::{at, fast_config, Duration, Pair, DELAY};
use fencepost_proto::wire::{Body, Packet, PacketType};
use fencepost_proto::redundancy::{FecCode, RedundancyConfig};
use fencepost_proto::{Arq, ConnectionError, ControllerConfig, Event, FenceWidth, FixedConfig, ReadError, State, TransportConfig, WriteError};

#[test]
fn handshake_data_both_ways_and_graceful_close() {
    let mut p = Pair::new(fast_config(), fast_config());
    p.client.write(b"hello from the client").unwrap();
    p.run_until(at(30));
    assert_eq!(p.client.state(), State::Established);
    assert_eq!(p.server().state(), State::Established);
    assert_eq!(Pair::read_all(p.server()), (b"hello from the client".to_vec(), false));
    p.server().write(b"and back").unwrap();
    p.client.close(p.now);
    p.run_until(at(60));
    let (reply, finished) = Pair::read_all(&mut p.client);
    assert_eq!(reply, b"and back");
    assert!(!finished, "the server has not closed yet");
    let (_, server_sees_eof) = Pair::read_all(p.server());
    assert!(server_sees_eof, "the client's FIN arrived");
    assert_eq!(p.client.write(b"more"), Err(WriteError::Finished));
    let now = p.now;
    p.server().close(now);
    p.run_until(at(100));
    assert!(p.client.is_closed() && p.server().is_closed());
    assert_eq!(p.client_events.first(), Some(&Event::Connected));
    assert!(p.client_events.contains(&Event::StreamFinished));
    assert_eq!(p.client_events.last(), Some(&Event::Closed));
    assert_eq!(p.server_events.last(), Some(&Event::Closed));
    // Draining ends after the idle timeout of silence.
    p.run_until(at(100) + Duration::from_secs(31));
    assert!(p.client.is_drained() && p.server().is_drained());
}

#[test]
fn fence_resends_only_the_holes_window_resends_more() {
    let dropped = [3u32, 5];
    let run = |arq: Arq| {
        let config = TransportConfig { arq, ..fast_config() };
        let mut p = Pair::new(config.clone(), config);
        // Drop the first transmission of data packets 3 and 5.
        let mut seen = std::collections::HashSet::new();
        p.drop = Box::new(move |to_server, ty, seq, _| {
            to_server && ty == PacketType::Data && dropped.contains(&seq.unwrap()) && seen.insert(seq.unwrap())
        });
        p.run_until(at(20));
        p.client.write(&[7u8; 2000]).unwrap(); // 20 packets of 100 bytes
        p.run_until(at(2000));
        let (data, _) = Pair::read_all(p.server());
        assert_eq!(data, vec![7u8; 2000]);
        p.client.stats().retransmissions
    };
    assert_eq!(run(Arq::Fence), 2, "exactly the two holes");
    assert!(run(Arq::Window) > 2, "the cumulative ack cannot say what arrived past the hole");
}

#[test]
fn a_vanished_peer_ends_in_an_idle_timeout() {
    let config = TransportConfig { idle_timeout: Duration::from_secs(2), ..fast_config() };
    let mut p = Pair::new(config.clone(), config);
    p.run_until(at(20));
    // From now on the server hears nothing and says nothing.
    p.drop = Box::new(|_, _, _, _| true);
    p.client.write(&[1u8; 500]).unwrap();
    p.run_until(at(10_000));
    let expected = ConnectionError::TimedOut { idle: Duration::from_secs(2) };
    assert_eq!(p.client.error(), Some(&expected));
    assert!(p.client_events.contains(&Event::ConnectionLost(expected.clone())));
    assert_eq!(p.client.read(&mut [0u8; 8]), Err(ReadError::ConnectionLost(expected)));
    assert!(p.client.is_drained());
}

#[test]
fn keepalives_hold_an_idle_connection_open() {
    let config = TransportConfig { idle_timeout: Duration::from_secs(3), keepalive_interval: Some(Duration::from_secs(1)), ..fast_config() };
    let mut p = Pair::new(config.clone(), config);
    p.run_until(at(60_000));
    assert_eq!(p.client.state(), State::Established);
    assert!(p.client.stats().keepalives_sent >= 50, "one a second: {}", p.client.stats().keepalives_sent);
}

#[test]
fn reset_reaches_the_peer() {
    let mut p = Pair::new(fast_config(), fast_config());
    p.run_until(at(20));
    let now = p.now;
    p.client.reset(now);
    p.run_until(at(40));
    assert_eq!(p.server().error(), Some(&ConnectionError::Reset(fencepost_proto::wire::ResetReason::Aborted)));
    assert_eq!(p.client.error(), Some(&ConnectionError::LocallyReset));
}

#[test]
fn a_blocked_writer_is_woken_once_half_its_room_is_free() {
    // 40 kB of send buffer (the unsent floor, 64 kB, is larger): woken once half of what
    // may wait unsent is free, the 40 kB less what the 64-packet window keeps in flight:
    // 20 kB at most, 15 kB at least.
    let client = TransportConfig { send_buffer: 40_000, ..fast_config() };
    let server = TransportConfig { recv_buffer: 20_000, ..fast_config() };
    let mut p = Pair::new(client, server);
    p.run_until(at(20));
    assert_eq!(p.client.write(&[7u8; 100_000]).unwrap(), 40_000, "the send buffer takes what fits");
    p.client_events.clear();
    let (mut held_back, mut t) = (0, 20);
    while !p.client_events.contains(&Event::Writable) {
        t += 1;
        assert!(t < 5_000, "the writer was never woken");
        p.run_until(at(t));
        Pair::read_all(p.server());
        let room = p.client.send_capacity();
        if !p.client_events.contains(&Event::Writable) && room > 0 {
            assert!(room < 20_000, "{room} bytes free and the writer still asleep");
            held_back += 1;
        }
    }
    assert!(held_back > 0, "room came free a little at a time, and the writer slept through it");
    assert!(p.client.send_capacity() >= 15_000);
}

#[test]
fn flow_control_stops_the_sender_at_the_receive_window() {
    // The server buffers 1000 bytes: 10 packets of 100.
    let server = TransportConfig { recv_buffer: 1000, ..fast_config() };
    let client = TransportConfig { send_buffer: 3000, ..fast_config() };
    let mut p = Pair::new(client, server);
    p.run_until(at(20));
    let accepted = p.client.write(&[9u8; 5000]).unwrap();
    assert_eq!(accepted, 3000, "the send buffer takes what fits");
    p.run_until(at(2000));
    // The window counts each packet as one held behind a hole would cost (100 bytes and a
    // 64-byte slot): the receiver fills its buffer to within one such packet, never past it.
    let held = p.server().readable_len();
    assert!((1000 - 164..=1000).contains(&held), "the receiver holds {held} of its 1000 bytes");
    assert_eq!(p.client.stats().beyond_window_packets, 0);
    assert_eq!(p.server().stats().beyond_window_packets, 0, "nothing the window allowed was dropped for room");
    let (first, _) = Pair::read_all(p.server());
    assert_eq!(first.len(), held);
    p.run_until(at(4000));
    let (rest, _) = Pair::read_all(p.server());
    assert!((1000 - 164..=1000).contains(&rest.len()), "reading reopened the window: {} more", rest.len());
    assert!(p.client_events.contains(&Event::Writable) || p.client.send_capacity() > 0);
}

#[test]
fn packets_for_another_connection_id_are_counted_and_dropped() {
    let mut p = Pair::new(fast_config(), fast_config());
    p.run_until(at(20));
    // A data packet from an "old connection": right shape, wrong id.
    let stale = Packet { dst_cid: 0xdead, body: Body::Data(fencepost_proto::wire::Data { seq: 0, timestamp: 5, payload: b"old" }) };
    let mut buf = [0u8; 64];
    let n = stale.emit(&mut buf).unwrap();
    let now = p.now;
    p.server().handle_datagram(now, &buf[..n]);
    p.server().handle_datagram(now, &[0xff, 0x00, 0x01]);
    assert_eq!(p.server().stats().foreign_packets, 1);
    assert_eq!(p.server().stats().malformed_packets, 1);
    assert_eq!(p.server().readable_len(), 0);
}

#[test]
fn a_lost_accept_is_answered_again() {
    let mut p = Pair::new(fast_config(), fast_config());
    // Drop the server's first Accept: the client resends its Initial, the server its Accept.
    p.drop = Box::new(|to_server, ty, _, _| !to_server && ty == PacketType::Handshake && {
        static ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        !ONCE.swap(true, std::sync::atomic::Ordering::SeqCst)
    });
    p.client.write(b"x").unwrap();
    p.run_until(at(2000));
    assert_eq!(Pair::read_all(p.server()).0, b"x");
    assert!(p.client.stats().handshakes_sent >= 2);
}

#[test]
fn a_timeout_restarts_the_timer_instead_of_resending_the_whole_flight() {
    let mut p = Pair::new(fast_config(), fast_config());
    p.run_until(at(20));
    // The path goes dark with 64 packets in flight.
    p.drop = Box::new(|_, _, _, _| true);
    p.client.write(&[1u8; 6_400]).unwrap();
    p.run_until(at(3_020));
    let s = p.client.stats();
    // Each expiry resends the oldest packets as probes (two, doubling while unanswered, at
    // most 16: never the whole flight) and restarts the timer (RFC 6298 5.6); it must not
    // find the next-oldest already overdue and fire again at once.
    assert!(s.retransmission_timeouts > 5 && s.retransmission_timeouts <= 3_000 / 50, "{} timeouts", s.retransmission_timeouts);
    assert!(s.retransmissions <= 16 * s.retransmission_timeouts, "{} retransmissions for {} timeouts", s.retransmissions, s.retransmission_timeouts);
    assert!(s.retransmissions > 2 * s.retransmission_timeouts, "unanswered timeouts probe more: {} for {}", s.retransmissions, s.retransmission_timeouts);
}

#[test]
fn a_stream_that_stops_advancing_ends_with_no_progress_though_the_peer_answers() {
    // Packet 0 never gets through (a path that loses it, or a peer that never acknowledges
    // it): acks keep coming, so the idle timer never fires, but nothing can be delivered.
    let config = TransportConfig { progress_timeout: Some(Duration::from_secs(3)), ..fast_config() };
    let mut p = Pair::new(config.clone(), config);
    p.drop = Box::new(|to_server, ty, seq, _| to_server && ty == PacketType::Data && seq == Some(0));
    p.run_until(at(20));
    p.client.write(&[1u8; 500]).unwrap();
    p.run_until(at(20) + Duration::from_secs(2));
    assert_eq!(p.client.state(), State::Established, "two seconds without progress is not yet the limit");
    p.run_until(at(20) + Duration::from_secs(10));
    let expected = ConnectionError::NoProgress { stalled: Duration::from_secs(3) };
    assert!(matches!(p.client.error(), Some(ConnectionError::NoProgress { stalled }) if *stalled >= Duration::from_secs(3) && *stalled < Duration::from_secs(4)), "{:?}", p.client.error());
    assert!(p.client.error().unwrap().to_string().contains("no progress"), "{expected:?}");
    // The receiver held data behind the hole all along: it ends the same way.
    let server = p.server.as_ref().unwrap();
    assert!(matches!(server.error(), Some(ConnectionError::NoProgress { .. })), "{:?} {:?} {:?} {:?}", server.error(), server.state(), server.poll_timeout(), server.stats());
    // An idle connection with nothing outstanding is not a stalled one.
    let mut quiet = Pair::new(TransportConfig { progress_timeout: Some(Duration::from_secs(3)), ..fast_config() }, fast_config());
    quiet.run_until(at(20) + Duration::from_secs(20));
    assert_eq!(quiet.client.state(), State::Established);
}

#[test]
fn redundancy_is_agreed_in_the_handshake() {
    // Drop the first transmission of data packets 3 and 9 on the way to the server.
    let run = |server_takes_repairs: bool| {
        let client = TransportConfig { redundancy: RedundancyConfig::Fec(FecCode::Block { k: 4, n: 6 }), ..fast_config() };
        let server = TransportConfig { accept_repairs: server_takes_repairs, ..fast_config() };
        let mut p = Pair::new(client, server);
        let mut seen = std::collections::HashSet::new();
        p.drop = Box::new(move |to_server, ty, seq, _| to_server && ty == PacketType::Data && [3, 9].contains(&seq.unwrap()) && seen.insert(seq.unwrap()));
        p.run_until(at(20));
        p.client.write(&[5u8; 2000]).unwrap();
        p.run_until(at(2000));
        assert_eq!(Pair::read_all(p.server()).0, vec![5u8; 2000]);
        (p.client.stats().clone(), p.server().stats().clone())
    };
    let (client, server) = run(true);
    assert!(!client.repairs_refused_by_peer);
    assert!(client.redundant_packets_sent >= 10, "two repairs per block of four: {}", client.redundant_packets_sent);
    assert_eq!(server.packets_rebuilt, 2, "both holes rebuilt");
    assert_eq!(client.retransmissions, 0, "nothing resent: the fence acknowledged the rebuilt packets");
    assert_eq!(server.feedback_sent, 0, "a fixed code has no use for feedback");

    let (client, server) = run(false);
    assert!(client.repairs_refused_by_peer);
    assert_eq!(client.redundant_packets_sent, 0, "the server said it takes no repairs");
    assert_eq!((server.repairs_received, server.packets_rebuilt), (0, 0));
    assert_eq!(client.retransmissions, 2, "the holes are resent instead");
}

/// The default profile's adaptive code sends no repairs to a bulk transfer on a clean
/// path, so its receiver copies few packets for them: at the start only the first 32
/// (against 128 for a peer whose code repairs from the first packet on), and once past
/// them it lets go of those copies. A stream still gets its first messages rebuilt from
/// the repairs sent before anything is measured.
#[test]
fn a_receiver_keeps_few_packets_for_repairs_an_adaptive_peer_has_not_sent() {
    let config = |redundancy| TransportConfig { max_payload: 100, redundancy, controller: ControllerConfig::Fixed(FixedConfig::default().window_packets(64)), ..TransportConfig::default_profile().insecure() };
    let symbol = 100 + 3;
    let adaptive = RedundancyConfig::AdaptiveFec { budget: 0.5, transfers: true };
    // Bulk: `bytes` written at once (100 per packet), the stream left open (its end drops the decoder).
    let kept = |redundancy: RedundancyConfig, bytes: usize| {
        let mut p = Pair::new(config(redundancy), config(RedundancyConfig::None));
        p.run_until(at(20));
        p.client.write(&vec![9u8; bytes]).unwrap();
        p.run_until(at(1000));
        assert_eq!(Pair::read_all(p.server()).0.len(), bytes);
        (p.server().repair_state_bytes(), p.client.stats().redundant_packets_sent)
    };
    // Within the first 32 packets each is kept, for a repair that may still come ...
    let (bulk_kept, bulk_repairs) = kept(adaptive.clone(), 2_000);
    assert_eq!(bulk_repairs, 0, "a clean bulk transfer gets no repairs");
    assert!((20 * symbol..=21 * symbol).contains(&bulk_kept), "kept {bulk_kept} bytes, {} packets", bulk_kept / symbol);
    // ... and past them the copies are let go, not held for the transfer's life.
    let (bulk_kept, bulk_repairs) = kept(adaptive.clone(), 20_000);
    assert_eq!(bulk_repairs, 0);
    assert_eq!(bulk_kept, 0, "kept {} packets past the first 32", bulk_kept / symbol);
    // A fixed code's receiver keeps what its first repair may cover (one per 250 packets:
    // none has come yet), 128 packets, and lets go past them alike.
    let (fixed_kept, fixed_repairs) = kept(RedundancyConfig::Fec(FecCode::Window { window: 250, every: 250 }), 10_000);
    assert_eq!(fixed_repairs, 0);
    assert!(fixed_kept >= 100 * symbol, "kept {fixed_kept} bytes for a fixed code");
    let (fixed_kept, _) = kept(RedundancyConfig::Fec(FecCode::Window { window: 250, every: 250 }), 20_000);
    assert_eq!(fixed_kept, 0, "kept {} packets past the first 128", fixed_kept / symbol);

    // A stream: one small message every 10 ms, one data packet lost once (the third, or the 29th).
    for lost in [2u32, 28] {
        let mut p = Pair::new(config(adaptive.clone()), config(RedundancyConfig::None));
        let mut seen = false;
        p.drop = Box::new(move |to_server, ty, seq, _| to_server && ty == PacketType::Data && seq == Some(lost) && !std::mem::replace(&mut seen, true));
        p.run_until(at(20));
        let mut received = Vec::new();
        for m in 0..60u8 {
            p.client.write(&[m; 40]).unwrap();
            p.run_until(at(30 + 10 * m as u64));
            received.extend(Pair::read_all(p.server()).0);
        }
        p.run_until(at(2000));
        received.extend(Pair::read_all(p.server()).0);
        assert_eq!(received, (0..60u8).flat_map(|m| [m; 40]).collect::<Vec<_>>());
        let (client, server) = (p.client.stats().clone(), p.server().stats().clone());
        assert!(client.redundant_packets_sent > 0, "a stream gets repairs from its start");
        assert_eq!((server.packets_rebuilt, client.retransmissions), (1, 0), "packet {lost} rebuilt, nothing resent: {server:?}");
    }
}

#[test]
fn repairs_nobody_announced_are_violations() {
    // The server announced no redundancy; a well-formed window repair to the client
    // (id 0xc1) over packets 0-3 is not taken.
    let mut p = Pair::new(fast_config(), fast_config());
    p.run_until(at(20));
    assert_eq!(p.client.state(), State::Established);
    let repair = [0x01, 0x08, 0, 0, 0, 0xc1, 0x02, 0, 0, 0, 0, 0x04, 0x00, 0xaa, 0xbb, 0xcc];
    assert!(matches!(Packet::parse(&repair), Ok(Packet { body: Body::Repair(_), .. })));
    let before = p.client.stats().protocol_violations;
    let now = p.now;
    p.client.handle_datagram(now, &repair);
    assert_eq!(p.client.stats().protocol_violations, before + 1);
    assert_eq!(p.client.stats().packets_rebuilt, 0);
}

/// Datagrams put on the wire by `step`, which must deliver none of them (a flush, or a
/// run of at most DELAY after one): (sent at, to_server, kind).
fn sent_by(p: &mut Pair, step: impl FnOnce(&mut Pair)) -> Vec<(fencepost_proto::Instant, bool, &'static str)> {
    p.flush();
    let before = p.sent;
    step(p);
    let n = (p.sent - before) as usize;
    p.wire
        .iter()
        .skip(p.wire.len() - n)
        .map(|(t, to_server, d)| {
            let kind = match Packet::parse(d) {
                Ok(Packet { body: Body::Ack(_), .. }) => "ack",
                Ok(Packet { body: Body::Data(_), .. }) => "data",
                Ok(Packet { body: Body::Feedback(_), .. }) => "feedback",
                _ => "other",
            };
            (*t - DELAY, *to_server, kind)
        })
        .collect()
}

/// Acks that left without a data packet of the same side at the same instant.
fn acks_alone(sent: &[(fencepost_proto::Instant, bool, &'static str)]) -> usize {
    sent.iter().filter(|(t, dir, kind)| *kind == "ack" && !sent.iter().any(|(u, d, k)| *k == "data" && u == t && d == dir)).count()
}

fn server_acks(sent: &[(fencepost_proto::Instant, bool, &'static str)]) -> Vec<fencepost_proto::Instant> {
    sent.iter().filter(|(_, to_server, kind)| !to_server && *kind == "ack").map(|s| s.0).collect()
}

/// A request-reply exchange on a path whose round trip is shorter than the ack delay.
fn exchange_config(ack_coalesce: Duration) -> TransportConfig {
    TransportConfig { ack_coalesce, max_ack_delay: Duration::from_millis(25), ..fast_config() }
}

/// Client and server that have each sent one message and read the other's.
fn greeted(config: TransportConfig) -> Pair {
    let mut p = Pair::new(config.clone(), config);
    p.client.write(b"hello").unwrap();
    p.run_until(at(30));
    Pair::read_all(p.server());
    p.server().write(b"hi").unwrap();
    p.run_until(at(60));
    assert_eq!(Pair::read_all(&mut p.client).0, b"hi");
    p
}

#[test]
fn in_a_request_reply_exchange_acks_leave_behind_the_replies() {
    assert!(fast_config().ack_coalesce > Duration::ZERO && fast_config().ack_every == 2, "the default profile coalesces");
    let mut p = greeted(exchange_config(Duration::from_millis(1)));
    let (client_acks, server_acks_before) = (p.client.stats().acks_sent, p.server().stats().acks_sent);
    let mut log = Vec::new();
    for _ in 0..20 {
        // The client asks; the request arrives DELAY later and the server answers at once.
        log.extend(sent_by(&mut p, |p| p.client.write(b"request").map(|_| ()).unwrap()));
        log.extend(sent_by(&mut p, |p| p.run_until(p.now + DELAY)));
        assert_eq!(Pair::read_all(p.server()).0, b"request");
        log.extend(sent_by(&mut p, |p| p.server().write(b"reply").map(|_| ()).unwrap()));
        log.extend(sent_by(&mut p, |p| p.run_until(p.now + DELAY)));
        assert_eq!(Pair::read_all(&mut p.client).0, b"reply");
    }
    // Acks still flow (one per two packets received), each behind a data packet of its side.
    let server_acked = p.server().stats().acks_sent - server_acks_before;
    let client_acked = p.client.stats().acks_sent - client_acks;
    assert!((9..=11).contains(&server_acked), "server acks: {server_acked}");
    assert!((9..=11).contains(&client_acked), "client acks: {client_acked}");
    assert_eq!(acks_alone(&log), 0, "{log:?}");
    // One more exchange, then a request the server does not answer: the ack it makes due
    // waits ack_coalesce for an answer, then goes alone.
    sent_by(&mut p, |p| p.client.write(b"request").map(|_| ()).unwrap());
    sent_by(&mut p, |p| p.run_until(p.now + DELAY));
    Pair::read_all(p.server());
    sent_by(&mut p, |p| p.server().write(b"reply").map(|_| ()).unwrap());
    sent_by(&mut p, |p| p.run_until(p.now + DELAY));
    let mut log = sent_by(&mut p, |p| p.client.write(b"unanswered").map(|_| ()).unwrap());
    let arrival = p.now + DELAY;
    log.extend(sent_by(&mut p, |p| p.run_until(arrival)));
    log.extend(sent_by(&mut p, |p| p.run_until(arrival + Duration::from_millis(2))));
    assert_eq!(server_acks(&log), vec![arrival + Duration::from_millis(1)], "{log:?}");
}

/// `n` exchanges of a request and an answered reply; the datagrams they put on the wire.
fn exchanges(p: &mut Pair, n: usize) -> Vec<(fencepost_proto::Instant, bool, &'static str)> {
    let mut log = Vec::new();
    for _ in 0..n {
        log.extend(sent_by(p, |p| p.client.write(b"request").map(|_| ()).unwrap()));
        log.extend(sent_by(p, |p| p.run_until(p.now + DELAY)));
        assert_eq!(Pair::read_all(p.server()).0, b"request");
        log.extend(sent_by(p, |p| p.server().write(b"reply").map(|_| ()).unwrap()));
        log.extend(sent_by(p, |p| p.run_until(p.now + DELAY)));
        assert_eq!(Pair::read_all(&mut p.client).0, b"reply");
    }
    log
}

#[test]
fn when_many_exchanges_fit_in_the_ack_delay_acks_cover_several() {
    // A 10 ms round trip and a 100 ms ack delay: ten exchanges fit, eight (the most) are
    // covered by one ack; with a 25 ms delay two fit, and acks stay one per two packets.
    for (max_ack_delay, per_ack) in [(100, 8), (25, 2)] {
        let config = TransportConfig { max_ack_delay: Duration::from_millis(max_ack_delay), ..exchange_config(Duration::from_millis(1)) };
        let mut p = greeted(config);
        exchanges(&mut p, 8); // the RTT estimate settles
        let (client_before, server_before) = (p.client.stats().acks_sent, p.server().stats().acks_sent);
        let timeouts_before = p.client.stats().retransmission_timeouts;
        let log = exchanges(&mut p, 48);
        let expected = 48 / per_ack as u64;
        let server_acked = p.server().stats().acks_sent - server_before;
        let client_acked = p.client.stats().acks_sent - client_before;
        assert!(server_acked.abs_diff(expected) <= 1, "ack delay {max_ack_delay} ms: server acks {server_acked}, expected {expected}");
        assert!(client_acked.abs_diff(expected) <= 1, "ack delay {max_ack_delay} ms: client acks {client_acked}, expected {expected}");
        assert_eq!(acks_alone(&log), 0, "{log:?}");
        assert_eq!(p.client.stats().retransmission_timeouts, timeouts_before, "rarer acks must not fire the peer's timer");
        assert_eq!(p.client.stats().retransmissions, 0);
    }
    // An exchange that stops: what is owed is acked within the ack delay all the same.
    let config = TransportConfig { max_ack_delay: Duration::from_millis(100), ..exchange_config(Duration::from_millis(1)) };
    let mut p = greeted(config);
    exchanges(&mut p, 11);
    sent_by(&mut p, |p| p.client.write(b"last").map(|_| ()).unwrap());
    let arrival = p.now + DELAY;
    let mut log = sent_by(&mut p, |p| p.run_until(arrival));
    for ms in 1..=101 {
        log.extend(sent_by(&mut p, |p| p.run_until(arrival + Duration::from_millis(ms))));
    }
    let acks = server_acks(&log);
    assert_eq!(acks.len(), 1, "{log:?}");
    assert!(acks[0] <= arrival + Duration::from_millis(100), "acked at {:?}, the last request arrived at {arrival:?}", acks[0]);
}

#[test]
fn feedback_for_adaptive_repairs_rides_behind_an_ack_or_a_reply() {
    // The default profile's adaptive redundancy: the receiver reports what the path loses.
    let config = TransportConfig {
        max_payload: 100,
        controller: ControllerConfig::Fixed(FixedConfig::default().window_packets(64)),
        max_ack_delay: Duration::from_millis(25),
        ..TransportConfig::default_profile().insecure()
    };
    let mut p = greeted(config);
    let before = (p.client.stats().feedback_sent, p.server().stats().feedback_sent);
    let log = exchanges(&mut p, 600);
    let sent = (p.client.stats().feedback_sent - before.0, p.server().stats().feedback_sent - before.1);
    assert!(sent.0 >= 2 && sent.1 >= 2, "feedback sent by client and server: {sent:?}");
    let alone: Vec<_> = log
        .iter()
        .filter(|(t, dir, kind)| *kind == "feedback" && !log.iter().any(|(u, d, k)| (*k == "data" || *k == "ack") && u == t && d == dir))
        .collect();
    assert!(alone.is_empty(), "feedback sent on its own: {alone:?}");
}

#[test]
fn without_an_exchange_or_with_coalescing_off_the_ack_leaves_at_once() {
    for coalesce in [Duration::from_millis(1), Duration::ZERO] {
        // request, reply, request: the second request makes the ack due.
        let mut p = greeted(exchange_config(coalesce));
        let mut log = sent_by(&mut p, |p| p.client.write(b"one").map(|_| ()).unwrap());
        log.extend(sent_by(&mut p, |p| p.run_until(p.now + DELAY)));
        Pair::read_all(p.server());
        log.extend(sent_by(&mut p, |p| p.server().write(b"answer").map(|_| ()).unwrap()));
        log.extend(sent_by(&mut p, |p| p.client.write(b"two").map(|_| ()).unwrap()));
        let arrival = p.now + DELAY;
        log.extend(sent_by(&mut p, |p| p.run_until(arrival)));
        if coalesce == Duration::ZERO {
            assert_eq!(server_acks(&log), vec![arrival], "without coalescing the second packet is acked at once: {log:?}");
        } else {
            assert!(server_acks(&log).is_empty(), "the exchange alternates: the ack waits for the answer: {log:?}");
        }
    }
    // Two requests with no answer between them: not an exchange, acked at once.
    let mut p = greeted(exchange_config(Duration::from_millis(1)));
    let mut log = sent_by(&mut p, |p| p.client.write(b"one").map(|_| ()).unwrap());
    log.extend(sent_by(&mut p, |p| p.run_until(p.now + DELAY)));
    log.extend(sent_by(&mut p, |p| p.client.write(b"two").map(|_| ()).unwrap()));
    let arrival = p.now + DELAY;
    log.extend(sent_by(&mut p, |p| p.run_until(arrival)));
    assert_eq!(server_acks(&log), vec![arrival], "{log:?}");
    // One way: the server has never sent data ("hello" and "one" make the ack due).
    let mut p = Pair::new(exchange_config(Duration::from_millis(1)), exchange_config(Duration::from_millis(1)));
    p.client.write(b"hello").unwrap();
    p.run_until(at(30));
    let mut log = sent_by(&mut p, |p| p.client.write(b"one").map(|_| ()).unwrap());
    let arrival = p.now + DELAY;
    log.extend(sent_by(&mut p, |p| p.run_until(arrival)));
    assert_eq!(server_acks(&log), vec![arrival], "{log:?}");
}

/// Runs the pair a millisecond at a time until the client's retransmission timer fires;
/// returns the time reached.
fn run_to_the_clients_next_timeout(p: &mut Pair) -> fencepost_proto::Instant {
    let timeouts_before = p.client.stats().retransmission_timeouts;
    let mut until = p.now;
    while p.client.stats().retransmission_timeouts == timeouts_before {
        until += Duration::from_millis(1);
        p.run_until(until);
    }
    until
}

/// A timeout over the end of a stream at heavy loss: the probes the loss calls for are all
/// sent, copies of the tail making up what it lacks, each stamped apart so that the receiver
/// acks every copy that arrives (one ack getting back is all the sender needs).
#[test]
fn the_end_of_a_stream_at_heavy_loss_is_probed_in_copies_each_acked() {
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut p = Pair::new(fast_config(), fast_config());
    p.client.write(b"hello").unwrap();
    p.run_until(at(30));
    Pair::read_all(p.server());
    // The server sends 64 packets; the first transmission of every other one is lost: the
    // client measures half of what comes its way lost (its own controller models none).
    let mut seen = std::collections::HashSet::new();
    p.drop = Box::new(move |to_server, ty, seq, _| !to_server && ty == PacketType::Data && seq.unwrap() % 2 == 1 && seen.insert(seq.unwrap()));
    p.server().write(&[5u8; 6400]).unwrap();
    p.run_until(at(2000));
    assert_eq!(Pair::read_all(&mut p.client).0.len(), 6400);
    // Now every ack to the client is lost, and the client ends its stream: a packet, the FIN.
    let sent: Rc<RefCell<Vec<(u32, u32)>>> = Rc::default();
    let log = sent.clone();
    p.alter = Box::new(move |to_server, datagram| match (to_server, Packet::parse(datagram)) {
        (true, Ok(Packet { body: Body::Data(d), .. })) => log.borrow_mut().push((d.seq, d.timestamp)),
        (true, Ok(Packet { body: Body::Close(c), .. })) => log.borrow_mut().push((c.seq, c.timestamp)),
        _ => {}
    });
    p.drop = Box::new(|to_server, _, _, _| !to_server);
    p.client.write(b"tail").unwrap();
    let now = p.now;
    p.client.close(now);
    let until = run_to_the_clients_next_timeout(&mut p);
    let sent = sent.borrow().clone();
    let (data, fin) = (sent[0].0, sent[1].0);
    assert_eq!(fin, data + 1);
    assert!(sent.iter().all(|&(s, _)| s == data || s == fin), "only the tail is sent: {sent:?}");
    // Its first transmission, then the timeout's probes: ten at the half (or so) measured
    // lost, where the two a loss-free path gets would both fail three times in four.
    assert_eq!(sent.len(), 2 + 10, "{sent:?}");
    let stamps: std::collections::HashSet<(u32, u32)> = sent.iter().copied().collect();
    assert_eq!(stamps.len(), sent.len(), "each copy of a packet carries its own timestamp: {sent:?}");
    // Copies that reach the receiver one by one (a real link spaces them) draw an ack each:
    // none is taken for a duplicate sent on purpose.
    let copies: Vec<Vec<u8>> = p.wire.drain(..).filter(|w| w.1).map(|w| w.2).collect();
    assert_eq!(copies.len(), 10);
    let mut buf = vec![0u8; 2048];
    let mut acks = 0;
    let now = until + DELAY;
    for copy in &copies {
        p.server().handle_datagram(now, copy);
        while let Some(t) = p.server().poll_transmit(now, &mut buf) {
            acks += usize::from(t.packet_type == PacketType::Ack);
        }
    }
    assert_eq!(acks, copies.len());
    // Mid-stream (no FIN sent) a timeout keeps to the packets it declared lost.
    let mut q = Pair::new(fast_config(), fast_config());
    q.client.write(b"hello").unwrap();
    q.run_until(at(30));
    q.drop = Box::new(|to_server, _, _, _| !to_server);
    let retransmissions = q.client.stats().retransmissions;
    q.client.write(b"more").unwrap();
    run_to_the_clients_next_timeout(&mut q);
    assert_eq!(q.client.stats().retransmissions - retransmissions, 1);
}

/// A client whose Initials are all lost tries again one RTO after each attempt, in more
/// copies each time (1, 2, then 3), never waiting longer: at heavy loss the handshake is
/// most of a short transfer's time, and backing off had doubled it.
#[test]
fn unanswered_handshakes_are_retried_every_rto_in_more_copies() {
    let lost = std::rc::Rc::new(std::cell::Cell::new(true));
    let mut p = Pair::new(fast_config(), fast_config());
    let blackhole = lost.clone();
    p.drop = Box::new(move |to_server, ty, _, _| to_server && ty == PacketType::Handshake && blackhole.get());
    // (when, copies) of each attempt, watched millisecond by millisecond.
    let mut attempts: Vec<(u64, u64)> = Vec::new();
    let mut sent = 0;
    for ms in 1..=2_500 {
        p.run_until(at(ms));
        let now = p.client.stats().handshakes_sent;
        if now > sent {
            attempts.push((ms, now - sent));
            sent = now;
        }
    }
    let copies: Vec<u64> = attempts.iter().map(|a| a.1).collect();
    assert_eq!(&copies[..4], &[1, 2, 3, 3], "{attempts:?}");
    let gaps: Vec<u64> = attempts.windows(2).map(|w| w[1].0 - w[0].0).collect();
    // 305 ms: 100 ms initial RTT, four times half of it, 5 ms of ack delay.
    assert!(gaps.iter().all(|&g| g == gaps[0] && (300..=310).contains(&g)), "no backing off: {gaps:?}");
    assert_eq!(attempts.len(), 9, "{attempts:?}");
    // The path comes back: the next attempt gets through.
    lost.set(false);
    p.run_until(at(2_500 + 320));
    assert_eq!(p.client.state(), State::Established);
}

/// Logs (sequence number, timestamp) of every data packet the client sends (plaintext:
/// version 1, whose header carries both in clear).
fn log_client_data(p: &mut Pair) -> std::rc::Rc<std::cell::RefCell<Vec<(u32, u32)>>> {
    let sent = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = sent.clone();
    p.alter = Box::new(move |to_server, datagram| {
        if to_server && datagram[1] == PacketType::Data as u8 {
            let word = |at: usize| u32::from_be_bytes([datagram[at], datagram[at + 1], datagram[at + 2], datagram[at + 3]]);
            log.borrow_mut().push((word(6), word(10)));
        }
    });
    sent
}

/// The probes one timeout sends mid-stream carry distinct timestamps, later for later
/// ones: a receiver that already holds them (its acks were lost) then acks each repeat at
/// once, instead of taking all but the first for copies sent on purpose, and an ack of a
/// later probe never reads as proof that an earlier one was spurious.
#[test]
fn probes_of_one_timeout_are_stamped_apart_in_send_order() {
    let acks_lost = std::rc::Rc::new(std::cell::Cell::new(false));
    let mut p = Pair::new(fast_config(), fast_config());
    let lost = acks_lost.clone();
    p.drop = Box::new(move |to_server, ty, _, _| !to_server && ty == PacketType::Ack && lost.get());
    let sent = log_client_data(&mut p);
    p.run_until(at(20));
    acks_lost.set(true);
    p.client.write(&[5u8; 2000]).unwrap();
    p.run_until(at(1500));
    assert!(p.client.stats().retransmission_timeouts >= 1);
    // The first timeout's probes: the first retransmissions, sent back to back.
    let mut seen = std::collections::HashSet::new();
    let probes: Vec<(u32, u32)> = sent.borrow().iter().filter(|(seq, _)| !seen.insert(*seq)).take(2).copied().collect();
    assert_eq!(seen.len(), 20, "twenty packets of 100 bytes");
    assert_eq!(probes.len(), 2, "{:?}", sent.borrow());
    assert!(probes[0].1 < probes[1].1, "stamped apart, later for the later probe: {probes:?}");
    assert!(probes[1].1 - probes[0].1 < 100, "a few microseconds apart, not a round later: {probes:?}");
    // The server held both already: each repeat was acked (the acks are what was lost).
    assert!(p.server().stats().duplicate_packets_received >= 2);
    acks_lost.set(false);
    p.run_until(at(4000));
    assert_eq!(Pair::read_all(p.server()).0, vec![5u8; 2000]);
}

/// A handshake that needed several attempts says the path loses: the first timeouts'
/// probes allow for it (more of them) before the controller has measured anything.
#[test]
fn a_hard_won_handshake_makes_the_first_timeouts_probe_more() {
    // Probes in the first timeout, after a handshake whose first `lost_initials` Initials
    // were lost (the first attempt sends one, the second two).
    let first_timeout_probes = |lost_initials: u64| {
        let acks_lost = std::rc::Rc::new(std::cell::Cell::new(false));
        let mut p = Pair::new(fast_config(), fast_config());
        let lost = acks_lost.clone();
        let mut initials = 0;
        p.drop = Box::new(move |to_server, ty, _, _| {
            if to_server && ty == PacketType::Handshake {
                initials += 1;
                return initials <= lost_initials;
            }
            !to_server && ty == PacketType::Ack && lost.get()
        });
        let sent = log_client_data(&mut p);
        p.run_until(at(1000));
        assert_eq!(p.client.state(), State::Established);
        acks_lost.set(true);
        p.client.write(&[5u8; 2000]).unwrap();
        p.run_until(at(1600));
        assert!(p.client.stats().retransmission_timeouts >= 1);
        let sent = sent.borrow();
        let mut seen = std::collections::HashSet::new();
        let resent: Vec<u32> = sent.iter().filter(|(seq, _)| !seen.insert(*seq)).map(|&(_, stamp)| stamp).collect();
        // One round's probes leave together, stamped microseconds apart.
        resent.iter().filter(|&&stamp| stamp - resent[0] < 100).count()
    };
    assert_eq!(first_timeout_probes(0), 2, "one attempt: RFC 9002's two");
    // Three attempts: about 42 % loss each way, eight probes for a 95 % chance of an answer.
    assert_eq!(first_timeout_probes(3), 8);
}

/// A hole the receiver holds packets far beyond: past its ack's bitmap (16 bits here)
/// the fence goes on in far acks, so the sender keeps sending past the hole while its
/// retransmission is on the way, learns what arrived, and resends only the hole; no
/// packet the far acks show arrived is taken for lost on the ack alone.
#[test]
fn far_acks_carry_the_fence_past_one_bitmap_and_only_the_hole_is_resent() {
    let run = |fence: u32| {
        let config = TransportConfig { fence_width: FenceWidth::UpTo(fence), controller: ControllerConfig::Fixed(FixedConfig::default().window_packets(60)), ..fast_config() };
        let mut p = Pair::new(config.clone(), config);
        let mut dropped_once = false;
        p.drop = Box::new(move |to_server, ty, seq, _| {
            let drop = to_server && ty == PacketType::Data && seq == Some(2) && !dropped_once;
            dropped_once |= drop;
            drop
        });
        p.run_until(at(20));
        p.client.write(&[9u8; 6_000]).unwrap(); // 60 packets of 100 bytes
        p.run_until(at(3_000));
        let (data, _) = Pair::read_all(p.server());
        assert_eq!(data, vec![9u8; 6_000]);
        (p.client.stats().retransmissions, p.client.stats().packets_lost, p.server().stats().far_acks_sent)
    };
    let (retransmissions, lost, far_acks) = run(16);
    assert!(far_acks > 0, "packets held 16 past the hole are described in far acks");
    assert_eq!((retransmissions, lost), (1, 1), "the hole alone is resent");
    // With the default width one bitmap holds it all: no far acks.
    assert_eq!(run(8192), (1, 1, 0));
}

/// The end of a flight lost, with the retransmission timeout far off (its floor here 1 s):
/// no packet sent after the lost ones can be acknowledged to show them lost. Two round trips
/// after the last ack a keepalive goes out as a tail probe, and the ack echoing it shows the
/// tail lost: it is resent long before the timeout. Without keepalives, the timeout finds it.
#[test]
fn a_lost_tail_is_found_by_a_tail_probe_before_the_timeout() {
    let run = |keepalives: bool| {
        let keepalive_interval = if keepalives { Some(Duration::from_secs(5)) } else { None };
        let client = TransportConfig { min_rto: Duration::from_secs(1), keepalive_interval, ..fast_config() };
        let mut p = Pair::new(client, fast_config());
        p.run_until(at(20));
        // The first transmissions of packets 10-19, the last half of the flight, are lost.
        let mut dropped = std::collections::HashSet::new();
        p.drop = Box::new(move |to_server, ty, seq, _| to_server && ty == PacketType::Data && seq.is_some_and(|s| s >= 10 && dropped.insert(s)));
        p.client.write(&[7u8; 2_000]).unwrap(); // 20 packets of 100 bytes
        p.run_until(at(200));
        let delivered = Pair::read_all(p.server()).0.len();
        let stats = p.client.stats();
        (delivered, stats.tail_probes, stats.retransmission_timeouts, stats.retransmissions)
    };
    let (delivered, tail_probes, timeouts, retransmissions) = run(true);
    assert_eq!((delivered, timeouts, retransmissions), (2_000, 0, 10), "tail probes {tail_probes}");
    assert_eq!(tail_probes, 1);
    let (delivered, tail_probes, timeouts, _) = run(false);
    assert_eq!((delivered, tail_probes, timeouts), (1_000, 0, 0), "only the timeout finds the tail, at 1 s");
}

/// A data sender's Ack frequency request may ask the receiver to hold an ack longer than
/// its own 5 ms (to gather the packets it asks an ack per), at most 250 ms; holes are
/// still acked at once.
#[test]
fn an_ack_frequency_request_sets_how_long_the_receiver_holds_an_ack() {
    // (max_delay asked in µs, when the ack for a lone packet reaches the client, after it was sent)
    for (max_delay_us, held) in [(0u32, Duration::from_millis(5)), (40_000, Duration::from_millis(40)), (2_000_000, Duration::from_millis(250))] {
        // The client here did not ask (the request is injected), so its retransmission
        // timer does not allow for the hold: a long one keeps it from resending first, and
        // without keepalives no tail probe asks for the ack sooner.
        let client = TransportConfig { min_rto: Duration::from_secs(1), keepalive_interval: None, ..fast_config() };
        let mut p = Pair::new(client, fast_config());
        p.client.write(b"x").unwrap();
        p.run_until(at(100));
        assert_eq!(p.server().state(), State::Established);
        // A request as the client would send it: an ack per 16 packets, held up to max_delay.
        let request = Packet { dst_cid: 0x5e, body: Body::AckFrequency(fencepost_proto::wire::AckFrequency { sequence: 0, packets: 16, max_delay_us }) };
        let mut datagram = vec![0u8; 64];
        let len = request.emit(&mut datagram).unwrap();
        datagram.truncate(len);
        p.wire.push_back((p.now + DELAY, true, datagram));
        p.run_until(at(120));
        let acks_before = p.client.stats().acks_received;
        p.client.write(b"y").unwrap();
        let sent = p.now;
        // The ack leaves `held` after the packet arrives and takes DELAY back.
        let due = sent + DELAY + held + DELAY;
        p.run_until(due - Duration::from_millis(1));
        assert_eq!(p.client.stats().acks_received, acks_before, "max_delay {max_delay_us} µs: acked before {held:?}");
        p.run_until(due + Duration::from_millis(1));
        assert_eq!(p.client.stats().acks_received, acks_before + 1, "max_delay {max_delay_us} µs: not acked by {held:?}");
    }
}

/// A timeout that turns out spurious: the packets it declared lost are acknowledged before
/// the probes resending them leave. With the queue of packets to resend holding only those,
/// the probe must carry new data: a poll that answered nothing left a connection with data
/// to send and no timer but its keepalive's (seen at 1,000 loopback connections, where a
/// driver's turn could end between the timeout and the poll: 5 s stalls in two runs of six).
#[test]
fn after_a_spurious_timeout_the_next_poll_sends_new_data() {
    let mut p = Pair::new(fast_config(), fast_config());
    p.run_until(at(20));
    p.client.write(&[3u8; 500]).unwrap();
    p.flush();
    // The data reaches the server; its acks are held back on the wire.
    let mut held = Vec::new();
    let mut until = p.now;
    while held.is_empty() {
        until += Duration::from_millis(1);
        p.run_until(until);
        held.extend(p.wire.iter().filter(|w| !w.1).map(|w| w.2.clone()));
        p.wire.retain(|w| w.1);
    }
    assert_eq!(p.client.stats().acks_received, 0, "{held:?}");
    // The client's retransmission timer fires; nothing is sent yet.
    let timeouts = p.client.stats().retransmission_timeouts;
    while p.client.stats().retransmission_timeouts == timeouts {
        let next = p.client.poll_timeout().expect("a timer runs while data is in flight");
        p.now = p.now.max(next);
        p.client.handle_timeout(p.now);
    }
    assert!(p.client.stats().packets_lost > 0);
    // Then the acks arrive: everything the timeout declared lost was received.
    for ack in &held {
        p.client.handle_datagram(p.now, ack);
    }
    p.client.write(&[4u8; 300]).unwrap();
    let mut buf = vec![0u8; 2048];
    let sent = p.client.poll_transmit(p.now, &mut buf);
    assert!(matches!(sent, Some(t) if t.packet_type == PacketType::Data), "the first poll sent {sent:?}");
}

/// A connected pair with full-size payloads, for bursts of megabytes.
fn bulk_pair() -> Pair {
    let config = || TransportConfig { max_payload: 1200, ..fast_config() };
    let mut p = Pair::new(config(), config());
    p.run_until(at(20));
    p
}

/// Moves `bytes` copied writes from client to server, the server reading as they come
/// (each byte checked), until all is acknowledged; returns the time (ms) it was done.
fn bulk_then_acked(p: &mut Pair, bytes: usize, mut t: u64) -> u64 {
    let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let (mut written, mut received) = (0, Vec::new());
    while written < bytes || p.client.has_unsent_data() || p.client.bytes_in_flight() > 0 {
        if written < bytes {
            written += p.client.write(&data[written..]).unwrap();
        }
        t += 1;
        assert!(t < 60_000, "the transfer did not finish");
        p.run_until(at(t));
        received.extend(Pair::read_all(p.server()).0);
    }
    received.extend(Pair::read_all(p.server()).0);
    assert!(received == data, "the server read {} bytes, not the {bytes} written", received.len());
    t
}

#[test]
fn a_connection_quiet_for_a_second_gives_back_what_its_burst_grew() {
    let mut p = bulk_pair();
    let done = bulk_then_acked(&mut p, 2_000_000, 20);
    let (client_grown, server_grown) = (p.client.retained_bytes(), p.server().retained_bytes());
    assert!(client_grown >= 256 * 1024, "the sender keeps spare blocks after a burst ({client_grown} bytes)");
    assert!(server_grown >= 64 * 1024, "the receiver keeps spare buffers after a burst ({server_grown} bytes)");
    // Kept through a pause shorter than a second (a bulk writer that comes back soon reuses them) ...
    p.run_until(at(done + 800));
    assert_eq!(p.client.retained_bytes(), client_grown);
    // ... and given back after one.
    p.run_until(at(done + 1_300));
    assert!(p.client.retained_bytes() < 4096, "{} bytes kept by the quiet sender", p.client.retained_bytes());
    assert!(p.client.take_given_back() + 4096 >= client_grown, "what was given back is counted for the driver");
    assert_eq!(p.client.take_given_back(), 0, "and counted once");
    assert!(p.server().retained_bytes() < 4096, "{} bytes kept by the quiet receiver", p.server().retained_bytes());
    // Nothing lost by it: the next burst goes through and grows them again.
    let again = bulk_then_acked(&mut p, 500_000, done + 1_300);
    assert!(p.client.retained_bytes() >= 64 * 1024);
    // Given back once, and no timer set again without a packet since: an idle
    // connection is not woken every second.
    p.run_until(at(again + 1_300));
    assert!(p.client.retained_bytes() < 4096);
    assert!(p.client.config().idle_timeout >= Duration::from_secs(3));
    let next = p.client.poll_timeout();
    assert!(next.is_none_or(|t| t >= at(again + 3_000)), "the quiet connection's next timer is at {next:?}");
}

#[test]
fn packets_every_half_second_keep_the_buffers() {
    let mut p = bulk_pair();
    let done = bulk_then_acked(&mut p, 1_000_000, 20);
    let grown = p.client.retained_bytes();
    assert!(grown >= 64 * 1024);
    for i in 1..=4 {
        p.run_until(at(done + 500 * i));
        p.client.write(b"still here").unwrap();
    }
    p.run_until(at(done + 2_100));
    Pair::read_all(p.server());
    assert!(p.client.retained_bytes() >= 64 * 1024, "a connection in use lost its buffers ({} bytes left)", p.client.retained_bytes());
    p.run_until(at(done + 3_200));
    assert!(p.client.retained_bytes() < 4096);
}

#[test]
fn a_quiet_receiver_with_bytes_unread_keeps_its_buffers_and_is_not_woken_again() {
    let mut p = bulk_pair();
    let (total, unread) = (1_000_000, 100);
    let data = vec![5u8; total];
    let (mut written, mut read, mut t) = (0, 0, 20);
    let mut buf = vec![0u8; 65536];
    while read < total - unread || p.client.bytes_in_flight() > 0 || p.client.has_unsent_data() {
        if written < total {
            written += p.client.write(&data[written..]).unwrap();
        }
        t += 1;
        assert!(t < 60_000, "the transfer did not finish");
        p.run_until(at(t));
        while read < total - unread {
            let want = buf.len().min(total - unread - read);
            match p.server().read(&mut buf[..want]) {
                Ok(n) if n > 0 => read += n,
                _ => break,
            }
        }
    }
    let grown = p.server().retained_bytes();
    assert!(grown >= 64 * 1024, "the receiver keeps spare buffers after a burst ({grown} bytes)");
    // The timer fires once: the unread bytes keep the receive side as it is, and the
    // timer is not set again (set again at once, it would wake the driver without end).
    p.run_until(at(t + 1_300));
    assert_eq!(p.server().retained_bytes(), grown);
    let next = p.server().poll_timeout();
    assert!(next.is_none_or(|n| n >= at(t + 3_000)), "the quiet receiver's next timer is at {next:?}");
    assert_eq!(Pair::read_all(p.server()).0.len(), unread);
}

/// The timer is set while packets come without asking what would come back, so it fires
/// for a receiver whose buffers all hold unread bytes (nothing spare). It must then give
/// nothing back, not be set again at once, and still give back the buffers a later read
/// empties. (A read sets no timer: the next packet either way does, a keepalive at the
/// latest.)
#[test]
fn a_receiver_that_reads_after_going_quiet_gives_back_what_the_read_emptied() {
    let mut p = bulk_pair();
    let total = 300_000;
    let data = vec![9u8; total];
    let (mut written, mut t) = (0, 20);
    while written < total || p.client.bytes_in_flight() > 0 || p.client.has_unsent_data() {
        if written < total {
            written += p.client.write(&data[written..]).unwrap();
        }
        t += 1;
        assert!(t < 60_000, "the transfer did not finish");
        p.run_until(at(t));
    }
    let held = p.server().retained_bytes();
    assert!(held < 64 * 1024, "nothing read yet, so little is spare ({held} bytes)");
    // The timer fires a second after the last packet and finds too little to give back ...
    p.run_until(at(t + 1_300));
    assert_eq!(p.server().take_given_back(), 0);
    let next = p.server().poll_timeout();
    assert!(next.is_none_or(|n| n >= at(t + 3_000)), "the quiet receiver's next timer is at {next:?}");
    // ... and the buffers the read empties go a second after the next packet.
    let (read, _) = Pair::read_all(p.server());
    assert_eq!(read.len(), total);
    let keepalive = p.server().config().keepalive_interval.expect("the profile sends keepalives").total_micros() / 1_000;
    p.run_until(at(t + 1_300 + keepalive + 1_300));
    assert!(p.server().retained_bytes() < 4096, "{} bytes kept after the read", p.server().retained_bytes());
    assert!(p.server().take_given_back() >= 64 * 1024, "the emptied buffers are counted as given back");
}

/// What a FEC sender keeps to make repairs from, and what its receiver keeps to rebuild
/// with, go with the buffers once the connection is quiet. The repairs after the pause
/// cover only what is sent from then on, and still rebuild a lost packet.
#[test]
fn a_quiet_connection_forgets_its_repair_history_and_repairs_still_rebuild() {
    let config = |redundancy| TransportConfig { max_payload: 1200, redundancy, ..fast_config() };
    let mut p = Pair::new(config(RedundancyConfig::Fec(FecCode::Window { window: 32, every: 4 })), config(RedundancyConfig::None));
    // The first data packet at or past `drop_from` on its way to the server is lost, once.
    let drop_from = std::rc::Rc::new(std::cell::Cell::new(u32::MAX));
    let (from, mut dropped) = (drop_from.clone(), false);
    p.drop = Box::new(move |to_server, ty, seq, _| {
        let lose = !dropped && to_server && ty == PacketType::Data && seq.is_some_and(|s| s >= from.get());
        dropped |= lose;
        lose
    });
    p.run_until(at(20));
    let done = bulk_then_acked(&mut p, 1_000_000, 20);
    assert!(p.client.retained_bytes() >= 32 * 1200, "the sender keeps its last 32 packets for repairs ({} bytes kept)", p.client.retained_bytes());
    assert!(p.server().repair_state_bytes() >= 32 * 1200, "the receiver keeps packets to rebuild from ({} bytes)", p.server().repair_state_bytes());
    p.run_until(at(done + 1_300));
    assert!(p.client.retained_bytes() < 4096, "{} bytes kept by the quiet sender", p.client.retained_bytes());
    assert_eq!(p.server().repair_state_bytes(), 0, "the quiet receiver keeps nothing to rebuild from");
    let (rebuilt, resent) = (p.server().stats().packets_rebuilt, p.client.stats().retransmissions);
    drop_from.set(p.client.stats().data_packets_sent as u32 + 5);
    bulk_then_acked(&mut p, 200_000, done + 1_300);
    let server = p.server().stats().clone();
    assert_eq!(server.packets_rebuilt, rebuilt + 1, "the packet lost after the pause is rebuilt from a repair: {server:?}");
    assert_eq!(p.client.stats().retransmissions, resent, "nothing resent: the repair rebuilt it");
}

/// Holds back every datagram the server sends from now until the client's retransmission
/// timer has fired and `after` more has passed, as a peer descheduled that long would;
/// returns them (in order). Nothing is lost.
fn hold_the_servers_packets(p: &mut Pair, after: Duration) -> Vec<Vec<u8>> {
    let timeouts = p.client.stats().retransmission_timeouts;
    let mut held = Vec::new();
    let mut until = p.now;
    let mut fired_at = None;
    while fired_at.is_none_or(|fired| until < fired + after) {
        until += Duration::from_millis(1);
        p.run_until(until);
        held.extend(p.wire.iter().filter(|w| !w.1).map(|w| w.2.clone()));
        p.wire.retain(|w| w.1);
        if fired_at.is_none() && p.client.stats().retransmission_timeouts > timeouts {
            fired_at = Some(until);
        }
        assert!(until < at(60_000), "the client's timer never fired");
    }
    held
}

/// A bulk transfer of `bytes` whose acks are held back once, past the client's timeout; with
/// `lose_first`, the first transmission of data packet 5 was lost shortly before (nothing else is).
fn transfer_with_late_acks(bytes: usize, lose_first: bool) -> fencepost_proto::ConnectionStats {
    let mut p = Pair::new(fast_config(), fast_config());
    let mut seen = false;
    p.drop = Box::new(move |to_server, ty, seq, _| {
        let drop = lose_first && to_server && ty == PacketType::Data && seq == Some(5) && !seen;
        seen |= drop;
        drop
    });
    p.run_until(at(20));
    let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let mut written = p.client.write(&data).unwrap();
    // A few round trips of acks first (and the loss found, if any).
    p.run_until(at(100));
    let received = Pair::read_all(p.server()).0;
    written += p.client.write(&data[written..]).unwrap();
    let held = hold_the_servers_packets(&mut p, Duration::from_millis(2));
    // The late acks arrive, then everything else as it comes.
    for datagram in held.into_iter().rev() {
        p.wire.push_front((p.now, false, datagram));
    }
    deliver_the_rest(&mut p, &data, written, received);
    p.client.stats().clone()
}

/// Writes what is left of `data` past `written` as the client's buffer takes it and runs the
/// pair until all is acknowledged; checks that the server read all of `data` (`received`
/// being what it read so far).
fn deliver_the_rest(p: &mut Pair, data: &[u8], mut written: usize, mut received: Vec<u8>) {
    let mut t = p.now;
    while written < data.len() || p.client.has_unsent_data() || p.client.bytes_in_flight() > 0 {
        written += p.client.write(&data[written..]).unwrap();
        t += Duration::from_millis(1);
        assert!(t < at(60_000), "the transfer did not finish");
        p.run_until(t);
        received.extend(Pair::read_all(p.server()).0);
    }
    received.extend(Pair::read_all(p.server()).0);
    assert!(received == data, "the server read {} bytes of the {} written", received.len(), data.len());
}

/// A peer that goes quiet past the timeout on a path that has lost nothing (a process
/// descheduled, a queue grown faster than the RTT estimate): the timeout's probes carry new
/// data, nothing is declared lost or resent, and the late acks take the transfer on.
#[test]
fn a_first_timeout_on_a_path_that_lost_nothing_probes_with_new_data() {
    let s = transfer_with_late_acks(400_000, false);
    assert_eq!(s.timeouts_probed_with_new_data, 1, "{s:?}");
    assert_eq!(s.retransmission_timeouts, 1, "{s:?}");
    assert_eq!((s.retransmissions, s.packets_lost, s.spurious_retransmissions), (0, 0, 0), "{s:?}");
}

/// The same late acks on a path that lost a packet a moment before: the timeout resends the
/// oldest packets as its probes (the loss then says more about the path than a stall).
#[test]
fn a_timeout_soon_after_a_loss_resends_the_oldest_packets() {
    let s = transfer_with_late_acks(400_000, true);
    assert_eq!(s.timeouts_probed_with_new_data, 0, "{s:?}");
    assert!(s.retransmission_timeouts >= 1, "{s:?}");
    assert!(s.retransmissions >= 3, "the lost packet and the timeout's two probes: {s:?}");
}

/// A path that goes dark with new data waiting: the first timeout's probes carry new data;
/// when they draw nothing, the next timeout resends the oldest packets, and once the path
/// is back the transfer completes.
#[test]
fn when_the_new_data_probes_draw_nothing_the_next_timeout_resends() {
    let mut p = Pair::new(fast_config(), fast_config());
    p.run_until(at(20));
    let data: Vec<u8> = (0..400_000).map(|i| (i % 251) as u8).collect();
    let written = p.client.write(&data).unwrap();
    p.run_until(at(60));
    let dark = std::rc::Rc::new(std::cell::Cell::new(true));
    let still_dark = dark.clone();
    p.drop = Box::new(move |_, _, _, _| still_dark.get());
    let sent_before = p.client.stats().data_packets_sent;
    run_to_the_clients_next_timeout(&mut p);
    p.run_until(p.now + Duration::from_millis(1));
    let s = p.client.stats().clone();
    assert_eq!((s.timeouts_probed_with_new_data, s.retransmissions), (1, 0), "{s:?}");
    assert_eq!(s.data_packets_sent, sent_before + 2, "RFC 9002's two probes, both new: {s:?}");
    run_to_the_clients_next_timeout(&mut p);
    p.run_until(p.now + Duration::from_millis(1));
    let s = p.client.stats().clone();
    assert_eq!(s.timeouts_probed_with_new_data, 1, "{s:?}");
    assert!(s.retransmissions >= 2 && s.packets_lost >= 2, "the second timeout resends: {s:?}");
    dark.set(false);
    let received = Pair::read_all(p.server()).0;
    deliver_the_rest(&mut p, &data, written, received);
}

/// A short first write acknowledged on its own (`fencepost send`'s 49-byte session header,
/// when the bulk behind it comes a moment later) gives the controller its first rate
/// sample: a few kB/s, limited by the application. The packet that takes the last of what
/// the application wrote is marked so, written before the handshake ended or after, and
/// Startup's pacing starts from the initial window over the RTT. Paced at the sample's
/// rate (12 kB/s here), each of the next few packets waited 100 ms for its turn (8 kB ones
/// 300 ms on loopback), and 300 kB took three times as long.
#[test]
fn a_short_first_write_acked_alone_does_not_slow_the_transfer_after_it() {
    // `header_at`: when the header is written, in ms (the handshake ends at 11).
    let bulk_ms = |header: usize, header_at: u64| {
        let config = || TransportConfig { max_payload: 1200, ..TransportConfig::default_profile().insecure() };
        let mut p = Pair::new(config(), config());
        p.run_until(at(header_at));
        if header > 0 {
            p.client.write(&vec![1u8; header]).unwrap();
        }
        // The header's ack is back (a 10 ms round trip) before the bulk is written.
        p.run_until(at(40));
        let total = 300_000usize;
        let (mut written, mut got) = (0, Pair::read_all(p.server()).0.len());
        let mut t = 40u64;
        while got < total + header && t < 10_000 {
            if written < total {
                written += p.client.write(&vec![2u8; total - written]).unwrap();
            }
            t += 1;
            p.run_until(at(t));
            got += Pair::read_all(p.server()).0.len();
        }
        assert_eq!(got, total + header);
        t - 40
    };
    let alone = bulk_ms(0, 20);
    for header_at in [1, 20] {
        let after_header = bulk_ms(49, header_at);
        assert!(after_header <= alone + 5, "300 kB took {after_header} ms after a header written at {header_at} ms, {alone} ms without one");
    }
}
