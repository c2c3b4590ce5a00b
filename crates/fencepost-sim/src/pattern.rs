//! The bulk workload's byte stream.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// The bulk workload's bytes: a seeded random 64 KiB block, repeated, each repetition
/// XORed with a word of its own, so that every offset has its own content (a byte out of
/// place is caught) at the cost of a copy and an XOR per word, not an RNG call or a
/// multiplication (filling was a sixth of the simulator's thread when each word was
/// mixed with its own index).
#[derive(Clone)]
pub struct BulkPattern {
    block: std::sync::Arc<Vec<u64>>,
}

impl BulkPattern {
    const WORDS: usize = 8192;

    pub fn new(seed: u64) -> Self {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        BulkPattern { block: std::sync::Arc::new((0..Self::WORDS).map(|_| rng.next_u64()).collect()) }
    }

    /// What the words of repetition `n` of the block are XORed with.
    fn repetition_mask(n: u64) -> u64 {
        (n + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    fn word_at(&self, index: u64) -> u64 {
        let words = Self::WORDS as u64;
        self.block[(index % words) as usize] ^ Self::repetition_mask(index / words)
    }

    /// Fills `out` with the stream's bytes from `offset`.
    pub fn fill(&self, offset: u64, out: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { self.fill_avx2(offset, out) };
        }
        self.fill_words(offset, out)
    }

    /// [`BulkPattern::fill`] compiled for AVX2: twice the words per instruction of the
    /// baseline's SSE2, where filling and checking the payload were a tenth of the
    /// simulator's time.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn fill_avx2(&self, offset: u64, out: &mut [u8]) {
        self.fill_words(offset, out)
    }

    #[inline(always)]
    fn fill_words(&self, offset: u64, out: &mut [u8]) {
        let mut index = offset / 8;
        let skip = (offset % 8) as usize;
        let mut start = 0;
        if skip != 0 {
            let n = (8 - skip).min(out.len());
            out[..n].copy_from_slice(&self.word_at(index).to_le_bytes()[skip..skip + n]);
            start = n;
            index += 1;
        }
        let mut rest = &mut out[start..];
        // Whole words, one run of the block at a time (the mask is the same along a run).
        while rest.len() >= 8 {
            let first = (index % Self::WORDS as u64) as usize;
            let run = (Self::WORDS - first).min(rest.len() / 8);
            let mask = Self::repetition_mask(index / Self::WORDS as u64);
            let (words, tail) = std::mem::take(&mut rest).split_at_mut(run * 8);
            for (out, &word) in words.chunks_exact_mut(8).zip(&self.block[first..first + run]) {
                out.copy_from_slice(&(word ^ mask).to_le_bytes());
            }
            index += run as u64;
            rest = tail;
        }
        let len = rest.len();
        rest.copy_from_slice(&self.word_at(index).to_le_bytes()[..len]);
    }

    /// How many bytes of `got` differ from the stream's bytes from `offset`. The stream is
    /// generated and compared a word at a time and never written out: filling a buffer to
    /// compare against cost the simulator a store, a load and a `memcmp` per byte received.
    pub fn count_wrong(&self, offset: u64, got: &[u8]) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            return unsafe { self.count_wrong_avx2(offset, got) };
        }
        self.count_wrong_words(offset, got)
    }

    /// [`BulkPattern::count_wrong`] compiled for AVX2 (see [`BulkPattern::fill_avx2`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn count_wrong_avx2(&self, offset: u64, got: &[u8]) -> u64 {
        self.count_wrong_words(offset, got)
    }

    #[inline(always)]
    fn count_wrong_words(&self, offset: u64, got: &[u8]) -> u64 {
        fn differing(got: &[u8], expected: &[u8]) -> u64 {
            got.iter().zip(expected).filter(|(a, b)| a != b).count() as u64
        }
        let mut index = offset / 8;
        let skip = (offset % 8) as usize;
        let mut wrong = 0;
        let mut rest = got;
        if skip != 0 {
            let n = (8 - skip).min(rest.len());
            wrong += differing(&rest[..n], &self.word_at(index).to_le_bytes()[skip..skip + n]);
            rest = &rest[n..];
            index += 1;
        }
        while rest.len() >= 8 {
            let first = (index % Self::WORDS as u64) as usize;
            let run = (Self::WORDS - first).min(rest.len() / 8);
            let mask = Self::repetition_mask(index / Self::WORDS as u64);
            let (words, tail) = rest.split_at(run * 8);
            let block = &self.block[first..first + run];
            let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("chunks of 8"));
            // Any difference in the run first (no branch per word); bytes are counted only then.
            let differs = words.chunks_exact(8).zip(block).fold(0, |acc, (got, &expected)| acc | (word(got) ^ expected ^ mask));
            if differs != 0 {
                wrong += words.chunks_exact(8).zip(block).map(|(got, &expected)| differing(got, &(expected ^ mask).to_le_bytes())).sum::<u64>();
            }
            index += run as u64;
            rest = tail;
        }
        if !rest.is_empty() {
            wrong += differing(rest, &self.word_at(index).to_le_bytes()[..rest.len()]);
        }
        wrong
    }
}

/// The bulk sender writes the stream as bytes its connection makes into each packet.
impl fencepost_proto::ByteSource for BulkPattern {
    fn fill(&self, offset: u64, out: &mut [u8]) {
        BulkPattern::fill(self, offset, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_offset_has_its_own_bytes() {
        let p = BulkPattern::new(7);
        let mut whole = vec![0u8; 3 * 65_536];
        p.fill(0, &mut whole);
        let mut part = vec![0u8; 1000];
        p.fill(65_536 + 8, &mut part);
        assert_eq!(&part[..], &whole[65_544..66_544], "filling from an offset continues the same stream");
        p.fill(1_003, &mut part[..77]);
        assert_eq!(&part[..77], &whole[1_003..1_080], "offsets need not be aligned");
        // Filling agrees with the word-by-word definition, across the block's repetitions.
        let reference: Vec<u8> = (0..whole.len() as u64 / 8).flat_map(|i| p.word_at(i).to_le_bytes()).collect();
        assert_eq!(whole, reference);
        let mut odd = vec![0u8; 70_001];
        p.fill(65_530, &mut odd);
        assert_eq!(&odd[..], &whole[65_530..135_531], "a fill that starts unaligned and crosses a repetition");
        // The block repeats every 64 KiB but the position mix does not.
        assert_ne!(&whole[..65_536], &whole[65_536..131_072]);
        assert_ne!(BulkPattern::new(8).block, p.block);
    }

    #[test]
    fn counts_the_bytes_that_differ_from_the_stream() {
        let p = BulkPattern::new(3);
        let mut whole = vec![0u8; 3 * 65_536];
        p.fill(0, &mut whole);
        // Aligned or not, short or across a repetition of the block: nothing wrong.
        for (start, len) in [(0, whole.len()), (5, 3), (65_530, 70_001), (13, 0), (1_001, 1_200)] {
            assert_eq!(p.count_wrong(start as u64, &whole[start..start + len]), 0, "{start}+{len}");
        }
        // Damage in the leading partial word, in whole words, and in the tail.
        let mut got = whole[3..70_010].to_vec();
        got[0] ^= 1;
        got[4] ^= 0x80;
        got[20_000] = got[20_000].wrapping_add(1);
        got[20_001] = got[20_001].wrapping_add(1);
        got[65_540] ^= 0xff;
        let last = got.len() - 1;
        got[last] ^= 2;
        assert_eq!(p.count_wrong(3, &got), 6);
        // The same bytes at the wrong place in the stream are wrong.
        assert!(p.count_wrong(8, &whole[..4096]) > 4000);
        assert!(p.count_wrong(65_536, &whole[..4096]) > 4000, "the next repetition of the block differs");
    }

    /// The AVX2 build of filling and checking (taken where the CPU has it) gives what the
    /// baseline build gives, so a run's bytes and verdicts do not depend on the machine.
    #[test]
    fn the_machines_own_build_agrees_with_the_baseline() {
        let p = BulkPattern::new(11);
        for (start, len) in [(0u64, 70_001usize), (3, 1_200), (65_531, 9), (131_070, 40_000)] {
            let (mut fast, mut base) = (vec![0u8; len], vec![1u8; len]);
            p.fill(start, &mut fast);
            p.fill_words(start, &mut base);
            assert_eq!(fast, base, "{start}+{len}");
            fast[len / 2] ^= 4;
            fast[0] ^= 1;
            assert_eq!(p.count_wrong(start, &fast), p.count_wrong_words(start, &fast), "{start}+{len}");
            assert_eq!(p.count_wrong(start, &fast), if len > 1 { 2 } else { 1 });
        }
    }
}
