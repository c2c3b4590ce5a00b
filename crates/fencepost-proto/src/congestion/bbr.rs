//! Model-based congestion control: BBR as draft-cardwell-iccrg-bbr-congestion-control-00
//! describes it ("BBR v1"), and `tolerant`, fencepost's loss-tolerant controller,
//! which is the same model with a different answer to loss.
//!
//! The model has two numbers: the bottleneck bandwidth (the largest delivery
//! rate seen over the last ten round trips) and the propagation delay (the
//! smallest RTT seen over the last ten seconds). The sender paces at a gain
//! times the bandwidth and keeps at most a gain times their product in flight.
//! Queue growth is what the model yields to: a queue raises the RTT but not
//! the delivery rate, so sending faster than the bottleneck never raises the
//! bandwidth estimate, and the in-flight cap stops the queue from growing.
//!
//! States: Startup (gain 2/ln 2 until the bandwidth stops growing by 25 % for
//! three rounds), Drain (the inverse gain until the queue Startup built is
//! gone), ProbeBW (an eight-round cycle of gains 1.25, 0.75 and six of 1.0),
//! and ProbeRTT (four packets in flight for 200 ms when the minimum RTT is ten
//! seconds old, so flows sharing a queue all see it empty).
//!
//! Differences of `bbr` from BBRv3 (draft-ietf-ccwg-bbr): no `inflight_hi` /
//! `inflight_lo` bounds, so loss above 2 % does not cap the window; ProbeBW is
//! v1's fixed eight-phase cycle, not v3's Down/Cruise/Refill/Up with its
//! wall-clock probing schedule; Startup does not end on loss or ECN; no ECN.
//! Like v1 it keeps the window to the packets in flight for the first round
//! of a recovery episode (packet conservation) and falls to one packet on a
//! retransmission timeout.
//!
//! `tolerant` differs from `bbr` in four ways, three about loss, one about delay:
//! 1. **Loss is not a congestion signal by itself.** Recovery keeps the window
//!    and the pacing rate; a timeout lowers the window to four packets until
//!    the next acknowledgement, then the model's window returns.
//! 2. **Bandwidth is what the path carried, lost packets included.** Under
//!    random loss `p` the delivery rate is `(1 − p)` times the sending rate, so
//!    BBR's estimate shrinks by `1 − p` every probe that fails to make up for
//!    it (BBR v1 loses ground above about 20 % loss). `tolerant` divides each
//!    delivery-rate sample by `1 − p̂`, where `p̂` is the loss rate of packets
//!    sent in the *calm* phases only: Startup, Drain, ProbeRTT and the 0.75
//!    round of ProbeBW, when the sender is below the bottleneck rate and any
//!    loss it meets is the path's, not a queue's. Loss that appears only when
//!    the sender pushes harder (it correlates with rate) never enters `p̂`,
//!    so it is never forgiven: a sender too fast for a shallow queue sees its
//!    0.75 round lose more, which lowers the corrected samples by a quarter
//!    each cycle until the 0.75 round is below the bottleneck again.
//!    Startup's packets stop counting as calm once Startup ends on excess
//!    loss: its last rounds overflowed the queue, and that loss is not the path's.
//!    The correction stops at 70 % loss (samples scaled by 3.3 at most): beyond
//!    it the loss is more likely many flows overfilling a shared queue than a
//!    link's (see `MAX_CORRECTED_LOSS`).
//! 3. **A probe ends when the queue shows.** The 1.25 round has at most half
//!    the queueing target beyond one bandwidth-delay product in flight, and
//!    also ends once the RTT has risen by half the target or after two round
//!    trips, because under loss the in-flight count it waits for may never be
//!    reached.
//! 4. **Delay that varies is not a queue.** The mean difference between
//!    consecutive RTT samples (RFC 3550's jitter) widens the round trip that
//!    windows and phases are sized by, and is discounted before a round's
//!    smallest RTT reads as a standing queue.
//!
//! Its Startup ends on loss only when the loss is beyond what the path's own loss
//! explains, and a path that loses packets in bursts is allowed its bursts (see
//! `Bbr::loss_dispersion`) unless a queue shows or the loss stays up three rounds.
//!
//! And its ProbeRTT keeps half the bandwidth-delay product in flight (BBRv3's
//! window), not four packets, which under heavy loss starve loss detection; it
//! comes at once, not after 10 s, when the round trip steps up and stays above
//! what the flow's own flight could queue (a path that got longer).
//! A minimum RTT that expires falls back to the smallest RTT of the last 10 s,
//! not to the next sample (which, on a link in a fade, carries the fade).
//! A path a little longer (too little a step for that rule) is measured again
//! once the bandwidth estimate starts to fall behind the rise of the RTT.
//! Where a queue stands that others hold more of than its allowance (a loss-based flow,
//! BBR, or another `tolerant` flow doing the same), it takes BBR's window of two
//! products; a congestion cut, or its estimate halving while the queue stood, says so.
//!
//! docs/congestion.md has the state machine, the parameters and measurements.

use super::{AckBatch, Controller, Pacer, RateSample, SentPacket};
use crate::rtt::RttEstimator;
use crate::time::{Duration, Instant};
use std::collections::VecDeque;

/// 2/ln 2: the smallest gain that doubles the delivery rate every round in Startup.
const STARTUP_GAIN: f64 = 2.885;
const DRAIN_GAIN: f64 = 1.0 / STARTUP_GAIN;
/// In-flight cap in ProbeBW, in bandwidth-delay products: room for delayed and stretched acks.
const CWND_GAIN: f64 = 2.0;
const PROBE_BW_GAINS: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
const PROBE_DOWN: usize = 1;
/// Rounds the bandwidth filter remembers.
const BW_FILTER_ROUNDS: u64 = 10;
/// Age at which the minimum RTT is measured again (ProbeRTT).
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
const PROBE_RTT_DURATION: Duration = Duration::from_millis(200);
/// The smallest window, in packets, that keeps acks flowing with delayed acks.
const MIN_PIPE_PACKETS: u64 = 4;
/// `tolerant`'s window in ProbeRTT, in bandwidth-delay products (BBRv3's).
const PROBE_RTT_CWND_GAIN: f64 = 0.5;
/// `tolerant`: the most random loss (`p̂`) at which ProbeRTT's window is sized by the expired
/// minimum RTT rather than the one taken in its place (see `Bbr::probe_rtt_cwnd`).
const PROBE_RTT_DEEP_LOSS: f64 = 0.05;
/// Startup ends after this many rounds in which the bandwidth grew by less than 25 %.
const FULL_BW_GROWTH: f64 = 1.25;
const FULL_BW_ROUNDS: u32 = 3;
/// `tolerant`: the most rounds a plateau with no queue may last before Startup ends.
const MAX_QUIET_PLATEAU_ROUNDS: u32 = 12;
/// v1 paces 1 % below the estimate so a queue does not build at exactly the bottleneck rate.
const PACING_MARGIN: f64 = 0.99;

/// `tolerant`: the gain of the mean of how late losses are found (see `Bbr::loss_found_late`).
const LOSS_FOUND_LATE_GAIN: f64 = 1.0 / 16.0;
/// `tolerant`: how many calm packets the loss estimate remembers (its time constant).
const LOSS_MEMORY_PACKETS: f64 = 256.0;
/// `tolerant`: calm packets resolved (acknowledged or lost) before the estimate moves.
const LOSS_SAMPLE_PACKETS: u64 = 8;
/// `tolerant`: loss share above `p̂` (beyond its statistical spread) a sample may show and still count as random.
const LOSS_SLACK: f64 = 0.01;
/// `tolerant`: Startup's losses remembered, so that one proved spurious can be taken back.
const RECENT_LOSSES_KEPT: usize = 256;
/// `tolerant`: the most the spread of a round's loss share is widened for losses that come in runs.
const MAX_LOSS_DISPERSION: f64 = 16.0;
/// `tolerant`: Startup rounds in a row with more loss than independent losses at `p̂`
/// explain that end Startup, however the path's losses cluster.
const PERSISTENT_LOSS_ROUNDS: u32 = 3;
/// `tolerant`: the prior of independent loss in [`Bbr::loss_dispersion`], in losses.
const DISPERSION_PRIOR_LOSSES: f64 = 8.0;
/// `tolerant`: the bandwidth estimate after a round of congestive loss, as a share of before (CUBIC's β).
const CONGESTION_BETA: f64 = 0.7;
/// `tolerant`: the longest pause in probing after a congestion cut, in rounds (BBRv3's bound).
const MAX_PROBE_WAIT_ROUNDS: u64 = 63;
/// `tolerant`: rounds a queue must stand (above half the queueing target) before the flow
/// takes BBR's window of two bandwidth-delay products, to hold its own against queue fillers.
const COMPETING_ROUNDS: u32 = 16;
const COMPETING_MEMORY_ROUNDS: u64 = 1000;
/// `tolerant`: the share of its bandwidth estimate a flow keeps, once a queue has stood for
/// [`COMPETING_ROUNDS`], below which it counts as squeezed out by flows that hold more queued.
const SQUEEZED_SHARE: f64 = 0.5;
/// `tolerant`: rounds a queue larger than the flight must stand before the minimum RTT is measured again.
const LENGTHENED_PATH_ROUNDS: u32 = 4;
/// `tolerant`: the least step up of a round's smallest RTT that may mean a longer path. On one
/// host round trips jump from 0.3 to 2 ms with scheduling alone (over loopback the rule fired
/// once per gigabyte, and each ProbeRTT held the flow at half a product for 200 ms).
const PATH_STEP_MIN: Duration = Duration::from_millis(5);
/// `tolerant`: the most a minimum RTT that merely aged (not a longer path, which
/// `note_path_length` and `starved_by_longer_path` find) may rise when it gives way to the
/// smallest RTT of the last [`MIN_RTT_WINDOW`]. Where more flows share a slow link than its
/// product holds packets, their floors of a few packets each keep a queue that no ProbeRTT
/// of one flow drains; each aged minimum then took that queue in, the window sized by it
/// let more queue stand, and the next minimum took that in too. Five flows of 2 MB through
/// 200 kbit/s with 50 ms each way and no queue limit kept 8.5 s of RTT on average (one
/// flow 14 s, with 1.8 times the others' rate; Jain 0.93), 2.7 s with a quarter at a time
/// (Jain 1.00), `bbr` 2.4 s. A path that lengthens by less than those rules find is taken
/// in a quarter at a time, every ten seconds. A rise of up to [`PATH_STEP_MIN`] is taken
/// whole: on a path under a few milliseconds the host's scheduling moves round trips by
/// more than a quarter, and those rules never fire there.
const AGED_MIN_RTT_RISE: f64 = 1.25;
const QUEUE_ALLOWANCE_MIN: u64 = 4;
const QUEUE_ALLOWANCE_MAX: u64 = 16;
/// `tolerant`: packets a competing flow's window holds beyond BBR v1's (see `Bbr::competing_window`).
const COMPETING_ALLOWANCE: u64 = 8;
/// `tolerant`: rounds in a row a buffer no deeper than the queueing target must be held near
/// its peak (see `Bbr::held_full`) before loss in a round counts as its overflow.
const HELD_FULL_ROUNDS: u32 = 3;
/// `tolerant`: packets a flow adds to its flight each round while it waits after an overflow
/// cut (see `Bbr::overflow_growth`).
const OVERFLOW_GROWTH_PACKETS: u64 = 2;
/// `tolerant`: the deepest queue peak, as a share of the queueing target, at which a queue
/// held near its peak reads as a full buffer (see `Bbr::held_full`): twice the target is half
/// the round trip. Deeper, it may be the queue the flows' allowances keep on purpose.
const HELD_FULL_PEAK_MAX: f64 = 2.0;
/// `tolerant`: the largest loss rate corrected for; beyond it samples are scaled by 3.3 at
/// most. Loss above it is rarely what a lossy link does (fencepost aims at 10-60 %) but what a
/// bottleneck shared by more flows than it has room for does to each of them, and there
/// every flow correcting for it fed the loss: a flow that took its minimum RTT from an
/// already full queue sees no queue, its `p̂` rose with the loss, its estimate with `p̂`
/// (flows of 136-176 Mbit/s on a 100 Mbit/s link), and 200 flows through 1 MB at
/// 100 Mbit/s x 40 ms delivered 13.7 Mbit/s together, 94 % of what they sent lost. At 0.7
/// the loss such flows can drive is about 0.7 (they send at most 1 / 0.3 times what
/// arrives): 79.8 Mbit/s together; 0.6 gave 85.4, but 70 % random loss each way then fell
/// from 11.2 to 8.2 Mbit/s (10.8 at 0.7, mean of 6 seeds).
const MAX_CORRECTED_LOSS: f64 = 0.7;
/// `tolerant`: the queue a probe for bandwidth may build, as a share of the queueing target.
const PROBE_QUEUE_SHARE: f64 = 0.5;
/// `tolerant`: a probe has done its work once the RTT is this share of the queueing
/// target above a round trip: the path has no more bandwidth to give, only queue.
const PROBE_RTT_RISE: f64 = 0.5;

/// `tolerant`: how many times the delay variation (mean difference between consecutive
/// RTTs) a round trip lasts beyond the propagation delay. For normally distributed
/// delay, the mean RTT is about three such differences above the lowest of thousands
/// of samples; for the sum of two uniform delays, about two.
const JITTER_ROUND_TRIPS: f64 = 3.0;
/// `tolerant`: how many times the delay variation (the mean difference between consecutive
/// RTTs) jitter alone spreads a round's RTTs over, its largest from its smallest: for
/// normally distributed delay, thousands of samples span about 6.2 such differences; for
/// uniform delay, 3.
const JITTER_RANGE: f64 = 6.0;
/// `tolerant`: how many times the delay variation a round's smallest RTT may sit above
/// the propagation delay without reading as a queue.
const JITTER_QUEUE_DISCOUNT: f64 = 2.0;
/// `tolerant`: how many times the delay variation jitter alone adds to the queue peak (a
/// round's largest RTT above the smallest): the smallest sits about
/// [`JITTER_QUEUE_DISCOUNT`] variations below the mean, the largest as far above it.
const PEAK_JITTER: f64 = 2.0 * JITTER_QUEUE_DISCOUNT;
/// `tolerant`: the inverse of the delay variation's gain (RFC 3550's 1/16).
const JITTER_GAIN_INVERSE: u32 = 16;

/// `tolerant`: the share of the queue peak kept from one round to the next (it halves in
/// about 34 rounds): remembered through several ProbeBW cycles, forgotten when the buffer
/// that set it is no longer the bottleneck.
const QUEUE_PEAK_DECAY: f64 = 0.98;
/// `tolerant`: acks that stop for longer than this many round trips (the smoothed RTT, at
/// most twice the minimum) while data is in flight, and then come several at once, were
/// held on the return path (a link that keeps its frames and delivers them together, as
/// Wi-Fi and cellular links do).
const ACK_GAP_LEAST: f64 = 1.0;
/// `tolerant`: a gap counts once this many acks came within an [`ACK_BURST_SPREAD`]th of
/// it after they resumed: acks held and released together. After acks lost on the way the
/// next ones come at their usual spacing, and after Startup's growing queue too.
const ACK_BURST: u32 = 4;
const ACK_BURST_SPREAD: f64 = 8.0;
/// `tolerant`: the longest ack gap, in seconds, taken as the path holding acks; a longer
/// one is an outage (the ATT LTE traces stop for 133 ms to 2.2 s), where a window kept
/// for it only lengthens the queue once the link comes back (mean RTT 758 -> 1856 ms).
const ACK_GAP_MOST: f64 = 0.1;
/// `tolerant`: the most room for held acks, in bandwidth-delay products: eight keeps every
/// hold measured whole (60 ms on a 10 ms path is six), and bounds what a path only just
/// longer than [`ACK_GAP_PATH_LEAST`] may be given for a host's pause.
const ACK_GAP_PRODUCTS: u64 = 8;
/// `tolerant`: the shortest path, by its minimum RTT, whose holds count. Below it a hold is
/// a host setting a process aside for a few milliseconds (a relay, a receiver), tens of
/// round trips there: with room for such holds a loopback sender at 9 Gbit/s by its
/// estimate put megabytes into a relay's queue (61 MB of room for a 53 ms pause; 5 MB with
/// the cap above) just before the relay slowed to a packet every 250 ms, lost up to
/// 19,180 packets to its overflow and took seconds to repair them (a test that had passed
/// in every run failed in one of five beside two busy loops, and in CI).
const ACK_GAP_PATH_LEAST: Duration = Duration::from_millis(1);
/// `tolerant`: the least queue peak, as a share of the queueing target (beyond the jitter
/// discount), that counts as a buffer's depth rather than noise.
const QUEUE_PEAK_FLOOR: f64 = 0.05;
/// `tolerant`: the deepest queue peak, as a share of the queueing target, the shallow-buffer
/// rule looks at: deeper queues show to `last_round_queue`, which fades the correction itself.
const SHALLOW_QUEUE_PEAK_MAX: f64 = 0.5;
/// `tolerant`: a round whose mean RTT holds this share of the queue peak (or less) keeps the
/// loss correction whole; at [`PEAK_QUEUE_NO_CORRECTION`] it is gone.
const PEAK_QUEUE_FULL_CORRECTION: f64 = 0.4;
const PEAK_QUEUE_NO_CORRECTION: f64 = 0.7;

/// `tolerant`'s queueing-delay target: a quarter of the propagation delay, at least a millisecond.
fn queue_target(min_rtt: Duration) -> f64 {
    (min_rtt.as_secs_f64() / 4.0).max(1e-3)
}

/// The controller's tag on packets sent in a calm phase ([`SentPacket::controller_state`]).
const CALM: u64 = 1;
/// The tag on packets sent in Startup: calm until Startup ends on excess loss. Then the
/// last rounds' packets went out at up to [`STARTUP_GAIN`] times what the path carries,
/// and their losses, still being found during Drain, are the overshoot's, not the path's.
const STARTUP: u64 = 2;

/// `tolerant`: a rise of the RTT in one step (see `Bbr::note_delay_rise`): the round it
/// showed in, and the bandwidth estimate then.
#[derive(Clone, Copy, Debug)]
struct DelayRise {
    round: u64,
    bw: f64,
}

/// Which answer to loss the model gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BbrFlavour {
    /// BBR v1: packet conservation in recovery, one packet after a timeout.
    V1,
    /// fencepost's loss-tolerant controller (see the module documentation).
    Tolerant,
}

#[derive(Clone, Debug, PartialEq)]
pub struct BbrConfig {
    pub flavour: BbrFlavour,
    /// Initial window in packets.
    pub initial_window: u64,
}

impl BbrConfig {
    pub fn v1() -> Self {
        BbrConfig { flavour: BbrFlavour::V1, initial_window: 10 }
    }
    pub fn tolerant() -> Self {
        BbrConfig { flavour: BbrFlavour::Tolerant, initial_window: 10 }
    }
    pub fn initial_window(mut self, packets: u64) -> Self {
        self.initial_window = packets.max(1);
        self
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// The largest value over the last [`BW_FILTER_ROUNDS`] rounds, one slot per round.
#[derive(Clone, Debug, Default)]
struct MaxFilter {
    slots: [(u64, f64); BW_FILTER_ROUNDS as usize],
}

impl MaxFilter {
    fn update(&mut self, round: u64, value: f64) {
        let slot = &mut self.slots[(round % BW_FILTER_ROUNDS) as usize];
        if slot.0 != round {
            *slot = (round, value);
        } else if value > slot.1 {
            slot.1 = value;
        }
    }
    /// Lowers every remembered value to at most `limit`.
    fn cap(&mut self, limit: f64) {
        for slot in &mut self.slots {
            slot.1 = slot.1.min(limit);
        }
    }
    fn max(&self, round: u64) -> f64 {
        self.slots.iter().filter(|(r, _)| round.saturating_sub(*r) < BW_FILTER_ROUNDS && *r <= round).map(|(_, v)| *v).fold(0.0, f64::max)
    }
}

#[derive(Debug)]
pub struct Bbr {
    flavour: BbrFlavour,
    mss: u64,
    initial_cwnd: u64,
    mode: Mode,
    bw_filter: MaxFilter,
    /// Bottleneck bandwidth estimate, bytes per second.
    bw: f64,
    min_rtt: Option<Duration>,
    /// `tolerant`: the minimum RTT that last expired, which sizes ProbeRTT's window while
    /// the one taken in its place is larger (see `probe_rtt_cwnd`).
    expired_min_rtt: Option<Duration>,
    min_rtt_stamp: Instant,
    /// `tolerant`: the smallest RTT of each second of the last [`MIN_RTT_WINDOW`] (when the
    /// second began, and its minimum), oldest first: what a minimum that expires falls back to.
    recent_rtt: VecDeque<(Instant, Duration)>,
    probe_rtt_done: Option<Instant>,
    probe_rtt_round_done: bool,
    /// `tolerant`: the bandwidth ProbeRTT's window is sized by, fixed as ProbeRTT begins
    /// (see `probe_rtt_cwnd`); `None` outside ProbeRTT, or where it is the estimate's.
    probe_rtt_bw: Option<f64>,
    /// `tolerant`: the largest delivery-rate sample (loss-corrected) of the round in
    /// progress and of the last complete one: what the path delivers now, where the
    /// estimate is the largest of ten rounds.
    round_best_sample: f64,
    last_round_best_sample: f64,
    /// Round trips counted by delivery: a round ends when a packet sent after it began is acknowledged.
    round: u64,
    next_round_delivered: u64,
    round_start: bool,
    /// The smallest RTT of the round in progress and of the last complete one.
    round_min_rtt: Option<Duration>,
    last_round_min_rtt: Option<Duration>,
    /// The largest RTT of the round in progress, and the sum and count of its samples.
    round_max_rtt: Option<Duration>,
    round_rtt_total: Duration,
    round_rtt_samples: u64,
    /// `tolerant`: the mean RTT of the last complete round.
    last_round_mean_rtt: Option<Duration>,
    /// `tolerant`: the largest RTT of the last complete round.
    last_round_max_rtt: Option<Duration>,

    /// `tolerant`: the deepest queue lately (a round's largest RTT above the minimum, in
    /// seconds, decaying by [`QUEUE_PEAK_DECAY`] a round): what the bottleneck's buffer
    /// holds when it is full, as far as this flow has seen.
    queue_peak: f64,
    /// `tolerant`: when the last ack that acknowledged something came, and the bytes in
    /// flight after it.
    last_ack: Option<(Instant, u64)>,
    /// `tolerant`: the longest the path held its acks, in seconds (see [`Bbr::note_ack_gap`]),
    /// fading by [`QUEUE_PEAK_DECAY`] a round as the queue peak does.
    ack_gap_peak: f64,
    /// `tolerant`: a gap not yet confirmed as held acks: when the acks resumed, how long
    /// they had stopped (seconds), and how many have come since.
    ack_gap_candidate: Option<(Instant, f64, u32)>,
    /// The previous ack's RTT sample, for the delay variation.
    previous_rtt: Option<Duration>,
    /// RTT differences folded into `delay_jitter` so far (counted up to the gain's inverse).
    jitter_samples: u32,
    /// `tolerant`: the mean difference between consecutive RTT samples (seconds), as
    /// RFC 3550 measures interarrival jitter: the path's delay variation (jitter, ack
    /// aggregation). A queue changes the RTT smoothly from one ack to the next, so it
    /// hardly shows here.
    delay_jitter: f64,
    /// `tolerant`: rounds counted outside ProbeRTT, which age the bandwidth filter.
    bw_round: u64,
    /// The newest `P.delivered` among the packets this ack acknowledged.
    acked_delivered: Option<u64>,
    filled_pipe: bool,
    full_bw: f64,
    full_bw_count: u32,
    pacing_gain: f64,
    cwnd_gain: f64,
    cycle_index: usize,
    cycle_stamp: Instant,
    cwnd: u64,
    prior_cwnd: u64,
    /// The current recovery episode began then (packets sent before it belong to it).
    recovery_start: Option<Instant>,
    entering_recovery: bool,
    /// v1: the round at which packet conservation ends.
    conservation_until: Option<u64>,
    /// `tolerant`: the window to restore on the first ack after a timeout.
    restore_after_timeout: bool,
    /// Bytes this ack newly acknowledged.
    acked: u64,
    pacer: Pacer,
    /// `tolerant`: bytes of calm packets acknowledged and lost since the estimate last moved.
    calm_acked: u64,
    calm_lost: u64,
    calm_seen: f64,
    /// `tolerant`: Startup ended on excess loss, so packets tagged [`STARTUP`] no longer count as calm.
    startup_overshot: bool,
    /// `tolerant`: the estimated loss rate of the path itself (`p̂`).
    random_loss: f64,
    /// `tolerant`: Startup's packets lost while no queue stood, and of those how many came
    /// straight after another lost packet (the next sequence number): how much the path's
    /// losses cluster (see [`Bbr::loss_dispersion`]).
    startup_lost: u64,
    startup_lost_in_runs: u64,
    /// The sequence number of the last packet found lost.
    last_lost_seq: Option<u64>,
    /// `tolerant`: the calm bytes acknowledged and lost in Startup rounds in a row that lost
    /// more than independent losses at `p̂` explain, and not more than the path's clustering
    /// does, and how many rounds: held out of `p̂` until a round shows they were the path's.
    held_calm: Option<(u64, u64, u32)>,
    /// `tolerant`: the latest of those losses (sequence number, and whether it followed
    /// another), so that a loss proved spurious is taken back out of the counts.
    recent_startup_losses: VecDeque<(u64, bool)>,
    /// `tolerant`: bytes acknowledged and lost over the round in progress.
    round_acked: u64,
    round_lost: u64,
    /// `tolerant`: the round of the last congestion cut (one cut per round trip at most).
    last_cut_round: Option<u64>,
    /// `tolerant`: delivered bytes at the last cut; packets sent before it measure the rate the cut undid.
    cut_delivered: u64,
    /// `tolerant`: consecutive ProbeBW rounds whose queue held more than the flight after a step (see `note_path_length`).
    lengthened_rounds: u32,
    /// `tolerant`: the last ProbeBW round whose smallest RTT stepped up (see `note_path_length`).
    rtt_step_round: Option<u64>,
    /// `tolerant`: the last rise of the RTT in one step above the minimum (see `note_delay_rise`).
    delay_rise: Option<DelayRise>,
    /// `tolerant`: the last round whose smallest RTT showed no queue (at most half the target).
    clean_round: Option<u64>,
    /// `tolerant`: consecutive rounds through which a queue stood.
    standing_queue_rounds: u32,
    /// `tolerant`: consecutive ProbeBW rounds through which a buffer was held full (see `held_full`).
    held_full_rounds: u32,
    /// `tolerant`: the last congestion cut was taken for a full buffer's overflow (see `overflow_growth`).
    overflow_cut: bool,
    /// `tolerant`: the bandwidth estimate when the queue standing now began to stand.
    bw_when_queue_rose: f64,
    /// `tolerant`: the last round the flow found itself squeezed (see `note_squeeze`).
    squeezed_round: Option<u64>,
    /// `tolerant`: how much longer a lost packet stays counted in flight than a delivered one
    /// (seconds): from its departure to the loss being declared, less the RTT of the ack that
    /// declared it (at most two of those RTTs: a timeout's are no measure of detection), a
    /// mean with gain [`LOSS_FOUND_LATE_GAIN`]. See [`Bbr::room_for_undeclared_loss`].
    loss_found_late: f64,
    /// The RTT sample of the latest ack that acknowledged something.
    latest_rtt: Option<Duration>,
}

impl Bbr {
    pub fn new(config: BbrConfig, mss: u64) -> Self {
        let initial_cwnd = config.initial_window.max(1) * mss;
        Bbr {
            flavour: config.flavour,
            mss,
            initial_cwnd,
            mode: Mode::Startup,
            bw_filter: MaxFilter::default(),
            bw: 0.0,
            min_rtt: None,
            min_rtt_stamp: Instant::ZERO,
            recent_rtt: VecDeque::new(),
            probe_rtt_done: None,
            probe_rtt_round_done: false,
            probe_rtt_bw: None,
            round_best_sample: 0.0,
            last_round_best_sample: 0.0,
            round: 0,
            next_round_delivered: 0,
            round_start: false,
            acked_delivered: None,
            round_min_rtt: None,
            last_round_min_rtt: None,
            round_max_rtt: None,
            last_round_max_rtt: None,
            round_rtt_total: Duration::ZERO,
            round_rtt_samples: 0,
            last_round_mean_rtt: None,
            queue_peak: 0.0,
            last_ack: None,
            ack_gap_peak: 0.0,
            ack_gap_candidate: None,
            previous_rtt: None,
            jitter_samples: 0,
            expired_min_rtt: None,
            delay_jitter: 0.0,
            bw_round: 0,
            filled_pipe: false,
            full_bw: 0.0,
            full_bw_count: 0,
            pacing_gain: STARTUP_GAIN,
            cwnd_gain: STARTUP_GAIN,
            cycle_index: 0,
            cycle_stamp: Instant::ZERO,
            cwnd: initial_cwnd,
            prior_cwnd: initial_cwnd,
            recovery_start: None,
            entering_recovery: false,
            conservation_until: None,
            restore_after_timeout: false,
            acked: 0,
            pacer: Pacer::new(0, 2 * mss),
            calm_acked: 0,
            calm_lost: 0,
            calm_seen: 0.0,
            startup_overshot: false,
            random_loss: 0.0,
            startup_lost: 0,
            startup_lost_in_runs: 0,
            last_lost_seq: None,
            held_calm: None,
            recent_startup_losses: VecDeque::new(),
            round_acked: 0,
            round_lost: 0,
            last_cut_round: None,
            cut_delivered: 0,
            standing_queue_rounds: 0,
            held_full_rounds: 0,
            overflow_cut: false,
            bw_when_queue_rose: 0.0,
            squeezed_round: None,
            lengthened_rounds: 0,
            rtt_step_round: None,
            delay_rise: None,
            clean_round: None,
            loss_found_late: 0.0,
            latest_rtt: None,
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// Bottleneck bandwidth estimate in bytes per second.
    pub fn bandwidth(&self) -> f64 {
        self.bw
    }
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }
    pub fn pacing_gain(&self) -> f64 {
        self.pacing_gain
    }
    /// `tolerant`'s estimate of the path's own loss rate (0 for `bbr`).
    pub fn random_loss(&self) -> f64 {
        self.random_loss
    }
    pub fn pacing_rate(&self) -> u64 {
        self.pacer.rate()
    }

    fn tolerant(&self) -> bool {
        self.flavour == BbrFlavour::Tolerant
    }

    /// Whether a packet's fate tells of the path's own loss (see [`STARTUP`]).
    fn counts_as_calm(&self, packet: &SentPacket) -> bool {
        packet.controller_state == CALM || (packet.controller_state == STARTUP && !self.startup_overshot)
    }

    fn calm(&self) -> bool {
        match self.mode {
            Mode::Startup | Mode::Drain | Mode::ProbeRtt => true,
            Mode::ProbeBw => self.cycle_index == PROBE_DOWN,
        }
    }

    /// Bytes in flight that `gain` times the bandwidth-delay product allows.
    fn inflight(&self, gain: f64) -> u64 {
        self.inflight_over(gain, self.min_rtt)
    }

    /// As [`Bbr::inflight`], the product taken over `min_rtt` instead of the current minimum.
    fn inflight_over(&self, gain: f64, min_rtt: Option<Duration>) -> u64 {
        self.inflight_at(gain, self.bw, min_rtt)
    }

    /// As [`Bbr::inflight_over`], the product taken at `bw` instead of the estimate.
    fn inflight_at(&self, gain: f64, bw: f64, min_rtt: Option<Duration>) -> u64 {
        match min_rtt {
            Some(min_rtt) if bw > 0.0 => (gain * bw * self.round_trip(min_rtt)) as u64,
            _ => self.initial_cwnd,
        }
    }

    /// What a probe for more bandwidth may have in flight: the pacing gain times the
    /// bandwidth-delay product for `bbr`; for `tolerant` at most half the queueing target
    /// beyond one product, so that a probe that finds no more bandwidth queues less than
    /// the target (a quarter of a product, 1.25's share, is the whole target on a long path).
    fn probe_inflight(&self) -> u64 {
        let full_gain = self.inflight(self.pacing_gain);
        match (self.tolerant(), self.min_rtt) {
            (true, Some(min_rtt)) if self.bw > 0.0 => {
                let queued = (self.bw * PROBE_QUEUE_SHARE * queue_target(min_rtt)) as u64;
                full_gain.min(self.inflight(1.0) + queued.max(self.mss))
            }
            _ => full_gain,
        }
    }

    /// `tolerant`'s delay variation estimate (0 for `bbr`, which, as v1, ignores it).
    fn jitter(&self) -> f64 {
        if self.tolerant() { self.delay_jitter } else { 0.0 }
    }

    /// How long a packet's round trip takes with no queue, in seconds: the propagation
    /// delay, plus for `tolerant` [`JITTER_ROUND_TRIPS`] times the delay variation. On a
    /// path whose delay varies, the smallest RTT in ten seconds is its rare low extreme; a
    /// window of bandwidth times that starves the path, and phases timed by it end
    /// before their effect returns.
    fn round_trip(&self, min_rtt: Duration) -> f64 {
        min_rtt.as_secs_f64() + JITTER_ROUND_TRIPS * self.jitter()
    }

    /// Bytes the pacer lets leave back to back: about a millisecond at high rates (as Linux sizes TSO bursts).
    fn send_quantum(&self) -> u64 {
        let rate = self.pacer.rate();
        if rate < 150_000 {
            self.mss
        } else if rate < 3_000_000 {
            2 * self.mss
        } else {
            // Never below two packets, whatever their size: with a payload over 32 kB
            // (`--packet-size`) a `clamp` to [two packets, 64 kB] had crossed bounds and panicked.
            (rate / 1000).min(64 * 1024).max(2 * self.mss)
        }
    }

    fn min_pipe_cwnd(&self) -> u64 {
        MIN_PIPE_PACKETS * self.mss
    }

    /// The window in ProbeRTT: four packets for `bbr` (v1); half the bandwidth-delay
    /// product for `tolerant`, as BBRv3 does. Under heavy loss four packets starve loss
    /// detection: the lost ones count as in flight until acks that four packets rarely
    /// bring, so ProbeRTT never drains and the stream waits on retransmission timeouts
    /// (a 7.7 s stall at 50 % loss each way before this). Half the product still empties the queue.
    ///
    /// The product is the expired minimum's while the minimum taken in its place (the least
    /// of the last ten seconds) is larger, as BBRv3 sizes ProbeRTT by its longer-lived
    /// minimum: when every RTT of those seconds carried a queue of our own, half the product
    /// they give keeps that queue. On a 50 kbit/s link, where a packet takes 0.23 s to
    /// cross, Startup's queue then stayed for good (RTT mean over 120 s 2.24 s, `bbr` 0.96;
    /// 1.53 now). Not while `p̂` is above [`PROBE_RTT_DEEP_LOSS`]: there the smaller window
    /// starves loss detection as four packets do (10 kbit/s over 600 ms at 20 % loss:
    /// 26 packets resent to deliver 35).
    ///
    /// The bandwidth is what the path delivered in the last round (`probe_rtt_bw`) when
    /// that is less than the estimate and `p̂` is within [`PROBE_RTT_DEEP_LOSS`]. The estimate is the
    /// largest of ten rounds: on a link whose rate has just fallen (a cellular fade) it
    /// still holds the rate from before, and half a product of that, queued at the rate the
    /// link has now, took seconds to cross. The minimum ProbeRTT measured then carried that
    /// queue, and every window after it was sized by it: on the ATT LTE uplink trace
    /// (20 ms each way, 20 s) the minimum went from 41 to 272 ms, and the mean RTT was
    /// 1077 ms (604 now; `bbr`, whose four packets drain any queue, 286).
    fn probe_rtt_cwnd(&self) -> u64 {
        if !self.tolerant() {
            return self.min_pipe_cwnd();
        }
        let sized_by = match (self.min_rtt, self.expired_min_rtt) {
            (Some(taken), Some(expired)) if expired < taken && self.random_loss <= PROBE_RTT_DEEP_LOSS => Some(expired),
            (taken, _) => taken,
        };
        self.inflight_at(PROBE_RTT_CWND_GAIN, self.probe_rtt_bw.unwrap_or(self.bw), sized_by).max(self.min_pipe_cwnd())
    }

    /// Remembers the window to come back to; inside recovery or ProbeRTT the window is
    /// already lowered, so the larger of it and what was saved before is kept.
    fn save_cwnd(&mut self, in_recovery: bool) {
        self.prior_cwnd = if !in_recovery && self.mode != Mode::ProbeRtt { self.cwnd } else { self.prior_cwnd.max(self.cwnd) };
    }

    /// The last round's standing queue (its smallest RTT above the propagation delay)
    /// as a share of the queueing target; `None` before both are known.
    ///
    /// On a jittery path a round's smallest RTT sits above the ten-second minimum by
    /// chance, the more so the fewer samples the round has; [`JITTER_QUEUE_DISCOUNT`]
    /// times the delay variation is discounted for that, so only a queue larger than
    /// the jitter reads as one.
    fn last_round_queue(&self) -> Option<f64> {
        let (min_rtt, round_min) = (self.min_rtt?, self.last_round_min_rtt?);
        Some(self.queued_beyond_jitter(round_min, min_rtt) / queue_target(min_rtt))
    }

    /// Seconds `rtt` sits above `min_rtt` beyond what [`JITTER_QUEUE_DISCOUNT`] times the
    /// delay variation explains: the queue it shows, or 0.
    fn queued_beyond_jitter(&self, rtt: Duration, min_rtt: Duration) -> f64 {
        (rtt.saturating_sub(min_rtt).as_secs_f64() - JITTER_QUEUE_DISCOUNT * self.jitter()).max(0.0)
    }

    /// Folds an RTT sample into the delay variation, with RFC 3550's gain of 1/16 once 16
    /// differences are in, and as their plain mean before. An average started from zero at
    /// that gain shows a fifth of the variation after 4 samples: in Startup's first rounds
    /// the jitter then read as a queue, and with 2 ms of it and 50 % loss a round's loss
    /// with that "queue" ended Startup at 4 Mbit/s on a 100 Mbit/s path (35 s for 20 MB).
    fn update_delay_jitter(&mut self, latest: Duration) {
        if let Some(previous) = self.previous_rtt.replace(latest) {
            let difference = (latest.as_secs_f64() - previous.as_secs_f64()).abs();
            self.jitter_samples = (self.jitter_samples + 1).min(JITTER_GAIN_INVERSE);
            self.delay_jitter += (difference - self.delay_jitter) / f64::from(self.jitter_samples);
        }
    }

    fn restore_cwnd(&mut self) {
        self.cwnd = self.cwnd.max(self.prior_cwnd);
    }

    /// `tolerant`: how much of the loss correction a sample keeps given how full the last
    /// round kept a shallow buffer: whole while its mean RTT holds at most 0.4 of the queue
    /// peak, none from 0.7. A buffer shallower than half the queueing target never shows a
    /// queue to `last_round_queue`, and flows that together keep it full lose packets to
    /// its overflow in every phase, calm ones included, as if at random: `p̂` took that
    /// loss in, each flow's estimate was corrected for it (up to tenfold), and the excess
    /// they sent overflowed the buffer more. Four `tolerant` flows through 15 kB at
    /// 100 Mbit/s, 20 ms: 79 % of their data packets were resends, 85.8 Mbit/s together;
    /// eight, 85 % and 78.5 Mbit/s. A flow alone with random loss drains the queue in its
    /// 0.75 phase and probes it deeper, so its rounds sit well below the peak. The round's
    /// mean, not its smallest RTT: a flow sending more samples the queue's brief dips more
    /// often, and with the minimum it kept its correction while the others lost theirs
    /// (8 flows through 15 kB: 0.7 to 37.9 Mbit/s each). Jitter is discounted from the mean
    /// as in `last_round_queue`, and from the peak as well, both for the comparison and for
    /// telling a shallow buffer from a deep one: with the spread of 1 ms of jitter left in
    /// it, 30 kB at 100 Mbit/s read as a deep buffer, and 8 flows sending into its overflow
    /// resent 86 % of their packets (25 % now). A peak within the jitter is no buffer's
    /// depth at all.
    fn shallow_queue_trust(&self) -> f64 {
        let (Some(min_rtt), Some(round_mean)) = (self.min_rtt, self.last_round_mean_rtt) else { return 1.0 };
        let target = queue_target(min_rtt);
        let peak = self.queue_peak - PEAK_JITTER * self.jitter();
        if peak <= QUEUE_PEAK_FLOOR * target || peak > SHALLOW_QUEUE_PEAK_MAX * target {
            return 1.0;
        }
        let standing = self.queued_beyond_jitter(round_mean, min_rtt) / peak;
        ((PEAK_QUEUE_NO_CORRECTION - standing) / (PEAK_QUEUE_NO_CORRECTION - PEAK_QUEUE_FULL_CORRECTION)).clamp(0.0, 1.0)
    }

    /// `tolerant`: a queue showed at some moment of the last complete round: its largest RTT
    /// is above the propagation delay by more than the least queue peak that counts as a
    /// buffer's depth ([`QUEUE_PEAK_FLOOR`]), beyond what jitter spreads a round's RTTs over
    /// ([`JITTER_RANGE`]). A buffer a fraction of the queueing target deep never holds a
    /// queue through a round, but it shows while it overflows (15 kB at 100 Mbit/s: 1.2 ms).
    fn queue_showed(&self) -> bool {
        let (Some(min_rtt), Some(max_rtt)) = (self.min_rtt, self.last_round_max_rtt) else { return false };
        max_rtt.saturating_sub(min_rtt).as_secs_f64() - JITTER_RANGE * self.jitter() > QUEUE_PEAK_FLOOR * queue_target(min_rtt)
    }

    /// `tolerant`: how many times more a round's loss count varies than it would if each
    /// packet were lost independently at `p̂` (the index of dispersion), from Startup's losses
    /// so far. Losses that come in runs (a radio link in a fade, a burst of interference)
    /// vary that much more: for losses whose consecutive outcomes correlate by `ρ` (a
    /// two-state Markov chain, as Gilbert-Elliott nearly is), the variance of a long sample's
    /// count grows by `(1 + ρ) / (1 − ρ)`. `ρ` is read from how often a loss follows another,
    /// against `p̂`, with a prior of independence worth [`DISPERSION_PRIOR_LOSSES`].
    /// Independent loss gives about 1.
    fn loss_dispersion(&self) -> f64 {
        let p = self.random_loss.min(MAX_CORRECTED_LOSS);
        let follows = (self.startup_lost_in_runs as f64 + p * DISPERSION_PRIOR_LOSSES) / (self.startup_lost as f64 + DISPERSION_PRIOR_LOSSES);
        let rho = ((follows - p) / (1.0 - p)).clamp(0.0, 0.9);
        ((1.0 + rho) / (1.0 - rho)).min(MAX_LOSS_DISPERSION)
    }

    /// `tolerant`: folds the calm packets resolved since the last update into `p̂`.
    fn update_random_loss(&mut self) {
        let resolved = self.calm_acked + self.calm_lost;
        if resolved < LOSS_SAMPLE_PACKETS * self.mss {
            return;
        }
        let packets = resolved as f64 / self.mss as f64;
        let fraction = self.calm_lost as f64 / resolved as f64;
        // A running mean until the memory is full, then an exponential average over it.
        self.calm_seen += packets;
        let weight = (packets / self.calm_seen.min(LOSS_MEMORY_PACKETS)).min(1.0);
        self.random_loss += (fraction - self.random_loss) * weight;
        self.calm_acked = 0;
        self.calm_lost = 0;
    }

    /// `tolerant`: the round just ended lost more than the path's own loss rate explains
    /// while a queue stood through it: the loss is a queue overflowing, which is congestion.
    fn congested_round(&self) -> bool {
        let resolved = self.round_acked + self.round_lost;
        resolved >= LOSS_SAMPLE_PACKETS * self.mss
            && ((self.last_round_queue().is_some_and(|queue| queue > 0.5) && self.excess_loss(self.round_lost, resolved, 1.0)) || self.overflowing())
    }

    /// `tolerant`: the round lost more than a point of what it sent while a buffer no deeper
    /// than the queueing target has been held near its peak for [`HELD_FULL_ROUNDS`] rounds:
    /// the flows through it send more than it drains, and what it loses is its overflow,
    /// whatever `p̂` says. A buffer under half the target never holds the standing queue the
    /// other rule looks for, and one under the whole target rarely does, so without this rule
    /// no flow through it cut: ten flows through 60 kB at 100 Mbit/s x 40 ms each kept the
    /// estimate they left Startup with (2.6 to 27 Mbit/s, Jain 0.60), their estimates summing
    /// to 118 Mbit/s, and lost a quarter of what they sent.
    /// `p̂` is no guide there: every flow's had learned the overflow (0.13 to 0.41 on a path
    /// that loses nothing), and a test against it cut the flows that had learned least. The
    /// rule reads the queue, which every flow through the buffer sees alike. A lone flow with
    /// random loss through a buffer it does not fill keeps a queue below the peak its probes
    /// set, so the rule leaves it alone; one whose allowance alone overfills the buffer cuts
    /// on that overflow, as it should (10 kB at 100 Mbit/s x 40 ms: 89.8 -> 87.7 Mbit/s).
    fn overflowing(&self) -> bool {
        let resolved = self.round_acked + self.round_lost;
        self.held_full_rounds >= HELD_FULL_ROUNDS && self.round_lost as f64 > LOSS_SLACK * resolved as f64
    }

    /// `tolerant`, at a round's start: the last ProbeBW round's mean RTT sat at
    /// [`PEAK_QUEUE_NO_CORRECTION`] of the queue peak or above, and the peak is no deeper than
    /// [`HELD_FULL_PEAK_MAX`] times the queueing target. (Up to half the target only, eight
    /// flows through 25 kB at 20 Mbit/s x 40 ms, a 10 ms buffer, were left at Jain 0.79; 0.99
    /// then. Up to the target only, twenty flows through 250 kB at 100 Mbit/s x 40 ms, a 20 ms
    /// buffer, were left at 0.81-0.89; 0.98-1.00 now. Unbounded, four flows keeping their
    /// allowances queued in 1 MB at 5 % loss read as a full buffer, cut on the random loss and
    /// shared worse.) The mean and the peak
    /// are taken whole, jitter not discounted: the delay variation of flows crowding a buffer
    /// of a millisecond is the queue's own churn, larger for a flow that sends in bursts, and
    /// with it discounted the largest flow of four through 15 kB never saw the buffer full
    /// while the others did (Jain 0.55). Jitter of the path's own spreads a round's RTTs
    /// about their middle, which keeps the mean near half the peak.
    fn held_full(&self) -> bool {
        let (true, Mode::ProbeBw, Some(min_rtt), Some(round_mean)) = (self.tolerant(), self.mode, self.min_rtt, self.last_round_mean_rtt) else { return false };
        let target = queue_target(min_rtt);
        if self.queue_peak <= QUEUE_PEAK_FLOOR * target || self.queue_peak > HELD_FULL_PEAK_MAX * target {
            return false;
        }
        round_mean.saturating_sub(min_rtt).as_secs_f64() >= PEAK_QUEUE_NO_CORRECTION * self.queue_peak
    }

    /// `tolerant`: the share of the bandwidth estimate the pacer adds, while the flow waits
    /// after an overflow cut in a phase of gain 1, so that its flight grows by
    /// [`OVERFLOW_GROWTH_PACKETS`] a round (and the pacing margin is made up). The cut takes the
    /// same share from every flow and, as the wait is as many rounds as the flight has
    /// packets, up to [`MAX_PROBE_WAIT_ROUNDS`], flows larger than that waited alike and kept
    /// whatever split they had; growing by the same number of packets each, they converge as
    /// Reno flows do (Chiu and Jain's additive increase, multiplicative decrease).
    fn overflow_growth(&self) -> f64 {
        if !self.overflow_cut || self.mode != Mode::ProbeBw || self.pacing_gain != 1.0 || !self.waiting_after_cut() {
            return 0.0;
        }
        (1.0 - PACING_MARGIN) + (OVERFLOW_GROWTH_PACKETS * self.mss) as f64 / self.inflight(1.0).max(self.mss) as f64
    }

    /// The share `lost / resolved` is above `p̂` by more than three standard deviations
    /// of the difference between two binomial shares (this one's packets, and those
    /// behind `p̂`), plus a point. The variance is the two-proportion test's: of the
    /// share both samples pooled would show (what they have in common if the loss is
    /// the same), and at least one loss in what `p̂` has seen (Laplace's rule), so a
    /// first loss after a clean start is not a surprise. (Taking `p̂` alone as the
    /// variance's share undersold it while `p̂` rested on a dozen packets: at 30 %
    /// loss, one loss in twelve made a round of 40 % look like a full path, and
    /// Startup ended at a tenth of a 50 Mbit/s path.)
    /// `dispersion` widens the variance for losses that come in runs (1: independent losses).
    fn excess_loss(&self, lost: u64, resolved: u64, dispersion: f64) -> bool {
        let p = self.random_loss.min(MAX_CORRECTED_LOSS);
        let packets = resolved as f64 / self.mss as f64;
        let seen = self.calm_seen.min(LOSS_MEMORY_PACKETS);
        let share = lost as f64 / resolved.max(1) as f64;
        let pooled = (p * seen + share * packets) / (seen + packets).max(1.0);
        let spread_p = pooled.max(1.0 / (seen + 2.0));
        let spread = (dispersion * spread_p * (1.0 - spread_p) * (1.0 / packets + 1.0 / seen.max(1.0))).sqrt();
        share > p + 3.0 * spread + LOSS_SLACK
    }

    /// A delivery-rate sample as the model takes it. `tolerant` counts what the path
    /// lost at random as carried: the packets the sample saw lost are added back when
    /// their share is within what the calm rate's loss explains (three standard
    /// deviations of a binomial draw, plus a point), which also cancels the sample's own
    /// loss noise; beyond that, the loss is the sample's to keep and only `p̂` is corrected for.
    fn bandwidth_sample(&self, sample: &RateSample) -> f64 {
        if self.flavour == BbrFlavour::V1 {
            return sample.delivery_rate;
        }
        let p = self.random_loss.min(MAX_CORRECTED_LOSS);
        let resolved = sample.delivered + sample.lost;
        let interval = sample.interval.as_secs_f64();
        let mut corrected = sample.delivery_rate / (1.0 - p);
        if resolved > 0 && interval > 0.0 && !self.excess_loss(sample.lost, resolved, 1.0) {
            // The losses counted as carried are bounded as the correction is: a share within
            // the test's spread of a `p̂` near the bound would otherwise scale past it.
            corrected = (resolved as f64 / interval).min(sample.delivery_rate / (1.0 - MAX_CORRECTED_LOSS));
        }
        sample.delivery_rate + (corrected - sample.delivery_rate).max(0.0) * self.correction_trust()
    }

    /// `tolerant`: how much of the loss correction applies now. A queue that stood through
    /// the last round says the estimate is already too high: the correction fades out between
    /// a quarter and a half of the queueing target, or, in a buffer shallower than that, as
    /// the queue nears the deepest it has been.
    fn correction_trust(&self) -> f64 {
        self.last_round_queue().map_or(1.0, |queue| (2.0 - 4.0 * queue).clamp(0.0, 1.0)).min(self.shallow_queue_trust())
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = Mode::ProbeBw;
        self.cwnd_gain = CWND_GAIN;
        // Any phase but the 0.75 one, chosen from the clock so that flows starting together
        // do not probe in step (the draft draws it at random; the simulator must be repeatable).
        self.cycle_index = 2 + (now.total_micros() / 997 % 6) as usize;
        self.cycle_stamp = now;
        self.pacing_gain = PROBE_BW_GAINS[self.cycle_index];
    }

    fn update_cycle_phase(&mut self, now: Instant, prior_inflight: u64, newly_lost: u64, latest_rtt: Duration) {
        if self.mode != Mode::ProbeBw {
            return;
        }
        let Some(min_rtt) = self.min_rtt else { return };
        let elapsed = (now - self.cycle_stamp).as_secs_f64();
        let round_trip = self.round_trip(min_rtt);
        let a_round = elapsed > round_trip;
        let next = if self.pacing_gain > 1.0 {
            let full = prior_inflight >= self.probe_inflight();
            match self.flavour {
                BbrFlavour::V1 => a_round && (newly_lost > 0 || full),
                BbrFlavour::Tolerant => {
                    a_round && (full || latest_rtt.as_secs_f64() >= round_trip + PROBE_RTT_RISE * queue_target(min_rtt) || elapsed > 2.0 * round_trip)
                }
            }
        } else if self.pacing_gain < 1.0 {
            a_round || prior_inflight <= self.inflight(1.0)
        } else {
            a_round
        };
        if next {
            self.cycle_index = (self.cycle_index + 1) % PROBE_BW_GAINS.len();
            self.cycle_stamp = now;
            self.pacing_gain = PROBE_BW_GAINS[self.cycle_index];
            if self.pacing_gain > 1.0 && self.waiting_after_cut() {
                self.pacing_gain = 1.0;
            }
        }
    }

    /// `tolerant`: after a congestion cut, no probing for as many rounds as the window has
    /// packets (at most [`MAX_PROBE_WAIT_ROUNDS`]): about when a Reno flow would have
    /// grown back, so that a loss-based flow sharing the queue gets its turn.
    fn waiting_after_cut(&self) -> bool {
        let Some(cut) = self.last_cut_round else { return false };
        let wait = (self.inflight(1.0) / self.mss).clamp(1, MAX_PROBE_WAIT_ROUNDS);
        self.round < cut + wait
    }

    /// `tolerant`: a queue above the queueing target has stood through the last
    /// [`COMPETING_ROUNDS`] rounds, our ProbeBW drains included, and within the last
    /// [`COMPETING_MEMORY_ROUNDS`] the bottleneck was shown to be shared with flows that
    /// keep more queued than our allowance (see `queue_fillers_lately`).
    fn competing(&self) -> bool {
        self.standing_queue_rounds >= COMPETING_ROUNDS && self.queue_fillers_lately()
    }

    /// `tolerant`: within the last [`COMPETING_MEMORY_ROUNDS`], either the queue overflowed
    /// (a congestion cut: a flow that fills queues until they overflow shares the
    /// bottleneck), or the flow was squeezed (see `note_squeeze`). Flows that keep only
    /// their allowance queued neither overflow the queue nor squeeze one another.
    fn queue_fillers_lately(&self) -> bool {
        let lately = |round: Option<u64>| round.is_some_and(|r| self.round < r + COMPETING_MEMORY_ROUNDS);
        lately(self.last_cut_round) || lately(self.squeezed_round)
    }

    /// `tolerant`, at each round's start: notes a squeeze, a bandwidth estimate fallen below
    /// [`SQUEEZED_SHARE`] of what it was when the queue standing for [`COMPETING_ROUNDS`]
    /// began to stand. Flows that hold more than their allowance queued (`bbr`'s two
    /// products, a loss-based flow, or a `tolerant` flow already competing) take a growing
    /// share of a FIFO queue's service from one that holds one product plus its allowance;
    /// its estimate follows what it gets, and its window the estimate. A cut is no sign of
    /// them where the queue is deep: five `tolerant` flows starting together through 500 kB
    /// at 50 Mbit/s got 4.1 to 17.5 Mbit/s (Jain 0.73), the two that had a cut as Startup
    /// overflowed the queue competing and the three that had none squeezed, and ten at 1 %
    /// loss 0.66 over 5 seeds. Counted as a sign of them, it brings every flow there to the
    /// same window (BBR v1's), as the cut brings it against CUBIC.
    fn note_squeeze(&mut self) {
        if !self.tolerant() {
            return;
        }
        if self.standing_queue_rounds == 1 {
            self.bw_when_queue_rose = self.bw;
        }
        if self.mode == Mode::ProbeBw && self.standing_queue_rounds >= COMPETING_ROUNDS && self.bw < SQUEEZED_SHARE * self.bw_when_queue_rose {
            self.squeezed_round = Some(self.round);
        }
    }

    /// `tolerant`'s window in ProbeBW while competing: BBR v1's (two products and three
    /// send quanta), and [`COMPETING_ALLOWANCE`] packets besides. Each of BBR's terms grows
    /// with the flow's own estimate, so where flows are bound by their windows any split of
    /// the bottleneck keeps itself (each flow's window carries its estimate at the RTT the
    /// windows together make); a term the same for every flow pulls them to equal rates, as
    /// the allowance does outside competition. Below 24 Mbit/s a quantum is two packets,
    /// the same for every flow, and many slow flows shared fairly without it; above, it is a
    /// millisecond of the flow's rate: twenty flows through 1 Gbit/s x 2 ms got 18 to 241
    /// Mbit/s (Jain 0.42, and 0.71 for fifty); 0.98 and 0.95 now. The price is the packets
    /// queued for each flow: twenty flows of 5 Mbit/s through 5 MB at 100 Mbit/s x 20 ms,
    /// mean RTT 51 -> 62 ms. Sixteen packets gave 0.99 and 0.98, and 72 ms there (`docs/congestion.md`).
    fn competing_window(&self) -> u64 {
        self.v1_window() + COMPETING_ALLOWANCE * self.mss + self.ack_gap_allowance()
    }

    /// `tolerant`: room in the window for what the path delivers while it holds the acks
    /// (see [`Bbr::note_ack_gap`]): the estimate times the longest recent hold, at most
    /// [`ACK_GAP_PRODUCTS`] bandwidth-delay products.
    fn ack_gap_allowance(&self) -> u64 {
        ((self.bw * self.ack_gap_peak) as u64).min(ACK_GAP_PRODUCTS * self.inflight(1.0))
    }

    /// `tolerant`, at each ack that acknowledged something: whether the acks had stopped
    /// for longer than a round trip (see [`ACK_GAP_LEAST`]) with data in flight, in
    /// ProbeBW, and then came back several at once ([`ACK_BURST`]): the return path held
    /// them. The window holds the model's product and a small allowance, so a sender whose
    /// acks stop for longer than a round trip runs out of window and waits while the path,
    /// which kept delivering, goes idle; with the longest such hold's worth of the estimate
    /// added to the window (`ack_gap_allowance`) it keeps sending through the next. Linux's BBR adds the most
    /// the acks ran ahead of the estimate instead; counted that way the allowance grew
    /// with every flow's own send bursts at a shared bottleneck and flows lost their
    /// fairness (`docs/congestion.md`), where a hold longer than the round trip comes
    /// from the path, not the flow. A return path stopping 60 ms of every 160 (20 Mbit/s,
    /// 5 and 20 ms each way, a 100 kB buffer): 12.1 and 13.1 Mbit/s before, 18.0 and 18.4
    /// with it; ten flows through 100 Mbit/s behind it (10 ms, 500 kB): 69 -> 94 Mbit/s
    /// together, Jain 0.82 -> 0.94. Paths that hold no acks are as before.
    fn note_ack_gap(&mut self, now: Instant, bytes_in_flight: u64, rtt: &RttEstimator) {
        if let Some((resumed, gap, acks)) = self.ack_gap_candidate.take() {
            if now.saturating_duration_since(resumed).as_secs_f64() <= gap / ACK_BURST_SPREAD {
                if acks + 1 >= ACK_BURST {
                    self.ack_gap_peak = self.ack_gap_peak.max(gap);
                } else {
                    self.ack_gap_candidate = Some((resumed, gap, acks + 1));
                }
            }
        }
        if let (Some((at, in_flight)), Some(min_rtt)) = (self.last_ack, self.min_rtt) {
            let gap = now.saturating_duration_since(at).as_secs_f64();
            // The smoothed RTT, or two minimum ones where that is less: behind a standing
            // queue (a loss-based flow's) a flow's acks come up to a queue's delay apart with
            // none held, but a gap of twice the path's own round trip followed by a burst
            // is a hold there too (30 ms stops of every 330, 5 ms each way, against CUBIC:
            // 2.2 Mbit/s to its 16.8 with no hold counted, 3.4 to 15.7 counting gaps over
            // the smoothed RTT alone, 8.2 to 10.9 now).
            let round_trip = if rtt.has_sample() { rtt.get().max(min_rtt).min(min_rtt + min_rtt) } else { min_rtt };
            let counts = min_rtt >= ACK_GAP_PATH_LEAST && in_flight > 0 && self.mode == Mode::ProbeBw;
            if counts && gap > ACK_GAP_LEAST * round_trip.as_secs_f64() && gap <= ACK_GAP_MOST {
                self.ack_gap_candidate = Some((now, gap, 1));
            }
        }
        self.last_ack = Some((now, bytes_in_flight));
    }

    /// BBR v1's window: two bandwidth-delay products and three send quanta.
    fn v1_window(&self) -> u64 {
        self.inflight(self.cwnd_gain) + 3 * self.send_quantum()
    }

    /// `tolerant`: room in the window for the path's own lost packets until they are found.
    /// The window is sized as if each packet left the flight a round trip after it was sent,
    /// but a lost one stays counted in flight until loss detection declares it: on a path
    /// that reorders that is by time alone, up to two round trips after it left, and on any
    /// path the last packets of a flight wait for the time threshold. With a share `p̂` of
    /// what is sent lost, `p̂ × bandwidth × (how much later losses are found)` of the flight
    /// is packets already gone. Without room for them the window ran out before the path was
    /// full, each round delivered less than the one before, and the estimate followed it
    /// down: at 30 % loss on 100 Mbit/s × 40 ms, with 1 ms of normally distributed jitter
    /// each way 54 Mbit/s (geometric mean of four seeds; 85 with the room), with 5 ms 16 (45), with
    /// 2 ms spread evenly 71 (88). Scaled as the loss correction is by what the queue says
    /// (see `correction_trust`), and none while a buffer is held full: where `p̂` has learned
    /// a buffer's overflow rather than the path's loss, room for it feeds the overflow.
    fn room_for_undeclared_loss(&self) -> u64 {
        if self.held_full_rounds > 0 {
            return 0;
        }
        let p = self.random_loss.min(MAX_CORRECTED_LOSS);
        (p * self.correction_trust() * self.bw * self.loss_found_late) as u64
    }

    /// `tolerant`: what the window allows beyond the bandwidth-delay product outside
    /// competition. The same number of packets for every flow at the same bottleneck, so
    /// that flows that keep a queue each keep the same share of it, and a FIFO queue serves
    /// them equally (the equilibrium of TCP Vegas and FAST): a quarter of the product,
    /// from 4 to 16 packets.
    fn queue_allowance(&self) -> u64 {
        (self.inflight(1.0) / 4).clamp(QUEUE_ALLOWANCE_MIN * self.mss, QUEUE_ALLOWANCE_MAX * self.mss)
    }

    /// `tolerant`, at each round's start: whether the path got longer (a route or a link
    /// changed). The sign: in ProbeBW a round's smallest RTT steps up more than
    /// [`STARTUP_GAIN`] times the round's before (more than any queue grows in a round:
    /// senders at most double what they sent the round before, Startup's gain being the
    /// steepest) and by more than [`PATH_STEP_MIN`] (a path lengthened by less is left to
    /// `starved_by_longer_path`); then, for [`LENGTHENED_PATH_ROUNDS`] rounds of ProbeBW in a
    /// row, the queue that RTT implies holds more than the whole flight. The minimum is
    /// then measured again (ProbeRTT) at once rather than 10 s after it was taken.
    /// Waiting starved the flow: its window, sized by the old minimum, carried a fifth of
    /// the bandwidth once a 40 ms path became 400 ms, the estimate aged down to match, and
    /// 10 MB at 20 Mbit/s took 47 s. Without the step, a flow with a small share of a
    /// queue others keep also sees more queued than it has in flight, and adopting their
    /// queue as its path's delay doubled everyone's (4 flows at 2 % loss: mean RTT 60 ->
    /// 150 ms); outside ProbeBW, Startup's own queue builds fast enough to step (a hundred
    /// flows starting together over loopback fired it for some of them).
    fn note_path_length(&mut self, previous_round_min: Option<Duration>, bytes_in_flight: u64) {
        if !self.tolerant() {
            return;
        }
        let probing_bw = self.mode == Mode::ProbeBw;
        if let (Some(before), Some(latest)) = (previous_round_min, self.last_round_min_rtt) {
            if probing_bw && latest.as_secs_f64() > STARTUP_GAIN * before.as_secs_f64() && latest.saturating_sub(before) > PATH_STEP_MIN {
                self.rtt_step_round = Some(self.round);
            }
        }
        self.note_delay_rise(probing_bw);
        let stepped = self.rtt_step_round.is_some_and(|step| self.round <= step + 2 * u64::from(LENGTHENED_PATH_ROUNDS));
        let lengthened = probing_bw && ((stepped && self.queue_exceeds_flight(bytes_in_flight)) || self.starved_by_longer_path(bytes_in_flight));
        self.lengthened_rounds = if lengthened { self.lengthened_rounds.saturating_add(1) } else { 0 };
    }

    /// `tolerant`: notes a round whose smallest RTT stood a queueing target and more than
    /// [`PATH_STEP_MIN`] above the minimum within two rounds of one that showed no queue
    /// (half the target at most): a rise in one step, as a path that got longer shows it (a
    /// queue of our own grows by what the probe adds, and the 0.75 round takes it away; on
    /// one host scheduling alone moves round trips by a millisecond or two). Remembers the
    /// bandwidth then.
    fn note_delay_rise(&mut self, probing_bw: bool) {
        match self.last_round_queue() {
            Some(queue) if queue <= 0.5 => self.clean_round = Some(self.round),
            Some(queue)
                if queue > 1.0
                    && probing_bw
                    && self.last_round_min_rtt.zip(self.min_rtt).is_some_and(|(round_min, min)| round_min.saturating_sub(min) > PATH_STEP_MIN)
                    && self.clean_round.is_some_and(|clean| self.round <= clean + 2)
                    && self.delay_rise.is_none_or(|rise| self.round > rise.round + 2) =>
            {
                self.delay_rise = Some(DelayRise { round: self.round, bw: self.bw });
            }
            _ => {}
        }
    }

    /// `tolerant`: since a rise of the RTT (see `note_delay_rise`), within four filter
    /// lengths, the bandwidth estimate has fallen by 5 % while the flight holds a whole
    /// product and the delay still stands: the window, sized by the old minimum, no longer
    /// covers the path, so what it delivers reads as less bandwidth, which shrinks the
    /// window again. A path that went from 40 to 60 ms (too little a step for the rule
    /// above, whose window headroom is a quarter of a product) fell from 19 to 2.5 Mbit/s
    /// of 20 in 10 s, until the minimum expired; BBR's window of two products does not
    /// fall. Measuring the minimum again stops it; a queue of our own ProbeRTT drains, and
    /// not after a congestion cut: against CUBIC filling a 500 kB queue, taking its queue
    /// for the path's delay left 20 Mbit/s of 100 to `tolerant` (44 before). Nor after a
    /// squeeze: among twenty `tolerant` flows the queue refilling after their ProbeRTTs
    /// read as a longer path, and flows that took it for their minimum (34 ms on a 20 ms
    /// path) kept up to 2.6 times their share (Jain 0.73).
    fn starved_by_longer_path(&self, bytes_in_flight: u64) -> bool {
        let Some(rise) = self.delay_rise.filter(|rise| self.round <= rise.round + 4 * BW_FILTER_ROUNDS) else { return false };
        // A queue that overflowed lately (a congestion cut) is a loss-based flow's, and one
        // that squeezed us holds others' packets: its delay is not the path's, and measuring
        // it as the minimum hands those flows the link.
        !self.queue_fillers_lately()
            && self.bw < 0.95 * rise.bw
            && bytes_in_flight >= self.inflight(1.0)
            && self.last_round_queue().is_some_and(|queue| queue > 1.0)
    }

    /// The last round's smallest RTT stood above the minimum by more than the estimated
    /// bandwidth could have queued of all this flow has in flight: not a queue of ours
    /// (a flow keeping its own queue holds in flight at least what its bandwidth queues),
    /// and delivering far less than the estimate.
    fn queue_exceeds_flight(&self, bytes_in_flight: u64) -> bool {
        let (Some(min_rtt), Some(round_min)) = (self.min_rtt, self.last_round_min_rtt) else { return false };
        self.bw * round_min.saturating_sub(min_rtt).as_secs_f64() > bytes_in_flight as f64
    }

    fn check_full_pipe(&mut self, app_limited: bool) {
        if self.filled_pipe || !self.round_start || app_limited {
            return;
        }
        if self.bw >= self.full_bw * FULL_BW_GROWTH {
            self.full_bw = self.bw;
            self.full_bw_count = 0;
            return;
        }
        self.full_bw_count += 1;
        if self.full_bw_count >= self.full_bw_rounds() {
            self.filled_pipe = true;
        }
    }

    /// Rounds without growth that end Startup. A path that is full builds a queue in
    /// Startup (its window is nearly three times the product); `tolerant` seeing none
    /// takes the plateau for noise unless it lasts as many rounds as it takes to deliver
    /// what three rounds would without loss: under 60 % loss each way a round's rate
    /// sample rests on a handful of packets and acks, and three rounds without a lucky
    /// one ended Startup at 1 % of a 50 Mbit/s path (1 MB then took 30 s, not 7). A
    /// full path with a shallow queue or a policer still ends Startup at once, by its
    /// excess loss (see `on_ack_batch`).
    fn full_bw_rounds(&self) -> u32 {
        if !self.tolerant() || self.last_round_queue().is_some_and(|queue| queue > 0.5) {
            return FULL_BW_ROUNDS;
        }
        // Sampling noise, not the correction: bounded by the rounds, not by MAX_CORRECTED_LOSS
        // (the cast saturates when nothing is delivered).
        let delivered_share = 1.0 - self.random_loss;
        ((f64::from(FULL_BW_ROUNDS) / delivered_share).ceil() as u32).clamp(FULL_BW_ROUNDS, MAX_QUIET_PLATEAU_ROUNDS)
    }

    /// `tolerant`: keeps each second's smallest RTT for [`MIN_RTT_WINDOW`]. When the minimum
    /// expires, BBR v1 takes the next sample in its place, and ProbeRTT can only lower it.
    /// On a cellular link that all but stops for seconds (a fade in a driving trace), that
    /// sample carried the fade: minima of 0.57, 2.5, 15 and 16.5 s sized every window, the
    /// queue those windows built kept the RTT there, and RTT p95 reached 24 s.
    fn note_recent_rtt(&mut self, now: Instant, sample: Duration) {
        const SLOT: Duration = Duration::from_secs(1);
        match self.recent_rtt.back_mut() {
            Some((began, least)) if now < *began + SLOT => *least = (*least).min(sample),
            _ => self.recent_rtt.push_back((now, sample)),
        }
        while self.recent_rtt.front().is_some_and(|&(began, _)| began + MIN_RTT_WINDOW < now) {
            self.recent_rtt.pop_front();
        }
    }

    fn check_drain(&mut self, now: Instant, bytes_in_flight: u64) {
        if self.mode == Mode::Startup && self.filled_pipe {
            self.mode = Mode::Drain;
            self.pacing_gain = DRAIN_GAIN;
            self.cwnd_gain = STARTUP_GAIN;
        }
        if self.mode == Mode::Drain && bytes_in_flight <= self.inflight(1.0) {
            self.enter_probe_bw(now);
        }
    }

    fn update_probe_rtt(&mut self, now: Instant, batch: &AckBatch, min_rtt_expired: bool) {
        // `tolerant`: an application-limited flow keeps no queue of its own, so the RTT it
        // sees is the path's and the sample just taken renews the minimum; draining to
        // probe for it would only hold back the application's messages (BBRv3 skips it too).
        let fresh_enough = self.tolerant() && batch.app_limited;
        if self.mode != Mode::ProbeRtt && min_rtt_expired && self.min_rtt.is_some() && !fresh_enough {
            self.save_cwnd(self.recovery_start.is_some());
            self.mode = Mode::ProbeRtt;
            self.pacing_gain = 1.0;
            self.cwnd_gain = 1.0;
            self.probe_rtt_done = None;
            // Fixed now: ProbeRTT's own rounds deliver less, by design.
            let delivering = self.last_round_best_sample.max(self.round_best_sample);
            self.probe_rtt_bw = (self.tolerant() && delivering > 0.0 && delivering < self.bw && self.random_loss <= PROBE_RTT_DEEP_LOSS).then_some(delivering);
        }
        if self.mode != Mode::ProbeRtt {
            return;
        }
        match self.probe_rtt_done {
            None if batch.bytes_in_flight <= self.probe_rtt_cwnd() => {
                self.probe_rtt_done = Some(now + PROBE_RTT_DURATION);
                self.probe_rtt_round_done = false;
                self.next_round_delivered = batch.delivered;
            }
            None => {}
            Some(done) => {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done && now >= done {
                    self.min_rtt_stamp = now;
                    self.probe_rtt_bw = None;
                    self.restore_cwnd();
                    if self.filled_pipe {
                        self.enter_probe_bw(now);
                    } else {
                        self.mode = Mode::Startup;
                        self.pacing_gain = STARTUP_GAIN;
                        self.cwnd_gain = STARTUP_GAIN;
                    }
                }
            }
        }
    }

    /// `app_limited`: the ack batch's rate sample, if any, is one the application limited.
    fn set_pacing_rate(&mut self, rtt: &RttEstimator, app_limited: bool) {
        // The initial window over the RTT, at Startup's gain: the rate before any sample.
        let initial = || (STARTUP_GAIN * self.initial_cwnd as f64 / rtt.get().as_secs_f64().max(1e-3)) as u64;
        let rate = if self.bw > 0.0 { ((self.pacing_gain + self.overflow_growth()) * self.bw * PACING_MARGIN) as u64 } else { initial() };
        // The pacer starts from the first sample, and until the pipe is full its rate only
        // rises. A first sample the application limited says nothing of the path (a 49-byte
        // session header acknowledged before the bulk behind it was written: a few kB/s),
        // so the pacer starts from no less than the initial rate then; paced at that
        // sample's rate, the next 8 kB packet on loopback waited 300 ms for its turn.
        let rate = if self.pacer.rate() == 0 && app_limited { rate.max(initial()) } else { rate };
        if self.filled_pipe || rate > self.pacer.rate() {
            self.pacer.set_rate(rate.max(1));
        }
        let quantum = self.send_quantum();
        self.pacer.set_burst(quantum);
    }

    fn set_cwnd(&mut self, batch: &AckBatch, acked: u64) {
        if self.entering_recovery {
            self.entering_recovery = false;
            if self.flavour == BbrFlavour::V1 {
                // Packet conservation: one packet out for each one acknowledged, for a round.
                // The episode has just begun: what to come back to is the window before it.
                self.save_cwnd(false);
                self.cwnd = batch.bytes_in_flight + acked.max(self.mss);
                self.conservation_until = Some(self.round + 1);
            }
        }
        if self.conservation_until.is_some_and(|round| self.round >= round) {
            self.conservation_until = None;
        }
        let target = match self.min_rtt {
            Some(_) if self.bw > 0.0 && self.tolerant() && self.mode == Mode::ProbeBw && !self.competing() => {
                let base = if self.pacing_gain > 1.0 { self.probe_inflight() } else { self.inflight(self.pacing_gain.max(1.0)) };
                base + self.queue_allowance() + self.room_for_undeclared_loss() + self.ack_gap_allowance()
            }
            Some(_) if self.bw > 0.0 && self.tolerant() && self.mode == Mode::ProbeBw => self.competing_window(),
            Some(_) if self.bw > 0.0 => self.v1_window(),
            _ => self.initial_cwnd,
        }
        .max(self.min_pipe_cwnd());
        if self.conservation_until.is_some() {
            self.cwnd = self.cwnd.max(batch.bytes_in_flight + acked);
        } else if self.filled_pipe {
            self.cwnd = (self.cwnd + acked).min(target);
        } else if self.cwnd < target || batch.delivered < self.initial_cwnd {
            self.cwnd += acked;
        }
        self.cwnd = self.cwnd.max(self.min_pipe_cwnd());
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self.cwnd.min(self.probe_rtt_cwnd());
        }
    }
}

impl Controller for Bbr {
    fn on_sent(&mut self, now: Instant, packet: &SentPacket, _bytes_in_flight: u64) -> u64 {
        self.pacer.on_sent(now, packet.bytes);
        match self.mode {
            Mode::Startup => STARTUP,
            _ if self.calm() => CALM,
            _ => 0,
        }
    }

    fn on_ack(&mut self, _now: Instant, packet: &SentPacket, rtt: &RttEstimator) {
        if rtt.has_sample() {
            self.latest_rtt = Some(rtt.latest());
        }
        self.acked += packet.bytes;
        self.acked_delivered = Some(self.acked_delivered.map_or(packet.delivered, |d| d.max(packet.delivered)));
        if self.counts_as_calm(packet) {
            self.calm_acked += packet.bytes;
        }
        if self.recovery_start.is_some_and(|start| packet.sent > start) {
            // A packet sent after the episode began came back: the episode is over.
            self.recovery_start = None;
            self.conservation_until = None;
            self.restore_cwnd();
        }
    }

    fn on_packet_lost(&mut self, now: Instant, packet: &SentPacket) {
        if let (true, Some(latest)) = (self.tolerant(), self.latest_rtt) {
            let late = now.saturating_duration_since(packet.sent).saturating_sub(latest).min(latest + latest);
            self.loss_found_late += (late.as_secs_f64() - self.loss_found_late) * LOSS_FOUND_LATE_GAIN;
        }
        if self.counts_as_calm(packet) {
            self.calm_lost += packet.bytes;
        }
        // How the path's losses cluster, for Startup's exit: Startup's losses while no queue
        // stands (what overflows a queue is lost in runs too, and that is congestion).
        // Losses are found in sequence order, so a run shows as consecutive numbers.
        if self.mode == Mode::Startup && packet.controller_state == STARTUP && self.counts_as_calm(packet) && self.last_round_queue().is_none_or(|queue| queue <= 0.5) {
            let in_run = self.last_lost_seq.is_some_and(|seq| seq + 1 == packet.seq);
            self.startup_lost += 1;
            self.startup_lost_in_runs += u64::from(in_run);
            if self.recent_startup_losses.len() == RECENT_LOSSES_KEPT {
                self.recent_startup_losses.pop_front();
            }
            self.recent_startup_losses.push_back((packet.seq, in_run));
        }
        self.last_lost_seq = Some(packet.seq);
    }

    fn on_spurious_loss(&mut self, _now: Instant, packet: &SentPacket) {
        // A path that reorders makes runs of losses too (a late packet and the ones behind
        // it, all overtaken), which come back: they are no bursts of the path's loss.
        let Some(i) = self.recent_startup_losses.iter().rposition(|&(seq, _)| seq == packet.seq) else { return };
        let Some((_, in_run)) = self.recent_startup_losses.remove(i) else { return };
        self.startup_lost = self.startup_lost.saturating_sub(1);
        self.startup_lost_in_runs = self.startup_lost_in_runs.saturating_sub(u64::from(in_run));
    }

    fn on_ack_batch(&mut self, now: Instant, batch: &AckBatch, rtt: &RttEstimator) {
        let acked = std::mem::take(&mut self.acked);
        self.round_start = false;
        if let Some(delivered) = self.acked_delivered.take() {
            if delivered >= self.next_round_delivered {
                self.next_round_delivered = batch.delivered;
                self.round += 1;
                self.round_start = true;
                let previous_round_min = std::mem::replace(&mut self.last_round_min_rtt, self.round_min_rtt.take());
                self.last_round_mean_rtt = (self.round_rtt_samples > 0).then(|| self.round_rtt_total / self.round_rtt_samples);
                self.last_round_best_sample = std::mem::take(&mut self.round_best_sample);
                (self.round_rtt_total, self.round_rtt_samples) = (Duration::ZERO, 0);
                self.last_round_max_rtt = self.round_max_rtt.take();
                if let (Some(min_rtt), Some(round_max)) = (self.min_rtt, self.last_round_max_rtt) {
                    self.queue_peak = (self.queue_peak * QUEUE_PEAK_DECAY).max(round_max.saturating_sub(min_rtt).as_secs_f64());
                }
                self.ack_gap_peak *= QUEUE_PEAK_DECAY;
                if !(self.tolerant() && self.mode == Mode::ProbeRtt) {
                    // ProbeRTT's 200 ms can be many rounds on a short path; with so little in
                    // flight its samples say nothing of the bandwidth, and counting its rounds
                    // would age out what the filter knew before it.
                    self.bw_round += 1;
                }
                let standing = self.last_round_queue().is_some_and(|queue| queue > 1.0);
                self.standing_queue_rounds = if standing { self.standing_queue_rounds.saturating_add(1) } else { 0 };
                self.held_full_rounds = if self.held_full() { self.held_full_rounds.saturating_add(1) } else { 0 };
                self.note_squeeze();
                self.note_path_length(previous_round_min, batch.bytes_in_flight);
            }
        }
        if self.tolerant() && acked > 0 {
            self.note_ack_gap(now, batch.bytes_in_flight, rtt);
        }
        if acked > 0 && rtt.has_sample() {
            let latest = rtt.latest();
            self.round_min_rtt = Some(self.round_min_rtt.map_or(latest, |m| m.min(latest)));
            self.round_max_rtt = Some(self.round_max_rtt.map_or(latest, |m| m.max(latest)));
            self.round_rtt_total += latest;
            self.round_rtt_samples += 1;
            self.update_delay_jitter(latest);
        }
        self.round_acked += batch.newly_acked;
        self.round_lost += batch.newly_lost;
        if self.tolerant() && self.round_start {
            let resolved = self.round_acked + self.round_lost;
            let enough = resolved >= LOSS_SAMPLE_PACKETS * self.mss && self.calm_seen > 0.0;
            // A round that loses more than independent losses at `p̂` explain ends Startup if a
            // queue showed in it, if its loss is beyond what the path's clustering explains
            // too, or if it is the third such round in a row. A burst of the path's own loss,
            // with no queue, is no full pipe: bursty loss of 15 % at 500 Mbit/s over 40 ms
            // ended Startup at a fraction of the path in two seeds of six, and 100 MB then went
            // at 132-175 Mbit/s, where the same loss spread evenly gave 276-310. Loss that
            // stays up as the rate doubles is the path filling however it clusters (a policer
            // drops the excess of every burst, one run per burst), and a buffer overflowing
            // shows as a queue, however shallow (several flows starting through 15 kB).
            let lossy = self.mode == Mode::Startup && enough && self.excess_loss(self.round_lost, resolved, 1.0);
            let held = self.held_calm.take();
            let held_rounds = held.map_or(0, |(_, _, rounds)| rounds);
            if lossy && (self.queue_showed() || held_rounds + 1 >= PERSISTENT_LOSS_ROUNDS || self.excess_loss(self.round_lost, resolved, self.loss_dispersion())) {
                // Doubling the rate raised the loss: the path is full, and that loss is the queue's.
                self.filled_pipe = true;
                self.startup_overshot = true;
                self.calm_acked = 0;
                self.calm_lost = 0;
            } else if lossy {
                // A burst of the path's, or the start of an overshoot: its packets count toward
                // `p̂` only once a round without excess loss says which (an overshoot folded
                // into `p̂` raised it past the loss of the rounds after, and Startup never ended).
                let (acked, lost, _) = held.unwrap_or_default();
                self.held_calm = Some((acked + self.calm_acked, lost + self.calm_lost, held_rounds + 1));
                self.calm_acked = 0;
                self.calm_lost = 0;
            } else if self.congested_round() {
                self.calm_acked = 0;
                self.calm_lost = 0;
                if self.last_cut_round.is_none_or(|r| self.round > r + 1) {
                    self.overflow_cut = self.overflowing();
                    self.last_cut_round = Some(self.round);
                    self.bw_filter.cap(CONGESTION_BETA * self.bw);
                    self.cut_delivered = batch.delivered;
                }
            } else {
                if let Some((acked, lost, _)) = held {
                    self.calm_acked += acked;
                    self.calm_lost += lost;
                }
                self.update_random_loss();
            }
            self.round_acked = 0;
            self.round_lost = 0;
        }
        if self.restore_after_timeout && acked > 0 {
            self.restore_after_timeout = false;
            self.restore_cwnd();
        }
        if let Some(sample) = batch.rate_sample {
            if sample.delivery_rate > 0.0 {
                let rate = self.bandwidth_sample(&sample);
                self.round_best_sample = self.round_best_sample.max(rate);
                // An application-limited sample is kept only when it shows more than the model
                // knows; one from before a congestion cut only when it shows less.
                let before_cut = sample.prior_delivered < self.cut_delivered;
                if (rate >= self.bw || !sample.is_app_limited) && !(before_cut && rate > self.bw) {
                    self.bw_filter.update(self.bw_round, rate);
                }
            }
        }
        self.bw = self.bw_filter.max(self.bw_round);
        let lengthened = self.lengthened_rounds >= LENGTHENED_PATH_ROUNDS;
        let min_rtt_expired = self.min_rtt.is_some() && (now > self.min_rtt_stamp + MIN_RTT_WINDOW || lengthened);
        if acked > 0 && rtt.has_sample() {
            let sample = rtt.latest();
            if self.tolerant() {
                self.note_recent_rtt(now, sample);
            }
            if self.min_rtt.is_none_or(|m| sample <= m) {
                self.min_rtt = Some(sample);
                self.min_rtt_stamp = now;
            } else if min_rtt_expired {
                // `tolerant`: a minimum that merely aged gives way to the smallest RTT of the
                // window, not to whatever this one sample carries (a longer path, which
                // `lengthened` detects, is the exception: its new delay is every sample's),
                // and rises by at most [`AGED_MIN_RTT_RISE`] (or 5 ms) at a time.
                // (The window holds this sample already.)
                let fallback = if self.tolerant() && !lengthened { self.recent_rtt.iter().map(|&(_, m)| m).min() } else { None };
                let fallback = fallback.map(|f| self.min_rtt.map_or(f, |m| f.min(m.mul_f64(AGED_MIN_RTT_RISE).max(m + PATH_STEP_MIN))));
                self.expired_min_rtt = self.min_rtt;
                self.min_rtt = Some(fallback.unwrap_or(sample));
                self.min_rtt_stamp = now;
            }
        }
        let prior_inflight = batch.bytes_in_flight + batch.newly_acked + batch.newly_lost;
        self.update_cycle_phase(now, prior_inflight, batch.newly_lost, rtt.latest());
        self.check_full_pipe(batch.rate_sample.is_some_and(|s| s.is_app_limited));
        self.check_drain(now, batch.bytes_in_flight);
        self.update_probe_rtt(now, batch, min_rtt_expired);
        self.set_pacing_rate(rtt, batch.rate_sample.is_some_and(|s| s.is_app_limited));
        self.set_cwnd(batch, acked);
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, _lost_bytes: u64) {
        if self.recovery_start.is_some_and(|start| sent <= start) {
            return;
        }
        self.recovery_start = Some(now);
        self.entering_recovery = true;
    }

    fn on_retransmission_timeout(&mut self, now: Instant) {
        self.save_cwnd(false);
        self.recovery_start = Some(self.recovery_start.map_or(now, |s| s.max(now)));
        self.entering_recovery = false;
        self.conservation_until = None;
        match self.flavour {
            BbrFlavour::V1 => self.cwnd = self.mss,
            BbrFlavour::Tolerant => {
                // The path may be gone: send little until it answers, then resume where the model was.
                self.cwnd = self.min_pipe_cwnd();
                self.restore_after_timeout = true;
            }
        }
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn random_loss(&self) -> f64 {
        // The inherent method: p̂ for `tolerant`, 0 for BBR v1, which does not estimate it.
        Bbr::random_loss(self)
    }

    fn wants_every_ack(&self) -> bool {
        self.mode == Mode::Startup
    }

    fn rate_model_settled(&self) -> bool {
        self.mode == Mode::ProbeBw
    }

    /// Probes for more at once instead of at the cycle's next turn.
    fn on_sparser_acks(&mut self, now: Instant) {
        if self.mode == Mode::ProbeBw && self.cycle_index != 0 && !self.waiting_after_cut() {
            self.cycle_index = 0;
            self.cycle_stamp = now;
            self.pacing_gain = PROBE_BW_GAINS[0];
        }
    }

    fn earliest_departure_time(&self) -> Option<Instant> {
        self.pacer.earliest_departure_time()
    }

    fn pacing_rate(&self) -> Option<u64> {
        self.pacer.active_rate()
    }

    fn name(&self) -> &str {
        match self.flavour {
            BbrFlavour::V1 => "bbr",
            BbrFlavour::Tolerant => "tolerant",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1000;

    /// A scripted path in whole rounds: each round the controller's window (or its pacing
    /// rate over the RTT, if smaller) leaves at once and comes back one RTT later in one
    /// ack, at most `rate` bytes per second of it delivered and a share `loss` of those lost.
    struct Fluid {
        cc: Bbr,
        rtt: RttEstimator,
        now: Instant,
        delivered: u64,
        seq: u64,
        /// How long after its round's ack a lost packet is declared (a path that reorders
        /// leaves losses to the time threshold).
        loss_found_after: Duration,
    }

    impl Fluid {
        fn new(config: BbrConfig) -> Self {
            let rtt = RttEstimator::new(Duration::from_millis(100));
            Fluid { cc: Bbr::new(config, MSS), rtt, now: Instant::from_millis(1000), delivered: 0, seq: 0, loss_found_after: Duration::ZERO }
        }

        fn round(&mut self, rate: f64, loss: f64, rtt_ms: u64) {
            let rtt = Duration::from_millis(rtt_ms);
            let paced = (self.cc.pacing_rate() as f64 * rtt.as_secs_f64()) as u64;
            let n = (self.cc.window().min(paced.max(MSS)) / MSS).max(1);
            let mut flight = Vec::new();
            for i in 0..n {
                let mut p = SentPacket { seq: self.seq, sent: self.now, bytes: MSS, delivered: self.delivered, ..Default::default() };
                self.seq += 1;
                p.controller_state = self.cc.on_sent(self.now, &p, (i + 1) * MSS);
                flight.push(p);
            }
            self.now += rtt;
            self.rtt.update(rtt);
            // The path carries at most `rate` over the round; of what it carries, `loss` is lost.
            let carried = n.min((rate * rtt.as_secs_f64()) as u64 / MSS).max(1);
            let lost = (carried as f64 * loss).round() as u64;
            let mut acked = 0;
            for (i, p) in flight.iter().enumerate() {
                let i = i as u64;
                if i < lost || i >= carried {
                    self.cc.on_packet_lost(self.now + self.loss_found_after, p);
                } else {
                    self.cc.on_ack(self.now, p, &self.rtt);
                    acked += MSS;
                }
            }
            let prior = self.delivered;
            self.delivered += acked;
            let newly_lost = (n - carried + lost) * MSS;
            let sample = (acked > 0).then(|| RateSample {
                delivered: acked,
                interval: rtt,
                delivery_rate: acked as f64 / rtt.as_secs_f64(),
                prior_delivered: prior,
                lost: newly_lost,
                rtt,
                ..Default::default()
            });
            let batch = AckBatch { newly_acked: acked, newly_lost, bytes_in_flight: 0, delivered: self.delivered, rate_sample: sample, app_limited: false };
            self.cc.on_ack_batch(self.now, &batch, &self.rtt);
        }
    }

    #[test]
    fn a_send_quantum_is_two_packets_at_least_whatever_their_size() {
        // Packets of 60 kB (a loopback route): two of them exceed the 64 kB cap, and the
        // quantum was a `clamp` whose bounds crossed (a panic on the first ack at 100 MB/s).
        let mss = 60_000;
        let mut cc = Bbr::new(BbrConfig::v1(), mss);
        for rate in [100_000, 1_000_000, 100_000_000, 10_000_000_000] {
            cc.pacer.set_rate(rate);
            let quantum = cc.send_quantum();
            assert!(quantum >= mss && (rate < 3_000_000 || quantum >= 2 * mss), "rate {rate}: quantum {quantum}");
        }
        let mut small = Bbr::new(BbrConfig::v1(), 1_000);
        small.pacer.set_rate(1_000_000_000);
        assert_eq!(small.send_quantum(), 64 * 1024, "the cap still holds for ordinary packets");
    }

    #[test]
    fn startup_drain_and_the_probe_bw_cycle() {
        // 10 MB/s, 50 ms: a bandwidth-delay product of 500 packets.
        let mut f = Fluid::new(BbrConfig::v1());
        let mut modes = vec![f.cc.mode()];
        for _ in 0..30 {
            f.round(10e6, 0.0, 50);
            if modes.last() != Some(&f.cc.mode()) {
                modes.push(f.cc.mode());
            }
        }
        // Drain ends within the ack that began it here: each round is acknowledged whole, so nothing is left in flight.
        assert_eq!(modes, [Mode::Startup, Mode::ProbeBw], "Startup ends once the bandwidth stops growing");
        assert!((f.cc.bandwidth() - 10e6).abs() < 1e5, "bandwidth {}", f.cc.bandwidth());
        assert_eq!(f.cc.min_rtt(), Some(Duration::from_millis(50)));
        // In ProbeBW the window is two products plus three send quanta.
        let window = f.cc.window() / MSS;
        assert!((1000..=1040).contains(&window), "window {window} packets");
        // One full cycle sees every gain, in order.
        let mut gains = Vec::new();
        for _ in 0..16 {
            f.round(10e6, 0.0, 50);
            gains.push(f.cc.pacing_gain());
        }
        // A phase lasts more than one minimum RTT, so two of these exact 50 ms rounds.
        let up = gains.iter().position(|&g| g > 1.0).expect("a probe within two cycles");
        let down = up + gains[up..].iter().position(|&g| g <= 1.0).unwrap();
        assert_eq!(gains[down], 0.75, "the probe is followed by a drain: {gains:?}");
        assert!(gains[down + 1..].iter().take(6).all(|&g| g == 1.0), "then cruising: {gains:?}");
    }

    /// A loss estimate resting on a dozen packets says little: a round whose loss a 30 %
    /// path draws often is not excess (the two-proportion test's pooled variance), while
    /// one losing twice the path's rate, against an estimate from a full memory, is.
    #[test]
    fn excess_loss_weighs_how_much_the_estimate_has_seen() {
        let mut cc = Bbr::new(BbrConfig::tolerant(), MSS);
        cc.calm_seen = 12.0;
        cc.random_loss = 1.0 / 12.0;
        assert!(!cc.excess_loss(9 * MSS, 20 * MSS, 1.0), "9 lost of 20 against 1 of 12");
        cc.calm_seen = LOSS_MEMORY_PACKETS;
        cc.random_loss = 0.3;
        assert!(cc.excess_loss(60 * MSS, 100 * MSS, 1.0));
        assert!(!cc.excess_loss(35 * MSS, 100 * MSS, 1.0));
    }

    #[test]
    fn the_delay_variation_is_the_plain_mean_difference_until_its_gain_takes_over() {
        // RTTs alternating 20 and 24 ms: consecutive samples differ by 4 ms every time.
        let mut cc = Bbr::new(BbrConfig::tolerant(), MSS);
        let rtts = (0..40).map(|i| Duration::from_millis(if i % 2 == 0 { 20 } else { 24 }));
        for (i, rtt) in rtts.enumerate() {
            cc.update_delay_jitter(rtt);
            if i >= 1 {
                // From the first difference on, not an average climbing up from zero (after
                // four samples at 1/16 that read 0.7 ms).
                assert!((cc.jitter() - 0.004).abs() < 1e-9, "after {} samples: {}", i + 1, cc.jitter());
            }
        }
        // Past 16 differences the gain is RFC 3550's 1/16: a step to 8 ms moves it a sixteenth.
        cc.update_delay_jitter(Duration::from_millis(32));
        assert!((cc.jitter() - (0.004 + (0.008 - 0.004) / 16.0)).abs() < 1e-9, "{}", cc.jitter());
    }

    /// Startup's plateau: three rounds where a queue shows (or the path loses nothing);
    /// with no queue under heavy loss, as many more as the loss takes from each round.
    #[test]
    fn a_quiet_plateau_under_heavy_loss_must_last_longer_to_end_startup() {
        let rtt = Duration::from_millis(200);
        let mut cc = Bbr::new(BbrConfig::tolerant(), MSS);
        cc.min_rtt = Some(rtt);
        cc.last_round_min_rtt = Some(rtt);
        assert_eq!(cc.full_bw_rounds(), 3);
        cc.random_loss = 0.6;
        assert_eq!(cc.full_bw_rounds(), 8);
        cc.random_loss = 0.95;
        assert_eq!(cc.full_bw_rounds(), MAX_QUIET_PLATEAU_ROUNDS);
        // The queueing target is a quarter of 200 ms: 40 ms above the minimum is a queue.
        cc.last_round_min_rtt = Some(rtt + Duration::from_millis(40));
        assert_eq!(cc.full_bw_rounds(), 3);
        let mut v1 = Bbr::new(BbrConfig::v1(), MSS);
        v1.random_loss = 0.6;
        assert_eq!(v1.full_bw_rounds(), 3);
    }

    /// A lost packet counts in flight until it is declared. Found a round trip late, as on
    /// a path that reorders, losses at 30 % take that share of a round trip's bandwidth
    /// out of the window, and the window holds room for them; found at once, none.
    #[test]
    fn the_window_holds_room_for_losses_not_yet_found() {
        let run = |late: Duration| {
            let mut f = Fluid::new(BbrConfig::tolerant());
            f.loss_found_after = late;
            let mut windows = Vec::new();
            for _ in 0..60 {
                f.round(10e6, 0.3, 50);
                windows.push(f.cc.window());
            }
            assert_eq!(f.cc.mode(), Mode::ProbeBw);
            (windows, f.cc.bandwidth(), f.cc.random_loss())
        };
        let (on_time, bw, p) = run(Duration::ZERO);
        let (late, late_bw, _) = run(Duration::from_millis(50));
        assert!((p - 0.3).abs() < 0.02 && (bw - late_bw).abs() < 1.0, "p̂ {p}, bandwidth {bw} and {late_bw}");
        // The mean of how late losses are found has converged by the last rounds.
        let room = p * bw * 0.05;
        for (round, (a, b)) in on_time.iter().zip(&late).enumerate().skip(50) {
            let extra = *b as f64 - *a as f64;
            assert!((extra - room).abs() < 0.03 * room + 2.0 * MSS as f64, "round {round}: {extra} bytes more, {room:.0} expected");
        }
    }

    #[test]
    fn probe_rtt_every_ten_seconds_holds_four_packets_then_restores_the_window() {
        let mut f = Fluid::new(BbrConfig::v1());
        for _ in 0..30 {
            f.round(10e6, 0.0, 50);
        }
        let window = f.cc.window();
        let mut seen = None;
        // The RTT grows by a millisecond and stays there: after 10 s the minimum must be measured again.
        for round in 0..400 {
            f.round(10e6, 0.0, 51);
            if f.cc.mode() == Mode::ProbeRtt {
                seen = Some(round);
                assert_eq!(f.cc.window(), 4 * MSS);
                break;
            }
        }
        let round = seen.expect("ProbeRTT within 10 s");
        assert!((190..=210).contains(&round), "ProbeRTT after {round} rounds of 50 ms");
        for _ in 0..10 {
            f.round(10e6, 0.0, 51);
        }
        assert_eq!(f.cc.mode(), Mode::ProbeBw);
        assert!(f.cc.window() >= window * 9 / 10, "window {} restored to about {window}", f.cc.window());
    }

    /// A link whose rate has just fallen: ProbeRTT drains to half a product at what the
    /// path delivers now, not at the estimate, which still holds the rate from before.
    /// Where `p̂` is deep, half a product at the estimate, as before.
    #[test]
    fn tolerant_probe_rtt_drains_to_what_the_path_delivers_now() {
        let probe_rtt_window = |random_loss: f64| {
            let mut f = Fluid::new(BbrConfig::tolerant());
            for _ in 0..40 {
                f.round(10e6, 0.0, 50);
            }
            assert_eq!(f.cc.mode(), Mode::ProbeBw);
            // Two rounds of a fade: a tenth of the rate gets through.
            f.round(1e6, 0.0, 50);
            f.round(1e6, 0.0, 50);
            assert!(f.cc.bandwidth() > 9e6, "the estimate still holds the rate from before: {}", f.cc.bandwidth());
            f.cc.random_loss = random_loss;
            // The minimum expires.
            f.now += MIN_RTT_WINDOW;
            f.round(1e6, 0.0, 50);
            assert_eq!(f.cc.mode(), Mode::ProbeRtt);
            f.cc.window()
        };
        let product_now = 1e6 * 0.05;
        let window = probe_rtt_window(0.0) as f64;
        assert!((window - 0.5 * product_now).abs() <= 2.0 * MSS as f64, "ProbeRTT's window {window}, half of {product_now} expected");
        // Under deep loss the window stays half of the estimate's product, to keep loss detection fed.
        let deep = probe_rtt_window(2.0 * PROBE_RTT_DEEP_LOSS) as f64;
        assert!(deep >= 0.5 * 9e6 * 0.05, "under deep loss ProbeRTT's window is {deep}");
    }

    #[test]
    fn v1_conserves_packets_in_recovery_and_falls_to_one_packet_on_a_timeout() {
        let mut f = Fluid::new(BbrConfig::v1());
        for _ in 0..30 {
            f.round(10e6, 0.0, 50);
        }
        let before = f.cc.window();
        f.cc.on_congestion_event(f.now, f.now - Duration::from_millis(10), MSS);
        for seq in 0..10 {
            let early = SentPacket { seq, sent: f.now - Duration::from_millis(20), bytes: MSS, delivered: f.delivered, ..Default::default() };
            f.cc.on_ack(f.now, &early, &f.rtt);
        }
        let batch = AckBatch { newly_acked: 10 * MSS, bytes_in_flight: 100 * MSS, delivered: f.delivered, ..Default::default() };
        f.cc.on_ack_batch(f.now, &batch, &f.rtt);
        assert_eq!(f.cc.window(), 110 * MSS, "the window is what is in flight plus what this ack acknowledged");
        // A packet sent after the episode began comes back: the window is restored.
        let late = SentPacket { seq: 1 << 40, sent: f.now + Duration::from_millis(1), bytes: MSS, delivered: f.delivered, ..Default::default() };
        f.cc.on_ack(f.now + Duration::from_millis(60), &late, &f.rtt);
        assert!(f.cc.window() >= before);
        f.cc.on_retransmission_timeout(f.now + Duration::from_secs(1));
        assert_eq!(f.cc.window(), MSS);
    }

    #[test]
    fn tolerant_keeps_its_window_through_loss_and_a_timeout() {
        let mut f = Fluid::new(BbrConfig::tolerant());
        for _ in 0..30 {
            f.round(10e6, 0.0, 50);
        }
        let before = f.cc.window();
        f.cc.on_congestion_event(f.now, f.now - Duration::from_millis(10), MSS);
        f.round(10e6, 0.0, 50);
        assert!(f.cc.window() >= before * 8 / 10, "loss alone does not shrink the window: {} vs {before}", f.cc.window());
        let before = f.cc.window();
        f.cc.on_retransmission_timeout(f.now + Duration::from_secs(1));
        assert_eq!(f.cc.window(), 4 * MSS, "after a timeout, four packets until the path answers");
        let p = SentPacket { seq: 1 << 40, sent: f.now + Duration::from_secs(1), bytes: MSS, delivered: f.delivered, ..Default::default() };
        f.cc.on_ack(f.now + Duration::from_millis(1100), &p, &f.rtt);
        let batch = AckBatch { newly_acked: MSS, delivered: f.delivered + MSS, ..Default::default() };
        f.cc.on_ack_batch(f.now + Duration::from_millis(1100), &batch, &f.rtt);
        // The model's window again: at least the bandwidth-delay product of 500 packets.
        assert!(f.cc.window() >= 500 * MSS && before >= 500 * MSS, "then the model's window again: {} (before: {before})", f.cc.window());
    }

    #[test]
    fn random_loss_shrinks_bbr_but_not_tolerant() {
        for loss in [0.1, 0.3, 0.5] {
            let mut v1 = Fluid::new(BbrConfig::v1());
            let mut tolerant = Fluid::new(BbrConfig::tolerant());
            for _ in 0..300 {
                v1.round(10e6, loss, 50);
                tolerant.round(10e6, loss, 50);
            }
            // What the path can carry is 10 MB/s; of it, (1 - loss) arrives.
            let carried = tolerant.cc.bandwidth();
            assert!(carried >= 9e6, "tolerant at {loss}: {carried}");
            assert!((tolerant.cc.random_loss() - loss).abs() < 0.05, "estimated loss {} at {loss}", tolerant.cc.random_loss());
            assert!(v1.cc.bandwidth() <= 10e6 * (1.0 - loss) * 1.01, "bbr at {loss}: {}", v1.cc.bandwidth());
            if loss >= 0.3 {
                assert!(v1.cc.bandwidth() < 0.5 * carried, "bbr loses ground at {loss}: {} vs {carried}", v1.cc.bandwidth());
            }
        }
    }

    #[test]
    fn a_burst_of_the_paths_own_loss_does_not_end_startup() {
        // The fluid path loses each round's first packets, so its losses come in runs, as
        // a fading radio link's do. One round in a fade loses 45 % where the others lose 10 %.
        let mut f = Fluid::new(BbrConfig::tolerant());
        for _ in 0..6 {
            f.round(10e6, 0.1, 50);
        }
        assert_eq!(f.cc.mode(), Mode::Startup);
        f.round(10e6, 0.45, 50);
        f.round(10e6, 0.1, 50);
        assert_eq!(f.cc.mode(), Mode::Startup, "one lossy round of a bursty path ended Startup at {}", f.cc.bandwidth());
        for _ in 0..40 {
            f.round(10e6, 0.1, 50);
        }
        assert!(f.cc.bandwidth() >= 9e6, "the path carries 10 MB/s: {}", f.cc.bandwidth());
        // Loss that stays high round after round is the path filling, however it clusters.
        let mut full = Fluid::new(BbrConfig::tolerant());
        for _ in 0..6 {
            full.round(10e6, 0.1, 50);
        }
        for _ in 0..PERSISTENT_LOSS_ROUNDS {
            full.round(10e6, 0.45, 50);
        }
        assert_ne!(full.cc.mode(), Mode::Startup, "rounds of 45 % loss in a row end Startup");
    }

    #[test]
    fn tolerant_yields_to_loss_that_comes_with_a_queue() {
        let settle = |f: &mut Fluid| {
            for _ in 0..40 {
                f.round(10e6, 0.0, 50);
            }
        };
        // The same 20 % loss: through a standing queue (RTT 50 -> 70 ms) it is congestion ...
        let mut queued = Fluid::new(BbrConfig::tolerant());
        settle(&mut queued);
        let before = queued.cc.bandwidth();
        for _ in 0..3 {
            queued.round(10e6, 0.2, 70);
        }
        assert!(queued.cc.bandwidth() <= 0.75 * before, "cut from {before} to {}", queued.cc.bandwidth());
        // ... at the propagation delay it is the path's own.
        let mut clear = Fluid::new(BbrConfig::tolerant());
        settle(&mut clear);
        for _ in 0..3 {
            clear.round(10e6, 0.2, 50);
        }
        assert!(clear.cc.bandwidth() >= 0.95 * before, "kept {} of {before}", clear.cc.bandwidth());
    }

    #[test]
    fn tolerant_stops_correcting_for_loss_while_a_shallow_buffer_stays_full() {
        // 30 % loss at the propagation delay: p̂ learns it and the estimate counts it as carried.
        let settle = |f: &mut Fluid| {
            for _ in 0..200 {
                f.round(10e6, 0.3, 50);
            }
        };
        // Then the same loss with 2 ms queued every round: a sixth of the 12.5 ms queueing
        // target, which `last_round_queue` alone takes for no queue, but the deepest queue
        // lately and standing, so the loss is the buffer's overflow as much as the path's.
        let mut full = Fluid::new(BbrConfig::tolerant());
        settle(&mut full);
        let before = full.cc.bandwidth();
        assert!(before >= 9e6, "corrected to {before}");
        for _ in 0..20 {
            full.round(10e6, 0.3, 52);
        }
        assert!(full.cc.bandwidth() <= 0.75 * before, "{} of {before} kept", full.cc.bandwidth());
        // A queue that comes and goes (every other round at the propagation delay) leaves
        // the correction to the rounds without it, and the estimate where it was.
        let mut passing = Fluid::new(BbrConfig::tolerant());
        settle(&mut passing);
        for i in 0..20 {
            passing.round(10e6, 0.3, if i % 2 == 0 { 52 } else { 50 });
        }
        assert!(passing.cc.bandwidth() >= 0.9 * before, "{} of {before} kept", passing.cc.bandwidth());
    }

    #[test]
    fn a_buffer_held_full_makes_loss_congestion_whatever_p_hat_says() {
        // 10 MB/s over 40 ms with 10 % of every round lost, then rounds whose RTT stands
        // `queued_ms` above the propagation delay (the queueing target is 10 ms).
        let run = |queued_ms: u64| {
            let mut f = Fluid::new(BbrConfig::tolerant());
            for _ in 0..40 {
                f.round(10e6, 0.1, 40);
            }
            assert_eq!(f.cc.mode(), Mode::ProbeBw);
            assert!((f.cc.random_loss() - 0.1).abs() < 0.03, "p̂ {}", f.cc.random_loss());
            let before = f.cc.bandwidth();
            for _ in 0..6 {
                f.round(10e6, 0.1, 40 + queued_ms);
            }
            f.cc.bandwidth() / before
        };
        // No queue: the loss is the path's own, as `p̂` says.
        assert!(run(0) > 0.95, "no queue: {:.2} of the estimate kept", run(0));
        // A buffer of 4 ms held full, or of 15 ms (up to twice the target): its loss is its
        // overflow, and the flow cuts.
        assert!(run(4) < 0.8, "4 ms held full: {:.2} of the estimate kept", run(4));
        assert!(run(15) < 0.8, "15 ms held full: {:.2} of the estimate kept", run(15));
        // A queue past twice the target is left to the standing-queue rule, which tests the
        // loss against `p̂`: no cut for loss the path always had.
        assert!(run(25) > 0.95, "25 ms: {:.2} of the estimate kept", run(25));
    }

    #[test]
    fn after_an_overflow_cut_the_flight_grows_by_two_packets_a_round() {
        let mut f = Fluid::new(BbrConfig::tolerant());
        for _ in 0..40 {
            f.round(10e6, 0.1, 40);
        }
        for _ in 0..6 {
            f.round(10e6, 0.1, 44);
        }
        assert!(f.cc.overflow_cut && f.cc.waiting_after_cut());
        let cut = f.cc.bandwidth();
        // The link has room again: what the flow sends is what it gets.
        let mut growth = Vec::new();
        for _ in 0..8 {
            let paced = f.cc.pacing_rate() as f64;
            f.round(100e6, 0.0, 40);
            if f.cc.pacing_gain == 1.0 && f.cc.waiting_after_cut() {
                growth.push((f.cc.pacing_rate() as f64 - paced) * 0.04 / MSS as f64);
            }
        }
        assert!(f.cc.bandwidth() > cut, "the estimate grew back from {cut}");
        assert!(!growth.is_empty() && growth.iter().all(|&g| (1.0..=3.5).contains(&g)), "packets added a round: {growth:.2?}");
    }
}
