//! The redundancy stage of the send path: where duplication and forward error
//! correction plug in. The stage sees every data packet as it is built (the
//! whole plaintext datagram) and returns whole repair packets to send; a
//! duplicate is the trivial repair packet. Repair packets go out through the
//! same packet builder as everything else, so packet protection seals them too.
//!
//! Built in: `none`, and `dup` (a share of data packets sent twice: the copy
//! follows its original at once, sealed as a packet of its own, so each meets
//! loss on its own). [`RedundancyConfig::Custom`] takes a stage from outside the crate.

use crate::time::Instant;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

pub trait Redundancy: fmt::Debug + Send {
    /// A data or FIN packet was built: `packet` is the whole datagram before protection.
    fn on_data_packet(&mut self, now: Instant, seq: u64, retransmission: bool, packet: &[u8]);

    /// Writes the next repair packet, whole and unprotected, at the start of `buf`
    /// and returns its length; `None` when there is nothing to send.
    fn poll_repair(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;

    /// A repair packet is waiting: [`Redundancy::poll_repair`] would return one now.
    fn has_repair(&self) -> bool;

    /// The sender's loss detection declared `packets` more data packets lost.
    fn on_lost(&mut self, _now: Instant, _packets: u64) {}

    /// The receiver's account, cumulative: of `expected` first transmissions, `missing`
    /// had not arrived when a later one did (what it rebuilt from repairs included).
    fn on_feedback(&mut self, _now: Instant, _expected: u64, _missing: u64) {}

    /// Data packets after a lost one that the stage's repairs may need to rebuild it: loss
    /// detection waits for that many before it resends (0: no repairs to wait for).
    fn repair_allowance(&self) -> u64 {
        0
    }

    /// The application gave nothing to send although the window had room: the flow is
    /// a stream whose messages wait on each loss, not a transfer limited by the path.
    /// Before the connection's first data packet it may or may not be called (a side
    /// that has sent nothing says nothing yet about how it sends).
    fn on_app_limited(&mut self, _now: Instant) {}

    /// Bytes of sent packets kept to make repairs from (counted without walking them).
    fn history_bytes(&self) -> usize {
        0
    }

    /// Everything sent is acknowledged and the connection has been quiet for a while
    /// (see `Connection::give_back_buffers`): repairs over what was sent before are of
    /// no use to anyone, so the history kept for them may go.
    fn forget_history(&mut self) {}

    fn name(&self) -> &str;
}

/// Builds a redundancy stage for each new connection.
pub trait RedundancyFactory: fmt::Debug + Send + Sync {
    fn build(&self) -> Box<dyn Redundancy>;
    fn name(&self) -> &str;
}

#[derive(Clone, Debug, Default)]
pub enum RedundancyConfig {
    /// Every packet is sent once.
    #[default]
    None,
    /// This share (0 to 1) of data packets is sent twice, spread evenly: 0.5 copies every other packet.
    Duplicate { share: f64 },
    /// Forward error correction with a fixed code.
    Fec(FecCode),
    /// Forward error correction whose repair rate follows the loss the receiver reports,
    /// spending at most `budget` (repair packets per data packet); none on a clean path.
    /// With `transfers` false, repairs go only to a flow the application limits (a stream
    /// of messages, the tail of a transfer): a transfer that fills the path gets none,
    /// since a repair there displaces new data and saves no time (the fence resends only
    /// what was lost, one round trip later, at the same cost in bytes).
    AdaptiveFec { budget: f64, transfers: bool },
    /// A stage from outside this crate.
    Custom(Arc<dyn RedundancyFactory>),
}

impl PartialEq for RedundancyConfig {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (RedundancyConfig::None, RedundancyConfig::None) => true,
            (RedundancyConfig::Duplicate { share: a }, RedundancyConfig::Duplicate { share: b }) => a == b,
            (RedundancyConfig::Fec(a), RedundancyConfig::Fec(b)) => a == b,
            (RedundancyConfig::AdaptiveFec { budget: a, transfers: x }, RedundancyConfig::AdaptiveFec { budget: b, transfers: y }) => a == b && x == y,
            (RedundancyConfig::Custom(a), RedundancyConfig::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl RedundancyConfig {
    /// The default profile's: adaptive FEC for what the application limits, none for transfers.
    pub const WHERE_IT_PAYS: RedundancyConfig = RedundancyConfig::AdaptiveFec { budget: 0.5, transfers: false };

    /// It sends FEC repair packets, which are a few bytes longer than the data they cover.
    pub fn sends_repairs(&self) -> bool {
        matches!(self, RedundancyConfig::Fec(_) | RedundancyConfig::AdaptiveFec { .. })
    }

    pub fn build(&self) -> Box<dyn Redundancy> {
        match self {
            RedundancyConfig::None => Box::new(NoRedundancy),
            RedundancyConfig::Duplicate { share } => Box::new(Duplication::new(*share)),
            RedundancyConfig::Fec(code) => Box::new(FecStage::new(*code)),
            RedundancyConfig::AdaptiveFec { budget, transfers } => Box::new(FecStage::adaptive(*budget, *transfers)),
            RedundancyConfig::Custom(factory) => factory.build(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            RedundancyConfig::None => "none",
            RedundancyConfig::Duplicate { .. } => "dup",
            RedundancyConfig::Fec(FecCode::Block { .. }) => "fec:rs",
            RedundancyConfig::Fec(FecCode::Window { .. }) => "fec:window",
            RedundancyConfig::AdaptiveFec { .. } => "fec:adaptive",
            RedundancyConfig::Custom(factory) => factory.name(),
        }
    }

    /// The setting as `--redundancy` reads it back.
    pub fn describe(&self) -> String {
        match self {
            RedundancyConfig::Duplicate { share } => format!("dup:{}%", (share * 1e4).round() / 1e2),
            RedundancyConfig::Fec(FecCode::Block { k, n }) => format!("fec:rs:{k}/{n}"),
            RedundancyConfig::Fec(FecCode::Window { window, every }) => format!("fec:window:{window}/{every}"),
            RedundancyConfig::AdaptiveFec { budget, transfers } => {
                format!("fec:adaptive:budget={}%{}", (budget * 1e4).round() / 1e2, if *transfers { "" } else { ",transfers=off" })
            }
            other => other.name().to_string(),
        }
    }
}

/// What one end's handshake says about redundancy, so the two agree before any data:
/// one byte, the low three bits naming what that end sends (see the constants) and bit
/// 7 set when it takes repair packets (rebuilds from them and reports loss in feedback
/// packets). A sender sends repairs only to a peer that takes them, and a receiver
/// rebuilds only from a peer that said it sends them; an adaptive sender then changes
/// its rate during the connection from the feedback, each repair saying which packets
/// it covers. Other bits are zero when sent and ignored when read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announcement {
    pub sends: u8,
    pub takes_repairs: bool,
}

impl Announcement {
    pub const NONE: u8 = 0;
    pub const DUPLICATES: u8 = 1;
    pub const REED_SOLOMON: u8 = 2;
    pub const WINDOW: u8 = 3;
    pub const ADAPTIVE: u8 = 4;
    /// A stage from outside this crate: its packets may be repairs of any scheme.
    pub const OTHER: u8 = 5;
    const TAKES_REPAIRS: u8 = 0x80;

    pub fn of(config: &RedundancyConfig, takes_repairs: bool) -> Announcement {
        let sends = match config {
            RedundancyConfig::None => Self::NONE,
            RedundancyConfig::Duplicate { .. } => Self::DUPLICATES,
            RedundancyConfig::Fec(FecCode::Block { .. }) => Self::REED_SOLOMON,
            RedundancyConfig::Fec(FecCode::Window { .. }) => Self::WINDOW,
            RedundancyConfig::AdaptiveFec { .. } => Self::ADAPTIVE,
            RedundancyConfig::Custom(_) => Self::OTHER,
        };
        Announcement { sends, takes_repairs }
    }

    pub fn to_byte(self) -> u8 {
        (self.sends & 0x07) | if self.takes_repairs { Self::TAKES_REPAIRS } else { 0 }
    }

    pub fn from_byte(byte: u8) -> Announcement {
        Announcement { sends: byte & 0x07, takes_repairs: byte & Self::TAKES_REPAIRS != 0 }
    }

    /// Its packets include repair packets, which the peer must take.
    pub fn sends_repairs(self) -> bool {
        self.sends >= Self::REED_SOLOMON
    }

    /// It follows the loss the peer reports, so feedback packets are worth sending it.
    pub fn adapts(self) -> bool {
        matches!(self.sends, Self::ADAPTIVE | Self::OTHER)
    }
}

#[derive(Debug)]
pub struct NoRedundancy;

impl Redundancy for NoRedundancy {
    fn on_data_packet(&mut self, _now: Instant, _seq: u64, _retransmission: bool, _packet: &[u8]) {}
    fn poll_repair(&mut self, _now: Instant, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    fn has_repair(&self) -> bool {
        false
    }
    fn name(&self) -> &str {
        "none"
    }
}

/// A fixed FEC code (see [`crate::fec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FecCode {
    /// Reed–Solomon over blocks: after every `k` source packets, `n - k` repairs; any `k` of the `n` rebuild the block.
    Block { k: u8, n: u8 },
    /// After every `every` source packets, one repair over the last `window`.
    Window { window: u8, every: u8 },
}

/// The windows an adaptive code's repairs span: long for a transfer the path limits
/// (fewer repairs for the same protection), short for a stream of messages (a loss is
/// repaired a few packets later, so a message waits little).
const ADAPTIVE_WINDOW: u8 = 32;
const ADAPTIVE_STREAM_WINDOW: u8 = 8;
/// Source packets after the application last left the window unused during which the
/// flow counts as a stream.
const APP_LIMITED_MEMORY: u64 = 64;
/// A stream's repair interval before the path's loss has been measured.
const STREAM_PRIOR_EVERY: u8 = 3;

/// Chooses how often to send a repair from the loss the path shows: the receiver's
/// feedback (what was missing before repairs rebuilt it) and the sender's own loss
/// detection, each smoothed, the larger taken.
#[derive(Debug)]
struct Adaptive {
    budget: f64,
    /// Repairs for a flow the path limits too (`false`: only for what the application limits).
    transfers: bool,
    sent: u64,
    /// `sent` when the application last left the window unused.
    app_limited_at: Option<u64>,
    /// Sender-detected losses and sources sent since the estimate was last updated from them.
    lost: u64,
    sent_at_last: u64,
    from_losses: f64,
    from_feedback: f64,
    last_feedback: (u64, u64),
}

impl Adaptive {
    fn new(budget: f64, transfers: bool) -> Adaptive {
        Adaptive { budget: budget.clamp(0.0, 1.0), transfers, sent: 0, app_limited_at: None, lost: 0, sent_at_last: 0, from_losses: 0.0, from_feedback: 0.0, last_feedback: (0, 0) }
    }

    fn loss(&self) -> f64 {
        self.from_losses.max(self.from_feedback)
    }

    /// The flow left the window unused lately: its messages wait on every loss.
    fn streaming(&self) -> bool {
        self.app_limited_at.is_some_and(|at| self.sent - at < APP_LIMITED_MEMORY)
    }

    /// Repair packets per source packet for a loss rate `p` over a window of `w`: the
    /// repairs a window needs on average, plus `margin` standard deviations of its
    /// losses, within the budget; none when nothing is lost. A transfer takes two
    /// deviations (what is left is resent, which costs time but less than more repairs
    /// would); a stream four (what is left delays every message behind it by a round trip).
    fn overhead(p: f64, w: f64, margin: f64, budget: f64) -> f64 {
        if p < 0.002 {
            return 0.0;
        }
        let mean = p / (1.0 - p).max(0.05);
        (mean * (1.0 + margin / (w * p).sqrt())).min(budget)
    }

    /// Whether any measurement has come in yet: the receiver's first feedback, or the
    /// sender's first 64 packets folded in.
    fn informed(&self) -> bool {
        self.last_feedback.0 > 0 || self.sent_at_last > 0
    }

    /// The code for what the path and the flow show now.
    fn code(&self) -> FecCode {
        let (window, margin) = if self.streaming() { (ADAPTIVE_STREAM_WINDOW, 4.0) } else { (ADAPTIVE_WINDOW, 2.0) };
        let r = if !self.streaming() && !self.transfers {
            0.0
        } else if self.streaming() && !self.informed() {
            // A stream's first messages go out before anything is measured; losing one
            // then costs a round trip for it and every message behind it, while a few
            // repairs cost a stream (which leaves the path idle) next to nothing. Until
            // the first measurement, one repair per STREAM_PRIOR_EVERY packets.
            (1.0 / STREAM_PRIOR_EVERY as f64).min(self.budget)
        } else {
            Self::overhead(self.loss(), window as f64, margin, self.budget)
        };
        let every = if r <= 0.0 { u8::MAX } else { (1.0 / r).floor().clamp(1.0, 64.0) as u8 };
        FecCode::Window { window, every }
    }

    fn on_sent(&mut self) {
        self.sent += 1;
        // Every 64 packets, fold the losses the sender saw into its estimate.
        if self.sent - self.sent_at_last >= 64 {
            let rate = self.lost as f64 / (self.sent - self.sent_at_last) as f64;
            self.from_losses = 0.75 * self.from_losses + 0.25 * rate.min(1.0);
            self.lost = 0;
            self.sent_at_last = self.sent;
        }
    }

    fn on_lost(&mut self, packets: u64) {
        self.lost += packets;
        // A burst of losses is news now, not in 64 packets.
        let since = (self.sent - self.sent_at_last).max(1);
        let rate = (self.lost as f64 / since as f64).min(1.0);
        if rate > self.from_losses && since >= 16 {
            self.from_losses = rate;
        }
    }

    fn on_feedback(&mut self, expected: u64, missing: u64) {
        let (e0, m0) = self.last_feedback;
        if expected <= e0 {
            return; // late or reordered feedback: nothing new
        }
        // Fewer missing than the last report said: originals it counted came late since
        // (a receiver takes those back). Nothing lost in this span, and the count goes on
        // from here: ignoring such reports froze the estimate at the last one taken.
        let rate = (missing.saturating_sub(m0) as f64 / (expected - e0) as f64).min(1.0);
        let weight = ((expected - e0) as f64 / 128.0).min(1.0);
        self.from_feedback = (1.0 - weight) * self.from_feedback + weight * rate;
        self.last_feedback = (expected, missing);
    }
}

/// Sends FEC repair packets beside the data: a fixed code, or an adaptive one.
#[derive(Debug)]
pub struct FecStage {
    code: FecCode,
    adaptive: Option<Adaptive>,
    encoder: crate::fec::Encoder,
    since_repair: u32,
    next_index: u8,
    /// Whole repair packets (version 1 layout, unprotected) waiting to leave.
    pending: VecDeque<Vec<u8>>,
    /// The connection id the data packets carry (repairs go to the same peer).
    dst_cid: [u8; 4],
}

impl FecStage {
    const MAX_PENDING: usize = 64;

    pub fn new(code: FecCode) -> FecStage {
        let keep = match code {
            FecCode::Block { k, .. } => k as usize,
            FecCode::Window { window, .. } => window as usize,
        };
        FecStage { code, adaptive: None, encoder: crate::fec::Encoder::new(keep), since_repair: 0, next_index: 0, pending: VecDeque::new(), dst_cid: [0; 4] }
    }

    /// A window code whose repair rate follows the loss measured, within `budget`.
    pub fn adaptive(budget: f64, transfers: bool) -> FecStage {
        // Keep enough for the longest window the adaptive code may choose.
        FecStage { adaptive: Some(Adaptive::new(budget, transfers)), ..FecStage::new(FecCode::Window { window: ADAPTIVE_WINDOW, every: u8::MAX }) }
    }

    fn queue(&mut self, scheme: crate::fec::Scheme, span: usize, index: u8) {
        let Some((first, symbol)) = self.encoder.repair(scheme, span, index) else { return };
        let span = span.min((self.encoder.last().unwrap_or(first) - first + 1) as usize);
        let mut packet = Vec::with_capacity(crate::wire::REPAIR_OVERHEAD + symbol.len());
        packet.extend_from_slice(&[crate::wire::VERSION, crate::wire::PacketType::Repair as u8]);
        packet.extend_from_slice(&self.dst_cid);
        packet.push(scheme as u8);
        packet.extend_from_slice(&(first as u32).to_be_bytes());
        packet.push(span as u8);
        packet.push(index);
        packet.extend_from_slice(&symbol);
        if self.pending.len() < Self::MAX_PENDING {
            self.pending.push_back(packet);
        }
    }

    /// The repairs due after one more source packet (`fin`: the stream's last, so the tail is covered too).
    fn after_source(&mut self, fin: bool) {
        self.since_repair += 1;
        match self.code {
            FecCode::Block { k, n } => {
                if self.since_repair >= k as u32 || (fin && self.since_repair > 0) {
                    let span = self.since_repair as usize;
                    for index in 0..n.saturating_sub(k) {
                        self.queue(crate::fec::Scheme::Block, span, index);
                    }
                    self.since_repair = 0;
                }
            }
            FecCode::Window { window, every } => {
                if every != u8::MAX && (self.since_repair >= every as u32 || fin) {
                    let index = self.next_index;
                    self.next_index = self.next_index.wrapping_add(1);
                    self.queue(crate::fec::Scheme::Window, window as usize, index);
                    self.since_repair = 0;
                }
            }
        }
    }
}

impl Redundancy for FecStage {
    fn on_data_packet(&mut self, _now: Instant, seq: u64, retransmission: bool, packet: &[u8]) {
        if retransmission || packet.len() < crate::wire::HEADER_LEN {
            return;
        }
        let (payload, fin) = match crate::wire::PacketType::from_u8(packet[1]) {
            Some(crate::wire::PacketType::Data) if packet.len() >= crate::wire::DATA_OVERHEAD => (&packet[crate::wire::DATA_OVERHEAD..], false),
            Some(crate::wire::PacketType::Close) => (&[][..], true),
            _ => return,
        };
        self.dst_cid.copy_from_slice(&packet[2..6]);
        if let Some(a) = &mut self.adaptive {
            a.on_sent();
            self.code = a.code();
            if let FecCode::Window { window, .. } = self.code {
                self.encoder.set_keep(window as usize);
            }
        }
        // While an adaptive code sends nothing (a clean path, or a transfer it leaves
        // alone), packets are not copied into its history: copying every packet cost a
        // quarter of the loopback rate. The gap restarts the history, and the first
        // repair after it covers only what was sent since.
        if !matches!(self.code, FecCode::Window { every: u8::MAX, .. }) {
            self.encoder.add(seq, crate::fec::source_symbol(payload, fin));
        }
        self.after_source(fin);
    }
    fn poll_repair(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        while let Some(repair) = self.pending.pop_front() {
            // A repair that does not fit the datagram is dropped, never sent cut.
            if repair.len() <= buf.len() {
                buf[..repair.len()].copy_from_slice(&repair);
                return Some(repair.len());
            }
        }
        None
    }
    fn has_repair(&self) -> bool {
        !self.pending.is_empty()
    }
    fn on_lost(&mut self, _now: Instant, packets: u64) {
        if let Some(a) = &mut self.adaptive {
            a.on_lost(packets);
        }
    }
    fn on_feedback(&mut self, _now: Instant, expected: u64, missing: u64) {
        if let Some(a) = &mut self.adaptive {
            a.on_feedback(expected, missing);
        }
    }
    fn on_app_limited(&mut self, _now: Instant) {
        // Before the first data packet the application has not written yet: an idle
        // window then says nothing about how it sends. Counting it made every bulk
        // transfer start as a stream, with a repair per three packets (21 per connection:
        // a tenth of a server's work with 100 short transfers on loopback).
        if let Some(a) = self.adaptive.as_mut().filter(|a| a.sent > 0) {
            a.app_limited_at = Some(a.sent);
        }
    }
    fn repair_allowance(&self) -> u64 {
        match self.code {
            // The whole block and its repairs, then one more packet's ack.
            FecCode::Block { n, .. } => n as u64 + 1,
            FecCode::Window { every: u8::MAX, .. } => 0,
            // Two repairs after the loss; a longer window shares them with more losses.
            FecCode::Window { every, .. } => 2 * every as u64 + 1,
        }
    }
    fn history_bytes(&self) -> usize {
        self.encoder.held_bytes()
    }
    fn forget_history(&mut self) {
        self.encoder.forget();
    }
    fn name(&self) -> &str {
        match (self.adaptive.is_some(), self.code) {
            (true, _) => "fec:adaptive",
            (false, FecCode::Block { .. }) => "fec:rs",
            (false, FecCode::Window { .. }) => "fec:window",
        }
    }
}

/// Sends a share of data packets twice. Which ones is decided by a running credit, not
/// at random: with 50 % every other packet is copied, so a run's redundancy is exactly
/// its setting and draws nothing from the run's random streams.
#[derive(Debug)]
pub struct Duplication {
    share: f64,
    credit: f64,
    pending: VecDeque<Vec<u8>>,
}

impl Duplication {
    /// Copies waiting at most: they leave right after their originals, so a few suffice.
    const MAX_PENDING: usize = 64;

    pub fn new(share: f64) -> Duplication {
        Duplication { share: share.clamp(0.0, 1.0), credit: 0.0, pending: VecDeque::new() }
    }
}

impl Redundancy for Duplication {
    fn on_data_packet(&mut self, _now: Instant, _seq: u64, _retransmission: bool, packet: &[u8]) {
        self.credit += self.share;
        if self.credit >= 1.0 - 1e-9 {
            self.credit -= 1.0;
            if self.pending.len() < Self::MAX_PENDING {
                self.pending.push_back(packet.to_vec());
            }
        }
    }
    fn poll_repair(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        let copy = self.pending.pop_front()?;
        if copy.len() > buf.len() {
            return None;
        }
        buf[..copy.len()].copy_from_slice(&copy);
        Some(copy.len())
    }
    fn has_repair(&self) -> bool {
        !self.pending.is_empty()
    }
    fn name(&self) -> &str {
        "dup"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplication_copies_exactly_its_share() {
        for (share, copies) in [(0.0, 0), (0.25, 25), (0.5, 50), (0.75, 75), (1.0, 100)] {
            let mut d = Duplication::new(share);
            let mut buf = [0u8; 16];
            let mut n = 0;
            for i in 0..100u8 {
                d.on_data_packet(Instant::ZERO, i as u64, false, &[i; 4]);
                while let Some(len) = d.poll_repair(Instant::ZERO, &mut buf) {
                    assert_eq!(&buf[..len], &[i; 4], "the copy follows its original");
                    n += 1;
                }
            }
            assert_eq!(n, copies, "share {share}");
        }
        assert_eq!(RedundancyConfig::Duplicate { share: 0.25 }.describe(), "dup:25%");
    }

    #[test]
    fn adaptive_protects_a_stream_until_the_path_is_measured() {
        let every = |a: &Adaptive| match a.code() {
            FecCode::Window { every, .. } => every,
            FecCode::Block { .. } => unreachable!(),
        };
        // A transfer with nothing measured sends no repairs.
        let mut bulk = Adaptive::new(0.5, true);
        bulk.on_sent();
        assert_eq!(every(&bulk), u8::MAX);
        // A stream does, until the first measurement ...
        let mut stream = Adaptive::new(0.5, true);
        stream.app_limited_at = Some(0);
        stream.on_sent();
        assert_eq!(every(&stream), STREAM_PRIOR_EVERY);
        // ... within the budget ...
        let mut frugal = Adaptive::new(0.1, true);
        frugal.app_limited_at = Some(0);
        assert_eq!(every(&frugal), 10);
        // ... and then none if the path turns out clean.
        stream.on_feedback(32, 0);
        assert_eq!(every(&stream), u8::MAX);
        // A lossy path's feedback brings repairs back.
        for k in 1..=8 {
            stream.on_feedback(32 + 128 * k, 13 * k);
        }
        assert!(every(&stream) < 8, "10 % loss on a stream: {}", every(&stream));
    }

    #[test]
    fn an_idle_window_before_the_first_packet_does_not_make_a_stream() {
        let mut data = vec![0u8; crate::wire::DATA_OVERHEAD + 100];
        data[0] = crate::wire::VERSION;
        data[1] = crate::wire::PacketType::Data as u8;
        let now = Instant::ZERO;
        let repairs_after = |stage: &mut FecStage, packets: u64, first: u64| {
            for seq in first..first + packets {
                stage.on_data_packet(now, seq, false, &data);
            }
            let mut buf = [0u8; 2048];
            std::iter::from_fn(|| stage.poll_repair(now, &mut buf)).count()
        };
        let RedundancyConfig::AdaptiveFec { budget, transfers } = RedundancyConfig::WHERE_IT_PAYS else { unreachable!() };
        // The connection is up and the window open before the application's first write:
        // a bulk transfer then fills the window and sends no repairs ...
        let mut bulk = FecStage::adaptive(budget, transfers);
        bulk.on_app_limited(now);
        assert_eq!(repairs_after(&mut bulk, 30, 0), 0);
        // ... while a flow that leaves the window unused after it has sent is a stream,
        // protected until the path is measured.
        let mut stream = FecStage::adaptive(budget, transfers);
        assert_eq!(repairs_after(&mut stream, 1, 0), 0);
        stream.on_app_limited(now);
        assert_eq!(repairs_after(&mut stream, 30, 1), 30 / STREAM_PRIOR_EVERY as usize);
    }

    #[test]
    fn where_it_pays_leaves_a_transfer_alone_and_protects_what_the_application_limits() {
        let every = |a: &Adaptive| match a.code() {
            FecCode::Window { every, .. } => every,
            FecCode::Block { .. } => unreachable!(),
        };
        let RedundancyConfig::AdaptiveFec { budget, transfers } = RedundancyConfig::WHERE_IT_PAYS else { unreachable!() };
        let (mut paying, mut always) = (Adaptive::new(budget, transfers), Adaptive::new(budget, true));
        // 10 % loss measured on a transfer that fills the path: only the always-on code repairs.
        for a in [&mut paying, &mut always] {
            for _ in 0..256 {
                a.on_sent();
            }
            for k in 1..=8 {
                a.on_feedback(128 * k, 13 * k);
            }
        }
        assert_eq!(every(&paying), u8::MAX);
        assert!(every(&always) < 8, "{}", every(&always));
        // The application leaves the window unused (a stream, a transfer's tail): repairs.
        paying.app_limited_at = Some(paying.sent);
        assert!(every(&paying) <= 3, "{}", every(&paying));
        // Long after it last did, the flow is a transfer again.
        for _ in 0..APP_LIMITED_MEMORY {
            paying.on_sent();
        }
        assert_eq!(every(&paying), u8::MAX);
        assert_eq!(RedundancyConfig::WHERE_IT_PAYS.describe(), "fec:adaptive:budget=50%,transfers=off");
        assert_eq!(Announcement::of(&RedundancyConfig::WHERE_IT_PAYS, true).to_byte(), 0x84);
    }

    #[test]
    fn announcements_read_back() {
        for (config, sends) in [
            (RedundancyConfig::None, Announcement::NONE),
            (RedundancyConfig::Duplicate { share: 0.5 }, Announcement::DUPLICATES),
            (RedundancyConfig::Fec(FecCode::Block { k: 8, n: 12 }), Announcement::REED_SOLOMON),
            (RedundancyConfig::Fec(FecCode::Window { window: 16, every: 4 }), Announcement::WINDOW),
            (RedundancyConfig::AdaptiveFec { budget: 0.5, transfers: true }, Announcement::ADAPTIVE),
        ] {
            for takes in [false, true] {
                let a = Announcement::of(&config, takes);
                assert_eq!(a.sends, sends);
                assert_eq!(Announcement::from_byte(a.to_byte()), a);
            }
        }
        assert_eq!(Announcement::of(&RedundancyConfig::AdaptiveFec { budget: 0.5, transfers: true }, true).to_byte(), 0x84);
        assert!(!Announcement::from_byte(0x81).sends_repairs(), "duplicates are data packets");
        assert!(Announcement::from_byte(0x02).sends_repairs() && !Announcement::from_byte(0x02).adapts());
        // Reserved bits are ignored.
        assert_eq!(Announcement::from_byte(0x7c), Announcement { sends: 4, takes_repairs: false });
    }
}
