//! A two-connection harness for integration tests: two connections on a virtual
//! clock, wired back to back with a fixed one-way delay and a hook to drop (or
//! alter) chosen packets. Each test reads like a packet trace.

#![allow(dead_code)] // each test file uses a different part of the harness

use fencepost_proto::wire::{Body, Packet, PacketType, SecureHandshake};
use fencepost_proto::{Connection, ConnectionSecrets, ControllerConfig, Event, FixedConfig, Hello, Instant, ReadError, TransportConfig};
use std::collections::VecDeque;
use std::sync::Arc;

pub use fencepost_proto::Duration;

/// Changes a datagram on the wire (corruption, forgery): (to_server, datagram).
pub type Alter = Box<dyn FnMut(bool, &mut Vec<u8>)>;

pub const DELAY: Duration = Duration::from_millis(5);

pub struct Pair {
    pub now: Instant,
    pub client: Connection,
    pub server: Option<Connection>,
    /// (arrival time, to_server, datagram)
    pub wire: VecDeque<(Instant, bool, Vec<u8>)>,
    /// Decides whether a datagram is dropped: (to_server, packet type, data seq if any, index among sent).
    pub drop: Box<dyn FnMut(bool, PacketType, Option<u32>, u64) -> bool>,
    pub alter: Alter,
    pub sent: u64,
    pub server_config: Arc<TransportConfig>,
    pub client_events: Vec<Event>,
    pub server_events: Vec<Event>,
}

impl Pair {
    pub fn new(client: TransportConfig, server: TransportConfig) -> Pair {
        Pair {
            now: Instant::from_millis(1),
            client: Connection::client(Arc::new(client), Instant::from_millis(1), 0xc1, &ConnectionSecrets::from_seed(1)),
            server: None,
            wire: VecDeque::new(),
            drop: Box::new(|_, _, _, _| false),
            alter: Box::new(|_, _| {}),
            sent: 0,
            server_config: Arc::new(server),
            client_events: Vec::new(),
            server_events: Vec::new(),
        }
    }

    pub fn server(&mut self) -> &mut Connection {
        self.server.as_mut().expect("server connection exists")
    }

    pub fn flush(&mut self) {
        let mut buf = vec![0u8; 2048];
        for to_server in [true, false] {
            loop {
                let conn = if to_server { Some(&mut self.client) } else { self.server.as_mut() };
                let Some(conn) = conn else { break };
                let Some(t) = conn.poll_transmit(self.now, &mut buf) else { break };
                let mut datagram = buf[..t.size].to_vec();
                // Read the sequence number from the bytes: a sealed packet may not parse.
                let seq = match t.packet_type {
                    // Version 2 carries a packet number there, and the sequence number sealed.
                    PacketType::Data | PacketType::Close if datagram[0] == 1 => Some(u32::from_be_bytes([datagram[6], datagram[7], datagram[8], datagram[9]])),
                    _ => None,
                };
                (self.alter)(to_server, &mut datagram);
                self.sent += 1;
                if !(self.drop)(to_server, t.packet_type, seq, self.sent) {
                    self.wire.push_back((self.now + DELAY, to_server, datagram));
                }
            }
        }
        while let Some(e) = self.client.poll_event() {
            self.client_events.push(e);
        }
        if let Some(s) = self.server.as_mut() {
            while let Some(e) = s.poll_event() {
                self.server_events.push(e);
            }
        }
    }

    pub fn next_time(&self) -> Option<Instant> {
        [self.wire.front().map(|w| w.0), self.client.poll_timeout(), self.server.as_ref().and_then(|s| s.poll_timeout())]
            .into_iter()
            .flatten()
            .min()
    }

    /// Advances the clock event by event until `until`, or until nothing is left to happen.
    pub fn run_until(&mut self, until: Instant) {
        self.flush();
        // A timer that is set again in the past fires without end: a test fails on it
        // rather than hang.
        let mut turns_at_this_time = 0u32;
        while let Some(next) = self.next_time() {
            if next > until {
                break;
            }
            if next <= self.now {
                turns_at_this_time += 1;
                assert!(turns_at_this_time < 100_000, "events without end at {:?}", self.now);
            } else {
                turns_at_this_time = 0;
            }
            self.now = self.now.max(next);
            while self.wire.front().is_some_and(|w| w.0 <= self.now) {
                let (_, to_server, datagram) = self.wire.pop_front().unwrap();
                if to_server {
                    match &mut self.server {
                        Some(s) => s.handle_datagram(self.now, &datagram),
                        None => {
                            let hello = match Packet::parse(&datagram) {
                                Ok(Packet { body: Body::Handshake(hs), .. }) => Some(Hello::V1(hs)),
                                _ => match SecureHandshake::parse(&datagram) {
                                    Ok(SecureHandshake::Initial { src_cid, timestamp, pattern, cipher, noise, .. }) => {
                                        Some(Hello::V2 { src_cid, timestamp, pattern, cipher, noise: noise.to_vec(), size: datagram.len() })
                                    }
                                    _ => None,
                                },
                            };
                            if let Some(hello) = hello {
                                let server = Connection::server(self.server_config.clone(), self.now, 0x5e, &hello, &ConnectionSecrets::from_seed(2));
                                self.server = Some(server.expect("the harness's own Initial authenticates"));
                            }
                        }
                    }
                } else {
                    self.client.handle_datagram(self.now, &datagram);
                }
            }
            self.client.handle_timeout(self.now);
            if let Some(s) = self.server.as_mut() {
                s.handle_timeout(self.now);
            }
            self.flush();
        }
        self.now = self.now.max(until);
    }

    pub fn read_all(conn: &mut Connection) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match conn.read(&mut buf) {
                Ok(0) => return (out, true),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(ReadError::WouldBlock) => return (out, false),
                Err(e) => panic!("read failed: {e}"),
            }
        }
    }
}

/// The default profile in plaintext (tests read sequence numbers off the wire), 100-byte payloads, a fixed window.
/// The default profile with small packets, a fixed window and no redundancy: these tests
/// follow single packets through loss recovery, which repairs would hide.
pub fn fast_config() -> TransportConfig {
    TransportConfig {
        max_payload: 100,
        controller: ControllerConfig::Fixed(FixedConfig::default().window_packets(64)),
        redundancy: fencepost_proto::redundancy::RedundancyConfig::None,
        ..TransportConfig::default_profile().insecure()
    }
}

pub fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}
