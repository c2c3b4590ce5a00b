//! The bytes a sender holds: written and not yet acknowledged, in stream order.
//!
//! A byte ring would copy every write. Here the buffer is a queue of pieces: bytes the
//! application hands over as shared [`Bytes`] are kept as they are (no copy: sending a
//! gigabyte from a buffer the application already has costs one copy into each packet,
//! not two), bytes written from a borrowed slice are copied into blocks of
//! [`BLOCK`] bytes, and bytes a [`ByteSource`] makes on demand are not held at all (they
//! are made into each packet). Packets are cut from any byte range, across pieces, and the
//! front is released as the peer acknowledges it.

use bytes::Bytes;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// Bytes made on demand rather than held: a synthetic stream (a load generator's, the
/// simulator's bulk workload) whose byte at each offset can be computed again whenever a
/// packet, first sent or resent, needs it. Written with [`crate::Connection::write_generated`],
/// such bytes cost the sender no buffer memory and one pass each into their packets, where
/// written bytes cost a pass to make, a copy in and a copy out.
pub trait ByteSource: Send + Sync {
    /// Writes the source's bytes from `offset` (the source's own numbering) into `out`;
    /// the same bytes every time for the same offsets.
    fn fill(&self, offset: u64, out: &mut [u8]);
}

/// Size of the blocks copied writes fill: large enough that a packet rarely spans two,
/// small enough that an acknowledged block is given back soon.
pub const BLOCK: usize = 64 * 1024;

/// Spent blocks kept for the next copied writes instead of freeing and allocating again
/// (at most 2 MB a connection, given back on close). With 4, freeing and allocating blocks
/// made the simulator's 100 MB bulk run about 6 % slower than the byte ring this replaced;
/// with 32 it runs as fast.
const SPARE_BLOCKS: usize = 32;

enum Data {
    /// Copied in by `extend_from_slice`; may still grow at the back.
    Block(Vec<u8>),
    /// Handed over by `push_shared`.
    Shared(Bytes),
    /// `len` bytes of `source` from its offset `from`, added by `push_generated`.
    Generated { source: Arc<dyn ByteSource>, from: u64, len: usize },
}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Data::Block(v) => write!(f, "Block({} bytes)", v.len()),
            Data::Shared(b) => write!(f, "Shared({} bytes)", b.len()),
            Data::Generated { from, len, .. } => write!(f, "Generated({len} bytes from {from})"),
        }
    }
}

#[derive(Debug)]
struct Piece {
    /// Offset of `data`'s first byte from the start of everything ever pushed.
    at: u64,
    data: Data,
}

impl Piece {
    fn len(&self) -> usize {
        match &self.data {
            Data::Block(v) => v.len(),
            Data::Shared(b) => b.len(),
            Data::Generated { len, .. } => *len,
        }
    }

    /// Writes the piece's bytes from `within` into `out` (which they fill).
    fn copy_into(&self, within: usize, out: &mut [u8]) {
        match &self.data {
            Data::Block(v) => out.copy_from_slice(&v[within..within + out.len()]),
            Data::Shared(b) => out.copy_from_slice(&b[within..within + out.len()]),
            // Wrapping: the offsets are the source's own numbering, which may start anywhere.
            Data::Generated { source, from, .. } => source.fill(from.wrapping_add(within as u64), out),
        }
    }
}

#[derive(Debug, Default)]
pub struct SendBuffer {
    pieces: VecDeque<Piece>,
    /// Released bytes at the front of the first piece (its memory goes when all of it does).
    front_skip: usize,
    /// Offset (from the start of everything ever pushed) of the first byte held.
    start: u64,
    len: usize,
    spare: Vec<Vec<u8>>,
}

impl SendBuffer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends a copy of `data`.
    pub fn extend_from_slice(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let end = self.start + self.len as u64;
            let room = match self.pieces.back_mut() {
                Some(Piece { data: Data::Block(v), .. }) if v.len() < v.capacity() => v,
                _ => {
                    let block = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(BLOCK));
                    self.pieces.push_back(Piece { at: end, data: Data::Block(block) });
                    match self.pieces.back_mut() {
                        Some(Piece { data: Data::Block(v), .. }) => v,
                        _ => unreachable!("a block was just pushed"),
                    }
                }
            };
            let n = data.len().min(room.capacity() - room.len());
            room.extend_from_slice(&data[..n]);
            self.len += n;
            data = &data[n..];
        }
    }

    /// Appends `data` without copying it.
    pub fn push_shared(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        let at = self.start + self.len as u64;
        self.len += data.len();
        self.pieces.push_back(Piece { at, data: Data::Shared(data) });
    }

    /// Appends `len` bytes of `source` from its offset `from`, made when a packet needs them.
    /// Continues the last piece when it is the same source's bytes just before these.
    pub fn push_generated(&mut self, source: &Arc<dyn ByteSource>, from: u64, len: usize) {
        if len == 0 {
            return;
        }
        self.len += len;
        if let Some(Piece { data: Data::Generated { source: last, from: last_from, len: last_len }, .. }) = self.pieces.back_mut() {
            if Arc::ptr_eq(last, source) && last_from.checked_add(*last_len as u64) == Some(from) {
                *last_len += len;
                return;
            }
        }
        let at = self.start + (self.len - len) as u64;
        self.pieces.push_back(Piece { at, data: Data::Generated { source: source.clone(), from, len } });
    }

    /// Copies the `out.len()` bytes that start `from` bytes after the first held byte into `out`.
    /// Panics if they are not all held (the caller cuts packets from what it wrote).
    pub fn copy_out(&self, from: usize, out: &mut [u8]) {
        assert!(from + out.len() <= self.len, "copy_out past the held bytes");
        if out.is_empty() {
            return;
        }
        let mut pos = self.start + from as u64;
        // The last piece that starts at or before `pos`.
        let mut i = self.pieces.partition_point(|p| p.at <= pos) - 1;
        let mut filled = 0;
        while filled < out.len() {
            let piece = &self.pieces[i];
            let within = (pos - piece.at) as usize;
            let n = (out.len() - filled).min(piece.len() - within);
            piece.copy_into(within, &mut out[filled..filled + n]);
            filled += n;
            pos += n as u64;
            i += 1;
        }
    }

    /// Gives up the first `n` held bytes.
    pub fn release_front(&mut self, n: usize) {
        assert!(n <= self.len, "release past the held bytes");
        self.start += n as u64;
        self.len -= n;
        let mut skip = self.front_skip + n;
        while let Some(front) = self.pieces.front() {
            let size = front.len();
            // A block still being filled stays even when all of it is released.
            let growing = matches!(&front.data, Data::Block(v) if v.len() < v.capacity()) && self.pieces.len() == 1;
            if skip < size || (skip == size && growing) {
                break;
            }
            skip -= size;
            if let Some(Piece { data: Data::Block(mut v), .. }) = self.pieces.pop_front() {
                if self.spare.len() < SPARE_BLOCKS && v.capacity() == BLOCK {
                    v.clear();
                    self.spare.push(v);
                }
            }
        }
        self.front_skip = skip;
    }

    /// Memory allocated and holding no bytes: the spare blocks (each of [`BLOCK`] bytes)
    /// and the pieces' room. Constant time: a connection asks after every event.
    pub fn retained_bytes(&self) -> usize {
        self.spare.len() * BLOCK + crate::unused_room::<Piece>(self.pieces.capacity(), self.pieces.len())
    }

    /// Gives back memory not holding bytes.
    pub fn shrink_to_fit(&mut self) {
        self.spare = Vec::new();
        self.pieces.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte at stream offset `i` in these tests.
    fn byte(i: u64) -> u8 {
        (i.wrapping_mul(7).wrapping_add(i / 251)) as u8
    }

    fn run(from: u64, len: usize) -> Vec<u8> {
        (from..from + len as u64).map(byte).collect()
    }

    /// Makes the test stream's bytes, numbered as the stream is.
    struct TestStream;

    impl ByteSource for TestStream {
        fn fill(&self, offset: u64, out: &mut [u8]) {
            for (i, b) in out.iter_mut().enumerate() {
                *b = byte(offset.wrapping_add(i as u64));
            }
        }
    }

    #[test]
    fn copied_shared_and_generated_writes_read_back_in_order_across_pieces_and_releases() {
        let mut buf = SendBuffer::new();
        let source: Arc<dyn ByteSource> = Arc::new(TestStream);
        let mut written = 0u64;
        let mut released = 0u64;
        // Writes of many sizes, copied, shared and generated in turn, with releases between
        // them; after each step every range of a few sizes reads back as written.
        let sizes = [1usize, 1400, BLOCK - 3, 7, 3 * BLOCK + 11, 5000, BLOCK, 2, 100_000, 13];
        for (step, &size) in sizes.iter().cycle().take(40).enumerate() {
            let data = run(written, size);
            match step % 3 {
                0 => buf.extend_from_slice(&data),
                1 => buf.push_shared(Bytes::from(data)),
                _ => buf.push_generated(&source, written, size),
            }
            written += size as u64;
            assert_eq!(buf.len() as u64, written - released);
            for (from, len) in [(0usize, 1usize), (0, 1400), (buf.len() / 3, 1452), (buf.len().saturating_sub(1452), 1452)] {
                let len = len.min(buf.len() - from);
                let mut out = vec![0u8; len];
                buf.copy_out(from, &mut out);
                assert_eq!(out, run(released + from as u64, len), "step {step}, range {from}+{len}");
            }
            let release = (buf.len() * (step % 4) / 4).min(buf.len());
            buf.release_front(release);
            released += release as u64;
        }
        buf.release_front(buf.len());
        assert!(buf.is_empty());
        // Empty, then written again: the offsets carry on.
        buf.extend_from_slice(&run(written, 10));
        let mut out = [0u8; 10];
        buf.copy_out(0, &mut out);
        assert_eq!(out.to_vec(), run(written, 10));
    }

    #[test]
    fn generated_writes_that_continue_each_other_are_one_piece_and_read_back_again() {
        let mut buf = SendBuffer::new();
        let source: Arc<dyn ByteSource> = Arc::new(TestStream);
        let other: Arc<dyn ByteSource> = Arc::new(TestStream);
        buf.push_generated(&source, 0, 1000);
        buf.push_generated(&source, 1000, 500);
        assert_eq!(buf.pieces.len(), 1, "a write that continues the last one's bytes extends its piece");
        // Not contiguous in the source, or another source: pieces of their own.
        buf.push_generated(&source, 5000, 10);
        buf.push_generated(&other, 5010, 10);
        buf.push_generated(&source, 5020, 0);
        assert_eq!((buf.pieces.len(), buf.len()), (3, 1520));
        let mut first = vec![0u8; 1520];
        buf.copy_out(0, &mut first);
        let expected: Vec<u8> = run(0, 1500).into_iter().chain(run(5000, 20)).collect();
        assert_eq!(first, expected);
        // A resend asks again and gets the same bytes; releasing frees nothing it holds.
        let mut again = vec![0u8; 620];
        buf.copy_out(900, &mut again);
        assert_eq!(again, expected[900..]);
        // A source numbered up to the end of u64 wraps instead of overflowing.
        let mut near_end = SendBuffer::new();
        near_end.push_generated(&source, u64::MAX - 4, 10);
        let mut wrapped = [0u8; 10];
        near_end.copy_out(0, &mut wrapped);
        assert_eq!(wrapped.to_vec(), (0..10u64).map(|i| byte((u64::MAX - 4).wrapping_add(i))).collect::<Vec<u8>>());
        let mut past_the_end = [0u8; 4];
        near_end.copy_out(6, &mut past_the_end);
        assert_eq!(past_the_end[..], wrapped[6..]);
        buf.release_front(1510);
        let mut last = [0u8; 10];
        buf.copy_out(0, &mut last);
        assert_eq!(last.to_vec(), run(5010, 10));
        assert_eq!(buf.pieces.len(), 1);
    }

    #[test]
    fn released_blocks_are_freed_or_reused_not_kept() {
        let mut buf = SendBuffer::new();
        for _ in 0..100 {
            buf.extend_from_slice(&[1u8; BLOCK]);
            buf.release_front(BLOCK);
        }
        assert!(buf.pieces.len() <= 1 && buf.spare.len() <= SPARE_BLOCKS, "{} pieces, {} spare", buf.pieces.len(), buf.spare.len());
        let shared = Bytes::from(vec![9u8; 3000]);
        buf.push_shared(shared.clone());
        buf.release_front(3000);
        // The buffer let go of its reference: only `shared` holds the bytes now.
        assert!(shared.is_unique());
    }
}
