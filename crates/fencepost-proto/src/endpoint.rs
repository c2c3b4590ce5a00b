//! Many connections behind one socket: routes datagrams by connection id,
//! answers handshakes, and chooses connection ids at random.
//!
//! Each side picks its own 32-bit connection id and the peer writes it in every
//! packet, so packets of an older connection between the same two addresses,
//! and guesses by an off-path sender, find no connection and are dropped.

use crate::config::TransportConfig;
use crate::connection::{Connection, Transmit};
use crate::time::Instant;
use crate::wire::{Body, HandshakePhase, Header, Packet};
use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
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

/// Datagrams the endpoint dropped before any connection saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    pub datagrams_received: u64,
    /// Did not parse (garbage, truncated, wrong version).
    pub malformed: u64,
    /// Named a connection id this endpoint does not have.
    pub unknown_connection: u64,
    /// Named a connection of ours but came from another address.
    pub wrong_address: u64,
    /// A handshake this endpoint does not take (not a server, or full).
    pub refused: u64,
}

struct Entry<A> {
    connection: Connection,
    remote: A,
}

pub struct Endpoint<A: Clone + Eq + Hash> {
    config: EndpointConfig,
    rng: Xoshiro256PlusPlus,
    connections: HashMap<u32, Entry<A>>,
    /// Server side: (client address, client's connection id) -> our connection id, so a
    /// retransmitted Initial reaches the connection it already created.
    by_initial: HashMap<(A, u32), u32>,
    /// Round-robin order for transmissions.
    order: Vec<u32>,
    cursor: usize,
    incoming: VecDeque<ConnectionHandle>,
    stats: EndpointStats,
}

impl<A: Clone + Eq + Hash> Endpoint<A> {
    /// `seed` drives connection-id choice; a real runtime seeds it from the OS.
    pub fn new(config: EndpointConfig, seed: u64) -> Self {
        Endpoint {
            config,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            connections: HashMap::new(),
            by_initial: HashMap::new(),
            order: Vec::new(),
            cursor: 0,
            incoming: VecDeque::new(),
            stats: EndpointStats::default(),
        }
    }

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
    pub fn handles(&self) -> impl Iterator<Item = ConnectionHandle> + '_ {
        self.order.iter().map(|&cid| ConnectionHandle(cid))
    }
    pub fn connection(&self, handle: ConnectionHandle) -> Option<&Connection> {
        self.connections.get(&handle.0).map(|e| &e.connection)
    }
    pub fn connection_mut(&mut self, handle: ConnectionHandle) -> Option<&mut Connection> {
        self.connections.get_mut(&handle.0).map(|e| &mut e.connection)
    }
    pub fn remote(&self, handle: ConnectionHandle) -> Option<&A> {
        self.connections.get(&handle.0).map(|e| &e.remote)
    }

    fn fresh_cid(&mut self) -> u32 {
        loop {
            let cid = self.rng.next_u32();
            if cid != 0 && !self.connections.contains_key(&cid) {
                return cid;
            }
        }
    }

    fn insert(&mut self, cid: u32, connection: Connection, remote: A) {
        self.connections.insert(cid, Entry { connection, remote });
        self.order.push(cid);
    }

    /// Opens a connection to `remote`; its handshake leaves on the next `poll_transmit`.
    pub fn connect(&mut self, now: Instant, remote: A) -> ConnectionHandle {
        let cid = self.fresh_cid();
        let connection = Connection::client(self.config.transport.clone(), now, cid);
        self.insert(cid, connection, remote);
        ConnectionHandle(cid)
    }

    /// The next connection a peer opened, if any.
    pub fn accept(&mut self) -> Option<ConnectionHandle> {
        while let Some(handle) = self.incoming.pop_front() {
            if self.connections.contains_key(&handle.0) {
                return Some(handle);
            }
        }
        None
    }

    /// Routes one datagram; returns the connection it reached, if any.
    pub fn handle_datagram(&mut self, now: Instant, remote: A, datagram: &[u8]) -> Option<ConnectionHandle> {
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
            return Some(ConnectionHandle(header.dst_cid));
        }
        // Only a handshake Initial carries connection id 0.
        let hs = match Packet::parse(datagram) {
            Ok(Packet { body: Body::Handshake(hs), .. }) if hs.phase == HandshakePhase::Initial => hs,
            _ => {
                self.stats.malformed += 1;
                return None;
            }
        };
        if let Some(&cid) = self.by_initial.get(&(remote.clone(), hs.src_cid)) {
            if let Some(entry) = self.connections.get_mut(&cid) {
                entry.connection.handle_datagram(now, datagram);
                return Some(ConnectionHandle(cid));
            }
        }
        if !self.config.accept_incoming || self.connections.len() >= self.config.max_connections {
            self.stats.refused += 1;
            return None;
        }
        let cid = self.fresh_cid();
        let connection = Connection::server(self.config.transport.clone(), now, cid, &hs);
        self.by_initial.insert((remote.clone(), hs.src_cid), cid);
        self.insert(cid, connection, remote);
        self.incoming.push_back(ConnectionHandle(cid));
        Some(ConnectionHandle(cid))
    }

    /// The next datagram any connection wants to send, taking connections in turn.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<(A, Transmit)> {
        let n = self.order.len();
        for step in 0..n {
            let index = (self.cursor + step) % n;
            let cid = self.order[index];
            if let Some(entry) = self.connections.get_mut(&cid) {
                if let Some(transmit) = entry.connection.poll_transmit(now, buf) {
                    self.cursor = (index + 1) % n;
                    return Some((entry.remote.clone(), transmit));
                }
            }
        }
        None
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.connections.values().filter_map(|e| e.connection.poll_timeout()).min()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        for entry in self.connections.values_mut() {
            if entry.connection.poll_timeout().is_some_and(|t| t <= now) {
                entry.connection.handle_timeout(now);
            }
        }
    }

    /// Forgets a connection; its packets are then dropped as unknown.
    pub fn remove(&mut self, handle: ConnectionHandle) -> Option<Connection> {
        let entry = self.connections.remove(&handle.0)?;
        self.order.retain(|&cid| cid != handle.0);
        self.cursor = 0;
        self.by_initial.remove(&(entry.remote.clone(), entry.connection.peer_cid()));
        Some(entry.connection)
    }
}
