//! No congestion control: a fixed window that never shrinks on loss, with an
//! optional pacing rate. The TCP "THERMAL" idea (`shared/seeds/tcp-thermal.txt`):
//! on a lossy link with few competitors, backing off only wastes the link.

use super::{Controller, Pacer, SentPacket};
use crate::rtt::RttEstimator;
use crate::time::Instant;

#[derive(Clone, Debug, PartialEq)]
pub struct FixedConfig {
    /// Packets that may be in flight.
    pub window_packets: u64,
    /// Pacing rate in bytes per second. Takes precedence over `pace_by_rtt`.
    pub pacing_rate: Option<u64>,
    /// Without a fixed rate: spread each window over a round trip (1.25 x window / srtt)
    /// instead of sending it as a burst.
    pub pace_by_rtt: bool,
}

impl Default for FixedConfig {
    fn default() -> Self {
        FixedConfig { window_packets: 256, pacing_rate: None, pace_by_rtt: false }
    }
}

impl FixedConfig {
    pub fn window_packets(mut self, packets: u64) -> Self {
        self.window_packets = packets.max(1);
        self
    }
    pub fn pacing_rate(mut self, bytes_per_second: Option<u64>) -> Self {
        self.pacing_rate = bytes_per_second.filter(|&r| r > 0);
        self
    }
    pub fn pace_by_rtt(mut self, on: bool) -> Self {
        self.pace_by_rtt = on;
        self
    }
}

#[derive(Debug)]
pub struct Fixed {
    window: u64,
    pacer: Option<Pacer>,
    pace_by_rtt: bool,
}

impl Fixed {
    pub fn new(config: FixedConfig, mss: u64) -> Self {
        let pacer = match config.pacing_rate {
            Some(rate) => Some(Pacer::new(rate, 4 * mss)),
            // The rate is unknown until the first RTT sample; until then, no pacing.
            None if config.pace_by_rtt => Some(Pacer::new(0, 10 * mss)),
            None => None,
        };
        Fixed {
            window: config.window_packets.max(1) * mss,
            pace_by_rtt: config.pacing_rate.is_none() && config.pace_by_rtt,
            pacer,
        }
    }
}

impl Controller for Fixed {
    fn on_sent(&mut self, now: Instant, packet: &SentPacket, _bytes_in_flight: u64) -> u64 {
        if let Some(p) = &mut self.pacer {
            p.on_sent(now, packet.bytes);
        }
        0
    }

    fn on_ack(&mut self, _now: Instant, _packet: &SentPacket, rtt: &RttEstimator) {
        if let (true, Some(p)) = (self.pace_by_rtt, &mut self.pacer) {
            p.follow_window(self.window, rtt);
        }
    }

    fn on_congestion_event(&mut self, _now: Instant, _sent: Instant, _lost_bytes: u64) {
        // Deliberately nothing: this controller never backs off.
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn max_timeout_doublings(&self) -> u32 {
        // One doubling rides out a delay spike; more would only stall a lossy link.
        1
    }

    fn earliest_departure_time(&self) -> Option<Instant> {
        self.pacer.as_ref().and_then(Pacer::earliest_departure_time)
    }

    fn pacing_rate(&self) -> Option<u64> {
        self.pacer.as_ref().and_then(Pacer::active_rate)
    }

    fn name(&self) -> &str {
        "none"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(bytes: u64) -> SentPacket {
        SentPacket { bytes, ..Default::default() }
    }

    #[test]
    fn never_backs_off() {
        let mut cc = Fixed::new(FixedConfig::default().window_packets(10), 1000);
        assert_eq!(cc.window(), 10_000);
        cc.on_congestion_event(Instant::from_millis(5), Instant::ZERO, 1000);
        cc.on_retransmission_timeout(Instant::from_millis(6));
        assert_eq!(cc.window(), 10_000);
        assert_eq!(cc.earliest_departure_time(), None);
    }

    #[test]
    fn paces_a_window_per_round_trip() {
        let mut cc = Fixed::new(FixedConfig::default().window_packets(10).pace_by_rtt(true), 1000);
        let mut rtt = RttEstimator::new(crate::time::Duration::from_millis(100));
        assert_eq!(cc.earliest_departure_time(), None, "no rate before the first sample");
        rtt.update(crate::time::Duration::from_millis(100));
        cc.on_ack(Instant::ZERO, &packet(1000), &rtt);
        // 10 000 bytes per 100 ms x 1.25 = 125 000 bytes/s: 8 ms a packet once the burst is spent.
        let t = Instant::from_millis(1000);
        for _ in 0..11 {
            cc.on_sent(t, &packet(1000), 0);
        }
        assert_eq!(cc.earliest_departure_time().unwrap() - t, crate::time::Duration::from_millis(8));
    }
}
