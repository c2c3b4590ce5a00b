//! The simulated world: a client and a server endpoint joined by one link per
//! direction, run in virtual time. The clock jumps to the next deadline of any
//! endpoint, link or application; nothing ever sleeps. Every random choice
//! derives from the scenario's seed, so a run is reproducible bit for bit.

use crate::report::{rtt_summary, SimReport};
use crate::scenario::{Scenario, Workload};
use fencepost_link::Link;
use fencepost_proto::{
    ConnectionError, ConnectionHandle, ConnectionStats, DatagramEvent, Endpoint, EndpointConfig, Instant, ReadError, State,
    TraceEvent,
};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use crate::digest::{Stream, StreamDigests};
use crate::pattern::BulkPattern;

const CLIENT: u8 = 0;
const SERVER: u8 = 1;
/// Consecutive steps at one instant before the run is declared stuck (a bug, not a network condition).
const MAX_STEPS_AT_ONE_INSTANT: u32 = 1_000_000;

/// Derives independent seeds for each random source from the scenario's one seed (SplitMix64).
fn sub_seed(seed: u64, stream: u64) -> u64 {
    let mut z = seed.wrapping_add(stream.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which endpoint a trace record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// Which link a link event happened on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// Receives per-packet trace events while a run goes on.
pub trait TraceSink: Send {
    fn record(&mut self, role: Role, event: &TraceEvent);
    /// Drops and duplications on the links.
    fn record_link(&mut self, direction: Direction, event: &fencepost_link::LinkEvent) {
        let _ = (direction, event);
    }
    /// The run is over; report anything that went wrong while recording.
    fn finish(self: Box<Self>) -> std::io::Result<()> {
        Ok(())
    }
}

/// The client's application.
enum ClientApp {
    Bulk {
        remaining: u64,
        /// A timed transfer stops writing at this instant.
        write_until: Option<Instant>,
        written: u64,
        pattern: BulkPattern,
        chunk: Vec<u8>,
        chunk_pos: usize,
        /// Stream offset of `chunk[0]`.
        chunk_offset: u64,
        closed: bool,
    },
    Echo {
        messages_left: u32,
        next_at: Instant,
        rng: Xoshiro256PlusPlus,
        /// Bytes of the current message not yet accepted by the send buffer.
        pending: Vec<u8>,
        sent_total: u64,
        received: u64,
        closed: bool,
    },
}

/// Regenerates what the receiving application must see, to catch a wrong byte the moment it is read.
enum Verifier {
    /// The bulk stream, regenerated from the client's seed in the same 64 KiB chunks.
    Bulk { pattern: BulkPattern, chunk: Vec<u8>, pos: usize, offset: u64 },
    /// Echo: the bytes the client sent and has not yet had back.
    Echo { unechoed: std::collections::VecDeque<u8> },
}

impl Verifier {
    /// Counts the bytes of `got` that differ from what should come next.
    fn check(&mut self, got: &[u8]) -> u64 {
        let mut wrong = 0u64;
        match self {
            Verifier::Bulk { pattern, chunk, pos, offset } => {
                let mut rest = got;
                while !rest.is_empty() {
                    if *pos == chunk.len() {
                        *offset = offset.wrapping_add(chunk.len() as u64);
                        pattern.fill(*offset, chunk);
                        *pos = 0;
                    }
                    let n = rest.len().min(chunk.len() - *pos);
                    let (got, expected) = (&rest[..n], &chunk[*pos..*pos + n]);
                    // Compare whole slices first (memcmp); count differing bytes only on a mismatch.
                    if got != expected {
                        wrong += got.iter().zip(expected).filter(|(a, b)| a != b).count() as u64;
                    }
                    *pos += n;
                    rest = &rest[n..];
                }
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

struct Outcome {
    completed_at: Option<Instant>,
    client_stats: ConnectionStats,
    server_stats: ConnectionStats,
    rtt_samples: Vec<u32>,
    payload_size: usize,
    /// Bytes read by an application that differ from what was sent (must stay 0).
    wrong_bytes: u64,
    /// A timed bulk transfer: bytes the server had read when the writing time ended.
    delivered_at_deadline: Option<u64>,
}

pub struct Simulation {
    scenario: Scenario,
    now: Instant,
    client: Endpoint<u8>,
    server: Endpoint<u8>,
    up: Link<Vec<u8>>,
    down: Link<Vec<u8>>,
    client_conn: ConnectionHandle,
    server_conn: Option<ConnectionHandle>,
    app: ClientApp,
    digests: StreamDigests,
    bytes_expected: u64,
    /// Server side: bytes read (bulk) and echo bytes still to write back.
    server_received: u64,
    server_backlog: Vec<u8>,
    server_closed: bool,
    /// Independent check of every byte delivered, as it is delivered (not just the final hash).
    verifier: Verifier,
    last_rx_client: Instant,
    last_rx_server: Instant,
    outcome: Outcome,
    buf: Vec<u8>,
    read_buf: Vec<u8>,
    /// Datagram buffers back from the links, reused to spare an allocation per packet.
    pool: Vec<Vec<u8>>,
    trace: Option<Box<dyn TraceSink>>,
    cancel: Option<Arc<AtomicBool>>,
    hash_thread: bool,
}

impl Simulation {
    pub fn new(scenario: Scenario) -> Simulation {
        let seed = scenario.seed;
        let start = Instant::ZERO;
        let client_config = EndpointConfig::client(scenario.transport.clone());
        let server_config = EndpointConfig::server(scenario.transport.clone());
        let mut client = Endpoint::new(client_config, sub_seed(seed, 1));
        let server = Endpoint::new(server_config, sub_seed(seed, 2));
        let up = Link::new(scenario.up.clone(), sub_seed(seed, 3), start.total_micros());
        let down = Link::new(scenario.down.clone(), sub_seed(seed, 4), start.total_micros());
        let client_conn = client.connect(start, SERVER);
        let app_rng = Xoshiro256PlusPlus::seed_from_u64(sub_seed(seed, 5));
        // The bulk stream: the sender writes it, the verifier and the hasher regenerate it.
        let bulk_pattern = matches!(scenario.workload, Workload::Bulk { .. }).then(|| BulkPattern::new(sub_seed(seed, 5)));
        let (app, bytes_expected) = match scenario.workload {
            Workload::Bulk { bytes, duration } => (
                ClientApp::Bulk {
                    remaining: bytes,
                    write_until: duration.map(|d| start + d),
                    written: 0,
                    pattern: bulk_pattern.clone().expect("a bulk workload has a pattern"),
                    chunk: vec![0; 64 * 1024],
                    chunk_pos: 64 * 1024,
                    // The first refill moves to offset 0.
                    chunk_offset: 0u64.wrapping_sub(64 * 1024),
                    closed: false,
                },
                if duration.is_some() { 0 } else { bytes },
            ),
            Workload::Echo { messages } => (
                ClientApp::Echo {
                    messages_left: messages,
                    next_at: start,
                    rng: app_rng,
                    pending: Vec::new(),
                    sent_total: 0,
                    received: 0,
                    closed: false,
                },
                0,
            ),
        };
        let payload_size = scenario.transport.max_payload as usize;
        let verifier = match scenario.workload {
            Workload::Bulk { .. } => Verifier::Bulk {
                pattern: bulk_pattern.clone().expect("a bulk workload has a pattern"),
                chunk: vec![0; 64 * 1024],
                pos: 64 * 1024,
                offset: 0u64.wrapping_sub(64 * 1024),
            },
            Workload::Echo { .. } => Verifier::Echo { unechoed: std::collections::VecDeque::new() },
        };
        Simulation {
            scenario,
            now: start,
            client,
            server,
            up,
            down,
            client_conn,
            server_conn: None,
            app,
            // Inline until the run starts: `run` moves hashing to a helper thread unless `hash_inline` was asked for.
            digests: StreamDigests::inline(bulk_pattern.clone()),
            hash_thread: true,
            bytes_expected,
            server_received: 0,
            server_backlog: Vec::new(),
            server_closed: false,
            verifier,
            last_rx_client: start,
            last_rx_server: start,
            outcome: Outcome {
                completed_at: None,
                client_stats: ConnectionStats::default(),
                server_stats: ConnectionStats::default(),
                rtt_samples: Vec::new(),
                payload_size,
                wrong_bytes: 0,
                delivered_at_deadline: None,
            },
            buf: vec![0; 65_536],
            read_buf: vec![0; 65_536],
            pool: Vec::new(),
            cancel: None,
            trace: None,
        }
    }

    /// Hashes on the simulation's own thread: for runs that already share the
    /// machine's cores with other runs (sweeps), a helper thread only adds contention.
    pub fn hash_inline(mut self) -> Simulation {
        self.hash_thread = false;
        self
    }

    /// Sends per-packet trace events to `sink` (turns tracing on in both endpoints' transport).
    pub fn with_trace(mut self, sink: Box<dyn TraceSink>) -> Simulation {
        let mut transport = self.scenario.transport.clone();
        transport.trace = true;
        self.scenario.transport = transport;
        let mut rebuilt = Simulation::new(self.scenario);
        rebuilt.up.observe(true);
        rebuilt.down.observe(true);
        Simulation { trace: Some(sink), ..rebuilt }
    }

    /// Runs to the end and closes the trace sink, reporting a failure to record.
    pub fn run_traced(self) -> (SimReport, std::io::Result<()>) {
        let (report, sink) = self.run_inner();
        let recorded = sink.map_or(Ok(()), |s| s.finish());
        (report, recorded)
    }

    /// Runs to the end: completion and graceful close, an error, or the time bound.
    pub fn run(self) -> SimReport {
        self.run_inner().0
    }

    /// Stops the run early (status `cancelled`) once `flag` is set, checked every few thousand steps.
    pub fn cancel_on(mut self, flag: Arc<AtomicBool>) -> Simulation {
        self.cancel = Some(flag);
        self
    }

    fn run_inner(mut self) -> (SimReport, Option<Box<dyn TraceSink>>) {
        if self.hash_thread {
            self.digests = StreamDigests::new(self.bulk_pattern());
        }
        let deadline = self.now + self.scenario.timeout;
        let mut steps_here = 0u32;
        let mut steps = 0u64;
        let (status, error) = loop {
            steps += 1;
            if steps % 4096 == 0 && self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
                break ("cancelled".to_string(), Some(format!("cancelled at {:.6} s", self.now.as_secs_f64())));
            }
            self.step();
            if let Some(end) = self.finished() {
                break end;
            }
            let next = [
                self.up.poll_timeout().map(Instant::from_micros),
                self.down.poll_timeout().map(Instant::from_micros),
                self.client.poll_timeout(),
                self.server.poll_timeout(),
                self.app_wakeup(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else {
                break ("stalled".to_string(), Some(format!("nothing left to happen at {:.6} s", self.now.as_secs_f64())));
            };
            if next > deadline {
                self.now = deadline;
                break ("deadline".to_string(), Some(format!("the run passed its {:.3} s bound", self.scenario.timeout.as_secs_f64())));
            }
            if next <= self.now {
                steps_here += 1;
                if steps_here > MAX_STEPS_AT_ONE_INSTANT {
                    break ("stalled".to_string(), Some(format!("no progress at {:.6} s", self.now.as_secs_f64())));
                }
            } else {
                steps_here = 0;
                self.now = next;
            }
        };
        self.drain_events();
        let sink = self.trace.take();
        (self.report(status, error), sink)
    }

    fn bulk_pattern(&self) -> Option<BulkPattern> {
        match &self.app {
            ClientApp::Bulk { pattern, .. } => Some(pattern.clone()),
            ClientApp::Echo { .. } => None,
        }
    }

    fn app_wakeup(&self) -> Option<Instant> {
        match &self.app {
            ClientApp::Bulk { write_until: Some(until), closed: false, .. } => Some(*until),
            ClientApp::Echo { messages_left, next_at, pending, .. } if *messages_left > 0 && pending.is_empty() => Some(*next_at),
            _ => None,
        }
    }

    /// Everything that happens at `self.now`.
    fn step(&mut self) {
        let now = self.now;
        let t = now.total_micros();
        while let Some(datagram) = self.up.poll_deliver(t) {
            self.last_rx_server = now;
            match self.server.handle_datagram(now, CLIENT, &datagram, &mut self.buf) {
                Some(DatagramEvent::NewConnection(incoming)) => {
                    if let Ok(handle) = self.server.accept(incoming) {
                        self.server_conn.get_or_insert(handle);
                    }
                }
                Some(DatagramEvent::Response { transmit, .. }) => {
                    let datagram = Self::pooled(&mut self.pool, &self.buf[..transmit.size]);
                    self.down.enqueue(t, datagram, transmit.size + self.scenario.header_overhead);
                }
                Some(DatagramEvent::Connection(_)) | None => {}
            }
            self.pool.push(datagram);
        }
        while let Some(datagram) = self.down.poll_deliver(t) {
            self.last_rx_client = now;
            self.client.handle_datagram(now, SERVER, &datagram, &mut self.buf);
            self.pool.push(datagram);
        }
        if self.client.poll_timeout().is_some_and(|d| d <= now) {
            self.client.handle_timeout(now);
        }
        if self.server.poll_timeout().is_some_and(|d| d <= now) {
            self.server.handle_timeout(now);
        }
        self.run_client_app();
        self.run_server_app();
        let overhead = self.scenario.header_overhead;
        while let Some((_, transmit)) = self.client.poll_transmit(now, &mut self.buf) {
            let datagram = Self::pooled(&mut self.pool, &self.buf[..transmit.size]);
            self.up.enqueue(t, datagram, transmit.size + overhead);
        }
        while let Some((_, transmit)) = self.server.poll_transmit(now, &mut self.buf) {
            let datagram = Self::pooled(&mut self.pool, &self.buf[..transmit.size]);
            self.down.enqueue(t, datagram, transmit.size + overhead);
        }
        self.drain_events();
    }

    fn pooled(pool: &mut Vec<Vec<u8>>, bytes: &[u8]) -> Vec<u8> {
        let mut datagram = pool.pop().unwrap_or_default();
        datagram.clear();
        datagram.extend_from_slice(bytes);
        datagram
    }

    fn drain_events(&mut self) {
        if let Some(conn) = self.client.connection_mut(self.client_conn) {
            while conn.poll_event().is_some() {}
            if let Some(sink) = &mut self.trace {
                for event in conn.drain_trace() {
                    sink.record(Role::Client, &event);
                }
            }
        }
        if let Some(conn) = self.server_conn.and_then(|h| self.server.connection_mut(h)) {
            while conn.poll_event().is_some() {}
            if let Some(sink) = &mut self.trace {
                for event in conn.drain_trace() {
                    sink.record(Role::Server, &event);
                }
            }
        }
        if let Some(sink) = &mut self.trace {
            for event in self.up.drain_events() {
                sink.record_link(Direction::Up, &event);
            }
            for event in self.down.drain_events() {
                sink.record_link(Direction::Down, &event);
            }
        }
    }

    fn run_client_app(&mut self) {
        let now = self.now;
        let Some(conn) = self.client.connection_mut(self.client_conn) else { return };
        match &mut self.app {
            ClientApp::Bulk { remaining, write_until, written, pattern, chunk, chunk_pos, chunk_offset, closed } => {
                if write_until.is_some_and(|until| now >= until) && !*closed {
                    // A timed transfer ends here: what was written is what must arrive.
                    *remaining = 0;
                    self.bytes_expected = *written;
                    if self.outcome.delivered_at_deadline.is_none() {
                        self.outcome.delivered_at_deadline = Some(self.server_received);
                    }
                }
                while *remaining > 0 {
                    if *chunk_pos == chunk.len() {
                        *chunk_offset = chunk_offset.wrapping_add(chunk.len() as u64);
                        pattern.fill(*chunk_offset, chunk);
                        *chunk_pos = 0;
                    }
                    let want = (*remaining).min((chunk.len() - *chunk_pos) as u64) as usize;
                    let Ok(n) = conn.write(&chunk[*chunk_pos..*chunk_pos + want]) else { return };
                    if n == 0 {
                        break;
                    }
                    self.digests.update_sent_pattern(n as u64);
                    *chunk_pos += n;
                    *remaining -= n as u64;
                    *written += n as u64;
                }
                if *remaining == 0 && !*closed {
                    conn.close(now);
                    *closed = true;
                }
            }
            ClientApp::Echo { messages_left, next_at, rng, pending, sent_total, received, closed } => {
                // Write any message whose time has come (the seed: 200-400 bytes, 2-20 ms apart).
                loop {
                    if pending.is_empty() {
                        if *messages_left == 0 || *next_at > now {
                            break;
                        }
                        let size = 200 + (rng.next_u32() % 200) as usize;
                        pending.resize(size, 0);
                        rng.fill_bytes(pending);
                        self.digests.update(Stream::Sent, &pending[..]);
                        if let Verifier::Echo { unechoed } = &mut self.verifier {
                            unechoed.extend(pending.iter());
                        }
                        *sent_total += size as u64;
                        *messages_left -= 1;
                        *next_at = now + fencepost_proto::Duration::from_millis(2 + (rng.next_u32() % 18) as u64);
                    }
                    let Ok(n) = conn.write(pending) else { return };
                    pending.drain(..n);
                    if !pending.is_empty() {
                        break;
                    }
                }
                loop {
                    match conn.read(&mut self.read_buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            self.digests.update(Stream::Received, &self.read_buf[..n]);
                            self.outcome.wrong_bytes += self.verifier.check(&self.read_buf[..n]);
                            *received += n as u64;
                        }
                    }
                }
                let all_sent = *messages_left == 0 && pending.is_empty();
                let done = all_sent && *received == *sent_total;
                if done && self.outcome.completed_at.is_none() {
                    self.bytes_expected = *sent_total;
                    Self::snapshot(&mut self.outcome, now, &self.client, self.client_conn, &self.server, self.server_conn);
                }
                if self.outcome.completed_at.is_some() && !*closed {
                    *closed = true;
                    if let Some(conn) = self.client.connection_mut(self.client_conn) {
                        conn.close(now);
                    }
                }
            }
        }
    }

    fn run_server_app(&mut self) {
        let now = self.now;
        let Some(handle) = self.server_conn else { return };
        let echo = matches!(self.scenario.workload, Workload::Echo { .. });
        let Some(conn) = self.server.connection_mut(handle) else { return };
        let mut eof = false;
        loop {
            if echo {
                match conn.read(&mut self.read_buf) {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        self.server_received += n as u64;
                        self.server_backlog.extend_from_slice(&self.read_buf[..n]);
                        continue;
                    }
                    Err(ReadError::WouldBlock) | Err(ReadError::ConnectionLost(_)) => {}
                }
                break;
            }
            // Bulk: read straight into the buffer the hasher takes, checking every byte on the way.
            let buf = self.digests.receive_buffer();
            let n = match conn.read(buf) {
                Ok(0) => {
                    eof = true;
                    0
                }
                Ok(n) => {
                    self.outcome.wrong_bytes += self.verifier.check(&buf[..n]);
                    n
                }
                Err(ReadError::WouldBlock) | Err(ReadError::ConnectionLost(_)) => 0,
            };
            self.digests.commit_received(n);
            if n == 0 {
                break;
            }
            self.server_received += n as u64;
        }
        if echo && !self.server_backlog.is_empty() {
            if let Ok(n) = conn.write(&self.server_backlog) {
                self.server_backlog.drain(..n);
            }
        }
        if eof && self.server_backlog.is_empty() && !self.server_closed {
            conn.close(now);
            self.server_closed = true;
        }
        if !echo && eof && self.outcome.completed_at.is_none() {
            Self::snapshot(&mut self.outcome, now, &self.client, self.client_conn, &self.server, self.server_conn);
        }
    }

    fn snapshot(
        outcome: &mut Outcome,
        now: Instant,
        client: &Endpoint<u8>,
        client_conn: ConnectionHandle,
        server: &Endpoint<u8>,
        server_conn: Option<ConnectionHandle>,
    ) {
        outcome.completed_at = Some(now);
        if let Some(c) = client.connection(client_conn) {
            outcome.client_stats = c.stats().clone();
            outcome.rtt_samples = c.rtt_samples().to_vec();
            outcome.payload_size = c.payload_size();
        }
        if let Some(s) = server_conn.and_then(|h| server.connection(h)) {
            outcome.server_stats = s.stats().clone();
        }
    }

    fn state_of(endpoint: &Endpoint<u8>, handle: Option<ConnectionHandle>) -> Option<(State, Option<ConnectionError>)> {
        let conn = endpoint.connection(handle?)?;
        Some((conn.state(), conn.error().cloned()))
    }

    /// The run's end, if it has come: (status, error message).
    fn finished(&self) -> Option<(String, Option<String>)> {
        let client = Self::state_of(&self.client, Some(self.client_conn));
        let server = Self::state_of(&self.server, self.server_conn);
        for (who, side) in [("client", &client), ("server", &server)] {
            if let Some((State::Lost, Some(error))) = side {
                let status = match error {
                    ConnectionError::TimedOut { .. } => "timeout",
                    ConnectionError::Reset(_) | ConnectionError::LocallyReset => "reset",
                };
                return Some((status.to_string(), Some(format!("{who}: {error}"))));
            }
        }
        let closed = |s: &Option<(State, Option<ConnectionError>)>| matches!(s, Some((State::Closed | State::Drained, _)));
        if self.outcome.completed_at.is_some() && closed(&client) && closed(&server) {
            return Some(("ok".to_string(), None));
        }
        None
    }

    fn report(mut self, status: String, error: Option<String>) -> SimReport {
        if self.outcome.completed_at.is_none() {
            // Incomplete: report the counters as they stand.
            let now = self.now;
            Self::snapshot(&mut self.outcome, now, &self.client, self.client_conn, &self.server, self.server_conn);
            self.outcome.completed_at = None;
        }
        let completed = self.outcome.completed_at;
        let bytes_delivered = match &self.app {
            ClientApp::Echo { received, sent_total, .. } => {
                if completed.is_none() {
                    self.bytes_expected = *sent_total;
                }
                *received
            }
            ClientApp::Bulk { .. } => self.server_received,
        };
        let [sent_digest, received_digest] = std::mem::replace(&mut self.digests, StreamDigests::inline(None)).finish();
        let integrity_ok = completed.is_some()
            && bytes_delivered == self.bytes_expected
            && sent_digest == received_digest
            && self.outcome.wrong_bytes == 0;
        let timeout_silence_s = error.as_deref().and_then(|e| {
            let last = if e.starts_with("client:") { self.last_rx_client } else { self.last_rx_server };
            (status == "timeout").then(|| (self.now - last).as_secs_f64())
        });
        let close_ok = integrity_ok && status == "ok";
        let duration = completed.map_or(self.now, |t| t).as_secs_f64();
        let c = &self.outcome.client_stats;
        let s = &self.outcome.server_stats;
        let (rtt_mean_ms, rtt_p95_ms) = rtt_summary(&self.outcome.rtt_samples);
        let up = self.up.stats();
        let down = self.down.stats();
        let t = &self.scenario.transport;
        SimReport {
            status,
            error,
            integrity_ok,
            close_ok,
            workload: self.scenario.workload.name().to_string(),
            profile: t.profile.name().to_string(),
            arq: t.arq.name().to_string(),
            cc: self.scenario.options.get("cc").cloned().unwrap_or_default(),
            seed: self.scenario.seed,
            bytes_expected: self.bytes_expected,
            bytes_delivered,
            sha256: sent_digest.iter().map(|b| format!("{b:02x}")).collect(),
            payload_size: self.outcome.payload_size,
            duration_s: duration,
            goodput_bps: match (self.outcome.delivered_at_deadline, self.scenario.workload.clone()) {
                // A timed transfer: what arrived while the sender was writing, over that time.
                (Some(bytes), Workload::Bulk { duration: Some(d), .. }) => bytes as f64 * 8.0 / d.as_secs_f64(),
                _ if duration > 0.0 => bytes_delivered as f64 * 8.0 / duration,
                _ => 0.0,
            },
            packets_sent: c.packets_sent,
            data_packets_sent: c.data_packets_sent,
            retransmissions: c.retransmissions,
            acks_sent: c.acks_sent,
            keepalives_sent: c.keepalives_sent,
            handshake_packets_sent: c.handshakes_sent,
            acks_received: c.acks_received,
            duplicate_acks_received: c.duplicate_acks_received,
            packets_presumed_lost: c.packets_lost,
            spurious_retransmissions: c.spurious_retransmissions,
            congestion_events: c.congestion_events,
            retransmission_timeouts: c.retransmission_timeouts,
            peer_packets_sent: s.packets_sent,
            peer_data_packets_sent: s.data_packets_sent,
            peer_acks_sent: s.acks_sent,
            rtt_samples: self.outcome.rtt_samples.len(),
            rtt_mean_ms,
            rtt_p95_ms,
            link_drops: up.lost + up.queue_dropped + down.lost + down.queue_dropped,
            link_up: up,
            link_down: down,
            end_s: self.now.as_secs_f64(),
            wrong_bytes: self.outcome.wrong_bytes,
            timeout_silence_s,
            options: self.scenario.options.clone(),
        }
    }
}

/// Runs one scenario to its end.
pub fn run(scenario: Scenario) -> SimReport {
    Simulation::new(scenario).run()
}
