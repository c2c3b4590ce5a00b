//! Congestion control: the [`Controller`] trait and the controllers built on it.
//!
//! Every hook receives `now`, so a controller never reads a clock. Only
//! [`Controller::window`] and [`Controller::on_congestion_event`] are required;
//! the other hooks default to doing nothing. Pacing is one question, "when may
//! the next packet leave?", answered by [`Controller::earliest_departure_time`].

mod fixed;
mod pacer;
mod tahoe;

pub use fixed::{Fixed, FixedConfig};
pub use pacer::Pacer;
pub use tahoe::{Tahoe, TahoeConfig};

use crate::rtt::RttEstimator;
use crate::time::Instant;
use std::fmt;

/// A congestion controller. Sizes are in bytes of whole datagrams.
pub trait Controller: fmt::Debug + Send {
    /// A datagram carrying data left; `bytes_in_flight` includes it.
    fn on_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64) {
        let _ = (now, bytes, bytes_in_flight);
    }

    /// A data packet sent at `sent` was acknowledged for the first time.
    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, rtt: &RttEstimator) {
        let _ = (now, sent, bytes, rtt);
    }

    /// An ack arrived that moved nothing forward while data was outstanding.
    fn on_duplicate_ack(&mut self, now: Instant) {
        let _ = now;
    }

    /// Loss was detected. Called once per recovery episode: `sent` is when the
    /// first lost packet of the episode left, so a controller can tell episodes apart.
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, lost_bytes: u64);

    /// The retransmission timer expired: every outstanding packet is presumed lost.
    fn on_retransmission_timeout(&mut self, now: Instant) {
        let _ = now;
    }

    /// Bytes that may be in flight.
    fn window(&self) -> u64;

    /// How many times consecutive retransmission timeouts may double the timer
    /// (RFC 6298 5.5). Backing off protects a congested path; a controller that
    /// never backs off on loss can say so here too, which TCP THERMAL wished Linux allowed.
    fn max_timeout_doublings(&self) -> u32 {
        16
    }

    /// Slow-start threshold, for controllers that have one (reported in traces).
    fn ssthresh(&self) -> Option<u64> {
        None
    }

    /// The earliest time the next packet may leave; `None` when not pacing.
    fn earliest_departure_time(&self) -> Option<Instant> {
        None
    }

    /// Short name used in reports and traces.
    fn name(&self) -> &'static str;
}

/// Bytes per second that send `window` bytes in 4/5 of a smoothed RTT: fast
/// enough to fill the window, slow enough not to burst it into a queue.
pub fn pacing_rate(window: u64, rtt: &RttEstimator) -> u64 {
    let srtt = rtt.get().total_micros().max(1) as u128;
    ((window as u128 * 5 / 4 * 1_000_000 / srtt) as u64).max(1)
}

/// Which controller a connection builds, with its settings.
#[derive(Clone, Debug, PartialEq)]
pub enum ControllerConfig {
    /// No congestion control: a fixed window and an optional pacing rate (TCP THERMAL).
    Fixed(FixedConfig),
    /// TCP Tahoe: slow start, congestion avoidance, window to one packet on loss.
    Tahoe(TahoeConfig),
}

impl ControllerConfig {
    /// `mss` is the largest datagram the connection sends, the unit of window growth.
    pub fn build(&self, mss: u64) -> Box<dyn Controller> {
        match self {
            ControllerConfig::Fixed(c) => Box::new(Fixed::new(c.clone(), mss)),
            ControllerConfig::Tahoe(c) => Box::new(Tahoe::new(c.clone(), mss)),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            ControllerConfig::Fixed(_) => "none",
            ControllerConfig::Tahoe(_) => "tahoe",
        }
    }
}
