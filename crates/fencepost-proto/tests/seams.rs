//! The open seams, exercised from outside the crate: a congestion controller, a
//! redundancy stage and a packet protection that fencepost-proto does not know,
//! plugged in through their factories.

mod common;

use common::{at, fast_config, Pair};
use fencepost_proto::wire::{PacketType, HEADER_LEN};
use fencepost_proto::{
    AckBatch, Controller, ControllerConfig, ControllerFactory, Instant, PacketProtection, ProtectionConfig, ProtectionError,
    ProtectionFactory, Redundancy, RedundancyConfig, RedundancyFactory, RttEstimator, SentPacket, Side, TransportConfig,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

// ---- a controller from outside: a fixed window that records every hook ----

#[derive(Debug, Default)]
struct Log {
    sent: u64,
    /// controller_state handed out on send -> seq, to check it comes back on ack or loss.
    tags: HashMap<u64, u64>,
    acked_with_right_tag: u64,
    lost_with_right_tag: u64,
    batches: Vec<AckBatch>,
}

#[derive(Debug)]
struct Recording {
    window: u64,
    next_tag: u64,
    log: Arc<Mutex<Log>>,
}

impl Controller for Recording {
    fn on_sent(&mut self, _now: Instant, packet: &SentPacket, _bytes_in_flight: u64) -> u64 {
        self.next_tag += 1;
        let mut log = self.log.lock().unwrap();
        log.sent += 1;
        log.tags.insert(self.next_tag, packet.seq);
        self.next_tag
    }
    fn on_ack(&mut self, _now: Instant, packet: &SentPacket, _rtt: &RttEstimator) {
        let mut log = self.log.lock().unwrap();
        if log.tags.get(&packet.controller_state) == Some(&packet.seq) {
            log.acked_with_right_tag += 1;
        }
    }
    fn on_packet_lost(&mut self, _now: Instant, packet: &SentPacket) {
        let mut log = self.log.lock().unwrap();
        if log.tags.get(&packet.controller_state) == Some(&packet.seq) {
            log.lost_with_right_tag += 1;
        }
    }
    fn on_ack_batch(&mut self, _now: Instant, batch: &AckBatch, _rtt: &RttEstimator) {
        self.log.lock().unwrap().batches.push(*batch);
    }
    fn on_congestion_event(&mut self, _now: Instant, _sent: Instant, _lost_bytes: u64) {}
    fn window(&self) -> u64 {
        self.window
    }
    fn name(&self) -> &str {
        "recording"
    }
}

#[derive(Debug)]
struct RecordingFactory {
    log: Arc<Mutex<Log>>,
}

impl ControllerFactory for RecordingFactory {
    fn build(&self, mss: u64) -> Box<dyn Controller> {
        Box::new(Recording { window: 8 * mss, next_tag: 1000, log: self.log.clone() })
    }
    fn name(&self) -> &str {
        "recording"
    }
}

#[test]
fn a_controller_from_outside_gets_its_packet_state_back_and_rate_samples() {
    let log = Arc::new(Mutex::new(Log::default()));
    let client = TransportConfig {
        controller: ControllerConfig::Custom(Arc::new(RecordingFactory { log: log.clone() })),
        ..fast_config()
    };
    let mut p = Pair::new(client, fast_config());
    // Drop every 7th data packet's first transmission.
    let mut seen = std::collections::HashSet::new();
    p.drop = Box::new(move |to_server, ty, seq, _| to_server && ty == PacketType::Data && seq.unwrap() % 7 == 3 && seen.insert(seq.unwrap()));
    p.run_until(at(20));
    p.client.write(&[5u8; 20_000]).unwrap(); // 200 packets of 100 bytes, 8 in flight at a time
    p.run_until(at(3_000));
    assert_eq!(Pair::read_all(p.server()).0.len(), 20_000);
    assert_eq!(p.client.congestion_window(), 8 * p.client.config().max_datagram() as u64);

    let log = log.lock().unwrap();
    assert_eq!(log.sent, p.client.stats().data_packets_sent);
    assert!(log.lost_with_right_tag >= 28, "each dropped packet came back as lost: {}", log.lost_with_right_tag);
    assert_eq!(log.lost_with_right_tag, p.client.stats().packets_lost);
    assert!(log.acked_with_right_tag >= 200 - log.lost_with_right_tag);
    // The batches carry what was acknowledged and lost, and delivery-rate samples.
    let acked: u64 = log.batches.iter().map(|b| b.newly_acked).sum();
    assert!(acked > 0 && log.batches.iter().any(|b| b.newly_lost > 0));
    let rates: Vec<f64> = log.batches.iter().filter_map(|b| b.rate_sample).filter(|s| !s.is_app_limited).map(|s| s.delivery_rate).collect();
    assert!(rates.len() > 20, "{} samples", rates.len());
    // 8 packets of 114 bytes per 10 ms round trip: 91 kB/s is the most the window delivers.
    let ceiling = 8.0 * 114.0 / 0.010;
    let median = {
        let mut r = rates.clone();
        r.sort_by(|a, b| a.partial_cmp(b).unwrap());
        r[r.len() / 2]
    };
    assert!(median > 0.5 * ceiling && median <= ceiling * 1.05, "median delivery rate {median:.0} B/s, window allows {ceiling:.0}");
    assert_eq!(p.client.bytes_delivered(), log.batches.last().unwrap().delivered);
}

#[test]
fn rate_samples_are_marked_app_limited_when_the_application_is_slow() {
    let log = Arc::new(Mutex::new(Log::default()));
    let client = TransportConfig { controller: ControllerConfig::Custom(Arc::new(RecordingFactory { log: log.clone() })), ..fast_config() };
    let mut p = Pair::new(client, fast_config());
    p.run_until(at(20));
    // One packet every 50 ms: the window (8 packets) is never the limit.
    for i in 0..20 {
        p.client.write(&[1u8; 100]).unwrap();
        p.run_until(at(20 + 50 * (i + 1)));
    }
    let log = log.lock().unwrap();
    let samples: Vec<_> = log.batches.iter().filter_map(|b| b.rate_sample).collect();
    assert!(samples.len() >= 10);
    assert!(samples.iter().skip(1).all(|s| s.is_app_limited), "{samples:?}");
}

// ---- a redundancy stage from outside: every data packet twice ----

#[derive(Debug, Default)]
struct Duplicate {
    pending: Vec<Vec<u8>>,
}

impl Redundancy for Duplicate {
    fn on_data_packet(&mut self, _now: Instant, _seq: u64, _retransmission: bool, packet: &[u8]) {
        self.pending.push(packet.to_vec());
    }
    fn poll_repair(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        let copy = self.pending.pop()?;
        buf[..copy.len()].copy_from_slice(&copy);
        Some(copy.len())
    }
    fn has_repair(&self) -> bool {
        !self.pending.is_empty()
    }
    fn name(&self) -> &str {
        "duplicate"
    }
}

#[derive(Debug)]
struct DuplicateFactory;

impl RedundancyFactory for DuplicateFactory {
    fn build(&self) -> Box<dyn Redundancy> {
        Box::new(Duplicate::default())
    }
    fn name(&self) -> &str {
        "duplicate"
    }
}

#[test]
fn a_redundancy_stage_from_outside_sends_whole_repair_packets() {
    let client = TransportConfig { redundancy: RedundancyConfig::Custom(Arc::new(DuplicateFactory)), ..fast_config() };
    let mut p = Pair::new(client, fast_config());
    // The first transmission of every data packet is lost; its copy gets through.
    let mut first = std::collections::HashSet::new();
    p.drop = Box::new(move |to_server, ty, seq, _| to_server && ty == PacketType::Data && first.insert(seq.unwrap()));
    p.run_until(at(20));
    p.client.write(&[3u8; 5_000]).unwrap();
    p.client.close(p.now);
    p.run_until(at(2_000));
    assert_eq!(Pair::read_all(p.server()), (vec![3u8; 5_000], true));
    let stats = p.client.stats();
    assert_eq!(stats.redundant_packets_sent, stats.data_packets_sent, "one copy of each data and FIN packet");
    assert_eq!(stats.retransmissions, 0, "no copy ever had to be resent");
}

// ---- a packet protection from outside: a keystream and a 4-byte check ----

/// Not cryptography: enough to prove every packet after the handshake is
/// transformed on the way out and checked on the way in.
#[derive(Debug)]
struct Scramble;

fn check(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

fn keystream(header: &[u8], body: &mut [u8]) {
    let mut x = check(header) | 1;
    for b in body {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b ^= x as u8;
    }
}

impl PacketProtection for Scramble {
    fn overhead(&self) -> usize {
        4
    }
    fn seal(&mut self, packet: &mut [u8], len: usize) -> Result<usize, ProtectionError> {
        let (header, body) = packet.split_at_mut(HEADER_LEN);
        keystream(header, &mut body[..len - HEADER_LEN]);
        let tag = check(&packet[..len]).to_be_bytes();
        packet[len..len + 4].copy_from_slice(&tag);
        Ok(len + 4)
    }
    fn open<'a>(&mut self, datagram: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ProtectionError> {
        let Some(len) = datagram.len().checked_sub(4).filter(|&l| l >= HEADER_LEN) else { return Err(ProtectionError("too short")) };
        if check(&datagram[..len]).to_be_bytes() != datagram[len..] {
            return Err(ProtectionError("check failed"));
        }
        scratch.clear();
        scratch.extend_from_slice(&datagram[..len]);
        let (header, body) = scratch.split_at_mut(HEADER_LEN);
        keystream(header, body);
        Ok(scratch)
    }
    fn name(&self) -> &str {
        "scramble"
    }
}

#[derive(Debug)]
struct ScrambleFactory;

impl ProtectionFactory for ScrambleFactory {
    fn build(&self, _side: Side) -> Box<dyn PacketProtection> {
        Box::new(Scramble)
    }
    fn overhead(&self) -> usize {
        4
    }
    fn name(&self) -> &str {
        "scramble"
    }
}

#[test]
fn a_protection_from_outside_seals_every_packet_and_refuses_corrupted_ones() {
    let config = TransportConfig { protection: ProtectionConfig::Custom(Arc::new(ScrambleFactory)), ..fast_config() };
    let mut p = Pair::new(config.clone(), config);
    let payload: Vec<u8> = (0..4_000u32).map(|i| (i % 251) as u8).collect();
    // Every data packet leaves sealed: its payload is not the plaintext. Flip a bit in every 5th.
    let plain = payload.clone();
    let mut n = 0u64;
    p.alter = Box::new(move |to_server, datagram| {
        if to_server && datagram[1] == PacketType::Data as u8 {
            let body = &datagram[14..datagram.len() - 4];
            assert!(!plain.windows(body.len().min(32)).any(|w| w == &body[..body.len().min(32)]), "plaintext on the wire");
            n += 1;
            if n % 5 == 0 {
                datagram[20] ^= 0x10;
            }
        }
    });
    p.run_until(at(20));
    p.client.write(&payload).unwrap();
    p.client.close(p.now);
    p.run_until(at(3_000));
    let now = p.now;
    p.server().close(now);
    p.run_until(at(5_000));
    assert_eq!(Pair::read_all(p.server()), (payload, true), "byte-exact despite the corruption");
    assert!(p.client.is_closed() && p.server().is_closed());
    let stats = p.server().stats().clone();
    assert!(stats.unauthenticated_packets >= 8, "corrupted packets are refused: {}", stats.unauthenticated_packets);
    assert_eq!(stats.malformed_packets, 0);
    assert_eq!(p.client.config().max_datagram(), 14 + 100 + 4, "the tag counts in the datagram size");
}

// ---- a controller that allows nothing cannot stall a connection ----

#[derive(Debug)]
struct Closed;

impl Controller for Closed {
    fn on_congestion_event(&mut self, _now: Instant, _sent: Instant, _lost_bytes: u64) {}
    fn window(&self) -> u64 {
        0
    }
    fn name(&self) -> &str {
        "closed"
    }
}

#[derive(Debug)]
struct ClosedFactory;

impl ControllerFactory for ClosedFactory {
    fn build(&self, _mss: u64) -> Box<dyn Controller> {
        Box::new(Closed)
    }
    fn name(&self) -> &str {
        "closed"
    }
}

#[test]
fn a_zero_window_still_sends_one_packet_when_nothing_is_in_flight() {
    let client = TransportConfig { controller: ControllerConfig::Custom(Arc::new(ClosedFactory)), ..fast_config() };
    let mut p = Pair::new(client, fast_config());
    p.run_until(at(20));
    p.client.write(&[9u8; 1_000]).unwrap(); // 10 packets
    p.client.close(p.now);
    // One packet per round trip (10 ms): done well within a second, never stalled without a timer.
    p.run_until(at(1_000));
    assert_eq!(Pair::read_all(p.server()), (vec![9u8; 1_000], true));
    assert_eq!(p.client.stats().data_packets_sent, 11, "ten data packets and the FIN, one at a time");
}
