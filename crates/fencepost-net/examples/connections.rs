//! Opens many connections to one fencepost server, echoes a message on each, keeps
//! them open and idle, and reports the time per connection. Driven by
//! `bash bench/connections.sh`, which also measures the server's idle CPU.
//!
//! `connections TARGET N [IDLE_SECONDS]`: prints `opened N in S s (U us per connection)`,
//! then `idle` and holds the connections for IDLE_SECONDS (default 0) before closing them.

use fencepost_net::{Endpoint, EndpointConfig};
use fencepost_proto::TransportConfig;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;

/// Handshakes in progress at once: enough to keep both ends busy, not a flood the socket buffers drop.
const CONCURRENT: usize = 256;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: connections HOST:PORT N [IDLE_SECONDS]");
        std::process::exit(2)
    };
    let target: SocketAddr = args.get(1).and_then(|a| a.parse().ok()).unwrap_or_else(|| usage());
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or_else(|| usage());
    let idle: u64 = args.get(3).map_or(Some(0), |a| a.parse().ok()).unwrap_or_else(|| usage());

    let mut config = EndpointConfig::client(TransportConfig::default());
    config.max_connections = n + 16;
    let endpoint = Endpoint::bind("127.0.0.1:0".parse().expect("a literal address"), config).await.expect("bind a client socket");
    let gate = Arc::new(Semaphore::new(CONCURRENT));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let endpoint = endpoint.clone();
        let gate = gate.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.expect("the semaphore stays open");
            let mut conn = endpoint.connect(target).await.map_err(|e| e.to_string())?;
            let message = format!("connection {i}");
            conn.write_all(message.as_bytes()).await.map_err(|e| e.to_string())?;
            let mut echoed = vec![0u8; message.len()];
            conn.read_exact(&mut echoed).await.map_err(|e| e.to_string())?;
            if echoed != message.as_bytes() {
                return Err(format!("connection {i}: wrong echo"));
            }
            Ok::<_, String>(conn)
        }));
    }
    let mut open = Vec::with_capacity(n);
    let mut failed = 0;
    for task in tasks {
        match task.await.expect("connection task") {
            Ok(conn) => open.push(conn),
            Err(e) => {
                failed += 1;
                if failed <= 3 {
                    eprintln!("failed: {e}");
                }
            }
        }
    }
    let elapsed = started.elapsed();
    println!(
        "opened {} in {:.3} s ({:.1} us per connection), {} failed",
        open.len(),
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / n as f64,
        failed
    );
    println!("idle");
    tokio::time::sleep(Duration::from_secs(idle)).await;
    for conn in &open {
        conn.finish();
    }
    drop(open);
    if failed > 0 {
        std::process::exit(1);
    }
}
