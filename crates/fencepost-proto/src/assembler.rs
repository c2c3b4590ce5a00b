//! The receive side: the `Assembler` puts packets back in order, exposes the
//! contiguous prefix of the stream to the reader, and describes what it holds
//! as a fence (the next missing sequence number plus a bitmap of what arrived after it).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes one held packet costs beyond its payload (its slot, its allocation's header):
/// counted so that tiny payloads cannot hold much more memory than they are charged for.
pub const SLOT_COST: usize = 64;

/// An endpoint-wide limit on received data held in memory, shared by its connections'
/// assemblers. A packet that would be held out of order is refused when the budget is
/// spent; the packet that fills a connection's first hole is always taken, so every
/// connection can still make progress (its reader then frees what it held).
#[derive(Debug)]
pub struct BufferBudget {
    limit: usize,
    used: AtomicUsize,
}

impl BufferBudget {
    pub fn new(limit: usize) -> Arc<BufferBudget> {
        Arc::new(BufferBudget { limit, used: AtomicUsize::new(0) })
    }
    pub fn limit(&self) -> usize {
        self.limit
    }
    /// Bytes held now by every connection sharing the budget.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
    pub(crate) fn try_take(&self, n: usize) -> bool {
        self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| (u + n <= self.limit).then_some(u + n)).is_ok()
    }
    fn take(&self, n: usize) {
        self.used.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn give(&self, n: usize) {
        let _ = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| Some(u.saturating_sub(n)));
    }
}

/// What became of one arriving packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// New, and it extended the contiguous prefix.
    InOrder,
    /// New, stored behind a hole.
    OutOfOrder,
    /// Already held (or already delivered): the peer resent it.
    Duplicate,
    /// Beyond the advertised window, or more than the receive buffer holds: dropped, the sender will resend.
    BeyondWindow,
    /// The endpoint's buffer budget is spent: dropped, the sender will resend.
    OverBudget,
    /// Contradicts the stream's end (data after the FIN, or two different FINs): dropped.
    Violation,
}

impl Arrival {
    pub fn is_new(self) -> bool {
        matches!(self, Arrival::InOrder | Arrival::OutOfOrder)
    }
}

#[derive(Debug)]
enum Slot {
    Missing,
    Data(Vec<u8>),
    Fin,
}

/// The stream's bytes delivered in order and not yet read, in the buffers they arrived
/// in: a packet held behind a hole joins it when the hole fills without being copied
/// again (under steady random loss nearly every packet is held, and the second copy,
/// through a ring that cycled over the whole backlog, was a tenth of a simulated lossy
/// transfer's time). Small payloads share a buffer, so memory stays near what is charged.
#[derive(Debug, Default)]
struct Delivered {
    /// In stream order; none is empty past `read`.
    chunks: VecDeque<Vec<u8>>,
    /// Bytes of the front chunk already read.
    read: usize,
    /// Bytes not yet read, over all chunks.
    len: usize,
}

#[derive(Debug)]
pub struct Assembler {
    /// Next sequence number the stream needs; everything below it was delivered to `readable`.
    fence_base: u64,
    /// `slots[i]` holds sequence `fence_base + i`; slot 0 is always missing (or absent).
    slots: VecDeque<Slot>,
    /// Packets held in `slots`.
    held: u64,
    /// The most payload buffers in use at once (held, or readable), which spares never
    /// outgrow (see `spare`).
    buffers_peak: usize,
    /// One bit per sequence number held out of order, word `i` covering sequence
    /// numbers `64 * (first_word + i) ..`: acks copy fences out of it a word at a time.
    held_bits: VecDeque<u64>,
    first_word: u64,
    readable: Delivered,
    fin_seq: Option<u64>,
    /// The FIN became contiguous: once `readable` drains, reads return end of stream.
    finished: bool,
    capacity: usize,
    /// What `capacity` may grow to (see [`Assembler::grow_for_holes`]).
    max_capacity: usize,
    max_payload: usize,
    /// Bytes held out of order, each packet charged its payload and [`SLOT_COST`].
    held_bytes: usize,
    budget: Option<Arc<BufferBudget>>,
    /// Emptied payload buffers kept for the next packets (held or delivered). Under steady
    /// random loss nearly every packet arrives behind a hole; a fresh allocation for each
    /// (and the heap trimmed and grown again as holes come and go) cost a simulated lossy
    /// transfer a tenth of its time. Spares and buffers in use never number more than the
    /// most in use at once, so spares hold no more memory than the receive buffer once
    /// held (as a ring's capacity stays at its largest), until `shrink_to_fit`.
    spare: Vec<Vec<u8>>,
    /// An endpoint's spares, lent for one call (see [`Assembler::swap_spares`]); empty,
    /// and not allocated, otherwise.
    lent: Vec<Vec<u8>>,
    /// While `lent` is lent, the bytes it and what the endpoint's budget counts may come to.
    lent_room: Option<usize>,
}

impl Assembler {
    pub fn new(capacity: usize, max_payload: usize) -> Self {
        Assembler {
            fence_base: 0,
            slots: VecDeque::new(),
            held: 0,
            buffers_peak: 0,
            held_bits: VecDeque::new(),
            first_word: 0,
            readable: Delivered::default(),
            fin_seq: None,
            finished: false,
            capacity,
            max_capacity: capacity,
            max_payload: max_payload.max(1),
            held_bytes: 0,
            budget: None,
            spare: Vec::new(),
            lent: Vec::new(),
            lent_room: None,
        }
    }

    /// Lets the buffer grow up to `max` bytes (see [`Assembler::grow_for_holes`]).
    pub fn allow_growth_to(&mut self, max: usize) {
        self.max_capacity = max.max(self.capacity);
    }

    /// Bytes of received data it may hold now, readable or out of order.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Doubles the buffer (up to its most) when packets held behind holes take more than
    /// half of it while the application keeps up with reading (an eighth of it readable
    /// at most), and says whether it grew. The window counts from the first hole, and a
    /// hole stands for a round trip or more before its repair arrives: on a path whose
    /// product is large, the packets the sender sends meanwhile fill the window and the
    /// window, not the path, sets the rate. Held bytes, not readable ones, ask for room:
    /// a slow reader's backlog is what the window is there to stop. (TCP's receive buffer
    /// auto-tuning grows by the rate the application reads; with holes the sender's need
    /// shows before anything is readable.) The endpoint's budget still bounds all
    /// connections together.
    pub fn grow_for_holes(&mut self) -> bool {
        let pressed = self.held_bytes > self.capacity / 2 && self.readable.len <= self.capacity / 8;
        if !pressed || self.capacity >= self.max_capacity {
            return false;
        }
        self.capacity = self.capacity.saturating_mul(2).min(self.max_capacity);
        true
    }

    /// Lends the assembler an endpoint's spare buffers (`room`: the bytes they and what
    /// the endpoint's budget counts may come to) for one call, a packet taken in or a
    /// read; the same call with `None` takes them back. While they are lent, packets go
    /// into them first and emptied buffers go back to them. Each connection keeping
    /// spares of its own copied a packet into the buffer it emptied last, which a hundred
    /// other connections' traffic had pushed out of the caches since; shared, the buffer
    /// some reader emptied last is the next one filled. The assembler's own spares stay
    /// as they were (a caller that reads without lending still finds them).
    pub fn swap_spares(&mut self, spares: &mut Vec<Vec<u8>>, room: Option<usize>) {
        std::mem::swap(&mut self.lent, spares);
        self.lent_room = room;
    }

    /// An emptied buffer for the next payload: a lent one first, else one of its own.
    fn take_spare(&mut self) -> Option<Vec<u8>> {
        self.lent.pop().or_else(|| self.spare.pop())
    }

    /// Charges what this assembler holds to an endpoint-wide budget from now on.
    pub fn set_budget(&mut self, budget: Arc<BufferBudget>) {
        budget.take(self.readable.len + self.held_bytes);
        if let Some(old) = self.budget.replace(budget) {
            old.give(self.readable.len + self.held_bytes);
        }
    }

    /// The endpoint-wide budget this assembler is charged to, if any.
    pub fn budget(&self) -> Option<&Arc<BufferBudget>> {
        self.budget.as_ref()
    }

    /// Bytes held in memory: readable, and out of order (with their slot cost).
    pub fn buffered_bytes(&self) -> usize {
        self.readable.len + self.held_bytes
    }

    pub fn fence_base(&self) -> u64 {
        self.fence_base
    }

    /// Packets the sender may send, counted from the fence base: whatever buffer
    /// space is left after the bytes still waiting to be read, each packet counted as
    /// one held behind a hole costs (its payload and [`SLOT_COST`]). Counted by payload
    /// alone, a window filled behind a hole overran the buffer: once far acks let a
    /// sender reach the window's edge, packets it was allowed to send were dropped
    /// for room (5 in 100 MB at 1 Gbit/s over 100 ms, 0.1 % loss).
    pub fn window(&self) -> u32 {
        let free = self.capacity.saturating_sub(self.readable.len);
        (free / (self.max_payload + SLOT_COST)).min(u32::MAX as usize) as u32
    }

    pub fn readable_len(&self) -> usize {
        self.readable.len
    }

    /// Memory kept allocated beyond what is held: spare payload buffers (about a payload
    /// each), and room the slots and queues grew to, which [`Assembler::shrink_to_fit`]
    /// gives back. Constant time: a connection asks after every event.
    pub fn retained_bytes(&self) -> usize {
        use crate::unused_room;
        self.spare.len() * self.max_payload
            + unused_room::<Slot>(self.slots.capacity(), self.slots.len())
            + unused_room::<u64>(self.held_bits.capacity(), self.held_bits.len())
            + unused_room::<Vec<u8>>(self.readable.chunks.capacity(), self.readable.chunks.len())
    }

    /// Gives back the memory beyond what is held now (for a connection that is done
    /// receiving but lingers to answer retransmissions).
    pub fn shrink_to_fit(&mut self) {
        self.readable.chunks.shrink_to_fit();
        self.slots.shrink_to_fit();
        self.spare = Vec::new();
        self.buffers_peak = self.buffers_in_use();
        self.held_bits.shrink_to_fit();
    }

    /// The peer's FIN arrived and everything before it too.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Highest sequence number held out of order, if any.
    pub fn highest_held(&self) -> Option<u64> {
        (self.held > 0).then(|| self.fence_base + self.slots.len() as u64 - 1)
    }

    pub fn has_holes(&self) -> bool {
        self.held > 0
    }

    pub fn insert(&mut self, seq: u64, payload: &[u8], fin: bool) -> Arrival {
        if let Some(end) = self.fin_seq {
            if seq > end || (fin && seq != end) {
                return Arrival::Violation;
            }
        }
        if seq < self.fence_base {
            return Arrival::Duplicate;
        }
        let offset = seq - self.fence_base;
        if offset >= self.window() as u64 {
            return Arrival::BeyondWindow;
        }
        let offset = offset as usize;
        if let Some(Slot::Data(_) | Slot::Fin) = self.slots.get(offset) {
            return Arrival::Duplicate;
        }
        if fin {
            // A FIN below data we already hold would truncate the stream under it.
            if self.highest_held().is_some_and(|h| h > seq) {
                return Arrival::Violation;
            }
            self.fin_seq = Some(seq);
        }
        if offset == 0 {
            // The common case: in order, straight to the reader without buffering a copy.
            if fin {
                self.finished = true;
            } else {
                // Charged before the copy: an atomic update waits for the stores before it to
                // drain, and after the copy it waited for the whole payload (the receiver's
                // costliest instruction on loopback).
                if let Some(b) = &self.budget {
                    b.take(payload.len());
                }
                self.deliver_copy(payload);
            }
            self.fence_base += 1;
            self.slots.pop_front();
            self.drain_contiguous();
            return Arrival::InOrder;
        }
        // Out-of-order data counts against the receive buffer byte for byte, and against the endpoint's budget.
        let cost = payload.len() + SLOT_COST;
        if self.readable.len + self.held_bytes + cost > self.capacity {
            return Arrival::BeyondWindow;
        }
        if self.budget.as_ref().is_some_and(|b| !b.try_take(cost)) {
            return Arrival::OverBudget;
        }
        self.held_bytes += cost;
        while self.slots.len() <= offset {
            self.slots.push_back(Slot::Missing);
        }
        self.slots[offset] = if fin {
            Slot::Fin
        } else {
            // A small payload gets a buffer of its own size: in one of full size, a peer
            // sending tiny packets behind a hole would hold far more memory than it is charged.
            let held = if payload.len() < self.max_payload / 2 {
                payload.to_vec()
            } else {
                let mut held = self.take_spare().unwrap_or_else(|| Vec::with_capacity(self.max_payload));
                held.extend_from_slice(payload);
                held
            };
            Slot::Data(held)
        };
        self.held += 1;
        self.note_buffers_in_use();
        self.set_held_bit(seq);
        Arrival::OutOfOrder
    }

    fn set_held_bit(&mut self, seq: u64) {
        let word = seq / 64;
        if self.held_bits.is_empty() {
            self.first_word = word;
        }
        while word < self.first_word {
            self.held_bits.push_front(0);
            self.first_word -= 1;
        }
        let index = (word - self.first_word) as usize;
        if index >= self.held_bits.len() {
            self.held_bits.resize(index + 1, 0);
        }
        self.held_bits[index] |= 1 << (seq % 64);
    }

    /// Sequence numbers `start .. start + 64` held out of order, as one word.
    fn held_word(&self, start: u64) -> u64 {
        let word = |w: u64| -> u64 {
            w.checked_sub(self.first_word).and_then(|i| self.held_bits.get(i as usize)).copied().unwrap_or(0)
        };
        let shift = start % 64;
        let low = word(start / 64) >> shift;
        if shift == 0 { low } else { low | (word(start / 64 + 1) << (64 - shift)) }
    }

    fn drain_contiguous(&mut self) {
        // Slot costs freed by this drain, given back to the budget in one update: a repair
        // under steady loss drains hundreds of packets, and one atomic update each was a
        // twentieth of a simulated lossy transfer.
        let mut freed = 0;
        while let Some(front) = self.slots.front() {
            match front {
                Slot::Missing => break,
                Slot::Data(_) => {
                    if let Some(Slot::Data(bytes)) = self.slots.pop_front() {
                        // The payload stays charged, now as readable; the slot's cost is freed.
                        self.held_bytes -= bytes.len() + SLOT_COST;
                        freed += SLOT_COST;
                        self.deliver_owned(bytes);
                    }
                }
                Slot::Fin => {
                    self.slots.pop_front();
                    self.finished = true;
                    self.held_bytes -= SLOT_COST;
                    freed += SLOT_COST;
                }
            }
            self.held -= 1;
            self.fence_base += 1;
        }
        if let Some(b) = self.budget.as_ref().filter(|_| freed > 0) {
            b.give(freed);
        }
        // Words wholly below the fence base are history.
        while !self.held_bits.is_empty() && (self.first_word + 1) * 64 <= self.fence_base {
            self.held_bits.pop_front();
            self.first_word += 1;
        }
        if self.held == 0 {
            self.held_bits.clear();
        }
    }

    /// Appends an in-order payload to the readable bytes: into the last buffer if it has
    /// room, else into a buffer of its own.
    fn deliver_copy(&mut self, payload: &[u8]) {
        if payload.is_empty() {
            return;
        }
        self.readable.len += payload.len();
        if self.room_in_last(payload.len()) {
            if let Some(last) = self.readable.chunks.back_mut() {
                last.extend_from_slice(payload);
            }
            return;
        }
        let mut chunk = self.take_spare().unwrap_or_else(|| Vec::with_capacity(self.max_payload.max(payload.len())));
        chunk.extend_from_slice(payload);
        self.readable.chunks.push_back(chunk);
        self.note_buffers_in_use();
    }

    fn buffers_in_use(&self) -> usize {
        self.held as usize + self.readable.chunks.len()
    }

    fn note_buffers_in_use(&mut self) {
        self.buffers_peak = self.buffers_peak.max(self.buffers_in_use());
    }

    /// Appends a payload that was held out of order, keeping its buffer (copied only when
    /// it is small enough to share the last one, or was held in a small buffer of its own:
    /// a run of those kept as they are would cost a buffer's overhead per tiny payload).
    fn deliver_owned(&mut self, bytes: Vec<u8>) {
        if bytes.is_empty() || bytes.capacity() < self.max_payload || self.room_in_last(bytes.len()) {
            self.deliver_copy(&bytes);
            self.recycle(bytes);
            return;
        }
        // Moved from held to readable: no more buffers in use than before.
        self.readable.len += bytes.len();
        self.readable.chunks.push_back(bytes);
    }

    /// Whether the last readable buffer has room for `len` more bytes.
    fn room_in_last(&self, len: usize) -> bool {
        self.readable.chunks.back().is_some_and(|last| last.capacity() - last.len() >= len)
    }

    /// Keeps an emptied buffer for the next payloads while spares and buffers in use number
    /// fewer than the most in use at once: a receiver's next round of packets needs about
    /// as many as its last (a fast reader hands back some 50 per 64 KiB read, and with
    /// fewer kept each read freed buffers that the next packets allocated again, a fifth
    /// of the loopback rate).
    fn recycle(&mut self, mut bytes: Vec<u8>) {
        // Only full-sized buffers: a small one would be grown again by the next payload.
        if bytes.capacity() < self.max_payload {
            return;
        }
        bytes.clear();
        match self.lent_room {
            // The endpoint's connections together, as one assembler alone below: spares and
            // what is held stay within the most held at once (and a floor).
            Some(limit) => {
                if (self.lent.len() + 1) * self.max_payload + self.budget.as_ref().map_or(0, |b| b.used()) <= limit {
                    self.lent.push(bytes);
                }
            }
            None => {
                if self.spare.len() + self.buffers_in_use() < self.buffers_peak {
                    self.spare.push(bytes);
                }
            }
        }
    }

    /// Copies readable bytes into `buf`; returns how many.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let mut filled = 0;
        self.read_with(buf.len(), |piece| {
            buf[filled..filled + piece.len()].copy_from_slice(piece);
            filled += piece.len();
        })
    }

    /// Hands up to `max` readable bytes to `consume` where they lie (in order, as one
    /// slice per buffer they arrived in, none empty), then lets them go; returns how many.
    pub fn read_with(&mut self, max: usize, mut consume: impl FnMut(&[u8])) -> usize {
        let n = max.min(self.readable.len);
        let mut left = n;
        while left > 0 {
            let Some(front) = self.readable.chunks.front() else {
                debug_assert!(false, "the readable count ran past its buffers");
                break;
            };
            let piece = &front[self.readable.read..];
            let take = piece.len().min(left);
            consume(&piece[..take]);
            left -= take;
            if take == piece.len() {
                self.readable.read = 0;
                if let Some(done) = self.readable.chunks.pop_front() {
                    self.recycle(done);
                }
            } else {
                self.readable.read += take;
            }
        }
        self.readable.len -= n;
        if let Some(b) = &self.budget {
            b.give(n);
        }
        n
    }

    /// Writes the fence beyond an ack's bitmap (bit `i` = sequence `start + i` held) into
    /// `out`: up to the highest packet held, at most `max_bits` wide; empty when nothing
    /// is held from `start` on.
    pub fn far_bitmap(&self, start: u64, max_bits: u32, out: &mut Vec<u8>) {
        out.clear();
        let Some(highest) = self.highest_held().filter(|&h| h >= start && start > self.fence_base) else { return };
        let bits = (highest - start + 1).min(u64::from(max_bits)) as usize;
        self.write_held_bits(start, bits, out);
    }

    /// Writes the fence bitmap (bit `i` = sequence `fence_base + 1 + i` held) into
    /// `out`: exactly `exact_bits` wide if given, else just wide enough for the
    /// highest held packet, capped at `max_bits`.
    pub fn fence_bitmap(&self, exact_bits: Option<u32>, max_bits: u32, out: &mut Vec<u8>) {
        let needed_bits = match exact_bits {
            Some(bits) => bits as usize,
            None => self.slots.len().saturating_sub(1).min(max_bits as usize),
        };
        self.write_held_bits(self.fence_base + 1, needed_bits, out);
    }

    /// Replaces `out` with `bits` bits, bit `i` set when sequence `first + i` is held out
    /// of order; bits past `bits` in the last byte stay clear (they read as not arrived).
    fn write_held_bits(&self, first: u64, bits: usize, out: &mut Vec<u8>) {
        out.clear();
        out.resize(bits.div_ceil(8), 0);
        if self.held == 0 {
            return;
        }
        // Whole words as whole words: a slice of a length known only at run time is copied
        // by a call to `memcpy`, once per word of every ack.
        let whole = out.len() / 8;
        let mut chunks = out.chunks_exact_mut(8);
        for (k, chunk) in (&mut chunks).enumerate() {
            chunk.copy_from_slice(&self.held_word(first + 64 * k as u64).to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let word = self.held_word(first + 64 * whole as u64).to_le_bytes();
            rest.copy_from_slice(&word[..rest.len()]);
        }
        if bits % 8 != 0 {
            if let Some(last) = out.last_mut() {
                *last &= (1u8 << (bits % 8)) - 1;
            }
        }
    }
}

impl Drop for Assembler {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.give(self.readable.len + self.held_bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bitmap(a: &Assembler, exact: Option<u32>) -> Vec<u8> {
        let mut out = Vec::new();
        a.fence_bitmap(exact, 1024, &mut out);
        out
    }

    /// The readable bytes lie in the buffers their packets arrived in: `read_with` hands
    /// them out in stream order, a slice per buffer, across partial reads, whether each
    /// packet came in order or was held behind a hole; `read` (built on it) copies them all.
    #[test]
    fn read_with_hands_out_the_stream_in_order_across_buffers() {
        let mut a = Assembler::new(1 << 20, 100);
        let stream: Vec<u8> = (0..=255u8).cycle().take(20_000).collect();
        // Packets of 100 bytes, then of 7 (small ones share a buffer), in rounds of 8 where
        // every third packet arrives last (its successors are held until it does).
        let mut packets = Vec::new();
        let mut at = 0;
        while at < stream.len() {
            let len = if at < 10_000 { 100 } else { 7 };
            let end = (at + len).min(stream.len());
            packets.push(at..end);
            at = end;
        }
        let mut got = Vec::new();
        let mut most_pieces = 0;
        for (round, seqs) in (0..packets.len()).collect::<Vec<_>>().chunks(8).enumerate() {
            let late: Vec<usize> = seqs.iter().copied().filter(|s| s % 3 == 0).collect();
            for &seq in seqs.iter().filter(|s| *s % 3 != 0).chain(&late) {
                assert!(a.insert(seq as u64, &stream[packets[seq].clone()], false).is_new());
            }
            let before = a.readable_len();
            let mut pieces = 0;
            let max = [250, 1, usize::MAX][round % 3];
            let n = a.read_with(max, |piece| {
                assert!(!piece.is_empty());
                got.extend_from_slice(piece);
                pieces += 1;
            });
            assert_eq!(n, max.min(before));
            assert_eq!(a.readable_len(), before - n);
            most_pieces = most_pieces.max(pieces);
        }
        let mut rest = vec![0; 30_000];
        let n = a.read(&mut rest);
        got.extend_from_slice(&rest[..n]);
        assert_eq!(got, stream);
        assert!(most_pieces > 2, "a read spanned {most_pieces} buffers at most: the test does not cross buffers");
        assert_eq!(a.buffered_bytes(), 0);
    }

    /// Tiny packets held behind a hole take buffers of their own size, not full-sized
    /// ones: the memory they hold stays within what they are charged.
    #[test]
    fn tiny_held_payloads_hold_no_more_memory_than_charged() {
        let mut a = Assembler::new(1 << 20, 1400);
        for seq in 1..=500u64 {
            assert_eq!(a.insert(seq, &[7u8; 3], false), Arrival::OutOfOrder);
        }
        let memory: usize = a.slots.iter().map(|slot| if let Slot::Data(bytes) = slot { bytes.capacity() } else { 0 }).sum();
        assert!(memory <= 500 * 3 * 2, "{memory} bytes of buffers for 1,500 bytes held");
        assert_eq!(a.buffered_bytes(), 500 * (3 + SLOT_COST));
        assert_eq!(a.insert(0, &[7u8; 3], false), Arrival::InOrder);
        assert!(a.readable.chunks.len() <= 2, "{} buffers for 1,503 readable bytes", a.readable.chunks.len());
        let mut all = vec![0; 10_000];
        assert_eq!(a.read(&mut all), 1503);
        assert!(all[..1503].iter().all(|&b| b == 7));
        assert!(a.spare.iter().all(|b| b.capacity() >= 1400), "small buffers are not kept as spares");
    }

    /// Small in-order payloads share a buffer instead of taking one each, so a backlog of
    /// tiny packets holds little more memory than its bytes.
    #[test]
    fn small_payloads_share_a_buffer() {
        let mut a = Assembler::new(1 << 20, 1000);
        for seq in 0..1000u64 {
            assert_eq!(a.insert(seq, &[seq as u8; 10], false), Arrival::InOrder);
        }
        assert_eq!(a.readable_len(), 10_000);
        assert!(a.readable.chunks.len() <= 11, "{} buffers for 10,000 bytes", a.readable.chunks.len());
        let mut all = vec![0; 10_000];
        assert_eq!(a.read(&mut all), 10_000);
        assert!(all.chunks(10).enumerate().all(|(i, c)| c.iter().all(|&b| b == i as u8)));
    }

    #[test]
    fn reorders_and_builds_the_fence() {
        let mut a = Assembler::new(1 << 20, 100);
        assert_eq!(a.insert(0, b"aa", false), Arrival::InOrder);
        // 1 is lost; 2, 3 and 5 arrive.
        assert_eq!(a.insert(2, b"cc", false), Arrival::OutOfOrder);
        assert_eq!(a.insert(3, b"dd", false), Arrival::OutOfOrder);
        assert_eq!(a.insert(5, b"ff", false), Arrival::OutOfOrder);
        assert_eq!(a.insert(3, b"dd", false), Arrival::Duplicate);
        assert_eq!(a.fence_base(), 1);
        // Bits for 2, 3, 5 are offsets 0, 1, 3.
        assert_eq!(bitmap(&a, None), vec![0b1011]);
        assert_eq!(bitmap(&a, Some(32)), vec![0b1011, 0, 0, 0]);
        let mut buf = [0u8; 16];
        assert_eq!(a.read(&mut buf), 2);
        assert_eq!(&buf[..2], b"aa");
        assert_eq!(a.insert(1, b"bb", false), Arrival::InOrder);
        assert_eq!(a.fence_base(), 4, "1, 2 and 3 became contiguous");
        assert_eq!(bitmap(&a, None), vec![0b1]);
        assert_eq!(a.read(&mut buf), 6);
        assert_eq!(&buf[..6], b"bbccdd");
        assert_eq!(a.insert(0, b"aa", false), Arrival::Duplicate);
    }

    #[test]
    fn held_buffers_go_to_the_reader_uncopied_and_come_back_for_the_next_packets() {
        let mut a = Assembler::new(1 << 20, 100);
        let payload = |seq: u64| vec![seq as u8; 100];
        // Holes at 0 and 5; 1-4 and 6-9 held.
        for seq in (1..5).chain(6..10) {
            assert_eq!(a.insert(seq, &payload(seq), false), Arrival::OutOfOrder);
        }
        let held_at: Vec<*const u8> = (1..5).map(|i| match &a.slots[i] {
            Slot::Data(bytes) => bytes.as_ptr(),
            other => panic!("slot {i}: {other:?}"),
        }).collect();
        assert!(a.spare.is_empty());
        assert_eq!(a.insert(0, &payload(0), false), Arrival::InOrder);
        // 1-4 went to the reader in their own buffers, not copied.
        let readable_at: Vec<*const u8> = a.readable.chunks.iter().skip(1).map(|c| c.as_ptr()).collect();
        assert_eq!(readable_at, held_at);
        let mut got = vec![0; 2000];
        assert_eq!(a.read(&mut got), 500);
        // Read, their buffers wait for the next packets.
        assert_eq!(a.spare.len(), 5);
        assert_eq!(a.insert(11, &payload(11), false), Arrival::OutOfOrder);
        assert_eq!(a.spare.len(), 4, "a held packet takes a spare rather than a new buffer");
        assert_eq!(a.insert(5, &payload(5), false), Arrival::InOrder);
        assert_eq!(a.insert(10, &payload(10), false), Arrival::InOrder);
        assert!(!a.has_holes());
        let n = a.read(&mut got);
        let want: Vec<u8> = (5..12).flat_map(payload).collect();
        assert_eq!(&got[..n], &want[..], "a reused buffer carries only its own packet's bytes");
        // 200 held at once: once read, their buffers wait for the next round; spares and
        // buffers in use never outnumber the most in use at once.
        for seq in 13..213 {
            assert_eq!(a.insert(seq, &payload(seq), false), Arrival::OutOfOrder);
        }
        assert_eq!(a.insert(12, &payload(12), false), Arrival::InOrder);
        assert_eq!(a.buffers_peak, 201);
        let mut all = vec![0; 100 * 201];
        assert_eq!(a.read(&mut all), all.len());
        assert_eq!(a.spare.len(), 201);
        for seq in 213..413 {
            a.insert(seq, &payload(seq), false);
            assert!(a.spare.len() + a.buffers_in_use() <= 201);
            if seq % 7 == 0 {
                a.read(&mut all);
            }
        }
        assert_eq!(a.buffers_peak, 201, "a round no larger than the last takes no new buffers");
        // Lingering, it lets them go.
        a.read(&mut all);
        a.shrink_to_fit();
        assert!(a.spare.is_empty());
        assert_eq!(a.insert(413, &payload(413), false), Arrival::InOrder);
        a.read(&mut all);
        assert_eq!(a.spare.len(), 1, "after shrinking, spares count from what is used again");
    }

    #[test]
    fn fin_ends_the_stream_once_contiguous() {
        let mut a = Assembler::new(1 << 20, 100);
        assert_eq!(a.insert(1, b"", true), Arrival::OutOfOrder);
        assert!(!a.is_finished());
        assert_eq!(a.insert(2, b"late", false), Arrival::Violation, "data after the FIN");
        assert_eq!(a.insert(0, b"x", false), Arrival::InOrder);
        assert!(a.is_finished());
        assert_eq!(a.fence_base(), 2);
        let mut b = Assembler::new(1 << 20, 100);
        b.insert(4, b"d", false);
        assert_eq!(b.insert(2, b"", true), Arrival::Violation, "a FIN below held data");
    }

    #[test]
    fn lent_spares_grow_only_within_their_room_and_its_own_stay_apart() {
        let budget = BufferBudget::new(1 << 20);
        let mut a = Assembler::new(1 << 16, 100);
        a.set_budget(budget.clone());
        let mut shared = Vec::new();
        for seq in 0..5 {
            a.swap_spares(&mut shared, Some(usize::MAX));
            assert_eq!(a.insert(seq, &[seq as u8; 100], false), Arrival::InOrder);
            a.swap_spares(&mut shared, None);
        }
        assert_eq!(budget.used(), 500);
        // While it reads, the budget still counts the 500 bytes being read: room for 3 more.
        a.swap_spares(&mut shared, Some(500 + 3 * 100));
        assert_eq!(a.read_with(usize::MAX, |_| {}), 500);
        a.swap_spares(&mut shared, None);
        assert_eq!(shared.len(), 3, "kept up to the room, the rest let go");
        assert!(a.spare.is_empty() && a.lent.is_empty(), "the assembler's own spares are not the lent ones");
        assert_eq!(budget.used(), 0);
        // The next packet, lent the spares, fills the buffer freed last.
        let last_freed = shared.last().unwrap().as_ptr();
        a.swap_spares(&mut shared, Some(usize::MAX));
        assert_eq!(a.insert(5, &[5; 100], false), Arrival::InOrder);
        a.swap_spares(&mut shared, None);
        assert_eq!(shared.len(), 2);
        assert_eq!(a.readable.chunks.back().unwrap().as_ptr(), last_freed);
        // Not lent, the assembler keeps its own, as before.
        assert_eq!(a.read_with(usize::MAX, |_| {}), 100);
        assert_eq!((a.spare.len(), shared.len()), (1, 2));
        // Lent an empty stack, it falls back on its own spares.
        let own = a.spare.last().unwrap().as_ptr();
        let mut empty = Vec::new();
        a.swap_spares(&mut empty, Some(usize::MAX));
        assert_eq!(a.insert(6, &[6; 100], false), Arrival::InOrder);
        a.swap_spares(&mut empty, None);
        assert_eq!(a.readable.chunks.back().unwrap().as_ptr(), own);
        assert!(a.spare.is_empty() && empty.is_empty());
    }

    #[test]
    fn a_shared_budget_refuses_held_data_but_never_the_first_hole() {
        let budget = BufferBudget::new(3 * (10 + SLOT_COST));
        let mut a = Assembler::new(1 << 20, 10);
        let mut b = Assembler::new(1 << 20, 10);
        a.set_budget(budget.clone());
        b.set_budget(budget.clone());
        assert_eq!(a.insert(1, &[1; 10], false), Arrival::OutOfOrder);
        assert_eq!(b.insert(1, &[1; 10], false), Arrival::OutOfOrder);
        assert_eq!(b.insert(2, &[1; 10], false), Arrival::OutOfOrder);
        assert_eq!(a.insert(2, &[1; 10], false), Arrival::OverBudget, "the budget is spent");
        assert_eq!(budget.used(), 3 * (10 + SLOT_COST));
        // The first hole is always taken: everything held becomes readable.
        assert_eq!(a.insert(0, &[0; 10], false), Arrival::InOrder);
        assert_eq!(budget.used(), 3 * (10 + SLOT_COST) + 10 - SLOT_COST);
        let mut buf = [0u8; 64];
        assert_eq!(a.read(&mut buf), 20);
        assert_eq!(budget.used(), 2 * (10 + SLOT_COST));
        drop(b);
        assert_eq!(budget.used(), 0, "a connection that goes gives back what it held");
    }

    #[test]
    fn tiny_packets_are_charged_their_slots() {
        let mut a = Assembler::new(10 * SLOT_COST, 1000);
        let mut taken = 0;
        for seq in 1..1000 {
            if a.insert(seq, &[7], false) == Arrival::OutOfOrder {
                taken += 1;
            }
        }
        assert!(taken < 10, "{taken} one-byte packets held in a buffer of 10 slots' cost");
        assert!(a.buffered_bytes() <= 10 * SLOT_COST);
    }

    #[test]
    fn window_bounds_the_buffer() {
        // Room for 4 packets of 10 bytes, each charged as held behind a hole.
        let mut a = Assembler::new(4 * (10 + SLOT_COST), 10);
        assert_eq!(a.window(), 4);
        assert_eq!(a.insert(4, &[0; 10], false), Arrival::BeyondWindow);
        // The window's worth behind a hole all fits.
        for seq in 1..4 {
            assert_eq!(a.insert(seq, &[0; 10], false), Arrival::OutOfOrder);
        }
        assert_eq!(a.insert(0, &[0; 10], false), Arrival::InOrder);
        assert_eq!(a.window(), 3, "40 unread bytes leave room for three more packets held");
        let mut buf = [0u8; 64];
        a.read(&mut buf);
        assert_eq!(a.window(), 4);
    }

    /// The buffer doubles, up to its most, while packets held behind a hole take more than
    /// half of it and little is waiting to be read; never for a reader that lags, and not
    /// at all unless growth was allowed.
    #[test]
    fn grows_for_holes_only_while_the_reader_keeps_up() {
        let payload = [7u8; 100];
        let per_packet = 100 + SLOT_COST;
        let capacity = 40 * per_packet;
        // Seq 0 is the hole; 1..=20 held behind it fill exactly half: not yet.
        let mut a = Assembler::new(capacity, 100);
        a.allow_growth_to(4 * capacity);
        for seq in 1..=20 {
            assert_eq!(a.insert(seq, &payload, false), Arrival::OutOfOrder);
        }
        assert!(!a.grow_for_holes(), "half the buffer held is not more than half");
        assert_eq!(a.insert(21, &payload, false), Arrival::OutOfOrder);
        assert!(a.grow_for_holes());
        assert_eq!(a.capacity(), 2 * capacity);
        // The window follows: the sender may now go twice as far past the hole.
        assert_eq!(a.window() as usize, 2 * capacity / per_packet);
        for seq in 22..=41 {
            assert_eq!(a.insert(seq, &payload, false), Arrival::OutOfOrder);
        }
        assert!(a.grow_for_holes());
        assert_eq!(a.capacity(), 4 * capacity, "doubled again");
        for seq in 42..=85 {
            assert_eq!(a.insert(seq, &payload, false), Arrival::OutOfOrder);
        }
        assert!(!a.grow_for_holes(), "at its most");
        assert_eq!(a.capacity(), 4 * capacity);

        // The same holes behind a backlog the application has not read: no growth.
        let mut lagging = Assembler::new(capacity, 100);
        lagging.allow_growth_to(4 * capacity);
        for seq in 0..10 {
            assert_eq!(lagging.insert(seq, &payload, false), Arrival::InOrder);
        }
        for seq in 11..=31 {
            assert_eq!(lagging.insert(seq, &payload, false), Arrival::OutOfOrder);
        }
        assert!(lagging.readable_len() > capacity / 8);
        assert!(!lagging.grow_for_holes(), "a slow reader's backlog asks for no room");
        let mut buf = vec![0u8; 1000];
        assert_eq!(lagging.read(&mut buf), 1000);
        assert!(lagging.grow_for_holes(), "once it has read, the holes do");

        // Growth not allowed (the seed profile's fixed buffer).
        let mut fixed = Assembler::new(capacity, 100);
        for seq in 1..=30 {
            fixed.insert(seq, &payload, false);
        }
        assert!(!fixed.grow_for_holes());
        assert_eq!(fixed.capacity(), capacity);
    }
}
