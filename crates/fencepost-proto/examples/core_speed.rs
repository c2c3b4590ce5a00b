//! The protocol core's own cost per datagram with one connection and with many: a client
//! and a server endpoint joined in memory (no sockets, no threads, no wake-ups), the same
//! bytes sent over 1 and over N connections, each side's time measured apart.
//!
//! On loopback, 100 connections to one server carry less than one connection does
//! (docs/speed.md, "Many connections to one server"), with both cores saturated: whatever
//! the core spends more per byte at 100 connections comes off the rate. This isolates the
//! core's share of that from the kernel's and the threads'.
//!
//! `core_speed [BYTES] [CONNECTIONS...] [reps=N]` (default 200 MB over 1 and 100
//! connections, 3 repetitions): prints, per connection count, the median (and range) of
//! nanoseconds per data datagram spent in the server's receive path, its acks, the
//! client's handling of those acks, and its sending, then the ratio to the first count.

use fencepost_proto::{ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Event, Instant, TransportConfig};
use std::time::Instant as Wall;

/// The server's and the client's addresses as each sees the other.
const SERVER: u8 = 1;
const CLIENT: u8 = 0;
/// Datagrams moved from client to server per round: as many as the net driver opens in
/// one receive pass (its RECEIVE_PASS_DATAGRAMS).
const ROUND: usize = 256;
/// Virtual time per round: 256 datagrams of about 1.4 kB at 10 Gbit/s.
const ROUND_MICROS: u64 = 290;

#[derive(Default, Clone, Copy)]
struct Costs {
    server_receive: f64,
    server_acks: f64,
    client_acks: f64,
    client_send: f64,
}

impl Costs {
    fn total(&self) -> f64 {
        self.server_receive + self.server_acks + self.client_acks + self.client_send
    }
}

/// One transfer of `bytes` over `connections`; nanoseconds per data datagram, per part.
fn run(bytes: u64, connections: usize) -> Result<Costs, String> {
    let transport = TransportConfig::default();
    let mut client = Endpoint::new(EndpointConfig::client(transport.clone()), 1);
    let mut server_config = EndpointConfig::server(transport);
    server_config.max_connections = server_config.max_connections.max(connections);
    let mut server = Endpoint::new(server_config, 2);
    let mut now = Instant::from_millis(1);
    let handles: Vec<ConnectionHandle> = (0..connections).map(|_| client.connect(now, SERVER)).collect();
    handshake(&mut client, &mut server, now)?;
    if server.len() != connections {
        return Err(format!("{} of {connections} handshakes completed", server.len()));
    }
    let per_connection = bytes / connections as u64;
    let mut written = vec![0u64; connections];
    // Shared, as `fencepost send` writes (fencepost_net::tools): the send buffer keeps
    // references to it, and each packet copies from it.
    let app_data = bytes::Bytes::from(vec![0x5au8; 65_536]);
    let mut wire: Vec<Vec<u8>> = (0..ROUND).map(|_| vec![0u8; 2048]).collect();
    let mut sizes = vec![0usize; ROUND];
    let mut acks: Vec<Vec<u8>> = Vec::new();
    let mut ack_sizes: Vec<usize> = Vec::new();
    let mut response = [0u8; 64];
    let mut received = 0u64;
    let mut datagrams = 0u64;
    let (mut cost, mut idle_rounds) = (Costs::default(), 0);
    while received < per_connection * connections as u64 {
        // The application keeps every send buffer topped up (not timed: the net layer's
        // writers run on other threads).
        for (i, &h) in handles.iter().enumerate() {
            let c = client.connection_mut(h).ok_or("a client connection vanished")?;
            while written[i] < per_connection {
                let want = (per_connection - written[i]).min(app_data.len() as u64) as usize;
                match c.write_shared(&app_data.slice(..want)) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => written[i] += n as u64,
                }
            }
        }
        let t = Wall::now();
        client.handle_timeout(now);
        let mut count = 0;
        while count < ROUND {
            let Some((_, transmit)) = client.poll_transmit(now, &mut wire[count]) else { break };
            sizes[count] = transmit.size;
            count += 1;
        }
        cost.client_send += t.elapsed().as_nanos() as f64;
        datagrams += count as u64;

        let t = Wall::now();
        server.begin_receive_pass();
        for (datagram, &size) in wire.iter_mut().zip(&sizes).take(count) {
            if let Some(DatagramEvent::NewConnection(_)) = server.handle_datagram_in_place(now, CLIENT, &mut datagram[..size], &mut response) {
                return Err("a data datagram opened a new connection".into());
            }
        }
        // The application reads everything readable, as a reader woken for it would.
        while let Some((h, event)) = server.poll_event() {
            if matches!(event, Event::Readable | Event::StreamFinished) {
                // Through `reading`, as the runtime's readers do (the endpoint's spare
                // receive buffers lent).
                let read = server.reading(h, |c| {
                    let mut got = 0;
                    while let Ok(n) = c.read_with(usize::MAX, |_| {}) {
                        if n == 0 {
                            break;
                        }
                        got += n as u64;
                    }
                    got
                });
                received += read.unwrap_or(0);
            }
        }
        cost.server_receive += t.elapsed().as_nanos() as f64;

        let t = Wall::now();
        server.handle_timeout(now);
        let mut n = 0;
        loop {
            if acks.len() == n {
                acks.push(vec![0u8; 2048]);
                ack_sizes.push(0);
            }
            let Some((_, transmit)) = server.poll_transmit(now, &mut acks[n]) else { break };
            ack_sizes[n] = transmit.size;
            n += 1;
        }
        cost.server_acks += t.elapsed().as_nanos() as f64;

        let t = Wall::now();
        for (ack, &size) in acks.iter_mut().zip(&ack_sizes).take(n) {
            client.handle_datagram_in_place(now, SERVER, &mut ack[..size], &mut response);
        }
        while client.poll_event().is_some() {}
        cost.client_acks += t.elapsed().as_nanos() as f64;

        idle_rounds = if count == 0 && n == 0 { idle_rounds + 1 } else { 0 };
        if idle_rounds > 100_000 {
            return Err(format!("stalled with {received} of {} bytes received", per_connection * connections as u64));
        }
        now += fencepost_proto::Duration::from_micros(ROUND_MICROS);
    }
    let per = |ns: f64| ns / datagrams as f64;
    Ok(Costs { server_receive: per(cost.server_receive), server_acks: per(cost.server_acks), client_acks: per(cost.client_acks), client_send: per(cost.client_send) })
}

/// Runs handshakes until neither side has anything more to say.
fn handshake(client: &mut Endpoint<u8>, server: &mut Endpoint<u8>, now: Instant) -> Result<(), String> {
    let mut buf = vec![0u8; 2048];
    let mut response = [0u8; 2048];
    for _ in 0..1_000 {
        let mut moved = false;
        while let Some((_, t)) = client.poll_transmit(now, &mut buf) {
            moved = true;
            match server.handle_datagram(now, CLIENT, &buf[..t.size], &mut response) {
                Some(DatagramEvent::NewConnection(incoming)) => {
                    server.accept(incoming).map_err(|e| format!("the server refused a connection: {e:?}"))?;
                }
                Some(DatagramEvent::Response { transmit, .. }) => {
                    client.handle_datagram(now, SERVER, &response[..transmit.size], &mut []);
                }
                _ => {}
            }
        }
        while let Some((_, t)) = server.poll_transmit(now, &mut buf) {
            moved = true;
            client.handle_datagram(now, SERVER, &buf[..t.size], &mut response);
        }
        if !moved {
            return Ok(());
        }
    }
    Err("the handshakes did not settle".into())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut bytes: u64 = 200_000_000;
    let mut counts: Vec<usize> = Vec::new();
    let mut reps = 3;
    for arg in std::env::args().skip(1) {
        if let Some(r) = arg.strip_prefix("reps=") {
            reps = r.parse().ok().filter(|&r| r > 0).unwrap_or_else(|| usage(&format!("reps: expected a positive count, got {r:?}")));
        } else if let Some(mb) = arg.strip_suffix("MB") {
            bytes = mb.parse::<u64>().map(|m| m * 1_000_000).unwrap_or_else(|_| usage(&format!("BYTES: expected a size such as 200MB, got {arg:?}")));
        } else {
            counts.push(arg.parse().ok().filter(|&n| n > 0).unwrap_or_else(|| usage(&format!("CONNECTIONS: expected a positive count, got {arg:?}"))));
        }
    }
    if counts.is_empty() {
        counts = vec![1, 100];
    }
    println!("{} MB over each connection count, {reps} repetitions; ns per data datagram, median (min-max)", bytes / 1_000_000);
    println!("{:>11} {:>22} {:>22} {:>22} {:>22} {:>22}", "connections", "server receive+read", "server acks", "client acks", "client send", "total");
    let mut first_total = None;
    for &n in &counts {
        let mut runs = Vec::new();
        let mut failed = 0;
        for _ in 0..reps {
            match run(bytes, n) {
                Ok(c) => runs.push(c),
                Err(e) => {
                    failed += 1;
                    eprintln!("core_speed: {n} connections: {e}");
                }
            }
        }
        if runs.is_empty() {
            println!("{n:>11} all {failed} runs failed");
            continue;
        }
        let col = |f: fn(&Costs) -> f64| {
            let v: Vec<f64> = runs.iter().map(f).collect();
            let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            format!("{:.0} ({:.0}-{:.0})", median(v), lo, hi)
        };
        let total = median(runs.iter().map(Costs::total).collect());
        let ratio = first_total.map_or(String::new(), |f: f64| format!("  x{:.2} of {} connection(s)", total / f, counts[0]));
        first_total.get_or_insert(total);
        println!(
            "{n:>11} {:>22} {:>22} {:>22} {:>22} {:>22}{ratio}{}",
            col(|c| c.server_receive),
            col(|c| c.server_acks),
            col(|c| c.client_acks),
            col(|c| c.client_send),
            col(Costs::total),
            if failed > 0 { format!("  ({failed} failed)") } else { String::new() }
        );
    }
}

fn usage(why: &str) -> ! {
    eprintln!("core_speed: {why}\nusage: core_speed [BYTES e.g. 200MB] [CONNECTIONS...] [reps=N]");
    std::process::exit(2)
}
