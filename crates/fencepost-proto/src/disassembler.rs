//! The send side: the `Disassembler` cuts the application's byte stream into
//! packets, remembers what each packet carried until the peer holds it, and
//! picks what to send next: holes to resend first, then new data.
//!
//! Packets keep their sequence number when resent. Each transmission also gets
//! a number of its own, in sending order, so loss detection can ask "was
//! something sent after this transmission acknowledged?" exactly as RFC 9002
//! asks it of QUIC packet numbers.

use crate::congestion::SentPacket;
use crate::time::{Duration, Instant};
use crate::send_buffer::{ByteSource, SendBuffer};
use std::sync::Arc;
use crate::wire::{CLOSE_LEN, DATA_OVERHEAD};
use bytes::Bytes;
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentState {
    /// Sent, not acknowledged, not presumed lost.
    InFlight,
    /// Presumed lost, waiting in the retransmission queue.
    Lost,
    /// The peer holds it.
    Acked,
}

#[derive(Clone, Debug)]
struct Segment {
    /// Stream offset of the first payload byte.
    offset: u64,
    len: u32,
    fin: bool,
    state: SegmentState,
    transmissions: u32,
    /// Transmission number of the latest transmission.
    last_tx: u64,
    last_sent: Instant,
    /// How the latest loss was inferred.
    lost_by: LostBy,
    /// What the sender knew when the latest transmission left (for the congestion controller).
    packet: SentPacket,
}

impl Segment {
    fn new(offset: u64, len: u32, fin: bool) -> Segment {
        Segment {
            offset,
            len,
            fin,
            state: SegmentState::Lost,
            transmissions: 0,
            last_tx: 0,
            last_sent: Instant::ZERO,
            lost_by: LostBy::Timeout,
            packet: SentPacket::default(),
        }
    }

    /// Datagram bytes, without what packet protection adds.
    fn plain_bytes(&self) -> u64 {
        if self.fin { CLOSE_LEN as u64 } else { (DATA_OVERHEAD as u64) + self.len as u64 }
    }
}

/// What one loss-detection pass found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    pub packets: u64,
    pub bytes: u64,
    /// When the earliest of the newly lost transmissions left.
    pub earliest_sent: Option<Instant>,
    /// When the oldest not-yet-lost candidate will cross the time threshold.
    pub next_check: Option<Instant>,
}

/// How a packet came to be declared lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostBy {
    /// A retransmission timeout, or (without a fence) duplicate acks.
    Timeout,
    /// As many packets sent after it were acknowledged as the reordering threshold allows;
    /// `lost_sent` is when the transmission declared lost had left.
    PacketThreshold { lost_sent: Instant },
    /// It went unacknowledged for the loss delay while packets sent after it were acknowledged.
    TimeThreshold { lost_sent: Instant },
}

impl LostBy {
    /// When the transmission a threshold declared lost had left (`None` after a timeout).
    pub fn threshold_lost_sent(self) -> Option<Instant> {
        match self {
            LostBy::Timeout => None,
            LostBy::PacketThreshold { lost_sent } | LostBy::TimeThreshold { lost_sent } => Some(lost_sent),
        }
    }
}

/// A segment the peer newly acknowledged.
#[derive(Clone, Copy, Debug)]
pub struct Acked {
    pub seq: u64,
    pub sent: Instant,
    pub bytes: u64,
    /// It was counted in flight (not already presumed lost).
    pub was_in_flight: bool,
    pub transmissions: u32,
    /// How the loss that the latest retransmission followed was inferred.
    pub resent_after: LostBy,
    /// What the sender knew when the acknowledged transmission left.
    pub packet: SentPacket,
}

/// Shared writes shorter than this are copied into the buffer's blocks instead.
const SHARE_FROM: usize = 4096;

#[derive(Debug)]
pub struct Disassembler {
    /// Bytes from `stream_base` on: unacknowledged packets' payloads, then unsent bytes.
    stream: SendBuffer,
    stream_base: u64,
    /// Stream offset up to which bytes belong to packets.
    segmented_upto: u64,
    /// With `packet_per_write`: stream offsets where a write ended and a packet must end too.
    write_ends: VecDeque<u64>,
    packet_per_write: bool,
    capacity: usize,
    /// At most this many written bytes may wait unsent (no limit unless the connection sets one).
    unsent_limit: usize,
    fin_requested: bool,
    fin_seq: Option<u64>,
    /// `segments[i]` is sequence `seg_base + i`; the front is never acknowledged.
    segments: VecDeque<Segment>,
    seg_base: u64,
    next_tx: u64,
    /// (transmission number, seq) in sending order, for loss detection and the
    /// retransmission timer. Entries go stale when the packet is acknowledged or
    /// resent; stale entries are skipped and dropped lazily.
    tx_order: VecDeque<(u64, u64)>,
    track_tx_order: bool,
    retransmit_queue: VecDeque<u64>,
    bytes_in_flight: u64,
    largest_acked_tx: Option<u64>,
    /// When the latest packet the peer is known to hold was sent, of any kind: its
    /// timestamp came back in an ack. A keepalive the peer answered moves it past data
    /// still in flight that no later data transmission has been acknowledged after.
    latest_delivered_sent: Option<Instant>,
    /// Highest sequence number the peer acknowledged through the fence bitmap.
    largest_acked_seq: Option<u64>,
    /// Unacknowledged sequence numbers below `largest_acked_seq`, ascending: the
    /// holes. An ack's bitmap can only add news at a hole or above the largest,
    /// so looking there instead of at every bit keeps wide fences cheap.
    holes: Vec<u64>,
    /// Transmissions declared lost since the last [`Disassembler::drain_lost`].
    newly_lost: Vec<SentPacket>,
    /// Bytes packet protection adds to every datagram (an authentication tag).
    protection_overhead: u64,
}

impl Disassembler {
    pub fn new(capacity: usize, packet_per_write: bool, track_tx_order: bool) -> Self {
        Disassembler {
            stream: SendBuffer::new(),
            stream_base: 0,
            segmented_upto: 0,
            write_ends: VecDeque::new(),
            packet_per_write,
            capacity,
            unsent_limit: usize::MAX,
            fin_requested: false,
            fin_seq: None,
            segments: VecDeque::new(),
            seg_base: 0,
            next_tx: 0,
            tx_order: VecDeque::new(),
            track_tx_order,
            retransmit_queue: VecDeque::new(),
            bytes_in_flight: 0,
            largest_acked_tx: None,
            latest_delivered_sent: None,
            largest_acked_seq: None,
            holes: Vec::new(),
            newly_lost: Vec::new(),
            protection_overhead: 0,
        }
    }

    /// Every datagram grows by this many bytes on the wire (packet protection's tag).
    pub fn with_protection_overhead(mut self, bytes: usize) -> Self {
        self.protection_overhead = bytes as u64;
        self
    }

    // ---- getters ----

    /// Lowest sequence number the peer does not hold (as far as we know).
    pub fn lowest_unacked(&self) -> u64 {
        self.seg_base
    }
    /// Stream bytes the peer holds without a gap (everything before the first unacknowledged packet).
    pub fn acknowledged_bytes(&self) -> u64 {
        self.stream_base
    }
    /// The sequence number the next new packet will get.
    pub fn next_seq(&self) -> u64 {
        self.seg_base + self.segments.len() as u64
    }
    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }
    /// Bytes written and not yet put in a packet.
    pub fn unsent_bytes(&self) -> u64 {
        self.stream_base + self.stream.len() as u64 - self.segmented_upto
    }
    /// Room left in the send buffer: its capacity, and at most the unsent limit less what is unsent.
    pub fn free_space(&self) -> usize {
        self.free_space_under(self.unsent_limit)
    }
    /// [`Disassembler::free_space`] were the unsent limit `unsent_limit`.
    pub fn free_space_under(&self, unsent_limit: usize) -> usize {
        let unsent = usize::try_from(self.unsent_bytes()).unwrap_or(usize::MAX);
        self.capacity.saturating_sub(self.stream.len()).min(unsent_limit.saturating_sub(unsent))
    }

    /// The most that may wait unsent now: the unsent limit, within what the capacity
    /// leaves beside what was sent and is not yet acknowledged. (Free space is this less
    /// what waits unsent.)
    pub fn unsent_room(&self) -> usize {
        let unsent = usize::try_from(self.unsent_bytes()).unwrap_or(usize::MAX);
        let sent_held = self.stream.len().saturating_sub(unsent);
        self.capacity.saturating_sub(sent_held).min(self.unsent_limit)
    }

    /// Sets the most the buffer holds, unacknowledged and unsent together. Below what it
    /// holds now, it takes no more writes until acks bring it under.
    pub fn set_capacity(&mut self, bytes: usize) {
        self.capacity = bytes;
    }

    /// Bytes written and not yet sent that the buffer takes (the rest of the capacity
    /// holds what is in flight). See `Connection::unsent_limit`.
    pub fn set_unsent_limit(&mut self, bytes: usize) {
        self.unsent_limit = bytes;
    }
    /// Something new (data or the FIN) is waiting to be sent.
    pub fn has_new(&self) -> bool {
        self.unsent_bytes() > 0 || (self.fin_requested && self.fin_seq.is_none())
    }
    pub fn has_retransmissions(&self) -> bool {
        !self.retransmit_queue.is_empty()
    }
    pub fn has_outstanding(&self) -> bool {
        !self.segments.is_empty()
    }
    pub fn fin_requested(&self) -> bool {
        self.fin_requested
    }
    /// The FIN has its sequence number: everything the stream will carry has been sent once.
    pub fn fin_sent(&self) -> bool {
        self.fin_seq.is_some()
    }
    /// The FIN was sent and the peer acknowledged it and everything before it.
    pub fn fin_acked(&self) -> bool {
        self.fin_seq.is_some_and(|f| f < self.seg_base)
    }
    pub fn state(&self, seq: u64) -> Option<SegmentState> {
        let index = seq.checked_sub(self.seg_base)?;
        self.segments.get(index as usize).map(|s| s.state)
    }
    /// When the latest transmission of `seq` left.
    pub fn last_sent(&self, seq: u64) -> Option<Instant> {
        seq.checked_sub(self.seg_base)
            .and_then(|i| self.segments.get(i as usize))
            .filter(|s| s.transmissions > 0)
            .map(|s| s.last_sent)
    }

    // ---- commands from the application ----

    /// Accepts as much of `data` as the send buffer has room for.
    pub fn write(&mut self, data: &[u8]) -> usize {
        self.take(data.len(), |stream, n| stream.extend_from_slice(&data[..n]))
    }

    /// Like [`Disassembler::write`] for bytes the caller already holds as [`Bytes`]: what
    /// fits is kept without a copy (the rest is `data` after the returned count). A few
    /// bytes are copied all the same: cheaper than a piece of their own to track.
    pub fn write_shared(&mut self, data: &Bytes) -> usize {
        let n = self.room_for(data.len());
        if n < SHARE_FROM {
            return self.write(&data[..n]);
        }
        self.stream.push_shared(data.slice(..n));
        self.note_write_end();
        n
    }

    /// Like [`Disassembler::write`] for `len` bytes of `source` from its offset `from`,
    /// which are made into their packets when sent: what fits is taken, nothing copied.
    pub fn write_generated(&mut self, source: &Arc<dyn ByteSource>, from: u64, len: usize) -> usize {
        self.take(len, |stream, n| stream.push_generated(source, from, n))
    }

    /// Takes what fits of a write of `len` bytes: `push` puts the first `n` in the stream.
    fn take(&mut self, len: usize, push: impl FnOnce(&mut SendBuffer, usize)) -> usize {
        let n = self.room_for(len);
        if n == 0 {
            return 0;
        }
        push(&mut self.stream, n);
        self.note_write_end();
        n
    }

    /// How much of a write of `len` bytes the buffer takes now (none after the FIN).
    fn room_for(&self, len: usize) -> usize {
        if self.fin_requested {
            0
        } else {
            len.min(self.free_space())
        }
    }

    fn note_write_end(&mut self) {
        if self.packet_per_write {
            self.write_ends.push_back(self.stream_base + self.stream.len() as u64);
        }
    }

    /// Memory its queues keep allocated beyond what they hold (spare blocks, and room the
    /// records' queues grew to in the largest flight), which [`Disassembler::shrink_to_fit`]
    /// gives back.
    pub fn retained_bytes(&self) -> usize {
        use crate::unused_room;
        self.stream.retained_bytes()
            + unused_room::<Segment>(self.segments.capacity(), self.segments.len())
            + unused_room::<(u64, u64)>(self.tx_order.capacity(), self.tx_order.len())
            + unused_room::<u64>(self.retransmit_queue.capacity(), self.retransmit_queue.len())
            + unused_room::<u64>(self.holes.capacity(), self.holes.len())
            + unused_room::<u64>(self.write_ends.capacity(), self.write_ends.len())
            + unused_room::<SentPacket>(self.newly_lost.capacity(), self.newly_lost.len())
    }

    /// Gives back the memory beyond what is held now (everything is acknowledged once a
    /// connection is closed, but it lingers to answer the peer's retransmissions).
    pub fn shrink_to_fit(&mut self) {
        self.stream.shrink_to_fit();
        self.segments.shrink_to_fit();
        self.tx_order.shrink_to_fit();
        self.retransmit_queue.shrink_to_fit();
        self.holes.shrink_to_fit();
        self.write_ends.shrink_to_fit();
        self.newly_lost.shrink_to_fit();
    }

    /// No more data: a FIN follows the bytes already written.
    pub fn finish(&mut self) {
        self.fin_requested = true;
    }

    // ---- choosing what to send ----

    /// Cuts the next packet from the unsent bytes (or the FIN) and returns its sequence number.
    pub fn new_segment(&mut self, max_payload: usize) -> Option<u64> {
        let unsent = self.unsent_bytes();
        let seq = self.next_seq();
        let segment = if unsent > 0 {
            let mut len = unsent.min(max_payload.max(1) as u64);
            if let Some(&end) = self.write_ends.front() {
                len = len.min(end - self.segmented_upto);
            }
            let offset = self.segmented_upto;
            self.segmented_upto += len;
            while self.write_ends.front().is_some_and(|&end| end <= self.segmented_upto) {
                self.write_ends.pop_front();
            }
            Segment::new(offset, len as u32, false)
        } else if self.fin_requested && self.fin_seq.is_none() {
            self.fin_seq = Some(seq);
            Segment::new(self.segmented_upto, 0, true)
        } else {
            return None;
        };
        self.segments.push_back(segment);
        Some(seq)
    }

    /// The next packet presumed lost, removed from the queue.
    pub fn pop_retransmission(&mut self) -> Option<u64> {
        while let Some(seq) = self.retransmit_queue.pop_front() {
            if self.state(seq) == Some(SegmentState::Lost) {
                return Some(seq);
            }
        }
        None
    }

    /// Copies the packet's payload into `out`; returns (length, is_fin).
    pub fn copy_payload(&self, seq: u64, out: &mut [u8]) -> (usize, bool) {
        let Some(seg) = seq.checked_sub(self.seg_base).and_then(|i| self.segments.get(i as usize)) else {
            return (0, false);
        };
        let start = (seg.offset - self.stream_base) as usize;
        let len = seg.len as usize;
        self.stream.copy_out(start, &mut out[..len]);
        (len, seg.fin)
    }

    /// Records a transmission of `seq`; returns true when it is a retransmission.
    /// The packet's [`SentPacket`] record starts with what the disassembler knows;
    /// the sender completes it in place ([`Disassembler::sent_packet_mut`]).
    pub fn on_transmit(&mut self, seq: u64, now: Instant) -> bool {
        let Some(index) = seq.checked_sub(self.seg_base) else { return false };
        let overhead = self.protection_overhead;
        let Some(seg) = self.segments.get_mut(index as usize) else { return false };
        let tx = self.next_tx;
        self.next_tx += 1;
        seg.transmissions += 1;
        seg.last_tx = tx;
        seg.last_sent = now;
        let bytes = seg.plain_bytes() + overhead;
        if seg.state != SegmentState::InFlight {
            seg.state = SegmentState::InFlight;
            self.bytes_in_flight += bytes;
        }
        seg.packet = SentPacket { seq, sent: now, bytes, retransmission: seg.transmissions > 1, ..SentPacket::default() };
        if self.track_tx_order {
            self.tx_order.push_back((tx, seq));
        }
        seg.transmissions > 1
    }

    /// The record of `seq`'s latest transmission.
    pub fn sent_packet(&self, seq: u64) -> Option<SentPacket> {
        let index = seq.checked_sub(self.seg_base)?;
        self.segments.get(index as usize).filter(|s| s.transmissions > 0).map(|s| s.packet)
    }

    /// The record of `seq`'s latest transmission, for the sender to add delivery and controller state.
    pub fn sent_packet_mut(&mut self, seq: u64) -> Option<&mut SentPacket> {
        let index = seq.checked_sub(self.seg_base)?;
        self.segments.get_mut(index as usize).filter(|s| s.transmissions > 0).map(|s| &mut s.packet)
    }

    /// Transmissions declared lost since the last call, in the order they were declared.
    pub fn drain_lost(&mut self) -> std::vec::Drain<'_, SentPacket> {
        self.newly_lost.drain(..)
    }

    // ---- acknowledgements ----

    /// Everything below `fence_base` is held by the peer. Calls `on_acked` for each newly acknowledged packet.
    /// `echoed_sent` is when the packet whose timestamp the ack echoes was sent (see `mark_acked`).
    pub fn ack_below(&mut self, fence_base: u64, echoed_sent: Option<Instant>, mut on_acked: impl FnMut(Acked)) {
        let end = fence_base.min(self.next_seq());
        for seq in self.seg_base..end {
            self.mark_acked(seq, echoed_sent, &mut on_acked);
        }
        if self.largest_acked_seq.is_some_and(|l| l < end) {
            self.largest_acked_seq = Some(end - 1);
        }
        self.release_acked_prefix();
        if self.holes.first().is_some_and(|&h| h < self.seg_base) {
            let base = self.seg_base;
            self.holes.retain(|&h| h >= base);
        }
    }

    /// The fence bitmap (bit `i`, byte `i / 8`, bit `i % 8` from the least significant:
    /// sequence `fence_base + 1 + i` is held). Calls `on_acked` for each newly acknowledged packet.
    pub fn ack_bitmap(&mut self, fence_base: u64, bitmap: &[u8], echoed_sent: Option<Instant>, mut on_acked: impl FnMut(Acked)) {
        let next = self.next_seq();
        let first = fence_base + 1;
        let end = (first + bitmap.len() as u64 * 8).min(next);
        let held = |seq: u64| {
            let i = (seq - first) as usize;
            bitmap[i / 8] & (1 << (i % 8)) != 0
        };
        // Holes the bitmap now covers.
        let mut holes = std::mem::take(&mut self.holes);
        // Every hole is a packet sent and not yet acknowledged, at or above `seg_base`: one
        // leaves the list when it is acknowledged here, and `ack_below` prunes those below
        // the fence. So only the bitmap is asked. (Each hole's state was looked up first,
        // for dozens of holes per ack while repairs were a round trip away: 2 % of a
        // simulated lossy transfer's instructions.)
        holes.retain(|&seq| {
            debug_assert!(seq >= self.seg_base && self.state(seq).is_some_and(|s| s != SegmentState::Acked), "hole {seq} acknowledged or released");
            if seq >= first && seq < end && held(seq) {
                self.mark_acked(seq, echoed_sent, &mut on_acked);
                return false;
            }
            true
        });
        self.holes = holes;
        // News above the largest acknowledged so far, a byte at a time.
        let mut seq = self.largest_acked_seq.map_or(first, |l| (l + 1).max(first));
        while seq < end {
            let i = (seq - first) as usize;
            if i % 8 == 0 && bitmap[i / 8] == 0 {
                seq += 8;
                continue;
            }
            if held(seq) {
                let below = self.largest_acked_seq.map_or(self.seg_base, |l| l + 1).max(self.seg_base);
                for gap in below..seq {
                    if self.state(gap).is_some_and(|s| s != SegmentState::Acked) {
                        self.holes.push(gap);
                    }
                }
                self.largest_acked_seq = Some(seq);
                self.mark_acked(seq, echoed_sent, &mut on_acked);
            }
            seq += 1;
        }
        self.release_acked_prefix();
    }

    /// Marks one packet held by the peer. The transmissions sent after it move loss
    /// detection's "largest acknowledged" only when the ack is known to reflect the
    /// latest transmission: a retransmitted packet acknowledged by an ack that echoes
    /// something older than the retransmission was held thanks to an earlier copy, and
    /// crediting the retransmission would declare everything sent before it lost.
    fn mark_acked(&mut self, seq: u64, echoed_sent: Option<Instant>, on_acked: &mut impl FnMut(Acked)) {
        let Some(index) = seq.checked_sub(self.seg_base) else { return };
        let Some(seg) = self.segments.get_mut(index as usize) else { return };
        // A packet never sent cannot be held by the peer; ignore such a claim.
        if seg.state == SegmentState::Acked || seg.transmissions == 0 {
            return;
        }
        let was_in_flight = seg.state == SegmentState::InFlight;
        let bytes = seg.packet.bytes;
        if was_in_flight {
            self.bytes_in_flight -= bytes;
        }
        seg.state = SegmentState::Acked;
        if seg.transmissions == 1 || echoed_sent.is_some_and(|e| e >= seg.last_sent) {
            self.largest_acked_tx = Some(self.largest_acked_tx.map_or(seg.last_tx, |l| l.max(seg.last_tx)));
        }
        on_acked(Acked {
            seq,
            sent: seg.last_sent,
            bytes,
            was_in_flight,
            transmissions: seg.transmissions,
            resent_after: seg.lost_by,
            packet: seg.packet,
        });
    }

    fn release_acked_prefix(&mut self) {
        while self.segments.front().is_some_and(|s| s.state == SegmentState::Acked) {
            self.segments.pop_front();
            self.seg_base += 1;
        }
        let keep_from = self.segments.front().map_or(self.segmented_upto, |s| s.offset);
        let release = (keep_from - self.stream_base) as usize;
        if release > 0 {
            self.stream.release_front(release);
            self.stream_base = keep_from;
        }
    }

    // ---- loss detection ----

    fn is_current(&self, tx: u64, seq: u64) -> bool {
        seq.checked_sub(self.seg_base)
            .and_then(|i| self.segments.get(i as usize))
            .is_some_and(|s| s.state == SegmentState::InFlight && s.last_tx == tx)
    }

    /// The peer echoed the timestamp of a packet we sent at `sent`: it holds that packet,
    /// whatever its kind.
    pub fn note_delivered(&mut self, sent: Instant) {
        self.latest_delivered_sent = Some(self.latest_delivered_sent.map_or(sent, |d| d.max(sent)));
    }

    /// RFC 9002 (6.1) applied to transmissions: a transmission is lost when one
    /// sent `reorder_threshold` transmissions later was acknowledged, or when it
    /// is older than `loss_delay` and something sent after it reached the peer: a data
    /// transmission acknowledged, or any packet whose timestamp the peer echoed (RFC 8985
    /// judges by send time in the same way). The latter matters at a tail: when every
    /// data packet after the oldest in flight was lost, only the answer to a keepalive
    /// shows them lost before the retransmission timeout, which a path that queued for
    /// seconds and then drained leaves seconds long (a relay fading to one packet in
    /// 250 ms for 3.5 s: smoothed RTT 469 ms, RTT variation 807 ms, a 3.7 s timeout).
    pub fn detect_losses(&mut self, now: Instant, reorder_threshold: u64, loss_delay: Duration) -> Losses {
        let mut losses = Losses::default();
        let (largest, delivered) = (self.largest_acked_tx, self.latest_delivered_sent);
        if largest.is_none() && delivered.is_none() {
            return losses;
        }
        while let Some(&(tx, seq)) = self.tx_order.front() {
            if !self.is_current(tx, seq) {
                self.tx_order.pop_front();
                continue;
            }
            let index = (seq - self.seg_base) as usize;
            let sent = self.segments[index].last_sent;
            // In sending order, so the first transmission not followed ends the search.
            let followed = largest.is_some_and(|l| tx < l) || delivered.is_some_and(|d| sent < d);
            if !followed {
                break;
            }
            let overtaken = largest.is_some_and(|l| tx < l && l - tx >= reorder_threshold);
            if overtaken || now >= sent + loss_delay {
                self.tx_order.pop_front();
                let bytes = self.declare_lost(index);
                self.segments[index].lost_by = if overtaken { LostBy::PacketThreshold { lost_sent: sent } } else { LostBy::TimeThreshold { lost_sent: sent } };
                losses.packets += 1;
                losses.bytes += bytes;
                losses.earliest_sent = Some(losses.earliest_sent.map_or(sent, |e: Instant| e.min(sent)));
            } else {
                losses.next_check = Some(sent + loss_delay);
                break;
            }
        }
        losses
    }

    fn declare_lost(&mut self, index: usize) -> u64 {
        let seg = &mut self.segments[index];
        seg.state = SegmentState::Lost;
        seg.lost_by = LostBy::Timeout;
        let bytes = seg.packet.bytes;
        self.newly_lost.push(seg.packet);
        self.bytes_in_flight -= bytes;
        self.retransmit_queue.push_back(self.seg_base + index as u64);
        bytes
    }

    /// Presumes one packet lost and puts it first in line (fast retransmit without a fence).
    pub fn mark_lost(&mut self, seq: u64) -> bool {
        let Some(index) = seq.checked_sub(self.seg_base) else { return false };
        if self.segments.get(index as usize).map(|s| s.state) != Some(SegmentState::InFlight) {
            return false;
        }
        self.declare_lost(index as usize);
        // declare_lost queued it at the back; a fast retransmit goes first.
        if let Some(s) = self.retransmit_queue.pop_back() {
            self.retransmit_queue.push_front(s);
        }
        true
    }

    /// Send time of the oldest transmission still in flight (drives the retransmission timer).
    pub fn oldest_in_flight(&mut self) -> Option<Instant> {
        while let Some(&(tx, seq)) = self.tx_order.front() {
            if self.is_current(tx, seq) {
                return Some(self.segments[(seq - self.seg_base) as usize].last_sent);
            }
            self.tx_order.pop_front();
        }
        None
    }

    /// The retransmission timer expired with a cumulative ack only (`window`): every
    /// packet in flight is presumed lost, to be resent lowest sequence number first
    /// (go-back-N). Returns how many.
    pub fn on_retransmission_timeout(&mut self) -> u64 {
        let mut count = 0;
        for index in 0..self.segments.len() {
            if self.segments[index].state == SegmentState::InFlight {
                self.declare_lost(index);
                count += 1;
            }
        }
        if count > 0 {
            // Lowest sequence first: the stream cannot advance past the first hole.
            let mut queue: Vec<u64> = self.retransmit_queue.drain(..).collect();
            queue.sort_unstable();
            queue.dedup();
            self.retransmit_queue.extend(queue);
        }
        self.tx_order.clear();
        count
    }

    /// The retransmission timer expired with a fence: only the oldest `probes`
    /// transmissions in flight are presumed lost and resent (RFC 9002 sends up to two
    /// probe packets). The fence that answers them shows exactly which of the others
    /// are missing, and loss detection takes it from there, instead of resending a
    /// window of packets that may have arrived.
    pub fn on_probe_timeout(&mut self, probes: u64) -> u64 {
        let mut declared = Vec::new();
        while let Some(&(tx, seq)) = self.tx_order.front() {
            if declared.len() as u64 == probes {
                break;
            }
            self.tx_order.pop_front();
            if self.is_current(tx, seq) {
                self.declare_lost((seq - self.seg_base) as usize);
                self.retransmit_queue.pop_back();
                declared.push(seq);
            }
        }
        // The probes go first, oldest first.
        for &seq in declared.iter().rev() {
            self.retransmit_queue.push_front(seq);
        }
        declared.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_all(d: &mut Disassembler, now: Instant, payload: usize) -> Vec<u64> {
        let mut sent = Vec::new();
        while let Some(seq) = d.new_segment(payload) {
            d.on_transmit(seq, now);
            sent.push(seq);
        }
        sent
    }

    #[test]
    fn shared_and_copied_writes_come_out_of_their_packets_in_stream_order() {
        let stream: Vec<u8> = (0..40_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let mut d = Disassembler::new(30_000, false, false);
        // Small shared (copied), large shared (kept), copied, and a shared write cut short by the capacity.
        assert_eq!(d.write_shared(&Bytes::copy_from_slice(&stream[..10])), 10);
        assert_eq!(d.write_shared(&Bytes::copy_from_slice(&stream[10..9_000])), 8_990);
        assert_eq!(d.write(&stream[9_000..9_100]), 100);
        assert_eq!(d.write_shared(&Bytes::copy_from_slice(&stream[9_100..])), 30_000 - 9_100);
        let mut got = Vec::new();
        let mut packet = [0u8; 1400];
        for seq in send_all(&mut d, Instant::ZERO, 1400) {
            let (len, _) = d.copy_payload(seq, &mut packet);
            got.extend_from_slice(&packet[..len]);
        }
        assert_eq!(got, stream[..30_000].to_vec());
    }

    #[test]
    fn segments_the_stream_and_respects_write_boundaries() {
        let mut d = Disassembler::new(1 << 16, true, false);
        assert_eq!(d.write(&[1; 300]), 300);
        assert_eq!(d.write(&[2; 10]), 10);
        let seqs = send_all(&mut d, Instant::ZERO, 256);
        assert_eq!(seqs, vec![0, 1, 2], "256 + 44 for the first write, 10 for the second");
        let mut out = [0u8; 256];
        assert_eq!(d.copy_payload(1, &mut out), (44, false));
        assert_eq!(d.copy_payload(2, &mut out), (10, false));
        assert_eq!(out[0], 2);

        let mut coalescing = Disassembler::new(1 << 16, false, false);
        coalescing.write(&[1; 300]);
        coalescing.write(&[2; 10]);
        assert_eq!(send_all(&mut coalescing, Instant::ZERO, 256).len(), 2, "256 + 54");
    }

    #[test]
    fn send_buffer_applies_backpressure_until_acked() {
        let mut d = Disassembler::new(1000, false, false);
        assert_eq!(d.write(&[0; 1500]), 1000);
        assert_eq!(d.write(&[0; 1]), 0);
        send_all(&mut d, Instant::ZERO, 500);
        d.ack_below(1, None, |_| {});
        assert_eq!(d.free_space(), 500, "acking the first packet frees its bytes");
        d.ack_bitmap(0, &[0b1], None, |_| {});
        assert_eq!(d.free_space(), 1000);
        assert!(!d.has_outstanding());
    }

    #[test]
    fn fence_acks_only_leave_holes() {
        let mut d = Disassembler::new(1 << 16, false, true);
        d.write(&[0; 1000]);
        send_all(&mut d, Instant::ZERO, 100); // seqs 0..=9
        let mut newly = Vec::new();
        // Fence base 2 (0 and 1 held), then 4, 5 and 9 held: offsets 1, 2, 6 from base 2.
        d.ack_below(2, None, |a| newly.push(a.seq));
        d.ack_bitmap(2, &[0b0100_0110], None, |a| newly.push(a.seq));
        assert_eq!(newly, vec![0, 1, 4, 5, 9]);
        assert_eq!(d.lowest_unacked(), 2);
        assert_eq!(d.bytes_in_flight(), 5 * (DATA_OVERHEAD as u64 + 100));
        // With a threshold of 3 transmissions behind 9: 2, 3 and 6 are lost; 7 and 8 may still be reordered.
        let losses = d.detect_losses(Instant::ZERO, 3, Duration::from_secs(1));
        assert_eq!(losses.packets, 3);
        assert_eq!(losses.next_check, Some(Instant::from_millis(1000)));
        assert_eq!(d.pop_retransmission(), Some(2));
        assert_eq!(d.pop_retransmission(), Some(3));
    }

    /// Nothing acknowledged, but the peer echoed a packet of another kind (a keepalive) sent
    /// after the flight: the flight is judged by the time threshold alone.
    #[test]
    fn an_echoed_later_packet_shows_the_flight_before_it_lost_by_time() {
        let mut d = Disassembler::new(1 << 16, false, true);
        d.write(&[0; 300]);
        send_all(&mut d, Instant::from_millis(1), 100); // seqs 0..=2, sent at 1 ms
        let delay = Duration::from_millis(20);
        assert_eq!(d.detect_losses(Instant::from_millis(100), 3, delay).packets, 0, "nothing sent later reached the peer");
        // A keepalive sent at 1 ms, with the flight, shows nothing: only what left after it counts.
        d.note_delivered(Instant::from_millis(1));
        assert_eq!(d.detect_losses(Instant::from_millis(100), 3, delay).packets, 0);
        d.note_delivered(Instant::from_millis(15));
        let early = d.detect_losses(Instant::from_millis(10), 3, delay);
        assert_eq!((early.packets, early.next_check), (0, Some(Instant::from_millis(21))), "too soon for the time threshold");
        let losses = d.detect_losses(Instant::from_millis(21), 3, delay);
        assert_eq!(losses.packets, 3);
        let order: Vec<u64> = std::iter::from_fn(|| d.pop_retransmission()).collect();
        assert_eq!(order, vec![0, 1, 2]);
    }

    #[test]
    fn timeout_requeues_everything_in_flight_in_order() {
        let mut d = Disassembler::new(1 << 16, false, true);
        d.write(&[0; 300]);
        send_all(&mut d, Instant::from_millis(1), 100);
        assert_eq!(d.oldest_in_flight(), Some(Instant::from_millis(1)));
        assert_eq!(d.on_retransmission_timeout(), 3);
        assert_eq!(d.bytes_in_flight(), 0);
        assert_eq!(d.oldest_in_flight(), None);
        let order: Vec<u64> = std::iter::from_fn(|| d.pop_retransmission()).collect();
        assert_eq!(order, vec![0, 1, 2]);
    }

    #[test]
    fn probe_timeout_resends_only_the_oldest() {
        let mut d = Disassembler::new(1 << 16, false, true);
        d.write(&[0; 300]);
        send_all(&mut d, Instant::from_millis(1), 100);
        assert_eq!(d.on_probe_timeout(2), 2);
        assert_eq!(d.pop_retransmission(), Some(0));
        assert_eq!(d.pop_retransmission(), Some(1));
        assert_eq!(d.pop_retransmission(), None);
        assert_eq!(d.bytes_in_flight(), DATA_OVERHEAD as u64 + 100);
        assert_eq!(d.oldest_in_flight(), Some(Instant::from_millis(1)), "2 is still in flight");
    }

    #[test]
    fn fin_follows_the_data_and_is_acked_like_it() {
        let mut d = Disassembler::new(1 << 16, false, false);
        d.write(b"abc");
        d.finish();
        assert_eq!(d.write(b"more"), 0, "nothing after finish");
        let seqs = send_all(&mut d, Instant::ZERO, 100);
        assert_eq!(seqs, vec![0, 1]);
        let mut out = [0u8; 8];
        assert_eq!(d.copy_payload(1, &mut out), (0, true));
        assert!(!d.fin_acked());
        d.ack_below(2, None, |_| {});
        assert!(d.fin_acked());
    }
}
