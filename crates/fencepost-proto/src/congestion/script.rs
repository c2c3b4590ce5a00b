//! A scripted sender for controller tests: packets leave at given times and
//! come back acknowledged, lost or timed out, as the connection would report them.

use super::{AckBatch, Controller, SentPacket};
use crate::rtt::RttEstimator;
use crate::time::{Duration, Instant};

pub const MSS: u64 = 1000;

pub fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// A scripted sender: packets go out at given times and come back acknowledged one ack each.
pub struct Script<C: Controller> {
    pub cc: C,
    pub rtt: RttEstimator,
    pub flight: u64,
    seq: u64,
}

impl<C: Controller> Script<C> {
    /// A sender with a 100 ms RTT sample already taken.
    pub fn new(cc: C) -> Self {
        Self::with_rtt(cc, 100)
    }
    pub fn with_rtt(cc: C, rtt_ms: u64) -> Self {
        let mut rtt = RttEstimator::new(Duration::from_millis(rtt_ms));
        rtt.update(Duration::from_millis(rtt_ms));
        Script { cc, rtt, flight: 0, seq: 0 }
    }
    pub fn send(&mut self, t: u64, n: u64) -> Vec<SentPacket> {
        (0..n)
            .map(|_| {
                self.flight += MSS;
                let p = SentPacket { seq: self.seq, sent: at(t), bytes: MSS, ..Default::default() };
                self.seq += 1;
                self.cc.on_sent(at(t), &p, self.flight);
                p
            })
            .collect()
    }
    /// One ack per packet, each its own batch.
    pub fn ack_each(&mut self, t: u64, packets: &[SentPacket]) {
        for p in packets {
            self.flight -= p.bytes;
            self.cc.on_ack(at(t), p, &self.rtt);
            self.cc.on_ack_batch(at(t), &AckBatch { bytes_in_flight: self.flight, ..Default::default() }, &self.rtt);
        }
    }
    /// One ack covering all of them.
    pub fn ack_together(&mut self, t: u64, packets: &[SentPacket]) {
        for p in packets {
            self.flight -= p.bytes;
            self.cc.on_ack(at(t), p, &self.rtt);
        }
        self.cc.on_ack_batch(at(t), &AckBatch { bytes_in_flight: self.flight, ..Default::default() }, &self.rtt);
    }
    pub fn lose(&mut self, t: u64, packet: &SentPacket) {
        self.flight -= packet.bytes;
        self.cc.on_congestion_event(at(t), packet.sent, packet.bytes);
    }
    pub fn cwnd(&self) -> u64 {
        self.cc.window() / MSS
    }
    /// One round trip of `rtt_ms` from `t`: a full window leaves at `t` and is acknowledged,
    /// packet by packet, at `t + rtt_ms`. Returns the time the round ended.
    pub fn round(&mut self, t: u64, rtt_ms: u64) -> u64 {
        let flight = self.send(t, self.cwnd());
        self.ack_each(t + rtt_ms, &flight);
        t + rtt_ms
    }
    /// The next RTT sample the connection would feed the estimator.
    pub fn sample_rtt(&mut self, ms: u64) {
        self.rtt.update(Duration::from_millis(ms));
    }
}

