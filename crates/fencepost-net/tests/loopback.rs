//! fencepost over real UDP sockets on loopback.

use fencepost_net::tools::{self, Amount};
use fencepost_net::{DriverPlacement, Endpoint, EndpointConfig, NetError};
use fencepost_proto::{ConnectionError, Duration as ProtoDuration, TransportConfig};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

async fn server(echo: bool, transport: TransportConfig) -> (Endpoint, Arc<Mutex<Vec<tools::ServedConnection>>>) {
    let endpoint = Endpoint::bind(localhost(), EndpointConfig::server(transport)).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let sink = served.clone();
    tokio::spawn(tools::serve(endpoint.clone(), echo, true, move |s| sink.lock().unwrap().push(s)));
    (endpoint, served)
}

/// The server's account of its first connection, once it gives one (within 15 s).
async fn first_report(served: &Mutex<Vec<tools::ServedConnection>>) -> tools::ServedConnection {
    let waited = Instant::now();
    loop {
        if let Some(s) = served.lock().unwrap().first().cloned() {
            return s;
        }
        assert!(waited.elapsed() < Duration::from_secs(15), "the server never reported the connection");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn client() -> Endpoint {
    Endpoint::bind(localhost(), EndpointConfig::client(TransportConfig::default())).await.unwrap()
}

/// One round trip through an echo: 64 bytes of `byte` out, the same 64 back within 10 s.
async fn exchange(conn: &mut fencepost_net::Connection, byte: u8) {
    conn.write_all(&[byte; 64]).await.unwrap();
    let mut reply = [0u8; 64];
    tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut reply)).await.expect("reply within 10 s").unwrap();
    assert_eq!(reply, [byte; 64]);
}

/// An echo server, a client and a connection between them that has made 50 exchanges, so
/// each side's reader has begun receiving for itself. (The endpoints are returned to keep
/// them alive.)
async fn warmed_exchange() -> (Endpoint, Endpoint, fencepost_net::Connection) {
    let (echo, _) = server(true, TransportConfig::default()).await;
    let requester = client().await;
    let mut conn = requester.connect(echo.local_addr()).await.unwrap();
    for i in 0..50 {
        exchange(&mut conn, i).await;
    }
    (echo, requester, conn)
}

/// A request/reply exchange with the driver on its own thread (the default): a reader that
/// waits receives for itself, on its own thread, so a reply reaches it in one wake-up. The
/// exchange stays byte-exact and in order (the reader's receive and the driver's never
/// interleave, so nothing reaches the core out of order and nothing is resent), and a bulk
/// transfer one way leaves receiving to the driver.
/// A port nobody holds: the kernel answers the Initial with ICMP port unreachable, and the
/// connect fails with the host's word instead of waiting out its timeout; a live server's
/// connections on the same endpoint are not touched by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_port_nobody_holds_fails_at_the_hosts_word() {
    let (live, _served) = server(true, TransportConfig::default()).await;
    for driver in [DriverPlacement::Thread, DriverPlacement::Task] {
        let elsewhere = std::net::UdpSocket::bind(localhost()).unwrap();
        let closed = std::net::UdpSocket::bind(localhost()).unwrap();
        closed.connect(elsewhere.local_addr().unwrap()).unwrap();
        let addr = closed.local_addr().unwrap();
        let endpoint = Endpoint::bind(localhost(), EndpointConfig { driver, ..EndpointConfig::client(TransportConfig::default()) }).await.unwrap();
        // An established connection to a live server on the same endpoint goes on.
        let mut up = endpoint.connect(live.local_addr()).await.unwrap();
        exchange(&mut up, 1).await;
        let started = Instant::now();
        match endpoint.connect(addr).await {
            Err(e @ NetError::ConnectionLost { error: ConnectionError::Unreachable(_), .. }) => {
                assert!(e.to_string().contains(&format!("connecting to {addr} failed: nothing listens on that port")), "{e}");
            }
            Err(other) => panic!("expected the port's refusal from {addr}, got {other}"),
            Ok(_) => panic!("connected to {addr}, where nothing listens"),
        }
        let took = started.elapsed();
        // Within the handshake's first tries, not the ten-second connect timeout.
        assert!(took < Duration::from_secs(3), "{driver:?}: {took:?}");
        assert!(endpoint.stats().unreachable_reports >= 1, "{:?}", endpoint.stats());
        exchange(&mut up, 2).await;
        eprintln!("{driver:?}: refused after {took:?}");
        // An endpoint with nothing else going on hears of it as soon (the socket's error
        // readiness wakes the driver), and then sleeps: no wake-up loop on the error.
        let lone = Endpoint::bind(localhost(), EndpointConfig { driver, ..EndpointConfig::client(TransportConfig::default()) }).await.unwrap();
        let started = Instant::now();
        let Err(refused) = lone.connect(addr).await else { panic!("connected to {addr}, where nothing listens") };
        let took = started.elapsed();
        assert!(refused.to_string().contains("nothing listens on that port"), "{refused}");
        assert!(took < Duration::from_secs(3), "{driver:?}: {took:?}");
        let woken = lone.driver_wakeups();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(lone.driver_wakeups() - woken < 20, "{driver:?}: {} wake-ups in 300 ms after the refusal", lone.driver_wakeups() - woken);
        eprintln!("{driver:?}: a lone connect refused after {took:?}");
    }
}

/// A server whose process is gone (its endpoint shut down and its socket closed): the
/// client writing to it hears ICMP port unreachable for each packet and nothing else, and
/// its connection ends with the reason within seconds, not at the 30 s idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_server_vanished_ends_when_its_host_says_the_port_closed() {
    let server = Endpoint::bind(localhost(), EndpointConfig::server(TransportConfig::default())).await.unwrap();
    let addr = server.local_addr();
    let client = client().await;
    let mut conn = client.connect(addr).await.unwrap();
    let accepted = server.accept().await.unwrap();
    conn.write_all(&[1; 64]).await.unwrap();
    server.shutdown();
    drop((accepted, server));
    // The socket closes once the driver has let it go.
    let freed = Instant::now();
    while std::net::UdpSocket::bind(addr).is_err() {
        assert!(freed.elapsed() < Duration::from_secs(5), "the server's socket stayed open");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let chunk = vec![2u8; 64 * 1024];
    let error = loop {
        if let Err(e) = conn.write_all(&chunk).await {
            break e;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "still writing to a closed port after 20 s");
    };
    let took = started.elapsed();
    assert!(error.to_string().contains("the peer's port closed"), "{error}");
    assert!(took < Duration::from_secs(5), "{took:?}: {error}");
    eprintln!("ended after {took:?}: {error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_reader_receives_for_itself_in_an_exchange_and_keeps_the_order() {
    let (echo, _) = server(true, TransportConfig::default()).await;
    let requester = client().await;
    let mut conn = requester.connect(echo.local_addr()).await.unwrap();
    for i in 0..300u32 {
        let message: Vec<u8> = (0..64u32).map(|j| (i * 7 + j) as u8).collect();
        conn.write_all(&message).await.unwrap();
        let mut reply = vec![0u8; message.len()];
        tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut reply)).await.expect("reply within 10 s").unwrap();
        assert_eq!(reply, message, "exchange {i}");
    }
    let stats = conn.stats();
    assert_eq!(stats.retransmissions, 0, "{stats:?}");
    assert!(requester.reader_receives() > 0 && echo.reader_receives() > 0, "client {}, server {}", requester.reader_receives(), echo.reader_receives());
    conn.close().await.unwrap();

    let (sink, _) = server(false, TransportConfig::default()).await;
    let sender = client().await;
    let summary = tools::send(&sender, sink.local_addr(), Amount::Bytes(5_000_000), Duration::from_secs(60), true, |_| {}).await.unwrap();
    assert!(summary.hashes_match && summary.retransmissions == 0, "{summary:?}");
    assert_eq!(sink.reader_receives(), 0, "a one-way transfer's reader left receiving to the driver");
}

/// While a reader receives for itself in an exchange, the driver's thread leaves the socket
/// to it: it looks about once per `READER_WATCH` (1 ms) instead of waking for the requests
/// and replies (each arrival, and each send once the kernel freed its buffer, woke it:
/// with the socket registered throughout, the two drivers woke 2,156 times in 2,000 round
/// trips of 58 µs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drivers_sleep_through_an_exchange_their_readers_receive() {
    let (echo, requester, mut conn) = warmed_exchange().await;
    let before = requester.driver_wakeups() + echo.driver_wakeups();
    let started = Instant::now();
    let round_trips = 2_000;
    for i in 0..round_trips {
        exchange(&mut conn, (i % 251) as u8).await;
    }
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let wakeups = requester.driver_wakeups() + echo.driver_wakeups() - before;
    // Two drivers looking once a millisecond, twice over for timers and slack. (With a
    // wake-up per round trip, as before, only a host whose round trip took a quarter of a
    // millisecond or more would pass.)
    let bound = 4 * (elapsed_ms + 1) + 100;
    assert!(wakeups <= bound, "{wakeups} driver wake-ups in {round_trips} round trips over {elapsed_ms} ms (at most {bound})");
    let stats = conn.stats();
    assert_eq!(stats.retransmissions, 0, "{stats:?}");
    conn.close().await.unwrap();
}

/// A reader that stops reading while it watches the socket (its read dropped, here by a
/// timeout) leaves the driver deaf for no more than `READER_WATCH`: the driver takes the
/// socket back and the connection carries on, a transfer each way, without a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_watching_hands_the_socket_back_to_the_driver() {
    let (_echo, requester, mut conn) = warmed_exchange().await;
    assert!(requester.reader_receives() > 0, "the exchange had the reader receive");
    // A read that finds nothing, given up while the reader waits on the socket.
    let mut spare = [0u8; 64];
    assert!(tokio::time::timeout(Duration::from_millis(5), conn.read(&mut spare)).await.is_err(), "nothing was due to arrive");
    // Two megabytes written while nothing reads: their acks and their echo reach the core
    // through the driver alone; then all of the echo is read back, byte for byte.
    let data: Vec<u8> = (0..2_000_000u32).map(|i| (i % 253) as u8).collect();
    let written = tokio::time::timeout(Duration::from_secs(20), conn.write_all(&data));
    written.await.expect("the write completes within 20 s").unwrap();
    let mut echoed = vec![0u8; data.len()];
    tokio::time::timeout(Duration::from_secs(20), conn.read_exact(&mut echoed)).await.expect("the echo arrives within 20 s").unwrap();
    assert!(echoed == data, "the echo differs from what was sent");
    let stats = conn.stats();
    assert_eq!(stats.retransmission_timeouts, 0, "{stats:?}");
    conn.close().await.unwrap();
}

/// A second peer that connects while the server's only connection has its reader watching
/// the socket (the driver leaving it the socket) is accepted and served, and the first
/// exchange goes on beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_peer_is_served_while_a_reader_watches_the_socket() {
    let (echo, _first, mut a) = warmed_exchange().await;
    assert!(echo.reader_receives() > 0, "the server's reader receives for itself");
    let second = client().await;
    let mut b = tokio::time::timeout(Duration::from_secs(10), second.connect(echo.local_addr())).await.expect("connected within 10 s").unwrap();
    for i in 0..50 {
        exchange(&mut b, i).await;
        exchange(&mut a, i.wrapping_add(100)).await;
    }
    assert_eq!(a.stats().retransmission_timeouts, 0, "{:?}", a.stats());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A reader on a runtime without I/O cannot watch the socket: it leaves receiving to the
/// driver's thread, as before, and the exchange goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_a_runtime_without_io_leaves_receiving_to_the_driver() {
    let (echo, _) = server(true, TransportConfig::default()).await;
    let addr = echo.local_addr();
    let exchanged = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        runtime.block_on(async move {
            let requester = client().await;
            let mut conn = requester.connect(addr).await.unwrap();
            for i in 0..50u8 {
                conn.write_all(&[i; 64]).await.unwrap();
                let mut reply = [0u8; 64];
                tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut reply)).await.expect("reply within 10 s").unwrap();
                assert_eq!(reply, [i; 64]);
            }
            requester.reader_receives()
        })
    });
    let reader_receives = tokio::task::spawn_blocking(move || exchanged.join().unwrap()).await.unwrap();
    assert_eq!(reader_receives, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_transfer_arrives_with_matching_hashes() {
    let (server, served) = server(false, TransportConfig::default()).await;
    let client = client().await;
    let mut intervals = 0;
    let summary = tools::send(&client, server.local_addr(), Amount::Bytes(20_000_000), Duration::from_millis(100), true, |_| intervals += 1)
        .await
        .unwrap();
    assert!(summary.hashes_match, "{summary:?}");
    assert_eq!(summary.receiver_bytes, 20_000_000);
    // The peer is this host: packets fill 8 kB datagrams, not Ethernet's 1,472 bytes
    // (about 2,450 data packets for 20 MB where 14,000 would carry the Ethernet payload).
    let least = 20_000_000 / fencepost_proto::config::SAME_HOST_DATAGRAM as u64;
    assert!((least..least + least / 10).contains(&summary.data_packets_sent), "{} data packets", summary.data_packets_sent);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let served = served.lock().unwrap();
    assert_eq!(served.len(), 1);
    assert_eq!(served[0].sha256, summary.sha256);
    assert!(served[0].error.is_none(), "{:?}", served[0]);
}

/// Without --no-verify's hash the sink counts the bytes where the transport holds them
/// (`recv_with`) instead of copying them out: the count still adds up, and no interval report
/// exceeds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_does_not_hash_counts_every_byte_without_copying_it() {
    let endpoint = Endpoint::bind(localhost(), EndpointConfig::server(TransportConfig::default())).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let sink = served.clone();
    tokio::spawn(tools::serve(endpoint.clone(), false, false, move |s| sink.lock().unwrap().push(s)));
    let client = client().await;
    let mut reported = 0u64;
    let summary = tools::send(&client, endpoint.local_addr(), Amount::Bytes(30_000_001), Duration::from_millis(50), false, |i| reported = reported.max(i.bytes))
        .await
        .unwrap();
    assert!(summary.complete && !summary.verified, "{summary:?}");
    assert_eq!(summary.receiver_bytes, 30_000_001);
    // On a fast machine the transfer can end before the first 50 ms report: none is required.
    assert!(reported <= 30_000_001, "interval reports: {reported}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let served = served.lock().unwrap();
    assert_eq!(served[0].bytes, 30_000_001);
    assert!(served[0].sha256.is_empty() && served[0].error.is_none(), "{:?}", served[0]);
}

/// The driver writes datagrams straight into its batch buffers: the room it gives must fit
/// the handshake when data packets are tiny, and a jumbo payload when they are large.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_and_jumbo_payloads_connect_and_arrive() {
    for payload in [16u16, 400, 8_000] {
        let transport = TransportConfig { max_payload: payload, ..TransportConfig::default() };
        let (server, served) = server(false, transport.clone()).await;
        let client = Endpoint::bind(localhost(), EndpointConfig::client(transport)).await.unwrap();
        let summary = tools::send(&client, server.local_addr(), Amount::Bytes(300_000), Duration::from_millis(100), true, |_| {})
            .await
            .unwrap_or_else(|e| panic!("{payload}-byte payloads: {e}"));
        assert!(summary.hashes_match, "{payload}-byte payloads: {summary:?}");
        assert_eq!(summary.receiver_bytes, 300_000, "{payload}-byte payloads");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(served.lock().unwrap().iter().all(|s| s.error.is_none()), "{payload}-byte payloads");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_echo_connections_complete_byte_exact() {
    let (server, served) = server(true, TransportConfig::default()).await;
    let client = client().await;
    let target = server.local_addr();
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = client.connect(target).await?;
            let message: Vec<u8> = (0..3000 + i * 37).map(|b| (b * 31 + i) as u8).collect();
            let (mut r, mut w) = tokio::io::split(conn);
            let expected = message.clone();
            let writer = tokio::spawn(async move {
                w.write_all(&message).await.unwrap();
                w.shutdown().await.unwrap();
                w
            });
            let mut echoed = Vec::new();
            r.read_to_end(&mut echoed).await.map_err(NetError::Io)?;
            let w = writer.await.unwrap();
            conn = r.unsplit(w);
            conn.closed().await?;
            Ok::<bool, NetError>(echoed == expected)
        }));
    }
    let mut exact = 0;
    for t in tasks {
        if t.await.unwrap().unwrap() {
            exact += 1;
        }
    }
    assert_eq!(exact, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let served = served.lock().unwrap();
    assert_eq!(served.len(), 200);
    assert!(served.iter().all(|s| s.error.is_none()), "{:?}", served.iter().find(|s| s.error.is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_server_ends_the_transfer_within_the_idle_timeout() {
    let idle = Duration::from_secs(2);
    let transport = TransportConfig {
        idle_timeout: ProtoDuration::from_micros(idle.as_micros() as u64),
        keepalive_interval: Some(ProtoDuration::from_millis(500)),
        ..TransportConfig::default()
    };
    let (server, _) = server(false, transport.clone()).await;
    let client = Endpoint::bind(localhost(), EndpointConfig::client(transport)).await.unwrap();
    let target = server.local_addr();
    let killer = server.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        killer.shutdown();
    });
    let started = Instant::now();
    let result = tools::send(&client, target, Amount::Time(Duration::from_secs(30)), Duration::from_secs(1), true, |_| {}).await;
    let took = started.elapsed();
    match result {
        Err(NetError::Io(e)) => assert!(e.to_string().contains("timed out"), "{e}"),
        Err(NetError::ConnectionLost { error: ConnectionError::TimedOut { .. }, .. }) => {}
        other => panic!("expected a timeout error, got {other:?}"),
    }
    assert!(took < Duration::from_millis(300) + idle + Duration::from_secs(2), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_is_counted_and_ignored_while_transfers_complete() {
    let (server, served) = server(false, TransportConfig::default()).await;
    let target = server.local_addr();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let mut seed = 12345u64;
            let mut sent = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let kind = seed >> 62;
                let datagram: Vec<u8> = match kind {
                    // Random bytes.
                    0 => (0..(seed >> 40) % 1400).map(|i| (seed >> (i % 56)) as u8).collect(),
                    // Truncated data packet.
                    1 => vec![1, 2, 0, 0],
                    // A valid-looking protected packet for a connection id nobody has.
                    _ => {
                        let mut p = vec![2, 2];
                        p.extend_from_slice(&((seed >> 16) as u32 | 1).to_be_bytes());
                        p.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 9]);
                        p.extend_from_slice(b"forged and sealed with no key");
                        p
                    }
                };
                let _ = sock.send_to(&datagram, target);
                sent += 1;
                if sent % 64 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            sent
        })
    };
    let client = client().await;
    for _ in 0..3 {
        let summary = tools::send(&client, target, Amount::Bytes(3_000_000), Duration::from_secs(1), true, |_| {}).await.unwrap();
        assert!(summary.hashes_match);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flooded = flood.join().unwrap();
    let stats = server.stats();
    assert!(flooded > 100);
    assert!(stats.malformed > 0 && stats.unknown_connection > 0, "{stats:?} after {flooded} garbage datagrams");
    // Each unknown protected packet may get a stateless reset, always smaller than itself.
    assert!(stats.stateless_bytes_sent < stats.bytes_received, "{stats:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(served.lock().unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clear_errors_for_unreachable_peers_and_busy_ports() {
    let mut config = EndpointConfig::client(TransportConfig::default());
    config.connect_timeout = Duration::from_millis(700);
    let client = Endpoint::bind(localhost(), config).await.unwrap();
    // A port nobody serves (held, so no other test takes it, but connected elsewhere, so
    // the kernel answers with ICMP port unreachable), and one held by a socket that never
    // answers.
    let elsewhere = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let nobody = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    nobody.connect(elsewhere.local_addr().unwrap()).unwrap();
    let addr = nobody.local_addr().unwrap();
    let message = client.connect(addr).await.unwrap_err().to_string();
    assert!(message.contains(&format!("connecting to {addr} failed: nothing listens on that port")), "{message}");
    let addr = elsewhere.local_addr().unwrap();
    let message = client.connect(addr).await.unwrap_err().to_string();
    assert!(message.contains(&addr.to_string()) && message.contains("timed out"), "{message}");
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let err = Endpoint::bind(taken.local_addr().unwrap(), EndpointConfig::server(TransportConfig::default())).await.err().unwrap();
    assert!(err.to_string().contains("already in use"), "{err}");
    // The simulator's modelled cipher never reaches a socket.
    let mut modelled = TransportConfig::default();
    if let fencepost_proto::ProtectionConfig::Noise(noise) = &mut modelled.protection {
        noise.model_aead = true;
    }
    let err = Endpoint::bind(localhost(), EndpointConfig::server(modelled.clone())).await.err().unwrap();
    assert!(err.to_string().contains("simulations only"), "{err}");
    let err = fencepost_net::blocking::Endpoint::bind(localhost(), EndpointConfig::client(modelled)).err().unwrap();
    assert!(err.to_string().contains("simulations only"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_bench_counts_packets_and_checks_the_echo() {
    let (server, _) = server(true, TransportConfig::default()).await;
    let client = client().await;
    let result = tools::echo_bench(&client, server.local_addr(), 100, 7).await.unwrap();
    assert!(result.hashes_match, "{result:?}");
    assert!(result.packets_sent >= 100 && result.time_to_completion_s > 0.2, "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_send_is_bounded_even_when_nothing_can_be_delivered() {
    // A server that accepts and never reads: the receive window closes and stays closed.
    let server = Endpoint::bind(localhost(), EndpointConfig::server(TransportConfig::default())).await.unwrap();
    let holder = server.clone();
    let held = Arc::new(Mutex::new(Vec::new()));
    let keep = held.clone();
    tokio::spawn(async move {
        while let Some(conn) = holder.accept().await {
            keep.lock().unwrap().push(conn);
        }
    });
    let client = client().await;
    let started = Instant::now();
    let summary = tools::send(&client, server.local_addr(), Amount::Time(Duration::from_secs(1)), Duration::from_millis(250), true, |_| {})
        .await
        .unwrap();
    let took = started.elapsed();
    // One second of writing, then at most the two-second grace to flush.
    assert!(took < Duration::from_millis(4_500), "took {took:?}");
    assert!(!summary.complete && !summary.hashes_match, "{summary:?}");
    assert!(summary.incomplete_reason.as_deref().unwrap().starts_with("the flush stalled"), "{summary:?}");
    assert!(summary.bytes > 0 && summary.receiver_bytes <= summary.bytes, "{summary:?}");
    assert_eq!(held.lock().unwrap().len(), 1);
}

/// A timed send whose path fades as its writing time ends: for 3.5 s the path carries one
/// packet in 250 ms, so what waits (at least half the unsent floor, 32 kB) takes longer
/// to deliver than the two-second grace, and the flush, which keeps moving, is let
/// finish once the path recovers. A relay carries the client's packets, its socket's
/// receive buffer the queue (drop-tail); the fade begins 0.8 s after the first packet,
/// before the writing ends, so that nothing is flushed at full speed first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_send_whose_flush_keeps_moving_is_let_finish() {
    use tokio::net::UdpSocket;
    const FADE_FROM: Duration = Duration::from_millis(800);
    const FADE: Duration = Duration::from_millis(3_500);
    const FADE_SPACING: Duration = Duration::from_millis(250);
    let (server, served) = server(false, TransportConfig::default()).await;
    let facing_client = Arc::new(UdpSocket::bind(localhost()).await.unwrap());
    let facing_server = Arc::new(UdpSocket::bind(localhost()).await.unwrap());
    facing_server.connect(server.local_addr()).await.unwrap();
    let client_addr = Arc::new(Mutex::new(None::<SocketAddr>));
    let (up_in, up_out, up_client) = (facing_client.clone(), facing_server.clone(), client_addr.clone());
    let upstream = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        let mut first = None;
        loop {
            let (n, from) = up_in.recv_from(&mut buf).await.unwrap();
            *up_client.lock().unwrap() = Some(from);
            let since = first.get_or_insert_with(Instant::now).elapsed();
            if since >= FADE_FROM && since < FADE_FROM + FADE {
                tokio::time::sleep(FADE_SPACING).await;
            }
            let _ = up_out.send(&buf[..n]).await;
        }
    });
    let (down_in, down_out, down_client) = (facing_server.clone(), facing_client.clone(), client_addr.clone());
    let downstream = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        loop {
            let n = down_in.recv(&mut buf).await.unwrap();
            let to = *down_client.lock().unwrap();
            if let Some(to) = to {
                let _ = down_out.send_to(&buf[..n], to).await;
            }
        }
    });
    let client = client().await;
    let started = Instant::now();
    let summary = tools::send(&client, facing_client.local_addr().unwrap(), Amount::Time(Duration::from_secs(1)), Duration::from_millis(250), true, |_| {})
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(summary.complete && summary.hashes_match, "{summary:?}");
    // Past the fade (and so past one second of writing and two of grace), not cut off.
    assert!(took > FADE_FROM + FADE, "took {took:?}: the flush did not last through the fade");
    assert!(took < Duration::from_secs(13), "took {took:?}, past the flush's ceiling");
    let report = first_report(&served).await;
    upstream.abort();
    downstream.abort();
    assert!(report.error.is_none() && report.bytes == summary.bytes, "{report:?}");
}

/// A client whose final ack is lost as it exits (the lossy-path case TCP covers with
/// TIME_WAIT): the server, which read everything and sent its receipt, records the missing
/// ack after its close wait instead of reporting the session as failed. A UDP relay between
/// the two, once armed, stops carrying the client's packets at the first packet the server
/// sends after that: the client's data are acknowledged by then, and the server's next packet
/// answers the client's FIN, so the only packets lost are the client's acks of the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_final_ack_is_recorded_not_reported_as_a_failure() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::net::UdpSocket;
    let (server, served) = server(false, TransportConfig::default()).await;
    let server_addr = server.local_addr();
    // The relay: one socket faces the client, another the server.
    let facing_client = Arc::new(UdpSocket::bind(localhost()).await.unwrap());
    let facing_server = Arc::new(UdpSocket::bind(localhost()).await.unwrap());
    facing_server.connect(server_addr).await.unwrap();
    let client_addr = Arc::new(Mutex::new(None::<SocketAddr>));
    let drop_from_client = Arc::new(AtomicBool::new(false));
    let armed = Arc::new(AtomicBool::new(false));
    let (up_in, up_out, up_client, up_drop) = (facing_client.clone(), facing_server.clone(), client_addr.clone(), drop_from_client.clone());
    let upstream = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        loop {
            let (n, from) = up_in.recv_from(&mut buf).await.unwrap();
            *up_client.lock().unwrap() = Some(from);
            if !up_drop.load(Ordering::SeqCst) {
                let _ = up_out.send(&buf[..n]).await;
            }
        }
    });
    let (down_in, down_out, down_client, down_drop, down_armed) = (facing_server.clone(), facing_client.clone(), client_addr.clone(), drop_from_client.clone(), armed.clone());
    let downstream = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        loop {
            let n = down_in.recv(&mut buf).await.unwrap();
            if down_armed.load(Ordering::SeqCst) {
                down_drop.store(true, Ordering::SeqCst);
            }
            let to = *down_client.lock().unwrap();
            if let Some(to) = to {
                let _ = down_out.send_to(&buf[..n], to).await;
            }
        }
    });

    let client = client().await;
    let mut conn = client.connect(facing_client.local_addr().unwrap()).await.unwrap();
    let data = vec![42u8; 100_000];
    conn.write_all(&data).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while conn.acknowledged() < data.len() as u64 {
        assert!(Instant::now() < deadline, "the server never acknowledged the stream");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Stray acks of the data pass first. (Should the relay cut the client off before its FIN
    // is through, the server never sees the stream end and the test fails, not passes.)
    tokio::time::sleep(Duration::from_millis(100)).await;
    armed.store(true, Ordering::SeqCst);
    conn.finish();
    let mut receipt = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut receipt)).await.expect("the receipt arrives").unwrap();
    assert_eq!(receipt.len(), 40, "byte count and SHA-256");
    assert_eq!(u64::from_be_bytes(receipt[..8].try_into().unwrap()), data.len() as u64);
    // The client goes, its ack of the receipt lost in the relay.
    drop(conn);
    client.shutdown();

    let report = first_report(&served).await;
    upstream.abort();
    downstream.abort();
    assert!(report.error.is_none(), "{report:?}");
    assert!(report.final_ack_missing, "{report:?}");
    assert_eq!(report.bytes, data.len() as u64);
}

/// Both ends' drivers as tasks on one single-threaded runtime (the test's): a transfer
/// and then round trips of small messages work exactly as with driver threads.
#[tokio::test]
async fn drivers_placed_on_a_single_threaded_runtime_carry_a_transfer_and_an_echo() {
    let task = |config: EndpointConfig| EndpointConfig { driver: DriverPlacement::Task, ..config };
    let sink = Endpoint::bind(localhost(), task(EndpointConfig::server(TransportConfig::default()))).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let record = served.clone();
    tokio::spawn(tools::serve(sink.clone(), false, true, move |s| record.lock().unwrap().push(s)));
    let client = Endpoint::bind(localhost(), task(EndpointConfig::client(TransportConfig::default()))).await.unwrap();
    let summary = tools::send(&client, sink.local_addr(), Amount::Bytes(5_000_003), Duration::from_millis(100), true, |_| {}).await.unwrap();
    assert!(summary.hashes_match && summary.receiver_bytes == 5_000_003, "{summary:?}");

    let echo = Endpoint::bind(localhost(), task(EndpointConfig::server(TransportConfig::default()))).await.unwrap();
    tokio::spawn(tools::serve(echo.clone(), true, true, |_| {}));
    let mut conn = client.connect(echo.local_addr()).await.unwrap();
    let mut back = [0u8; 64];
    for round in 0..200u8 {
        let ping = [round; 64];
        conn.write_all(&ping).await.unwrap();
        conn.read_exact(&mut back).await.unwrap();
        assert_eq!(back, ping, "round {round}");
    }
    conn.close().await.unwrap();
}

/// A driver placed on a runtime without timers would panic inside its task and leave the
/// endpoint silent: binding says so instead.
#[test]
fn a_driver_task_on_a_runtime_without_timers_is_refused_with_the_remedy() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    let config = EndpointConfig { driver: DriverPlacement::Task, ..EndpointConfig::client(TransportConfig::default()) };
    let err = runtime.block_on(Endpoint::bind(localhost(), config)).err().expect("bind must fail without timers");
    assert!(err.to_string().contains("enable_all"), "{err}");
}

/// Nor without I/O, where the driver's socket cannot be registered.
#[test]
fn a_driver_task_on_a_runtime_without_io_is_refused_with_the_remedy() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let config = EndpointConfig { driver: DriverPlacement::Task, ..EndpointConfig::client(TransportConfig::default()) };
    let err = runtime.block_on(Endpoint::bind(localhost(), config)).err().expect("bind must fail without I/O");
    assert!(err.to_string().contains("enable_io"), "{err}");
}

/// A driver task goes with its runtime: the connections it drove then fail with a clear
/// error instead of waiting for it.
#[test]
fn connections_whose_driver_task_went_with_its_runtime_fail_instead_of_waiting() {
    let server_runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let echo = server_runtime.block_on(async {
        let echo = Endpoint::bind(localhost(), EndpointConfig::server(TransportConfig::default())).await.unwrap();
        tokio::spawn(tools::serve(echo.clone(), true, true, |_| {}));
        echo
    });
    let short_lived = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (client, mut conn) = short_lived.block_on(async {
        let config = EndpointConfig { driver: DriverPlacement::Task, ..EndpointConfig::client(TransportConfig::default()) };
        let client = Endpoint::bind(localhost(), config).await.unwrap();
        let mut conn = client.connect(echo.local_addr()).await.unwrap();
        conn.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        conn.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping");
        (client, conn)
    });
    drop(short_lived);
    let outcome = server_runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), async {
            let mut buf = [0u8; 4];
            conn.read(&mut buf).await
        })
        .await
    });
    let err = outcome.expect("the read must end, not wait").expect_err("the read must fail");
    assert!(err.to_string().contains("runtime shut down"), "{err}");
    drop((conn, client));
}
