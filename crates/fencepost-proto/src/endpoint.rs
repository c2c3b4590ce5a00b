//! Many connections behind one socket: routes datagrams by connection id,
//! answers handshakes, and chooses connection ids at random.
//!
//! Each side picks its own 32-bit connection id and the peer writes it in every
//! packet, so packets of an older connection between the same two addresses,
//! and guesses by an off-path sender, find no connection and are dropped.
//!
//! # Wire format version 2
//!
//! With Noise protection the endpoint also holds a static key (a server's, made at
//! random if the configuration gives none), validates addresses statelessly (an
//! Initial without a valid retry token gets a Retry, smaller than the Initial, and
//! nothing is kept), and answers protected packets for connections it does not
//! know with a stateless reset that only the lost connection's peer can verify.
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

use crate::assembler::BufferBudget;
use crate::config::{Route, TransportConfig};
use crate::connection::{Connection, ConnectionSecrets, Event, Hello, Transmit};
use crate::crypto::{EndpointSecrets, HandshakeError, PublicKey, StaticKey};
use crate::time::{Duration, Instant};
use crate::wire::{self, Body, Handshake, HandshakePhase, Header, Packet, PacketType, Reset, ResetReason, SecureHandshake, StatelessReset};
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
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
    /// Bytes of received data all connections together may hold (readable or out of
    /// order, and what their FEC decoders keep for repairs); beyond it out-of-order
    /// packets are dropped until readers catch up, and decoders forget what they kept.
    pub buffer_budget: usize,
}

impl EndpointConfig {
    pub fn client(transport: TransportConfig) -> Self {
        EndpointConfig { transport: Arc::new(transport), accept_incoming: false, max_connections: 4096, buffer_budget: 1 << 30 }
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
    /// Named a connection of ours but came from another address, and did not move it
    /// there (see `peer_address_changes`): dropped, except a protected connection's packet
    /// that opened but was not the peer's newest (one that came late from an old address),
    /// whose content is the peer's and is taken.
    pub wrong_address: u64,
    /// A handshake this endpoint does not take (not a server, full, or the application said no).
    pub refused: u64,
    /// Bytes of every datagram handed to the endpoint.
    pub bytes_received: u64,
    /// Packets of the other wire-format version (plaintext to a protected endpoint, or the reverse).
    pub wrong_version: u64,
    /// Retries sent to Initials without a valid token (version 2), and their bytes.
    pub retries_sent: u64,
    /// Initials with a token that was not ours, too old, or for another address.
    pub invalid_tokens: u64,
    /// Initials whose Noise message did not authenticate (forged, or for another server key).
    pub forged_handshakes: u64,
    /// Stateless resets sent for protected packets naming no connection of ours.
    pub stateless_resets_sent: u64,
    /// Bytes sent by the endpoint itself without a connection (retries, resets).
    pub stateless_bytes_sent: u64,
    /// Initials a driver dropped unopened: it already held as many waiting handshakes as
    /// it keeps (a flood of connection attempts; a real peer asks again). Counted in
    /// `datagrams_received` too.
    pub initials_shed: u64,
    /// Times the driver saw the kernel drop datagrams at the socket and held the
    /// receiving connections' windows (see [`Endpoint::note_socket_overflow`]).
    pub socket_overflows: u64,
    /// Socket overflows while most datagrams went to no connection (a flood): no window
    /// was held for them.
    pub socket_overflows_in_floods: u64,
    /// Times the driver saw the socket's buffer nearly full and held the receiving
    /// connections' windows before it overflowed (see [`Endpoint::note_socket_filling`]).
    pub socket_fill_holds: u64,
    /// Connections whose peer's packets came from a new address and were followed there
    /// (see [`Endpoint::handle_datagram`]: a NAT that gave the peer a new port).
    pub peer_address_changes: u64,
    /// Reports that a destination of this endpoint's datagrams is unreachable (an ICMP port,
    /// host or network unreachable, or a send this host found no route for; see
    /// [`Endpoint::on_unreachable`]), whether or not a connection ended for them.
    pub unreachable_reports: u64,
}

impl EndpointStats {
    /// Datagrams that went to no connection: garbage, strangers, refused or forged
    /// handshakes, shed Initials, and Initials answered with a Retry.
    pub fn for_no_connection(&self) -> u64 {
        self.malformed + self.unknown_connection + self.wrong_address + self.wrong_version + self.refused + self.invalid_tokens + self.forged_handshakes + self.initials_shed + self.retries_sent
    }
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

/// Where [`Endpoint::route`] sends a datagram.
enum Routed<A> {
    /// To this connection.
    Deliver(u32),
    /// To this connection, from an address other than its peer's: a sealed packet, which
    /// moves the connection to that address if it opens as the peer's newest.
    Moved(u32, A),
    /// Nowhere further: this is what it led to.
    Done(Option<DatagramEvent<A>>),
}

/// A handshake Initial the endpoint has not yet decided on. Holds no connection state
/// (with protection, its address has been validated by a retry token).
#[derive(Debug)]
pub struct Incoming<A> {
    remote: A,
    hello: Hello,
    received: Instant,
    /// What the route to `remote` carries, if the caller knows it.
    route: Option<Route>,
}

impl<A> Incoming<A> {
    pub fn remote(&self) -> &A {
        &self.remote
    }
    /// Sizes the connection's packets, and the payload its handshake offers the peer, so
    /// that none is a datagram of more than `datagram` bytes (see
    /// [`TransportConfig::fit_datagram`]): a driver tells what the route to the peer
    /// carries, which the transport cannot see.
    pub fn fit_datagram(&mut self, datagram: usize) {
        self.route = Some(Route { datagram, same_host: false });
    }
    /// As [`Incoming::fit_datagram`], and wider packets where the peer is this host (see
    /// [`TransportConfig::fit_route`]).
    pub fn fit_route(&mut self, route: Route) {
        self.route = Some(route);
    }
    /// The client's connection id.
    pub fn peer_cid(&self) -> u32 {
        self.hello.src_cid()
    }
}

/// Why [`Endpoint::accept`] did not create a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcceptError {
    /// The endpoint holds `max_connections` already.
    Full,
    /// The Initial's handshake did not authenticate (or asked for what this endpoint does not speak).
    Handshake(HandshakeError),
}

impl std::fmt::Display for AcceptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcceptError::Full => write!(f, "the endpoint holds its maximum number of connections"),
            AcceptError::Handshake(e) => write!(f, "{e}"),
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

/// Datagrams one connection sends in a row before the next ready one gets a turn. One
/// at a time interleaved a hundred bulk connections packet by packet: the receiver then
/// found one or two packets of each connection per read and acked every four, and each
/// datagram touched another connection's state, cold in the cache (`bench/peers.py
/// --only connections`: 4 data packets per ack, 0.61x one connection's rate; in runs of
/// 16, 11 per ack; 32 and 64 both 14-20 per ack and 0.84x). A connection's pacer and
/// window still bound what it sends in a turn; 64 keeps the wait of one behind a hundred
/// bulk connections to about 7 ms at 10 Gbit/s. A receiver acks and wakes each connection
/// once per receive pass, so the fewer connections a pass holds, the fewer acks per byte:
/// at 32 a pass of 256 datagrams held eight connections' turns; at 64 (with the net
/// driver's ack stretch, two turns, raised to 128 so that one turn does not end the pass) it holds
/// four. 100 bulk connections over loopback then sent 13,200 acks per GB instead of
/// 24,000, and the server's CPU per byte fell 3 % (0.374 against 0.387 and 0.385 s per
/// GB for two copies of the old build, medians of 30 interleaved runs; the time did not
/// move beyond the noise). At 64 alone each turn ended its pass.
pub const TRANSMIT_BURST: u32 = 64;
/// Emptied receive buffers the endpoint may keep beyond the most its connections have
/// held at once, so that a connection whose reader keeps up still reuses its buffers.
const SPARE_BUFFERS_FLOOR: usize = 64;
/// How recently a connection must have received to be among those that filled a socket
/// that overflowed or nearly did ([`Endpoint::note_socket_overflow`]). Longer than the
/// socket's queue may be behind: the connections whose packets fill it are not all those
/// the receiver read last. With 5 ms, a server of 100 loopback connections that had
/// fallen 30-50 ms behind held only the twenty or so whose turns it had just read, the
/// others kept sending, and the socket overflowed after the hold as often as without.
const OVERFLOW_RECENT: Duration = Duration::from_millis(100);

/// Connections by id. While an endpoint holds few (a client holds one, as does each
/// endpoint in the simulator), their ids are a short list searched in one or two cache
/// lines: the endpoint looks its connections up several times per packet, and the hash
/// table's probing was a fourteenth of a simulated transfer's time. Beyond
/// [`CidMap::FEW`] they move to a hash table.
struct CidMap<V> {
    /// Ids and values of the short list, index for index; empty while `many` is used.
    ids: Vec<u32>,
    values: Vec<V>,
    many: HashMap<u32, V, BuildHasherDefault<CidHasher>>,
}

impl<V> Default for CidMap<V> {
    fn default() -> Self {
        CidMap { ids: Vec::new(), values: Vec::new(), many: HashMap::default() }
    }
}

impl<V> CidMap<V> {
    const FEW: usize = 8;

    fn position(&self, cid: u32) -> Option<usize> {
        self.ids.iter().position(|&id| id == cid)
    }
    #[inline]
    fn get(&self, cid: &u32) -> Option<&V> {
        if self.many.is_empty() {
            self.ids.iter().zip(&self.values).find(|(&id, _)| id == *cid).map(|(_, v)| v)
        } else {
            self.many.get(cid)
        }
    }
    #[inline]
    fn get_mut(&mut self, cid: &u32) -> Option<&mut V> {
        if self.many.is_empty() {
            self.ids.iter().zip(&mut self.values).find(|(&id, _)| id == *cid).map(|(_, v)| v)
        } else {
            self.many.get_mut(cid)
        }
    }
    fn contains_key(&self, cid: &u32) -> bool {
        self.get(cid).is_some()
    }
    /// Adds or replaces the value for `cid`.
    fn insert(&mut self, cid: u32, value: V) {
        if !self.many.is_empty() {
            self.many.insert(cid, value);
        } else if let Some(i) = self.position(cid) {
            self.values[i] = value;
        } else if self.ids.len() < Self::FEW {
            self.ids.push(cid);
            self.values.push(value);
        } else {
            self.many.extend(self.ids.drain(..).zip(self.values.drain(..)));
            self.many.insert(cid, value);
        }
    }
    fn remove(&mut self, cid: &u32) -> Option<V> {
        if !self.many.is_empty() {
            return self.many.remove(cid);
        }
        let i = self.position(*cid)?;
        self.ids.swap_remove(i);
        Some(self.values.swap_remove(i))
    }
    fn len(&self) -> usize {
        self.ids.len() + self.many.len()
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn iter(&self) -> impl Iterator<Item = (&u32, &V)> {
        self.ids.iter().zip(&self.values).chain(self.many.iter())
    }
    fn keys(&self) -> impl Iterator<Item = &u32> {
        self.iter().map(|(cid, _)| cid)
    }
}

struct Entry<A> {
    connection: Connection,
    remote: A,
    /// The deadline this connection has in the heap (entries with another time are stale).
    scheduled: Option<Instant>,
    touched: bool,
    ready: bool,
    has_events: bool,
    drained_reported: bool,
    /// The connection's (remote, peer id) is in `by_peer`.
    peer_known: bool,
    /// The receive pass (see [`Endpoint::begin_receive_pass`]) `pass_datagrams` counts in.
    pass: u64,
    /// Datagrams for this connection in that pass.
    pass_datagrams: u32,
}

/// Runs `f` on `connection` with `spares` (an endpoint's emptied receive buffers, `room`
/// as in [`crate::assembler::Assembler::swap_spares`]) lent to its receive side.
fn with_lent_spares<R>(spares: &mut Vec<Vec<u8>>, room: usize, connection: &mut Connection, f: impl FnOnce(&mut Connection) -> R) -> R {
    connection.swap_receive_spares(spares, Some(room));
    let result = f(connection);
    connection.swap_receive_spares(spares, None);
    result
}

/// A client connection given its id and secrets by [`Endpoint::prepare_connect`], not yet made.
pub struct PendingConnect {
    config: Arc<TransportConfig>,
    cid: u32,
    secrets: ConnectionSecrets,
}

/// `config`, its payload fitted to `route`: the same configuration where it fits already
/// (an Ethernet route), else a copy of it.
fn fitted(config: &Arc<TransportConfig>, route: Route) -> Arc<TransportConfig> {
    let max_payload = config.payload_for(route);
    if max_payload == config.max_payload {
        return config.clone();
    }
    Arc::new(TransportConfig { max_payload, ..TransportConfig::clone(config) })
}

impl PendingConnect {
    /// As [`Incoming::fit_datagram`], for the connection this opens.
    pub fn fit_datagram(&mut self, datagram: usize) {
        self.fit_route(Route { datagram, same_host: false });
    }
    /// As [`Incoming::fit_route`], for the connection this opens.
    pub fn fit_route(&mut self, route: Route) {
        self.config = fitted(&self.config, route);
    }

    /// Makes the connection and writes its Initial, the costly part of a connect, without
    /// the endpoint. Dropping the result instead of passing it to
    /// [`Endpoint::finish_connect`] leaves its id unused for the endpoint's life.
    pub fn open(self, now: Instant) -> OpenedConnect {
        OpenedConnect { cid: self.cid, connection: Connection::client(self.config, now, self.cid, &self.secrets) }
    }
}

/// A client connection made by [`PendingConnect::open`], for [`Endpoint::finish_connect`].
pub struct OpenedConnect {
    cid: u32,
    connection: Connection,
}

pub struct Endpoint<A: Clone + Eq + Hash> {
    config: EndpointConfig,
    rng: ChaCha20Rng,
    secrets: EndpointSecrets,
    budget: Arc<BufferBudget>,
    /// The longest datagram any of its connections may send (see [`Endpoint::widest_datagram`]).
    widest_datagram: usize,
    /// This endpoint's static key (version 2).
    static_key: Option<StaticKey>,
    connections: CidMap<Entry<A>>,
    /// Ids given to connections being opened away from the endpoint (see
    /// [`Endpoint::prepare_connect`]), kept from any other connection until they join it.
    opening: Vec<u32>,
    /// Counts receive passes (see [`Endpoint::begin_receive_pass`]).
    receive_pass: u64,
    /// Datagrams received, and of them those that went to no connection, when a socket
    /// overflow was last noted (see [`Endpoint::note_socket_overflow`]).
    overflow_seen: (u64, u64),
    /// Buffer memory connections gave back since [`Endpoint::take_given_back`] last asked.
    given_back: usize,
    /// The most datagrams one connection got in the current pass.
    pass_longest_run: u32,
    /// Handshake packets handled in the current pass (see [`Endpoint::receive_pass_handshakes`]).
    pass_handshakes: u32,
    /// (peer address, peer's connection id) -> our connection id, so a retransmitted
    /// Initial reaches the connection it already created and a stateless reset (which
    /// names the peer's id) finds its connection. Keyed by what a peer chooses, so it
    /// keeps the standard library's keyed hash.
    by_peer: HashMap<(A, u32), u32>,
    /// Connections' deadlines, earliest first; an entry is current only if it matches `Entry::scheduled`.
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Connections that may have something to send, in turn.
    ready: VecDeque<u32>,
    /// Datagrams the connection at the front of `ready` has sent since it got there.
    burst: u32,
    /// Connections touched since they were last rescheduled.
    touched: Vec<u32>,
    /// Emptied receive buffers shared by the connections (each connection's are lent these
    /// while it takes in a datagram or is read; see [`crate::assembler::Assembler::swap_spares`]).
    spare_buffers: Vec<Vec<u8>>,
    /// The most received bytes the connections have held at once (the budget's count),
    /// which `spare_buffers` and what is held stay within, beyond [`SPARE_BUFFERS_FLOOR`].
    held_peak: usize,
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
    /// An endpoint whose connection ids, keys and secrets all come from `seed`: for the
    /// simulator and tests, where a run must repeat bit for bit. A real runtime uses
    /// [`Endpoint::with_entropy`] with bytes from the OS.
    pub fn new(config: EndpointConfig, seed: u64) -> Self {
        Self::from_rng(config, ChaCha20Rng::seed_from_u64(seed))
    }

    /// An endpoint seeded with 32 bytes from a secure random source.
    pub fn with_entropy(config: EndpointConfig, entropy: [u8; 32]) -> Self {
        Self::from_rng(config, ChaCha20Rng::from_seed(entropy))
    }

    fn from_rng(config: EndpointConfig, mut rng: ChaCha20Rng) -> Self {
        let static_key = config.transport.protection.noise().map(|noise| match &noise.local {
            Some(key) => key.clone(),
            None => StaticKey::generate(&mut rng),
        });
        let secrets = EndpointSecrets::new(&mut rng, static_key.as_ref());
        Endpoint {
            budget: BufferBudget::new(config.buffer_budget),
            widest_datagram: config.transport.longest_datagram(),
            config,
            rng,
            secrets,
            static_key,
            connections: CidMap::default(),
            opening: Vec::new(),
            receive_pass: 0,
            overflow_seen: (0, 0),
            given_back: 0,
            pass_longest_run: 0,
            pass_handshakes: 0,
            by_peer: HashMap::new(),
            timers: BinaryHeap::new(),
            ready: VecDeque::new(),
            burst: 0,
            touched: Vec::new(),
            spare_buffers: Vec::new(),
            held_peak: 0,
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
    /// The room [`Endpoint::poll_transmit`] may need for one datagram (a data packet or a
    /// repair): the configured payload's, or more once a connection's packets were widened
    /// to its route (see [`Incoming::fit_route`]). It never shrinks, so a caller sizing
    /// buffers by it once per turn is never short.
    pub fn widest_datagram(&self) -> usize {
        self.widest_datagram
    }

    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }
    /// Received bytes all connections hold (with what their FEC decoders keep), against
    /// [`EndpointConfig::buffer_budget`].
    pub fn buffered_bytes(&self) -> usize {
        self.budget.used()
    }
    /// This endpoint's static public key (version 2): what clients pin with `--peer-key`.
    pub fn public_key(&self) -> Option<PublicKey> {
        self.static_key.as_ref().map(|k| k.public())
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
    /// Runs `read` on a connection as [`Endpoint::connection_mut`] would, with the
    /// endpoint's spare receive buffers lent to it: the buffers a read empties are the
    /// next ones any connection fills, while they are still in the caches.
    pub fn reading<R>(&mut self, handle: ConnectionHandle, read: impl FnOnce(&mut Connection) -> R) -> Option<R> {
        let room = self.lend_room();
        let entry = self.connections.get_mut(&handle.0)?;
        if !entry.touched {
            entry.touched = true;
            self.touched.push(handle.0);
        }
        Some(with_lent_spares(&mut self.spare_buffers, room, &mut entry.connection, read))
    }

    /// [`Endpoint::spare_room`] as of now, the most held at once updated first.
    fn lend_room(&mut self) -> usize {
        self.held_peak = self.held_peak.max(self.budget.used());
        self.spare_room()
    }

    /// The bytes the shared spare buffers and what the connections hold may come to:
    /// the most they have held at once, and [`SPARE_BUFFERS_FLOOR`] buffers.
    fn spare_room(&self) -> usize {
        self.held_peak + SPARE_BUFFERS_FLOOR * self.max_payload()
    }

    fn max_payload(&self) -> usize {
        usize::from(self.config.transport.max_payload).max(1)
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
        let opened = self.prepare_connect().open(now);
        self.finish_connect(opened, remote)
    }

    /// [`Endpoint::connect`] in three steps, for a runtime that shares the endpoint between
    /// threads under a lock: this one (cheap) gives the new connection its id and secrets;
    /// [`PendingConnect::open`] writes its Initial (a key pair and, when the server's key is
    /// known, a key agreement: tens of microseconds), and needs no endpoint; then
    /// [`Endpoint::finish_connect`] adds it. A hundred tasks connecting at once each held a
    /// client's lock for that work in turn, and its driver, waiting for the same lock, sent
    /// the Initials and answered the servers' Retries only between them.
    pub fn prepare_connect(&mut self) -> PendingConnect {
        let cid = self.fresh_cid();
        self.opening.push(cid);
        let secrets = self.connection_secrets(cid);
        PendingConnect { config: self.config.transport.clone(), cid, secrets }
    }

    /// Adds a connection made by [`PendingConnect::open`] from this endpoint's
    /// [`Endpoint::prepare_connect`]; its handshake leaves on the next `poll_transmit`.
    pub fn finish_connect(&mut self, opened: OpenedConnect, remote: A) -> ConnectionHandle {
        let OpenedConnect { cid, connection } = opened;
        let reserved = self.opening.iter().position(|&c| c == cid);
        // Another endpoint's could share an id with a connection of this one.
        debug_assert!(reserved.is_some(), "a connection prepared by another endpoint");
        if let Some(i) = reserved {
            self.opening.swap_remove(i);
        }
        self.insert(cid, connection, remote)
    }

    /// Creates the connection a peer asked for; its Accept leaves on the next `poll_transmit`.
    pub fn accept(&mut self, incoming: Incoming<A>) -> Result<ConnectionHandle, AcceptError> {
        if self.connections.len() >= self.config.max_connections {
            self.stats.refused += 1;
            return Err(AcceptError::Full);
        }
        let cid = self.fresh_cid();
        let secrets = self.connection_secrets(cid);
        let config = match incoming.route {
            Some(route) => fitted(&self.config.transport, route),
            None => self.config.transport.clone(),
        };
        let connection = match Connection::server(config, incoming.received, cid, &incoming.hello, &secrets) {
            Ok(c) => c,
            Err(e) => {
                self.stats.forged_handshakes += 1;
                return Err(AcceptError::Handshake(e));
            }
        };
        self.by_peer.insert((incoming.remote.clone(), incoming.hello.src_cid()), cid);
        let handle = self.insert(cid, connection, incoming.remote);
        if let Some(entry) = self.connections.get_mut(&cid) {
            entry.peer_known = true;
        }
        Ok(handle)
    }

    /// Turns a peer away without keeping any state. Version 1: writes a reset for it into
    /// `buf` (the client learns at once instead of timing out); send it to the address
    /// returned. Version 2 sends nothing: the client has no key yet to believe a refusal by.
    pub fn refuse(&mut self, incoming: Incoming<A>, buf: &mut [u8]) -> Option<(A, Transmit)> {
        self.stats.refused += 1;
        let Hello::V1(initial) = &incoming.hello else { return None };
        let transmit = Self::reset_for(initial, buf)?;
        Some((incoming.remote, transmit))
    }

    /// A connection fell quiet and gave back its buffers: the shared spare receive buffers,
    /// sized to the most held at once since, are sized to what is held now (and the
    /// floor's few buffers). A receiver still busy grows them again as it needs. Returns the
    /// bytes let go.
    fn shrink_spares(&mut self) -> usize {
        self.held_peak = self.budget.used();
        self.keep_spares(self.spare_room().saturating_sub(self.held_peak) / self.max_payload())
    }

    /// Keeps at most `keep` spare receive buffers; returns the bytes of those let go.
    fn keep_spares(&mut self, keep: usize) -> usize {
        let freed = self.spare_buffers.get(keep..).map_or(0, |gone| gone.iter().map(Vec::capacity).sum());
        self.spare_buffers.truncate(keep);
        if self.spare_buffers.is_empty() {
            self.spare_buffers = Vec::new();
        }
        freed
    }

    /// Forgets a connection; its packets are then dropped as unknown.
    pub fn remove(&mut self, handle: ConnectionHandle) -> Option<Connection> {
        let entry = self.connections.remove(&handle.0)?;
        // Heap, ready and event entries naming it are skipped when they come up.
        if entry.peer_known {
            self.by_peer.remove(&(entry.remote.clone(), entry.connection.peer_cid()));
        }
        // The spares shrink with the connections: the most held at once falls by the share
        // of one connection, and the spares beyond it are let go (all of them with the last).
        let held_now = self.budget.used().saturating_sub(entry.connection.buffered_bytes());
        self.held_peak = (self.held_peak - self.held_peak / (self.connections.len() + 1)).max(held_now);
        let keep = if self.connections.is_empty() { 0 } else { self.spare_room().saturating_sub(held_now) / self.max_payload() };
        self.keep_spares(keep);
        Some(entry.connection)
    }

    // ---- inputs ----

    /// Routes one datagram. `buf` receives a stateless response, if one is due.
    /// `None`: the datagram was dropped (and counted in [`EndpointStats`]).
    pub fn handle_datagram(&mut self, now: Instant, remote: A, datagram: &[u8], buf: &mut [u8]) -> Option<DatagramEvent<A>> {
        match self.route(now, remote, datagram, buf) {
            Routed::Deliver(cid) => self.deliver(cid, |c| c.handle_datagram(now, datagram)),
            Routed::Moved(cid, remote) => self.deliver_moved(cid, remote, |c| c.handle_datagram(now, datagram)),
            Routed::Done(event) => event,
        }
    }

    /// [`Endpoint::handle_datagram`] for a datagram the caller may overwrite: a protected
    /// packet is opened where it lies instead of being copied first (the driver's receive
    /// buffers are reused for the next datagrams anyway).
    pub fn handle_datagram_in_place(&mut self, now: Instant, remote: A, datagram: &mut [u8], buf: &mut [u8]) -> Option<DatagramEvent<A>> {
        match self.route(now, remote, datagram, buf) {
            Routed::Deliver(cid) => self.deliver(cid, |c| c.handle_datagram_in_place(now, datagram)),
            Routed::Moved(cid, remote) => self.deliver_moved(cid, remote, |c| c.handle_datagram_in_place(now, datagram)),
            Routed::Done(event) => event,
        }
    }

    /// Where a datagram goes: to a connection, or answered (or dropped) here.
    fn route(&mut self, now: Instant, remote: A, datagram: &[u8], buf: &mut [u8]) -> Routed<A> {
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        let header = match Header::peek(datagram) {
            Ok(h) => h,
            Err(_) => {
                self.stats.malformed += 1;
                return Routed::Done(None);
            }
        };
        if header.version != self.config.transport.protection.wire_version() {
            self.stats.wrong_version += 1;
            return Routed::Done(None);
        }
        if header.packet_type == PacketType::StatelessReset {
            // It names the peer's id (the one the peer lost), not ours.
            let Some(&cid) = self.by_peer.get(&(remote, header.dst_cid)) else {
                self.stats.unknown_connection += 1;
                return Routed::Done(None);
            };
            return Routed::Deliver(cid);
        }
        if header.dst_cid != 0 {
            let Some(entry) = self.connections.get_mut(&header.dst_cid) else {
                self.stats.unknown_connection += 1;
                return Routed::Done(self.stateless_reset(&header, datagram.len(), remote, buf));
            };
            if entry.remote != remote {
                // A sealed packet proves itself when it opens; handshakes and resets are
                // taken from the connection's own address only.
                let sealed = !matches!(header.packet_type, PacketType::Handshake | PacketType::StatelessReset);
                if sealed && header.version == wire::VERSION_2 && entry.connection.state() == crate::State::Established {
                    return Routed::Moved(header.dst_cid, remote);
                }
                // A server bound to a wildcard address answers from the address its route
                // prefers, which need not be the one the client sent to (a second address
                // on its interface, an IPv6 host's temporary one): a client follows an
                // Accept that authenticates (its Noise message) from there.
                let answer = header.packet_type == PacketType::Handshake && header.version == wire::VERSION_2;
                if answer && entry.connection.side() == crate::Side::Client && entry.connection.state() == crate::State::Handshake {
                    return Routed::Moved(header.dst_cid, remote);
                }
                self.stats.wrong_address += 1;
                return Routed::Done(None);
            }
            if header.packet_type == PacketType::Handshake {
                self.pass_handshakes = self.pass_handshakes.saturating_add(1);
            }
            return Routed::Deliver(header.dst_cid);
        }
        // Only a handshake Initial carries connection id 0.
        let (hello, token) = if header.version == wire::VERSION {
            match Packet::parse(datagram) {
                Ok(Packet { body: Body::Handshake(hs), .. }) if hs.phase == HandshakePhase::Initial => (Hello::V1(hs), None),
                _ => {
                    self.stats.malformed += 1;
                    return Routed::Done(None);
                }
            }
        } else {
            match SecureHandshake::parse(datagram) {
                Ok(SecureHandshake::Initial { src_cid, timestamp, pattern, cipher, token, noise }) => {
                    (Hello::V2 { src_cid, timestamp, pattern, cipher, noise: noise.to_vec(), size: datagram.len() }, Some(token))
                }
                _ => {
                    self.stats.malformed += 1;
                    return Routed::Done(None);
                }
            }
        };
        if let Some(&cid) = self.by_peer.get(&(remote.clone(), hello.src_cid())) {
            if self.connections.contains_key(&cid) {
                self.pass_handshakes = self.pass_handshakes.saturating_add(1);
                return Routed::Deliver(cid);
            }
        }
        if !self.config.accept_incoming {
            // A client does not answer handshakes: that would make it a reflector.
            self.stats.refused += 1;
            return Routed::Done(None);
        }
        if let (Some(token), Some(noise)) = (token, self.config.transport.protection.noise()) {
            if noise.validate_addresses {
                let now_ms = now.total_micros() / 1000;
                let lifetime_ms = noise.retry_token_lifetime.total_micros() / 1000;
                if !self.secrets.check_retry_token(token, now_ms, lifetime_ms, hello.src_cid(), &remote) {
                    if !token.is_empty() {
                        self.stats.invalid_tokens += 1;
                    }
                    return Routed::Done(self.retry(now_ms, &hello, remote, buf));
                }
            }
        }
        let incoming = Incoming { remote, hello, received: now, route: None };
        if self.connections.len() >= self.config.max_connections {
            return Routed::Done(self.refuse(incoming, buf).map(|(destination, transmit)| DatagramEvent::Response { destination, transmit }));
        }
        self.pass_handshakes = self.pass_handshakes.saturating_add(1);
        Routed::Done(Some(DatagramEvent::NewConnection(incoming)))
    }

    fn deliver(&mut self, cid: u32, handle: impl FnOnce(&mut Connection)) -> Option<DatagramEvent<A>> {
        let room = self.lend_room();
        let entry = self.connections.get_mut(&cid)?;
        with_lent_spares(&mut self.spare_buffers, room, &mut entry.connection, handle);
        if entry.pass != self.receive_pass {
            entry.pass = self.receive_pass;
            entry.pass_datagrams = 0;
        }
        // Saturating: a caller that never begins a pass (the simulator) keeps counting.
        entry.pass_datagrams = entry.pass_datagrams.saturating_add(1);
        self.pass_longest_run = self.pass_longest_run.max(entry.pass_datagrams);
        if !entry.peer_known && entry.connection.peer_cid() != 0 {
            // A client learns its server's id from the Accept.
            entry.peer_known = true;
            self.by_peer.insert((entry.remote.clone(), entry.connection.peer_cid()), cid);
        }
        // `touch` without looking the connection up again: with more than a few connections
        // each lookup hashes and probes, and this runs for every datagram.
        if !entry.touched {
            entry.touched = true;
            self.touched.push(cid);
        }
        Some(DatagramEvent::Connection(ConnectionHandle(cid)))
    }

    /// Delivers a sealed packet that came from an address other than the connection's
    /// peer's. If it opens as the newest packet the peer has sent (authenticated, not a
    /// replay, numbered above every packet before it), the peer is now at that address: a
    /// NAT on its way gave it a new port or address (its mapping expired in a pause longer
    /// than the NAT keeps one, or the NAT restarted), and everything the connection sends
    /// goes there from now on. A packet that only came late from the old address, or does
    /// not open, moves nothing (and is counted as from the wrong address); what an
    /// authenticated one carries is the peer's all the same, and is taken.
    ///
    /// A client's handshake answered from another address moves it there when that answer
    /// is the Accept and completes the handshake (a Retry from there is taken, unproven as
    /// every Retry is, and moves nothing).
    fn deliver_moved(&mut self, cid: u32, remote: A, handle: impl FnOnce(&mut Connection)) -> Option<DatagramEvent<A>> {
        let (before, handshaking) = {
            let c = &self.connections.get(&cid)?.connection;
            (c.opened_up_to(), c.state() == crate::State::Handshake)
        };
        let event = self.deliver(cid, handle);
        let Some(entry) = self.connections.get_mut(&cid) else { return event };
        let accepted = handshaking && entry.connection.state() == crate::State::Established;
        if entry.connection.opened_up_to() <= before && !accepted {
            self.stats.wrong_address += 1;
            return event;
        }
        let old = std::mem::replace(&mut entry.remote, remote.clone());
        if entry.peer_known {
            let peer_cid = entry.connection.peer_cid();
            self.by_peer.remove(&(old, peer_cid));
            self.by_peer.insert((remote, peer_cid), cid);
        }
        self.stats.peer_address_changes += 1;
        event
    }

    /// Asks a client to prove its address, keeping nothing: the token says who it was given to.
    fn retry(&mut self, now_ms: u64, hello: &Hello, remote: A, buf: &mut [u8]) -> Option<DatagramEvent<A>> {
        let token = self.secrets.retry_token(now_ms, hello.src_cid(), &remote);
        let echo_timestamp = match hello {
            Hello::V2 { timestamp, .. } => *timestamp,
            Hello::V1(hs) => hs.timestamp,
        };
        let size = SecureHandshake::Retry { dst_cid: hello.src_cid(), echo_timestamp, token: &token }.emit(buf).ok()?;
        self.stats.retries_sent += 1;
        self.stats.stateless_bytes_sent += size as u64;
        Some(DatagramEvent::Response { destination: remote, transmit: Transmit { size, packet_type: PacketType::Handshake } })
    }

    /// A protected packet for a connection we do not have: perhaps ours before a restart.
    /// The reset is smaller than what triggered it, so it can never amplify, and a reset
    /// never answers a reset, so two endpoints cannot loop.
    fn stateless_reset(&mut self, header: &Header, len: usize, remote: A, buf: &mut [u8]) -> Option<DatagramEvent<A>> {
        let protected = header.version == wire::VERSION_2 && !matches!(header.packet_type, PacketType::Handshake | PacketType::StatelessReset);
        if !protected || len <= wire::STATELESS_RESET_LEN {
            return None;
        }
        let reset = StatelessReset { cid: header.dst_cid, token: self.secrets.reset_token(header.dst_cid) };
        let size = reset.emit(buf).ok()?;
        self.stats.stateless_resets_sent += 1;
        self.stats.stateless_bytes_sent += size as u64;
        Some(DatagramEvent::Response { destination: remote, transmit: Transmit { size, packet_type: PacketType::StatelessReset } })
    }

    /// Starts a receive pass: the datagrams a driver reads from its socket in one go,
    /// before it transmits. A connection's acks leave only when the driver transmits, so
    /// the most datagrams one connection got in a pass ([`Endpoint::longest_receive_run`])
    /// is about how many packets its next ack covers, where the pass's total counts every
    /// connection's: a driver that ends a pass at so many for one connection, not at so
    /// many in all, keeps its acks as far apart for a hundred connections as for one.
    pub fn begin_receive_pass(&mut self) {
        self.receive_pass += 1;
        self.pass_longest_run = 0;
        self.pass_handshakes = 0;
    }

    /// The driver saw the kernel drop datagrams at the endpoint's socket, whose receive
    /// buffer is `socket_buffer` bytes as the kernel counts them: every connection that
    /// received in the last [`OVERFLOW_RECENT`] holds its receive window to its share of
    /// what the socket holds (see `Connection::on_socket_overflow`). The kernel doubles
    /// the size a socket is given to allow for the memory each datagram sits in, so the
    /// socket is taken to hold half of it in payloads: `socket_buffer / (2 × payload)`
    /// packets, in each connection's payload as it was fitted to the route. (Counted at
    /// four fifths of it instead, one connection resent more and went no faster.)
    ///
    /// Not when most datagrams since the last such note went to no connection (garbage,
    /// forged or shed handshakes, Initials answered with a Retry): a flood overflowed the
    /// socket, and holding the connections' windows for it would hand the flood their rate.
    pub fn note_socket_overflow(&mut self, now: Instant, socket_buffer: usize) {
        if self.flooded_since_last_note() {
            self.stats.socket_overflows_in_floods += 1;
            return;
        }
        self.stats.socket_overflows += 1;
        self.hold_receiving_windows(now, socket_buffer);
    }

    /// The driver saw the socket's buffer nearly full: the receiving connections' windows
    /// are held as [`Endpoint::note_socket_overflow`] holds them, before the kernel drops
    /// anything (not in a flood either).
    pub fn note_socket_filling(&mut self, now: Instant, socket_buffer: usize) {
        if self.flooded_since_last_note() {
            return;
        }
        self.stats.socket_fill_holds += 1;
        self.hold_receiving_windows(now, socket_buffer);
    }

    /// Whether most datagrams since the last note of the socket went to no connection.
    fn flooded_since_last_note(&mut self) -> bool {
        let (received, stray) = (self.stats.datagrams_received, self.stats.for_no_connection());
        let (received_before, stray_before) = std::mem::replace(&mut self.overflow_seen, (received, stray));
        2 * (stray - stray_before) > received - received_before
    }

    /// Holds each connection that received in the last [`OVERFLOW_RECENT`] to its share of
    /// what the socket holds (see `Connection::on_socket_overflow`).
    fn hold_receiving_windows(&mut self, now: Instant, socket_buffer: usize) {
        let since = now - OVERFLOW_RECENT;
        let receiving: Vec<u32> = self.connections.iter().filter(|(_, e)| e.connection.received_since(since)).map(|(&cid, _)| cid).collect();
        let Some(count) = std::num::NonZeroUsize::new(receiving.len()) else { return };
        // In bytes of payload, each connection's share counted in its own packets: those to
        // this host are wider than the endpoint's configured payload (counted in that, a
        // hundred loopback connections of 8 kB packets were each held to 3.8 MB, 5.7 times
        // their share, and the socket went on overflowing).
        let share_bytes = (socket_buffer / 2 / count.get()) as u64;
        for cid in receiving {
            if let Some(entry) = self.connections.get_mut(&cid) {
                let payload = entry.connection.payload_size().max(1) as u64;
                entry.connection.on_socket_overflow(now, share_bytes / payload);
            }
            self.touch(cid);
        }
    }

    /// The socket reported an ICMP error for a datagram sent to `remote` (`what`: where it
    /// stopped): a client connection to it still waiting for its first answer ends, and
    /// one whose peer's port keeps being reported closed ends after a while without word
    /// from the peer (see `Connection::on_unreachable`). Returns how many ended.
    pub fn on_unreachable(&mut self, now: Instant, remote: &A, what: crate::connection::Unreachable) -> usize {
        let hit: Vec<u32> = self.connections.iter().filter(|(_, e)| e.remote == *remote).map(|(&cid, _)| cid).collect();
        let mut ended = 0;
        for cid in hit {
            if let Some(entry) = self.connections.get_mut(&cid) {
                if entry.connection.on_unreachable(now, what) {
                    ended += 1;
                    self.touch(cid);
                }
            }
        }
        self.stats.unreachable_reports += 1;
        ended
    }

    /// Counts an Initial that the caller dropped without handing it over (see
    /// [`EndpointStats::initials_shed`]).
    pub fn shed_initial(&mut self, datagram_len: usize) {
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram_len as u64;
        self.stats.initials_shed += 1;
    }

    /// The most datagrams any one connection got since [`Endpoint::begin_receive_pass`].
    pub fn longest_receive_run(&self) -> u32 {
        self.pass_longest_run
    }

    /// Handshake packets since [`Endpoint::begin_receive_pass`] that went to a connection
    /// or made one (not those dropped, refused or answered with a Retry, which cost little).
    /// Each may cost a key agreement (tens of microseconds, where a data packet costs about
    /// one), and the answers leave only when the driver transmits: a driver that ends its
    /// pass after a few lets the peers go on with those while it takes the rest.
    pub fn receive_pass_handshakes(&self) -> u32 {
        self.pass_handshakes
    }

    /// Handles every connection timer due by `now`; harmless when called early or twice.
    /// Bytes of buffer memory the connections gave back (see
    /// [`Connection::take_given_back`]) since [`Endpoint::take_given_back`] last reset it.
    pub fn given_back(&self) -> usize {
        self.given_back
    }

    /// As [`Endpoint::given_back`], and starts the count again.
    pub fn take_given_back(&mut self) -> usize {
        std::mem::take(&mut self.given_back)
    }

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
            let given_back = entry.connection.take_given_back();
            if given_back > 0 {
                self.given_back += given_back + self.shrink_spares();
            }
            self.touch(cid);
        }
        self.reschedule_touched();
    }

    // ---- outputs ----

    /// The next datagram any connection wants to send, taking connections in turn, each
    /// for up to [`TRANSMIT_BURST`] datagrams.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(A, Transmit)> {
        self.reschedule_touched();
        while let Some(&cid) = self.ready.front() {
            let sent = match self.connections.get_mut(&cid) {
                Some(entry) if entry.ready => {
                    #[cfg(test)]
                    {
                        self.transmit_polls += 1;
                    }
                    let transmit = entry.connection.poll_transmit(now, buf);
                    // Sending moves timers and may raise events; it stays ready only while it sends.
                    let remote = transmit.is_some().then(|| entry.remote.clone());
                    // After a send, ready only if the next poll might send too (that poll's
                    // pacing timer is set in its place where the pacer holds it).
                    entry.ready = transmit.is_some() && entry.connection.may_send_again(now);
                    Self::refresh(cid, entry, &mut self.timers, &mut self.with_events, &mut self.drained);
                    transmit.zip(remote)
                }
                _ => None,
            };
            match sent {
                Some((transmit, remote)) => {
                    self.burst += 1;
                    if self.burst >= TRANSMIT_BURST {
                        self.burst = 0;
                        self.ready.pop_front();
                        self.ready.push_back(cid);
                    }
                    return Some((remote, transmit));
                }
                None => {
                    self.burst = 0;
                    self.ready.pop_front();
                }
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

    fn connection_secrets(&mut self, cid: u32) -> ConnectionSecrets {
        let mut seed = [0u8; 32];
        self.rng.fill_bytes(&mut seed);
        ConnectionSecrets { seed, reset_token: self.secrets.reset_token(cid), static_key: self.static_key.clone() }
    }

    fn fresh_cid(&mut self) -> u32 {
        loop {
            let cid = self.rng.next_u32();
            if cid != 0 && !self.connections.contains_key(&cid) && !self.opening.contains(&cid) {
                return cid;
            }
        }
    }

    fn insert(&mut self, cid: u32, mut connection: Connection, remote: A) -> ConnectionHandle {
        connection.set_buffer_budget(self.budget.clone());
        self.widest_datagram = self.widest_datagram.max(connection.config().longest_datagram());
        self.connections.insert(
            cid,
            Entry {
                connection,
                remote,
                scheduled: None,
                touched: false,
                ready: false,
                has_events: false,
                drained_reported: false,
                peer_known: false,
                pass: 0,
                pass_datagrams: 0,
            },
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
    /// Every call into the endpoint begins here, and most find nothing to do: that check is
    /// inlined, the work is not (the call alone was a twentieth of a simulated transfer).
    #[inline]
    fn reschedule_touched(&mut self) {
        if !self.touched.is_empty() || self.timers_need_rebuild() {
            self.reschedule_touched_now();
        }
    }

    /// Stale heap entries pile up while deadlines move; rebuild before they outnumber the live ones.
    /// (Rebuilding costs one pass over the connections, after at least as many pushes: a small heap
    /// keeps each push and pop short even for an endpoint of one connection.)
    #[inline]
    fn timers_need_rebuild(&self) -> bool {
        self.timers.len() > 2 * self.connections.len() + 32
    }

    #[inline(never)]
    fn reschedule_touched_now(&mut self) {
        // Drained in place (nothing below touches a connection): the list keeps its allocation.
        for cid in self.touched.drain(..) {
            let Some(entry) = self.connections.get_mut(&cid) else { continue };
            entry.touched = false;
            Self::refresh(cid, entry, &mut self.timers, &mut self.with_events, &mut self.drained);
            // Queued to be polled only if a poll could do anything (`may_transmit`).
            if !entry.ready && entry.connection.may_transmit() {
                entry.ready = true;
                self.ready.push_back(cid);
            }
        }
        // Rebuilt in place, keeping its allocation.
        if self.timers_need_rebuild() {
            let mut entries = std::mem::take(&mut self.timers).into_vec();
            entries.clear();
            entries.extend(self.connections.iter().filter_map(|(&cid, e)| e.scheduled.map(|at| Reverse((at, cid)))));
            self.timers = BinaryHeap::from(entries);
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
            let old = entry.scheduled.map(|at| Reverse((at, cid)));
            entry.scheduled = deadline;
            // The old entry is most often the heap's top (an endpoint of one connection, or
            // the connection whose timer just fired): moved in place, it does not linger as a
            // stale entry to be pushed past and popped later. Elsewhere it goes stale.
            let old_on_top = old.is_some() && timers.peek() == old.as_ref();
            match deadline {
                Some(at) if old_on_top => {
                    if let Some(mut top) = timers.peek_mut() {
                        *top = Reverse((at, cid));
                    }
                }
                Some(at) => timers.push(Reverse((at, cid))),
                None if old_on_top => {
                    timers.pop();
                }
                None => {}
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
    use crate::congestion::{ControllerConfig, FixedConfig};

    type Net = (Endpoint<u8>, Endpoint<u8>);

    /// The short list and the hash table behind it answer as one map, across the move
    /// from one to the other and back to an empty list.
    #[test]
    fn cid_map_agrees_with_a_hash_map_across_its_sizes() {
        let mut map = CidMap::default();
        let mut reference = HashMap::new();
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        for step in 0..2_000u32 {
            let cid = rng.next_u32() % 40;
            if rng.next_u32() % 3 == 0 {
                assert_eq!(map.remove(&cid), reference.remove(&cid), "step {step}");
            } else {
                map.insert(cid, step);
                reference.insert(cid, step);
            }
            assert_eq!(map.len(), reference.len());
            assert_eq!(map.get(&cid), reference.get(&cid));
            if let Some(v) = map.get_mut(&cid) {
                *v += 1;
                *reference.get_mut(&cid).expect("the same keys") += 1;
            }
            let mut keys: Vec<u32> = map.keys().copied().collect();
            keys.sort_unstable();
            let mut expected: Vec<u32> = reference.keys().copied().collect();
            expected.sort_unstable();
            assert_eq!(keys, expected);
            assert!(map.ids.is_empty() || map.many.is_empty(), "one of the two holds them all");
        }
        assert!(!map.many.is_empty(), "40 ids never outgrew the short list: the test does not test the table");
        for cid in 0..40 {
            map.remove(&cid);
        }
        assert!(map.is_empty());
        map.insert(7, 1);
        assert_eq!((map.ids.len(), map.get(&7)), (1, Some(&1)), "emptied, it starts again as a short list");
    }

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

    fn pair_with(transport: TransportConfig, max_connections: usize) -> Net {
        let client = Endpoint::new(EndpointConfig::client(transport.clone()), 1);
        let mut server = Endpoint::new(EndpointConfig::server(transport), 2);
        server.config.max_connections = max_connections;
        (client, server)
    }

    fn pair(max_connections: usize) -> Net {
        pair_with(TransportConfig::default(), max_connections)
    }

    #[test]
    fn a_full_server_refuses_without_keeping_state() {
        // Version 1 tells the refused client with a reset.
        let mut net = pair_with(TransportConfig::default().insecure(), 2);
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
    fn a_receiver_is_asked_to_send_only_once_it_has_something_to_send() {
        let mut net = pair_with(TransportConfig::default().insecure(), 10);
        let t = Instant::from_millis(1);
        let handle = net.0.connect(t, 1);
        exchange(&mut net, t);
        while net.1.poll_event().is_some() {}
        let t = t + Duration::from_millis(1);
        net.0.connection_mut(handle).unwrap().write(&[7u8; 4000]).unwrap();
        let mut buf = vec![0u8; 2048];
        let datagrams: Vec<Vec<u8>> = std::iter::from_fn(|| net.0.poll_transmit(t, &mut buf).map(|(_, tx)| buf[..tx.size].to_vec())).collect();
        assert!(datagrams.len() >= 2, "the write makes several data packets");
        // One data packet: its ack waits for the next one (or the ack timer), and the
        // receiving connection, which has sent no data, is not polled at all.
        net.1.handle_datagram(t, 0, &datagrams[0], &mut []);
        let before = net.1.transmit_polls;
        assert!(net.1.poll_transmit(t, &mut buf).is_none());
        assert_eq!(net.1.transmit_polls - before, 0, "nothing was due, so nothing was asked");
        // The second makes the ack due: polled, and the ack leaves.
        net.1.handle_datagram(t, 0, &datagrams[1], &mut []);
        assert!(net.1.poll_transmit(t, &mut buf).is_some(), "the ack of two packets");
        assert!(net.1.transmit_polls > before);
        // A lone packet's ack leaves when the ack timer fires.
        if let Some(third) = datagrams.get(2) {
            while net.1.poll_transmit(t, &mut buf).is_some() {}
            net.1.handle_datagram(t, 0, third, &mut []);
            assert!(net.1.poll_transmit(t, &mut buf).is_none());
            let due = net.1.poll_timeout().expect("the ack timer");
            net.1.handle_timeout(due);
            assert!(net.1.poll_transmit(due, &mut buf).is_some(), "the held ack, at its deadline");
        }
    }

    /// A paced sender is not asked again right after a send the pacer holds the next one
    /// back from: its pacing timer is set instead, and the transfer goes on at its pace.
    #[test]
    fn a_paced_sender_is_asked_again_when_its_pacer_lets_the_next_packet_go() {
        let mut net = pair_with(TransportConfig::default().insecure(), 10);
        let mut t = Instant::from_millis(1);
        let handle = net.0.connect(t, 1);
        exchange(&mut net, t);
        let server = std::iter::from_fn(|| net.1.poll_event()).map(|(h, _)| h).next().expect("the server's connection");
        let total = 3_000_000usize;
        let mut written = 0;
        // Each way 5 ms; the server reads all it can at once.
        let one_way = Duration::from_millis(5);
        let mut to_server: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
        let mut to_client: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
        let (mut read, mut paced_holds) = (0usize, 0u32);
        let mut buf = vec![0u8; 2048];
        let mut sink = vec![0u8; 1 << 16];
        for _ in 0..200_000 {
            if written < total {
                written += net.0.connection_mut(handle).unwrap().write(&vec![7u8; (total - written).min(1 << 16)]).unwrap_or(0);
            }
            net.0.handle_timeout(t);
            net.1.handle_timeout(t);
            while to_server.front().is_some_and(|(at, _)| *at <= t) {
                let (_, d) = to_server.pop_front().unwrap();
                net.1.handle_datagram(t, 0, &d, &mut []);
            }
            while to_client.front().is_some_and(|(at, _)| *at <= t) {
                let (_, d) = to_client.pop_front().unwrap();
                net.0.handle_datagram(t, 1, &d, &mut []);
            }
            while let Ok(n) = net.1.connection_mut(server).unwrap().read(&mut sink) {
                if n == 0 {
                    break;
                }
                read += n;
            }
            let before = net.0.transmit_polls;
            let mut sent = 0;
            while let Some((_, tx)) = net.0.poll_transmit(t, &mut buf) {
                to_server.push_back((t + one_way, buf[..tx.size].to_vec()));
                sent += 1;
            }
            // Every poll sent: the last send left the pacer holding the next packet, and
            // the connection wakes when it lets it go.
            if sent > 0 && net.0.transmit_polls - before == sent {
                paced_holds += 1;
                assert!(net.0.poll_timeout().is_some_and(|at| at > t), "held by the pacer, with a timer to go on");
            }
            while let Some((_, tx)) = net.1.poll_transmit(t, &mut buf) {
                to_client.push_back((t + one_way, buf[..tx.size].to_vec()));
            }
            if read == total {
                break;
            }
            let next = [net.0.poll_timeout(), net.1.poll_timeout(), to_server.front().map(|p| p.0), to_client.front().map(|p| p.0)].into_iter().flatten().min();
            t = next.expect("something to wait for").max(t + Duration::from_micros(1));
        }
        assert_eq!(read, total, "the transfer completed");
        assert!(paced_holds > 100, "sends the pacer held back the next packet after: {paced_holds}");
    }

    /// A path that carries datagrams of up to `limit` bytes and silently drops longer ones
    /// (a tunnel, a narrow link, an IPv6 route at its least MTU); runs both endpoints for
    /// `ms` milliseconds from `from`, the server told of its route to the client as
    /// `server_route` says (if at all). Returns the longest datagram each way.
    fn narrow_path(net: &mut Net, limit: usize, server_route: Option<Route>, from: u64, ms: u64) -> (usize, usize) {
        let mut buf = vec![0u8; 65_536];
        let mut response = [0u8; 64];
        let mut longest = (0, 0);
        for t in from..from + ms {
            let now = Instant::from_millis(t);
            net.0.handle_timeout(now);
            net.1.handle_timeout(now);
            loop {
                let mut moved = false;
                while let Some((_, tx)) = net.0.poll_transmit(now, &mut buf) {
                    moved = true;
                    longest.0 = longest.0.max(tx.size);
                    if tx.size > limit {
                        continue;
                    }
                    match net.1.handle_datagram(now, 0, &buf[..tx.size], &mut response) {
                        Some(DatagramEvent::NewConnection(mut incoming)) => {
                            if let Some(route) = server_route {
                                incoming.fit_route(route);
                            }
                            let _ = net.1.accept(incoming);
                        }
                        Some(DatagramEvent::Response { transmit, .. }) => {
                            net.0.handle_datagram(now, 1, &response[..transmit.size], &mut []);
                        }
                        _ => {}
                    }
                }
                while let Some((_, tx)) = net.1.poll_transmit(now, &mut buf) {
                    moved = true;
                    longest.1 = longest.1.max(tx.size);
                    if tx.size <= limit {
                        net.0.handle_datagram(now, 1, &buf[..tx.size], &mut response);
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        longest
    }

    /// On a path narrower than an Ethernet packet, a connection told what the route carries
    /// (by either end: the handshake offers the other the smaller payload) sends nothing
    /// longer, data, repairs and acks alike, and its bytes cross both ways. Untold, every
    /// data packet is lost on that path and nothing arrives.
    #[test]
    fn a_connection_fitted_to_a_narrow_path_sends_nothing_longer() {
        const LIMIT: usize = 1_232; // IPv6's least MTU, 1,280, less the IP and UDP headers
        for (fitted_by, redundancy) in [("client", "default"), ("server", "default"), ("client", "fec:rs:8/12"), ("server", "fec:rs:8/12"), ("nobody", "default")] {
            let mut transport = TransportConfig::default();
            if redundancy != "default" {
                // Repairs are a few bytes longer than the data they cover: they must fit too.
                transport.set_redundancy(crate::redundancy::RedundancyConfig::Fec(crate::redundancy::FecCode::Block { k: 8, n: 12 }));
            }
            let mut net = pair_with(transport, 10);
            let mut pending = net.0.prepare_connect();
            if fitted_by == "client" {
                pending.fit_datagram(LIMIT);
            }
            let opened = pending.open(Instant::from_millis(1));
            let client = net.0.finish_connect(opened, 1);
            let (longest_up, longest_down) = narrow_path(&mut net, LIMIT, (fitted_by == "server").then_some(Route { datagram: LIMIT, same_host: false }), 1, 50);
            assert_eq!(net.0.connection(client).unwrap().state(), State::Established, "{fitted_by}: the handshake is short");
            let server = net.1.handles().next().unwrap();
            let up = vec![3u8; 60_000];
            let down = vec![4u8; 60_000];
            assert_eq!(net.0.connection_mut(client).unwrap().write(&up).unwrap(), up.len());
            assert_eq!(net.1.connection_mut(server).unwrap().write(&down).unwrap(), down.len());
            let (u, d) = narrow_path(&mut net, LIMIT, None, 51, 2_000);
            let (longest_up, longest_down) = (longest_up.max(u), longest_down.max(d));
            let read = |ep: &mut Endpoint<u8>, h| {
                let mut got = Vec::new();
                let mut buf = vec![0u8; 65_536];
                while let Ok(n) = ep.connection_mut(h).unwrap().read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                got
            };
            let (at_server, at_client) = (read(&mut net.1, server), read(&mut net.0, client));
            if fitted_by == "nobody" {
                assert!(longest_up > LIMIT && at_server.is_empty(), "untold, full-sized packets are sent and lost: the test's path is narrow");
                continue;
            }
            assert!(longest_up <= LIMIT && longest_down <= LIMIT, "{fitted_by}, {redundancy}: {longest_up} B up, {longest_down} B down");
            assert!(longest_up > LIMIT - 64, "{fitted_by}: packets still fill what the path carries ({longest_up} B)");
            assert!(at_server == up && at_client == down, "{fitted_by}, {redundancy}: {} and {} B crossed", at_server.len(), at_client.len());
        }
    }

    /// Where both ends know the peer is this host (a loopback route, 64 kB wide), packets
    /// fill [`crate::config::SAME_HOST_DATAGRAM`]-byte datagrams and the bytes cross. Where
    /// one end does not (its route leaves the host), or the payload was chosen by the user,
    /// the handshake's smaller payload rules and packets stay as they were.
    #[test]
    fn packets_widen_only_where_both_ends_see_the_same_host() {
        use crate::config::SAME_HOST_DATAGRAM;
        const LOOPBACK: usize = 65_536 - 28;
        let local = Route { datagram: LOOPBACK, same_host: true };
        let remote = Route { datagram: crate::config::ETHERNET_DATAGRAM, same_host: false };
        let chosen = TransportConfig { max_payload: 1_000, ..TransportConfig::default() };
        let mut fec = TransportConfig::default();
        fec.set_redundancy(crate::redundancy::RedundancyConfig::Fec(crate::redundancy::FecCode::Block { k: 8, n: 12 }));
        for (client_route, server_route, transport, widened) in [
            (local, local, TransportConfig::default(), true),
            // Repairs, 2 bytes longer than data, fill the datagram.
            (local, local, fec, true),
            (local, local, TransportConfig::default().insecure(), true),
            (local, remote, TransportConfig::default(), false),
            (remote, local, TransportConfig::default(), false),
            (local, local, chosen, false),
        ] {
            let user_payload = transport.max_payload;
            let mut net = pair_with(transport, 10);
            let mut pending = net.0.prepare_connect();
            pending.fit_route(client_route);
            let opened = pending.open(Instant::from_millis(1));
            let client = net.0.finish_connect(opened, 1);
            narrow_path(&mut net, LOOPBACK, Some(server_route), 1, 50);
            assert_eq!(net.0.connection(client).unwrap().state(), State::Established);
            let server = net.1.handles().next().unwrap();
            let up: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
            assert_eq!(net.0.connection_mut(client).unwrap().write(&up).unwrap(), up.len());
            let (longest_up, _) = narrow_path(&mut net, LOOPBACK, None, 51, 2_000);
            // What a driver sizes each datagram's room by covers the longest sent.
            assert!(longest_up <= net.0.widest_datagram(), "{longest_up} B sent, room for {}", net.0.widest_datagram());
            let mut got = Vec::new();
            let mut buf = vec![0u8; 65_536];
            while let Ok(n) = net.1.connection_mut(server).unwrap().read(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert!(got == up, "{client_route:?} / {server_route:?}: {} of {} B crossed", got.len(), up.len());
            if widened {
                assert!(longest_up <= SAME_HOST_DATAGRAM && longest_up > SAME_HOST_DATAGRAM - 64, "{longest_up} B");
            } else {
                assert!(longest_up <= crate::config::ETHERNET_DATAGRAM, "{client_route:?} / {server_route:?}: {longest_up} B");
                if user_payload == 1_000 {
                    assert!(longest_up < 1_100, "a payload the user chose stays: {longest_up} B");
                }
            }
        }
    }

    /// Plaintext endpoints whose connections send by a fixed window and without repairs,
    /// so that what leaves is the data written, in the order the endpoint picks.
    fn bulk_pair() -> Net {
        let mut transport = TransportConfig::default().insecure();
        transport.controller = crate::congestion::ControllerConfig::Fixed(crate::congestion::FixedConfig::default());
        transport.set_redundancy(crate::redundancy::RedundancyConfig::None);
        pair_with(transport, 10)
    }

    /// Connections with much to send take turns a burst at a time (so a receiver reading
    /// them finds runs of one connection to ack together), and one with a single packet
    /// waits for at most one burst of each connection ahead of it.
    #[test]
    fn ready_connections_send_in_turn_a_burst_at_a_time() {
        let mut net = bulk_pair();
        let t = Instant::from_millis(1);
        let bulk = [established(&mut net, t), established(&mut net, t)];
        let single = established(&mut net, t);
        let payload = vec![7u8; 200 * 1500];
        for h in bulk {
            assert!(net.0.connection_mut(h).unwrap().write(&payload).unwrap() > 100 * 1500);
        }
        net.0.connection_mut(single).unwrap().write(b"one packet").unwrap();
        let mut buf = vec![0u8; 2048];
        // Each datagram's connection, by the connection id it is sent to.
        let mut senders: Vec<[u8; 4]> = Vec::new();
        while senders.len() < 5 * TRANSMIT_BURST as usize {
            let (_, transmit) = net.0.poll_transmit(t, &mut buf).expect("both bulk connections have more to send");
            assert!(transmit.size > 6);
            senders.push(buf[2..6].try_into().unwrap());
        }
        let mut runs: Vec<([u8; 4], usize)> = Vec::new();
        for cid in senders {
            match runs.last_mut() {
                Some((last, n)) if *last == cid => *n += 1,
                _ => runs.push((cid, 1)),
            }
        }
        let single_runs: Vec<usize> = runs.iter().enumerate().filter(|(_, (_, n))| *n == 1).map(|(i, _)| i).collect();
        assert_eq!(single_runs, vec![2], "the single packet goes after one burst of each bulk connection: {runs:?}");
        runs.remove(2);
        let full: Vec<usize> = runs[..runs.len() - 1].iter().map(|&(_, n)| n).collect();
        assert!(full.iter().all(|&n| n == TRANSMIT_BURST as usize) && full.len() >= 3, "runs of a burst: {runs:?}");
        assert!(runs.windows(2).all(|w| w[0].0 != w[1].0));
        assert_eq!(runs[0].0, runs[2].0, "the two bulk connections alternate: {runs:?}");
    }

    /// A receive pass counts each connection's datagrams apart: what one connection's next
    /// ack covers, where the pass's total counts every connection's.
    #[test]
    fn a_receive_pass_counts_the_longest_run_of_one_connection() {
        let mut net = bulk_pair();
        let t = Instant::from_millis(1);
        let bulk = [established(&mut net, t), established(&mut net, t)];
        for h in bulk {
            net.0.connection_mut(h).unwrap().write(&vec![7u8; 100 * 1500]).unwrap();
        }
        // Two bursts: one connection's, then the other's.
        let burst = TRANSMIT_BURST as usize;
        let datagrams: Vec<Vec<u8>> = (0..2 * burst).map(|_| next_datagram(&mut net.0, t)).collect();
        assert_ne!(datagrams[0][2..6], datagrams[burst][2..6], "the bursts are two connections'");
        let mut response = [0u8; 64];
        net.1.begin_receive_pass();
        for d in &datagrams[..burst + 5] {
            net.1.handle_datagram(t, 0, d, &mut response);
        }
        assert_eq!(net.1.longest_receive_run(), burst as u32, "a whole burst of one, five of the other");
        net.1.begin_receive_pass();
        assert_eq!(net.1.longest_receive_run(), 0);
        for d in &datagrams[burst + 5..] {
            net.1.handle_datagram(t, 0, d, &mut response);
        }
        net.1.handle_datagram(t, 0, &[0xff; 40], &mut response);
        assert_eq!(net.1.longest_receive_run(), burst as u32 - 5, "the rest of the second burst; garbage reaches no connection");
        assert_eq!(net.1.stats().malformed, 1);
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

    fn established(net: &mut Net, t: Instant) -> ConnectionHandle {
        let h = net.0.connect(t, 1);
        exchange(net, t);
        assert_eq!(net.0.connection(h).unwrap().state(), State::Established);
        h
    }

    /// The client's next datagram, as it would leave.
    fn next_datagram(ep: &mut Endpoint<u8>, now: Instant) -> Vec<u8> {
        let mut buf = vec![0u8; 2048];
        let (_, t) = ep.poll_transmit(now, &mut buf).expect("something to send");
        buf[..t.size].to_vec()
    }

    /// A NAT gave the client a new port: its next packet, the newest it sent, comes from a
    /// new address, and the server follows it there. A packet that does not open, a replay
    /// and a late packet from the old address move nothing (a late one's data is still
    /// taken); a plaintext connection, whose packets prove nothing, keeps its address.
    #[test]
    fn a_connection_follows_its_peer_to_a_new_address_on_its_newest_authenticated_packet() {
        let t = Instant::from_millis(1);
        let mut net = pair(10);
        let client = established(&mut net, t);
        let server = net.1.handles().next().unwrap();
        assert_eq!(net.1.remote(server), Some(&0));
        net.0.connection_mut(client).unwrap().write(b"first").unwrap();
        let first = next_datagram(&mut net.0, t);
        net.0.connection_mut(client).unwrap().write(b"second").unwrap();
        let second = next_datagram(&mut net.0, t);
        // Sealed but not by the client: a byte of the tag changed.
        let mut forged = second.clone();
        *forged.last_mut().unwrap() ^= 1;
        net.1.handle_datagram(t, 9, &forged, &mut []);
        assert_eq!((net.1.remote(server), net.1.stats().peer_address_changes, net.1.stats().wrong_address), (Some(&0), 0, 1));
        net.1.handle_datagram(t, 7, &second, &mut []);
        assert_eq!((net.1.remote(server), net.1.stats().peer_address_changes), (Some(&7), 1));
        // The older packet arrives late from the old address: taken, but no move back.
        net.1.handle_datagram(t, 0, &first, &mut []);
        assert_eq!((net.1.remote(server), net.1.stats().peer_address_changes, net.1.stats().wrong_address), (Some(&7), 1, 2));
        // A copy of the newest from elsewhere is a replay.
        net.1.handle_datagram(t, 5, &second, &mut []);
        assert_eq!((net.1.remote(server), net.1.stats().peer_address_changes, net.1.stats().wrong_address), (Some(&7), 1, 3));
        let mut buf = vec![0u8; 64];
        let n = net.1.connection_mut(server).unwrap().read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"firstsecond");
        // What the server sends now goes to the new address.
        net.1.handle_timeout(t + Duration::from_millis(30));
        let mut out = vec![0u8; 2048];
        let (to, _) = net.1.poll_transmit(t + Duration::from_millis(30), &mut out).expect("the server acks");
        assert_eq!(to, 7);

        let mut plain = pair_with(TransportConfig::default().insecure(), 10);
        let client = established(&mut plain, t);
        let server = plain.1.handles().next().unwrap();
        plain.0.connection_mut(client).unwrap().write(b"anyone").unwrap();
        let datagram = next_datagram(&mut plain.0, t);
        plain.1.handle_datagram(t, 7, &datagram, &mut []);
        assert_eq!((plain.1.remote(server), plain.1.stats().peer_address_changes, plain.1.stats().wrong_address), (Some(&0), 0, 1));
    }

    /// A server bound to a wildcard address answers from the address its route prefers:
    /// the client sent to address 1 and hears from address 2. It takes the Retry and the
    /// Accept from there and moves to 2 with the Accept, and the transfer goes on; a
    /// plaintext client, whose Accept proves nothing, takes nothing from 2.
    #[test]
    fn a_client_follows_a_handshake_answered_from_another_of_the_servers_addresses() {
        let t = Instant::from_millis(1);
        for protected in [true, false] {
            let transport = if protected { TransportConfig::default() } else { TransportConfig::default().insecure() };
            let mut net = pair_with(transport, 10);
            let client = net.0.connect(t, 1);
            let (mut buf, mut response) = (vec![0u8; 2048], [0u8; 64]);
            for _ in 0..4 {
                while let Some((to, tx)) = net.0.poll_transmit(t, &mut buf) {
                    let handshaking = net.0.connection(client).unwrap().state() == State::Handshake;
                    assert!(!handshaking || to == 1, "the client sends to the address it was given until it moves");
                    match net.1.handle_datagram(t, 0, &buf[..tx.size], &mut response) {
                        Some(DatagramEvent::NewConnection(incoming)) => {
                            let _ = net.1.accept(incoming);
                        }
                        Some(DatagramEvent::Response { transmit, .. }) => {
                            net.0.handle_datagram(t, 2, &response[..transmit.size], &mut []);
                        }
                        _ => {}
                    }
                }
                while let Some((_, tx)) = net.1.poll_transmit(t, &mut buf) {
                    net.0.handle_datagram(t, 2, &buf[..tx.size], &mut response);
                }
            }
            let state = net.0.connection(client).unwrap().state();
            if !protected {
                assert_eq!((state, net.0.remote(client), net.0.stats().peer_address_changes), (State::Handshake, Some(&1), 0));
                continue;
            }
            assert_eq!((state, net.0.remote(client), net.0.stats().peer_address_changes), (State::Established, Some(&2), 1));
            assert!(net.0.stats().retries_sent == 0 && net.1.stats().retries_sent >= 1, "the Retry came from address 2 too");
            net.0.connection_mut(client).unwrap().write(b"through the other address").unwrap();
            let (to, tx) = net.0.poll_transmit(t, &mut buf).unwrap();
            assert_eq!(to, 2);
            net.1.handle_datagram(t, 0, &buf[..tx.size], &mut response);
            let server = net.1.handles().next().unwrap();
            let n = net.1.connection_mut(server).unwrap().read(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"through the other address");
        }
    }

    /// A connect in three steps (the Initial written away from the endpoint) makes the
    /// connection a connect in one makes, and a connection opened meanwhile gets another id.
    #[test]
    fn a_connect_in_three_steps_is_the_one_connect_makes() {
        let t = Instant::from_millis(1);
        let (mut whole, _) = pair(10);
        let (mut stepped, _) = pair(10);
        let one = whole.connect(t, 1);
        let pending = stepped.prepare_connect();
        let reserved = pending.cid;
        let meanwhile = stepped.connect(t, 2);
        assert_ne!(meanwhile.0, reserved);
        let opened = pending.open(t);
        let three = stepped.finish_connect(opened, 1);
        assert_eq!(three.0, one.0);
        assert!(stepped.opening.is_empty(), "the id is an ordinary connection's now");
        let initial = next_datagram(&mut whole, t);
        // The stepped endpoint takes its connections in turn: find the Initial to 1.
        let mut buf = vec![0u8; 2048];
        let mut to_one = None;
        while let Some((to, transmit)) = stepped.poll_transmit(t, &mut buf) {
            if to == 1 {
                to_one = Some(buf[..transmit.size].to_vec());
            }
        }
        assert_eq!(to_one.expect("an Initial to 1"), initial);
    }

    #[test]
    fn a_protected_handshake_validates_the_address_before_keeping_anything() {
        let mut net = pair(10);
        let t = Instant::from_millis(1);
        let h = net.0.connect(t, 1);
        let initial = next_datagram(&mut net.0, t);
        assert!(initial.len() >= wire::MIN_INITIAL_LEN);
        let mut response = vec![0u8; 2048];
        // Without a token: a Retry smaller than the Initial, and no state.
        let Some(DatagramEvent::Response { transmit, .. }) = net.1.handle_datagram(t, 0, &initial, &mut response) else { panic!("a retry") };
        assert!(transmit.size < initial.len());
        assert_eq!(net.1.len(), 0);
        net.0.handle_datagram(t, 1, &response[..transmit.size], &mut []);
        exchange(&mut net, t);
        assert_eq!(net.1.len(), 1);
        assert_eq!(net.1.stats().retries_sent, 1);
        let client = net.0.connection(h).unwrap();
        assert_eq!(client.state(), State::Established);
        assert!(client.is_protected());
        assert_eq!(client.peer_static_key(), net.1.public_key(), "the client learned the server's key (NX)");
        // Data crosses sealed.
        net.0.connection_mut(h).unwrap().write(b"sealed hello").unwrap();
        let sealed = next_datagram(&mut net.0, t);
        assert!(!sealed.windows(12).any(|w| w == b"sealed hello"), "the payload is not on the wire in clear");
        net.1.handle_datagram(t, 0, &sealed, &mut response);
        let server = net.1.handles().next().unwrap();
        let mut got = [0u8; 64];
        let n = net.1.connection_mut(server).unwrap().read(&mut got).unwrap();
        assert_eq!(&got[..n], b"sealed hello");
    }

    /// After a Retry's round trip, a client whose Initial (with its token) goes unanswered
    /// tries again a quarter of a round trip past it, not after the RTO of a single sample
    /// (three round trips): on a lossy long path most of a short transfer's time went to
    /// that wait. Before any sample it waits the RTO as before.
    #[test]
    fn after_a_retry_an_unanswered_initial_is_repeated_a_quarter_past_the_round_trip() {
        let mut net = pair(10);
        let mut buf = vec![0u8; 2048];
        let mut response = vec![0u8; 2048];
        let start = Instant::from_millis(1);
        let rtt = Duration::from_millis(600);
        net.0.connect(start, 1);
        let initial = next_datagram(&mut net.0, start);
        // The first attempt waits the RTO of the initial RTT: 100 ms + 4 x 50 ms + 5 ms.
        assert_eq!(net.0.poll_timeout(), Some(start + Duration::from_millis(305)));
        // Its Retry comes back one round trip later (before that timeout fires, the server
        // answers the copy it received at once).
        let Some(DatagramEvent::Response { transmit, .. }) = net.1.handle_datagram(start + rtt / 2, 0, &initial, &mut response) else { panic!("a retry") };
        let retried_at = start + Duration::from_millis(300);
        net.0.handle_timeout(retried_at);
        while net.0.poll_transmit(retried_at, &mut buf).is_some() {}
        let back = start + rtt;
        net.0.handle_datagram(back, 1, &response[..transmit.size], &mut []);
        // The Initial with the token leaves at once, and is lost.
        let with_token = next_datagram(&mut net.0, back);
        assert!(with_token.len() >= wire::MIN_INITIAL_LEN);
        while net.0.poll_transmit(back, &mut buf).is_some() {}
        let next = net.0.poll_timeout().expect("the handshake's timer");
        assert_eq!(next, back + rtt + rtt / 4, "a quarter past the 600 ms round trip, not 3 x 600 ms");
        net.0.handle_timeout(next);
        let again = next_datagram(&mut net.0, next);
        // The same Initial and token, stamped anew (the timestamp is at offset 11).
        assert_eq!((again.len(), &again[..11], &again[15..]), (with_token.len(), &with_token[..11], &with_token[15..]));
    }

    #[test]
    fn a_client_that_knows_the_server_key_refuses_an_impostor() {
        let server_key = StaticKey::from_seed([1; 32]);
        let mut transport = TransportConfig::default();
        let crate::ProtectionConfig::Noise(noise) = &mut transport.protection else { unreachable!() };
        noise.peer = Some(StaticKey::from_seed([2; 32]).public());
        noise.local = Some(server_key);
        let mut net = pair_with(transport, 10);
        let t = Instant::from_millis(1);
        let h = net.0.connect(t, 1);
        exchange(&mut net, t);
        // Pattern NK with the wrong key: the server cannot read the Initial, nothing is created.
        assert_eq!(net.0.connection(h).unwrap().state(), State::Handshake);
        assert_eq!(net.1.len(), 0);
        assert!(net.1.stats().forged_handshakes >= 1);
    }

    #[test]
    fn spoofed_initials_get_retries_no_larger_than_themselves_and_leave_nothing() {
        let mut net = pair(10);
        let t = Instant::from_millis(1);
        net.0.connect(t, 1);
        let initial = next_datagram(&mut net.0, t);
        let mut response = vec![0u8; 2048];
        let mut received = 0;
        let mut sent = 0;
        for from in 0..=255u8 {
            received += initial.len();
            if let Some(DatagramEvent::Response { transmit, .. }) = net.1.handle_datagram(t, from, &initial, &mut response) {
                sent += transmit.size;
            }
        }
        assert_eq!(net.1.len(), 0);
        assert!(sent <= received, "sent {sent} for {received}");
        assert_eq!(net.1.stats().stateless_bytes_sent as usize, sent);
        // A token given to one address does not work from another.
        let Some(DatagramEvent::Response { transmit, .. }) = net.1.handle_datagram(t, 7, &initial, &mut response) else { panic!() };
        net.0.handle_datagram(t, 1, &response[..transmit.size], &mut []);
        let with_token = next_datagram(&mut net.0, t);
        assert!(matches!(net.1.handle_datagram(t, 8, &with_token, &mut response), Some(DatagramEvent::Response { .. })));
        assert_eq!(net.1.stats().invalid_tokens, 1);
        assert!(matches!(net.1.handle_datagram(t, 7, &with_token, &mut response), Some(DatagramEvent::NewConnection(_))));
        // Nor once it is too old.
        let late = t + crate::time::Duration::from_secs(11);
        assert!(matches!(net.1.handle_datagram(late, 7, &with_token, &mut response), Some(DatagramEvent::Response { .. })));
    }

    #[test]
    fn forged_and_replayed_packets_are_counted_and_change_nothing() {
        let mut net = pair(10);
        let t = Instant::from_millis(1);
        let h = established(&mut net, t);
        let server = net.1.handles().next().unwrap();
        net.0.connection_mut(h).unwrap().write(b"one").unwrap();
        let genuine = next_datagram(&mut net.0, t);
        let mut response = vec![0u8; 2048];
        net.1.handle_datagram(t, 0, &genuine, &mut response);
        let before = net.1.connection(server).unwrap().stats().clone();
        // A replay; a forgery of the next packet (a flipped bit) ahead of the real one; a forged stateless reset.
        net.1.handle_datagram(t, 0, &genuine, &mut response);
        net.0.connection_mut(h).unwrap().write(b"two").unwrap();
        let second = next_datagram(&mut net.0, t);
        let mut flipped = second.clone();
        *flipped.last_mut().unwrap() ^= 1;
        net.1.handle_datagram(t, 0, &flipped, &mut response);
        let peer = net.1.connection(server).unwrap().peer_cid();
        let n = StatelessReset { cid: peer, token: [0x55; 16] }.emit(&mut response).unwrap();
        let forged_reset = response[..n].to_vec();
        net.1.handle_datagram(t, 0, &forged_reset, &mut response);
        let stats = net.1.connection(server).unwrap().stats();
        assert_eq!(stats.replayed_packets, before.replayed_packets + 1);
        assert_eq!(stats.unauthenticated_packets, before.unauthenticated_packets + 2);
        assert_eq!(stats.data_packets_received, before.data_packets_received);
        assert_eq!(net.1.connection(server).unwrap().state(), State::Established);
        // The forgery did not use up the real packet's number.
        net.1.handle_datagram(t, 0, &second, &mut response);
        let mut got = [0u8; 16];
        assert_eq!(net.1.connection_mut(server).unwrap().read(&mut got).unwrap(), 6);
        assert_eq!(&got[..6], b"onetwo");
        // A forged Accept to the established client, and a Retry: dropped, counted.
        let client_stats = net.0.connection(h).unwrap().stats().unauthenticated_packets;
        let n = SecureHandshake::Retry { dst_cid: h.0, echo_timestamp: 1, token: &[1; 24] }.emit(&mut response).unwrap();
        let retry = response[..n].to_vec();
        net.0.handle_datagram(t, 1, &retry, &mut []);
        let n = SecureHandshake::Accept { dst_cid: h.0, src_cid: peer, echo_timestamp: 1, noise: &[7; 90] }.emit(&mut response).unwrap();
        let accept = response[..n].to_vec();
        net.0.handle_datagram(t, 1, &accept, &mut []);
        assert_eq!(net.0.connection(h).unwrap().stats().unauthenticated_packets, client_stats + 2);
        assert_eq!(net.0.connection(h).unwrap().state(), State::Established);
    }

    #[test]
    fn a_server_that_lost_a_connection_resets_it_statelessly_even_after_a_restart() {
        let mut transport = TransportConfig::default();
        let crate::ProtectionConfig::Noise(noise) = &mut transport.protection else { unreachable!() };
        noise.local = Some(StaticKey::from_seed([3; 32]));
        for restart in [false, true] {
            let mut net = pair_with(transport.clone(), 10);
            let t = Instant::from_millis(1);
            let h = established(&mut net, t);
            if restart {
                net.1 = Endpoint::new(EndpointConfig::server(transport.clone()), 99);
            } else {
                let server = net.1.handles().next().unwrap();
                net.1.remove(server);
            }
            net.0.connection_mut(h).unwrap().write(b"anyone there?").unwrap();
            exchange(&mut net, t);
            assert_eq!(net.1.stats().stateless_resets_sent, 1);
            assert_eq!(net.0.connection(h).unwrap().error(), Some(&crate::ConnectionError::Reset(ResetReason::UnknownConnection)));
        }
    }

    /// Runs both endpoints' timers and exchanges at each millisecond from `from` to `to`.
    fn run_between(net: &mut Net, from: u64, to: u64) {
        for ms in from..=to {
            let now = Instant::from_millis(ms);
            net.0.handle_timeout(now);
            net.1.handle_timeout(now);
            exchange(net, now);
        }
    }

    /// Data packets the client sends before anything it sends reaches the server: what its
    /// windows (the controller's and the peer's) allow, with far more written than that.
    /// They are delivered afterwards (none is lost), and the answers exchanged.
    fn flight_allowed(net: &mut Net, client: ConnectionHandle, now: Instant) -> u64 {
        let payload = usize::from(net.0.connection(client).unwrap().config().max_payload);
        let _ = net.0.connection_mut(client).unwrap().write(&vec![5u8; 2_000 * payload]);
        let mut buf = vec![0u8; 2048];
        let mut held = Vec::new();
        while let Some((_, t)) = net.0.poll_transmit(now, &mut buf) {
            held.push(buf[..t.size].to_vec());
        }
        for datagram in &held {
            net.1.handle_datagram(now, 0, datagram, &mut []);
        }
        exchange(net, now);
        held.len() as u64
    }

    /// Reads everything the server's connections hold, so their windows stay the buffer's.
    fn drain_server(net: &mut Net) {
        let mut got = vec![0u8; 1 << 20];
        for h in net.1.handles().collect::<Vec<_>>() {
            while net.1.reading(h, |c| c.read(&mut got).unwrap_or(0)).unwrap_or(0) > 0 {}
        }
    }

    /// One step a millisecond over `ms`: the client writes `packets` packets' worth of bulk
    /// data, both sides' timers run, everything crosses, and the server reads it all.
    fn bulk_steps(net: &mut Net, client: ConnectionHandle, ms: std::ops::Range<u64>, packets: usize) {
        let payload = net.0.connection(client).unwrap().payload_size();
        for ms in ms {
            let now = Instant::from_millis(ms);
            let _ = net.0.connection_mut(client).unwrap().write(&vec![5u8; packets * payload]);
            net.0.handle_timeout(now);
            net.1.handle_timeout(now);
            exchange(net, now);
            drain_server(net);
        }
    }

    /// The server's socket overflowed while a connection was receiving: its window is held
    /// to the connection's share of what the socket holds, the sender keeps to it, and the
    /// window grows back by a quarter per growth step while the sender fills it. A
    /// connection that was not receiving is left alone.
    #[test]
    fn a_socket_overflow_holds_the_receiving_connections_windows_to_their_share() {
        let mut transport = TransportConfig::default().insecure();
        transport.controller = ControllerConfig::Fixed(FixedConfig::default().window_packets(1_000));
        let mut net = pair_with(transport, 10);
        let client = established(&mut net, Instant::from_millis(1));
        let idle = net.0.connect(Instant::from_millis(1), 1);
        exchange(&mut net, Instant::from_millis(1));
        let payload = usize::from(net.0.connection(client).unwrap().config().max_payload);
        // Warm up: bulk data, everything read as it comes, so the window is the buffer's.
        bulk_steps(&mut net, client, 2..130, 200);
        let before = flight_allowed(&mut net, client, Instant::from_millis(130));
        assert!(before >= 1_000, "the fixed window, not the peer's, bounds the flight at first ({before})");
        exchange(&mut net, Instant::from_millis(130));
        drain_server(&mut net);

        // The socket holds 120 packets; one connection received lately (the other not since its
        // handshake, over 100 ms before).
        let now = Instant::from_millis(131);
        net.1.note_socket_overflow(now, 120 * 2 * payload);
        assert_eq!(net.1.stats().socket_overflows, 1);
        let server_side = |net: &Net, client_cid: u32| net.1.handles().find(|&h| net.1.connection(h).unwrap().peer_cid() == client_cid).unwrap();
        let receiving = server_side(&net, net.0.connection(client).unwrap().local_cid());
        let quiet = server_side(&net, net.0.connection(idle).unwrap().local_cid());
        assert_eq!(net.1.connection(receiving).unwrap().stats().socket_overflow_cuts, 1);
        assert_eq!(net.1.connection(quiet).unwrap().stats().socket_overflow_cuts, 0, "a connection that was not receiving keeps its window");
        exchange(&mut net, now);
        drain_server(&mut net);
        let held = flight_allowed(&mut net, client, now);
        assert!((100..=120).contains(&held), "the sender keeps to the held window ({held} packets)");
        // A second overflow within the same round trip does not cut again.
        net.1.note_socket_overflow(now, 120 * 2 * payload);
        assert_eq!(net.1.connection(receiving).unwrap().stats().socket_overflow_cuts, 1);

        // The sender fills the window; 10 ms on, it is a quarter wider.
        exchange(&mut net, now);
        drain_server(&mut net);
        bulk_steps(&mut net, client, 142..143, 300);
        let grown = flight_allowed(&mut net, client, Instant::from_millis(142));
        assert!(grown > held && grown <= 160, "grown by a quarter ({held} -> {grown})");
        // Step by step it grows while the sender fills it, until the sender's own window binds.
        bulk_steps(&mut net, client, 143..500, 2_000);
        let after = flight_allowed(&mut net, client, Instant::from_millis(500));
        assert!(after >= 1_000, "the held window grew past the sender's own ({after})");
    }

    /// A socket nearly full holds the receiving connections' windows as an overflow does,
    /// counted apart; and a connection's share is counted in its own packets, not in the
    /// endpoint's configured payload (connections to this host have wider ones; here the
    /// client asked for narrower ones, 500 bytes against the server's 1,436).
    #[test]
    fn a_filling_socket_holds_windows_to_shares_in_each_connections_own_packets() {
        let mut client_transport = TransportConfig::default().insecure();
        client_transport.controller = ControllerConfig::Fixed(FixedConfig::default().window_packets(1_000));
        client_transport.max_payload = 500;
        let server_transport = TransportConfig::default().insecure();
        let server_payload = usize::from(server_transport.max_payload);
        let mut net: Net = (Endpoint::new(EndpointConfig::client(client_transport), 1), Endpoint::new(EndpointConfig::server(server_transport), 2));
        let client = established(&mut net, Instant::from_millis(1));
        let payload = net.0.connection(client).unwrap().payload_size();
        assert_eq!(payload, 500, "the smaller offer rules");
        bulk_steps(&mut net, client, 2..30, 200);
        let before = flight_allowed(&mut net, client, Instant::from_millis(30));
        assert!(before >= 1_000, "the fixed window bounds the flight at first ({before})");
        exchange(&mut net, Instant::from_millis(30));
        drain_server(&mut net);

        // A socket that holds 120 of this connection's packets (42 of the endpoint's own).
        let now = Instant::from_millis(31);
        net.1.note_socket_filling(now, 120 * 2 * payload);
        assert_eq!((net.1.stats().socket_fill_holds, net.1.stats().socket_overflows), (1, 0));
        assert!(120 * payload / server_payload < 100, "the endpoint's payload would count fewer packets");
        exchange(&mut net, now);
        drain_server(&mut net);
        let held = flight_allowed(&mut net, client, now);
        assert!((100..=120).contains(&held), "held to its share in its own packets ({held})");
    }

    /// A socket that overflowed while most of what came was garbage (a flood) holds no
    /// window: the connections keep theirs.
    #[test]
    fn a_flood_that_overflows_the_socket_holds_no_window() {
        let mut net = pair_with(TransportConfig::default().insecure(), 10);
        let client = established(&mut net, Instant::from_millis(1));
        let payload = usize::from(net.0.connection(client).unwrap().config().max_payload);
        let now = Instant::from_millis(2);
        let _ = net.0.connection_mut(client).unwrap().write(&vec![5u8; 20 * payload]);
        exchange(&mut net, now);
        // The flood: a hundred datagrams that parse as nothing, against the twenty or so
        // the connection brought.
        for i in 0..100u8 {
            net.1.handle_datagram(now, 7, &[0xee, i, 3, 4, 5, 6, 7, 8, 9], &mut []);
        }
        net.1.note_socket_overflow(now, 1 << 20);
        let stats = net.1.stats();
        assert_eq!((stats.socket_overflows, stats.socket_overflows_in_floods), (0, 1));
        let server = net.1.handles().next().unwrap();
        assert_eq!(net.1.connection(server).unwrap().stats().socket_overflow_cuts, 0);
        // Once the connection's own datagrams are most of what came, an overflow holds it.
        let later = Instant::from_millis(3);
        let _ = net.0.connection_mut(client).unwrap().write(&vec![5u8; 20 * payload]);
        exchange(&mut net, later);
        net.1.note_socket_overflow(later, 1 << 20);
        assert_eq!(net.1.stats().socket_overflows, 1);
        assert_eq!(net.1.connection(server).unwrap().stats().socket_overflow_cuts, 1);
    }

    #[test]
    fn the_shared_spares_shrink_to_what_is_held_when_a_connection_falls_quiet() {
        let mut net = pair_with(TransportConfig::default().insecure(), 10);
        let client = established(&mut net, Instant::from_millis(1));
        let payload = usize::from(TransportConfig::default().max_payload);
        let burst = vec![7u8; 300 * payload];
        let mut written = 0;
        for ms in 2..2_000 {
            if written < burst.len() {
                written += net.0.connection_mut(client).unwrap().write(&burst[written..]).unwrap();
            }
            run_between(&mut net, ms, ms);
            if net.1.handles().next().is_some_and(|h| net.1.connection(h).unwrap().readable_len() == burst.len()) {
                break;
            }
        }
        // Read only once all of it is in (the endpoint held the whole burst at once), in
        // reads of a few packets, as an application's buffer takes them.
        let server = net.1.handles().next().unwrap();
        let (mut got, mut read) = (vec![0u8; 4 * payload], 0);
        while read < burst.len() {
            let n = net.1.reading(server, |c| c.read(&mut got).unwrap()).unwrap();
            assert!(n > 0 && got[..n].iter().all(|&b| b == 7));
            read += n;
        }
        assert!(net.1.spare_buffers.len() >= 200, "the emptied buffers went to the shared spares ({})", net.1.spare_buffers.len());
        // The server answers with enough to keep on its side a while (so it has something to
        // give back when it falls quiet), then both sides go quiet.
        net.1.connection_mut(server).unwrap().write(&vec![8u8; 200_000]).unwrap();
        run_between(&mut net, 2_000, 2_300);
        assert_eq!(net.1.given_back(), 0, "nothing given back while in use");
        run_between(&mut net, 2_301, 3_500);
        assert!(net.1.spare_buffers.len() <= SPARE_BUFFERS_FLOOR, "{} spares kept after a quiet second", net.1.spare_buffers.len());
        assert!(net.1.given_back() >= 200 * payload, "the spares let go are counted as given back ({} bytes)", net.1.given_back());
    }

    #[test]
    fn a_buffer_one_connections_reader_empties_is_the_next_another_fills() {
        let mut net = pair(10);
        let t = Instant::from_millis(1);
        let (first, second) = (net.0.connect(t, 1), net.0.connect(t, 1));
        exchange(&mut net, t);
        let payload = usize::from(TransportConfig::default().max_payload);
        net.0.connection_mut(first).unwrap().write(&vec![1; 3 * payload]).unwrap();
        exchange(&mut net, t);
        let servers: Vec<_> = net.1.handles().collect();
        let readable = |net: &Net, h| net.1.connection(h).unwrap().readable_len();
        let (&one, &other) = (servers.iter().find(|&&h| readable(&net, h) > 0).unwrap(), servers.iter().find(|&&h| readable(&net, h) == 0).unwrap());
        let mut got = vec![0u8; 4 * payload];
        assert_eq!(net.1.reading(one, |c| c.read(&mut got).unwrap()), Some(3 * payload));
        assert_eq!(net.1.spare_buffers.len(), 3, "the emptied buffers went to the endpoint");
        let last_freed = net.1.spare_buffers.last().unwrap().as_ptr();
        net.0.connection_mut(second).unwrap().write(&vec![2; payload]).unwrap();
        exchange(&mut net, t);
        assert_eq!(readable(&net, other), payload);
        assert_eq!(net.1.spare_buffers.len(), 2);
        assert!(net.1.spare_buffers.iter().all(|b| b.as_ptr() != last_freed), "the other connection filled the buffer freed last");
        assert_eq!(net.1.reading(other, |c| c.read(&mut got).unwrap()), Some(payload));
        assert_eq!(net.1.spare_buffers.last().unwrap().as_ptr(), last_freed);
        // They go with the connections: some with the first, all with the last.
        net.1.remove(one);
        assert!(net.1.spare_buffers.len() <= 3);
        net.1.remove(other);
        assert_eq!(net.1.spare_buffers.capacity(), 0);
    }
}
