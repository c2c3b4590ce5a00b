//! One run on two threads, giving the same report, bit for bit, as on one.
//!
//! The hosts are split in two sides: the flows' clients on one, their servers on the
//! other, each router where the channels between the sides are slowest. A packet takes at
//! least the *lookahead* (the least delay of any channel between the sides) to cross, so
//! what one side does in a window of that length reaches the other only in the next: each
//! side runs a window on its own thread, and at the window's end the two meet. This is
//! conservative parallel simulation (Chandy–Misra–Bryant's lookahead, with windows in
//! lockstep instead of null messages).
//!
//! On one thread the same windows run in turn, the clients' side and then the servers'
//! (`run_in_turn`, the default where a run splits): each side's steps then look only at its
//! own endpoints and links, and handle a window's packets together, which is cheaper than
//! stepping both sides through every instant of either. A second thread adds little on
//! this machine's two cores: packets and their buffers cross between caches.
//!
//! Three facts make it exact:
//! - A step that finds nothing due changes nothing (the endpoints, applications and links
//!   answer the time only with what is due by then), so a side may skip the instants at
//!   which only the other side has something to do, as the one-thread loop steps at every
//!   instant of either.
//! - A link draws its randomness in the order of simulated time whoever calls it. A channel
//!   between the sides is run by the side it leads to, a window late: what the other side
//!   sent into it during a window goes in at the window's edge, with its link events, in
//!   time order, and the link is run to the edge; anything arriving within the next window
//!   left before it, so it is on the wire then and is taken off without running the link on.
//! - Only the bookkeeping of a flow looks at both of its ends at one instant (its end,
//!   the counters taken when its workload completes, a timed transfer's count at its
//!   end). A window runs apart only when no flow can end or complete within it: each end
//!   established, the client still writing (every workload completes on data written after
//!   that, a path's delay later), no timer that can end a connection (idle, progress)
//!   due, no timed transfer's end. Otherwise the window runs on one thread.

use super::{channel_index, delivered, serve_datagram, Channel, Flow, InTransit, Simulation, MAX_STEPS_AT_ONE_INSTANT, SERVER};
use crate::apps::{ClientApp, FlowIo, ServerApp};
use fencepost_proto::congestion::ControllerConfig;
use fencepost_proto::{ConnectionHandle, Duration, Endpoint, Instant, State};
use fencepost_spec::{Direction, FlowSpec, LinkAction, LinkEventSpec, Scenario, Workload};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A lock's contents, whether or not the other thread panicked while holding it (the
/// panic ends the run anyway, when the scope joins it).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The least lookahead worth a second thread: each window ends in a meeting of the threads
/// (a few microseconds, and the wait for the slower one), and windows of less than this
/// spend more there than they save. Windows in turn on one thread keep the same bound (the
/// same windows, so that both ways run apart over the same stretches).
const MIN_LOOKAHEAD: Duration = Duration::from_millis(2);
/// Datagram buffers a side keeps at a window's edge; it hands the rest to the other side.
const KEEP_BUFFERS: usize = 256;
/// Routers are placed on one side or the other by trying every split: at most this many.
const MAX_ROUTERS: usize = 12;

/// How a run is split over two threads.
pub(super) struct Partition {
    /// 0: the side of the flows' clients; 1: the side of their servers.
    side_of_host: Vec<u8>,
    lookahead: Duration,
}

impl Partition {
    /// How long a run that could not start windows goes on before asking again: an eighth of
    /// a window, so that at most that much of a steady stretch runs instant by instant.
    pub(super) fn retry_after(&self) -> Duration {
        Duration::from_micros(self.lookahead.total_micros() / 8)
    }
}

/// Why a run asked to use two threads ran on one throughout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OneThread {
    /// An event log is recorded: its order across the two sides is the one thread's.
    EventsRecorded,
    /// A flow's controller comes from outside the crate (a Python class, say), which may
    /// keep state its connections share and would be called in another order.
    OutsideController,
    /// This host has both a flow's client and a flow's server.
    HostWithBothEnds(String),
    /// More routers than the split is searched over (it tries every way to place them).
    TooManyRouters(usize),
    /// The least time a packet takes between the sides, under 2 ms: windows
    /// that short would cost more in meetings than they save.
    ShortLookahead(Duration),
}

impl std::fmt::Display for OneThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OneThread::EventsRecorded => write!(f, "an event log is recorded (its order is the one thread's)"),
            OneThread::OutsideController => write!(f, "a flow's controller comes from outside the simulator (a Python class, say)"),
            OneThread::HostWithBothEnds(host) => write!(f, "host {host} has both a flow's client and a flow's server"),
            OneThread::TooManyRouters(n) => write!(f, "{n} routers, more than the {MAX_ROUTERS} the split is searched over"),
            OneThread::ShortLookahead(d) => write!(
                f,
                "a packet can cross between the clients' and the servers' sides in {:.3} ms, under the {} ms a window needs",
                d.as_millis_f64(),
                MIN_LOOKAHEAD.total_micros() / 1000
            ),
        }
    }
}

/// The split of `scenario`'s hosts with the longest lookahead, if there is one of at
/// least [`MIN_LOOKAHEAD`]; otherwise why not: a host has both a flow's client and a
/// flow's server, or a flow's controller comes from outside the crate (a Python class,
/// say, may keep state that its connections share, and the two threads would call it in
/// another order), or the lookahead is too short.
pub(super) fn partition(scenario: &Scenario, channels: &[Channel]) -> Result<Partition, OneThread> {
    let topology = &scenario.topology;
    if topology.flows.iter().any(|f| matches!(f.transport.controller, ControllerConfig::Custom(_))) {
        return Err(OneThread::OutsideController);
    }
    let mut fixed: Vec<Option<u8>> = vec![None; topology.hosts.len()];
    for flow in &topology.flows {
        for (host, side) in [(flow.from, 0u8), (flow.to, 1u8)] {
            match fixed[host] {
                Some(other) if other != side => return Err(OneThread::HostWithBothEnds(topology.hosts[host].clone())),
                _ => fixed[host] = Some(side),
            }
        }
    }
    // The least time a packet can take on each channel, over the run (delay changes included).
    let least: Vec<u64> = channels
        .iter()
        .enumerate()
        .map(|(c, channel)| {
            let direction = if c % 2 == 0 { Direction::Up } else { Direction::Down };
            let delays = topology.events.iter().filter(|e| e.link == c / 2 && e.directions.includes(direction)).filter_map(|e| match &e.action {
                LinkAction::Delay(d) => Some(d.total_micros()),
                _ => None,
            });
            let delay = delays.fold(channel.link.config().delay, u64::min);
            channel.link.least_delay(delay)
        })
        .collect();
    let routers: Vec<usize> = (0..fixed.len()).filter(|&h| fixed[h].is_none()).collect();
    if routers.len() > MAX_ROUTERS {
        return Err(OneThread::TooManyRouters(routers.len()));
    }
    let mut best: Option<(u64, Vec<u8>)> = None;
    for mask in 0..1u32 << routers.len() {
        let mut side: Vec<u8> = fixed.iter().map(|s| s.unwrap_or(0)).collect();
        for (bit, &host) in routers.iter().enumerate() {
            side[host] = ((mask >> bit) & 1) as u8;
        }
        let lookahead = channels.iter().zip(&least).filter(|(c, _)| side[c.from] != side[c.to]).map(|(_, &l)| l).min();
        if let Some(lookahead) = lookahead {
            if best.as_ref().is_none_or(|(longest, _)| lookahead > *longest) {
                best = Some((lookahead, side));
            }
        }
    }
    // Every flow's path crosses from its client's side to its server's, so some channel does.
    let (lookahead, side_of_host) = best.unwrap_or_default();
    let lookahead = Duration::from_micros(lookahead);
    if lookahead < MIN_LOOKAHEAD {
        return Err(OneThread::ShortLookahead(lookahead));
    }
    Ok(Partition { side_of_host, lookahead })
}

/// One end of a flow as a side sees it at a window's edge.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Half {
    /// The flow has ended (its report is settled) or has not begun.
    Idle,
    /// Established and in the middle of its workload.
    Steady,
    /// Anything else (a handshake, the workload's end near, a deadline within reach).
    Busy,
}

/// What a side reports at a window's edge.
struct Edge {
    halves: Vec<Half>,
    /// The latest end of the next window this side's flows allow.
    until: Instant,
    cancelled: bool,
}

/// Whether the window `[from, to)` may run apart, from both sides' edges.
fn may_run_apart(clients: &Edge, servers: &Edge, to: Instant) -> bool {
    !clients.cancelled
        && to <= clients.until.min(servers.until)
        && clients.halves.iter().zip(&servers.halves).all(|pair| matches!(pair, (Half::Idle, Half::Idle) | (Half::Steady, Half::Steady)))
}

/// One end of a flow, on its side's thread: `App` is `dyn ClientApp` or `dyn ServerApp`.
struct End<'a, App: ?Sized> {
    spec: &'a FlowSpec,
    endpoint: &'a mut Endpoint<u8>,
    conn: &'a mut Option<ConnectionHandle>,
    app: &'a mut Box<App>,
    last_rx: &'a mut Instant,
    /// The flow's goodput series, at the end that reads the workload's data.
    series: Option<&'a mut Vec<u64>>,
    io: Io<'a>,
    ended: bool,
}

type ClientEnd<'a> = End<'a, dyn ClientApp>;
type ServerEnd<'a> = End<'a, dyn ServerApp>;

/// The flow's record ([`FlowIo`]) as one end's application sees it during the windows.
/// While a flow is steady only the application that reads the workload's data writes it
/// (the server for a transfer or a stream, the client for echo: a client application
/// writes it at a stream's start and at a timed transfer's end, neither in a window, and
/// the echo server's count is not reported); that end has the record, the other a scratch
/// one, so the threads share nothing.
enum Io<'a> {
    Record(&'a mut FlowIo),
    Scratch(Box<FlowIo>),
}

impl Io<'_> {
    fn get(&mut self) -> &mut FlowIo {
        match self {
            Io::Record(io) => io,
            Io::Scratch(io) => io,
        }
    }
}

/// The ends one thread runs: every flow's client end, or every flow's server end.
enum Ends<'a> {
    Clients(Vec<ClientEnd<'a>>),
    Servers(Vec<ServerEnd<'a>>),
}

/// One side of the run and what it needs from the whole.
struct Side<'a> {
    side: u8,
    ends: Ends<'a>,
    /// The channels this side runs, by index: those between its own hosts, and those that
    /// lead to it from the other side (`late`); `None` for the rest.
    channels: Vec<Option<&'a mut Channel>>,
    /// Channels from the other side that this side runs a window late: what the other side
    /// sends into them during a window is put in at the next window's edge.
    late: Vec<bool>,
    /// What this side sent in the current window into the channels the other side runs.
    sent: Vec<Vec<Sent>>,
    /// Emptied lists of such packets, to take the next window's: a list taken away at each
    /// edge would otherwise grow again from nothing, a window's worth of packets copied
    /// over and over (0.8 % of a simulated transfer's instructions).
    spare_sent: Vec<Vec<Sent>>,
    /// The other side's lists this side emptied, to go back to it in the next mail.
    emptied: Vec<Vec<Sent>>,
    /// The channels that lead to this side's hosts, by index: the ones it delivers from
    /// and whose arrivals it waits for. Listed once: each step looked up every channel's
    /// host and that host's side, twice (2 % of a simulated transfer's instructions).
    arriving: Vec<usize>,
    events: &'a [LinkEventSpec],
    /// Link events before this one were applied, or are not this side's to apply while
    /// stepping (those of `late` channels go in at the edges).
    next_event: usize,
    /// Link events of `late` channels before this one were applied.
    next_late_event: usize,
    pool: Vec<Vec<u8>>,
    buf: Vec<u8>,
    datagram_room: usize,
    header_overhead: usize,
    series_interval: u64,
    /// The instant at which a step kept finding more to do (a fault, as in one thread).
    stuck: Option<Instant>,
}

/// A packet sent at `at` into a channel the other side runs.
struct Sent {
    at: u64,
    packet: InTransit,
    size: usize,
}

/// One side's mail to the other at a window's edge (see `Slot::mail`): what it sent into
/// the other's channels (by channel), its spare datagram buffers, and the other's lists of
/// sent packets it emptied.
type Mail = (Vec<(usize, Vec<Sent>)>, Vec<Vec<u8>>, Vec<Vec<Sent>>);

/// What the sides leave each other at one window's edge.
#[derive(Default)]
struct Slot {
    edges: [Option<Edge>; 2],
    /// For each side: what the other side sent into the channels this one runs, by channel,
    /// and the other side's spare datagram buffers (mostly those of what it received).
    mail: [Mail; 2],
}

/// What the two sides are built from alike.
#[derive(Clone, Copy)]
struct Common<'a> {
    hosts: &'a [(usize, usize)],
    side_of_host: &'a [u8],
    events: &'a [LinkEventSpec],
    first_event: usize,
    datagram_room: usize,
    header_overhead: usize,
    series_interval: u64,
}

/// What both threads share: one barrier per window, and two slots used in turn, so that
/// one side may fill the next while the other still reads this one.
struct Meeting {
    barrier: SpinBarrier,
    slots: [Mutex<Slot>; 2],
}

/// A barrier for the two threads that spins: a window is a fraction of a millisecond of
/// work, and a sleeping thread's wake-up (tens of microseconds here) would be a good part
/// of it. It yields to the OS after a while, for a machine with fewer free cores than threads.
struct SpinBarrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
    /// A thread panicked: the other must not wait for it (the panic goes on when the threads join).
    broken: AtomicBool,
}

impl SpinBarrier {
    fn new() -> SpinBarrier {
        SpinBarrier { arrived: AtomicUsize::new(0), generation: AtomicUsize::new(0), broken: AtomicBool::new(false) }
    }

    /// Waits for the other thread; `false` if it panicked instead.
    #[must_use]
    fn wait(&self) -> bool {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) == 1 {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return true;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if self.broken.load(Ordering::Relaxed) {
                return false;
            }
            if spins < 20_000 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
        true
    }
}

/// Breaks the barrier if its thread unwinds, so that the other stops waiting.
struct BreakOnPanic<'a>(&'a SpinBarrier);

impl Drop for BreakOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.broken.store(true, Ordering::Relaxed);
        }
    }
}

impl Simulation {
    /// Whether the window starting now could run apart, judged here with the whole run in
    /// hand (the sides judge each later window themselves, the same way).
    pub(super) fn may_run_apart_now(&self, partition: &Partition, deadline: Instant) -> bool {
        let to = self.now + partition.lookahead;
        let mut halves = [Vec::new(), Vec::new()];
        let mut until = deadline;
        for flow in &self.flows {
            let ended = flow.ended.is_some();
            let (client, u) = client_half(ended, flow.client_conn, &flow.client, flow.client_app.as_ref(), self.now);
            until = until.min(u);
            let (server, u) = server_half(ended, flow.server_conn, &flow.server);
            until = until.min(u);
            halves[0].push(client);
            halves[1].push(server);
        }
        let [clients, servers] = halves;
        may_run_apart(&Edge { halves: clients, until, cancelled: false }, &Edge { halves: servers, until, cancelled: false }, to)
    }

    /// Runs windows from `self.now` while every flow allows it, on two threads if the run
    /// is [`Simulation::parallel`], else in turn on this one. Returns the
    /// first instant not simulated (every event before it is done), and an instant at which
    /// a side got stuck, if one did.
    pub(super) fn run_apart(&mut self, partition: &Partition, deadline: Instant) -> (Instant, Option<Instant>) {
        let from = self.now;
        let hosts: Vec<(usize, usize)> = self.channels.iter().map(|c| (c.from, c.to)).collect();
        let side_of_host = &partition.side_of_host;
        // Each channel is run by the side it leads to.
        let (mut client_channels, mut server_channels): (Vec<Option<&mut Channel>>, Vec<Option<&mut Channel>>) =
            self.channels.iter_mut().map(|c| if side_of_host[c.to] == 0 { (Some(c), None) } else { (None, Some(c)) }).unzip();
        let late = |side: u8| hosts.iter().map(|&(from, to)| side_of_host[to] == side && side_of_host[from] != side).collect::<Vec<bool>>();
        let mut clients = Vec::with_capacity(self.flows.len());
        let mut servers = Vec::with_capacity(self.flows.len());
        for flow in &mut self.flows {
            let Flow { spec, client, server, client_conn, server_conn, client_app, server_app, io, ended, last_rx_client, last_rx_server, series, .. } = flow;
            let (spec, ended) = (&*spec, ended.is_some());
            let (client_series, server_series, client_io, server_io) = match spec.workload {
                Workload::Echo { .. } => (Some(series), None, Io::Record(io), Io::Scratch(Box::new(FlowIo::scratch()))),
                Workload::Bulk { .. } | Workload::Stream { .. } => (None, Some(series), Io::Scratch(Box::new(FlowIo::scratch())), Io::Record(io)),
            };
            clients.push(ClientEnd { spec, endpoint: client, conn: client_conn, app: client_app, last_rx: last_rx_client, series: client_series, io: client_io, ended });
            servers.push(ServerEnd { spec, endpoint: server, conn: server_conn, app: server_app, last_rx: last_rx_server, series: server_series, io: server_io, ended });
        }
        let first_event = self.next_event;
        let (pool, buf) = (std::mem::take(&mut self.pool), std::mem::take(&mut self.buf));
        let series_interval = self.scenario.series.total_micros();
        let (datagram_room, header_overhead, events) = (self.datagram_room, self.scenario.header_overhead, &self.events[..]);
        let common = Common { hosts: &hosts, side_of_host, events, first_event, datagram_room, header_overhead, series_interval };
        let mut client_side = Side::new(0, Ends::Clients(clients), std::mem::take(&mut client_channels), late(0), common, pool, buf);
        let mut server_side = Side::new(1, Ends::Servers(servers), std::mem::take(&mut server_channels), late(1), common, Vec::new(), vec![0; 65_536]);
        let cancel = self.cancel.clone();
        let lookahead = partition.lookahead;
        let frontier = if !self.parallel {
            run_in_turn(&mut client_side, &mut server_side, from, lookahead, deadline, cancel.as_deref())
        } else {
            let meeting = Meeting { barrier: SpinBarrier::new(), slots: Default::default() };
            std::thread::scope(|scope| {
                let servers = std::thread::Builder::new()
                    .name("sim-servers".into())
                    .spawn_scoped(scope, || server_side.run(from, lookahead, deadline, &meeting, None))
                    .expect("a thread for the servers' side");
                let frontier = client_side.run(from, lookahead, deadline, &meeting, cancel.as_deref());
                let server_frontier = servers.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                debug_assert_eq!(frontier, server_frontier, "the sides stopped at different instants");
                frontier
            })
        };
        let stuck = client_side.stuck.or(server_side.stuck);
        debug_assert!(client_side.sent.iter().chain(&server_side.sent).all(|s| s.is_empty()), "a packet that crossed was not put in");
        let (pool, buf) = (client_side.pool, client_side.buf);
        let mut more = server_side.pool;
        self.pool = pool;
        self.pool.append(&mut more);
        self.buf = buf;
        // Link events before the frontier were applied by the side that runs each channel.
        while self.events.get(self.next_event).is_some_and(|e| Instant::ZERO + e.at < frontier) {
            self.next_event += 1;
        }
        (frontier, stuck)
    }
}

/// The windows of [`Side::run`] on one thread: each side runs a window in turn, and the
/// meeting at its edge is a hand-over. Returns where they stopped.
fn run_in_turn(clients: &mut Side<'_>, servers: &mut Side<'_>, mut from: Instant, lookahead: Duration, deadline: Instant, cancel: Option<&AtomicBool>) -> Instant {
    loop {
        let (client_edge, to_servers) = clients.leave_at_edge(from, deadline, cancel);
        let (server_edge, to_clients) = servers.leave_at_edge(from, deadline, None);
        let to = from + lookahead;
        let go = may_run_apart(&client_edge, &server_edge, to);
        clients.take_at_edge(from, to_clients);
        servers.take_at_edge(from, to_servers);
        if !go {
            return from;
        }
        clients.window(from, to);
        servers.window(from, to);
        from = to;
    }
}

/// A flow's client end at a window's edge, and the latest end of a window it allows.
fn client_half(ended: bool, conn: Option<ConnectionHandle>, endpoint: &Endpoint<u8>, app: &dyn ClientApp, now: Instant) -> (Half, Instant) {
    let never = Instant::from_micros(u64::MAX);
    if ended {
        return (Half::Idle, never);
    }
    // Not begun: its first packet, sent in the window at the earliest, arrives after it.
    let Some(conn) = conn.and_then(|h| endpoint.connection(h)) else { return (Half::Idle, never) };
    if conn.state() != State::Established || app.done_writing() {
        return (Half::Busy, never);
    }
    let mut until = conn.fatal_deadline().unwrap_or(never);
    if let Some(at) = app.reads_server_at() {
        if at < now {
            return (Half::Busy, never);
        }
        until = until.min(at);
    }
    (Half::Steady, until)
}

/// A flow's server end at a window's edge, and the latest end of a window it allows.
fn server_half(ended: bool, conn: Option<ConnectionHandle>, endpoint: &Endpoint<u8>) -> (Half, Instant) {
    let never = Instant::from_micros(u64::MAX);
    if ended {
        return (Half::Idle, never);
    }
    match conn.and_then(|h| endpoint.connection(h)) {
        // No connection yet: steady only if the client has not begun either (see `may_run_apart`).
        None => (Half::Idle, never),
        Some(conn) if conn.state() == State::Established => (Half::Steady, conn.fatal_deadline().unwrap_or(never)),
        Some(_) => (Half::Busy, never),
    }
}

impl<'a> Side<'a> {
    fn new(side: u8, ends: Ends<'a>, channels: Vec<Option<&'a mut Channel>>, late: Vec<bool>, common: Common<'a>, pool: Vec<Vec<u8>>, buf: Vec<u8>) -> Side<'a> {
        Side {
            side,
            ends,
            channels,
            late,
            sent: (0..common.hosts.len()).map(|_| Vec::new()).collect(),
            spare_sent: Vec::new(),
            emptied: Vec::new(),
            arriving: (0..common.hosts.len()).filter(|&c| common.side_of_host[common.hosts[c].1] == side).collect(),
            events: common.events,
            next_event: common.first_event,
            next_late_event: common.first_event,
            pool,
            buf,
            datagram_room: common.datagram_room,
            header_overhead: common.header_overhead,
            series_interval: common.series_interval,
            stuck: None,
        }
    }

    /// Windows from `from` until the sides' edges say no; returns where they stopped.
    fn run(&mut self, mut from: Instant, lookahead: Duration, deadline: Instant, meeting: &Meeting, cancel: Option<&AtomicBool>) -> Instant {
        let (me, other) = (self.side as usize, 1 - self.side as usize);
        let _guard = BreakOnPanic(&meeting.barrier);
        for window in 0usize.. {
            let slot = &meeting.slots[window % 2];
            let (edge, mail) = self.leave_at_edge(from, deadline, cancel);
            {
                let mut slot = lock(slot);
                slot.edges[me] = Some(edge);
                slot.mail[other] = mail;
            }
            if !meeting.barrier.wait() {
                return from;
            }
            let to = from + lookahead;
            let (go, mail) = {
                let mut slot = lock(slot);
                let go = match &slot.edges {
                    [Some(clients), Some(servers)] => may_run_apart(clients, servers, to),
                    _ => false,
                };
                (go, std::mem::take(&mut slot.mail[me]))
            };
            self.take_at_edge(from, mail);
            // Both decided alike, from the same edges.
            if !go {
                return from;
            }
            self.window(from, to);
            from = to;
        }
        unreachable!("the windows end by returning")
    }

    /// What this side leaves the other at a window's edge: its edge (cancelled if `cancel`
    /// is set), what it sent in the last window into the other's channels, and the buffers
    /// of what it received: a side that mostly sends (data) would otherwise allocate a
    /// buffer per packet, and the one that mostly receives keep them all.
    fn leave_at_edge(&mut self, from: Instant, deadline: Instant, cancel: Option<&AtomicBool>) -> (Edge, Mail) {
        let mut edge = self.edge(from, deadline);
        edge.cancelled = cancel.is_some_and(|c| c.load(Ordering::Relaxed));
        let spare_sent = &mut self.spare_sent;
        let sent = self.sent.iter_mut().enumerate().filter(|(_, s)| !s.is_empty()).map(|(c, s)| (c, std::mem::replace(s, spare_sent.pop().unwrap_or_default()))).collect();
        let spare = self.pool.split_off(self.pool.len().min(KEEP_BUFFERS));
        (edge, (sent, spare, std::mem::take(&mut self.emptied)))
    }

    /// Takes what the other side left at the edge: its buffers, and, whether or not the
    /// next window runs apart, the packets it sent in the last one.
    fn take_at_edge(&mut self, from: Instant, (sent, mut buffers, mut returned): Mail) {
        self.pool.append(&mut buffers);
        self.spare_sent.append(&mut returned);
        self.put_in_late(from, sent);
    }

    fn edge(&self, now: Instant, deadline: Instant) -> Edge {
        let mut until = deadline;
        let halves = match &self.ends {
            Ends::Clients(ends) => ends
                .iter()
                .map(|end| {
                    let (half, u) = client_half(end.ended, *end.conn, end.endpoint, end.app.as_ref(), now);
                    until = until.min(u);
                    half
                })
                .collect(),
            Ends::Servers(ends) => ends
                .iter()
                .map(|end| {
                    let (half, u) = server_half(end.ended, *end.conn, end.endpoint);
                    until = until.min(u);
                    half
                })
                .collect(),
        };
        // A stuck side stops the windows.
        Edge { halves, until: if self.stuck.is_some() { Instant::ZERO } else { until }, cancelled: false }
    }

    /// Puts into the channels this side runs late what the other side sent into them
    /// before `from`, with their link events, in the order of simulated time (a link event
    /// before a packet sent at the same instant, as a step applies events first); then runs
    /// those links up to just before `from`. Every packet that arrives in the window starting
    /// at `from` left before it, so it is on the wire then, and the window takes arrivals
    /// off the wire without running the link further. Packets leaving at `from` itself
    /// leave after the link events due then, as on one thread.
    fn put_in_late(&mut self, from: Instant, sent: Vec<(usize, Vec<Sent>)>) {
        let mut events: Vec<(usize, &LinkEventSpec)> = Vec::new();
        while let Some(event) = self.events.get(self.next_late_event).filter(|e| Instant::ZERO + e.at < from) {
            self.next_late_event += 1;
            for (c, direction) in [(2 * event.link, Direction::Up), (2 * event.link + 1, Direction::Down)] {
                if self.late[c] && event.directions.includes(direction) {
                    events.push((c, event));
                }
            }
        }
        let mut sent: Vec<Option<Vec<Sent>>> = {
            let mut by_channel: Vec<Option<Vec<Sent>>> = (0..self.late.len()).map(|_| None).collect();
            for (c, packets) in sent {
                by_channel[c] = Some(packets);
            }
            by_channel
        };
        for (c, channel_sent) in sent.iter_mut().enumerate() {
            if !self.late[c] {
                continue;
            }
            // This channel's events and packets, each in time order: merged.
            let mut own = events.iter().filter(|(e, _)| *e == c).map(|&(_, event)| event).peekable();
            let mut packets = channel_sent.take().unwrap_or_default();
            for Sent { at, packet, size } in packets.drain(..) {
                while let Some(event) = own.next_if(|e| (Instant::ZERO + e.at).total_micros() <= at) {
                    self.run_mut(c).apply(event, Instant::ZERO + event.at);
                }
                self.run_mut(c).link.enqueue(at, packet, size);
            }
            if packets.capacity() > 0 {
                self.emptied.push(packets);
            }
            for event in own {
                self.run_mut(c).apply(event, Instant::ZERO + event.at);
            }
            self.run_mut(c).link.run_until(from.total_micros().saturating_sub(1));
        }
    }

    fn run_mut(&mut self, c: usize) -> &mut Channel {
        self.channels[c].as_deref_mut().expect("a channel this side runs")
    }

    /// Every instant of `[from, to)` at which this side has something to do.
    fn window(&mut self, from: Instant, to: Instant) {
        let mut now = from;
        let mut steps_here = 0u32;
        loop {
            self.step(now);
            let Some(next) = self.next_wakeup().filter(|&next| next < to) else { break };
            if next <= now {
                steps_here += 1;
                if steps_here > MAX_STEPS_AT_ONE_INSTANT {
                    self.stuck = Some(now);
                    break;
                }
            } else {
                steps_here = 0;
                self.record_series(next);
                now = next;
            }
        }
        self.record_series(to);
    }

    /// As [`Simulation::step`], for this side's ends and channels.
    fn step(&mut self, now: Instant) {
        self.apply_link_events(now);
        self.deliver(now);
        match &mut self.ends {
            Ends::Clients(ends) => {
                for end in ends.iter_mut() {
                    if end.endpoint.poll_timeout().is_some_and(|d| d <= now) {
                        end.endpoint.handle_timeout(now);
                    }
                }
                for end in ends.iter_mut() {
                    if end.conn.is_none() {
                        if now < Instant::ZERO + end.spec.start {
                            continue;
                        }
                        *end.conn = Some(end.endpoint.connect(now, SERVER));
                    }
                    let has_work = end.conn.and_then(|h| end.endpoint.connection(h)).is_some_and(|c| end.app.has_work(now, c));
                    if let Some(conn) = end.conn.filter(|_| has_work).and_then(|h| end.endpoint.connection_mut(h)) {
                        end.app.run(now, conn, end.io.get());
                    }
                }
            }
            Ends::Servers(ends) => {
                for end in ends.iter_mut() {
                    if end.endpoint.poll_timeout().is_some_and(|d| d <= now) {
                        end.endpoint.handle_timeout(now);
                    }
                }
                for end in ends.iter_mut() {
                    let has_work = end.conn.and_then(|h| end.endpoint.connection(h)).is_some_and(|c| end.app.has_work(c));
                    if let Some(conn) = end.conn.filter(|_| has_work).and_then(|h| end.endpoint.connection_mut(h)) {
                        end.app.run(now, conn, end.io.get());
                    }
                }
            }
        }
        self.transmit(now);
        match &mut self.ends {
            Ends::Clients(ends) => ends.iter_mut().for_each(|end| while end.endpoint.poll_event().is_some() {}),
            Ends::Servers(ends) => ends.iter_mut().for_each(|end| while end.endpoint.poll_event().is_some() {}),
        }
    }

    /// As [`Simulation::apply_link_events`], for the channels this side runs as it goes
    /// (those between its own hosts; the `late` ones take theirs at the edges).
    fn apply_link_events(&mut self, now: Instant) {
        while let Some(event) = self.events.get(self.next_event).filter(|e| Instant::ZERO + e.at <= now) {
            self.next_event += 1;
            for (c, direction) in [(2 * event.link, Direction::Up), (2 * event.link + 1, Direction::Down)] {
                if event.directions.includes(direction) && !self.late[c] {
                    if let Some(channel) = self.channels[c].as_deref_mut() {
                        channel.apply(event, now);
                    }
                }
            }
        }
    }

    /// As [`Simulation::deliver`], for the channels that lead to this side's hosts.
    fn deliver(&mut self, now: Instant) {
        let t = now.total_micros();
        // Repeat while packets were put into links (see `Simulation::deliver`).
        loop {
            let mut moved = false;
            for i in 0..self.arriving.len() {
                let c = self.arriving[i];
                loop {
                    let late = self.late[c];
                    let channel = self.run_mut(c);
                    // A late channel holds on its wire everything due in the window, and the
                    // other side is still sending into it: taken off without running it on.
                    let delivery = if late { channel.link.poll_arrival(t) } else { channel.link.poll_delivery(t) };
                    let Some(delivery) = delivery else { break };
                    if delivery.corrupt.is_some() {
                        continue;
                    }
                    moved |= self.arrive(now, delivery.packet);
                }
            }
            if !moved {
                break;
            }
        }
    }

    /// A packet reached a host of this side: on along its path, or into its endpoint.
    /// Whether a packet went into a link (forwarded, or an answer).
    fn arrive(&mut self, now: Instant, mut packet: InTransit) -> bool {
        let t = now.total_micros();
        let spec = match &self.ends {
            Ends::Clients(ends) => ends[packet.flow as usize].spec,
            Ends::Servers(ends) => ends[packet.flow as usize].spec,
        };
        let path = if packet.to_server { &spec.path } else { &spec.return_path };
        let next = packet.hop as usize + 1;
        if let Some(&hop) = path.get(next) {
            packet.hop = next as u16;
            let size = packet.len + self.header_overhead;
            Self::send_into(&mut self.channels, &mut self.sent, channel_index(hop), t, packet, size);
            return true;
        }
        let mut answered = false;
        match &mut self.ends {
            Ends::Servers(ends) => {
                let end = &mut ends[packet.flow as usize];
                *end.last_rx = now;
                if let Some(response) = serve_datagram(now, end.endpoint, end.conn, &mut packet, &mut self.buf, &mut self.pool, self.datagram_room) {
                    let size = response.len + self.header_overhead;
                    Self::send_into(&mut self.channels, &mut self.sent, channel_index(end.spec.return_path[0]), t, response, size);
                    answered = true;
                }
            }
            Ends::Clients(ends) => {
                let end = &mut ends[packet.flow as usize];
                *end.last_rx = now;
                end.endpoint.handle_datagram_in_place(now, SERVER, &mut packet.datagram[..packet.len], &mut self.buf);
            }
        }
        self.pool.push(packet.datagram);
        answered
    }

    /// Puts a packet into channel `c`, which leaves a host of this side: now if this side
    /// runs the channel, else at the window's edge (by the other side).
    fn send_into(channels: &mut [Option<&mut Channel>], sent: &mut [Vec<Sent>], c: usize, at: u64, packet: InTransit, size: usize) {
        match channels[c].as_deref_mut() {
            Some(channel) => channel.link.enqueue(at, packet, size),
            None => sent[c].push(Sent { at, packet, size }),
        }
    }

    /// As [`Simulation::transmit`], for this side's ends.
    fn transmit(&mut self, now: Instant) {
        let t = now.total_micros();
        let overhead = self.header_overhead;
        let (pool, room, channels, sent) = (&mut self.pool, self.datagram_room, &mut self.channels, &mut self.sent);
        let mut send = |index: usize, to_server: bool, endpoint: &mut Endpoint<u8>, path: &[fencepost_spec::Hop]| {
            let first = channel_index(path[0]);
            while let Some((_, transmit)) = endpoint.poll_transmit(now, Simulation::next_buffer(pool, room)) {
                let datagram = pool.pop().expect("next_buffer left it on top");
                let packet = InTransit { flow: index as u32, to_server, hop: 0, datagram, len: transmit.size };
                Self::send_into(channels, sent, first, t, packet, transmit.size + overhead);
            }
        };
        match &mut self.ends {
            Ends::Clients(ends) => ends.iter_mut().enumerate().for_each(|(i, end)| send(i, true, end.endpoint, &end.spec.path)),
            Ends::Servers(ends) => ends.iter_mut().enumerate().for_each(|(i, end)| send(i, false, end.endpoint, &end.spec.return_path)),
        }
    }

    /// The next instant at which this side has something to do.
    fn next_wakeup(&mut self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Instant| n.min(t)));
            }
        };
        for &c in &self.arriving {
            // Arrivals here: a late channel's are on its wire; another's by its own times (the bottleneck too).
            let link = &self.channels[c].as_deref().expect("a channel leading here is this side's").link;
            consider(if self.late[c] { link.next_arrival() } else { link.poll_timeout() }.map(Instant::from_micros));
        }
        match &mut self.ends {
            Ends::Clients(ends) => {
                for end in ends.iter_mut() {
                    consider(end.endpoint.poll_timeout());
                    if end.conn.is_none() {
                        consider(Some(Instant::ZERO + end.spec.start));
                    } else if !end.ended {
                        consider(end.app.wakeup());
                    }
                }
            }
            Ends::Servers(ends) => ends.iter_mut().for_each(|end| consider(end.endpoint.poll_timeout())),
        }
        // The link events this side applies as it goes (the others are skipped as they come).
        let owned = |e: &LinkEventSpec| {
            [(2 * e.link, Direction::Up), (2 * e.link + 1, Direction::Down)]
                .into_iter()
                .any(|(c, d)| e.directions.includes(d) && self.channels[c].is_some() && !self.late[c])
        };
        consider(self.events[self.next_event.min(self.events.len())..].iter().find(|e| owned(e)).map(|e| Instant::ZERO + e.at));
        next
    }

    /// As [`Simulation::record_series`], for the series this side's ends read. Inlined to
    /// its one test where no series are kept: a call per step that found none kept was
    /// half a percent of a run.
    #[inline]
    fn record_series(&mut self, until: Instant) {
        if self.series_interval != 0 {
            self.record_series_kept(until);
        }
    }

    fn record_series_kept(&mut self, until: Instant) {
        let interval = self.series_interval;
        let record = |series: &mut Option<&mut Vec<u64>>, workload: &Workload, io: &mut Io<'_>| {
            let Some(series) = series else { return };
            let count = delivered(workload, io.get());
            while (series.len() as u64 + 1) * interval <= until.total_micros() {
                series.push(count);
            }
        };
        match &mut self.ends {
            Ends::Clients(ends) => ends.iter_mut().for_each(|end| record(&mut end.series, &end.spec.workload, &mut end.io)),
            Ends::Servers(ends) => ends.iter_mut().for_each(|end| record(&mut end.series, &end.spec.workload, &mut end.io)),
        }
    }
}

