//! Round-trip time estimation and the retransmission timeout (RFC 6298).
//!
//! Samples come from echoed timestamps. A timestamp names one transmission, so a
//! retransmitted packet yields a clean sample: Karn's ambiguity does not arise.

use crate::time::Duration;

/// RFC 6298 section 2: "G" is the clock granularity; ours is one millisecond
/// to keep `4 * RTTVAR` from collapsing to nothing on a jitter-free link.
const GRANULARITY: Duration = Duration::from_millis(1);

#[derive(Clone, Debug)]
pub struct RttEstimator {
    smoothed: Option<Duration>,
    var: Duration,
    latest: Duration,
    min: Duration,
    initial: Duration,
}

impl RttEstimator {
    pub fn new(initial: Duration) -> Self {
        RttEstimator { smoothed: None, var: initial / 2, latest: initial, min: Duration::MAX, initial }
    }

    /// Feeds one sample (already corrected for the peer's ack delay).
    pub fn update(&mut self, sample: Duration) {
        self.latest = sample;
        self.min = self.min.min(sample);
        match self.smoothed {
            // RFC 6298 (2.2): SRTT <- R, RTTVAR <- R/2.
            None => {
                self.smoothed = Some(sample);
                self.var = sample / 2;
            }
            // RFC 6298 (2.3): RTTVAR <- 3/4 RTTVAR + 1/4 |SRTT - R'|; SRTT <- 7/8 SRTT + 1/8 R'.
            Some(srtt) => {
                let deviation = if srtt > sample { srtt - sample } else { sample - srtt };
                self.var = Duration::from_micros((3 * self.var.total_micros() + deviation.total_micros()) / 4);
                self.smoothed = Some(Duration::from_micros((7 * srtt.total_micros() + sample.total_micros()) / 8));
            }
        }
    }

    /// Smoothed RTT, or the configured initial RTT before the first sample.
    pub fn get(&self) -> Duration {
        self.smoothed.unwrap_or(self.initial)
    }
    pub fn has_sample(&self) -> bool {
        self.smoothed.is_some()
    }
    pub fn latest(&self) -> Duration {
        self.latest
    }
    pub fn var(&self) -> Duration {
        self.var
    }
    /// Smallest sample seen, or the initial RTT before the first sample.
    pub fn min(&self) -> Duration {
        if self.min == Duration::MAX { self.initial } else { self.min }
    }

    /// RFC 6298 (2.4): RTO <- SRTT + max(G, K*RTTVAR), K = 4, plus the peer's
    /// maximum ack delay (the peer may hold an ack that long), clamped to bounds.
    ///
    /// `max_rto` bounds what the variance adds, never the round trip itself: a timeout
    /// shorter than the path's RTT fires before any ack can come, every time. On a slow
    /// link a queued packet alone takes seconds (1.2 s for 1.5 kB at 10 kbit/s), and with
    /// the default 4 s bound every timeout of a 100 kB transfer at 10 kbit/s was spurious
    /// (42 packets sent twice, their RTT 27 s on average behind a queue the timeouts
    /// themselves filled). So the bound is at least a quarter more than the larger of the
    /// smoothed and the latest sample, plus the peer's ack delay.
    pub fn rto(&self, max_ack_delay: Duration, min_rto: Duration, max_rto: Duration) -> Duration {
        let srtt = self.get();
        let base = srtt + GRANULARITY.max(self.var.saturating_mul(4)) + max_ack_delay;
        // Before a sample both are the initial RTT.
        let round_trip = srtt.max(self.latest);
        let ceiling = max_rto.max(round_trip + round_trip / 4 + max_ack_delay);
        base.max(min_rto).min(ceiling)
    }
}

impl std::ops::Div<u64> for Duration {
    type Output = Duration;
    fn div(self, rhs: u64) -> Duration {
        Duration::from_micros(self.total_micros() / rhs.max(1))
    }
}

/// Samples a connection keeps for reports, in bounded memory: every sample counts
/// toward the count and the mean; at most [`RttHistory::LIMIT`] are kept, evenly
/// spaced over the connection's life (when full, every other one goes and from then
/// on only every second sample is kept, then every fourth...).
#[derive(Clone, Debug, Default)]
pub struct RttHistory {
    kept: Vec<u32>,
    stride: u64,
    count: u64,
    sum_us: u64,
}

impl RttHistory {
    pub const LIMIT: usize = 16_384;

    pub fn push(&mut self, sample_us: u32) {
        let stride = self.stride.max(1);
        if self.count % stride == 0 {
            self.kept.push(sample_us);
            if self.kept.len() >= Self::LIMIT {
                let mut i = 0;
                self.kept.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride = stride * 2;
            }
        }
        self.count_only(sample_us);
    }

    /// Counts a sample into the count and the mean without keeping it: a connection that
    /// does not record its samples still reports their mean.
    pub fn count_only(&mut self, sample_us: u32) {
        self.count += 1;
        self.sum_us = self.sum_us.saturating_add(sample_us as u64);
    }

    /// The kept samples (all of them while fewer than the limit arrived), in microseconds.
    pub fn samples(&self) -> &[u32] {
        &self.kept
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The mean of every sample, kept or not.
    pub fn mean_us(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_us as f64 / self.count as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that does not keep its samples still counts them into the mean.
    #[test]
    fn counted_samples_make_the_mean_without_being_kept() {
        let mut h = RttHistory::default();
        h.count_only(40_000);
        h.count_only(60_000);
        h.push(80_000);
        assert_eq!(h.count(), 3);
        assert_eq!(h.mean_us(), Some(60_000.0));
        assert_eq!(h.samples(), &[80_000]);
    }

    #[test]
    fn the_history_stays_bounded_and_evenly_spread() {
        let mut h = RttHistory::default();
        for i in 0..1_000_000u32 {
            h.push(i);
        }
        assert_eq!(h.count(), 1_000_000);
        assert!(h.samples().len() < RttHistory::LIMIT && h.samples().len() > RttHistory::LIMIT / 2, "{}", h.samples().len());
        assert_eq!(h.mean_us(), Some(499_999.5));
        // Evenly spaced: one stride apart from the first sample on.
        let stride = h.samples()[1] - h.samples()[0];
        assert!(h.samples().windows(2).all(|w| w[1] - w[0] == stride));
        assert_eq!(h.samples()[0], 0);
    }

    #[test]
    fn follows_rfc6298_smoothing() {
        let mut rtt = RttEstimator::new(Duration::from_millis(100));
        assert_eq!(rtt.get(), Duration::from_millis(100));
        rtt.update(Duration::from_millis(40));
        assert_eq!(rtt.get(), Duration::from_millis(40));
        assert_eq!(rtt.var(), Duration::from_millis(20));
        rtt.update(Duration::from_millis(80));
        // SRTT = 7/8*40 + 1/8*80 = 45; RTTVAR = 3/4*20 + 1/4*40 = 25.
        assert_eq!(rtt.get(), Duration::from_millis(45));
        assert_eq!(rtt.var(), Duration::from_millis(25));
        assert_eq!(rtt.min(), Duration::from_millis(40));
        // RTO = 45 + 4*25 + 5 = 150 ms, inside the bounds.
        let rto = rtt.rto(Duration::from_millis(5), Duration::from_millis(50), Duration::from_secs(4));
        assert_eq!(rto, Duration::from_millis(150));
        let clamped = rtt.rto(Duration::ZERO, Duration::from_millis(200), Duration::from_secs(4));
        assert_eq!(clamped, Duration::from_millis(200));
    }

    #[test]
    fn the_bound_caps_the_variance_never_the_round_trip() {
        let max_rto = Duration::from_secs(4);
        // A short round trip with a wild variance: the bound holds.
        let mut jittery = RttEstimator::new(Duration::from_millis(100));
        jittery.update(Duration::from_millis(100));
        jittery.update(Duration::from_secs(3));
        jittery.update(Duration::from_secs(3));
        // SRTT 780 ms, RTTVAR 1.2 s: 5.6 s unbounded.
        assert!(jittery.get() < Duration::from_secs(1));
        assert!(jittery.var() > Duration::from_secs(1));
        assert_eq!(jittery.rto(Duration::from_millis(5), Duration::from_millis(50), max_rto), max_rto);
        // Round trips of 10-12 s (a queue on a 10 kbit/s link): a quarter more than the
        // larger of the smoothed and the latest, plus the ack delay.
        let mut slow = RttEstimator::new(Duration::from_millis(100));
        slow.update(Duration::from_secs(10));
        slow.update(Duration::from_secs(12));
        assert_eq!(slow.get(), Duration::from_millis(10_250));
        assert_eq!(slow.rto(Duration::from_millis(5), Duration::from_millis(50), max_rto), Duration::from_millis(15_005));
        // The larger is the smoothed one once the samples fall again.
        slow.update(Duration::from_secs(2));
        assert_eq!(slow.get(), Duration::from_micros(9_218_750));
        assert_eq!(slow.rto(Duration::ZERO, Duration::from_millis(50), max_rto), Duration::from_micros(11_523_437));
    }
}
