//! One harness, four transports: a bulk sink and sender, and a 64-byte ping-pong, for
//! fencepost, quinn (QUIC), kernel TCP and plain UDP. Each run is one server process
//! and one client process; each prints one JSON line with what it measured and the CPU
//! time its own process used (user + system), so `bench/peers.sh` can add both ends.
//!
//! ```text
//! peers server PROTO ADDR [--echo] [--insecure] [--cert FILE] [--no-verify] [--redundancy-none] [--packet-size BYTES] [--cc SPEC] [--driver thread|task|inline [--busy-poll-us N] [--wait io-uring|epoll]] [--runtime multi|current]
//! peers client PROTO ADDR (--bytes N | --pingpong N) [--insecure] [--cert FILE] [--no-verify] [--redundancy-none] [--packet-size BYTES] [--cc SPEC] [--driver thread|task|inline [--busy-poll-us N] [--wait io-uring|epoll]] [--runtime multi|current]
//! peers server|client fencepost|tcp ADDR --connections K ...   (K concurrent connections; tcp: bulk only)
//!     (every K, 1 included, timed from the first connect to the last connection's end)
//! ```
//! PROTO is fencepost, quinn, tcp or udp. A server serves one connection and exits.
//! `--cc` (fencepost) picks the congestion controller as `fencepost send --cc` does.
//! Bulk timing starts once the connection is up and ends when the sink's byte count
//! has come back, so every transport is timed over the same span.

use fencepost_net::tools::{self, Amount};
use fencepost_net::{DriverPlacement, Endpoint, EndpointConfig};
use fencepost_proto::TransportConfig;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

const CHUNK: usize = 256 * 1024;
const PING: usize = 64;
/// Plain UDP's datagram: what fills a 1500-byte IPv4 packet.
const UDP_DATAGRAM: usize = 1472;

struct Args {
    role: String,
    proto: String,
    addr: SocketAddr,
    bytes: Option<u64>,
    pingpong: Option<u32>,
    insecure: bool,
    /// fencepost without the default profile's adaptive FEC (what it costs where it sends nothing).
    redundancy_none: bool,
    verify: bool,
    /// Server: echo (ping-pong) instead of a sink; only fencepost's server needs telling.
    echo: bool,
    /// fencepost: the congestion controller, as `fencepost send --cc` takes it (default: the profile's).
    cc: Option<String>,
    /// fencepost and tcp: concurrent connections (client: the bytes are split among them; server: serve this many, then exit).
    connections: usize,
    /// `--connections` was given: every count, one included, is then timed alike, from
    /// the first connect to the last connection's end (handshakes and closes included),
    /// so that one connection and many compare on the same clock.
    many: bool,
    cert: Option<String>,
    /// fencepost's payload per packet (the default fills a 1500-byte IP packet).
    packet_size: Option<u16>,
    /// fencepost: where the endpoint's driver runs (`--driver task`: on the runtime).
    driver: DriverPlacement,
    /// fencepost: `--driver inline`, the blocking endpoint (`fencepost_net::blocking`), whose
    /// calls do the driver's work on the application's thread (ping-pong only).
    inline: bool,
    /// fencepost with `--driver inline`: busy polling for up to this long before sleeping.
    busy_poll: Option<Duration>,
    /// How the blocking endpoint's calls sleep (`--wait`).
    waiting: fencepost_net::blocking::Waiting,
    /// The tokio runtime the async peers (fencepost, quinn) run on: two workers, or the
    /// calling thread alone (`--runtime current`, what a latency-bound client would pick).
    current_thread: bool,
}

/// Where a client binds to reach `server`: its loopback address for a loopback server (as
/// every bench here runs), else any address of its family, so that the peers also run
/// between namespaces and hosts, over IPv4 or IPv6.
fn local_for(server: std::net::SocketAddr) -> std::net::SocketAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let ip: IpAddr = match (server.ip().is_loopback(), server.is_ipv6()) {
        (true, false) => Ipv4Addr::LOCALHOST.into(),
        (true, true) => Ipv6Addr::LOCALHOST.into(),
        (false, false) => Ipv4Addr::UNSPECIFIED.into(),
        (false, true) => Ipv6Addr::UNSPECIFIED.into(),
    };
    std::net::SocketAddr::new(ip, 0)
}

fn usage(why: &str) -> ! {
    eprintln!("peers: {why}\nusage: peers server|client fencepost|quinn|tcp|udp ADDR [--bytes N | --pingpong N] [--echo] [--insecure] [--no-verify] [--redundancy-none] [--packet-size BYTES] [--cc SPEC] [--driver thread|task|inline [--busy-poll-us N] [--wait io-uring|epoll]] [--runtime multi|current] [--cert FILE]");
    std::process::exit(2);
}

fn parse_args() -> Args {
    let mut it = std::env::args().skip(1);
    let role = it.next().unwrap_or_else(|| usage("missing role"));
    if role != "server" && role != "client" {
        usage(&format!("role {role:?}: expected server or client"));
    }
    let proto = it.next().unwrap_or_else(|| usage("missing PROTO"));
    if !["fencepost", "quinn", "tcp", "udp"].contains(&proto.as_str()) {
        usage(&format!("PROTO {proto:?}: expected fencepost, quinn, tcp or udp"));
    }
    let addr = it.next().unwrap_or_else(|| usage("missing ADDR")).parse().unwrap_or_else(|_| usage("ADDR: expected IP:PORT"));
    let mut a = Args { role, proto, addr, bytes: None, pingpong: None, insecure: false, redundancy_none: false, verify: true, echo: false, connections: 1, many: false, cc: None, cert: None, packet_size: None, driver: DriverPlacement::Thread, inline: false, busy_poll: None, waiting: fencepost_net::blocking::Waiting::IoUring, current_thread: false };
    let mut wait_given = false;
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| usage(&format!("{name} needs a value")));
        match flag.as_str() {
            "--bytes" => a.bytes = Some(value("--bytes").parse().unwrap_or_else(|_| usage("--bytes: expected a whole number of bytes"))),
            "--pingpong" => a.pingpong = Some(value("--pingpong").parse().unwrap_or_else(|_| usage("--pingpong: expected a number of round trips"))),
            "--cert" => a.cert = Some(value("--cert")),
            "--insecure" => a.insecure = true,
            "--cc" => a.cc = Some(value("--cc")),
            "--redundancy-none" => a.redundancy_none = true,
            "--no-verify" => a.verify = false,
            "--echo" => a.echo = true,
            "--runtime" => {
                a.current_thread = match value("--runtime").as_str() {
                    "multi" => false,
                    "current" => true,
                    other => usage(&format!("--runtime: expected multi or current, got {other:?}")),
                }
            }
            "--driver" => {
                a.driver = match value("--driver").as_str() {
                    "thread" => DriverPlacement::Thread,
                    "task" => DriverPlacement::Task,
                    "inline" => {
                        a.inline = true;
                        DriverPlacement::Thread
                    }
                    other => usage(&format!("--driver {other:?}: expected thread, task or inline")),
                }
            }
            "--busy-poll-us" => {
                let us: u64 = value("--busy-poll-us").parse().unwrap_or_else(|_| usage("--busy-poll-us: expected microseconds, a whole number"));
                a.busy_poll = Some(Duration::from_micros(us));
            }
            "--wait" => {
                wait_given = true;
                a.waiting = match value("--wait").as_str() {
                    "io-uring" => fencepost_net::blocking::Waiting::IoUring,
                    "epoll" => fencepost_net::blocking::Waiting::Epoll,
                    other => usage(&format!("--wait {other:?}: expected io-uring or epoll")),
                }
            }
            "--packet-size" => a.packet_size = Some(value("--packet-size").parse().ok().filter(|&n: &u16| n >= 64).unwrap_or_else(|| usage("--packet-size: expected a payload size in bytes, 64 to 65535"))),
            "--connections" => {
                a.connections = value("--connections").parse().ok().filter(|&n| n >= 1).unwrap_or_else(|| usage("--connections: expected a whole number, at least 1"));
                a.many = true;
            }
            other => usage(&format!("unknown flag {other}")),
        }
    }
    if a.role == "client" && a.bytes.is_some() == a.pingpong.is_some() {
        usage("a client needs exactly one of --bytes N or --pingpong N");
    }
    if (a.busy_poll.is_some() || wait_given) && !a.inline {
        usage("--busy-poll-us and --wait: only with --driver inline (the blocking endpoint)");
    }
    if a.many && !matches!(a.proto.as_str(), "fencepost" | "tcp") {
        usage("--connections: fencepost and tcp only");
    }
    if a.many && a.proto == "tcp" && (a.pingpong.is_some() || a.echo) {
        usage("--connections with tcp: bulk only (a client with --bytes N, a server without --echo)");
    }
    if a.inline && (a.bytes.is_some() || (a.role == "server" && !a.echo) || a.connections > 1) {
        usage("--driver inline: ping-pong only (a client with --pingpong N, a server with --echo, one connection)");
    }
    a
}

/// CPU seconds (user + system) this process has used so far.
fn cpu_seconds() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own; RUSAGE_SELF counts every thread of the process.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn payload() -> Vec<u8> {
    // Incompressible-looking bytes; nothing on the path compresses, but no transport gets zeros.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..CHUNK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The round trips' p50, p90, p99 and p99.9 (nearest rank), in their unit.
fn percentiles(mut rtts: Vec<f64>) -> [f64; 4] {
    rtts.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize];
    [at(0.5), at(0.9), at(0.99), at(0.999)]
}

fn report(args: &Args, fields: serde_json::Value, cpu: f64) {
    let mut out = serde_json::json!({"role": args.role, "proto": args.proto, "cpu_s": cpu});
    if let (Some(o), Some(f)) = (out.as_object_mut(), fields.as_object()) {
        o.extend(f.clone());
    }
    println!("{out}");
}

fn bulk_fields(bytes: u64, seconds: f64) -> serde_json::Value {
    serde_json::json!({"bytes": bytes, "seconds": seconds, "gbit_per_s": bytes as f64 * 8.0 / seconds / 1e9})
}

fn pingpong_fields(rtts: Vec<f64>) -> serde_json::Value {
    let n = rtts.len();
    let [p50, p90, p99, p999] = percentiles(rtts);
    serde_json::json!({"round_trips": n, "p50_us": p50, "p90_us": p90, "p99_us": p99, "p999_us": p999})
}

/// Runs an async peer as a task of the runtime, as a tokio application runs its work:
/// `block_on`'s own future runs on the calling thread, which a multi-thread runtime's worker
/// must wake (a futex call and a thread switch) for every readiness it sees, a hop per
/// message that neither transport's code makes (2026-11-27, three runs each: a ping-pong's
/// p50 went from 44-66 to 19-22 µs with fencepost, from 121-145 to 71-73 µs with quinn).
fn as_task<F, Fut>(rt: &tokio::runtime::Runtime, args: std::sync::Arc<Args>, peer: F) -> Result<serde_json::Value>
where
    F: FnOnce(std::sync::Arc<Args>) -> Fut,
    Fut: std::future::Future<Output = Result<serde_json::Value>> + Send + 'static,
{
    rt.block_on(async move { tokio::spawn(peer(args)).await.map_err(|e| format!("the peer's task failed: {e}"))? })
}

fn main() {
    let args = parse_args();
    let rt = if args.current_thread {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
    }
    .expect("a tokio runtime");
    let cpu0 = cpu_seconds();
    let args = std::sync::Arc::new(args);
    let fields = match args.proto.as_str() {
        "fencepost" if args.inline => fencepost_inline(&args),
        "fencepost" => as_task(&rt, args.clone(), |a| async move { fencepost(&a).await }),
        "quinn" => as_task(&rt, args.clone(), |a| async move { quinn_peer(&a).await }),
        "tcp" => tcp(&args),
        _ => udp(&args),
    };
    match fields {
        Ok(f) => report(&args, f, cpu_seconds() - cpu0),
        Err(e) => {
            eprintln!("peers {} {}: {e}", args.role, args.proto);
            std::process::exit(1);
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// fencepost's transport as the flags set it (`--insecure`, `--redundancy-none`, `--packet-size`).
fn transport(args: &Args) -> TransportConfig {
    let mut transport = if args.insecure { TransportConfig::default().insecure() } else { TransportConfig::default() };
    if args.redundancy_none {
        transport.set_redundancy(fencepost_proto::redundancy::RedundancyConfig::None);
    }
    if let Some(size) = args.packet_size {
        transport.max_payload = size;
    }
    if let Some(spec) = &args.cc {
        transport.controller = fencepost_spec::parse_cc(spec, &transport).unwrap_or_else(|e| usage(&format!("--cc {spec:?}: {e}")));
    }
    transport
}

async fn fencepost(args: &Args) -> Result<serde_json::Value> {
    let transport = transport(args);
    if args.role == "server" {
        let endpoint = Endpoint::bind(args.addr, EndpointConfig { driver: args.driver, ..EndpointConfig::server(transport) }).await?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // `fencepost serve`'s own loop: a sink (count, hash unless --no-verify, receipt) or an echo.
        tokio::spawn(tools::serve(endpoint.clone(), args.echo, args.verify, move |s| {
            let _ = tx.send(s);
        }));
        let (mut bytes, mut longest, mut retransmissions, mut duplicates, mut dropped) = (0u64, 0f64, 0u64, 0u64, 0u64);
        for _ in 0..args.connections {
            let s = rx.recv().await.ok_or("the server stopped before a connection finished")?;
            if let Some(e) = s.error {
                return Err(e.into());
            }
            bytes += s.bytes;
            longest = longest.max(s.duration_s);
            retransmissions += s.retransmissions;
            duplicates += s.duplicate_packets_received;
            dropped += s.packets_dropped_for_room;
        }
        let mut fields = if args.echo { serde_json::json!({"bytes": bytes}) } else { bulk_fields(bytes, longest) };
        fields["retransmissions"] = retransmissions.into();
        fields["duplicate_packets_received"] = duplicates.into();
        fields["packets_dropped_for_room"] = dropped.into();
        // Datagrams the kernel dropped for want of socket buffer: on loopback the only loss.
        fields["socket_overflows"] = endpoint.stats().socket_overflows.into();
        // Times the socket's buffer came near full and the windows were held before it overflowed.
        fields["socket_fill_holds"] = endpoint.stats().socket_fill_holds.into();
        return Ok(fields);
    }
    let endpoint = Endpoint::bind(local_for(args.addr), EndpointConfig { driver: args.driver, ..EndpointConfig::client(transport) }).await?;
    if let Some(bytes) = args.bytes {
        // Every connection from one client socket, all at once; the aggregate is the bytes
        // over the time from the first connect to the last receipt.
        let share = bytes / args.connections as u64;
        let started = Instant::now();
        let mut sends = tokio::task::JoinSet::new();
        for _ in 0..args.connections {
            let (endpoint, addr, verify) = (endpoint.clone(), args.addr, args.verify);
            sends.spawn(async move { tools::send(&endpoint, addr, Amount::Bytes(share), Duration::from_secs(3600), verify, |_| {}).await });
        }
        let (mut delivered, mut retransmissions, mut one_connection_s) = (0u64, 0u64, 0f64);
        let (mut lost, mut spurious, mut timeouts, mut repairs) = (0u64, 0u64, 0u64, 0u64);
        let mut new_data_probes = 0u64;
        let (mut data_packets, mut acks) = (0u64, 0u64);
        let (mut done_at, mut up_at) = (Vec::new(), Vec::new());
        while let Some(done) = sends.join_next().await {
            let s = done??;
            let at = started.elapsed().as_secs_f64();
            done_at.push(at);
            // Its duration runs from the handshake's end to the receipt.
            up_at.push(at - s.duration_s);
            if !s.complete {
                return Err(s.incomplete_reason.unwrap_or_default().into());
            }
            delivered += s.receiver_bytes;
            retransmissions += s.retransmissions;
            lost += s.packets_lost;
            spurious += s.spurious_retransmissions;
            timeouts += s.retransmission_timeouts;
            new_data_probes += s.timeouts_probed_with_new_data;
            repairs += s.redundant_packets_sent;
            data_packets += s.data_packets_sent;
            acks += s.acks_received;
            one_connection_s = s.duration_s;
        }
        // Without `--connections`, one connection is timed like the other transports (from
        // the handshake's end to the receipt); with it, every count alike from the first
        // connect to the last connection's end, handshakes and closes included.
        let seconds = if args.many { started.elapsed().as_secs_f64() } else { one_connection_s };
        let mut fields = bulk_fields(delivered, seconds);
        fields["retransmissions"] = retransmissions.into();
        fields["connections"] = args.connections.into();
        fields["packets_lost"] = lost.into();
        fields["spurious_retransmissions"] = spurious.into();
        fields["retransmission_timeouts"] = timeouts.into();
        fields["timeouts_probed_with_new_data"] = new_data_probes.into();
        fields["redundant_packets_sent"] = repairs.into();
        fields["data_packets_sent"] = data_packets.into();
        fields["acks_received"] = acks.into();
        // When the connections finished, from the first connect: a spread shows unfairness.
        fields["first_done_s"] = done_at.first().copied().unwrap_or(0.0).into();
        fields["median_done_s"] = done_at.get(done_at.len() / 2).copied().unwrap_or(0.0).into();
        // When the last handshake finished, from the first connect: how long starting took.
        fields["last_connected_s"] = up_at.iter().copied().fold(0.0, f64::max).into();
        fields["socket_overflows"] = endpoint.stats().socket_overflows.into();
        return Ok(fields);
    }
    let mut conn = endpoint.connect(args.addr).await?;
    let ping = [7u8; PING];
    let mut pong = [0u8; PING];
    let mut rtts = Vec::new();
    for _ in 0..args.pingpong.unwrap_or(1) {
        let t = Instant::now();
        conn.write_all(&ping).await?;
        conn.read_exact(&mut pong).await?;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    conn.close().await?;
    Ok(pingpong_fields(rtts))
}

/// `n` round trips of a 64-byte message over a blocking byte stream (kernel TCP, or
/// fencepost's blocking endpoint: one loop, so both are timed alike); each in µs.
fn blocking_pingpong(stream: &mut (impl Read + Write), n: u32) -> std::io::Result<Vec<f64>> {
    let ping = [7u8; PING];
    let mut pong = [0u8; PING];
    let mut rtts = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t = Instant::now();
        stream.write_all(&ping)?;
        stream.read_exact(&mut pong)?;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(rtts)
}

/// fencepost's ping-pong on the blocking endpoint: the calls do the driver's work, on this
/// thread (no runtime), like the TCP and UDP peers' blocking sockets.
fn fencepost_inline(args: &Args) -> Result<serde_json::Value> {
    use fencepost_net::blocking;
    let transport = transport(args);
    if args.role == "server" {
        let endpoint = blocking::Endpoint::bind_waiting(args.addr, EndpointConfig::server(transport), args.waiting)?;
        endpoint.set_busy_poll(args.busy_poll);
        let mut conn = endpoint.accept()?;
        let mut buf = vec![0u8; CHUNK];
        let mut bytes = 0u64;
        loop {
            let n = conn.read(&mut buf)?;
            if n == 0 {
                break;
            }
            conn.write_all(&buf[..n])?;
            bytes += n as u64;
        }
        conn.close()?;
        return Ok(serde_json::json!({"bytes": bytes}));
    }
    let endpoint = blocking::Endpoint::bind_waiting(local_for(args.addr), EndpointConfig::client(transport), args.waiting)?;
    endpoint.set_busy_poll(args.busy_poll);
    let mut conn = endpoint.connect(args.addr)?;
    let rtts = blocking_pingpong(&mut conn, args.pingpong.unwrap_or(1))?;
    conn.close()?;
    let mut fields = pingpong_fields(rtts);
    fields["waiting"] = format!("{:?}", endpoint.waiting()).into();
    Ok(fields)
}

async fn quinn_peer(args: &Args) -> Result<serde_json::Value> {
    use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
    let cert_path = args.cert.as_deref().ok_or("quinn needs --cert FILE (the server writes it, the client reads it)")?;
    if args.role == "server" {
        let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])?;
        let der = key.cert.der().to_vec();
        std::fs::write(cert_path, &der)?;
        let config = quinn::ServerConfig::with_single_cert(vec![CertificateDer::from(der)], PrivatePkcs8KeyDer::from(key.signing_key.serialize_der()).into())?;
        let endpoint = quinn::Endpoint::server(config, args.addr)?;
        let conn = endpoint.accept().await.ok_or("endpoint closed")?.await?;
        let (mut send, mut recv) = conn.accept_bi().await?;
        let started = Instant::now();
        let mut first = [0u8; 1];
        // The first byte says what the client wants: b for bulk, p for ping-pong.
        recv.read_exact(&mut first).await?;
        if first[0] == b'p' {
            let mut ping = [0u8; PING];
            let mut n = 0u64;
            while recv.read_exact(&mut ping).await.is_ok() {
                send.write_all(&ping).await?;
                n += 1;
            }
            send.finish()?;
            conn.closed().await;
            return Ok(serde_json::json!({"round_trips": n}));
        }
        let mut bytes = 0u64;
        while let Some(chunk) = recv.read_chunk(usize::MAX, true).await? {
            bytes += chunk.bytes.len() as u64;
        }
        send.write_all(&bytes.to_be_bytes()).await?;
        send.finish()?;
        let seconds = started.elapsed().as_secs_f64();
        conn.closed().await;
        return Ok(bulk_fields(bytes, seconds));
    }
    let der = std::fs::read(cert_path)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(der))?;
    let mut endpoint = quinn::Endpoint::client(local_for(args.addr))?;
    endpoint.set_default_client_config(quinn::ClientConfig::with_root_certificates(Arc::new(roots))?);
    let conn = endpoint.connect(args.addr, "localhost")?.await?;
    let (mut send, mut recv) = conn.open_bi().await?;
    let result = if let Some(bytes) = args.bytes {
        let started = Instant::now();
        let data = payload();
        send.write_all(b"b").await?;
        let mut left = bytes;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            send.write_all(&data[..n]).await?;
            left -= n as u64;
        }
        send.finish()?;
        let mut receipt = [0u8; 8];
        recv.read_exact(&mut receipt).await?;
        let got = u64::from_be_bytes(receipt);
        if got != bytes {
            return Err(format!("the quinn sink counted {got} bytes of {bytes}").into());
        }
        bulk_fields(got, started.elapsed().as_secs_f64())
    } else {
        send.write_all(b"p").await?;
        let rtts = quinn_pingpong(&mut send, &mut recv, args.pingpong.unwrap_or(1)).await?;
        send.finish()?;
        pingpong_fields(rtts)
    };
    conn.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
    Ok(result)
}

async fn quinn_pingpong(send: &mut quinn::SendStream, recv: &mut quinn::RecvStream, n: u32) -> Result<Vec<f64>> {
    let ping = [7u8; PING];
    let mut pong = [0u8; PING];
    let mut rtts = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let t = Instant::now();
        send.write_all(&ping).await?;
        recv.read_exact(&mut pong).await?;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(rtts)
}

fn tcp(args: &Args) -> Result<serde_json::Value> {
    if args.many {
        return tcp_connections(args);
    }
    if args.role == "server" {
        let listener = std::net::TcpListener::bind(args.addr)?;
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let started = Instant::now();
        let mut first = [0u8; 1];
        s.read_exact(&mut first)?;
        if first[0] == b'p' {
            let mut ping = [0u8; PING];
            let mut n = 0u64;
            while s.read_exact(&mut ping).is_ok() {
                s.write_all(&ping)?;
                n += 1;
            }
            return Ok(serde_json::json!({"round_trips": n}));
        }
        let bytes = tcp_sink(&mut s)?;
        return Ok(bulk_fields(bytes, started.elapsed().as_secs_f64()));
    }
    let mut s = std::net::TcpStream::connect(args.addr)?;
    s.set_nodelay(true)?;
    if let Some(bytes) = args.bytes {
        let started = Instant::now();
        let got = tcp_send_bulk(&mut s, &payload(), bytes)?;
        return Ok(bulk_fields(got, started.elapsed().as_secs_f64()));
    }
    s.write_all(b"p")?;
    Ok(pingpong_fields(blocking_pingpong(&mut s, args.pingpong.unwrap_or(1))?))
}

/// A TCP bulk sink after its first byte: counts what arrives until the sender shuts its
/// side, then sends the count back.
fn tcp_sink(s: &mut std::net::TcpStream) -> std::io::Result<u64> {
    let mut buf = vec![0u8; CHUNK];
    let mut bytes = 0u64;
    loop {
        match s.read(&mut buf)? {
            0 => break,
            n => bytes += n as u64,
        }
    }
    s.write_all(&bytes.to_be_bytes())?;
    Ok(bytes)
}

/// A TCP bulk sender: announces a bulk transfer, writes `bytes` of `data` (repeated),
/// shuts its side and checks the sink's count.
fn tcp_send_bulk(s: &mut std::net::TcpStream, data: &[u8], bytes: u64) -> std::io::Result<u64> {
    s.write_all(b"b")?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(data.len() as u64) as usize;
        s.write_all(&data[..n])?;
        left -= n as u64;
    }
    s.shutdown(std::net::Shutdown::Write)?;
    let mut receipt = [0u8; 8];
    s.read_exact(&mut receipt)?;
    let got = u64::from_be_bytes(receipt);
    if got != bytes {
        return Err(std::io::Error::other(format!("the TCP sink counted {got} bytes of {bytes}")));
    }
    Ok(got)
}

/// Kernel TCP over `--connections K` (bulk only), for fencepost's many-connection case
/// to have a peer: a thread per connection on each side, as a blocking TCP program
/// would have it. The server accepts K connections and counts each one's bytes; the
/// client splits its bytes among K connections opened at once. Timed, like fencepost's
/// case, from before the first connect to the last connection's receipt.
fn tcp_connections(args: &Args) -> Result<serde_json::Value> {
    let k = args.connections;
    if args.role == "server" {
        let listener = std::net::TcpListener::bind(args.addr)?;
        let mut sinks = Vec::new();
        let mut started = None;
        for _ in 0..k {
            let (mut s, _) = listener.accept()?;
            s.set_nodelay(true)?;
            started.get_or_insert_with(Instant::now);
            sinks.push(std::thread::spawn(move || -> std::io::Result<u64> {
                let mut first = [0u8; 1];
                s.read_exact(&mut first)?;
                if first[0] != b'b' {
                    return Err(std::io::Error::other("many TCP connections: bulk only"));
                }
                tcp_sink(&mut s)
            }));
        }
        let mut total = 0;
        for sink in sinks {
            total += sink.join().map_err(|_| "a TCP sink thread panicked")??;
        }
        let seconds = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let mut fields = bulk_fields(total, seconds);
        fields["connections"] = k.into();
        return Ok(fields);
    }
    let Some(bytes) = args.bytes else {
        return Err("many TCP connections: bulk only (--bytes N)".into());
    };
    let data = Arc::new(payload());
    let share = bytes / k as u64;
    let started = Instant::now();
    let addr = args.addr;
    let senders: Vec<_> = (0..k)
        .map(|i| {
            let data = Arc::clone(&data);
            // The first connection carries what does not divide evenly.
            let mine = if i == 0 { bytes - share * (k as u64 - 1) } else { share };
            std::thread::spawn(move || -> std::io::Result<u64> {
                let mut s = std::net::TcpStream::connect(addr)?;
                // As the one-connection case sets it.
                s.set_nodelay(true)?;
                tcp_send_bulk(&mut s, &data, mine)
            })
        })
        .collect();
    let mut total = 0;
    for sender in senders {
        total += sender.join().map_err(|_| "a TCP sender thread panicked")??;
    }
    let mut fields = bulk_fields(total, started.elapsed().as_secs_f64());
    fields["connections"] = k.into();
    Ok(fields)
}

/// Plain UDP: no reliability, no congestion control. Bulk: the client sends its bytes as
/// 1472-byte datagrams as fast as the socket takes them; the sink counts what arrives
/// until nothing has come for half a second, and its rate (first to last datagram) is
/// UDP's ceiling on this path. Ping-pong: one datagram each way (a lost one ends the run).
fn udp(args: &Args) -> Result<serde_json::Value> {
    if args.role == "server" {
        let s = std::net::UdpSocket::bind(args.addr)?;
        let mut buf = vec![0u8; 65_536];
        let (n, peer) = s.recv_from(&mut buf)?;
        if buf[..n].len() == PING {
            s.send_to(&buf[..n], peer)?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            let mut trips = 1u64;
            while let Ok((n, peer)) = s.recv_from(&mut buf) {
                s.send_to(&buf[..n], peer)?;
                trips += 1;
            }
            return Ok(serde_json::json!({"round_trips": trips}));
        }
        let first = Instant::now();
        let mut last = first;
        let mut bytes = n as u64;
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        while let Ok(n) = s.recv(&mut buf) {
            bytes += n as u64;
            last = Instant::now();
        }
        return Ok(bulk_fields(bytes, (last - first).as_secs_f64().max(1e-9)));
    }
    let s = std::net::UdpSocket::bind(local_for(args.addr))?;
    s.connect(args.addr)?;
    if let Some(bytes) = args.bytes {
        let data = payload();
        let started = Instant::now();
        let mut sent = 0u64;
        while sent < bytes {
            sent += s.send(&data[..UDP_DATAGRAM])? as u64;
        }
        return Ok(bulk_fields(sent, started.elapsed().as_secs_f64()));
    }
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    let ping = [7u8; PING];
    let mut pong = [0u8; PING];
    let mut rtts = Vec::new();
    for _ in 0..args.pingpong.unwrap_or(1) {
        let t = Instant::now();
        s.send(&ping)?;
        s.recv(&mut pong)?;
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(pingpong_fields(rtts))
}
