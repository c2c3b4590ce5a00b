//! The measuring tools behind `fencepost serve`, `fencepost send` and
//! `fencepost echo-bench`.
//!
//! `send` opens each connection with a session header (docs/protocol.md, *The
//! send/serve session*): which way the bytes go, how many or for how long, and how
//! often the receiver reports. Forward, the client streams bytes to the `serve` sink,
//! which sends back what it measured every interval and, at the end, a receipt with
//! its byte count, the SHA-256 of what it read and how long it took; reverse (`-R`),
//! the sink sends and the client receives, measures and checks the bytes against the
//! pattern both ends generate. A sink told not to hash (`--no-verify`) sends a zero
//! hash, and the count alone is checked. A stream without the header is a plain byte
//! stream, answered with the count and hash only (the socket API's own clients).

use crate::{Bytes, Connection, Endpoint, NetError};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a plain stream's sink sends back: byte count and SHA-256.
const RECEIPT_LEN: usize = 8 + 32;
/// How long a finished side waits for the other to finish before giving up.
const CLOSE_WAIT: Duration = Duration::from_secs(10);
/// What a server may still have unacknowledged when its close wait ends and count it as
/// the client's lost final ack rather than a failed session: the few packets the last ack
/// covers (a receipt, a last report, a source's last data packets).
const FINAL_FLIGHT: u64 = 4 * 1500;
/// The session header: magic, flags (bit 0: reverse), bytes (0: timed), time in
/// microseconds (0: a byte count), report interval in microseconds.
const SESSION_MAGIC: [u8; 4] = *b"FPS1";
const SESSION_LEN: usize = 4 + 1 + 8 + 8 + 8;
/// Sink to client, forward sessions: an interval report (tag, microseconds since the
/// header arrived, bytes read so far) and the receipt (tag, bytes, SHA-256 or zeros,
/// microseconds from the header to the last byte).
const RECORD_INTERVAL: u8 = 1;
const RECORD_INTERVAL_LEN: usize = 1 + 8 + 8;
const RECORD_RECEIPT: u8 = 2;
const RECORD_RECEIPT_LEN: usize = 1 + 8 + 32 + 8;
/// The bytes both ends stream: a 256 kB block of this seed's random bytes, over and over.
const PATTERN_SEED: u64 = 0x5eed;
const PATTERN_LEN: usize = 256 * 1024;
/// The most bytes a sink takes from a connection in one read.
const READ_BUF: usize = 256 * 1024;
/// An echo's read buffer: what it reads it writes back before reading again, so a read
/// larger than a GSO batch's worth gains little, and the buffer stays with the connection
/// while it waits (with [`READ_BUF`], 100 connections idle after echoing 4 MB each held
/// 502 kB of server memory apiece, 25 MB of it these buffers; `bench/idle_memory.py`).
const ECHO_BUF: usize = 64 * 1024;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The pattern, made once per process and shared by every connection's source and
/// check: each making its own put 100 connections' 25 MB of identical bytes through the
/// caches (the copy into packets took 4x the time it takes for one connection).
fn pattern() -> Bytes {
    static PATTERN: std::sync::OnceLock<Bytes> = std::sync::OnceLock::new();
    PATTERN
        .get_or_init(|| {
            let mut chunk = vec![0u8; PATTERN_LEN];
            Xoshiro256PlusPlus::seed_from_u64(PATTERN_SEED).fill_bytes(&mut chunk);
            Bytes::from(chunk)
        })
        .clone()
}

/// Writes all of `data` through a shared reference (a reader may hold the connection too).
async fn send_all(conn: &Connection, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        let n = conn.send(data).await?;
        data = &data[n..];
    }
    Ok(())
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

fn be_u64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"))
}

/// One connection's account, as the server saw it.
#[derive(Clone, Debug, Serialize)]
pub struct ServedConnection {
    pub remote: String,
    /// `sink`, `source` (a reverse session: this side sent) or `echo`.
    pub mode: &'static str,
    /// Bytes read (a sink) or written (a source).
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
    /// The session was done on this side (the client's stream read to its end, everything
    /// owed written) but no acknowledgement of this side's last packets came within the close
    /// wait: the client's final ack was lost as it exited. Not an error; the client's receipt
    /// tells whether it got everything.
    pub final_ack_missing: bool,
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
/// answers with a receipt (or, asked to, a source), or (`echo`) an echo. Each
/// connection's account goes to `report`. Without `verify` the sink counts bytes
/// and does not hash them.
pub async fn serve(endpoint: Endpoint, echo: bool, verify: bool, report: impl Fn(ServedConnection) + Send + Sync + Clone + 'static) {
    while let Some(conn) = endpoint.accept().await {
        let report = report.clone();
        tokio::spawn(async move {
            let summary = serve_one(conn, echo, verify).await;
            report(summary);
        });
    }
}

/// What a sink has read: count, hash, the delivery series.
struct SinkAccount {
    started: Instant,
    hash: Option<Sha256>,
    bytes: u64,
    series: Vec<u64>,
    last_byte_s: f64,
}

impl SinkAccount {
    fn new(started: Instant, verify: bool) -> Self {
        SinkAccount { started, hash: verify.then(Sha256::new), bytes: 0, series: Vec::new(), last_byte_s: 0.0 }
    }

    /// Boundaries passed while waiting for a read (that returned at `now`) saw the count before it.
    /// (Every method takes the time of the read: one clock reading per read, not four.)
    fn close_series(&mut self, now: Instant) {
        let boundaries = (now.saturating_duration_since(self.started).as_micros() / SERIES_INTERVAL.as_micros()) as usize;
        while self.series.len() < boundaries {
            self.series.push(self.bytes);
        }
    }

    fn take(&mut self, data: &[u8], now: Instant) {
        self.count(data.len(), now);
        if let Some(hash) = self.hash.as_mut() {
            hash.update(data);
        }
    }

    /// Bytes read and not looked at (no hash to feed).
    fn count(&mut self, n: usize, now: Instant) {
        self.close_series(now);
        self.bytes += n as u64;
        self.last_byte_s = now.saturating_duration_since(self.started).as_secs_f64();
    }

    fn digest(&self) -> [u8; 32] {
        self.hash.as_ref().map(|h| h.clone().finalize().into()).unwrap_or([0u8; 32])
    }
}

/// What a `send` asked for.
#[derive(Clone, Copy, Debug)]
struct Session {
    reverse: bool,
    amount: Amount,
    interval: Duration,
}

impl Session {
    fn encode(&self) -> [u8; SESSION_LEN] {
        let mut h = [0u8; SESSION_LEN];
        h[..4].copy_from_slice(&SESSION_MAGIC);
        h[4] = u8::from(self.reverse);
        let (bytes, time) = match self.amount {
            Amount::Bytes(b) => (b, 0),
            Amount::Time(t) => (0, micros(t).max(1)),
        };
        h[5..13].copy_from_slice(&bytes.to_be_bytes());
        h[13..21].copy_from_slice(&time.to_be_bytes());
        h[21..29].copy_from_slice(&micros(self.interval).max(1).to_be_bytes());
        h
    }

    fn decode(h: &[u8]) -> Result<Session, std::io::Error> {
        let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad session header: {why}"));
        if h[4] & !1 != 0 {
            return Err(bad("unknown flags"));
        }
        let (bytes, time, interval) = (be_u64(&h[5..]), be_u64(&h[13..]), be_u64(&h[21..]));
        let amount = match (bytes, time) {
            (b, 0) if b > 0 => Amount::Bytes(b),
            (0, t) if t > 0 => Amount::Time(Duration::from_micros(t)),
            _ => return Err(bad("exactly one of bytes and time")),
        };
        // A report at least every 10 ms and at most every hour: what a client may ask a server for.
        let interval = Duration::from_micros(interval.clamp(10_000, 3_600_000_000));
        Ok(Session { reverse: h[4] & 1 == 1, amount, interval })
    }
}

async fn serve_one(mut conn: Connection, echo: bool, verify: bool) -> ServedConnection {
    let started = Instant::now();
    let accepted_unix = unix_now();
    let remote = conn.remote_addr().to_string();
    let mut sink = SinkAccount::new(started, verify);
    let mut mode = if echo { "echo" } else { "sink" };
    let mut sent = 0u64;
    let mut final_ack_missing = false;
    let result: Result<(), std::io::Error> = async {
        // Zeroed only where bytes are copied out: a sink that counts them (no hash) reads
        // nothing but the session header into it. Made for every connection, 256 KiB each
        // cost a hundred connections opened at once a hundred allocations and frees large
        // enough to map and unmap (each unmap interrupting every thread of the process).
        let copying = echo || verify;
        let mut buf = vec![0u8; if echo { ECHO_BUF } else if copying { READ_BUF } else { SESSION_LEN }];
        if echo {
            read_to_end_into(&mut conn, &mut sink, &mut buf, true).await?;
        } else {
            // The session header, or the first bytes of a plain stream.
            let mut head = Vec::with_capacity(SESSION_LEN);
            while head.len() < SESSION_LEN && (head.len() < 4 || head[..4] == SESSION_MAGIC) {
                let want = if head.len() < 4 { 4 } else { SESSION_LEN } - head.len();
                let n = conn.read(&mut buf[..want]).await?;
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            if head.len() == SESSION_LEN && head[..4] == SESSION_MAGIC {
                let session = Session::decode(&head)?;
                if session.reverse {
                    mode = "source";
                    let written = write_source(&conn, session.amount, None, verify).await?;
                    sent = written.bytes;
                    conn.finish();
                    // The client's side carries nothing more; its end is the end of the session.
                    while conn.read(&mut buf).await? > 0 {}
                } else {
                    sink_with_reports(&conn, &mut sink, session.interval, &mut buf).await?;
                }
            } else {
                sink.take(&head, Instant::now());
                buf.resize(READ_BUF, 0);
                read_to_end_into(&mut conn, &mut sink, &mut buf, false).await?;
                let mut receipt = [0u8; RECEIPT_LEN];
                receipt[..8].copy_from_slice(&sink.bytes.to_be_bytes());
                receipt[8..].copy_from_slice(&sink.digest());
                conn.write_all(&receipt).await?;
            }
        }
        conn.finish();
        // Every branch above returns once the client's stream has ended and was read whole
        // and what this side owed (receipt, reports, a source's bytes) is written: what is
        // left is for the client to acknowledge it. The client sends its last ack as it exits,
        // so on a lossy path that ack can be lost with nobody left to repeat it (TCP keeps a
        // TIME_WAIT for this; a process cannot). The client's receipt tells it whether the
        // session succeeded; here, a wait that ends with no more than that last flight
        // unacknowledged is recorded, not reported as an error.
        match tokio::time::timeout(CLOSE_WAIT, conn.closed()).await {
            Ok(closed) => closed.map_err(std::io::Error::from),
            Err(_) => {
                let unacknowledged = conn.stats().bytes_written.saturating_sub(conn.acknowledged());
                if unacknowledged <= FINAL_FLIGHT {
                    final_ack_missing = true;
                    Ok(())
                } else {
                    let why = format!("the client did not finish closing ({unacknowledged} bytes sent to it were never acknowledged)");
                    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, why))
                }
            }
        }
    }
    .await;
    let duration = started.elapsed().as_secs_f64();
    let stats = conn.stats();
    let bytes = if mode == "source" { sent } else { sink.bytes };
    ServedConnection {
        remote,
        mode,
        bytes,
        duration_s: duration,
        goodput_bps: if duration > 0.0 { bytes as f64 * 8.0 / duration } else { 0.0 },
        sha256: if mode == "source" { String::new() } else { sink.hash.as_ref().map(|h| hex(&h.clone().finalize())).unwrap_or_default() },
        packets_sent: stats.packets_sent,
        packets_received: stats.packets_received,
        retransmissions: stats.retransmissions,
        duplicate_packets_received: stats.duplicate_packets_received,
        packets_dropped_for_room: stats.beyond_window_packets + stats.over_budget_packets,
        error: result.err().map(|e| e.to_string()),
        final_ack_missing,
        delivered_series: sink.series,
        last_byte_s: sink.last_byte_s,
        accepted_unix,
    }
}

/// Reads the client's stream to its end into `sink`, sending each piece back when `echo`.
async fn read_to_end_into(conn: &mut Connection, sink: &mut SinkAccount, buf: &mut [u8], echo: bool) -> std::io::Result<()> {
    loop {
        let n = conn.read(buf).await?;
        let now = Instant::now();
        sink.close_series(now);
        if n == 0 {
            return Ok(());
        }
        sink.take(&buf[..n], now);
        if echo {
            conn.write_all(&buf[..n]).await?;
        }
    }
}

/// A forward session's sink: reads to the end, tells the client every `interval` how
/// much has arrived (measured here, where it counts), then sends the receipt.
async fn sink_with_reports(conn: &Connection, sink: &mut SinkAccount, interval: Duration, buf: &mut [u8]) -> std::io::Result<()> {
    let header_at = Instant::now();
    let mut next_report = tokio::time::Instant::from_std(header_at + interval);
    let mut last_byte_at = header_at;
    // Without a hash to feed, the bytes are counted where the transport holds them and
    // never copied out (a copy of the whole stream: the sink's CPU per GB 7 % lower in four
    // alternating 1 GB loopback runs, 0.945 s against 1.015).
    let counting = sink.hash.is_none();
    let chunk = READ_BUF;
    // One timer for all reports, moved on after each: a sleep made anew for every read
    // registered and cleared a timer per read (in a profile of 100 connections, with the
    // clock readings, about 2 % of the server's samples; too little for the bench to see).
    let report_due = tokio::time::sleep_until(next_report);
    tokio::pin!(report_due);
    loop {
        tokio::select! {
            n = async { if counting { conn.recv_with(chunk, |_| {}).await } else { conn.recv(buf).await } } => {
                let n = n?;
                let now = Instant::now();
                sink.close_series(now);
                if n == 0 {
                    break;
                }
                if counting {
                    sink.count(n, now);
                } else {
                    sink.take(&buf[..n], now);
                }
                last_byte_at = now;
            }
            _ = &mut report_due => {
                let mut record = [0u8; RECORD_INTERVAL_LEN];
                record[0] = RECORD_INTERVAL;
                record[1..9].copy_from_slice(&micros(header_at.elapsed()).to_be_bytes());
                record[9..17].copy_from_slice(&sink.bytes.to_be_bytes());
                send_all(conn, &record).await?;
                next_report += interval;
                report_due.as_mut().reset(next_report);
            }
        }
    }
    let mut receipt = [0u8; RECORD_RECEIPT_LEN];
    receipt[0] = RECORD_RECEIPT;
    receipt[1..9].copy_from_slice(&sink.bytes.to_be_bytes());
    receipt[9..41].copy_from_slice(&sink.digest());
    receipt[41..49].copy_from_slice(&micros(last_byte_at - header_at).to_be_bytes());
    send_all(conn, &receipt).await
}

/// How much `send` sends.
#[derive(Clone, Copy, Debug)]
pub enum Amount {
    Bytes(u64),
    Time(Duration),
}

/// What one source wrote.
struct Written {
    bytes: u64,
    sha256: String,
    seconds: f64,
}

/// Writes the pattern to `conn`: `amount` of it, at most `rate` bits per second (the
/// application's own pacing, as iperf3's `-b`), hashing it when `verify`. A timed source
/// stops at its time even while the window is closed.
async fn write_source(conn: &Connection, amount: Amount, rate: Option<u64>, verify: bool) -> std::io::Result<Written> {
    // Shared, so the send buffer keeps references to it instead of copies.
    let chunk = pattern();
    let mut hash = verify.then(Sha256::new);
    let started = Instant::now();
    let writing_ends = match amount {
        Amount::Time(limit) => Some(tokio::time::Instant::from_std(started + limit)),
        Amount::Bytes(_) => None,
    };
    let mut sent = 0u64;
    let mut offset = 0usize;
    loop {
        let remaining = match amount {
            Amount::Bytes(total) => total - sent,
            Amount::Time(limit) if started.elapsed() < limit => u64::MAX,
            Amount::Time(_) => 0,
        };
        if remaining == 0 {
            break;
        }
        let mut n = remaining.min((chunk.len() - offset) as u64) as usize;
        if let Some(bps) = rate {
            // Ahead of the rate: wait until the budget covers at least a packet's worth,
            // and write no more than 10 ms of it at once.
            let bytes_per_s = (bps / 8).max(1);
            let due = Duration::from_secs_f64(sent as f64 / bytes_per_s as f64);
            let at = tokio::time::Instant::from_std(started + due);
            let at = writing_ends.map_or(at, |end| at.min(end));
            tokio::time::sleep_until(at).await;
            if writing_ends.is_some_and(|end| tokio::time::Instant::now() >= end) {
                break;
            }
            n = n.min((bytes_per_s / 100).max(1500) as usize);
        }
        let piece = chunk.slice(offset..offset + n);
        // `send_shared` takes what fits (waiting for room) and nothing if the time runs out first.
        let written = match writing_ends {
            Some(end) => match tokio::time::timeout_at(end, conn.send_shared(&piece)).await {
                Ok(result) => result?,
                Err(_) => break,
            },
            None => conn.send_shared(&piece).await?,
        };
        if let Some(hash) = hash.as_mut() {
            hash.update(&piece[..written]);
        }
        sent += written as u64;
        offset = (offset + written) % chunk.len();
    }
    Ok(Written { bytes: sent, sha256: hash.map(|h| hex(&h.finalize())).unwrap_or_default(), seconds: started.elapsed().as_secs_f64() })
}

/// One reporting interval of a `send` stream, measured at the receiver: the sink's
/// reports forward, the client's own count in reverse. RTT and window are the client's.
#[derive(Clone, Debug, Serialize)]
pub struct Interval {
    /// The stream (connection) it belongs to, from 1.
    pub stream: u32,
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
    pub stream: u32,
    pub remote: String,
    /// The server sent and this side received (`-R`).
    pub reverse: bool,
    /// Bytes the sending side wrote, and over how long (forward: this side's writing time;
    /// reverse: what arrived, the source's own figures staying on the server).
    pub bytes: u64,
    pub sender_seconds: f64,
    /// From the connection being up to the receipt (forward) or the last byte (reverse).
    pub duration_s: f64,
    pub bits_per_second: f64,
    pub sha256: String,
    /// The receiver's own count, hash and time from the session's start to its last byte:
    /// the sink's receipt forward (without one, the bytes it acknowledged and an empty
    /// hash), this side's measurement in reverse.
    pub receiver_bytes: u64,
    /// Empty when the receiver did not hash (`--no-verify`) or sent no receipt.
    pub receiver_sha256: String,
    pub receiver_seconds: f64,
    /// Both ends hashed the stream and the hashes agree.
    pub hashes_match: bool,
    /// Both ends hashed the stream, so `hashes_match` says something; without it only the byte count was checked.
    pub verified: bool,
    /// Everything written arrived (and, forward, the sink's receipt came back).
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
    /// Repair packets (FEC repairs or copies) sent beside the data.
    pub redundant_packets_sent: u64,
    pub retransmission_timeouts: u64,
    /// Of those, first timeouts on a path that had lost nothing lately, probed with new data
    /// (nothing declared lost, nothing resent).
    pub timeouts_probed_with_new_data: u64,
    /// Keepalives sent as tail probes: acks had stopped with packets in flight, and the
    /// probe's ack shows what was lost before the retransmission timer fires.
    pub tail_probes: u64,
    pub acks_received: u64,
    /// The smoothed RTT at the end.
    pub rtt_ms: f64,
    /// The mean of every RTT sample (the simulator's `rtt_mean_ms`): the smoothed RTT at the
    /// end says what the path was as the transfer finished, after other flows may have gone.
    pub rtt_mean_ms: Option<f64>,
    /// When `send` began connecting, in seconds since the Unix epoch.
    pub connect_started_unix: f64,
}

/// After a timed send's writing time ends, how long delivering what was written may go
/// without progress: the writing time again, at least 2 s and at most 10 s (a sender also
/// waits for its own timer's next try). A flush that keeps moving goes on past it (see
/// [`flush_bounded`]).
fn flush_grace(limit: Duration) -> Duration {
    limit.clamp(Duration::from_secs(2), CLOSE_WAIT)
}

/// The longest a timed send's flush may last however it moves: six graces (12-60 s).
/// What waits at the end of writing is bounded (the send buffer and the path's queue),
/// but on a slow or fading path it can take longer to deliver than the writing took:
/// 20 s over the ATT LTE uplink trace with a 150 kB queue needed 29 s in all, and a
/// bound of one grace from the end of writing cut such flows off as incomplete.
fn flush_ceiling(limit: Duration) -> Duration {
    flush_grace(limit) * 6
}

/// How often a flush's progress is looked at.
const FLUSH_LOOK: Duration = Duration::from_millis(100);

/// Why a timed send's flush was given up.
enum FlushCut {
    /// Nothing more arrived for this long (at least [`flush_grace`]).
    Stalled(Duration),
    /// It was still moving at [`flush_ceiling`].
    Outlasted(Duration),
}

impl FlushCut {
    /// `writer`: whose writing it was ("our", "the source's").
    fn reason(&self, writer: &str, written_s: f64) -> String {
        match self {
            FlushCut::Stalled(idle) => {
                format!("the flush stalled: after {written_s:.1} s of {writer} writing, nothing more was delivered for {:.1} s", idle.as_secs_f64())
            }
            FlushCut::Outlasted(ceiling) => format!(
                "the time bound ended the flush: after {written_s:.1} s of {writer} writing, {:.1} s were not enough to deliver the rest (it was still moving)",
                ceiling.as_secs_f64()
            ),
        }
    }
}

/// Runs `work` (what delivers a timed send's stream), bounded from `writing_ends` on by
/// progress: `delivered` (a count that grows as the stream gets through) must move at
/// least once per [`flush_grace`], and the whole flush ends at [`flush_ceiling`]. A
/// sender counts packets acknowledged anywhere, not the stream acknowledged without a
/// gap: on a faded, lossy path the packets that get through may all lie beyond a hole
/// for seconds while the hole's resend waits in the queue.
///
/// `retried`, on the sending side, counts the sender's tries on its own timer (retransmission
/// timeouts and window probes): there a flush is stalled only once one has also been made
/// since the last progress, unanswered. A path whose queue held packets for seconds leaves
/// a retransmission timeout (RTT and its variation, measured through that queue) longer
/// than the grace, and what the queue dropped as it faded is found lost only by the sender's
/// own timers, since nothing sent after it was acknowledged: a flush cut at the grace gave
/// up on a path that had recovered before the sender had tried again (a relay fading to one
/// packet in 250 ms for 3.5 s, then clear: smoothed RTT 662 ms, 2.1 MB waiting, cut one
/// time in eight). An idle keepalive is not such a try: it is sent on a clock of its own
/// (5 s after the last packet that asked for an ack), and its answer says only that the
/// peer lives. Counted as one, it cut the same flush 2 s after the fade ended while the
/// retransmission timeout, sized by the fade (3.7 s), had not yet fired (2 runs in 24; the
/// connection's tail probe now finds such losses sooner). A peer gone for good is still
/// found out within a grace and one backed-off timeout, and the ceiling bounds the flush
/// whatever the timer does. The receiving side (reverse) does not see the source's timer,
/// and keeps the grace alone.
async fn flush_bounded<T>(
    work: impl std::future::Future<Output = T>,
    writing_ends: tokio::time::Instant,
    limit: Duration,
    delivered: impl Fn() -> u64,
    retried: Option<&(dyn Fn() -> u64 + Sync)>,
) -> Result<T, FlushCut> {
    tokio::pin!(work);
    tokio::select! {
        done = &mut work => return Ok(done),
        _ = tokio::time::sleep_until(writing_ends) => {}
    }
    let (grace, ceiling) = (flush_grace(limit), flush_ceiling(limit));
    let retries = || retried.map(|count| count());
    let (mut seen, mut moved_at, mut retries_then) = (delivered(), writing_ends, retries());
    let mut look = tokio::time::interval_at(writing_ends + FLUSH_LOOK, FLUSH_LOOK);
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            done = &mut work => return Ok(done),
            now = look.tick() => {
                let count = delivered();
                if count > seen {
                    (seen, moved_at, retries_then) = (count, now, retries());
                }
                // The sending side also needs a try on its own timer since the last progress
                // that went unanswered; the receiving side has no such count and the grace alone.
                let retried_since = match (retries(), retries_then) {
                    (Some(count), Some(then)) => count > then,
                    _ => true,
                };
                if now.duration_since(moved_at) >= grace && retried_since {
                    return Err(FlushCut::Stalled(now.duration_since(moved_at)));
                }
                if now.duration_since(writing_ends) >= ceiling {
                    return Err(FlushCut::Outlasted(ceiling));
                }
            }
        }
    }
}

/// What `send` does, beyond where to.
#[derive(Clone, Copy, Debug)]
pub struct SendOptions {
    pub amount: Amount,
    /// How often the receiver reports.
    pub interval: Duration,
    /// Hash the stream end to end (the count is always checked).
    pub verify: bool,
    /// The server sends, this side receives (iperf3's `-R`).
    pub reverse: bool,
    /// Bits per second each stream writes at most (iperf3's `-b`); `None`: as fast as it goes.
    pub bitrate: Option<u64>,
}

/// Streams bytes to a `serve` sink, reporting every `interval` what the sink measured, and
/// checks the sink's receipt (its SHA-256 too when `verify` and the sink hashed).
pub async fn send(
    endpoint: &Endpoint,
    target: SocketAddr,
    amount: Amount,
    interval: Duration,
    verify: bool,
    on_interval: impl FnMut(Interval),
) -> Result<SendSummary, NetError> {
    let options = SendOptions { amount, interval, verify, reverse: false, bitrate: None };
    send_stream(endpoint, target, 1, &options, on_interval).await
}

/// `streams` connections at once from one endpoint (iperf3's `-P`), each sending
/// `amount` (a byte count is split among them). Every interval report names its stream.
pub async fn send_parallel(
    endpoint: &Endpoint,
    target: SocketAddr,
    streams: u32,
    options: &SendOptions,
    on_interval: impl FnMut(Interval) + Clone + Send + 'static,
) -> Vec<Result<SendSummary, NetError>> {
    let streams = streams.max(1);
    let mut set = tokio::task::JoinSet::new();
    for stream in 1..=streams {
        let mut options = *options;
        if let Amount::Bytes(total) = options.amount {
            // The remainder goes to the first streams, so the total is what was asked.
            let share = total / streams as u64 + u64::from((stream as u64) <= total % streams as u64);
            options.amount = Amount::Bytes(share.max(1));
        }
        let (endpoint, on_interval) = (endpoint.clone(), on_interval.clone());
        set.spawn(async move { (stream, send_stream(&endpoint, target, stream, &options, on_interval).await) });
    }
    let mut results: Vec<(u32, Result<SendSummary, NetError>)> = Vec::new();
    while let Some(done) = set.join_next().await {
        match done {
            Ok(r) => results.push(r),
            Err(e) => results.push((0, Err(NetError::Io(std::io::Error::other(format!("a stream's task failed: {e}")))))),
        }
    }
    results.sort_by_key(|(stream, _)| *stream);
    results.into_iter().map(|(_, r)| r).collect()
}

/// One stream of a `send`: see [`send`] and [`send_parallel`].
pub async fn send_stream(
    endpoint: &Endpoint,
    target: SocketAddr,
    stream: u32,
    options: &SendOptions,
    mut on_interval: impl FnMut(Interval),
) -> Result<SendSummary, NetError> {
    let connect_started_unix = unix_now();
    let mut conn = endpoint.connect(target).await?;
    let started = Instant::now();
    let io = |e: std::io::Error| NetError::Io(e);
    let session = Session { reverse: options.reverse, amount: options.amount, interval: options.interval };
    conn.write_all(&session.encode()).await.map_err(io)?;
    let limit = match options.amount {
        Amount::Time(limit) => Some(limit),
        Amount::Bytes(_) => None,
    };
    let mut report = |conn: &Connection, start: f64, end: f64, bytes: u64, retransmissions_before: &mut u64| {
        let stats = conn.stats();
        let (srtt, cwnd, in_flight) = conn.path();
        on_interval(Interval {
            stream,
            start,
            end,
            bytes,
            bits_per_second: bytes as f64 * 8.0 / (end - start).max(1e-9),
            retransmissions: stats.retransmissions - *retransmissions_before,
            rtt_ms: srtt.as_secs_f64() * 1e3,
            cwnd,
            bytes_in_flight: in_flight,
        });
        *retransmissions_before = stats.retransmissions;
    };
    let mut retx_seen = 0u64;
    let mut received = if options.reverse {
        conn.finish();
        let receiving = receive_source(&conn, options.interval, options.verify, |start, end, bytes, c| report(c, start, end, bytes, &mut retx_seen));
        match limit {
            // The server writes for `limit` from about now; the data packets that arrived (not
            // keepalives, which a stalled source may still send) are the progress.
            Some(limit) => flush_bounded(receiving, tokio::time::Instant::from_std(started + limit), limit, || conn.stats().data_packets_received, None)
                .await
                .unwrap_or_else(|cut| Received { incomplete: Some(cut.reason("the source's", limit.as_secs_f64())), ..Received::default() }),
            None => receiving.await,
        }
    } else {
        forward(&conn, options, |start, end, bytes, c| report(c, start, end, bytes, &mut retx_seen)).await
    };
    let duration = started.elapsed().as_secs_f64();
    let stats = conn.stats();
    let (srtt, ..) = conn.path();
    if received.incomplete.is_some() {
        // A connection that ended with an error (idle timeout, reset) is reported as such.
        if let Some(lost) = conn_error(&conn) {
            return Err(lost);
        }
        // Nothing more will be waited for: tell the peer instead of leaving it to time out.
        conn.abort();
        if !options.reverse {
            // No receipt: what the sink acknowledged is all that is known to have arrived.
            received.receiver_bytes = conn.acknowledged().saturating_sub(SESSION_LEN as u64);
        }
    } else {
        let _ = tokio::time::timeout(CLOSE_WAIT, conn.closed()).await;
    }
    let verified = !received.sha256.is_empty() && !received.receiver_sha256.is_empty();
    let hashes_match = verified && received.receiver_bytes == received.sent && received.receiver_sha256 == received.sha256;
    let complete = received.incomplete.is_none() && received.receiver_bytes == received.sent && (!verified || hashes_match);
    let incomplete_reason = received.incomplete.clone().or_else(|| (!complete).then(|| "the receiver's count or hash does not match what was sent".to_string()));
    Ok(SendSummary {
        stream,
        remote: target.to_string(),
        reverse: options.reverse,
        bytes: received.sent,
        sender_seconds: received.sender_seconds,
        duration_s: duration,
        bits_per_second: received.sent as f64 * 8.0 / duration.max(1e-9),
        sha256: received.sha256,
        receiver_bytes: received.receiver_bytes,
        receiver_sha256: received.receiver_sha256,
        receiver_seconds: received.receiver_seconds,
        hashes_match,
        verified,
        complete,
        incomplete_reason,
        packets_sent: stats.packets_sent,
        data_packets_sent: stats.data_packets_sent,
        retransmissions: stats.retransmissions,
        packets_lost: stats.packets_lost,
        spurious_retransmissions: stats.spurious_retransmissions,
        redundant_packets_sent: stats.redundant_packets_sent,
        retransmission_timeouts: stats.retransmission_timeouts,
        timeouts_probed_with_new_data: stats.timeouts_probed_with_new_data,
        tail_probes: stats.tail_probes,
        acks_received: stats.acks_received,
        rtt_ms: srtt.as_secs_f64() * 1e3,
        rtt_mean_ms: conn.rtt_mean().map(|d| d.as_secs_f64() * 1e3),
        connect_started_unix,
    })
}

/// The connection's own error, if it ended with one (so it is reported as such, not as "incomplete").
fn conn_error(conn: &Connection) -> Option<NetError> {
    let st = conn.shared.lock();
    let e = st.proto.connection(conn.handle).and_then(|c| c.error().cloned())?;
    Some(NetError::ConnectionLost { addr: conn.remote, error: e })
}

/// Both ends' figures for one stream.
#[derive(Default)]
struct Received {
    sent: u64,
    sha256: String,
    sender_seconds: f64,
    receiver_bytes: u64,
    receiver_sha256: String,
    receiver_seconds: f64,
    incomplete: Option<String>,
}

/// Forward: write the source while reading the sink's reports, then its receipt. A timed
/// send writes until the time is up, then waits for the rest to arrive as long as the
/// sink's acknowledgements keep moving (see [`flush_bounded`]).
async fn forward(conn: &Connection, options: &SendOptions, mut report: impl FnMut(f64, f64, u64, &Connection)) -> Received {
    let writing = async {
        let written = write_source(conn, options.amount, options.bitrate, options.verify).await;
        conn.finish();
        written
    };
    let reading = async {
        let mut pending: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 4096];
        let mut last = (0.0f64, 0u64);
        loop {
            let n = conn.recv(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the sink finished without a receipt".to_string());
            }
            pending.extend_from_slice(&buf[..n]);
            while let Some(&tag) = pending.first() {
                match tag {
                    RECORD_INTERVAL if pending.len() >= RECORD_INTERVAL_LEN => {
                        let (t, bytes) = (be_u64(&pending[1..]) as f64 / 1e6, be_u64(&pending[9..]));
                        report(last.0, t, bytes.saturating_sub(last.1), conn);
                        last = (t, bytes);
                        pending.drain(..RECORD_INTERVAL_LEN);
                    }
                    RECORD_RECEIPT if pending.len() >= RECORD_RECEIPT_LEN => {
                        let bytes = be_u64(&pending[1..]);
                        let hash = &pending[9..41];
                        let seconds = be_u64(&pending[41..]) as f64 / 1e6;
                        let hashed = hash.iter().any(|&b| b != 0);
                        return Ok((bytes, if hashed { hex(hash) } else { String::new() }, seconds));
                    }
                    RECORD_INTERVAL | RECORD_RECEIPT => break,
                    other => return Err(format!("the sink sent an unknown record ({other}); is it an older fencepost serve?")),
                }
            }
        }
    };
    tokio::pin!(reading);
    let written = tokio::select! {
        w = writing => match w {
            Ok(w) => w,
            Err(e) => return Received { incomplete: Some(e.to_string()), ..Received::default() },
        },
        r = &mut reading => {
            let why = r.err().unwrap_or_else(|| "the sink answered before the stream ended".to_string());
            return Received { incomplete: Some(why), ..Received::default() };
        }
    };
    let mut out = Received { sent: written.bytes, sha256: written.sha256, sender_seconds: written.seconds, ..Received::default() };
    let receipt = match options.amount {
        Amount::Time(limit) => flush_bounded(&mut reading, tokio::time::Instant::now(), limit, || conn.stats().packets_acknowledged, Some(&|| {
            let stats = conn.stats();
            stats.retransmission_timeouts + stats.window_probes
        }))
            .await
            .unwrap_or_else(|cut| Err(cut.reason("our", written.seconds))),
        Amount::Bytes(_) => reading.await,
    };
    match receipt {
        Ok((bytes, sha256, seconds)) => {
            out.receiver_bytes = bytes;
            out.receiver_sha256 = sha256;
            out.receiver_seconds = seconds;
        }
        Err(why) => out.incomplete = Some(why),
    }
    out
}

/// Reverse: read the server's stream to its end, counting every `interval` and checking
/// it against the pattern the server writes.
async fn receive_source(
    conn: &Connection,
    interval: Duration,
    verify: bool,
    mut report: impl FnMut(f64, f64, u64, &Connection),
) -> Received {
    let chunk = pattern();
    let mut got = Sha256::new();
    let mut expected = Sha256::new();
    let started = Instant::now();
    let mut next_report = tokio::time::Instant::from_std(started + interval);
    let mut last = (0.0f64, 0u64);
    let mut bytes = 0u64;
    let mut last_byte_at = started;
    let mut buf = vec![0u8; READ_BUF];
    // One timer, moved on after each report (see `sink_with_reports`).
    let report_due = tokio::time::sleep_until(next_report);
    tokio::pin!(report_due);
    loop {
        tokio::select! {
            n = conn.recv(&mut buf) => {
                let n = match n {
                    Ok(n) => n,
                    Err(e) => return Received { sent: bytes, receiver_bytes: bytes, incomplete: Some(e.to_string()), ..Received::default() },
                };
                if n == 0 {
                    break;
                }
                if verify {
                    got.update(&buf[..n]);
                    // The pattern's bytes at the same offsets: what the source hashed.
                    let mut at = (bytes % PATTERN_LEN as u64) as usize;
                    let mut left = n;
                    while left > 0 {
                        let take = left.min(PATTERN_LEN - at);
                        expected.update(&chunk[at..at + take]);
                        left -= take;
                        at = (at + take) % PATTERN_LEN;
                    }
                }
                bytes += n as u64;
                last_byte_at = Instant::now();
            }
            _ = &mut report_due => {
                let t = started.elapsed().as_secs_f64();
                report(last.0, t, bytes - last.1, conn);
                last = (t, bytes);
                next_report += interval;
                report_due.as_mut().reset(next_report);
            }
        }
    }
    let (sha256, receiver_sha256) = if verify { (hex(&expected.finalize()), hex(&got.finalize())) } else { (String::new(), String::new()) };
    let seconds = (last_byte_at - started).as_secs_f64();
    Received { sent: bytes, sha256, sender_seconds: seconds, receiver_bytes: bytes, receiver_sha256, receiver_seconds: seconds, incomplete: None }
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

#[cfg(test)]
mod flush_tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// A flush that delivers nothing after the writing ends, finished at `done_after`
    /// (None: never), while the sender, which tried 3 times while writing, tries again at
    /// the instants in `tries_at`; what `flush_bounded` made of it, and when.
    async fn flush(done_after: Option<Duration>, tries_at: &[Duration], sender: bool) -> (Result<(), FlushCut>, Duration) {
        let start = tokio::time::Instant::now();
        let tries = Arc::new(AtomicU64::new(3));
        for &at in tries_at {
            let tries = tries.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(start + at).await;
                tries.fetch_add(1, Ordering::Relaxed);
            });
        }
        let work = async move {
            match done_after {
                Some(after) => tokio::time::sleep_until(start + after).await,
                None => std::future::pending().await,
            }
        };
        let retried = || tries.load(Ordering::Relaxed);
        let outcome = flush_bounded(work, start, Duration::from_secs(1), || 7, sender.then_some(&retried as &(dyn Fn() -> u64 + Sync))).await;
        (outcome, start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn a_sender_waiting_on_its_own_timeout_is_not_stalled() {
        // The grace (2 s) passes with nothing delivered but no timeout fired: the path may
        // have recovered and the sender not tried yet; at 3.5 s its transfer completes.
        let (outcome, took) = flush(Some(Duration::from_millis(3_500)), &[], true).await;
        assert!(outcome.is_ok() && took == Duration::from_millis(3_500), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_sender_whose_try_goes_unanswered_is_stalled() {
        // Its timeout fired at 2.5 s and nothing came of it: given up at the next look.
        let (outcome, took) = flush(None, &[Duration::from_millis(2_550)], true).await;
        assert!(matches!(outcome, Err(FlushCut::Stalled(idle)) if idle == Duration::from_millis(2_600)), "{took:?}");
        assert_eq!(took, Duration::from_millis(2_600));
        // A try within the grace leaves the stall to the grace itself.
        let (outcome, took) = flush(None, &[Duration::from_millis(500)], true).await;
        assert!(matches!(outcome, Err(FlushCut::Stalled(_))) && took == Duration::from_secs(2), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_receiver_is_bound_by_the_grace_alone() {
        let (outcome, took) = flush(Some(Duration::from_millis(3_500)), &[], false).await;
        assert!(matches!(outcome, Err(FlushCut::Stalled(_))) && took == Duration::from_secs(2), "{took:?}");
    }
}
