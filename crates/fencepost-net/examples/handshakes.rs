//! Handshakes per second, measured two ways in one run:
//!
//! - `core`: a client and a server endpoint in memory (no sockets), one connection at
//!   a time: the protocol's own cost (with protection: the Noise handshake's Curve25519
//!   operations, the retry token's MAC, the Accept);
//! - `loopback`: real endpoints on 127.0.0.1, 64 handshakes in flight at a time.
//!
//! Each for plaintext (version 1), protected (NX), protected with the server's key
//! pinned (NK), and protected without address validation (no Retry). Prints a table and
//! (with `--json`) the figures as JSON. `cargo run --release -p fencepost-net --example handshakes [N]`.

use fencepost_net::{Endpoint as NetEndpoint, EndpointConfig as NetConfig};
use fencepost_proto::{DatagramEvent, Endpoint, EndpointConfig, Instant, ProtectionConfig, StaticKey, TransportConfig};
use std::sync::Arc;
use std::time::Instant as Clock;
use tokio::sync::Semaphore;

fn variants() -> Vec<(&'static str, TransportConfig, TransportConfig)> {
    let plain = TransportConfig::default().insecure();
    let nx = TransportConfig::default();
    let key = StaticKey::from_seed([9; 32]);
    let mut nk_server = TransportConfig::default();
    let mut nk_client = TransportConfig::default();
    if let (ProtectionConfig::Noise(s), ProtectionConfig::Noise(c)) = (&mut nk_server.protection, &mut nk_client.protection) {
        s.local = Some(key.clone());
        c.peer = Some(key.public());
    }
    let mut no_retry = TransportConfig::default();
    if let ProtectionConfig::Noise(n) = &mut no_retry.protection {
        n.validate_addresses = false;
    }
    vec![
        ("plaintext (v1)", plain.clone(), plain),
        ("protected, NX", nx.clone(), nx),
        ("protected, NK (pinned key)", nk_client, nk_server),
        ("protected, no Retry", no_retry.clone(), no_retry),
    ]
}

/// Handshakes per second through two endpoints in memory, one after another.
fn core_rate(client_t: &TransportConfig, server_t: &TransportConfig, n: usize) -> f64 {
    let mut client = Endpoint::new(EndpointConfig::client(client_t.clone()), 1);
    let mut server_config = EndpointConfig::server(server_t.clone());
    server_config.max_connections = n + 1;
    let mut server = Endpoint::new(server_config, 2);
    let mut buf = vec![0u8; 2048];
    let mut response = vec![0u8; 2048];
    let now = Instant::from_millis(1);
    let started = Clock::now();
    for _ in 0..n {
        let h = client.connect(now, 1u8);
        loop {
            let mut moved = false;
            while let Some((_, t)) = client.poll_transmit(now, &mut buf) {
                moved = true;
                match server.handle_datagram(now, 0, &buf[..t.size], &mut response) {
                    Some(DatagramEvent::NewConnection(incoming)) => {
                        server.accept(incoming).expect("accepted");
                    }
                    Some(DatagramEvent::Response { transmit, .. }) => {
                        let answer = response[..transmit.size].to_vec();
                        client.handle_datagram(now, 1, &answer, &mut response);
                    }
                    _ => {}
                }
            }
            while let Some((_, t)) = server.poll_transmit(now, &mut buf) {
                moved = true;
                let packet = buf[..t.size].to_vec();
                client.handle_datagram(now, 1, &packet, &mut response);
            }
            if !moved {
                break;
            }
        }
        assert!(client.connection(h).is_some_and(|c| c.is_established()));
        client.remove(h);
    }
    n as f64 / started.elapsed().as_secs_f64()
}

async fn loopback_rate(client_t: &TransportConfig, server_t: &TransportConfig, n: usize) -> f64 {
    let mut sc = NetConfig::server(server_t.clone());
    sc.max_connections = n + 16;
    let server = NetEndpoint::bind("127.0.0.1:0".parse().unwrap(), sc).await.expect("bind");
    let target = server.local_addr();
    let accepting = server.clone();
    tokio::spawn(async move { while let Some(c) = accepting.accept().await { drop(c) } });
    let mut cc = NetConfig::client(client_t.clone());
    cc.max_connections = n + 16;
    let client = NetEndpoint::bind("127.0.0.1:0".parse().unwrap(), cc).await.expect("bind");
    let gate = Arc::new(Semaphore::new(64));
    let started = Clock::now();
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let client = client.clone();
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            let conn = client.connect(target).await.expect("connects");
            conn.abort();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    client.shutdown();
    server.shutdown();
    rate
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let n: usize = args.iter().skip(1).find_map(|a| a.parse().ok()).unwrap_or(5000);
    let mut rows = Vec::new();
    for (name, client, server) in variants() {
        let core = core_rate(&client, &server, n);
        let lo = loopback_rate(&client, &server, n).await;
        rows.push((name, core, lo));
    }
    if json {
        let body: Vec<String> = rows.iter().map(|(n, c, l)| format!("{{\"variant\": \"{n}\", \"core_per_s\": {c:.0}, \"loopback_per_s\": {l:.0}}}")).collect();
        println!("[{}]", body.join(", "));
        return;
    }
    println!("handshakes per second ({n} each; loopback: 64 in flight, each connection opened then aborted)");
    println!("{:<28} {:>14} {:>16}", "variant", "core (memory)", "loopback (UDP)");
    for (name, core, lo) in &rows {
        println!("{name:<28} {core:>14.0} {lo:>16.0}");
    }
}
