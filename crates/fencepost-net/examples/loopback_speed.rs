//! One bulk transfer over loopback, server and client in this process:
//! `cargo run --release -p fencepost-net --example loopback_speed -- 1000000000`.

use fencepost_net::tools::{self, Amount};
use fencepost_net::{Endpoint, EndpointConfig};
use fencepost_proto::TransportConfig;
use std::time::Duration;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let bytes: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000_000);
    let server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), EndpointConfig::server(TransportConfig::default())).await.unwrap();
    tokio::spawn(tools::serve(server.clone(), false, true, |_| {}));
    let client = Endpoint::bind("127.0.0.1:0".parse().unwrap(), EndpointConfig::client(TransportConfig::default())).await.unwrap();
    let s = tools::send(&client, server.local_addr(), Amount::Bytes(bytes), Duration::from_secs(1), true, |i| {
        println!("{:5.1}-{:5.1} s  {:8.1} Mbit/s  retr {:5}  rtt {:.3} ms  cwnd {}", i.start, i.end, i.bits_per_second / 1e6, i.retransmissions, i.rtt_ms, i.cwnd)
    })
    .await
    .unwrap();
    println!("{:.1} Mbit/s, {} bytes in {:.2} s, hashes match: {}, retransmissions {}", s.bits_per_second / 1e6, s.bytes, s.duration_s, s.hashes_match, s.retransmissions);
}
