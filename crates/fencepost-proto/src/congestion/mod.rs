//! Congestion control: the [`Controller`] trait, the delivery-rate samples it is
//! fed, and the controllers built on it.
//!
//! Every hook receives `now`, so a controller never reads a clock. Only
//! [`Controller::window`] and [`Controller::on_congestion_event`] are required;
//! the other hooks default to doing nothing. Pacing is one question, "when may
//! the next packet leave?", answered by [`Controller::earliest_departure_time`].
//!
//! The order of the hooks for one ack is: [`Controller::on_ack`] for every packet it
//! newly acknowledges, [`Controller::on_packet_lost`] for every packet loss
//! detection then gives up on, [`Controller::on_congestion_event`] once per
//! recovery episode, and last [`Controller::on_ack_batch`] with the ack's totals
//! and its delivery-rate sample. [`Controller::on_spurious_loss`] comes, among the
//! `on_ack` calls, for a packet given up on earlier whose first transmission has now
//! been acknowledged.
//!
//! Controllers come from a [`ControllerConfig`]: the built-in ones by variant,
//! any other through a [`ControllerFactory`] (how the Python bindings register
//! controllers written in Python).

mod bbr;
mod cubic;
mod delivery_rate;
mod fixed;
mod pacer;
mod reno;
#[cfg(test)]
mod script;

pub use bbr::{Bbr, BbrConfig, BbrFlavour, Mode as BbrMode};
pub use cubic::{Cubic, CubicConfig};
pub use delivery_rate::DeliveryRateEstimator;
pub use fixed::{Fixed, FixedConfig};
pub use pacer::Pacer;
pub use reno::{Flavour, Reno, RenoConfig, Tahoe, TahoeConfig};

use crate::rtt::RttEstimator;
use crate::time::{Duration, Instant};
use std::fmt;
use std::sync::Arc;

/// What the sender knew when one transmission left, kept with the packet and
/// handed back to the controller when the packet is acknowledged or lost.
/// The delivery fields follow draft-cheng-iccrg-delivery-rate-estimation (`P.*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SentPacket {
    pub seq: u64,
    /// When this transmission left.
    pub sent: Instant,
    /// Bytes of the datagram on the wire (what windows count).
    pub bytes: u64,
    pub retransmission: bool,
    /// `P.delivered`: bytes the peer had acknowledged when this packet left.
    pub delivered: u64,
    /// `P.delivered_time`: when `delivered` last grew, as of this packet's departure.
    pub delivered_time: Instant,
    /// `P.first_sent_time`: departure of the packet that began the current flight.
    pub first_sent_time: Instant,
    /// `P.is_app_limited`: the application, not the window, limited sending then.
    pub is_app_limited: bool,
    /// Bytes in flight just after this packet left (BBR's `tx_in_flight`).
    pub bytes_in_flight: u64,
    /// Bytes declared lost on the connection when this packet left (`C.lost` then).
    pub lost: u64,
    /// The value [`Controller::on_sent`] returned for this transmission: the controller's own per-packet state.
    pub controller_state: u64,
}

/// One delivery-rate sample (draft-cheng-iccrg-delivery-rate-estimation, `rs.*`),
/// taken over the packets one ack newly acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateSample {
    /// Bytes delivered between the sampled packet's departure and this ack.
    pub delivered: u64,
    /// The interval they were delivered over: the longer of the send and ack phases.
    pub interval: Duration,
    /// `delivered / interval`, in bytes per second.
    pub delivery_rate: f64,
    /// The sampled packet left while the application limited sending: the rate
    /// measures the application, not the path (a controller should not lower its estimate on it).
    pub is_app_limited: bool,
    /// `rs.prior_delivered`: delivered bytes when the sampled packet left.
    pub prior_delivered: u64,
    /// Bytes in flight when the sampled packet left.
    pub tx_in_flight: u64,
    /// Bytes declared lost between the sampled packet's departure and this ack.
    pub lost: u64,
    /// RTT of the sampled packet.
    pub rtt: Duration,
}

/// The totals of one ack, given to [`Controller::on_ack_batch`] after the per-packet hooks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AckBatch {
    /// Wire bytes this ack newly acknowledged (packets that were in flight).
    pub newly_acked: u64,
    /// Wire bytes declared lost while processing this ack.
    pub newly_lost: u64,
    /// Bytes in flight after the ack.
    pub bytes_in_flight: u64,
    /// Total bytes delivered on the connection (`C.delivered`).
    pub delivered: u64,
    /// A delivery-rate sample, when the ack acknowledged something that yields one.
    pub rate_sample: Option<RateSample>,
    /// The sender is limited by the application right now.
    pub app_limited: bool,
}

/// A congestion controller. Sizes are in bytes of whole datagrams.
pub trait Controller: fmt::Debug + Send {
    /// A datagram carrying data left; `bytes_in_flight` includes it. Returns a value
    /// kept with the packet and handed back as [`SentPacket::controller_state`].
    fn on_sent(&mut self, now: Instant, packet: &SentPacket, bytes_in_flight: u64) -> u64 {
        let _ = (now, packet, bytes_in_flight);
        0
    }

    /// A data packet that was in flight was acknowledged for the first time.
    fn on_ack(&mut self, now: Instant, packet: &SentPacket, rtt: &RttEstimator) {
        let _ = (now, packet, rtt);
    }

    /// Loss detection gave up on one transmission (a fence hole, duplicate acks or a timeout).
    fn on_packet_lost(&mut self, now: Instant, packet: &SentPacket) {
        let _ = (now, packet);
    }

    /// A packet loss detection gave up on (see [`Controller::on_packet_lost`]) was
    /// acknowledged after all, in its first transmission: it had been overtaken, not lost.
    fn on_spurious_loss(&mut self, now: Instant, packet: &SentPacket) {
        let _ = (now, packet);
    }

    /// The end of one ack's processing, with its totals and delivery-rate sample.
    fn on_ack_batch(&mut self, now: Instant, batch: &AckBatch, rtt: &RttEstimator) {
        let _ = (now, batch, rtt);
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

    /// The share of packets the path loses at random, as far as the controller models it
    /// (`0.0`: it does not). The retransmission timer sizes its probes from it: on a path
    /// that loses half the packets each way, two probes and their acks all go missing more
    /// often than not.
    fn random_loss(&self) -> f64 {
        0.0
    }

    /// Whether the controller wants the peer's acks as often as `ack_every` has them, or
    /// can do with an ack per eighth of the flight (see `Connection::plan_ack_frequency`).
    /// Every ack counts while a controller still searches for the path's rate from below
    /// (slow start, BBR's Startup): each grows the window and samples the rate. It counts
    /// too for a window that models nothing of the path (a fixed one, or one from outside
    /// this crate unless it says otherwise), held below the path's product and moving only
    /// as acks free it: fewer acks cost a fixed window of 64 packets 7 % of its goodput at
    /// 20 Mbit/s x 40 ms.
    fn wants_every_ack(&self) -> bool {
        true
    }

    /// The sending rate comes from a model of the path (BBR's bandwidth and RTT), not from
    /// a window that acks open, and the model is settled (not searching for the rate, nor
    /// draining what the search queued): sparser acks then change what it learns, not how
    /// fast it sends. Only then is a connection offered sparser acks where they seem to be
    /// the limit (see `ack_thinning`). A window-based controller keeping a standing queue
    /// of its own data drains it when acks come later, and BBR's Drain drains its Startup's
    /// queue whatever the acks do: both look like the proof that a queue of acks gives
    /// (CUBIC through a 20-packet buffer lost 3 % to it).
    fn rate_model_settled(&self) -> bool {
        false
    }

    /// Sparser acks were just kept (see `ack_thinning`): what the rate samples showed
    /// before may have been the acks' pace, not the path's.
    fn on_sparser_acks(&mut self, _now: Instant) {}

    /// Slow-start threshold, for controllers that have one (reported in traces).
    fn ssthresh(&self) -> Option<u64> {
        None
    }

    /// The earliest time the next packet may leave; `None` when not pacing.
    fn earliest_departure_time(&self) -> Option<Instant> {
        None
    }

    /// The rate the pacer spreads packets at, bytes per second (`None`: not paced).
    fn pacing_rate(&self) -> Option<u64> {
        None
    }

    /// Short name used in reports and traces.
    fn name(&self) -> &str;
}

/// Builds a controller for each new connection. Implement it to add a controller
/// from outside this crate and wrap it in [`ControllerConfig::Custom`].
pub trait ControllerFactory: fmt::Debug + Send + Sync {
    /// `mss` is the largest datagram the connection sends, the unit of window growth.
    fn build(&self, mss: u64) -> Box<dyn Controller>;
    /// Short name used in reports.
    fn name(&self) -> &str;
    /// The settings as a spec string that reads back to the same configuration (`name:key=value,...`).
    fn describe(&self) -> String {
        self.name().to_string()
    }
}

/// Bytes per second that send `window` bytes in 4/5 of a smoothed RTT: fast
/// enough to fill the window, slow enough not to burst it into a queue.
pub fn pacing_rate(window: u64, rtt: &RttEstimator) -> u64 {
    let srtt = rtt.get().total_micros().max(1) as u128;
    ((window as u128 * 5 / 4 * 1_000_000 / srtt) as u64).max(1)
}

/// Which controller a connection builds, with its settings.
#[derive(Clone, Debug)]
pub enum ControllerConfig {
    /// No congestion control: a fixed window and an optional pacing rate (TCP THERMAL).
    Fixed(FixedConfig),
    /// TCP Tahoe: slow start, congestion avoidance, window to one packet on loss.
    Tahoe(TahoeConfig),
    /// NewReno (RFC 6582, as RFC 9002 has it): window halved on loss, once per round trip.
    Reno(RenoConfig),
    /// CUBIC (RFC 9438) with HyStart++ (RFC 9406).
    Cubic(CubicConfig),
    /// The bandwidth-and-RTT model: BBR v1, or `tolerant`, the loss-tolerant controller built on it.
    Bbr(BbrConfig),
    /// A controller from outside this crate.
    Custom(Arc<dyn ControllerFactory>),
}

impl PartialEq for ControllerConfig {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ControllerConfig::Fixed(a), ControllerConfig::Fixed(b)) => a == b,
            (ControllerConfig::Tahoe(a), ControllerConfig::Tahoe(b)) => a == b,
            (ControllerConfig::Reno(a), ControllerConfig::Reno(b)) => a == b,
            (ControllerConfig::Cubic(a), ControllerConfig::Cubic(b)) => a == b,
            (ControllerConfig::Bbr(a), ControllerConfig::Bbr(b)) => a == b,
            (ControllerConfig::Custom(a), ControllerConfig::Custom(b)) => Arc::ptr_eq(a, b) || a.describe() == b.describe(),
            _ => false,
        }
    }
}

impl ControllerConfig {
    /// `mss` is the largest datagram the connection sends, the unit of window growth.
    pub fn build(&self, mss: u64) -> Box<dyn Controller> {
        match self {
            ControllerConfig::Fixed(c) => Box::new(Fixed::new(c.clone(), mss)),
            ControllerConfig::Tahoe(c) => Box::new(Reno::tahoe(c.clone(), mss)),
            ControllerConfig::Reno(c) => Box::new(Reno::new_reno(c.clone(), mss)),
            ControllerConfig::Cubic(c) => Box::new(Cubic::new(c.clone(), mss)),
            ControllerConfig::Bbr(c) => Box::new(Bbr::new(c.clone(), mss)),
            ControllerConfig::Custom(factory) => factory.build(mss),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ControllerConfig::Fixed(_) => "none",
            ControllerConfig::Tahoe(_) => "tahoe",
            ControllerConfig::Reno(_) => "reno",
            ControllerConfig::Cubic(_) => "cubic",
            ControllerConfig::Bbr(c) => match c.flavour {
                BbrFlavour::V1 => "bbr",
                BbrFlavour::Tolerant => "tolerant",
            },
            ControllerConfig::Custom(factory) => factory.name(),
        }
    }
}
