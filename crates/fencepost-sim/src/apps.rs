//! The applications at the two ends of a flow, behind two traits: a client
//! application (bulk sender, timed bulk sender, echo client) and a server
//! application (sink, echo server). Each reads and writes its connection the
//! way a program would, and reports through [`FlowIo`] what it sent, what it
//! read (checked byte by byte as it is read) and when its work was complete.

use crate::digest::{Stream, StreamDigests};
use crate::pattern::BulkPattern;
use fencepost_proto::{ByteSource, Connection, Duration, Instant, ReadError};
use fencepost_spec::Workload;
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::VecDeque;
use std::sync::Arc;

/// Bytes the stream sender makes at a time, and the verifier regenerates at a time.
const CHUNK: usize = 64 * 1024;

/// What a flow's applications share with the simulator: the stream digests (echo), the
/// byte-by-byte check of what is read, and the flow's progress.
pub struct FlowIo {
    pub digests: StreamDigests,
    pub verifier: Verifier,
    /// Bytes the workload must deliver (known at the end for timed and echo workloads).
    pub bytes_expected: u64,
    /// Bytes the server application read.
    pub server_received: u64,
    /// Bytes the client application read (the echo).
    pub client_received: u64,
    /// When the workload's work was done (the simulator then takes the flow's counters).
    pub completed_at: Option<Instant>,
    /// A timed bulk transfer: bytes the server had read when the writing time ended.
    pub delivered_at_deadline: Option<u64>,
    /// Bytes read by an application that differ from what was sent (must stay 0).
    pub wrong_bytes: u64,
    pub read_buf: Vec<u8>,
    /// A stream: each delivered message's latency in microseconds, from when it was due
    /// to be sent to when its last byte was read, in order.
    pub message_latencies_us: Vec<u64>,
    /// A stream: when the client's connection was established and the stream began (the
    /// messages' due times count from here, so the handshake is not in their latency).
    pub stream_started: Option<Instant>,
}

impl FlowIo {
    pub fn new(digests: StreamDigests, verifier: Verifier, bytes_expected: u64) -> FlowIo {
        FlowIo {
            digests,
            verifier,
            bytes_expected,
            server_received: 0,
            client_received: 0,
            completed_at: None,
            delivered_at_deadline: None,
            wrong_bytes: 0,
            read_buf: vec![0; CHUNK],
            message_latencies_us: Vec::new(),
            stream_started: None,
        }
    }

    /// A record nothing reads, for an application whose writes do not count (see `parallel.rs`).
    pub(crate) fn scratch() -> FlowIo {
        FlowIo::new(StreamDigests::none(), Verifier::Echo { unechoed: VecDeque::new() }, 0)
    }

    fn complete(&mut self, now: Instant) {
        if self.completed_at.is_none() {
            self.completed_at = Some(now);
        }
    }
}

/// The application that opened the connection.
pub trait ClientApp: Send {
    /// Everything the application does at `now`: write, read, close.
    fn run(&mut self, now: Instant, conn: &mut Connection, io: &mut FlowIo);
    /// When it next wants to run even if nothing arrives (a timer of its own).
    fn wakeup(&self) -> Option<Instant>;
    /// Whether `run` could do anything at `now` (see [`ServerApp::has_work`]).
    fn has_work(&self, now: Instant, conn: &Connection) -> bool {
        let _ = (now, conn);
        true
    }
    /// Whether the application has written (or begun writing) the last of its data, so
    /// that the workload may complete from now on. Every workload completes only on data
    /// written after this is true, which reaches the other end a path's delay later: a run
    /// on two threads lets each side run that far ahead only while it is false.
    fn done_writing(&self) -> bool {
        true
    }
    /// An instant at which `run` reads what the server's application counted (a timed
    /// transfer's end), if one is still to come: a run on two threads takes that instant
    /// on one thread.
    fn reads_server_at(&self) -> Option<Instant> {
        None
    }
}

/// The application that accepted the connection.
pub trait ServerApp: Send {
    fn run(&mut self, now: Instant, conn: &mut Connection, io: &mut FlowIo);
    /// Whether `run` could do anything now. Running reaches the connection mutably, which
    /// makes its endpoint look it over again (timers, sending): a simulator step per
    /// packet saves that where the application has nothing to do.
    fn has_work(&self, conn: &Connection) -> bool {
        let _ = conn;
        true
    }
}

/// Regenerates what the receiving application must see, to catch a wrong byte the moment it is read.
pub enum Verifier {
    /// The bulk stream, regenerated from the client's seed; `offset` is the stream offset of
    /// the next byte to be read.
    Bulk { pattern: BulkPattern, offset: u64 },
    /// Echo: the bytes the client sent and has not yet had back.
    Echo { unechoed: VecDeque<u8> },
}

impl Verifier {
    /// Counts the bytes of `got` that differ from what should come next.
    pub fn check(&mut self, got: &[u8]) -> u64 {
        let mut wrong = 0u64;
        match self {
            Verifier::Bulk { pattern, offset } => {
                wrong = pattern.count_wrong(*offset, got);
                *offset += got.len() as u64;
            }
            Verifier::Echo { unechoed } => {
                for &b in got {
                    match unechoed.pop_front() {
                        Some(expected) if expected == b => {}
                        _ => wrong += 1,
                    }
                }
            }
        }
        wrong
    }
}

/// A flow's applications and shared state; `app_seed` seeds the bulk stream or the echo messages.
pub type Built = (Box<dyn ClientApp>, Box<dyn ServerApp>, FlowIo);

pub fn build(workload: &Workload, start: Instant, app_seed: u64) -> Built {
    match *workload {
        Workload::Bulk { bytes, duration } => {
            // The bulk stream: the sender writes it, the verifier regenerates it.
            let pattern = BulkPattern::new(app_seed);
            let verifier = Verifier::Bulk { pattern: pattern.clone(), offset: 0 };
            let digests = StreamDigests::none();
            let client = BulkSender { remaining: bytes, write_until: duration.map(|d| start + d), written: 0, pattern: Arc::new(pattern), closed: false };
            let expected = if duration.is_some() { 0 } else { bytes };
            (Box::new(client), Box::new(Sink { closed: false }), FlowIo::new(digests, verifier, expected))
        }
        Workload::Stream { message_bytes, interval, duration } => {
            let pattern = BulkPattern::new(app_seed);
            let verifier = Verifier::Bulk { pattern: pattern.clone(), offset: 0 };
            let digests = StreamDigests::none();
            let count = (duration.total_micros() / interval.total_micros()).max(1);
            let client = StreamSender {
                start: None,
                interval,
                message_bytes,
                count,
                sent: 0,
                owed: 0,
                written: 0,
                pattern: pattern.clone(),
                chunk: vec![0; CHUNK],
                chunk_pos: CHUNK,
                chunk_offset: 0u64.wrapping_sub(CHUNK as u64),
                closed: false,
            };
            let server = StreamSink { interval, message_bytes, read: 0, next_message: 0, closed: false };
            (Box::new(client), Box::new(server), FlowIo::new(digests, verifier, count * message_bytes))
        }
        Workload::Echo { messages } => {
            let client = EchoClient {
                messages_left: messages,
                next_at: start,
                rng: Xoshiro256PlusPlus::seed_from_u64(app_seed),
                pending: Vec::new(),
                sent_total: 0,
                closed: false,
            };
            let verifier = Verifier::Echo { unechoed: VecDeque::new() };
            (Box::new(client), Box::new(EchoServer { backlog: Vec::new(), closed: false }), FlowIo::new(StreamDigests::hashing(), verifier, 0))
        }
    }
}

/// Writes seeded random bytes as fast as the send buffer takes them: a number of
/// bytes, or for a time; then closes.
struct BulkSender {
    remaining: u64,
    /// A timed transfer stops writing at this instant.
    write_until: Option<Instant>,
    written: u64,
    /// The bulk stream, written as bytes the connection makes into each packet
    /// (`Connection::write_generated`): they are neither made ahead nor copied through the
    /// send buffer, which was a third of the sending side's time. Stream and echo flows
    /// write copies, so the simulator still runs that path.
    pattern: Arc<dyn ByteSource>,
    closed: bool,
}

impl ClientApp for BulkSender {
    fn run(&mut self, now: Instant, conn: &mut Connection, io: &mut FlowIo) {
        if self.write_until.is_some_and(|until| now >= until) && !self.closed {
            // A timed transfer ends here: what was written is what must arrive.
            self.remaining = 0;
            io.bytes_expected = self.written;
            if io.delivered_at_deadline.is_none() {
                io.delivered_at_deadline = Some(io.server_received);
            }
        }
        // One write: the buffer takes what fits, and what it does not take waits for the
        // next run (asking again at once took nothing, the buffer being full).
        if self.remaining > 0 {
            let want = usize::try_from(self.remaining).unwrap_or(usize::MAX);
            let Ok(n) = conn.write_generated(&self.pattern, self.written, want) else { return };
            self.remaining -= n as u64;
            self.written += n as u64;
        }
        if self.remaining == 0 && !self.closed {
            conn.close(now);
            self.closed = true;
        }
    }

    fn wakeup(&self) -> Option<Instant> {
        self.write_until.filter(|_| !self.closed)
    }

    fn done_writing(&self) -> bool {
        self.closed || self.remaining == 0
    }

    fn reads_server_at(&self) -> Option<Instant> {
        self.write_until.filter(|_| !self.closed)
    }

    /// Room to write, or the end of the writing to act on once.
    fn has_work(&self, now: Instant, conn: &Connection) -> bool {
        !self.closed && (self.remaining == 0 || self.write_until.is_some_and(|until| now >= until) || conn.write_room() > 0)
    }
}

/// A constant-rate stream: message `k` is due at `start + k * interval`, `start` being
/// when the connection was established; what the send buffer does not take at once goes
/// as soon as it can. Closes after the last message.
struct StreamSender {
    start: Option<Instant>,
    interval: Duration,
    message_bytes: u64,
    count: u64,
    /// Messages due so far.
    sent: u64,
    /// Bytes of due messages not yet taken by the send buffer.
    owed: u64,
    written: u64,
    pattern: BulkPattern,
    chunk: Vec<u8>,
    chunk_pos: usize,
    chunk_offset: u64,
    closed: bool,
}

impl ClientApp for StreamSender {
    fn run(&mut self, now: Instant, conn: &mut Connection, io: &mut FlowIo) {
        let start = match self.start {
            Some(s) => s,
            None if conn.is_established() => {
                io.stream_started = Some(now);
                *self.start.insert(now)
            }
            None => return,
        };
        while self.sent < self.count && start + Duration::from_micros(self.interval.total_micros() * self.sent) <= now {
            self.sent += 1;
            self.owed += self.message_bytes;
        }
        while self.owed > 0 {
            if self.chunk_pos == self.chunk.len() {
                self.chunk_offset = self.chunk_offset.wrapping_add(self.chunk.len() as u64);
                self.pattern.fill(self.chunk_offset, &mut self.chunk);
                self.chunk_pos = 0;
            }
            let want = self.owed.min((self.chunk.len() - self.chunk_pos) as u64) as usize;
            let Ok(n) = conn.write(&self.chunk[self.chunk_pos..self.chunk_pos + want]) else { return };
            if n == 0 {
                break;
            }
            self.chunk_pos += n;
            self.owed -= n as u64;
            self.written += n as u64;
        }
        if self.sent == self.count && self.owed == 0 && !self.closed {
            conn.close(now);
            self.closed = true;
        }
    }

    fn wakeup(&self) -> Option<Instant> {
        let start = self.start?;
        (self.sent < self.count).then(|| start + Duration::from_micros(self.interval.total_micros() * self.sent))
    }

    fn done_writing(&self) -> bool {
        self.closed || (self.sent == self.count && self.owed == 0)
    }
}

/// Reads a stream like [`Sink`], noting when each message's last byte arrives.
struct StreamSink {
    interval: Duration,
    message_bytes: u64,
    read: u64,
    next_message: u64,
    closed: bool,
}

impl ServerApp for StreamSink {
    fn run(&mut self, now: Instant, conn: &mut Connection, io: &mut FlowIo) {
        let eof = sink_reads(conn, io, |io, n| {
            self.read += n;
            while (self.next_message + 1) * self.message_bytes <= self.read {
                let Some(start) = io.stream_started else { break };
                let due = start + Duration::from_micros(self.interval.total_micros() * self.next_message);
                io.message_latencies_us.push((now - due).total_micros());
                self.next_message += 1;
            }
        });
        sink_finish(&mut self.closed, now, conn, io, eof);
    }
}

/// The seed article's echo client: random messages of 200–400 bytes, 2–20 ms
/// apart; done when every byte came back, then closes.
struct EchoClient {
    messages_left: u32,
    next_at: Instant,
    rng: Xoshiro256PlusPlus,
    /// Bytes of the current message not yet accepted by the send buffer.
    pending: Vec<u8>,
    sent_total: u64,
    closed: bool,
}

impl ClientApp for EchoClient {
    fn run(&mut self, now: Instant, conn: &mut Connection, io: &mut FlowIo) {
        loop {
            if self.pending.is_empty() {
                if self.messages_left == 0 || self.next_at > now {
                    break;
                }
                let size = 200 + (self.rng.next_u32() % 200) as usize;
                self.pending.resize(size, 0);
                self.rng.fill_bytes(&mut self.pending);
                io.digests.update(Stream::Sent, &self.pending[..]);
                if let Verifier::Echo { unechoed } = &mut io.verifier {
                    unechoed.extend(self.pending.iter());
                }
                self.sent_total += size as u64;
                self.messages_left -= 1;
                self.next_at = now + Duration::from_millis(2 + (self.rng.next_u32() % 18) as u64);
            }
            let Ok(n) = conn.write(&self.pending) else { return };
            self.pending.drain(..n);
            if !self.pending.is_empty() {
                break;
            }
        }
        loop {
            match conn.read(&mut io.read_buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    io.digests.update(Stream::Received, &io.read_buf[..n]);
                    io.wrong_bytes += io.verifier.check(&io.read_buf[..n]);
                    io.client_received += n as u64;
                }
            }
        }
        // Until done, what was sent so far is what is expected back.
        io.bytes_expected = self.sent_total;
        let all_sent = self.messages_left == 0 && self.pending.is_empty();
        if all_sent && io.client_received == self.sent_total {
            io.complete(now);
        }
        if io.completed_at.is_some() && !self.closed {
            self.closed = true;
            conn.close(now);
        }
    }

    fn wakeup(&self) -> Option<Instant> {
        (self.messages_left > 0 && self.pending.is_empty()).then_some(self.next_at)
    }

    /// The last message is drawn: its echo, the last the workload waits for, may be on its way.
    fn done_writing(&self) -> bool {
        self.closed || self.messages_left == 0
    }
}

/// Reads the bulk stream, checking every byte; closes at its end.
struct Sink {
    closed: bool,
}

impl ServerApp for Sink {
    fn run(&mut self, now: Instant, conn: &mut Connection, io: &mut FlowIo) {
        let eof = sink_reads(conn, io, |_, _| {});
        sink_finish(&mut self.closed, now, conn, io, eof);
    }

    /// Something to read, or the stream's end to act on once.
    fn has_work(&self, conn: &Connection) -> bool {
        conn.readable_len() > 0 || (conn.peer_finished() && !self.closed)
    }
}

/// Reads everything readable, checking every byte in the receive buffer itself (no
/// copy), and hands each chunk's length to `chunk`; returns whether the stream ended.
fn sink_reads(conn: &mut Connection, io: &mut FlowIo, mut chunk: impl FnMut(&mut FlowIo, u64)) -> bool {
    loop {
        let verifier = &mut io.verifier;
        let mut wrong = 0;
        let (n, eof) = match conn.read_with(CHUNK, |bytes| wrong += verifier.check(bytes)) {
            Ok(0) => (0, true),
            Ok(n) => (n, false),
            Err(ReadError::WouldBlock) | Err(ReadError::ConnectionLost(_)) => (0, false),
        };
        io.wrong_bytes += wrong;
        if n == 0 {
            return eof;
        }
        io.server_received += n as u64;
        chunk(io, n as u64);
    }
}

/// At the stream's end: close our side once, and count the flow complete.
fn sink_finish(closed: &mut bool, now: Instant, conn: &mut Connection, io: &mut FlowIo, eof: bool) {
    if eof && !*closed {
        conn.close(now);
        *closed = true;
    }
    if eof {
        io.complete(now);
    }
}

/// Writes back everything it reads; closes once the client finished and everything went back.
struct EchoServer {
    backlog: Vec<u8>,
    closed: bool,
}

impl ServerApp for EchoServer {
    fn run(&mut self, now: Instant, conn: &mut Connection, io: &mut FlowIo) {
        let mut eof = false;
        loop {
            match conn.read(&mut io.read_buf) {
                Ok(0) => eof = true,
                Ok(n) => {
                    io.server_received += n as u64;
                    self.backlog.extend_from_slice(&io.read_buf[..n]);
                    continue;
                }
                Err(ReadError::WouldBlock) | Err(ReadError::ConnectionLost(_)) => {}
            }
            break;
        }
        if !self.backlog.is_empty() {
            if let Ok(n) = conn.write(&self.backlog) {
                self.backlog.drain(..n);
            }
        }
        if eof && self.backlog.is_empty() && !self.closed {
            conn.close(now);
            self.closed = true;
        }
    }
}
