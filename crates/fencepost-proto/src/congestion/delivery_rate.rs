//! Delivery-rate estimation, as draft-cheng-iccrg-delivery-rate-estimation
//! describes it for TCP: each packet remembers how much had been delivered when
//! it left; when it is acknowledged, the bytes delivered since then over the
//! time they took is a sample of the path's delivery rate. Samples taken while
//! the application (not the window) limited sending are marked, since they
//! measure the application.

use super::{RateSample, SentPacket};
use crate::time::{Duration, Instant};

#[derive(Clone, Debug, Default)]
pub struct DeliveryRateEstimator {
    /// `C.delivered`: bytes acknowledged so far.
    delivered: u64,
    /// `C.delivered_time`: when `delivered` last grew.
    delivered_time: Instant,
    /// `C.first_sent_time`: departure of the packet that began the current flight.
    first_sent_time: Instant,
    /// `C.app_limited`: while non-zero, the delivered count at which the
    /// application-limited stretch ends (the last of its packets acknowledged).
    app_limited_until: u64,
    /// `C.lost`: bytes declared lost so far.
    lost: u64,
    /// The sample being gathered over one ack: the newest packet acknowledged so far.
    pending: Option<Pending>,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    prior_delivered: u64,
    is_app_limited: bool,
    send_elapsed: Duration,
    ack_elapsed: Duration,
    tx_in_flight: u64,
    lost_at_send: u64,
    rtt: Duration,
}

impl DeliveryRateEstimator {
    pub fn delivered(&self) -> u64 {
        self.delivered
    }
    pub fn lost(&self) -> u64 {
        self.lost
    }
    pub fn is_app_limited(&self) -> bool {
        self.app_limited_until != 0
    }
    /// Whether [`DeliveryRateEstimator::on_app_limited`] with `bytes_in_flight` would change nothing.
    pub fn app_limited_as(&self, bytes_in_flight: u64) -> bool {
        self.app_limited_until == (self.delivered + bytes_in_flight).max(1)
    }

    /// Fills in the delivery fields of a packet about to leave; `in_flight_before` excludes it.
    pub fn on_sent(&mut self, now: Instant, in_flight_before: u64, packet: &mut SentPacket) {
        if in_flight_before == 0 {
            // A new flight starts: its send phase is measured from here.
            self.first_sent_time = now;
            self.delivered_time = now;
        }
        packet.delivered = self.delivered;
        packet.delivered_time = self.delivered_time;
        packet.first_sent_time = self.first_sent_time;
        packet.is_app_limited = self.app_limited_until != 0;
        packet.lost = self.lost;
    }

    /// One packet newly acknowledged (in flight or already presumed lost: either way it arrived).
    pub fn on_acked(&mut self, now: Instant, packet: &SentPacket) {
        self.delivered += packet.bytes;
        self.delivered_time = now;
        // The newest packet acknowledged (the one that left with the most already delivered) gives the sample.
        if self.pending.is_none_or(|p| packet.delivered >= p.prior_delivered) {
            self.pending = Some(Pending {
                prior_delivered: packet.delivered,
                is_app_limited: packet.is_app_limited,
                send_elapsed: packet.sent.saturating_duration_since(packet.first_sent_time),
                ack_elapsed: now.saturating_duration_since(packet.delivered_time),
                tx_in_flight: packet.bytes_in_flight,
                lost_at_send: packet.lost,
                rtt: now.saturating_duration_since(packet.sent),
            });
            self.first_sent_time = packet.sent;
        }
    }

    pub fn on_lost(&mut self, bytes: u64) {
        self.lost += bytes;
    }

    /// The sender had nothing to send although the window allowed it: everything
    /// in flight now was sent under an application limit.
    pub fn on_app_limited(&mut self, bytes_in_flight: u64) {
        self.app_limited_until = (self.delivered + bytes_in_flight).max(1);
    }

    /// Ends one ack: the sample from the packets it acknowledged, if it is a valid one.
    /// Intervals shorter than `min_rtt` are discarded (ack compression would inflate them).
    pub fn take_sample(&mut self, min_rtt: Duration) -> Option<RateSample> {
        if self.app_limited_until != 0 && self.delivered > self.app_limited_until {
            self.app_limited_until = 0;
        }
        let p = self.pending.take()?;
        let interval = p.send_elapsed.max(p.ack_elapsed);
        let delivered = self.delivered - p.prior_delivered;
        if interval < min_rtt || interval == Duration::ZERO || delivered == 0 {
            return None;
        }
        Some(RateSample {
            delivered,
            interval,
            delivery_rate: delivered as f64 / interval.as_secs_f64(),
            is_app_limited: p.is_app_limited,
            prior_delivered: p.prior_delivered,
            tx_in_flight: p.tx_in_flight,
            lost: self.lost - p.lost_at_send,
            rtt: p.rtt,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(est: &mut DeliveryRateEstimator, now: Instant, in_flight: u64, seq: u64) -> SentPacket {
        let mut p = SentPacket { seq, sent: now, bytes: 1000, ..Default::default() };
        est.on_sent(now, in_flight, &mut p);
        p.bytes_in_flight = in_flight + 1000;
        p
    }

    #[test]
    fn a_steady_flight_samples_the_bottleneck_rate() {
        // Ten 1000-byte packets leave 1 ms apart; the path returns an ack every 1 ms
        // after a 50 ms round trip: 1 MB/s.
        let mut est = DeliveryRateEstimator::default();
        let t0 = Instant::from_millis(100);
        let packets: Vec<SentPacket> =
            (0..10).map(|i| send(&mut est, t0 + Duration::from_millis(i), i * 1000, i)).collect();
        let mut samples = Vec::new();
        for (i, p) in packets.iter().enumerate() {
            let now = t0 + Duration::from_millis(50 + i as u64);
            est.on_acked(now, p);
            samples.extend(est.take_sample(Duration::from_millis(1)));
        }
        let last = samples.last().expect("samples once the interval passes the min RTT");
        assert_eq!(last.delivered, 10_000);
        assert_eq!(last.interval, Duration::from_millis(59), "ack phase: from the flight's start to the last ack");
        assert!(!last.is_app_limited);
        assert_eq!(last.rtt, Duration::from_millis(50));
        // Once the flight is under way, a new packet's sample spans exactly its own round of deliveries.
        let p = send(&mut est, t0 + Duration::from_millis(60), 0, 10);
        est.on_acked(t0 + Duration::from_millis(110), &p);
        let s = est.take_sample(Duration::from_millis(1)).unwrap();
        assert_eq!((s.delivered, s.interval), (1000, Duration::from_millis(50)));
        assert!((s.delivery_rate - 20_000.0).abs() < 1e-6);
    }

    #[test]
    fn app_limited_marks_last_until_their_packets_are_delivered() {
        let mut est = DeliveryRateEstimator::default();
        let t0 = Instant::from_millis(10);
        let a = send(&mut est, t0, 0, 0);
        est.on_app_limited(1000);
        assert!(est.is_app_limited());
        let b = send(&mut est, t0 + Duration::from_millis(1), 1000, 1);
        assert!(!a.is_app_limited && b.is_app_limited);
        est.on_acked(t0 + Duration::from_millis(20), &a);
        let s = est.take_sample(Duration::ZERO).unwrap();
        assert!(!s.is_app_limited);
        assert!(est.is_app_limited(), "b is not delivered yet");
        est.on_acked(t0 + Duration::from_millis(21), &b);
        let s = est.take_sample(Duration::ZERO).unwrap();
        assert!(s.is_app_limited, "b left while the application limited sending");
        assert!(!est.is_app_limited(), "the limited stretch ends once its packets are delivered");
    }

    #[test]
    fn short_intervals_and_losses() {
        let mut est = DeliveryRateEstimator::default();
        let t0 = Instant::from_millis(10);
        let a = send(&mut est, t0, 0, 0);
        est.on_lost(1000);
        let b = send(&mut est, t0, 1000, 1);
        est.on_acked(t0 + Duration::from_millis(2), &a);
        assert_eq!(est.take_sample(Duration::from_millis(5)), None, "shorter than the min RTT");
        est.on_acked(t0 + Duration::from_millis(30), &b);
        let s = est.take_sample(Duration::from_millis(5)).unwrap();
        assert_eq!(s.lost, 0, "the loss was declared before b left");
        assert_eq!(s.prior_delivered, 0);
    }
}
