//! The measuring tools behind `fencepost serve`, `fencepost send` and
//! `fencepost echo-bench`.
//!
//! `send` streams bytes to a `serve` sink and finishes; the sink answers with
//! the byte count (8 bytes, big-endian) and the SHA-256 of what it read, then
//! finishes too, so the sender can check the stream arrived intact. A sink told
//! not to hash (`--no-verify`) sends 32 zero bytes in place of the hash, and the
//! sender then checks the count alone.

use crate::{Connection, Endpoint, NetError};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the sink sends back: byte count and SHA-256.
const RECEIPT_LEN: usize = 8 + 32;
/// How long a finished side waits for the other to finish before giving up.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One connection's account, as the server saw it.
#[derive(Clone, Debug, Serialize)]
pub struct ServedConnection {
    pub remote: String,
    pub mode: &'static str,
    pub bytes: u64,
    pub duration_s: f64,
    pub goodput_bps: f64,
    pub sha256: String,
    pub packets_sent: u64,
    pub packets_received: u64,
    pub retransmissions: u64,
    /// Data packets that arrived twice, and those dropped for want of room (beyond the
    /// receive window or the endpoint's buffer budget).
    pub duplicate_packets_received: u64,
    pub packets_dropped_for_room: u64,
    pub error: Option<String>,
    /// Bytes read by each multiple of [`SERIES_INTERVAL`] after the connection was accepted
    /// (so a timed run's goodput can be taken over the sender's time alone).
    pub delivered_series: Vec<u64>,
    /// When the last byte was read, seconds after the connection was accepted.
    pub last_byte_s: f64,
    /// When the connection was accepted, in seconds since the Unix epoch (to line it up with the sender's clock on one host).
    pub accepted_unix: f64,
}

/// Now, in seconds since the Unix epoch.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// The spacing of [`ServedConnection::delivered_series`].
pub const SERIES_INTERVAL: Duration = Duration::from_millis(100);

/// Serves every incoming connection until the endpoint stops: a sink that
/// answers with a receipt, or (`echo`) an echo. Each connection's account goes to `report`.
/// Without `verify` the sink counts bytes and does not hash them.
pub async fn serve(endpoint: Endpoint, echo: bool, verify: bool, report: impl Fn(ServedConnection) + Send + Sync + Clone + 'static) {
    while let Some(conn) = endpoint.accept().await {
        let report = report.clone();
        tokio::spawn(async move {
            let summary = serve_one(conn, echo, verify).await;
            report(summary);
        });
    }
}

async fn serve_one(mut conn: Connection, echo: bool, verify: bool) -> ServedConnection {
    let started = Instant::now();
    let accepted_unix = unix_now();
    let remote = conn.remote_addr().to_string();
    let mut hash = verify.then(Sha256::new);
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    let mut series = Vec::new();
    let mut last_byte_s = 0.0;
    let result: Result<(), std::io::Error> = async {
        loop {
            let n = conn.read(&mut buf).await?;
            // Boundaries passed while waiting for this read saw the count before it.
            let boundaries = (started.elapsed().as_micros() / SERIES_INTERVAL.as_micros()) as usize;
            while series.len() < boundaries {
                series.push(bytes);
            }
            if n == 0 {
                break;
            }
            bytes += n as u64;
            last_byte_s = started.elapsed().as_secs_f64();
            if let Some(hash) = hash.as_mut() {
                hash.update(&buf[..n]);
            }
            if echo {
                conn.write_all(&buf[..n]).await?;
            }
        }
        if !echo {
            let mut receipt = [0u8; RECEIPT_LEN];
            receipt[..8].copy_from_slice(&bytes.to_be_bytes());
            if let Some(hash) = &hash {
                receipt[8..].copy_from_slice(&hash.clone().finalize());
            }
            conn.write_all(&receipt).await?;
        }
        conn.finish();
        tokio::time::timeout(CLOSE_WAIT, conn.closed())
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "the client did not finish closing"))?
            .map_err(std::io::Error::from)
    }
    .await;
    let duration = started.elapsed().as_secs_f64();
    let stats = conn.stats();
    ServedConnection {
        remote,
        mode: if echo { "echo" } else { "sink" },
        bytes,
        duration_s: duration,
        goodput_bps: if duration > 0.0 { bytes as f64 * 8.0 / duration } else { 0.0 },
        sha256: hash.map(|h| hex(&h.finalize())).unwrap_or_default(),
        packets_sent: stats.packets_sent,
        packets_received: stats.packets_received,
        retransmissions: stats.retransmissions,
        duplicate_packets_received: stats.duplicate_packets_received,
        packets_dropped_for_room: stats.beyond_window_packets + stats.over_budget_packets,
        error: result.err().map(|e| e.to_string()),
        delivered_series: series,
        last_byte_s,
        accepted_unix,
    }
}

/// How much `send` sends.
#[derive(Clone, Copy, Debug)]
pub enum Amount {
    Bytes(u64),
    Time(Duration),
}

/// One reporting interval of a `send`.
#[derive(Clone, Debug, Serialize)]
pub struct Interval {
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub retransmissions: u64,
    pub rtt_ms: f64,
    pub cwnd: u64,
    pub bytes_in_flight: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct SendSummary {
    pub remote: String,
    pub bytes: u64,
    pub duration_s: f64,
    pub bits_per_second: f64,
    pub sha256: String,
    /// The sink's count and hash, from its receipt; without a receipt (the flush did
    /// not finish in time), the bytes the sink acknowledged and an empty hash.
    pub receiver_bytes: u64,
    /// Empty when the sink did not hash (`serve --no-verify`) or sent no receipt.
    pub receiver_sha256: String,
    /// Both ends hashed the stream and the hashes agree.
    pub hashes_match: bool,
    /// Both ends hashed the stream, so `hashes_match` says something; without it only the byte count was checked.
    pub verified: bool,
    /// Everything written arrived and the sink's receipt came back.
    pub complete: bool,
    /// Why the transfer is incomplete, when it is.
    pub incomplete_reason: Option<String>,
    pub packets_sent: u64,
    pub data_packets_sent: u64,
    pub retransmissions: u64,
    /// Packets declared lost, those later found to have arrived after all, and timeouts:
    /// on a loss-free path, retransmissions with these show a sender that gave up too soon.
    pub packets_lost: u64,
    pub spurious_retransmissions: u64,
    pub retransmission_timeouts: u64,
    pub acks_received: u64,
    pub rtt_ms: f64,
    /// When `send` began connecting, in seconds since the Unix epoch.
    pub connect_started_unix: f64,
}

/// After a timed send's writing time ends, how long it may take to deliver what was
/// written and get the receipt: the writing time again, at least 2 s and at most 10 s.
fn flush_grace(limit: Duration) -> Duration {
    limit.clamp(Duration::from_secs(2), CLOSE_WAIT)
}

/// Streams bytes to a `serve` sink, reporting every `interval`, and checks the sink's receipt
/// (its SHA-256 too when `verify` and the sink hashed).
/// A timed send is bounded as a whole: it writes until the time is up (even while the
/// window is closed), then allows [`flush_grace`] for the rest to arrive, and reports.
pub async fn send(
    endpoint: &Endpoint,
    target: SocketAddr,
    amount: Amount,
    interval: Duration,
    verify: bool,
    mut on_interval: impl FnMut(Interval),
) -> Result<SendSummary, NetError> {
    let connect_started_unix = unix_now();
    let mut conn = endpoint.connect(target).await?;
    // A buffer of random bytes, written over and over: cheap to produce at line rate.
    let mut chunk = vec![0u8; 256 * 1024];
    Xoshiro256PlusPlus::seed_from_u64(0x5eed).fill_bytes(&mut chunk);
    let mut hash = verify.then(Sha256::new);
    let started = Instant::now();
    let writing_ends = match amount {
        Amount::Time(limit) => Some(tokio::time::Instant::from_std(started + limit)),
        Amount::Bytes(_) => None,
    };
    let mut next_report = started + interval;
    let mut last = (0.0f64, 0u64, 0u64); // (time, bytes, retransmissions) at the last report
    let mut sent = 0u64;
    let mut offset = 0usize;
    let io = |e: std::io::Error| NetError::Io(e);
    loop {
        let remaining = match amount {
            Amount::Bytes(total) => total - sent,
            Amount::Time(limit) if started.elapsed() < limit => u64::MAX,
            Amount::Time(_) => 0,
        };
        if remaining == 0 {
            break;
        }
        let n = remaining.min((chunk.len() - offset) as u64) as usize;
        let piece = &chunk[offset..offset + n];
        // `send` takes what fits (waiting for room) and nothing if the time runs out first.
        let written = match writing_ends {
            Some(end) => match tokio::time::timeout_at(end, conn.send(piece)).await {
                Ok(result) => result.map_err(io)?,
                Err(_) => break,
            },
            None => conn.send(piece).await.map_err(io)?,
        };
        if let Some(hash) = hash.as_mut() {
            hash.update(&piece[..written]);
        }
        sent += written as u64;
        offset = (offset + written) % chunk.len();
        let now = Instant::now();
        if now >= next_report {
            let t = (now - started).as_secs_f64();
            let stats = conn.stats();
            let (srtt, cwnd, in_flight) = conn.path();
            on_interval(Interval {
                start: last.0,
                end: t,
                bytes: sent - last.1,
                bits_per_second: (sent - last.1) as f64 * 8.0 / (t - last.0).max(1e-9),
                retransmissions: stats.retransmissions - last.2,
                rtt_ms: srtt.as_secs_f64() * 1e3,
                cwnd,
                bytes_in_flight: in_flight,
            });
            last = (t, sent, stats.retransmissions);
            next_report = now + interval;
        }
    }
    let writing_s = started.elapsed().as_secs_f64();
    conn.finish();
    let mut receipt = Vec::with_capacity(RECEIPT_LEN);
    let flushed = match amount {
        Amount::Time(limit) => tokio::time::timeout(flush_grace(limit), conn.read_to_end(&mut receipt)).await.map_err(|_| flush_grace(limit)),
        Amount::Bytes(_) => Ok(conn.read_to_end(&mut receipt).await),
    };
    let incomplete_reason = match flushed {
        Ok(result) => {
            result.map_err(io)?;
            None
        }
        Err(grace) => Some(format!(
            "the time bound ended the flush: after {writing_s:.1} s of writing, {:.1} s were not enough to deliver the rest",
            grace.as_secs_f64()
        )),
    };
    let duration = started.elapsed().as_secs_f64();
    let stats = conn.stats();
    let (srtt, ..) = conn.path();
    let acknowledged = conn.acknowledged();
    if incomplete_reason.is_some() {
        // Nothing more will be waited for: tell the sink instead of leaving it to time out.
        conn.abort();
    } else {
        let _ = tokio::time::timeout(CLOSE_WAIT, conn.closed()).await;
    }
    let (receiver_bytes, receiver_sha256) = if receipt.len() == RECEIPT_LEN {
        let hashed = receipt[8..].iter().any(|&b| b != 0);
        (u64::from_be_bytes(receipt[..8].try_into().expect("8 bytes")), if hashed { hex(&receipt[8..]) } else { String::new() })
    } else {
        (acknowledged, String::new())
    };
    let sha256 = hash.map(|h| hex(&h.finalize())).unwrap_or_default();
    let verified = !sha256.is_empty() && !receiver_sha256.is_empty();
    let hashes_match = verified && receiver_bytes == sent && receiver_sha256 == sha256;
    // Without both hashes, the count is all there is to check; a receipt must have come back.
    let complete = if verified { hashes_match } else { receipt.len() == RECEIPT_LEN && receiver_bytes == sent };
    Ok(SendSummary {
        remote: target.to_string(),
        bytes: sent,
        duration_s: duration,
        bits_per_second: sent as f64 * 8.0 / duration.max(1e-9),
        complete,
        incomplete_reason: incomplete_reason.or_else(|| (!complete).then(|| "the sink's receipt does not match what was sent".to_string())),
        hashes_match,
        verified,
        sha256,
        receiver_bytes,
        receiver_sha256,
        packets_sent: stats.packets_sent,
        data_packets_sent: stats.data_packets_sent,
        retransmissions: stats.retransmissions,
        packets_lost: stats.packets_lost,
        spurious_retransmissions: stats.spurious_retransmissions,
        retransmission_timeouts: stats.retransmission_timeouts,
        acks_received: stats.acks_received,
        rtt_ms: srtt.as_secs_f64() * 1e3,
        connect_started_unix,
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct EchoBenchResult {
    pub remote: String,
    pub messages: u32,
    pub bytes: u64,
    pub packets_sent: u64,
    pub packets_received: u64,
    pub retransmissions: u64,
    pub time_to_completion_s: f64,
    pub hashes_match: bool,
}

/// The seed article's benchmark client: `messages` random messages of 200–400
/// bytes, 2–20 ms apart, to an echo server; waits for every byte back and
/// compares SHA-256 of what went out and what came back.
pub async fn echo_bench(endpoint: &Endpoint, target: SocketAddr, messages: u32, seed: u64) -> Result<EchoBenchResult, NetError> {
    let conn = endpoint.connect(target).await?;
    let started = Instant::now();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut plan = Vec::with_capacity(messages as usize);
    for _ in 0..messages {
        let size = 200 + (rng.next_u32() % 200) as usize;
        let mut message = vec![0u8; size];
        rng.fill_bytes(&mut message);
        let gap = Duration::from_millis(2 + (rng.next_u32() % 18) as u64);
        plan.push((message, gap));
    }
    let total: u64 = plan.iter().map(|(m, _)| m.len() as u64).sum();
    let mut sent_hash = Sha256::new();
    for (m, _) in &plan {
        sent_hash.update(m);
    }
    let (mut reader, mut writer) = tokio::io::split(conn);
    let writing = async move {
        for (message, gap) in plan {
            writer.write_all(&message).await?;
            tokio::time::sleep(gap).await;
        }
        Ok::<_, std::io::Error>(writer)
    };
    let reading = async move {
        let mut got = 0u64;
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        while got < total {
            let n = reader.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got += n as u64;
            hash.update(&buf[..n]);
        }
        Ok::<_, std::io::Error>((reader, got, hash))
    };
    let (writer, read) = tokio::try_join!(writing, reading).map_err(NetError::Io)?;
    let (reader, got, recv_hash) = read;
    let ttc = started.elapsed().as_secs_f64();
    let conn = reader.unsplit(writer);
    let stats = conn.stats();
    conn.finish();
    let _ = tokio::time::timeout(CLOSE_WAIT, conn.closed()).await;
    Ok(EchoBenchResult {
        remote: target.to_string(),
        messages,
        bytes: got,
        packets_sent: stats.packets_sent,
        packets_received: stats.packets_received,
        retransmissions: stats.retransmissions,
        time_to_completion_s: ttc,
        hashes_match: got == total && sent_hash.finalize() == recv_hash.finalize(),
    })
}
