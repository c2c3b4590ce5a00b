//! Pacing by departure time: each packet pushes the next allowed departure back
//! by its size over the rate, and a short burst is allowed after an idle period.

use super::pacing_rate;
use crate::rtt::RttEstimator;
use crate::time::{mul_div, Duration, Instant};

#[derive(Clone, Debug)]
pub struct Pacer {
    /// Bytes per second; 0 disables pacing.
    rate: u64,
    /// Bytes that may leave back to back after an idle period.
    burst: u64,
    next_departure: Instant,
}

impl Pacer {
    pub fn new(rate: u64, burst: u64) -> Self {
        Pacer { rate, burst, next_departure: Instant::ZERO }
    }

    pub fn set_rate(&mut self, rate: u64) {
        self.rate = rate;
    }

    pub fn set_burst(&mut self, bytes: u64) {
        self.burst = bytes;
    }

    /// Paces `window` bytes over 4/5 of the smoothed RTT ([`pacing_rate`]), once there is an RTT sample.
    pub fn follow_window(&mut self, window: u64, rtt: &RttEstimator) {
        if rtt.has_sample() {
            self.set_rate(pacing_rate(window, rtt));
        }
    }

    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// The rate, when pacing is on.
    pub fn active_rate(&self) -> Option<u64> {
        (self.rate > 0).then_some(self.rate)
    }

    fn time_for(&self, bytes: u64) -> Duration {
        Duration::from_micros(mul_div(bytes, 1_000_000, self.rate.max(1)) as u64)
    }

    pub fn on_sent(&mut self, now: Instant, bytes: u64) {
        if self.rate == 0 {
            return;
        }
        // Unused time older than one burst is forfeited: idleness does not bank credit forever.
        let floor = now - self.time_for(self.burst);
        if self.next_departure < floor {
            self.next_departure = floor;
        }
        self.next_departure += self.time_for(bytes);
    }

    pub fn earliest_departure_time(&self) -> Option<Instant> {
        (self.rate > 0).then_some(self.next_departure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spaces_packets_at_the_rate_after_a_burst() {
        // 1 MB/s, burst of two 1000-byte packets.
        let mut p = Pacer::new(1_000_000, 2000);
        let t0 = Instant::from_millis(100);
        p.on_sent(t0, 1000);
        assert!(p.earliest_departure_time().unwrap() <= t0, "first burst packet is free");
        p.on_sent(t0, 1000);
        assert_eq!(p.earliest_departure_time(), Some(t0));
        p.on_sent(t0, 1000);
        assert_eq!(p.earliest_departure_time(), Some(t0 + Duration::from_millis(1)));
        // Idle for a long time: only one burst of credit comes back.
        let t1 = t0 + Duration::from_secs(1);
        p.on_sent(t1, 1000);
        p.on_sent(t1, 1000);
        p.on_sent(t1, 1000);
        assert_eq!(p.earliest_departure_time(), Some(t1 + Duration::from_millis(1)));
        assert_eq!(Pacer::new(0, 0).earliest_departure_time(), None);
    }
}
