//! fencepost-link: one direction of a network link as a state machine. It
//! performs no I/O and reads no clock: times are integer microseconds supplied
//! by the driver, and every random choice comes from the seed it was built with.
//!
//! A packet goes through these stages, each optional:
//!
//! 1. **duplication** on entry, then **loss** (Bernoulli or Gilbert–Elliott) for
//!    each copy on its own, as netem does: a copy can stand in for a lost original;
//! 2. a **droptail queue**, limited in bytes or packets;
//! 3. the **bottleneck**: unlimited, a constant rate, or a mahimahi trace with
//!    mahimahi's exact semantics (see [`trace`]); loss may be placed here
//!    instead of on entry ([`LossPosition::AfterBottleneck`]);
//! 4. **propagation delay** plus **jitter** (uniform or normal, optionally
//!    correlated from packet to packet), which may reorder packets unless
//!    `keep_order` is set; and **corruption**, which marks a packet for the
//!    driver to flip one bit of.
//!
//! The same model is driven in virtual time by the simulator and in real time
//! by the emulator, so both see the same link.
//!
//! A driver may change the link while it runs (link events): a blackout drops
//! every packet that enters for a while; the rate, the loss model and the delay
//! can be replaced. The link measures what a report needs: counters, the time
//! packets wait in the queue, and the capacity it offered.

mod histogram;

pub use histogram::DelayHistogram;

pub mod trace;

pub use trace::{Trace, TraceError, OPPORTUNITY_BYTES};

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

/// Microseconds on the driver's clock.
pub type Micros = u64;

#[derive(Clone, Debug, PartialEq)]
pub enum LossModel {
    None,
    /// Each packet lost independently with this probability.
    Bernoulli(f64),
    /// Two-state Markov chain (Gilbert–Elliott): in state Good packets are lost
    /// with `loss_good`, in Bad with `loss_bad`; after each packet the state
    /// moves Good→Bad with probability `p` and Bad→Good with `r`.
    GilbertElliott { p: f64, r: f64, loss_good: f64, loss_bad: f64 },
}

impl LossModel {
    /// The long-run fraction of packets lost.
    pub fn mean_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli(p) => p,
            LossModel::GilbertElliott { p, r, loss_good, loss_bad } => {
                if p + r == 0.0 {
                    return loss_good;
                }
                let bad = p / (p + r);
                (1.0 - bad) * loss_good + bad * loss_bad
            }
        }
    }
}

/// How a packet's delay varies around the propagation delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JitterDistribution {
    /// Uniform in `[-jitter, +jitter]`.
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter` (cut at ±4 σ).
    Normal,
}

/// Where random loss meets a packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LossPosition {
    /// On entry, before the queue: a lost packet takes no capacity (iptables at a router).
    #[default]
    BeforeQueue,
    /// After the bottleneck: a lost packet has used its share of the link (loss on the wire).
    AfterBottleneck,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Bandwidth {
    Unlimited,
    /// A constant serialization rate in bits per second.
    Rate(u64),
    /// Delivery opportunities from a mahimahi trace, starting when the link is created.
    Trace(Arc<Trace>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueLimit {
    Unlimited,
    Bytes(u64),
    Packets(u64),
}

#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Micros,
    /// Each packet's delay is `delay` plus a variation drawn from `jitter_distribution`
    /// with scale `jitter`, never below zero.
    pub jitter: Micros,
    pub jitter_distribution: JitterDistribution,
    /// netem-style correlation: each variation is `c × last + (1 − c) × fresh`.
    pub jitter_correlation: f64,
    /// Jitter never reorders: a packet is not delivered before the one ahead of it.
    pub keep_order: bool,
    pub loss: LossModel,
    pub loss_position: LossPosition,
    /// Probability that a packet is duplicated on entry.
    pub duplicate: f64,
    /// Probability that a delivered packet has one bit flipped.
    pub corrupt: f64,
    pub bandwidth: Bandwidth,
    pub queue: QueueLimit,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: 0,
            jitter: 0,
            jitter_distribution: JitterDistribution::Uniform,
            jitter_correlation: 0.0,
            keep_order: false,
            loss: LossModel::None,
            loss_position: LossPosition::BeforeQueue,
            duplicate: 0.0,
            corrupt: 0.0,
            bandwidth: Bandwidth::Unlimited,
            queue: QueueLimit::Unlimited,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkEventKind {
    /// Accepted into the queue (or straight onto an idle bottleneck).
    Enqueued,
    /// Dropped by the loss model.
    Lost,
    /// Dropped because the queue was full.
    QueueDropped,
    /// Dropped because it entered during a blackout.
    BlackoutDropped,
    /// A duplicate made on entry (its own `id`; an `Enqueued` or `QueueDropped` follows).
    Duplicated,
    /// Left the bottleneck (its queueing delay ends here; propagation follows).
    Departed,
    /// Handed to the receiver.
    Delivered,
}

/// One thing that happened to one packet, when observation is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkEvent {
    pub time: Micros,
    pub kind: LinkEventKind,
    /// Numbers packets (and copies) in the order they reached the link.
    pub id: u64,
    pub size: usize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LinkStats {
    pub offered: u64,
    pub lost: u64,
    pub queue_dropped: u64,
    /// Dropped because they entered during a blackout.
    pub blackout_dropped: u64,
    pub duplicated: u64,
    pub delivered: u64,
    pub bytes_delivered: u64,
    /// Delivered with one bit flipped.
    pub corrupted: u64,
}

struct Queued<P> {
    packet: P,
    size: usize,
    id: u64,
    /// When it entered the link (its queueing delay ends when it leaves the bottleneck).
    admitted: Micros,
}

/// The packets on the wire, taken in order of delivery time, then of entry. Without
/// jitter (or a change of delay) each arrives after the one before it: those wait in a
/// queue, in order, and only a packet due before the last one queued goes into a heap.
/// A heap for all of them had been 5 % of a simulated transfer.
struct Wire<P> {
    in_order: VecDeque<InFlight<P>>,
    overtaking: BinaryHeap<Reverse<InFlight<P>>>,
}

impl<P> Wire<P> {
    fn push(&mut self, p: InFlight<P>) {
        if self.in_order.back().is_none_or(|last| (last.at, last.order) < (p.at, p.order)) {
            self.in_order.push_back(p);
        } else {
            self.overtaking.push(Reverse(p));
        }
    }

    /// The earlier of the two heads: `true` for the queue's.
    fn queue_first(&self) -> Option<bool> {
        match (self.in_order.front(), self.overtaking.peek()) {
            (Some(q), Some(Reverse(h))) => Some((q.at, q.order) < (h.at, h.order)),
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (None, None) => None,
        }
    }

    fn first_due(&self) -> Option<Micros> {
        match self.queue_first()? {
            true => self.in_order.front().map(|p| p.at),
            false => self.overtaking.peek().map(|Reverse(p)| p.at),
        }
    }

    fn pop(&mut self) -> Option<InFlight<P>> {
        match self.queue_first()? {
            true => self.in_order.pop_front(),
            false => self.overtaking.pop().map(|Reverse(p)| p),
        }
    }
}

/// A packet on the wire: ordered by delivery time, then by entry order.
struct InFlight<P> {
    at: Micros,
    order: u64,
    id: u64,
    size: usize,
    packet: P,
    corrupt: Option<u64>,
}

impl<P> PartialEq for InFlight<P> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl<P> Eq for InFlight<P> {}
impl<P> PartialOrd for InFlight<P> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for InFlight<P> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// The bottleneck's progress.
enum Bottleneck<P> {
    Unlimited,
    Rate {
        bits_per_second: u64,
        /// The packet being serialized and when its last bit leaves.
        current: Option<(Queued<P>, Micros)>,
        /// What the serialization times so far came to beyond whole microseconds, in
        /// bit-microseconds (see [`serialization_time`]).
        carry: u64,
    },
    Trace {
        trace: Arc<Trace>,
        /// Index of the next opportunity within the trace.
        next: usize,
        /// Start of the current repetition, in microseconds.
        base: Micros,
        /// The packet partly carried by earlier opportunities and its bytes still to go.
        current: Option<(Queued<P>, i64)>,
    },
}

/// A packet leaving the link.
pub struct Delivery<P> {
    pub packet: P,
    /// When the model had it arrive.
    pub due: Micros,
    /// Flip one bit: this number modulo the packet's length in bits says which.
    pub corrupt: Option<u64>,
}

pub struct Link<P> {
    config: LinkConfig,
    rng: Xoshiro256PlusPlus,
    bad_state: bool,
    queue: VecDeque<Queued<P>>,
    queue_bytes: u64,
    bottleneck: Bottleneck<P>,
    wire: Wire<P>,
    last_delivery_at: Micros,
    /// The last packet's delay variation, in units of `jitter` (for correlation).
    last_variation: f64,
    next_id: u64,
    next_order: u64,
    stats: LinkStats,
    events: Option<Vec<LinkEvent>>,
    /// Packets entering before this time are dropped (a blackout); 0 when none.
    blackout_until: Micros,
    queue_delay: DelayHistogram,
    /// Capacity offered before the latest bandwidth change, in bytes, and when that change was.
    capacity_before: f64,
    bandwidth_since: Micros,
    /// When a trace bottleneck started (its opportunities count from here).
    trace_start: Micros,
}

impl<P: Clone> Link<P> {
    /// A link whose trace (if any) starts at `start`.
    pub fn new(config: LinkConfig, seed: u64, start: Micros) -> Self {
        let bottleneck = match &config.bandwidth {
            Bandwidth::Unlimited => Bottleneck::Unlimited,
            Bandwidth::Rate(bps) => Bottleneck::Rate { bits_per_second: (*bps).max(1), current: None, carry: 0 },
            Bandwidth::Trace(trace) => Bottleneck::Trace { trace: trace.clone(), next: 0, base: start, current: None },
        };
        Link {
            config,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            bad_state: false,
            queue: VecDeque::new(),
            queue_bytes: 0,
            bottleneck,
            wire: Wire { in_order: VecDeque::new(), overtaking: BinaryHeap::new() },
            last_delivery_at: 0,
            last_variation: 0.0,
            next_id: 0,
            next_order: 0,
            stats: LinkStats::default(),
            events: None,
            blackout_until: 0,
            queue_delay: DelayHistogram::default(),
            capacity_before: 0.0,
            bandwidth_since: start,
            trace_start: start,
        }
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }
    pub fn stats(&self) -> LinkStats {
        self.stats
    }
    /// Packets waiting for the bottleneck (not counting one it is carrying).
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }
    pub fn queue_bytes(&self) -> u64 {
        self.queue_bytes
    }

    /// Time packets waited between entering the link and leaving the bottleneck, in microseconds.
    pub fn queue_delay(&self) -> &DelayHistogram {
        &self.queue_delay
    }

    /// Bytes the bottleneck could have carried from the link's start to `now`;
    /// `None` for an unlimited link.
    pub fn capacity_bytes(&self, now: Micros) -> Option<f64> {
        let current = match &self.config.bandwidth {
            Bandwidth::Unlimited => return None,
            Bandwidth::Rate(bps) => now.saturating_sub(self.bandwidth_since) as f64 * *bps as f64 / 8e6,
            Bandwidth::Trace(trace) => {
                let elapsed_ms = |t: Micros| t.saturating_sub(self.trace_start) / 1000;
                let used = trace.opportunities_until(elapsed_ms(now)).saturating_sub(trace.opportunities_until(elapsed_ms(self.bandwidth_since)));
                used as f64 * OPPORTUNITY_BYTES as f64
            }
        };
        Some(self.capacity_before + current)
    }

    // ---- changes while running (link events) ----

    /// Every packet entering from `now` until `until` is dropped (counted as `blackout_dropped`);
    /// packets already queued or on the wire carry on.
    pub fn blackout(&mut self, now: Micros, until: Micros) {
        self.advance(now);
        self.blackout_until = self.blackout_until.max(until);
    }

    /// From `now` on, the bottleneck is `bandwidth`. A packet being serialized starts over under the new one.
    pub fn set_bandwidth(&mut self, now: Micros, bandwidth: Bandwidth) {
        self.advance(now);
        self.capacity_before = self.capacity_bytes(now).unwrap_or(0.0);
        self.bandwidth_since = now;
        // Whatever the bottleneck was carrying goes back to the head of the queue.
        let carried = match std::mem::replace(&mut self.bottleneck, Bottleneck::Unlimited) {
            Bottleneck::Rate { current, .. } => current.map(|(item, _)| item),
            Bottleneck::Trace { current, .. } => current.map(|(item, _)| item),
            Bottleneck::Unlimited => None,
        };
        if let Some(item) = carried {
            self.queue_bytes += item.size as u64;
            self.queue.push_front(item);
        }
        self.bottleneck = match &bandwidth {
            Bandwidth::Unlimited => Bottleneck::Unlimited,
            Bandwidth::Rate(bps) => Bottleneck::Rate { bits_per_second: (*bps).max(1), current: None, carry: 0 },
            Bandwidth::Trace(trace) => Bottleneck::Trace { trace: trace.clone(), next: 0, base: now, current: None },
        };
        if matches!(bandwidth, Bandwidth::Trace(_)) {
            self.trace_start = now;
        }
        self.config.bandwidth = bandwidth;
        // Restart service: a new rate takes the head of the queue now; unlimited flushes it.
        self.restart_service(now);
    }

    /// From `now` on, packets entering meet this loss model (and, with loss after the
    /// bottleneck, packets leaving it).
    pub fn set_loss(&mut self, now: Micros, loss: LossModel) {
        // Packets that left the bottleneck before `now` met the old model (the bottleneck
        // runs lazily: see `poll_timeout`).
        self.advance(now.saturating_sub(1));
        self.config.loss = loss;
        self.bad_state = false;
    }

    /// Packets leaving the bottleneck from `now` on get this propagation delay.
    pub fn set_delay(&mut self, now: Micros, delay: Micros) {
        // Packets that left before `now` keep the old delay (the bottleneck runs lazily).
        self.advance(now.saturating_sub(1));
        self.config.delay = delay;
    }

    /// Puts `item` on a rate bottleneck from `start`, to leave once its last bit is out.
    fn serialize(&mut self, start: Micros, item: Queued<P>) {
        if let Bottleneck::Rate { bits_per_second, current, carry } = &mut self.bottleneck {
            let done = start + serialization_time(item.size, *bits_per_second, carry);
            *current = Some((item, done));
        }
    }

    fn restart_service(&mut self, now: Micros) {
        match &mut self.bottleneck {
            Bottleneck::Unlimited => {
                while let Some(item) = self.pop_queue() {
                    self.put_on_wire(now, item);
                }
            }
            Bottleneck::Rate { current, .. } if current.is_none() => {
                if let Some(item) = self.pop_queue() {
                    self.serialize(now, item);
                }
            }
            _ => {}
        }
    }

    /// Starts (or stops) recording per-packet events.
    pub fn observe(&mut self, on: bool) {
        self.events = if on { Some(Vec::new()) } else { None };
    }
    /// Takes the events recorded since the last call.
    pub fn drain_events(&mut self) -> Vec<LinkEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn record(&mut self, time: Micros, kind: LinkEventKind, id: u64, size: usize) {
        if let Some(events) = &mut self.events {
            events.push(LinkEvent { time, kind, id, size });
        }
    }

    fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Box–Muller: one standard normal value.
    fn standard_normal(&mut self) -> f64 {
        let u1 = self.uniform().max(f64::MIN_POSITIVE);
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (p >= 1.0 || self.uniform() < p)
    }

    fn draw_loss(&mut self) -> bool {
        match self.config.loss {
            LossModel::None => false,
            LossModel::Bernoulli(p) => self.chance(p),
            LossModel::GilbertElliott { p, r, loss_good, loss_bad } => {
                let lost = self.chance(if self.bad_state { loss_bad } else { loss_good });
                let flip = self.chance(if self.bad_state { r } else { p });
                if flip {
                    self.bad_state = !self.bad_state;
                }
                lost
            }
        }
    }

    /// A packet of `size` bytes enters the link at `now`.
    pub fn enqueue(&mut self, now: Micros, packet: P, size: usize) {
        self.advance(now);
        let id = self.next_id;
        self.next_id += 1;
        self.stats.offered += 1;
        if now < self.blackout_until {
            self.stats.blackout_dropped += 1;
            self.record(now, LinkEventKind::BlackoutDropped, id, size);
            return;
        }
        // As netem: the copy is made first and then meets loss on its own, like any packet.
        let copy = if self.chance(self.config.duplicate) {
            let copy_id = self.next_id;
            self.next_id += 1;
            self.stats.duplicated += 1;
            self.record(now, LinkEventKind::Duplicated, copy_id, size);
            Some((copy_id, packet.clone()))
        } else {
            None
        };
        self.enter(now, id, packet, size);
        if let Some((copy_id, packet)) = copy {
            self.enter(now, copy_id, packet, size);
        }
    }

    /// One copy of a packet past the blackout check: loss on entry, then the queue.
    fn enter(&mut self, now: Micros, id: u64, packet: P, size: usize) {
        if self.config.loss_position == LossPosition::BeforeQueue && self.draw_loss() {
            self.stats.lost += 1;
            self.record(now, LinkEventKind::Lost, id, size);
            return;
        }
        self.admit(now, Queued { packet, size, id, admitted: now });
    }

    fn admit(&mut self, now: Micros, item: Queued<P>) {
        match &mut self.bottleneck {
            Bottleneck::Unlimited => {
                self.record(now, LinkEventKind::Enqueued, item.id, item.size);
                self.put_on_wire(now, item);
            }
            Bottleneck::Rate { current, .. } if current.is_none() && self.queue.is_empty() => {
                self.record(now, LinkEventKind::Enqueued, item.id, item.size);
                self.serialize(now, item);
            }
            _ => {
                let full = match self.config.queue {
                    QueueLimit::Unlimited => false,
                    QueueLimit::Bytes(limit) => self.queue_bytes + item.size as u64 > limit,
                    QueueLimit::Packets(limit) => self.queue.len() as u64 >= limit,
                };
                if full {
                    self.stats.queue_dropped += 1;
                    self.record(now, LinkEventKind::QueueDropped, item.id, item.size);
                } else {
                    self.record(now, LinkEventKind::Enqueued, item.id, item.size);
                    self.queue_bytes += item.size as u64;
                    self.queue.push_back(item);
                }
            }
        }
    }

    fn pop_queue(&mut self) -> Option<Queued<P>> {
        let item = self.queue.pop_front()?;
        self.queue_bytes -= item.size as u64;
        Some(item)
    }

    /// The packet left the bottleneck at `left`: add propagation delay and jitter.
    fn put_on_wire(&mut self, left: Micros, item: Queued<P>) {
        self.queue_delay.record(left.saturating_sub(item.admitted));
        self.record(left, LinkEventKind::Departed, item.id, item.size);
        if self.config.loss_position == LossPosition::AfterBottleneck && self.draw_loss() {
            self.stats.lost += 1;
            self.record(left, LinkEventKind::Lost, item.id, item.size);
            return;
        }
        let mut delay = self.config.delay as i64;
        if self.config.jitter > 0 {
            let fresh = match self.config.jitter_distribution {
                JitterDistribution::Uniform => self.uniform() * 2.0 - 1.0,
                JitterDistribution::Normal => self.standard_normal().clamp(-4.0, 4.0),
            };
            let c = self.config.jitter_correlation;
            let variation = c * self.last_variation + (1.0 - c) * fresh;
            self.last_variation = variation;
            delay += (variation * self.config.jitter as f64).round() as i64;
        }
        let corrupt = self.chance(self.config.corrupt).then(|| self.rng.next_u64());
        let mut at = left + delay.max(0) as u64;
        if self.config.keep_order {
            at = at.max(self.last_delivery_at);
            self.last_delivery_at = at;
        }
        let order = self.next_order;
        self.next_order += 1;
        self.wire.push(InFlight { at, order, id: item.id, size: item.size, packet: item.packet, corrupt });
    }

    /// Runs the bottleneck up to `now`.
    fn advance(&mut self, now: Micros) {
        loop {
            match &mut self.bottleneck {
                Bottleneck::Unlimited => return,
                Bottleneck::Rate { current, .. } => {
                    match current.take() {
                        Some((item, done)) if done <= now => {
                            self.put_on_wire(done, item);
                            if let Some(next) = self.pop_queue() {
                                self.serialize(done, next);
                            }
                        }
                        other => {
                            *current = other;
                            return;
                        }
                    }
                }
                Bottleneck::Trace { trace, next, base, current } => {
                    let at = *base + trace.times_ms()[*next] * 1000;
                    if at > now {
                        return;
                    }
                    // Use one opportunity: mahimahi's LinkQueue::rationalize.
                    *next += 1;
                    if *next == trace.times_ms().len() {
                        *next = 0;
                        *base += trace.period_ms() * 1000;
                    }
                    if current.is_none() && self.queue.is_empty() {
                        // An unused opportunity is lost, not banked.
                        continue;
                    }
                    self.use_opportunity(at);
                }
            }
        }
    }

    /// One trace opportunity at time `at` carries up to [`OPPORTUNITY_BYTES`]; a packet
    /// larger than what is left keeps going in the next opportunity, and bytes left
    /// after a packet finishes go to the next packet in the queue.
    fn use_opportunity(&mut self, at: Micros) {
        let mut budget = OPPORTUNITY_BYTES as i64;
        while budget > 0 {
            let current = match &mut self.bottleneck {
                Bottleneck::Trace { current, .. } => current.take(),
                _ => return,
            };
            let (item, remaining) = match current {
                Some(c) => c,
                None => match self.pop_queue() {
                    Some(item) => {
                        let size = item.size as i64;
                        (item, size)
                    }
                    None => return,
                },
            };
            let remaining = remaining - budget;
            if remaining <= 0 {
                budget = -remaining;
                self.put_on_wire(at, item);
            } else {
                budget = 0;
                if let Bottleneck::Trace { current, .. } = &mut self.bottleneck {
                    *current = Some((item, remaining));
                }
            }
        }
    }

    /// The next packet due at `now`, if any.
    pub fn poll_deliver(&mut self, now: Micros) -> Option<P> {
        self.poll_delivery(now).map(|d| d.packet)
    }

    /// The next packet due at `now`, with the time it was due (a real-time driver
    /// hands it on a little later and can measure by how much).
    pub fn poll_delivery(&mut self, now: Micros) -> Option<Delivery<P>> {
        self.advance(now);
        self.poll_arrival(now)
    }

    /// Runs the bottleneck up to `now` (every packet that leaves by then goes onto the
    /// wire). Whatever calls the link runs it this way first, so calling this early changes
    /// nothing: each packet still leaves at its own time, and what it draws (loss after
    /// the bottleneck, jitter) is drawn in the order packets leave.
    pub fn run_until(&mut self, now: Micros) {
        self.advance(now);
    }

    /// The next packet on the wire due at `now`, without running the bottleneck first (as
    /// [`Link::poll_delivery`] does). For a reader that knows every packet due by `now` is
    /// already on the wire: one that left the bottleneck by [`Link::run_until`]'s time and
    /// could not arrive sooner than [`Link::least_delay`] after it. A parallel simulation
    /// reads a link this way while the other side of it is still sending into it.
    pub fn poll_arrival(&mut self, now: Micros) -> Option<Delivery<P>> {
        if self.wire.first_due().is_some_and(|at| at <= now) {
            let p = self.wire.pop()?;
            self.stats.delivered += 1;
            self.stats.bytes_delivered += p.size as u64;
            self.stats.corrupted += p.corrupt.is_some() as u64;
            self.record(p.at, LinkEventKind::Delivered, p.id, p.size);
            return Some(Delivery { packet: p.packet, due: p.at, corrupt: p.corrupt });
        }
        None
    }

    /// When the first packet already on the wire is due, if any.
    pub fn next_arrival(&self) -> Option<Micros> {
        self.wire.first_due()
    }

    /// The least time a packet leaving the bottleneck takes to arrive if the propagation
    /// delay is `delay` (this link's jitter taken off).
    pub fn least_delay(&self, delay: Micros) -> Micros {
        let spread = match self.config.jitter_distribution {
            JitterDistribution::Uniform => self.config.jitter,
            JitterDistribution::Normal => 4 * self.config.jitter,
        };
        // One more for the rounding of the drawn variation.
        delay.saturating_sub(spread + u64::from(self.config.jitter > 0))
    }

    /// When a packet may next be delivered: the first on the wire, or the earliest a packet
    /// leaving the bottleneck could arrive. The bottleneck itself runs lazily (every call that
    /// reads or changes the link first brings it up to the time given, each packet leaving at
    /// its exact time), so a driver need not wake when a packet only moves from the
    /// bottleneck onto the wire: a simulator saved a step per packet. While events are
    /// recorded ([`Link::observe`]) it is the time the next packet leaves the bottleneck, so
    /// that what happens there (a departure, a loss after the bottleneck) is recorded in
    /// time order with everything else.
    pub fn poll_timeout(&self) -> Option<Micros> {
        let wire = self.wire.first_due();
        let leaves = match &self.bottleneck {
            Bottleneck::Unlimited => None,
            Bottleneck::Rate { current, .. } => current.as_ref().map(|(_, done)| *done),
            Bottleneck::Trace { trace, next, base, current } => {
                (current.is_some() || !self.queue.is_empty()).then(|| *base + trace.times_ms()[*next] * 1000)
            }
        };
        let bottleneck = if self.events.is_some() { leaves } else { leaves.map(|left| left + self.shortest_delay()) };
        match (wire, bottleneck) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The least propagation delay a packet can get: the delay less the largest variation
    /// jitter can draw (uniform: one `jitter`; normal: four, where draws are cut off).
    fn shortest_delay(&self) -> Micros {
        self.least_delay(self.config.delay)
    }

    /// Nothing queued, being carried or on the wire.
    pub fn is_idle(&self) -> bool {
        self.poll_timeout().is_none()
    }
}

/// How long `size` bytes take at `bits_per_second`, in whole microseconds, with what is
/// left over carried to the next packet: rounded up each time instead, a 1,478-byte packet
/// at 10 Gbit/s (1.18 µs) took 2 µs, and the link ran at 59 % of its rate (98.5 % at 1 Gbit/s).
fn serialization_time(size: usize, bits_per_second: u64, carry: &mut u64) -> Micros {
    let bit_micros = size as u128 * 8 * 1_000_000 + u128::from(*carry);
    *carry = (bit_micros % u128::from(bits_per_second)) as u64;
    (bit_micros / u128::from(bits_per_second)) as Micros
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(link: &mut Link<u64>, until: Micros) -> Vec<(Micros, u64)> {
        let mut out = Vec::new();
        while let Some(t) = link.poll_timeout() {
            if t > until {
                break;
            }
            while let Some(p) = link.poll_deliver(t) {
                out.push((t, p));
            }
        }
        out
    }

    #[test]
    fn delay_and_rate_serialize_in_order() {
        // 1 Mbit/s: a 125-byte packet takes 1 ms on the wire.
        let config = LinkConfig { delay: 10_000, bandwidth: Bandwidth::Rate(1_000_000), ..Default::default() };
        let mut link = Link::new(config, 1, 0);
        for i in 0..3 {
            link.enqueue(0, i, 125);
        }
        assert_eq!(drain(&mut link, u64::MAX), vec![(11_000, 0), (12_000, 1), (13_000, 2)]);
    }

    #[test]
    fn a_rate_whose_packets_take_a_fraction_of_a_microsecond_more_is_still_kept() {
        // 10 Gbit/s: a 1,478-byte packet takes 1.1824 µs; 10,000 back to back take 11,824 µs.
        let config = LinkConfig { bandwidth: Bandwidth::Rate(10_000_000_000), ..Default::default() };
        let mut link = Link::new(config, 1, 0);
        for i in 0..10_000 {
            link.enqueue(0, i, 1478);
        }
        let delivered = drain(&mut link, u64::MAX);
        assert_eq!(delivered.len(), 10_000);
        assert!(delivered.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1), "in order");
        let last = delivered.last().unwrap().0;
        assert!((11_823..=11_824).contains(&last), "the last left at {last} µs");
    }

    #[test]
    fn droptail_queue_drops_past_its_limit() {
        let config = LinkConfig { bandwidth: Bandwidth::Rate(1_000_000), queue: QueueLimit::Packets(2), ..Default::default() };
        let mut link = Link::new(config, 1, 0);
        link.observe(true);
        for i in 0..5 {
            link.enqueue(0, i, 125);
        }
        // One on the bottleneck, two queued, two dropped.
        assert_eq!(link.stats().queue_dropped, 2);
        assert_eq!(drain(&mut link, u64::MAX).len(), 3);
        let kinds: Vec<_> = link.drain_events().iter().map(|e| e.kind).collect();
        assert_eq!(kinds.iter().filter(|k| **k == LinkEventKind::QueueDropped).count(), 2);
        assert_eq!(kinds.iter().filter(|k| **k == LinkEventKind::Delivered).count(), 3);

        let bytes = LinkConfig { bandwidth: Bandwidth::Rate(1_000_000), queue: QueueLimit::Bytes(300), ..Default::default() };
        let mut link = Link::new(bytes, 1, 0);
        for i in 0..5 {
            link.enqueue(0, i, 125);
        }
        assert_eq!(link.stats().queue_dropped, 2, "250 bytes fit in 300, a third 125 does not");
    }

    #[test]
    fn trace_opportunities_follow_mahimahi() {
        // Opportunities at 1 ms and 2 ms (then 3, 4 on repetition): 1504 bytes each.
        let trace = Arc::new(Trace::parse("1\n2\n").unwrap());
        let config = LinkConfig { bandwidth: Bandwidth::Trace(trace), ..Default::default() };
        let mut link = Link::new(config, 1, 0);
        // Two 1000-byte packets: the first leaves at 1 ms with 504 bytes to spare,
        // which the second uses; the second needs 496 more and leaves at 2 ms.
        link.enqueue(0, 1, 1000);
        link.enqueue(0, 2, 1000);
        // A packet arriving exactly at an opportunity misses it (mahimahi rationalizes first).
        assert_eq!(drain(&mut link, 2_000), vec![(1_000, 1), (2_000, 2)]);
        link.enqueue(3_000, 3, 100);
        assert_eq!(drain(&mut link, u64::MAX), vec![(4_000, 3)], "the 3 ms opportunity was at the arrival instant");
    }

    #[test]
    fn jitter_reorders_unless_order_is_kept() {
        let jittery = LinkConfig { delay: 10_000, jitter: 10_000, ..Default::default() };
        let mut link = Link::new(jittery.clone(), 7, 0);
        for i in 0..200 {
            link.enqueue(i * 100, i, 100);
        }
        let order: Vec<u64> = drain(&mut link, u64::MAX).into_iter().map(|(_, p)| p).collect();
        assert!(order.windows(2).any(|w| w[0] > w[1]), "uniform 0-20 ms delay reorders 100 us-spaced packets");

        let mut ordered = Link::new(LinkConfig { keep_order: true, ..jittery }, 7, 0);
        for i in 0..200 {
            ordered.enqueue(i * 100, i, 100);
        }
        let delivered = drain(&mut ordered, u64::MAX);
        assert!(delivered.windows(2).all(|w| w[0].1 < w[1].1));
        assert!(delivered.iter().all(|&(t, p)| t >= p * 100), "never earlier than sent");
    }

    #[test]
    fn the_wire_hands_packets_out_by_arrival_then_entry_whatever_order_they_came_in() {
        // Arrival times as jitter or a shorter delay make them: mostly rising, some overtaking,
        // some equal (entry order breaks the tie).
        let arrivals: Vec<Micros> = (0..400u64).map(|i| if i % 7 == 3 { i * 10 - 25 } else { i * 10 + (i % 3) * 10 }).collect();
        let mut wire = Wire { in_order: VecDeque::new(), overtaking: BinaryHeap::new() };
        for (order, &at) in arrivals.iter().enumerate() {
            let order = order as u64;
            wire.push(InFlight { at, order, id: order, size: 1, packet: order, corrupt: None });
        }
        assert!(!wire.overtaking.is_empty() && !wire.in_order.is_empty(), "both parts in use");
        let mut expected: Vec<(Micros, u64)> = arrivals.iter().enumerate().map(|(o, &at)| (at, o as u64)).collect();
        expected.sort();
        let mut got = Vec::new();
        while let Some(at) = wire.first_due() {
            let p = wire.pop().expect("a packet is due");
            assert_eq!(p.at, at);
            got.push((p.at, p.packet));
        }
        assert_eq!(got, expected);
    }

    #[test]
    fn events_change_the_link_while_it_runs() {
        // 1 Mbit/s: a 125-byte packet takes 1 ms.
        let config = LinkConfig { delay: 1_000, bandwidth: Bandwidth::Rate(1_000_000), ..Default::default() };
        let mut link = Link::new(config, 1, 0);
        link.enqueue(5_000, 5_000, 125);
        link.blackout(10_000, 20_000);
        for t in [10_000, 15_000, 19_999, 20_000] {
            link.enqueue(t, t, 125);
        }
        assert_eq!(link.stats().blackout_dropped, 3);
        assert_eq!(drain(&mut link, u64::MAX), vec![(7_000, 5_000), (22_000, 20_000)]);
        // Ten times the rate from 30 ms: a packet takes 100 us.
        link.set_bandwidth(30_000, Bandwidth::Rate(10_000_000));
        link.enqueue(30_000, 1, 125);
        link.enqueue(30_000, 2, 125);
        assert_eq!(drain(&mut link, u64::MAX), vec![(31_100, 1), (31_200, 2)]);
        // 30 ms at 1 Mbit/s plus 10 ms at 10 Mbit/s.
        let capacity = link.capacity_bytes(40_000).unwrap();
        assert!((capacity - (3_750.0 + 12_500.0)).abs() < 1e-6, "{capacity}");
        link.set_delay(50_000, 5_000);
        link.set_loss(50_000, LossModel::Bernoulli(1.0));
        link.enqueue(50_000, 3, 125);
        assert_eq!(link.stats().lost, 1);
        // Sojourn from entering the link to leaving the bottleneck: 1 ms for the slow-rate packets,
        // 100 us and (after waiting 100 us behind the first) 200 us for the pair.
        assert_eq!(link.queue_delay().count(), 4);
        // (Within the histogram's 3 % resolution.)
        assert!((97..=103).contains(&link.queue_delay().quantile(0.25).unwrap()));
        assert!((194..=206).contains(&link.queue_delay().quantile(0.5).unwrap()));
        assert_eq!(link.queue_delay().quantile(1.0), Some(1_000));
        assert_eq!(Link::<u64>::new(LinkConfig::default(), 1, 0).capacity_bytes(1_000), None);
    }

    #[test]
    fn the_bottleneck_runs_lazily_and_the_next_wake_up_is_the_earliest_arrival() {
        // 1 Mbit/s: a 125-byte packet takes 1 ms; 10 ms of delay, uniform jitter of 2 ms.
        let config = LinkConfig { delay: 10_000, jitter: 2_000, bandwidth: Bandwidth::Rate(1_000_000), ..Default::default() };
        let mut link = Link::new(config, 7, 0);
        link.enqueue(0, 1, 125);
        link.enqueue(0, 2, 125);
        // Not when the first packet leaves the bottleneck (1 ms) but the earliest it can arrive:
        // 1 ms + 10 ms - 2 ms of jitter - 1 us for rounding.
        assert_eq!(link.poll_timeout(), Some(8_999));
        // Recording events, it wakes when the packet leaves, to record that in time order.
        link.observe(true);
        assert_eq!(link.poll_timeout(), Some(1_000));
        link.observe(false);
        let got = drain(&mut link, u64::MAX);
        assert_eq!(got.iter().map(|&(_, p)| p).collect::<Vec<_>>(), vec![1, 2]);
        assert!((9_000..=13_000).contains(&got[0].0) && (10_000..=14_000).contains(&got[1].0), "{got:?}");
        // A change of delay applies to packets leaving from its time, though nothing ran the
        // bottleneck in between: the first left at 101 ms, the second leaves at 102 ms.
        let config = LinkConfig { delay: 1_000, bandwidth: Bandwidth::Rate(1_000_000), ..Default::default() };
        let mut link = Link::new(config, 7, 0);
        link.enqueue(100_000, 1, 125);
        link.enqueue(100_000, 2, 125);
        link.set_delay(101_500, 10_000);
        assert_eq!(drain(&mut link, u64::MAX), vec![(102_000, 1), (112_000, 2)]);
        // The same for loss after the bottleneck.
        let config = LinkConfig { bandwidth: Bandwidth::Rate(1_000_000), loss_position: LossPosition::AfterBottleneck, ..Default::default() };
        let mut link = Link::new(config, 7, 0);
        link.enqueue(0, 1, 125);
        link.enqueue(0, 2, 125);
        link.set_loss(1_500, LossModel::Bernoulli(1.0));
        assert_eq!(drain(&mut link, u64::MAX), vec![(1_000, 1)]);
        assert_eq!(link.stats().lost, 1);
    }

    #[test]
    fn a_rate_change_restarts_the_packet_on_the_bottleneck() {
        let config = LinkConfig { bandwidth: Bandwidth::Rate(1_000_000), ..Default::default() };
        let mut link = Link::new(config, 1, 0);
        link.enqueue(0, 1, 1_250); // 10 ms at 1 Mbit/s
        link.set_bandwidth(5_000, Bandwidth::Rate(10_000_000));
        assert_eq!(drain(&mut link, u64::MAX), vec![(6_000, 1)], "restarted at 5 ms, 1 ms at the new rate");
        let trace = Arc::new(Trace::parse("1\n").unwrap());
        link.set_bandwidth(10_000, Bandwidth::Trace(trace));
        assert!((link.capacity_bytes(20_000).unwrap() - (5_000.0 * 1e6 / 8e6 + 5_000.0 * 1e7 / 8e6 + 10.0 * 1504.0)).abs() < 1e-6);
    }

    #[test]
    fn duplication_and_loss_are_seeded() {
        let config = LinkConfig { loss: LossModel::Bernoulli(0.3), duplicate: 0.2, ..Default::default() };
        let run = |seed| {
            let mut link = Link::new(config.clone(), seed, 0);
            for i in 0..10_000 {
                link.enqueue(i, i, 100);
            }
            let delivered = drain(&mut link, u64::MAX);
            (link.stats(), delivered)
        };
        let (stats, delivered) = run(3);
        assert_eq!(run(3).1, delivered, "same seed, same packets");
        assert_ne!(run(4).1, delivered);
        assert_eq!(stats.delivered as usize, delivered.len());
        let dup = stats.duplicated as f64 / 10_000.0;
        assert!((dup - 0.2).abs() < 0.02, "duplication {dup}");
        // Every copy meets loss on its own (netem's rule), originals and duplicates alike.
        let loss = stats.lost as f64 / (10_000 + stats.duplicated) as f64;
        assert!((loss - 0.3).abs() < 0.02, "loss {loss}");
        // So a packet gets through unless the original and its copy are both lost:
        // with duplication d and loss p, 1 - p (1 - d + d p) of them.
        let distinct: std::collections::HashSet<_> = delivered.iter().map(|&(_, id)| id).collect();
        let through = distinct.len() as f64 / 10_000.0;
        let expected = 1.0 - 0.3 * (1.0 - 0.2 + 0.2 * 0.3);
        assert!((through - expected).abs() < 0.02, "{through} of the packets got through, expected {expected}");
    }
}
