//! The blocking endpoint (`fencepost_net::blocking`) on loopback: its calls run the
//! transport on the caller's thread.

use fencepost_net::blocking::{self, Waiting};
use fencepost_net::{EndpointConfig, NetError};
use fencepost_proto::{ConnectionError, Duration as ProtoDuration, TransportConfig};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Each test runs with both ways of sleeping (where io_uring is missing, both are epoll).
const BOTH: [Waiting; 2] = [Waiting::IoUring, Waiting::Epoll];

fn localhost() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Runs `test` on a thread of its own and fails if it takes longer than `limit`: a
/// blocking call that never returns is a failure, not a hung test run.
fn bounded(limit: Duration, test: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        test();
        let _ = done.send(());
    });
    match finished.recv_timeout(limit) {
        Ok(()) => runner.join().unwrap(),
        // The test panicked: its thread says why.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => std::panic::resume_unwind(runner.join().unwrap_err()),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("still blocked after {limit:?}"),
    }
}

/// Bytes that differ from message to message, so a mix-up shows.
fn message(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k * 31 + i * 7) as u8).collect()
}

/// A server on its own thread that echoes one connection until the peer finishes, then
/// closes; returns the bytes it echoed.
fn echo_server(transport: TransportConfig, waiting: Waiting) -> (SocketAddr, std::thread::JoinHandle<Result<u64, String>>) {
    echo_server_at(localhost(), transport, waiting)
}

/// [`echo_server`] bound to `addr`.
fn echo_server_at(addr: SocketAddr, transport: TransportConfig, waiting: Waiting) -> (SocketAddr, std::thread::JoinHandle<Result<u64, String>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        let endpoint = blocking::Endpoint::bind_waiting(addr, EndpointConfig::server(transport), waiting).map_err(|e| e.to_string())?;
        tx.send(endpoint.local_addr()).unwrap();
        let mut conn = endpoint.accept_timeout(Duration::from_secs(10)).map_err(|e| e.to_string())?.ok_or("nobody connected")?;
        let mut buf = vec![0u8; 100_000];
        let mut echoed = 0u64;
        loop {
            let n = conn.read(&mut buf).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            conn.write_all(&buf[..n]).map_err(|e| e.to_string())?;
            echoed += n as u64;
        }
        conn.close().map_err(|e| e.to_string())?;
        Ok(echoed)
    });
    (rx.recv_timeout(Duration::from_secs(5)).expect("the server bound"), server)
}

/// A blocking client endpoint and its connection to `addr`.
fn client_of(addr: SocketAddr, waiting: Waiting) -> (blocking::Endpoint, blocking::Connection) {
    let endpoint = blocking::Endpoint::bind_waiting(localhost(), EndpointConfig::client(TransportConfig::default()), waiting).unwrap();
    let conn = endpoint.connect(addr).unwrap();
    (endpoint, conn)
}

/// Sends message `i` of `len` bytes to an echo and checks what comes back; returns `len`.
fn echo_round(conn: &mut blocking::Connection, i: usize, len: usize) -> u64 {
    let sent = message(i, len);
    conn.write_all(&sent).unwrap();
    let mut got = vec![0u8; len];
    conn.read_exact(&mut got).unwrap();
    assert!(got == sent, "message {i} ({len} bytes) came back different");
    len as u64
}

#[test]
fn a_blocking_client_and_server_exchange_messages_byte_exact_and_close() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        let (addr, server) = echo_server(TransportConfig::default(), waiting);
        let (_endpoint, mut conn) = client_of(addr, waiting);
        assert!(conn.is_protected() && conn.peer_key().is_some());
        let mut total = 0u64;
        // Small requests, then messages larger than a window's worth of packets in one write
        // (the write waits for room, receiving the echo meanwhile).
        for (i, len) in [1, 64, 1_000, 5_000, 64, 300_000, 2_000_000, 7].into_iter().enumerate() {
            total += echo_round(&mut conn, i, len);
        }
        conn.close().unwrap();
        assert_eq!(server.join().unwrap(), Ok(total));
        let stats = conn.stats();
        assert_eq!((stats.bytes_written, stats.bytes_read), (total, total), "{stats:?}");
        // Nothing is lost on loopback: a datagram the endpoint received and then failed to
        // hand to the core (a GRO buffer's later datagrams) would show here.
        assert_eq!(stats.packets_lost, 0, "{stats:?}");
    });
}

#[test]
fn a_blocking_client_talks_to_an_async_server() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let server = runtime.block_on(fencepost_net::Endpoint::bind(localhost(), EndpointConfig::server(TransportConfig::default()))).unwrap();
        runtime.spawn(fencepost_net::tools::serve(server.clone(), true, true, |_| {}));
        let (_endpoint, mut conn) = client_of(server.local_addr(), waiting);
        for i in 0..50 {
            echo_round(&mut conn, i, 100 + i * 37);
        }
        conn.close().unwrap();
    });
}

#[test]
fn connecting_to_nobody_times_out_with_a_hint() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        // A port held by a socket that never answers: the endpoint waits for its timeout
        // (and does not spin meanwhile).
        let silent = std::net::UdpSocket::bind(localhost()).unwrap();
        let config = EndpointConfig { connect_timeout: Duration::from_millis(300), ..EndpointConfig::client(TransportConfig::default()) };
        let endpoint = blocking::Endpoint::bind_waiting(localhost(), config, waiting).unwrap();
        let started = Instant::now();
        match endpoint.connect(silent.local_addr().unwrap()) {
            Err(e @ NetError::ConnectTimeout { .. }) => assert!(e.to_string().contains("timed out after 0.3 s"), "{e}"),
            other => panic!("expected a connect timeout, got {other:?}"),
        }
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(3), "{took:?}");
    });
}

#[test]
fn connecting_to_a_port_nobody_holds_fails_at_the_hosts_word() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        // Held, so no other test can take it, but connected elsewhere: the kernel finds no
        // socket for a datagram from anyone else and answers each with ICMP port unreachable.
        let elsewhere = std::net::UdpSocket::bind(localhost()).unwrap();
        let closed = std::net::UdpSocket::bind(localhost()).unwrap();
        closed.connect(elsewhere.local_addr().unwrap()).unwrap();
        let addr = closed.local_addr().unwrap();
        let endpoint = blocking::Endpoint::bind_waiting(localhost(), EndpointConfig::client(TransportConfig::default()), waiting).unwrap();
        let started = Instant::now();
        match endpoint.connect(addr) {
            Err(e @ NetError::ConnectionLost { error: ConnectionError::Unreachable(_), .. }) => {
                assert!(e.to_string().contains(&format!("connecting to {addr} failed: nothing listens on that port")), "{e}");
                assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::ConnectionRefused);
            }
            other => panic!("expected the port's refusal from {addr}, got {other:?}"),
        }
        // At the first Initial's error (0.1-0.2 ms here), not at the second Initial, sent
        // after 300 ms (the io_uring waiter's call skipped the turn that would have read the
        // error, as one with nothing new, until then), nor at the ten-second connect timeout.
        let took = started.elapsed();
        assert!(took < Duration::from_millis(250), "{took:?}");
        eprintln!("{waiting:?}: refused after {took:?}");
    });
}

#[test]
fn a_client_endpoint_talks_to_two_servers_from_one_address() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        let (first_addr, first) = echo_server(TransportConfig::default(), waiting);
        let (second_addr, second) = echo_server(TransportConfig::default(), waiting);
        let endpoint = blocking::Endpoint::bind_waiting(localhost(), EndpointConfig::client(TransportConfig::default()), waiting).unwrap();
        let mut to_first = endpoint.connect(first_addr).unwrap();
        let mut total = [echo_round(&mut to_first, 0, 500), 0];
        // The second peer: the socket was connected to the first (a faster send path) and
        // must hear both now, from the address it had (the first server knows no other).
        let mut to_second = endpoint.connect(second_addr).unwrap();
        for i in 1..20 {
            total[0] += echo_round(&mut to_first, i, 100 + i);
            total[1] += echo_round(&mut to_second, i, 200 + i);
        }
        to_first.close().unwrap();
        to_second.close().unwrap();
        assert_eq!(first.join().unwrap(), Ok(total[0]));
        assert_eq!(second.join().unwrap(), Ok(total[1]));
    });
}

#[test]
fn dual_stack_sockets_talk_to_ipv4_ones() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        // An IPv6 socket bound to the wildcard address hears IPv4 peers as mapped addresses,
        // which the transport names in their IPv4 form: each side must still reach the other
        // (the client's socket connected to its peer, too).
        let any6: SocketAddr = "[::]:0".parse().unwrap();
        for (server_at, client_at) in [(any6, localhost()), (localhost(), any6)] {
            let (addr, server) = echo_server_at(server_at, TransportConfig::default(), waiting);
            let addr = SocketAddr::new("127.0.0.1".parse().unwrap(), addr.port());
            let endpoint = blocking::Endpoint::bind_waiting(client_at, EndpointConfig::client(TransportConfig::default()), waiting).unwrap();
            let mut conn = endpoint.connect(addr).unwrap();
            let total: u64 = (0..10).map(|i| echo_round(&mut conn, i, 1 + i * 500)).sum();
            conn.close().unwrap();
            assert_eq!(server.join().unwrap(), Ok(total), "server at {server_at}, client at {client_at}");
        }
    });
}

#[test]
fn a_read_timeout_fails_the_read_and_the_connection_goes_on() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        let (addr, server) = echo_server(TransportConfig::default(), waiting);
        let (_endpoint, mut conn) = client_of(addr, waiting);
        conn.set_read_timeout(Some(Duration::from_millis(50)));
        let started = Instant::now();
        let mut buf = [0u8; 16];
        let e = conn.read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(50) && took < Duration::from_secs(1), "{took:?}");
        conn.write_all(b"still there?").unwrap();
        conn.read_exact(&mut buf[..12]).unwrap();
        assert_eq!(&buf[..12], b"still there?");
        conn.close().unwrap();
        assert_eq!(server.join().unwrap(), Ok(12));
    });
}

#[test]
fn with_busy_polling_exchanges_and_timers_work_as_without() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        let (addr, server) = echo_server(TransportConfig::default(), waiting);
        let endpoint = blocking::Endpoint::bind_waiting(localhost(), EndpointConfig::client(TransportConfig::default()), waiting).unwrap();
        endpoint.set_busy_poll(Some(Duration::from_millis(2)));
        let mut conn = endpoint.connect(addr).unwrap();
        let total: u64 = (0..200).map(|i| echo_round(&mut conn, i, 1 + i * 13)).sum();
        // Spinning does not hold a deadline up: the read still times out on time.
        conn.set_read_timeout(Some(Duration::from_millis(50)));
        let started = Instant::now();
        assert_eq!(conn.read(&mut [0u8; 8]).unwrap_err().kind(), std::io::ErrorKind::TimedOut);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(50) && took < Duration::from_millis(500), "{took:?}");
        conn.close().unwrap();
        assert_eq!(server.join().unwrap(), Ok(total));
    });
}

#[test]
fn a_vanished_server_ends_a_blocked_read_within_the_idle_timeout() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        let transport = TransportConfig { idle_timeout: ProtoDuration::from_millis(500), ..TransportConfig::default() };
        let (tx, rx) = std::sync::mpsc::channel();
        let server_transport = transport.clone();
        let server = std::thread::spawn(move || {
            let endpoint = blocking::Endpoint::bind_waiting(localhost(), EndpointConfig::server(server_transport), waiting).unwrap();
            tx.send(endpoint.local_addr()).unwrap();
            let mut conn = endpoint.accept().unwrap();
            let mut buf = [0u8; 5];
            conn.read_exact(&mut buf).unwrap();
            // Gone without a word: the endpoint and its socket vanish with this thread.
            std::mem::forget(conn);
        });
        let addr = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let endpoint = blocking::Endpoint::bind_waiting(localhost(), EndpointConfig::client(transport), waiting).unwrap();
        let mut conn = endpoint.connect(addr).unwrap();
        conn.write_all(b"hello").unwrap();
        server.join().unwrap();
        let started = Instant::now();
        let e = conn.read(&mut [0u8; 16]).unwrap_err();
        let took = started.elapsed();
        let lost = e.get_ref().and_then(|inner| inner.downcast_ref::<NetError>());
        assert!(matches!(lost, Some(NetError::ConnectionLost { error: ConnectionError::TimedOut { .. }, .. })), "{e}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    });
}

#[test]
fn one_thread_serves_several_connections_of_one_endpoint() {
    bounded(Duration::from_secs(30), || for waiting in BOTH {
        let (tx, rx) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || {
            let endpoint = blocking::Endpoint::bind_waiting(localhost(), EndpointConfig::server(TransportConfig::default()), waiting).unwrap();
            tx.send(endpoint.local_addr()).unwrap();
            let mut conns: Vec<_> = (0..3).map(|_| endpoint.accept().unwrap()).collect();
            assert_eq!(endpoint.connection_count(), 3);
            // Each read waits on one connection while the endpoint serves all three.
            for round in 0..20 {
                for conn in conns.iter_mut() {
                    let mut buf = [0u8; 8];
                    conn.read_exact(&mut buf).unwrap();
                    assert_eq!(u64::from_le_bytes(buf) % 100, round);
                    conn.write_all(&buf).unwrap();
                }
            }
            for conn in conns.iter_mut() {
                assert_eq!(conn.read(&mut [0u8; 8]).unwrap(), 0, "the client finished");
                conn.close().unwrap();
            }
        });
        let addr = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let endpoint = blocking::Endpoint::bind_waiting(localhost(), EndpointConfig::client(TransportConfig::default()), waiting).unwrap();
        let mut conns: Vec<_> = (0..3).map(|_| endpoint.connect(addr).unwrap()).collect();
        for round in 0..20u64 {
            // All three asked before any answer is read: the answers wait in their connections.
            for (i, conn) in conns.iter_mut().enumerate() {
                conn.write_all(&(i as u64 * 100 + round).to_le_bytes()).unwrap();
            }
            for (i, conn) in conns.iter_mut().enumerate() {
                let mut buf = [0u8; 8];
                conn.read_exact(&mut buf).unwrap();
                assert_eq!(u64::from_le_bytes(buf), i as u64 * 100 + round);
            }
        }
        for conn in conns.iter_mut() {
            conn.close().unwrap();
        }
        server.join().unwrap();
    });
}

#[test]
fn an_endpoint_sleeps_on_io_uring_where_the_kernel_allows_it_and_in_epoll_when_asked() {
    let epoll = blocking::Endpoint::bind_waiting(localhost(), EndpointConfig::client(TransportConfig::default()), Waiting::Epoll).unwrap();
    assert_eq!(epoll.waiting(), Waiting::Epoll);
    // The ring the endpoint asks for, asked for here directly: where the kernel gives it
    // (this machine's, CI's), the endpoint must use it.
    #[cfg(target_os = "linux")]
    let ring_available = io_uring::IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::builder().setup_single_issuer().setup_defer_taskrun().build(4).is_ok();
    #[cfg(not(target_os = "linux"))]
    let ring_available = false;
    let preferred = blocking::Endpoint::bind(localhost(), EndpointConfig::client(TransportConfig::default())).unwrap();
    let expected = if ring_available { Waiting::IoUring } else { Waiting::Epoll };
    assert_eq!(preferred.waiting(), expected, "io_uring available: {ring_available}");
}
