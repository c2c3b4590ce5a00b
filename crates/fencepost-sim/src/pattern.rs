//! The bulk workload's byte stream.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// The bulk workload's bytes: a seeded random 64 KiB block, each 8-byte word
/// mixed with its position in the stream, so that every offset has its own
/// content (a byte out of place is caught) at the cost of a copy, not an RNG call.
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

    /// Fills `out` with the stream's bytes from `offset`.
    pub fn fill(&self, offset: u64, out: &mut [u8]) {
        let word_at = |index: u64| self.block[(index as usize) % Self::WORDS] ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut index = offset / 8;
        let skip = (offset % 8) as usize;
        let mut start = 0;
        if skip != 0 {
            let n = (8 - skip).min(out.len());
            out[..n].copy_from_slice(&word_at(index).to_le_bytes()[skip..skip + n]);
            start = n;
            index += 1;
        }
        let mut words = out[start..].chunks_exact_mut(8);
        for word in &mut words {
            word.copy_from_slice(&word_at(index).to_le_bytes());
            index += 1;
        }
        let tail = words.into_remainder();
        let len = tail.len();
        tail.copy_from_slice(&word_at(index).to_le_bytes()[..len]);
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
        // The block repeats every 64 KiB but the position mix does not.
        assert_ne!(&whole[..65_536], &whole[65_536..131_072]);
        assert_ne!(BulkPattern::new(8).block, p.block);
    }
}
