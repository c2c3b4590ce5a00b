//! The simulated world: hosts joined by links, flows between hosts, run in
//! virtual time. Each link direction is a [`fencepost_link::Link`]; a packet
//! crosses the links of its flow's path one after another (hosts in between
//! forward it at once). Each flow has a client endpoint and a server endpoint
//! with an application on each. The clock jumps to the next deadline of any
//! endpoint, link, application or link event; nothing ever sleeps. Every random
//! choice derives from the scenario's seed, so a run is reproducible bit for bit.

use crate::apps::{self, ClientApp, FlowIo, ServerApp};
use crate::digest::StreamDigests;
use fencepost_link::{Bandwidth, Link, LinkEvent, LossModel};
use fencepost_proto::{
    ConnectionError, ConnectionHandle, ConnectionStats, DatagramEvent, Endpoint, EndpointConfig, Instant, State, TraceEvent,
};
use fencepost_spec::report::{jain_index, rtt_percentiles, rtt_summary, FlowReport, LinkReport, RunReport};
use fencepost_spec::{describe_cc, Direction, FlowSpec, Hop, LinkAction, LinkEventSpec, Scenario, Workload};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[path = "parallel.rs"]
mod parallel;

pub use parallel::OneThread;

/// How a run split its work ([`Simulation::parallel`], [`Simulation::windows`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Parallelism {
    /// Simulated time run in windows, the clients' side apart from the servers' (on two
    /// threads with [`Simulation::parallel`], in turn on one without): the rest
    /// (handshakes, the last round trips, failures) steps through both sides together.
    pub apart: fencepost_proto::Duration,
    /// Asked to run on two threads, why it ran on one throughout (`None` when it was not
    /// asked, or could split).
    pub one_thread: Option<OneThread>,
}

/// Addresses inside a flow: its client endpoint and its server endpoint.
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

/// Random streams of flow `flow` (client endpoint, server endpoint, application) and of
/// link `link`'s two directions. The first flow and link keep the streams a one-link run always had.
fn flow_seeds(seed: u64, flow: usize) -> [u64; 3] {
    if flow == 0 {
        [sub_seed(seed, 1), sub_seed(seed, 2), sub_seed(seed, 5)]
    } else {
        let base = 1_000 + 10 * flow as u64;
        [sub_seed(seed, base + 1), sub_seed(seed, base + 2), sub_seed(seed, base + 5)]
    }
}

fn link_seeds(seed: u64, link: usize) -> [u64; 2] {
    if link == 0 {
        [sub_seed(seed, 3), sub_seed(seed, 4)]
    } else {
        let base = 1_000_000 + 10 * link as u64;
        [sub_seed(seed, base + 3), sub_seed(seed, base + 4)]
    }
}

/// Which end of a flow a trace record came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// Receives per-packet trace events while a run goes on.
pub trait TraceSink: Send {
    /// An event of flow `flow` (numbered from 1) at one of its ends.
    fn record(&mut self, flow: usize, role: Role, event: &TraceEvent);
    /// Drops, duplications and deliveries on a link direction.
    fn record_link(&mut self, link: &str, direction: Direction, event: &LinkEvent) {
        let _ = (link, direction, event);
    }
    /// The run is over; report anything that went wrong while recording.
    fn finish(self: Box<Self>) -> std::io::Result<()> {
        Ok(())
    }
}

/// A datagram crossing the topology: which flow, which way, and how far along its path.
#[derive(Clone)]
struct InTransit {
    flow: u32,
    to_server: bool,
    hop: u16,
    /// A pooled buffer, [`Simulation::datagram_room`] long; the datagram is its first `len` bytes.
    datagram: Vec<u8>,
    len: usize,
}

/// One direction of one link.
struct Channel {
    link: Link<InTransit>,
    name: String,
    direction: Direction,
    from: usize,
    to: usize,
    /// Link events applied, as the report lists them.
    applied: Vec<String>,
    /// Bytes delivered when the last workload completed (utilisation counts until then).
    delivered_at_completion: Option<u64>,
}

impl Channel {
    /// A link event, due at `now`, on this direction.
    fn apply(&mut self, event: &LinkEventSpec, now: Instant) {
        let t = now.total_micros();
        match &event.action {
            LinkAction::Blackout(d) => self.link.blackout(t, t + d.total_micros()),
            LinkAction::Rate(bps) => self.link.set_bandwidth(t, Bandwidth::Rate(*bps)),
            LinkAction::Loss(p) => self.link.set_loss(t, if *p > 0.0 { LossModel::Bernoulli(*p) } else { LossModel::None }),
            LinkAction::Delay(d) => self.link.set_delay(t, d.total_micros()),
        }
        self.applied.push(format!("at {:.3} s: {}", event.at.as_secs_f64(), event.action.describe()));
    }
}

/// The counters of a flow, taken when its workload completed.
#[derive(Default)]
struct Snapshot {
    client: ConnectionStats,
    server: ConnectionStats,
    rtt_samples: Vec<u32>,
    rtt_count: u64,
    rtt_mean_us: Option<f64>,
    payload_size: usize,
}

struct Flow {
    spec: FlowSpec,
    client: Endpoint<u8>,
    server: Endpoint<u8>,
    client_conn: Option<ConnectionHandle>,
    server_conn: Option<ConnectionHandle>,
    client_app: Box<dyn ClientApp>,
    server_app: Box<dyn ServerApp>,
    io: FlowIo,
    snapshot: Snapshot,
    /// (status, error, when) once the flow is over.
    ended: Option<(String, Option<String>, Instant)>,
    last_rx_client: Instant,
    last_rx_server: Instant,
    /// Bytes delivered to the application at each `--series` boundary so far.
    series: Vec<u64>,
    /// The propagation delays of the path there and back, without queueing or jitter.
    round_trip: fencepost_proto::Duration,
}

impl Flow {
    /// What the application has received: the server for bulk, the echoes back at the client for echo.
    fn delivered(&self) -> u64 {
        delivered(&self.spec.workload, &self.io)
    }

    fn start(&self) -> Instant {
        Instant::ZERO + self.spec.start
    }

    fn take_snapshot(&mut self) {
        if let Some(c) = self.client_conn.and_then(|h| self.client.connection(h)) {
            self.snapshot.client = c.stats().clone();
            self.snapshot.rtt_samples = c.rtt_samples().to_vec();
            self.snapshot.rtt_count = c.rtt_history().count();
            self.snapshot.rtt_mean_us = c.rtt_history().mean_us();
            self.snapshot.payload_size = c.payload_size();
        }
        if let Some(s) = self.server_conn.and_then(|h| self.server.connection(h)) {
            self.snapshot.server = s.stats().clone();
        }
    }

    fn state(endpoint: &Endpoint<u8>, handle: Option<ConnectionHandle>) -> Option<(State, Option<ConnectionError>)> {
        let conn = endpoint.connection(handle?)?;
        Some((conn.state(), conn.error().cloned()))
    }

    /// The flow's end, if it has come: (status, error message).
    fn outcome(&self) -> Option<(String, Option<String>)> {
        let client = Self::state(&self.client, self.client_conn);
        let server = Self::state(&self.server, self.server_conn);
        for (who, side) in [("client", &client), ("server", &server)] {
            if let Some((State::Lost, Some(error))) = side {
                let status = match error {
                    ConnectionError::TimedOut { .. } => "timeout",
                    ConnectionError::Reset(_) | ConnectionError::LocallyReset => "reset",
                    ConnectionError::NoProgress { .. } => "stalled",
                    ConnectionError::Handshake(_) => "handshake",
                    ConnectionError::Unreachable(_) | ConnectionError::PortClosed { .. } => "unreachable",
                };
                let mut message = format!("{who}: {error}");
                if let ConnectionError::TimedOut { idle } = error {
                    if *idle <= self.round_trip {
                        // The seed profile's 100 ms, on a path longer than the seed's LAN: no
                        // reply can come in time, whatever the loss.
                        message += &format!(
                            " — the idle timeout is no longer than this path's round trip ({:.3} s without queueing): raise --idle-timeout",
                            self.round_trip.as_secs_f64()
                        );
                    }
                }
                return Some((status.to_string(), Some(message)));
            }
        }
        let closed = |s: &Option<(State, Option<ConnectionError>)>| matches!(s, Some((State::Closed | State::Drained, _)));
        (self.io.completed_at.is_some() && closed(&client) && closed(&server)).then(|| ("ok".to_string(), None))
    }
}

pub struct Simulation {
    scenario: Scenario,
    now: Instant,
    channels: Vec<Channel>,
    flows: Vec<Flow>,
    /// Link events, earliest first, and how many have been applied.
    events: Vec<LinkEventSpec>,
    next_event: usize,
    buf: Vec<u8>,
    /// Datagram buffers back from the links, reused to spare an allocation per packet; endpoints
    /// write into them directly, so each is as long as the largest datagram any endpoint sends.
    pool: Vec<Vec<u8>>,
    datagram_room: usize,
    trace: Option<Box<dyn TraceSink>>,
    cancel: Option<Arc<AtomicBool>>,
    /// Run on two threads where the topology allows (see [`Simulation::parallel`]).
    parallel: bool,
    /// Run the sides in windows, in turn, where the topology allows (see [`Simulation::windows`]).
    windows: bool,
}

fn channel_index(hop: Hop) -> usize {
    2 * hop.link + usize::from(!hop.up)
}

impl Simulation {
    pub fn new(scenario: Scenario) -> Simulation {
        let seed = scenario.seed;
        let start = Instant::ZERO;
        let topology = &scenario.topology;
        let mut channels = Vec::with_capacity(2 * topology.links.len());
        for (index, link) in topology.links.iter().enumerate() {
            let [up_seed, down_seed] = link_seeds(seed, index);
            for (direction, config, link_seed, from, to) in
                [(Direction::Up, &link.up, up_seed, link.a, link.b), (Direction::Down, &link.down, down_seed, link.b, link.a)]
            {
                channels.push(Channel {
                    link: Link::new(config.clone(), link_seed, start.total_micros()),
                    name: link.name.clone(),
                    direction,
                    from,
                    to,
                    applied: Vec::new(),
                    delivered_at_completion: None,
                });
            }
        }
        let flows = topology
            .flows
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let [client_seed, server_seed, app_seed] = flow_seeds(seed, i);
                let (client_app, server_app, io) = apps::build(&spec.workload, start + spec.start, app_seed);
                Flow {
                    client: Endpoint::new(EndpointConfig::client(spec.transport.clone()), client_seed),
                    server: Endpoint::new(EndpointConfig::server(spec.transport.clone()), server_seed),
                    client_conn: None,
                    server_conn: None,
                    client_app,
                    server_app,
                    io,
                    snapshot: Snapshot { payload_size: spec.transport.max_payload as usize, ..Default::default() },
                    ended: None,
                    last_rx_client: start,
                    last_rx_server: start,
                    series: Vec::new(),
                    round_trip: {
                        let delay = |hop: &Hop| {
                            let link = &topology.links[hop.link];
                            if hop.up { link.up.delay } else { link.down.delay }
                        };
                        let micros: u64 = spec.path.iter().chain(&spec.return_path).map(delay).sum();
                        fencepost_proto::Duration::from_micros(micros)
                    },
                    spec: spec.clone(),
                }
            })
            .collect();
        let mut events = topology.events.clone();
        events.sort_by_key(|e| e.at);
        // What `Connection::poll_transmit` asks for: the largest data packet, and at least 1,500
        // bytes (a handshake can be larger than a tiny payload's packets); and a margin, as an FEC
        // repair is 2 bytes longer than the largest data packet (its symbol carries the payload's
        // length and flags). A packet that did not fit would not be sent.
        let largest = topology.flows.iter().map(|f| f.transport.max_datagram()).max().unwrap_or(0);
        let datagram_room = largest.max(1_500) + 64;
        Simulation {
            scenario,
            now: start,
            channels,
            flows,
            events,
            next_event: 0,
            buf: vec![0; 65_536],
            pool: Vec::new(),
            datagram_room,
            trace: None,
            cancel: None,
            parallel: false,
            windows: true,
        }
    }

    /// Sends per-packet trace events to `sink` (turns tracing on in every endpoint's transport).
    pub fn with_trace(mut self, sink: Box<dyn TraceSink>) -> Simulation {
        for flow in &mut self.scenario.topology.flows {
            flow.transport.trace = true;
        }
        let cancel = self.cancel.take();
        let mut rebuilt = Simulation::new(self.scenario);
        for channel in &mut rebuilt.channels {
            channel.link.observe(true);
        }
        Simulation { trace: Some(sink), cancel, ..rebuilt }
    }

    /// Runs on two threads, one for the flows' clients and one for their servers, wherever
    /// the run allows (the report is the same as on one thread, bit for bit): when no host
    /// holds both a client and a server, the channels between the two sides all take at
    /// least 2 ms, and there is no trace sink. Each side then runs ahead of the other by
    /// that least delay, in windows, while every flow is established and mid-workload; the
    /// rest (handshakes, the end of each workload) runs on one thread. See `parallel.rs`.
    pub fn parallel(mut self, on: bool) -> Simulation {
        self.parallel = on;
        self
    }

    /// On one thread, runs the two sides [`Simulation::parallel`] would put on two threads
    /// in turn, a window each, wherever the run allows it (on by default; the report is the
    /// same bit for bit). Off, every instant steps through every endpoint and link, as
    /// the parts of a run that cannot split do. Each side's steps then look only at its own
    /// endpoints, and a window's packets are handled together on each side: a 100 MB
    /// transfer at 100 Mbit/s ran 1.17x as fast in windows (`bash bench/sim_speed.sh`,
    /// 2026-12-02). Tests turn it off to compare the two.
    pub fn windows(mut self, on: bool) -> Simulation {
        self.windows = on;
        self
    }

    /// Stops the run early (status `cancelled`) once `flag` is set, checked every few thousand steps.
    pub fn cancel_on(mut self, flag: Arc<AtomicBool>) -> Simulation {
        self.cancel = Some(flag);
        self
    }

    /// Runs to the end and closes the trace sink, reporting a failure to record.
    pub fn run_traced(self) -> (RunReport, std::io::Result<()>) {
        let (report, sink, _) = self.run_inner();
        let recorded = sink.map_or(Ok(()), |s| s.finish());
        (report, recorded)
    }

    /// Runs to the end: every flow complete and closed, or ended by an error, or the time bound.
    pub fn run(self) -> RunReport {
        self.run_inner().0
    }

    /// Runs to the end, as [`Simulation::run`], and says how much of the simulated time ran
    /// in windows (on two threads if [`Simulation::parallel`] is on; none unless the run
    /// allows it and [`Simulation::windows`] or [`Simulation::parallel`] is on).
    pub fn run_timed_apart(self) -> (RunReport, fencepost_proto::Duration) {
        let (report, parallelism) = self.run_with_parallelism();
        (report, parallelism.apart)
    }

    /// Runs to the end, as [`Simulation::run`], and says how the run split its work: how
    /// much of the simulated time ran in windows, or, asked for two threads and never able
    /// to use them, why not.
    pub fn run_with_parallelism(self) -> (RunReport, Parallelism) {
        let (report, _, parallelism) = self.run_inner();
        (report, parallelism)
    }

    fn run_inner(mut self) -> (RunReport, Option<Box<dyn TraceSink>>, Parallelism) {
        let mut apart = fencepost_proto::Duration::ZERO;
        let deadline = self.now + self.scenario.timeout;
        let mut steps_here = 0u32;
        let mut steps = 0u64;
        // Why not is told only to a run that asked for two threads.
        let asked = |why: OneThread| self.parallel.then_some(why);
        let (partition, one_thread) = match (self.parallel || self.windows, self.trace.is_some()) {
            (false, _) => (None, None),
            (true, true) => (None, asked(OneThread::EventsRecorded)),
            (true, false) => match parallel::partition(&self.scenario, &self.channels) {
                Ok(partition) => (Some(partition), None),
                Err(why) => (None, asked(why)),
            },
        };
        // Whether windows may start is asked at most once per this much simulated time: a run
        // whose flows keep it from splitting (one handshaking, one finishing, among many)
        // would otherwise ask at every instant. Where the windows start does not change the
        // report, only how much of the run they cover.
        let retry_windows = partition.as_ref().map_or(fencepost_proto::Duration::ZERO, |p| p.retry_after());
        let mut next_try = self.now;
        let (status, error) = loop {
            steps += 1;
            if steps % 4096 == 0 && self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
                break ("cancelled".to_string(), Some(format!("cancelled at {:.6} s", self.now.as_secs_f64())));
            }
            let try_windows = partition.is_some() && self.now >= next_try;
            if try_windows {
                next_try = self.now + retry_windows;
            }
            if let Some(partition) = partition.as_ref().filter(|p| try_windows && self.may_run_apart_now(p, deadline)) {
                let (frontier, stuck) = self.run_apart(partition, deadline);
                apart += frontier - self.now;
                debug_assert!(
                    self.flows.iter().all(|f| f.ended.is_some() || (f.outcome().is_none() && f.io.completed_at.is_none())),
                    "a flow ended or completed in a window run apart"
                );
                if let Some(at) = stuck {
                    self.now = at;
                    break ("stalled".to_string(), Some(format!("no progress at {:.6} s", at.as_secs_f64())));
                }
                if frontier > self.now {
                    // Every event before the frontier is done: on from the next one.
                    let Some(next) = self.next_wakeup() else {
                        self.now = frontier;
                        break ("stalled".to_string(), Some(format!("nothing left to happen at {:.6} s", self.now.as_secs_f64())));
                    };
                    debug_assert!(next >= frontier, "an event at {next:?} was left behind the frontier {frontier:?}");
                    if next > deadline {
                        self.now = deadline;
                        break ("deadline".to_string(), Some(format!("the run passed its {:.3} s bound", self.scenario.timeout.as_secs_f64())));
                    }
                    steps_here = 0;
                    self.record_series(next);
                    self.now = next;
                    continue;
                }
            }
            self.step();
            if self.flows.iter().all(|f| f.ended.is_some()) {
                break ("ok".to_string(), None);
            }
            let Some(next) = self.next_wakeup() else {
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
                self.record_series(next);
                self.now = next;
            }
        };
        self.record_series(self.now);
        self.drain_events();
        // Flows still going when the run stopped end with the run's reason.
        let now = self.now;
        for flow in &mut self.flows {
            if flow.ended.is_none() {
                if flow.io.completed_at.is_none() {
                    flow.take_snapshot();
                }
                flow.ended = Some((status.clone(), error.clone(), now));
            }
        }
        let sink = self.trace.take();
        (self.report(), sink, Parallelism { apart, one_thread })
    }

    fn next_wakeup(&mut self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        for channel in &self.channels {
            consider(channel.link.poll_timeout().map(Instant::from_micros));
        }
        for flow in &mut self.flows {
            consider(flow.client.poll_timeout());
            consider(flow.server.poll_timeout());
            if flow.client_conn.is_none() {
                consider(Some(flow.start()));
            } else if flow.ended.is_none() {
                consider(flow.client_app.wakeup());
            }
        }
        consider(self.events.get(self.next_event).map(|e| Instant::ZERO + e.at));
        next
    }

    /// Everything that happens at `self.now`.
    fn step(&mut self) {
        let now = self.now;
        self.apply_link_events();
        self.deliver();
        for flow in &mut self.flows {
            // Harmless when nothing is due, and cheaper than asking first: it stops at the
            // earliest deadline in its heap without looking the connection up.
            flow.client.handle_timeout(now);
            flow.server.handle_timeout(now);
        }
        self.run_apps();
        self.transmit();
        self.drain_events();
        for flow in &mut self.flows {
            if flow.ended.is_none() {
                if let Some((status, error)) = flow.outcome() {
                    if flow.io.completed_at.is_none() {
                        flow.take_snapshot();
                    }
                    flow.ended = Some((status, error, now));
                }
            }
        }
    }

    fn apply_link_events(&mut self) {
        let now = self.now;
        while let Some(event) = self.events.get(self.next_event).filter(|e| Instant::ZERO + e.at <= now) {
            let event = event.clone();
            self.next_event += 1;
            for direction in [Direction::Up, Direction::Down] {
                if !event.directions.includes(direction) {
                    continue;
                }
                self.channels[2 * event.link + usize::from(direction == Direction::Down)].apply(&event, now);
            }
        }
    }

    /// Moves every packet due at `now`: on to the next link of its path, or into its endpoint.
    fn deliver(&mut self) {
        let now = self.now;
        let t = now.total_micros();
        // Forwarding over a link with no delay (or answering over one) can make a packet due
        // again at once: repeat while packets were put into links.
        loop {
            let mut moved = false;
            for c in 0..self.channels.len() {
                while let Some(delivery) = self.channels[c].link.poll_delivery(t) {
                    if delivery.corrupt.is_some() {
                        // A flipped bit fails the IP or UDP checksum: the next host discards the packet
                        // (the link counts it as corrupted).
                        continue;
                    }
                    let mut packet = delivery.packet;
                    let flow = &mut self.flows[packet.flow as usize];
                    let path = if packet.to_server { &flow.spec.path } else { &flow.spec.return_path };
                    let next = packet.hop as usize + 1;
                    if let Some(&hop) = path.get(next) {
                        packet.hop = next as u16;
                        let size = packet.len + self.scenario.header_overhead;
                        self.channels[channel_index(hop)].link.enqueue(t, packet, size);
                        moved = true;
                        continue;
                    }
                    if packet.to_server {
                        flow.last_rx_server = now;
                        if let Some(response) = serve_datagram(now, &mut flow.server, &mut flow.server_conn, &mut packet, &mut self.buf, &mut self.pool, self.datagram_room) {
                            let size = response.len + self.scenario.header_overhead;
                            self.channels[channel_index(flow.spec.return_path[0])].link.enqueue(t, response, size);
                            moved = true;
                        }
                    } else {
                        flow.last_rx_client = now;
                        flow.client.handle_datagram_in_place(now, SERVER, &mut packet.datagram[..packet.len], &mut self.buf);
                    }
                    self.pool.push(packet.datagram);
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// Records each flow's delivered bytes at every series boundary up to `until`: nothing
    /// changes between events, so the count now is the count at each boundary before the next.
    fn record_series(&mut self, until: Instant) {
        let interval = self.scenario.series.total_micros();
        if interval == 0 {
            return;
        }
        for flow in &mut self.flows {
            let delivered = flow.delivered();
            while (flow.series.len() as u64 + 1) * interval <= until.total_micros() {
                flow.series.push(delivered);
            }
        }
    }

    fn run_apps(&mut self) {
        let now = self.now;
        for flow in &mut self.flows {
            if flow.client_conn.is_none() {
                if now < flow.start() {
                    continue;
                }
                flow.client_conn = Some(flow.client.connect(now, SERVER));
            }
            let was_complete = flow.io.completed_at.is_some();
            // An application with nothing to do is not run: reaching the connection mutably
            // makes the endpoint look it over again.
            let client_has_work = flow.client_conn.and_then(|h| flow.client.connection(h)).is_some_and(|c| flow.client_app.has_work(now, c));
            if let Some(conn) = flow.client_conn.filter(|_| client_has_work).and_then(|h| flow.client.connection_mut(h)) {
                flow.client_app.run(now, conn, &mut flow.io);
            }
            if !was_complete && flow.io.completed_at.is_some() {
                flow.take_snapshot();
            }
            let was_complete = flow.io.completed_at.is_some();
            let server_has_work = flow.server_conn.and_then(|h| flow.server.connection(h)).is_some_and(|c| flow.server_app.has_work(c));
            if let Some(conn) = flow.server_conn.filter(|_| server_has_work).and_then(|h| flow.server.connection_mut(h)) {
                flow.server_app.run(now, conn, &mut flow.io);
            }
            if !was_complete && flow.io.completed_at.is_some() {
                flow.take_snapshot();
            }
        }
        if self.channels.iter().all(|c| c.delivered_at_completion.is_none()) && self.flows.iter().all(|f| f.io.completed_at.is_some()) {
            for channel in &mut self.channels {
                channel.delivered_at_completion = Some(channel.link.stats().bytes_delivered);
            }
        }
    }

    fn transmit(&mut self) {
        let t = self.now.total_micros();
        let overhead = self.scenario.header_overhead;
        for (index, flow) in self.flows.iter_mut().enumerate() {
            for to_server in [true, false] {
                let (endpoint, path) = if to_server { (&mut flow.client, &flow.spec.path) } else { (&mut flow.server, &flow.spec.return_path) };
                let first = channel_index(path[0]);
                // Written straight into the buffer that crosses the links.
                while let Some((_, transmit)) = endpoint.poll_transmit(self.now, Self::next_buffer(&mut self.pool, self.datagram_room)) {
                    let datagram = self.pool.pop().expect("next_buffer left it on top");
                    let packet = InTransit { flow: index as u32, to_server, hop: 0, datagram, len: transmit.size };
                    self.channels[first].link.enqueue(t, packet, transmit.size + overhead);
                }
            }
        }
    }

    /// A buffer of at least `room` bytes (zeroed only when new or grown).
    fn pooled(pool: &mut Vec<Vec<u8>>, room: usize) -> Vec<u8> {
        let mut datagram = pool.pop().unwrap_or_default();
        if datagram.len() < room {
            datagram.resize(room, 0);
        }
        datagram
    }

    /// The pool's top buffer, made at least `room` bytes long: the next datagram is written
    /// into it where it lies and taken out only once one is. Most polls send nothing, and
    /// taking a buffer out and putting it back for each was a twentieth of a step.
    pub(crate) fn next_buffer(pool: &mut Vec<Vec<u8>>, room: usize) -> &mut Vec<u8> {
        if pool.last().is_none_or(|top| top.len() < room) {
            let buffer = Self::pooled(pool, room);
            pool.push(buffer);
        }
        pool.last_mut().expect("just made sure of it")
    }

    fn drain_events(&mut self) {
        for (index, flow) in self.flows.iter_mut().enumerate() {
            for (endpoint, handle, role) in [(&mut flow.client, flow.client_conn, Role::Client), (&mut flow.server, flow.server_conn, Role::Server)] {
                while endpoint.poll_event().is_some() {}
                let (Some(handle), Some(sink)) = (handle, &mut self.trace) else { continue };
                if let Some(conn) = endpoint.connection_mut(handle) {
                    for event in conn.drain_trace() {
                        sink.record(index + 1, role, &event);
                    }
                }
            }
        }
        if let Some(sink) = &mut self.trace {
            for channel in &mut self.channels {
                for event in channel.link.drain_events() {
                    sink.record_link(&channel.name, channel.direction, &event);
                }
            }
        }
    }

    fn report(mut self) -> RunReport {
        let hosts = &self.scenario.topology.hosts;
        let mut flows = Vec::with_capacity(self.flows.len());
        for (index, flow) in self.flows.iter_mut().enumerate() {
            let (status, error, ended) = flow.ended.clone().expect("every flow has ended when the run reports");
            let start = flow.start();
            let io = &mut flow.io;
            let completed = io.completed_at;
            let bytes_delivered = match flow.spec.workload {
                Workload::Echo { .. } => io.client_received,
                Workload::Bulk { .. } | Workload::Stream { .. } => io.server_received,
            };
            let interval_s = self.scenario.series.as_secs_f64();
            let goodput_series_bps: Vec<f64> =
                flow.series.iter().scan(0u64, |before, &now| Some((now - std::mem::replace(before, now)) as f64 * 8.0 / interval_s)).collect();
            // Echo's streams are hashed and compared; a pattern's received bytes were compared
            // one by one with the pattern as they were read (wrong_bytes).
            let digests = std::mem::replace(&mut io.digests, StreamDigests::none()).finish();
            let digests_agree = digests.is_none_or(|[sent, received]| sent == received);
            let integrity_ok = completed.is_some() && bytes_delivered == io.bytes_expected && digests_agree && io.wrong_bytes == 0;
            let timeout_silence_s = error.as_deref().and_then(|e| {
                let last = if e.starts_with("client:") { flow.last_rx_client } else { flow.last_rx_server };
                (status == "timeout").then(|| (ended - last).as_secs_f64())
            });
            let duration = (completed.unwrap_or(ended) - start).as_secs_f64();
            let c = &flow.snapshot.client;
            let s = &flow.snapshot.server;
            // The mean over every sample; the 95th percentile over the kept ones (all, or an even spread).
            let (_, rtt_p95_ms) = rtt_summary(&flow.snapshot.rtt_samples);
            let rtt_mean_ms = flow.snapshot.rtt_mean_us.map(|us| us / 1000.0);
            let t = &flow.spec.transport;
            flows.push(FlowReport {
                flow: index + 1,
                client_host: hosts[flow.spec.from].clone(),
                server_host: hosts[flow.spec.to].clone(),
                start_s: start.as_secs_f64(),
                close_ok: integrity_ok && status == "ok",
                status,
                error,
                integrity_ok,
                workload: flow.spec.workload.name().to_string(),
                profile: t.profile.name().to_string(),
                arq: t.arq.name().to_string(),
                cc: describe_cc(&t.controller),
                bytes_expected: io.bytes_expected,
                bytes_delivered,
                sha256: digests.map(|[sent, _]| sent.iter().map(|b| format!("{b:02x}")).collect()).unwrap_or_default(),
                payload_size: flow.snapshot.payload_size,
                duration_s: duration,
                goodput_bps: match (io.delivered_at_deadline, &flow.spec.workload) {
                    // A timed transfer: what arrived while the sender was writing, over that time.
                    (Some(bytes), Workload::Bulk { duration: Some(d), .. }) => bytes as f64 * 8.0 / d.as_secs_f64(),
                    _ if duration > 0.0 => bytes_delivered as f64 * 8.0 / duration,
                    _ => 0.0,
                },
                packets_sent: c.packets_sent,
                data_packets_sent: c.data_packets_sent,
                retransmissions: c.retransmissions,
                redundancy: t.redundancy.describe(),
                redundant_packets_sent: c.redundant_packets_sent,
                acks_sent: c.acks_sent,
                keepalives_sent: c.keepalives_sent,
                tail_probes: c.tail_probes,
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
                sparser_ack_trials: c.sparser_ack_trials,
                sparser_ack_trials_kept: c.sparser_ack_trials_kept,
                rtt_samples: flow.snapshot.rtt_count as usize,
                rtt_mean_ms,
                rtt_p95_ms,
                rtt_percentiles_ms: rtt_percentiles(&flow.snapshot.rtt_samples),
                wrong_bytes: io.wrong_bytes,
                messages_delivered: io.message_latencies_us.len() as u64,
                message_latency_p50_ms: latency_quantile(&io.message_latencies_us, 0.50),
                message_latency_p95_ms: latency_quantile(&io.message_latencies_us, 0.95),
                message_latency_p99_ms: latency_quantile(&io.message_latencies_us, 0.99),
                message_latencies_ms: io.message_latencies_us.iter().map(|&us| us as f64 / 1000.0).collect(),
                timeout_silence_s,
                goodput_series_bps,
            });
        }
        // Utilisation counts until the last workload completed (or the run's end).
        let measured_until = if self.flows.iter().all(|f| f.io.completed_at.is_some()) {
            self.flows.iter().filter_map(|f| f.io.completed_at).max().unwrap_or(self.now)
        } else {
            self.now
        };
        let links: Vec<LinkReport> = self
            .channels
            .iter()
            .map(|c| {
                let stats = c.link.stats();
                let delivered = c.delivered_at_completion.unwrap_or(stats.bytes_delivered);
                let utilisation = c.link.capacity_bytes(measured_until.total_micros()).filter(|&cap| cap > 0.0).map(|cap| delivered as f64 / cap);
                let ms = |q: f64| c.link.queue_delay().quantile(q).map(|us| us as f64 / 1000.0);
                LinkReport {
                    link: c.name.clone(),
                    direction: c.direction.name().to_string(),
                    from_host: hosts[c.from].clone(),
                    to_host: hosts[c.to].clone(),
                    counters: stats,
                    utilisation,
                    queue_delay_p50_ms: ms(0.5),
                    queue_delay_p95_ms: ms(0.95),
                    events: c.applied.clone(),
                }
            })
            .collect();
        let bottleneck = self.scenario.topology.bottleneck;
        let link_up = self.channels[2 * bottleneck].link.stats();
        let link_down = self.channels[2 * bottleneck + 1].link.stats();
        let link_drops = self.channels.iter().map(|c| c.link.stats()).map(|s| s.lost + s.queue_dropped + s.blackout_dropped).sum();
        let mut first = flows[0].clone();
        // The run's status covers every flow: the first failure, else ok.
        if let Some(failed) = flows.iter().find(|f| f.status != "ok") {
            first.status = failed.status.clone();
            first.error = failed.error.as_ref().map(|e| if flows.len() > 1 { format!("flow {}: {e}", failed.flow) } else { e.clone() });
        }
        first.integrity_ok = flows.iter().all(|f| f.integrity_ok);
        first.close_ok = flows.iter().all(|f| f.close_ok);
        first.wrong_bytes = flows.iter().map(|f| f.wrong_bytes).sum();
        let goodputs: Vec<f64> = flows.iter().map(|f| f.goodput_bps).collect();
        RunReport {
            first,
            seed: self.scenario.seed,
            topology: self.scenario.topology.name.clone(),
            link_drops,
            link_up,
            link_down,
            end_s: self.now.as_secs_f64(),
            jain_index: jain_index(&goodputs),
            flows,
            links,
            options: self.scenario.options.clone(),
        }
    }
}

/// A datagram reached a flow's server endpoint: it may open the connection (kept in
/// `conn`), or draw an answer from the endpoint itself (a retry, a stateless reset), which
/// is returned, in a buffer from `pool`, to go back along the flow's return path.
fn serve_datagram(
    now: Instant,
    endpoint: &mut Endpoint<u8>,
    conn: &mut Option<ConnectionHandle>,
    packet: &mut InTransit,
    buf: &mut [u8],
    pool: &mut Vec<Vec<u8>>,
    room: usize,
) -> Option<InTransit> {
    match endpoint.handle_datagram_in_place(now, CLIENT, &mut packet.datagram[..packet.len], buf)? {
        DatagramEvent::NewConnection(incoming) => {
            if let Ok(handle) = endpoint.accept(incoming) {
                conn.get_or_insert(handle);
            }
            None
        }
        DatagramEvent::Response { transmit, .. } => {
            let mut datagram = Simulation::pooled(pool, room.max(transmit.size));
            datagram[..transmit.size].copy_from_slice(&buf[..transmit.size]);
            Some(InTransit { flow: packet.flow, to_server: false, hop: 0, datagram, len: transmit.size })
        }
        DatagramEvent::Connection(_) => None,
    }
}

/// What the workload has delivered to the application that reads it: the server for a
/// transfer or a stream, the echoes back at the client for echo.
fn delivered(workload: &Workload, io: &FlowIo) -> u64 {
    match workload {
        Workload::Echo { .. } => io.client_received,
        Workload::Bulk { .. } | Workload::Stream { .. } => io.server_received,
    }
}

/// Runs one scenario to its end.
pub fn run(scenario: Scenario) -> RunReport {
    Simulation::new(scenario).run()
}

/// A message-latency quantile (nearest rank), milliseconds; `None` without messages.
fn latency_quantile(latencies_us: &[u64], q: f64) -> Option<f64> {
    if latencies_us.is_empty() {
        return None;
    }
    let mut sorted = latencies_us.to_vec();
    sorted.sort_unstable();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1] as f64 / 1000.0)
}
