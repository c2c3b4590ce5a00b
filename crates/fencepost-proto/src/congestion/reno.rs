//! The Reno family of loss-based controllers (RFC 5681): slow start to a
//! threshold, then one packet per window per round trip, and on loss the
//! threshold halves. Two flavours differ in what follows a loss:
//!
//! - **Tahoe** (Jacobson 1988; RFC 5681 without fast recovery; the
//!   congestion-control notebook's `TahoeStrategy`): the window drops to one
//!   packet and slow start begins again.
//! - **NewReno** (RFC 6582, in RFC 9002's form): the window drops to the new
//!   threshold and stays there until a packet sent after the loss is
//!   acknowledged (one reduction per round trip of losses).
//!
//! Both count acknowledged bytes, not acks (RFC 3465), and in slow start grow
//! by at most two packets per ack (RFC 3465's L = 2). Neither grows on packets
//! sent before the latest reduction: the fence acknowledges such packets late,
//! and counting them would let slow start climb back to the threshold in a
//! fraction of a round trip (RFC 9002 7.3.2: no increase during recovery).

use super::{AckBatch, Controller, Pacer, SentPacket};
use crate::rtt::RttEstimator;
use crate::time::Instant;

/// RFC 3465: slow start grows by at most L packets per ack.
const ABC_LIMIT_PACKETS: u64 = 2;

#[derive(Clone, Debug, PartialEq)]
pub struct RenoConfig {
    /// Initial window in packets.
    pub initial_window: u64,
    /// Initial slow-start threshold in packets; `None` is unbounded (RFC 5681: "arbitrarily high").
    pub initial_ssthresh: Option<u64>,
    /// Pace at 1.25 x cwnd / srtt instead of sending each window as a burst.
    pub pacing: bool,
}

/// Tahoe takes the same settings as NewReno.
pub type TahoeConfig = RenoConfig;

impl Default for RenoConfig {
    fn default() -> Self {
        RenoConfig { initial_window: 4, initial_ssthresh: None, pacing: true }
    }
}

impl RenoConfig {
    pub fn initial_window(mut self, packets: u64) -> Self {
        self.initial_window = packets.max(1);
        self
    }
    pub fn initial_ssthresh(mut self, packets: Option<u64>) -> Self {
        self.initial_ssthresh = packets.map(|p| p.max(1));
        self
    }
    pub fn pacing(mut self, on: bool) -> Self {
        self.pacing = on;
        self
    }
}

/// What a loss does to the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// Back to one packet, then slow start.
    Tahoe,
    /// Down to the halved threshold (fast recovery), then congestion avoidance.
    NewReno,
}

#[derive(Debug)]
pub struct Reno {
    flavour: Flavour,
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    /// Packets sent up to this instant belong to the latest reduction's round trip.
    recovery_start: Option<Instant>,
    /// Bytes this ack newly acknowledged that count for growth.
    acked: u64,
    /// Bytes acknowledged in congestion avoidance since the window last grew.
    avoidance_credit: u64,
    /// Bytes in flight as of the latest send or ack: the FlightSize of RFC 5681 (4).
    flight: u64,
    pacer: Option<Pacer>,
}

/// TCP Tahoe: a [`Reno`] of the Tahoe flavour.
pub type Tahoe = Reno;

impl Reno {
    pub fn new(flavour: Flavour, config: RenoConfig, mss: u64) -> Self {
        Reno {
            flavour,
            mss,
            cwnd: config.initial_window.max(1) * mss,
            ssthresh: config.initial_ssthresh.map_or(u64::MAX, |p| p * mss),
            recovery_start: None,
            acked: 0,
            avoidance_credit: 0,
            flight: 0,
            pacer: config.pacing.then(|| Pacer::new(0, 10 * mss)),
        }
    }

    pub fn tahoe(config: RenoConfig, mss: u64) -> Self {
        Reno::new(Flavour::Tahoe, config, mss)
    }

    pub fn new_reno(config: RenoConfig, mss: u64) -> Self {
        Reno::new(Flavour::NewReno, config, mss)
    }

    fn reduce(&mut self, now: Instant, to_one_packet: bool) {
        // RFC 5681 (4): ssthresh = max(FlightSize / 2, 2*SMSS).
        self.ssthresh = (self.flight / 2).max(2 * self.mss);
        self.cwnd = if to_one_packet { self.mss } else { self.ssthresh };
        self.recovery_start = Some(now);
        self.acked = 0;
        self.avoidance_credit = 0;
    }

    fn grow(&mut self) {
        let acked = std::mem::take(&mut self.acked);
        if acked == 0 {
            return;
        }
        if self.cwnd < self.ssthresh {
            // Slow start: the bytes acknowledged, at most L packets per ack.
            self.cwnd = (self.cwnd + acked.min(ABC_LIMIT_PACKETS * self.mss)).min(self.ssthresh.max(self.cwnd));
        } else {
            // Congestion avoidance: one packet per window acknowledged.
            self.avoidance_credit += acked;
            while self.avoidance_credit >= self.cwnd {
                self.avoidance_credit -= self.cwnd;
                self.cwnd += self.mss;
            }
        }
    }
}

impl Controller for Reno {
    fn on_sent(&mut self, now: Instant, packet: &SentPacket, bytes_in_flight: u64) -> u64 {
        if let Some(p) = &mut self.pacer {
            p.on_sent(now, packet.bytes);
        }
        self.flight = bytes_in_flight;
        0
    }

    fn on_ack(&mut self, _now: Instant, packet: &SentPacket, _rtt: &RttEstimator) {
        if self.recovery_start.is_some_and(|start| packet.sent <= start) {
            return;
        }
        self.acked += packet.bytes;
    }

    fn on_ack_batch(&mut self, _now: Instant, batch: &AckBatch, rtt: &RttEstimator) {
        self.flight = batch.bytes_in_flight;
        if batch.app_limited {
            // RFC 9002 7.8: a window the sender does not fill is not a window the path proved.
            self.acked = 0;
        }
        self.grow();
        if let Some(p) = &mut self.pacer {
            p.follow_window(self.cwnd, rtt);
        }
    }

    fn on_congestion_event(&mut self, now: Instant, _sent: Instant, _lost_bytes: u64) {
        self.reduce(now, self.flavour == Flavour::Tahoe);
    }

    fn on_retransmission_timeout(&mut self, now: Instant) {
        // RFC 5681 (5.1 and 3.1): after a timeout the loss window is one packet.
        self.reduce(now, true);
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn wants_every_ack(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    fn ssthresh(&self) -> Option<u64> {
        (self.ssthresh != u64::MAX).then_some(self.ssthresh)
    }

    fn earliest_departure_time(&self) -> Option<Instant> {
        self.pacer.as_ref().and_then(Pacer::earliest_departure_time)
    }

    fn pacing_rate(&self) -> Option<u64> {
        self.pacer.as_ref().and_then(Pacer::active_rate)
    }

    fn name(&self) -> &str {
        match self.flavour {
            Flavour::Tahoe => "tahoe",
            Flavour::NewReno => "reno",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::script::{at, Script, MSS};
    use super::*;
    use crate::time::Duration;

    fn unpaced(flavour: Flavour, iw: u64, ssthresh: Option<u64>) -> Reno {
        Reno::new(flavour, RenoConfig::default().initial_window(iw).initial_ssthresh(ssthresh).pacing(false), MSS)
    }

    #[test]
    fn slow_start_doubles_per_round_trip_then_avoidance_adds_one() {
        // The notebook's TahoeStrategy(10, 1): ssthresh 10 packets, initial window 1.
        let mut s = Script::new(unpaced(Flavour::Tahoe, 1, Some(10)));
        let mut t = 0;
        let mut windows = vec![s.cwnd()];
        for _ in 0..6 {
            let flight = s.send(t, s.cwnd());
            t += 100;
            s.ack_each(t, &flight);
            windows.push(s.cwnd());
        }
        assert_eq!(windows, vec![1, 2, 4, 8, 10, 11, 12], "doubling up to ssthresh, then one packet per round trip");
    }

    #[test]
    fn a_stretch_ack_grows_slow_start_by_two_packets_at_most() {
        let mut s = Script::new(unpaced(Flavour::NewReno, 10, None));
        let flight = s.send(0, 10);
        s.ack_together(100, &flight);
        assert_eq!(s.cwnd(), 12, "RFC 3465: L = 2");
    }

    #[test]
    fn tahoe_restarts_from_one_packet_and_late_fence_bits_do_not_count() {
        let mut s = Script::new(unpaced(Flavour::Tahoe, 20, None));
        let flight = s.send(0, 20);
        // Packet 0 is lost; the fence reports 1..19 over the next round trip.
        s.lose(100, &flight[0]);
        assert_eq!(s.cwnd(), 1);
        assert_eq!(s.cc.ssthresh(), Some(10 * MSS), "half the flight of 20");
        s.ack_each(101, &flight[1..]);
        assert_eq!(s.cwnd(), 1, "packets sent before the loss do not grow the window");
        // The retransmission, sent after the loss, is acknowledged: slow start resumes.
        let resent = s.send(102, 1);
        s.ack_each(202, &resent);
        assert_eq!(s.cwnd(), 2);
        // A second loss of a packet sent before the first reduction is not a new episode
        // (the connection calls on_congestion_event once per episode); a timeout always collapses.
        s.cc.on_retransmission_timeout(at(300));
        assert_eq!((s.cwnd(), s.cc.ssthresh()), (1, Some(2 * MSS)), "ssthresh floor is two packets");
    }

    #[test]
    fn new_reno_halves_and_recovers_in_congestion_avoidance() {
        let mut s = Script::new(unpaced(Flavour::NewReno, 20, None));
        let flight = s.send(0, 20);
        s.lose(100, &flight[0]);
        assert_eq!(s.cwnd(), 10, "fast recovery: cwnd = ssthresh = flight / 2");
        s.ack_each(101, &flight[1..]);
        assert_eq!(s.cwnd(), 10, "no growth during recovery");
        let next = s.send(102, 10);
        s.ack_each(202, &next);
        assert_eq!(s.cwnd(), 11, "recovery over: one packet per window");
        s.cc.on_retransmission_timeout(at(300));
        assert_eq!(s.cwnd(), 1, "a timeout resets to the loss window");
    }

    #[test]
    fn app_limited_acks_do_not_grow_the_window() {
        let mut s = Script::new(unpaced(Flavour::NewReno, 10, None));
        let flight = s.send(0, 2);
        let p = &flight[0];
        s.cc.on_ack(at(100), p, &s.rtt);
        s.cc.on_ack_batch(at(100), &AckBatch { app_limited: true, ..Default::default() }, &s.rtt);
        assert_eq!(s.cwnd(), 10);
    }

    #[test]
    fn paces_at_a_quarter_above_cwnd_per_rtt() {
        let mut cc = Reno::tahoe(RenoConfig::default().initial_window(10), MSS);
        let mut rtt = RttEstimator::new(Duration::from_millis(100));
        rtt.update(Duration::from_millis(100));
        let p = SentPacket { bytes: MSS, ..Default::default() };
        cc.on_ack(Instant::ZERO, &p, &rtt);
        cc.on_ack_batch(Instant::ZERO, &AckBatch::default(), &rtt);
        // cwnd 11 packets per 100 ms, x1.25 = 137_500 bytes/s: a packet every 7.27 ms once the burst is spent.
        let t = Instant::from_millis(1000);
        for _ in 0..11 {
            cc.on_sent(t, &p, 0);
        }
        let next = cc.earliest_departure_time().unwrap();
        // 11 x 7272 us after a floor 72727 us back (integer microseconds): 7265 us.
        assert_eq!(next - t, Duration::from_micros(7_265));
    }
}
