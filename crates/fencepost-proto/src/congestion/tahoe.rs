//! TCP Tahoe (Jacobson 1988; RFC 5681 without fast recovery), as in
//! `shared/seeds/congestion-control-notebook.txt`: slow start to a threshold,
//! then one packet per window per round trip; on loss the threshold halves
//! and the window drops to a single packet.

use super::{pacing_rate, Controller, Pacer, SentPacket};
use crate::rtt::RttEstimator;
use crate::time::Instant;

#[derive(Clone, Debug, PartialEq)]
pub struct TahoeConfig {
    /// Initial window in packets.
    pub initial_window: u64,
    /// Initial slow-start threshold in packets; `None` is unbounded (RFC 5681: "arbitrarily high").
    pub initial_ssthresh: Option<u64>,
    /// Pace at 1.25 x cwnd / srtt instead of sending each window as a burst.
    pub pacing: bool,
}

impl Default for TahoeConfig {
    fn default() -> Self {
        TahoeConfig { initial_window: 4, initial_ssthresh: None, pacing: true }
    }
}

impl TahoeConfig {
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

#[derive(Debug)]
pub struct Tahoe {
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    /// Bytes acknowledged in congestion avoidance since the window last grew.
    avoidance_credit: u64,
    pacer: Option<Pacer>,
}

impl Tahoe {
    pub fn new(config: TahoeConfig, mss: u64) -> Self {
        Tahoe {
            mss,
            cwnd: config.initial_window.max(1) * mss,
            ssthresh: config.initial_ssthresh.map_or(u64::MAX, |p| p * mss),
            avoidance_credit: 0,
            pacer: config.pacing.then(|| Pacer::new(0, 10 * mss)),
        }
    }

    fn collapse(&mut self) {
        // RFC 5681 (4): ssthresh = max(FlightSize / 2, 2*SMSS); Tahoe then restarts from one packet.
        self.ssthresh = (self.cwnd / 2).max(2 * self.mss);
        self.cwnd = self.mss;
        self.avoidance_credit = 0;
    }
}

impl Controller for Tahoe {
    fn on_sent(&mut self, now: Instant, packet: &SentPacket, _bytes_in_flight: u64) -> u64 {
        if let Some(p) = &mut self.pacer {
            p.on_sent(now, packet.bytes);
        }
        0
    }

    fn on_ack(&mut self, _now: Instant, packet: &SentPacket, rtt: &RttEstimator) {
        let bytes = packet.bytes;
        if self.cwnd < self.ssthresh {
            // Slow start: one packet per packet acknowledged.
            self.cwnd += bytes.min(self.mss);
        } else {
            // Congestion avoidance: one packet per window acknowledged.
            self.avoidance_credit += bytes;
            if self.avoidance_credit >= self.cwnd {
                self.avoidance_credit -= self.cwnd;
                self.cwnd += self.mss;
            }
        }
        if let Some(p) = &mut self.pacer {
            if rtt.has_sample() {
                p.set_rate(pacing_rate(self.cwnd, rtt));
            }
        }
    }

    fn on_congestion_event(&mut self, _now: Instant, _sent: Instant, _lost_bytes: u64) {
        self.collapse();
    }

    fn on_retransmission_timeout(&mut self, _now: Instant) {
        self.collapse();
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn ssthresh(&self) -> Option<u64> {
        (self.ssthresh != u64::MAX).then_some(self.ssthresh)
    }

    fn earliest_departure_time(&self) -> Option<Instant> {
        self.pacer.as_ref().and_then(Pacer::earliest_departure_time)
    }

    fn name(&self) -> &str {
        "tahoe"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(bytes: u64) -> SentPacket {
        SentPacket { bytes, ..Default::default() }
    }
    use crate::time::Duration;

    const MSS: u64 = 1000;

    fn ack(cc: &mut Tahoe, n: u64) {
        let rtt = RttEstimator::new(Duration::from_millis(100));
        for _ in 0..n {
            cc.on_ack(Instant::from_millis(1), &packet(MSS), &rtt);
        }
    }

    #[test]
    fn slow_start_then_avoidance_then_collapse() {
        // The notebook's TahoeStrategy(10, 1): ssthresh 10 packets, initial window 1.
        let mut cc = Tahoe::new(
            TahoeConfig::default().initial_window(1).initial_ssthresh(Some(10)).pacing(false),
            MSS,
        );
        assert_eq!(cc.window(), MSS);
        ack(&mut cc, 9);
        assert_eq!(cc.window(), 10 * MSS, "slow start adds a packet per ack");
        ack(&mut cc, 9);
        assert_eq!(cc.window(), 10 * MSS, "avoidance waits for a whole window");
        ack(&mut cc, 1);
        assert_eq!(cc.window(), 11 * MSS);
        cc.on_congestion_event(Instant::from_millis(2), Instant::from_millis(1), MSS);
        assert_eq!(cc.window(), MSS, "Tahoe restarts from one packet");
        assert_eq!(cc.ssthresh(), Some(5500));
        ack(&mut cc, 4);
        assert_eq!(cc.window(), 5 * MSS);
        cc.on_retransmission_timeout(Instant::from_millis(3));
        assert_eq!((cc.window(), cc.ssthresh()), (MSS, Some(2500)));
        cc.on_retransmission_timeout(Instant::from_millis(4));
        assert_eq!((cc.window(), cc.ssthresh()), (MSS, Some(2 * MSS)), "ssthresh floor is two packets");
    }

    #[test]
    fn paces_at_a_quarter_above_cwnd_per_rtt() {
        let mut cc = Tahoe::new(TahoeConfig::default().initial_window(10), MSS);
        let mut rtt = RttEstimator::new(Duration::from_millis(100));
        rtt.update(Duration::from_millis(100));
        cc.on_ack(Instant::ZERO, &packet(MSS), &rtt);
        // cwnd 11 packets per 100 ms, x1.25 = 137_500 bytes/s: a packet every 7.27 ms once the burst is spent.
        let t = Instant::from_millis(1000);
        for _ in 0..11 {
            cc.on_sent(t, &packet(MSS), 0);
        }
        let next = cc.earliest_departure_time().unwrap();
        // 11 x 7272 us after a floor 72727 us back (integer microseconds): 7265 us.
        assert_eq!(next - t, Duration::from_micros(7_265));
    }
}
