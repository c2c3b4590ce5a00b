//! Many connections behind one socket: routes datagrams by connection id,
//! answers handshakes, and chooses connection ids at random.
//!
//! Each side picks its own 32-bit connection id and the peer writes it in every
//! packet, so packets of an older connection between the same two addresses,
//! and guesses by an off-path sender, find no connection and are dropped.
//!
//! # Work per event
//!
//! Nothing here scans every connection. Connections' deadlines live in a
//! min-heap; a connection that received something, timed out or was handed to
//! the application ([`Endpoint::connection_mut`]) is marked *touched*, and only
//! touched connections are rescheduled, offered the chance to transmit and
//! checked for events. Handling one datagram, one timer or one transmission
//! costs O(log n) in the number of connections.
//!
//! # Driving an endpoint
//!
//! 1. [`Endpoint::handle_datagram`] for each datagram: it returns a
//!    [`DatagramEvent`] — the connection it reached, a new incoming connection
//!    for the application to [`Endpoint::accept`] or [`Endpoint::refuse`], or a
//!    response to send without creating any state;
//! 2. [`Endpoint::handle_timeout`] when the clock passes [`Endpoint::poll_timeout`];
//! 3. [`Endpoint::poll_transmit`] until `None`, [`Endpoint::poll_event`] until `None`;
//! 4. sleep until [`Endpoint::poll_timeout`] or the next datagram.

use crate::config::TransportConfig;
use crate::connection::{Connection, Event, Transmit};
use crate::time::Instant;
use crate::wire::{Body, Handshake, HandshakePhase, Header, Packet, PacketType, Reset, ResetReason};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

/// Names a connection inside its endpoint (it is the connection's local id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle(pub u32);

#[derive(Clone, Debug)]
pub struct EndpointConfig {
    pub transport: Arc<TransportConfig>,
    /// Accept connections opened by peers (a server).
    pub accept_incoming: bool,
    /// Handshakes beyond this many live connections are refused.
    pub max_connections: usize,
}

impl EndpointConfig {
    pub fn client(transport: TransportConfig) -> Self {
        EndpointConfig { transport: Arc::new(transport), accept_incoming: false, max_connections: 4096 }
    }
    pub fn server(transport: TransportConfig) -> Self {
        EndpointConfig { transport: Arc::new(transport), accept_incoming: true, ..Self::client(TransportConfig::default()) }
    }
}

/// Datagrams the endpoint dropped (or answered) before any connection saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    pub datagrams_received: u64,
    /// Did not parse (garbage, truncated, wrong version).
    pub malformed: u64,
    /// Named a connection id this endpoint does not have.
    pub unknown_connection: u64,
    /// Named a connection of ours but came from another address.
    pub wrong_address: u64,
    /// A handshake this endpoint does not take (not a server, full, or the application said no).
    pub refused: u64,
}

/// What one datagram led to.
#[derive(Debug)]
pub enum DatagramEvent<A> {
    /// It went to this connection.
    Connection(ConnectionHandle),
    /// A peer asks to open a connection: [`Endpoint::accept`] it, [`Endpoint::refuse`]
    /// it, or drop it to ignore the request (the peer will ask again).
    NewConnection(Incoming<A>),
    /// Send `transmit.size` bytes of the caller's buffer to `destination`; no state was kept.
    Response { destination: A, transmit: Transmit },
}

/// A handshake Initial the endpoint has not yet decided on. Holds no resources.
#[derive(Debug)]
pub struct Incoming<A> {
    remote: A,
    initial: Handshake,
    received: Instant,
}

impl<A> Incoming<A> {
    pub fn remote(&self) -> &A {
        &self.remote
    }
    /// The client's connection id.
    pub fn peer_cid(&self) -> u32 {
        self.initial.src_cid
    }
}

/// Why [`Endpoint::accept`] did not create a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcceptError {
    /// The endpoint holds `max_connections` already.
    Full,
}

impl std::fmt::Display for AcceptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcceptError::Full => write!(f, "the endpoint holds its maximum number of connections"),
        }
    }
}

impl std::error::Error for AcceptError {}

/// Connection ids are chosen at random, so hashing them again buys nothing:
/// fold the id into the hash directly (multiplied, so the table's low bits mix).
#[derive(Default)]
struct CidHasher(u64);

impl Hasher for CidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, id: u32) {
        self.0 = (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type CidMap<V> = HashMap<u32, V, BuildHasherDefault<CidHasher>>;

struct Entry<A> {
    connection: Connection,
    remote: A,
    /// The deadline this connection has in the heap (entries with another time are stale).
    scheduled: Option<Instant>,
    touched: bool,
    ready: bool,
    has_events: bool,
    drained_reported: bool,
}

pub struct Endpoint<A: Clone + Eq + Hash> {
    config: EndpointConfig,
    rng: Xoshiro256PlusPlus,
    connections: CidMap<Entry<A>>,
    /// Server side: (client address, client's connection id) -> our connection id, so a
    /// retransmitted Initial reaches the connection it already created. Keyed by what
    /// a peer chooses, so it keeps the standard library's keyed hash.
    by_initial: HashMap<(A, u32), u32>,
    /// Connections' deadlines, earliest first; an entry is current only if it matches `Entry::scheduled`.
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Connections that may have something to send, in turn.
    ready: VecDeque<u32>,
    /// Connections touched since they were last rescheduled.
    touched: Vec<u32>,
    /// Connections with events for the application.
    with_events: VecDeque<u32>,
    /// Connections that became drained (the driver may forget them).
    drained: VecDeque<ConnectionHandle>,
    stats: EndpointStats,
    /// Connections asked to transmit (tests check that idle ones are not).
    #[cfg(test)]
    transmit_polls: u64,
}

impl<A: Clone + Eq + Hash> Endpoint<A> {
    /// `seed` drives connection-id choice; a real runtime seeds it from the OS.
    pub fn new(config: EndpointConfig, seed: u64) -> Self {
        Endpoint {
            config,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            connections: CidMap::default(),
            by_initial: HashMap::new(),
            timers: BinaryHeap::new(),
            ready: VecDeque::new(),
            touched: Vec::new(),
            with_events: VecDeque::new(),
            drained: VecDeque::new(),
            stats: EndpointStats::default(),
            #[cfg(test)]
            transmit_polls: 0,
        }
    }

    // ---- getters ----

    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }
    pub fn len(&self) -> usize {
        self.connections.len()
    }
    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }
    /// Every connection, in no particular order (O(n): for inspection, not for driving).
    pub fn handles(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        self.connections.keys().map(|&cid| ConnectionHandle(cid))
    }
    pub fn connection(&self, handle: ConnectionHandle) -> Option<&Connection> {
        self.connections.get(&handle.0).map(|e| &e.connection)
    }
    /// The connection, for the application to read, write or close. The endpoint
    /// takes another look at it (timers, transmissions, events) on its next call.
    pub fn connection_mut(&mut self, handle: ConnectionHandle) -> Option<&mut Connection> {
        let entry = self.connections.get_mut(&handle.0)?;
        if !entry.touched {
            entry.touched = true;
            self.touched.push(handle.0);
        }
        Some(&mut entry.connection)
    }
    pub fn remote(&self, handle: ConnectionHandle) -> Option<&A> {
        self.connections.get(&handle.0).map(|e| &e.remote)
    }

    // ---- commands ----

    /// Opens a connection to `remote`; its handshake leaves on the next `poll_transmit`.
    pub fn connect(&mut self, now: Instant, remote: A) -> ConnectionHandle {
        let cid = self.fresh_cid();
        let connection = Connection::client(self.config.transport.clone(), now, cid);
        self.insert(cid, connection, remote)
    }

    /// Creates the connection a peer asked for; its Accept leaves on the next `poll_transmit`.
    pub fn accept(&mut self, incoming: Incoming<A>) -> Result<ConnectionHandle, AcceptError> {
        if self.connections.len() >= self.config.max_connections {
            self.stats.refused += 1;
            return Err(AcceptError::Full);
        }
        let cid = self.fresh_cid();
        let connection = Connection::server(self.config.transport.clone(), incoming.received, cid, &incoming.initial);
        self.by_initial.insert((incoming.remote.clone(), incoming.initial.src_cid), cid);
        Ok(self.insert(cid, connection, incoming.remote))
    }

    /// Turns a peer away without keeping any state: writes a reset for it into
    /// `buf` (the client learns at once instead of timing out). Send it to the address returned.
    pub fn refuse(&mut self, incoming: Incoming<A>, buf: &mut [u8]) -> Option<(A, Transmit)> {
        self.stats.refused += 1;
        let transmit = Self::reset_for(&incoming.initial, buf)?;
        Some((incoming.remote, transmit))
    }

    /// Forgets a connection; its packets are then dropped as unknown.
    pub fn remove(&mut self, handle: ConnectionHandle) -> Option<Connection> {
        let entry = self.connections.remove(&handle.0)?;
        // Heap, ready and event entries naming it are skipped when they come up.
        self.by_initial.remove(&(entry.remote.clone(), entry.connection.peer_cid()));
        Some(entry.connection)
    }

    // ---- inputs ----

    /// Routes one datagram. `buf` receives a stateless response, if one is due.
    /// `None`: the datagram was dropped (and counted in [`EndpointStats`]).
    pub fn handle_datagram(&mut self, now: Instant, remote: A, datagram: &[u8], buf: &mut [u8]) -> Option<DatagramEvent<A>> {
        self.stats.datagrams_received += 1;
        let header = match Header::peek(datagram) {
            Ok(h) => h,
            Err(_) => {
                self.stats.malformed += 1;
                return None;
            }
        };
        if header.dst_cid != 0 {
            let Some(entry) = self.connections.get_mut(&header.dst_cid) else {
                self.stats.unknown_connection += 1;
                return None;
            };
            if entry.remote != remote {
                self.stats.wrong_address += 1;
                return None;
            }
            entry.connection.handle_datagram(now, datagram);
            self.touch(header.dst_cid);
            return Some(DatagramEvent::Connection(ConnectionHandle(header.dst_cid)));
        }
        // Only a handshake Initial carries connection id 0.
        let initial = match Packet::parse(datagram) {
            Ok(Packet { body: Body::Handshake(hs), .. }) if hs.phase == HandshakePhase::Initial => hs,
            _ => {
                self.stats.malformed += 1;
                return None;
            }
        };
        if let Some(&cid) = self.by_initial.get(&(remote.clone(), initial.src_cid)) {
            if let Some(entry) = self.connections.get_mut(&cid) {
                entry.connection.handle_datagram(now, datagram);
                self.touch(cid);
                return Some(DatagramEvent::Connection(ConnectionHandle(cid)));
            }
        }
        if !self.config.accept_incoming {
            // A client does not answer handshakes: that would make it a reflector.
            self.stats.refused += 1;
            return None;
        }
        let incoming = Incoming { remote, initial, received: now };
        if self.connections.len() >= self.config.max_connections {
            let (destination, transmit) = self.refuse(incoming, buf)?;
            return Some(DatagramEvent::Response { destination, transmit });
        }
        Some(DatagramEvent::NewConnection(incoming))
    }

    /// Handles every connection timer due by `now`; harmless when called early or twice.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.reschedule_touched();
        while let Some(&Reverse((at, cid))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(entry) = self.connections.get_mut(&cid) else { continue };
            if entry.scheduled != Some(at) {
                continue; // stale: the deadline moved
            }
            entry.scheduled = None;
            entry.connection.handle_timeout(now);
            self.touch(cid);
        }
        self.reschedule_touched();
    }

    // ---- outputs ----

    /// The next datagram any connection wants to send, taking connections in turn.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(A, Transmit)> {
        self.reschedule_touched();
        while let Some(cid) = self.ready.pop_front() {
            let Some(entry) = self.connections.get_mut(&cid) else { continue };
            if !entry.ready {
                continue;
            }
            #[cfg(test)]
            {
                self.transmit_polls += 1;
            }
            let transmit = entry.connection.poll_transmit(now, buf);
            // Sending moves timers and may raise events; it stays ready only while it sends.
            let remote = transmit.is_some().then(|| entry.remote.clone());
            entry.ready = transmit.is_some();
            Self::refresh(cid, entry, &mut self.timers, &mut self.with_events, &mut self.drained);
            if let (Some(transmit), Some(remote)) = (transmit, remote) {
                self.ready.push_back(cid);
                return Some((remote, transmit));
            }
        }
        None
    }

    /// The earliest deadline of any connection.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.reschedule_touched();
        while let Some(&Reverse((at, cid))) = self.timers.peek() {
            if self.connections.get(&cid).is_some_and(|e| e.scheduled == Some(at)) {
                return Some(at);
            }
            self.timers.pop();
        }
        None
    }

    /// The next event of any connection, with the connection it concerns.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        self.reschedule_touched();
        while let Some(&cid) = self.with_events.front() {
            let Some(entry) = self.connections.get_mut(&cid) else {
                self.with_events.pop_front();
                continue;
            };
            if let Some(event) = entry.connection.poll_event() {
                return Some((ConnectionHandle(cid), event));
            }
            entry.has_events = false;
            self.with_events.pop_front();
        }
        None
    }

    /// A connection that has become drained (closed and quiet, or lost): the driver may
    /// [`Endpoint::remove`] it. Each is reported once.
    pub fn poll_drained(&mut self) -> Option<ConnectionHandle> {
        self.reschedule_touched();
        self.drained.pop_front()
    }

    // ---- internals ----

    fn fresh_cid(&mut self) -> u32 {
        loop {
            let cid = self.rng.next_u32();
            if cid != 0 && !self.connections.contains_key(&cid) {
                return cid;
            }
        }
    }

    fn insert(&mut self, cid: u32, connection: Connection, remote: A) -> ConnectionHandle {
        self.connections.insert(
            cid,
            Entry { connection, remote, scheduled: None, touched: false, ready: false, has_events: false, drained_reported: false },
        );
        self.touch(cid);
        ConnectionHandle(cid)
    }

    fn touch(&mut self, cid: u32) {
        if let Some(entry) = self.connections.get_mut(&cid) {
            if !entry.touched {
                entry.touched = true;
                self.touched.push(cid);
            }
        }
    }

    /// Brings every touched connection's deadline, events and readiness to send up to date.
    fn reschedule_touched(&mut self) {
        for cid in std::mem::take(&mut self.touched) {
            let Some(entry) = self.connections.get_mut(&cid) else { continue };
            entry.touched = false;
            Self::refresh(cid, entry, &mut self.timers, &mut self.with_events, &mut self.drained);
            if !entry.ready {
                entry.ready = true;
                self.ready.push_back(cid);
            }
        }
        // Stale heap entries pile up while deadlines move; rebuild before they outnumber the live ones.
        if self.timers.len() > 4 * self.connections.len() + 1024 {
            self.timers = self.connections.iter().filter_map(|(&cid, e)| e.scheduled.map(|at| Reverse((at, cid)))).collect();
        }
    }

    /// Puts one connection's deadline in the heap (if it moved) and notes its events and draining.
    fn refresh(
        cid: u32,
        entry: &mut Entry<A>,
        timers: &mut BinaryHeap<Reverse<(Instant, u32)>>,
        with_events: &mut VecDeque<u32>,
        drained: &mut VecDeque<ConnectionHandle>,
    ) {
        let deadline = entry.connection.poll_timeout();
        if deadline != entry.scheduled {
            entry.scheduled = deadline;
            if let Some(at) = deadline {
                timers.push(Reverse((at, cid)));
            }
        }
        if !entry.has_events && entry.connection.has_events() {
            entry.has_events = true;
            with_events.push_back(cid);
        }
        if !entry.drained_reported && entry.connection.is_drained() {
            entry.drained_reported = true;
            drained.push_back(ConnectionHandle(cid));
        }
    }

    fn reset_for(initial: &Handshake, buf: &mut [u8]) -> Option<Transmit> {
        let reset = Packet { dst_cid: initial.src_cid, body: Body::Reset(Reset { reason: ResetReason::Aborted }) };
        let size = reset.emit(buf).ok()?;
        Some(Transmit { size, packet_type: PacketType::Reset })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::State;
    use crate::time::Duration;

    type Net = (Endpoint<u8>, Endpoint<u8>);

    /// Delivers everything both endpoints want to send, back and forth, until quiet.
    fn exchange(net: &mut Net, now: Instant) {
        let mut buf = vec![0u8; 2048];
        let mut response = [0u8; 64];
        loop {
            let mut moved = false;
            while let Some((_, t)) = net.0.poll_transmit(now, &mut buf) {
                moved = true;
                match net.1.handle_datagram(now, 0, &buf[..t.size], &mut response) {
                    Some(DatagramEvent::NewConnection(incoming)) => {
                        let _ = net.1.accept(incoming);
                    }
                    Some(DatagramEvent::Response { transmit, .. }) => {
                        net.0.handle_datagram(now, 1, &response[..transmit.size], &mut []);
                    }
                    _ => {}
                }
            }
            while let Some((_, t)) = net.1.poll_transmit(now, &mut buf) {
                moved = true;
                net.0.handle_datagram(now, 1, &buf[..t.size], &mut response);
            }
            if !moved {
                break;
            }
        }
    }

    fn pair(max_connections: usize) -> Net {
        let client = Endpoint::new(EndpointConfig::client(TransportConfig::default()), 1);
        let mut server = Endpoint::new(EndpointConfig::server(TransportConfig::default()), 2);
        server.config.max_connections = max_connections;
        (client, server)
    }

    #[test]
    fn a_full_server_refuses_without_keeping_state() {
        let mut net = pair(2);
        let t = Instant::from_millis(1);
        let handles: Vec<_> = (0..3).map(|_| net.0.connect(t, 1)).collect();
        exchange(&mut net, t);
        assert_eq!(net.1.len(), 2, "the third handshake created nothing");
        assert_eq!(net.1.stats().refused, 1);
        let states: Vec<_> = handles.iter().map(|&h| net.0.connection(h).unwrap().state()).collect();
        assert_eq!(states.iter().filter(|s| **s == State::Established).count(), 2);
        let refused = handles.iter().find(|&&h| net.0.connection(h).unwrap().state() == State::Lost).expect("one was refused");
        assert_eq!(
            net.0.connection(*refused).unwrap().error(),
            Some(&crate::ConnectionError::Reset(ResetReason::Aborted)),
            "the client learns at once instead of timing out"
        );
    }

    #[test]
    fn work_per_event_does_not_grow_with_idle_connections() {
        let mut net = pair(100_000);
        let t = Instant::from_millis(1);
        let handles: Vec<_> = (0..2_000).map(|_| net.0.connect(t, 1)).collect();
        exchange(&mut net, t);
        assert_eq!(net.1.len(), 2_000);
        while net.0.poll_event().is_some() {}
        while net.1.poll_event().is_some() {}
        let t = t + Duration::from_millis(1);
        exchange(&mut net, t);
        // Every connection is idle now. One of them gets data to send.
        net.0.connection_mut(handles[1234]).unwrap().write(b"hello").unwrap();
        let before = net.0.transmit_polls;
        let mut buf = vec![0u8; 2048];
        let sent: Vec<_> = std::iter::from_fn(|| net.0.poll_transmit(t, &mut buf)).collect();
        assert_eq!(sent.len(), 1);
        assert!(net.0.transmit_polls - before <= 2, "polled {} connections for one packet", net.0.transmit_polls - before);
        // Timers: the earliest deadline comes from the heap; handling it touches only the due connections.
        let next = net.0.poll_timeout().expect("idle connections keep keepalive and idle timers");
        assert!(next > t);
        net.0.handle_timeout(t);
        let before = net.0.transmit_polls;
        assert!(net.0.poll_transmit(t, &mut buf).is_none());
        assert_eq!(net.0.transmit_polls - before, 0, "nothing was due, so nothing was asked");
    }

    #[test]
    fn deadlines_that_move_leave_no_stale_wakeups() {
        let mut net = pair(10);
        let t0 = Instant::from_millis(1);
        let h = net.0.connect(t0, 1);
        exchange(&mut net, t0);
        // Traffic moves the connection's deadlines again and again (acks, retransmission,
        // keepalive timers); the endpoint's answer is always the connection's own.
        for i in 1..2_000u64 {
            let now = t0 + Duration::from_millis(i);
            net.0.connection_mut(h).unwrap().write(b"x").unwrap();
            exchange(&mut net, now);
            assert_eq!(net.0.poll_timeout(), net.0.connection(h).unwrap().poll_timeout());
        }
        assert!(net.0.timers.len() <= 4 + 1024 + 1, "stale heap entries are compacted: {}", net.0.timers.len());
    }
}
