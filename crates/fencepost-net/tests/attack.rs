//! An on-path attacker on loopback: a relay between client and server that sees
//! every packet, forwards it, and forges packets with the right connection ids,
//! packet numbers and handshakes: tampered copies of real packets sent ahead of
//! them, replays, forged stateless and plaintext resets, repeated Initials,
//! forged Accepts and Retries. Every forgery must be dropped and counted, and
//! the transfer must arrive byte-exact at (nearly) its undisturbed rate.

use fencepost_net::{Endpoint, EndpointConfig};
use fencepost_proto::{ConnectionStats, TransportConfig};
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::net::UdpSocket;

/// The relay's bottleneck for client-to-server packets: the path's rate is set here, so
/// both runs measure the protocol, not how fast the relay can copy.
const BOTTLENECK_BPS: f64 = 50e6;
const BYTES: usize = 16_000_000;
/// The most of the link's time a late wake-up of the relay's pacer is made up for.
const CATCH_UP: Duration = Duration::from_millis(5);

#[derive(Default)]
struct Forged {
    to_server: AtomicU64,
    to_client: AtomicU64,
}

/// A deterministic byte source for the attacker's choices.
struct Dice(u64);
impl Dice {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
}

fn cid(packet: &[u8]) -> [u8; 4] {
    [packet[2], packet[3], packet[4], packet[5]]
}

/// Forgeries made from one genuine packet, to be sent to the same destination ahead of it.
fn forge(packet: &[u8], history: &Mutex<VecDeque<Vec<u8>>>, other_cid: Option<[u8; 4]>, n: u64, dice: &mut Dice) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let protected = packet.len() > 26 && packet[0] == 2 && (2..=6).contains(&packet[1]);
    if protected && n % 3 == 0 {
        // A tampered copy: right header, ids and packet number; one byte of the sealed body changed.
        let mut copy = packet.to_vec();
        let at = 10 + (dice.next() as usize) % (copy.len() - 10);
        copy[at] ^= 1 << (dice.next() % 8);
        out.push(copy);
    }
    if n % 5 == 0 {
        let history = history.lock().unwrap();
        if let Some(old) = history.get((dice.next() as usize) % history.len().max(1)) {
            out.push(old.clone()); // a replay
        }
    }
    if protected && n % 7 == 0 {
        // A forged ack or data packet of the next packet numbers: the right ids, random contents.
        let mut fake = packet[..10].to_vec();
        fake[1] = 2 + (dice.next() % 5) as u8;
        fake.extend((0..(20 + dice.next() % 1400)).map(|_| dice.next() as u8));
        out.push(fake);
    }
    if n % 11 == 0 {
        if let Some(other) = other_cid {
            // A stateless reset naming the peer's id, with a guessed token.
            let mut reset = vec![2, 7];
            reset.extend_from_slice(&other);
            reset.extend((0..16).map(|_| dice.next() as u8));
            out.push(reset);
        }
        // A plaintext reset with the right id, as version 1 would take it.
        let mut plain = vec![1, 5];
        plain.extend_from_slice(&cid(packet));
        plain.push(0);
        out.push(plain);
    }
    out
}

/// The relay: forwards client <-> server through one socket (the server sees the relay
/// as its client, the client sees it as its server), and forges when `attack` is set.
/// Forgeries leave from the same socket, from a task of their own, so forging does not
/// hold up the genuine packets (an attacker on the path adds packets; it does not slow it).
async fn relay(socket: Arc<UdpSocket>, server: SocketAddr, attack: bool, forged: Arc<Forged>, stop: Arc<AtomicBool>) {
    let (forge_tx, mut forge_rx) = tokio::sync::mpsc::unbounded_channel::<(Vec<u8>, SocketAddr)>();
    let forger_socket = socket.clone();
    let forger = tokio::spawn(async move {
        while let Some((packet, to)) = forge_rx.recv().await {
            let _ = forger_socket.send_to(&packet, to).await;
        }
    });
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(512);
    // The bottleneck toward the server: a 512-packet droptail queue drained at BOTTLENECK_BPS.
    let out = socket.clone();
    // Replays are of packets that have reached the server already: replaying one still in
    // the queue would only race it (and stand in for it if the queue then dropped it).
    let delivered_to_server: Arc<Mutex<VecDeque<Vec<u8>>>> = Arc::default();
    let delivered = delivered_to_server.clone();
    let pacer = tokio::spawn(async move {
        let mut free_at = tokio::time::Instant::now();
        loop {
            // A packet that was already queued leaves once the one before it is serialized,
            // however late this task's timer woke: the link would have sent it then, and
            // what a late wake-up held back goes out at once (at most CATCH_UP of it).
            // Losing that time instead made the rate the timer's punctuality: 26 Mbit/s of
            // the 50 (4.9 s for the 16 MB), and in a CI run in one of this host's slow spells
            // 5.3-8.4 s, the attacked transfer at 78-82 % of the undisturbed one's rate. Now
            // both take 2.57-2.60 s, and 3.5 s with the process stopped 30 ms of every 100
            // (7 s before).
            let packet = match rx.try_recv() {
                Ok(packet) => packet,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => break,
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => {
                    let Some(packet) = rx.recv().await else { break };
                    // It found the link idle: it starts now.
                    free_at = free_at.max(tokio::time::Instant::now());
                    packet
                }
            };
            let now = tokio::time::Instant::now();
            free_at = free_at.max(now.checked_sub(CATCH_UP).unwrap_or(now)) + Duration::from_secs_f64((packet.len() * 8) as f64 / BOTTLENECK_BPS);
            // Timers tick in milliseconds: wait only once a millisecond's worth is queued ahead.
            if free_at > now + Duration::from_millis(1) {
                tokio::time::sleep_until(free_at).await;
            }
            let _ = out.send_to(&packet, server).await;
            let mut d = delivered.lock().unwrap();
            d.push_back(packet);
            if d.len() > 256 {
                d.pop_front();
            }
        }
    });
    let mut client: Option<SocketAddr> = None;
    let mut buf = vec![0u8; 65_536];
    let mut dice = Dice(7);
    let to_client_history = Mutex::new(VecDeque::new());
    let (mut client_cid, mut server_cid): (Option<[u8; 4]>, Option<[u8; 4]>) = (None, None);
    let mut initial: Option<Vec<u8>> = None;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Ok(Ok((len, from))) = tokio::time::timeout(Duration::from_millis(50), socket.recv_from(&mut buf)).await else { continue };
        let packet = buf[..len].to_vec();
        n += 1;
        if from == server {
            let Some(client) = client else { continue };
            client_cid = client_cid.or(Some(cid(&packet)));
            if attack {
                for f in forge(&packet, &to_client_history, server_cid, n, &mut dice) {
                    let _ = forge_tx.send((f, client));
                    forged.to_client.fetch_add(1, Ordering::Relaxed);
                }
                if n % 13 == 0 {
                    // A forged Accept and a forged Retry to the client.
                    if let Some(c) = client_cid {
                        let mut accept = vec![2, 1, c[0], c[1], c[2], c[3], 2, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, 1, 0, 122];
                        accept.extend((0..122).map(|_| dice.next() as u8));
                        let mut retry = vec![2, 1, c[0], c[1], c[2], c[3], 3, 0, 0, 0, 1, 24];
                        retry.extend((0..24).map(|_| dice.next() as u8));
                        for f in [accept, retry] {
                            let _ = forge_tx.send((f, client));
                            forged.to_client.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            let _ = socket.send_to(&packet, client).await;
            let mut history = to_client_history.lock().unwrap();
            history.push_back(packet);
            if history.len() > 256 {
                history.pop_front();
            }
        } else {
            client = Some(from);
            if packet.len() > 6 && packet[1] == 1 && packet[6] == 1 {
                initial = Some(packet.clone());
            } else if packet[0] == 2 && packet[1] != 1 {
                server_cid = server_cid.or(Some(cid(&packet)));
            }
            if attack && server_cid.is_some() {
                let mut forgeries = forge(&packet, &delivered_to_server, client_cid, n, &mut dice);
                if n % 13 == 0 {
                    // The client's Initial again, long after the handshake.
                    forgeries.extend(initial.clone());
                }
                for f in forgeries {
                    let _ = forge_tx.send((f, server));
                    forged.to_server.fetch_add(1, Ordering::Relaxed);
                }
            }
            // A full queue drops, as a router would.
            let _ = tx.try_send(packet);
        }
    }
    drop(tx);
    drop(forge_tx);
    let _ = pacer.await;
    let _ = forger.await;
}

/// Datagrams this host's kernel dropped for full socket buffers so far (`/proc/net/snmp`).
fn kernel_receive_drops() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let udp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp:")).collect();
    if udp.len() != 2 {
        return 0;
    }
    let names = udp[0].split_whitespace();
    let values = udp[1].split_whitespace();
    names.zip(values).find(|(n, _)| *n == "RcvbufErrors").and_then(|(_, v)| v.parse().ok()).unwrap_or(0)
}

struct Outcome {
    seconds: f64,
    /// Datagrams the kernel dropped during the run because a socket's buffer was full.
    kernel_drops: u64,
    intact: bool,
    client: ConnectionStats,
    server: ConnectionStats,
    server_endpoint_drops: u64,
    client_endpoint_drops: u64,
    forged_to_server: u64,
    forged_to_client: u64,
}

fn dropped(s: &ConnectionStats) -> u64 {
    s.unauthenticated_packets + s.replayed_packets + s.malformed_packets + s.foreign_packets
}

async fn transfer(attack: bool) -> Outcome {
    let server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), EndpointConfig::server(TransportConfig::default())).await.unwrap();
    let key = server.public_key().expect("a protected server has a key");
    let mut client_transport = TransportConfig::default();
    if let fencepost_proto::ProtectionConfig::Noise(noise) = &mut client_transport.protection {
        // The client knows the server's key: the handshake authenticates the server.
        noise.peer = Some(key);
    }
    let client = Endpoint::bind("127.0.0.1:0".parse().unwrap(), EndpointConfig::client(client_transport)).await.unwrap();
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let relay_addr = socket.local_addr().unwrap();
    let forged = Arc::new(Forged::default());
    let stop = Arc::new(AtomicBool::new(false));
    let relay = tokio::spawn(relay(socket, server.local_addr(), attack, forged.clone(), stop.clone()));

    let server_stats = Arc::new(Mutex::new(None));
    let sink_stats = server_stats.clone();
    let accepting = server.clone();
    let sink = tokio::spawn(async move {
        let mut conn = accepting.accept().await.expect("a connection");
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = conn.read(&mut buf).await.expect("the sink reads to the end");
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
        }
        conn.write_all(&hash.finalize()).await.unwrap();
        conn.finish();
        let _ = tokio::time::timeout(Duration::from_secs(10), conn.closed()).await;
        *sink_stats.lock().unwrap() = Some(conn.stats());
    });

    let data: Vec<u8> = (0..BYTES).map(|i| ((i * 2654435761usize) >> 13) as u8).collect();
    let kernel_drops_before = kernel_receive_drops();
    let expected = Sha256::digest(&data);
    let started = Instant::now();
    let mut conn = client.connect(relay_addr).await.expect("the handshake completes through the relay");
    conn.write_all(&data).await.unwrap();
    conn.finish();
    let mut receipt = Vec::new();
    conn.read_to_end(&mut receipt).await.unwrap();
    let seconds = started.elapsed().as_secs_f64();
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.closed()).await;
    tokio::time::timeout(Duration::from_secs(20), sink).await.expect("the sink finishes").unwrap();
    stop.store(true, Ordering::Relaxed);
    relay.await.unwrap();
    let server_endpoint = server.stats();
    let client_endpoint = client.stats();
    let outcome = Outcome {
        seconds,
        kernel_drops: kernel_receive_drops() - kernel_drops_before,
        intact: receipt == expected.as_slice(),
        client: conn.stats(),
        server: server_stats.lock().unwrap().clone().unwrap(),
        server_endpoint_drops: server_endpoint.wrong_version + server_endpoint.malformed + server_endpoint.unknown_connection,
        client_endpoint_drops: client_endpoint.wrong_version + client_endpoint.malformed + client_endpoint.unknown_connection,
        forged_to_server: forged.to_server.load(Ordering::Relaxed),
        forged_to_client: forged.to_client.load(Ordering::Relaxed),
    };
    server.shutdown();
    client.shutdown();
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_path_attacker_changes_nothing() {
    // The rate is compared within a pair of runs; a host busy elsewhere through one pair
    // gets a second pair (a CI run saw the attacked transfer at 84 % of the undisturbed
    // one's rate, 6.66 s against 5.60; alone, 106 %). Every pair must pass every other check.
    let mut ratios = Vec::new();
    for _ in 0..2 {
        let ratio = attacked_against_calm().await;
        if ratio >= 0.9 {
            return;
        }
        ratios.push(ratio);
    }
    panic!("under attack the transfer kept less than 90 % of its rate in two pairs of runs: {ratios:.2?}");
}

/// One undisturbed transfer and one under attack; checks that every forgery was dropped and
/// counted and nothing forged got in, and returns the attacked run's share of the rate.
async fn attacked_against_calm() -> f64 {
    let calm = transfer(false).await;
    assert!(calm.intact);
    let attacked = transfer(true).await;
    assert!(attacked.intact, "the stream arrives byte-exact under attack");
    // Forgeries to the client are made from the server's packets, its acks, which come
    // fewer per byte when the receiver's thread is held up and reads in larger batches: 900
    // a run here, 570-620 with the process stopped 30 ms of every 100 or eight busy loops
    // beside it.
    assert!(attacked.forged_to_server > 500 && attacked.forged_to_client > 300, "{} / {}", attacked.forged_to_server, attacked.forged_to_client);
    // Every forgery is dropped and counted by the endpoint or the connection it named,
    // but those the kernel itself dropped when a socket's buffer overflowed under the
    // burst (counted by the kernel, on a loaded machine a few percent).
    let at_server = attacked.server_endpoint_drops + dropped(&attacked.server) - dropped(&calm.server);
    let at_client = attacked.client_endpoint_drops + dropped(&attacked.client) - dropped(&calm.client);
    let uncounted = (attacked.forged_to_server - at_server.min(attacked.forged_to_server)) + (attacked.forged_to_client - at_client.min(attacked.forged_to_client));
    assert!(
        uncounted <= attacked.kernel_drops + 5,
        "forgeries not counted: {uncounted} (server counted {at_server} of {}, client {at_client} of {}; the kernel dropped {})",
        attacked.forged_to_server,
        attacked.forged_to_client,
        attacked.kernel_drops
    );
    assert!(attacked.kernel_drops * 10 < attacked.forged_to_server + attacked.forged_to_client, "the kernel dropped most of the attack: {}", attacked.kernel_drops);
    // A replayed Initial that reaches the server before its handshake is confirmed is a
    // retransmission by every measure: it is answered (one Accept for one Initial), and the
    // client counts that Accept's copy. A few such are all that may go the other way.
    assert!(at_server <= attacked.forged_to_server + 5 && at_client <= attacked.forged_to_client + 5, "genuine packets were counted as forged");
    // Nothing forged got in: no resets, no protocol violations, no data beyond what was sent.
    for s in [&attacked.client, &attacked.server] {
        assert_eq!(s.protocol_violations, 0, "{s:?}");
    }
    let ratio = calm.seconds / attacked.seconds;
    println!(
        "undisturbed {:.2} s, attacked {:.2} s: {:.0} % of the rate; forged {} to the server, {} to the client; kernel socket drops {}",
        calm.seconds,
        attacked.seconds,
        ratio * 100.0,
        attacked.forged_to_server,
        attacked.forged_to_client,
        attacked.kernel_drops
    );
    ratio
}
