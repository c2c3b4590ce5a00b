//! CUBIC (RFC 9438) with HyStart++ slow start (RFC 9406).
//!
//! After a loss the window is cut to β = 0.7 of what it was (W_max) and then
//! follows a cubic function of the time since the cut, W(t) = C (t − K)³ +
//! W_max: fast growth back towards W_max, a plateau around it, then probing
//! beyond it. Where the cubic curve is slower than a Reno flow would be, CUBIC
//! follows the Reno estimate (the "Reno-friendly region", RFC 9438 4.3).
//! Slow start leaves early when round trips start to grow (HyStart++), rather
//! than overshooting into a queue until it drops.
//!
//! Windows are computed in segments (`mss`) as floating point, as the RFC
//! writes them, and kept in bytes.

use super::{AckBatch, Controller, Pacer, SentPacket};
use crate::rtt::RttEstimator;
use crate::time::{Duration, Instant};

/// RFC 9438 4.1: C, in segments per second cubed.
const C: f64 = 0.4;
/// RFC 9438 4.6: the multiplicative decrease factor.
const BETA: f64 = 0.7;
/// RFC 9438 4.3: Reno-friendly additive increase, 3(1 − β)/(1 + β).
const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

// RFC 9406 4.3 constants.
const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
const MIN_RTT_DIVISOR: u64 = 8;
const N_RTT_SAMPLE: u32 = 8;
const CSS_GROWTH_DIVISOR: u64 = 4;
const CSS_ROUNDS: u32 = 5;
/// Slow start's growth per ack without pacing (RFC 9406: L = 8; paced, L is unbounded).
const UNPACED_ABC_LIMIT: u64 = 8;

#[derive(Clone, Debug, PartialEq)]
pub struct CubicConfig {
    /// Initial window in packets.
    pub initial_window: u64,
    /// Pace at 1.25 x cwnd / srtt instead of sending each window as a burst.
    pub pacing: bool,
    /// HyStart++: leave slow start when round trips grow (RFC 9406).
    pub hystart: bool,
}

impl Default for CubicConfig {
    fn default() -> Self {
        CubicConfig { initial_window: 10, pacing: true, hystart: true }
    }
}

impl CubicConfig {
    pub fn initial_window(mut self, packets: u64) -> Self {
        self.initial_window = packets.max(1);
        self
    }
    pub fn pacing(mut self, on: bool) -> Self {
        self.pacing = on;
        self
    }
    pub fn hystart(mut self, on: bool) -> Self {
        self.hystart = on;
        self
    }
}

/// Where slow start is (RFC 9406).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Start {
    Slow,
    /// Conservative slow start: growth at a quarter of the rate, for a few rounds, unless the RTT falls back.
    Conservative { baseline_min_rtt: Duration, rounds: u32 },
    Done,
}

#[derive(Debug)]
pub struct Cubic {
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    hystart: bool,
    start: Start,
    /// HyStart++ rounds: a round ends when a packet sent after it began is acknowledged.
    round_end_seq: u64,
    largest_sent_seq: u64,
    last_round_min_rtt: Option<Duration>,
    current_round_min_rtt: Option<Duration>,
    round_samples: u32,
    /// The highest sequence number this ack acknowledged (for HyStart++ rounds).
    largest_acked_seq: Option<u64>,
    /// The window before the latest reduction, in segments; 0 before any.
    w_max: f64,
    /// K: seconds from the reduction until the cubic curve is back at W_max.
    k: f64,
    /// When the current congestion-avoidance epoch began.
    epoch_start: Option<Instant>,
    /// The Reno-friendly estimate, in segments.
    w_est: f64,
    recovery_start: Option<Instant>,
    /// Bytes this ack newly acknowledged that count for growth.
    acked: u64,
    pacer: Option<Pacer>,
}

impl Cubic {
    pub fn new(config: CubicConfig, mss: u64) -> Self {
        Cubic {
            mss,
            cwnd: config.initial_window.max(1) * mss,
            ssthresh: u64::MAX,
            hystart: config.hystart,
            start: Start::Slow,
            round_end_seq: 0,
            largest_sent_seq: 0,
            last_round_min_rtt: None,
            current_round_min_rtt: None,
            round_samples: 0,
            largest_acked_seq: None,
            w_max: 0.0,
            k: 0.0,
            epoch_start: None,
            w_est: 0.0,
            recovery_start: None,
            acked: 0,
            pacer: config.pacing.then(|| Pacer::new(0, 10 * mss)),
        }
    }

    fn segments(&self, bytes: u64) -> f64 {
        bytes as f64 / self.mss as f64
    }

    /// RFC 9438 4.6 and 4.7: multiplicative decrease with fast convergence.
    fn reduce(&mut self, now: Instant, timeout: bool) {
        let cwnd = self.segments(self.cwnd);
        // Fast convergence: a flow whose window keeps falling short of its last maximum releases more.
        self.w_max = if cwnd < self.w_max { cwnd * (1.0 + BETA) / 2.0 } else { cwnd };
        let reduced = ((cwnd * BETA) * self.mss as f64) as u64;
        self.ssthresh = reduced.max(2 * self.mss);
        self.cwnd = if timeout { self.mss } else { self.ssthresh };
        // 4.2: K is when the curve, starting from the reduced window, is back at W_max.
        self.k = ((self.w_max - self.segments(self.cwnd)) / C).max(0.0).cbrt();
        self.epoch_start = None;
        self.recovery_start = Some(now);
        self.acked = 0;
        self.start = Start::Done;
    }

    fn slow_start_limit(&self) -> u64 {
        if self.hystart && self.pacer.is_none() { UNPACED_ABC_LIMIT * self.mss } else { u64::MAX }
    }

    /// HyStart++ (RFC 9406 4.3), once per ack in slow start.
    fn hystart_round(&mut self, largest_acked_seq: Option<u64>, latest_rtt: Duration) {
        if !self.hystart {
            return;
        }
        if largest_acked_seq.is_some_and(|seq| seq >= self.round_end_seq) {
            // A new round: remember the last one's minimum.
            self.round_end_seq = self.largest_sent_seq + 1;
            self.last_round_min_rtt = self.current_round_min_rtt.take();
            self.round_samples = 0;
            if let Start::Conservative { rounds, .. } = &mut self.start {
                *rounds += 1;
                if *rounds >= CSS_ROUNDS {
                    // RFC 9406: after CSS_ROUNDS, congestion avoidance from the current window.
                    self.ssthresh = self.cwnd;
                    self.start = Start::Done;
                    return;
                }
            }
        }
        self.current_round_min_rtt = Some(self.current_round_min_rtt.map_or(latest_rtt, |m| m.min(latest_rtt)));
        self.round_samples += 1;
        let (Some(current), Some(last)) = (self.current_round_min_rtt, self.last_round_min_rtt) else { return };
        match self.start {
            Start::Slow if self.round_samples >= N_RTT_SAMPLE => {
                let thresh = (last / MIN_RTT_DIVISOR).max(MIN_RTT_THRESH).min(MAX_RTT_THRESH);
                if current >= last + thresh {
                    self.start = Start::Conservative { baseline_min_rtt: current, rounds: 0 };
                }
            }
            Start::Conservative { baseline_min_rtt, .. } if current < baseline_min_rtt => {
                // The RTT came back down: the increase was spurious, resume slow start.
                self.start = Start::Slow;
            }
            _ => {}
        }
    }

    /// RFC 9438 4.2 to 4.5: the window after `acked` bytes in congestion avoidance.
    fn avoid(&mut self, now: Instant, acked: u64, rtt: &RttEstimator) {
        let cwnd = self.segments(self.cwnd);
        let epoch = match self.epoch_start {
            Some(epoch) => epoch,
            None => {
                // A new epoch: after a reduction, from the reduced window; after slow start
                // (no loss yet), the curve's plateau is the current window (K = 0).
                if self.w_max == 0.0 {
                    self.w_max = cwnd;
                    self.k = 0.0;
                }
                self.w_est = cwnd;
                self.epoch_start = Some(now);
                now
            }
        };
        let t = (now - epoch).as_secs_f64();
        let rtt_s = rtt.get().as_secs_f64();
        let target = C * (t + rtt_s - self.k).powi(3) + self.w_max;
        let acked_segments = self.segments(acked);
        // 4.3: Reno-friendly estimate.
        self.w_est += ALPHA * acked_segments / cwnd;
        let next = if target < self.w_est {
            self.w_est
        } else {
            // 4.4 and 4.5: towards the target, by at most half the window per round trip.
            let target = target.min(1.5 * cwnd);
            if target > cwnd { cwnd + (target - cwnd) * acked_segments / cwnd } else { cwnd }
        };
        self.cwnd = ((next * self.mss as f64) as u64).max(self.cwnd);
    }
}

impl Controller for Cubic {
    fn on_sent(&mut self, now: Instant, packet: &SentPacket, _bytes_in_flight: u64) -> u64 {
        if let Some(p) = &mut self.pacer {
            p.on_sent(now, packet.bytes);
        }
        self.largest_sent_seq = self.largest_sent_seq.max(packet.seq);
        0
    }

    fn on_ack(&mut self, _now: Instant, packet: &SentPacket, _rtt: &RttEstimator) {
        if self.recovery_start.is_some_and(|start| packet.sent <= start) {
            return;
        }
        self.acked += packet.bytes;
        self.largest_acked_seq = Some(self.largest_acked_seq.map_or(packet.seq, |s| s.max(packet.seq)));
    }

    fn on_ack_batch(&mut self, now: Instant, batch: &AckBatch, rtt: &RttEstimator) {
        let acked = std::mem::take(&mut self.acked);
        let largest_acked = self.largest_acked_seq.take();
        if acked > 0 && !batch.app_limited {
            if self.cwnd < self.ssthresh && self.start != Start::Done {
                self.hystart_round(largest_acked, rtt.latest());
                let growth = acked.min(self.slow_start_limit());
                self.cwnd += match self.start {
                    Start::Conservative { .. } => growth / CSS_GROWTH_DIVISOR,
                    _ => growth,
                };
            } else {
                self.start = Start::Done;
                self.avoid(now, acked, rtt);
            }
        }
        if let Some(p) = &mut self.pacer {
            p.follow_window(self.cwnd, rtt);
        }
    }

    fn on_congestion_event(&mut self, now: Instant, _sent: Instant, _lost_bytes: u64) {
        self.reduce(now, false);
    }

    fn on_retransmission_timeout(&mut self, now: Instant) {
        self.reduce(now, true);
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn wants_every_ack(&self) -> bool {
        self.cwnd < self.ssthresh && self.start != Start::Done
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
        "cubic"
    }
}

#[cfg(test)]
mod tests {
    use super::super::script::{at, Script, MSS};
    use super::*;

    fn unpaced(iw: u64, hystart: bool) -> Cubic {
        Cubic::new(CubicConfig::default().initial_window(iw).pacing(false).hystart(hystart), MSS)
    }

    #[test]
    fn a_loss_cuts_to_seven_tenths_and_the_curve_returns_to_the_old_maximum_after_k() {
        let mut s = Script::new(unpaced(100, false));
        let flight = s.send(0, 100);
        s.lose(100, &flight[0]);
        assert_eq!(s.cwnd(), 70, "beta = 0.7");
        assert_eq!(s.cc.ssthresh(), Some(70 * MSS));
        // K = cbrt((100 - 70) / 0.4) = 4.217 s; one round trip is 100 ms.
        assert!((s.cc.k - 4.217).abs() < 0.001, "K = {}", s.cc.k);
        let mut t = 200;
        while t < 100 + 4_100 {
            t = s.round(t, 100);
        }
        let at_k = s.cwnd();
        assert!((96..=101).contains(&at_k), "back near W_max = 100 at K: {at_k}");
        while t < 100 + 5_000 {
            t = s.round(t, 100);
        }
        assert!(s.cwnd() <= 102, "a plateau around W_max: {}", s.cwnd());
        while t < 100 + 9_000 {
            t = s.round(t, 100);
        }
        // Beyond the plateau the curve probes faster and faster: C (t - K)^3 = 0.4 * 4.78^3 = 44 more.
        assert!(s.cwnd() >= 135, "probing beyond W_max: {}", s.cwnd());
    }

    #[test]
    fn short_round_trips_follow_the_reno_friendly_estimate() {
        // 10 ms round trips, 20 packets: the cubic curve barely moves in a second, Reno's does.
        let mut s = Script::with_rtt(unpaced(20, false), 10);
        let flight = s.send(0, 20);
        s.lose(10, &flight[0]);
        assert_eq!(s.cwnd(), 14);
        let mut t = 20;
        for _ in 0..100 {
            t = s.round(t, 10);
        }
        // The Reno-friendly region adds alpha = 0.53 packets per round trip: about 53 in 100 rounds.
        let cwnd = s.cwnd();
        assert!((14 + 45..=14 + 60).contains(&cwnd), "{cwnd}");
    }

    #[test]
    fn fast_convergence_releases_more_when_the_maximum_falls() {
        let mut s = Script::new(unpaced(100, false));
        let flight = s.send(0, 100);
        s.lose(100, &flight[0]);
        assert_eq!(s.cc.w_max, 100.0);
        // A second loss before the window got back to 100: W_max = 70 * (1 + 0.7) / 2 = 59.5.
        let next = s.send(200, 10);
        s.lose(300, &next[0]);
        assert!((s.cc.w_max - 59.5).abs() < 1e-9, "{}", s.cc.w_max);
        assert_eq!(s.cwnd(), 49);
        s.cc.on_retransmission_timeout(at(400));
        assert_eq!(s.cwnd(), 1, "a timeout leaves one packet");
    }

    #[test]
    fn hystart_leaves_slow_start_when_round_trips_grow() {
        let mut s = Script::new(unpaced(10, true));
        let mut t = 0;
        // Flat round trips: slow start doubles.
        for _ in 0..2 {
            t = s.round(t, 100);
        }
        assert_eq!(s.cwnd(), 40);
        assert_eq!(s.cc.start, Start::Slow);
        // The queue builds: 100 ms, then 120 ms round trips (threshold: max(4, min(16, 100 / 8)) = 12.5 ms).
        s.sample_rtt(120);
        t = s.round(t, 120);
        assert!(matches!(s.cc.start, Start::Conservative { .. }), "{:?}", s.cc.start);
        let (before, sent) = (s.cc.window(), s.cwnd());
        t = s.round(t, 120);
        assert_eq!(s.cc.window(), before + sent * MSS / 4, "conservative slow start grows a quarter as fast");
        for _ in 0..CSS_ROUNDS {
            t = s.round(t, 120);
        }
        assert_eq!(s.cc.start, Start::Done, "after CSS_ROUNDS, congestion avoidance");
        assert!(s.cc.ssthresh().is_some_and(|ss| ss <= s.cc.window()), "ssthresh is the window CSS ended with");
        // Back in slow start if the round trip falls below the baseline? Not once in congestion avoidance.
        s.sample_rtt(90);
        s.round(t, 90);
        assert_eq!(s.cc.start, Start::Done);
    }

    #[test]
    fn a_round_trip_back_below_the_baseline_resumes_slow_start() {
        let mut s = Script::new(unpaced(10, true));
        let mut t = s.round(0, 100);
        t = s.round(t, 100);
        s.sample_rtt(120);
        t = s.round(t, 120);
        assert!(matches!(s.cc.start, Start::Conservative { .. }));
        // The increase was a blip: the next round's RTT is below the CSS baseline.
        s.rtt = crate::rtt::RttEstimator::new(crate::time::Duration::from_millis(100));
        s.sample_rtt(100);
        s.round(t, 100);
        assert_eq!(s.cc.start, Start::Slow);
    }

    #[test]
    fn without_hystart_slow_start_only_ends_at_a_loss() {
        let mut s = Script::new(unpaced(10, false));
        let mut t = 0;
        for _ in 0..5 {
            s.sample_rtt(100 + t / 10);
            t = s.round(t, 100);
        }
        assert_eq!(s.cwnd(), 320);
        assert_eq!(s.cc.ssthresh(), None);
    }
}
