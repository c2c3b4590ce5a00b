//! A histogram of delays in microseconds with bounded memory and about 3 %
//! relative error: exact below 64 us, then 32 buckets per doubling.

#[derive(Clone, Debug)]
pub struct DelayHistogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

const EXACT: u64 = 64;
const SUB_BUCKETS: u64 = 32;
/// Doublings above EXACT that a u64 can hold: 2^6 .. 2^63.
const BUCKETS: usize = (EXACT + (64 - 6) * SUB_BUCKETS) as usize;

impl Default for DelayHistogram {
    fn default() -> Self {
        DelayHistogram { counts: vec![0; BUCKETS], total: 0, max: 0 }
    }
}

fn bucket_of(value: u64) -> usize {
    if value < EXACT {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros() as u64; // >= 6
    let mantissa = (value >> (exponent - 5)) & (SUB_BUCKETS - 1);
    (EXACT + (exponent - 6) * SUB_BUCKETS + mantissa) as usize
}

/// The middle of a bucket's range.
fn value_of(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < EXACT {
        return bucket;
    }
    let exponent = (bucket - EXACT) / SUB_BUCKETS + 6;
    let mantissa = (bucket - EXACT) % SUB_BUCKETS;
    let low = (SUB_BUCKETS + mantissa) << (exponent - 5);
    low + (1 << (exponent - 5)) / 2
}

impl DelayHistogram {
    pub fn record(&mut self, micros: u64) {
        self.counts[bucket_of(micros)] += 1;
        self.total += 1;
        self.max = self.max.max(micros);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q` quantile (0..=1) by nearest rank, in microseconds; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).clamp(1, self.total);
        if rank == self.total {
            return Some(self.max);
        }
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(value_of(bucket).min(self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_three_percent() {
        let mut h = DelayHistogram::default();
        assert_eq!(h.quantile(0.5), None);
        for v in 1..=100_000u64 {
            h.record(v);
        }
        for (q, exact) in [(0.5, 50_000.0), (0.95, 95_000.0), (0.01, 1_000.0)] {
            let got = h.quantile(q).unwrap() as f64;
            assert!((got - exact).abs() / exact < 0.03, "q{q}: {got} vs {exact}");
        }
        assert_eq!(h.quantile(1.0), Some(100_000));
        let mut small = DelayHistogram::default();
        for v in [0, 0, 5, 7] {
            small.record(v);
        }
        assert_eq!(small.quantile(0.5), Some(0));
        assert_eq!(small.quantile(0.75), Some(5));
        for v in [u64::MAX, 1 << 40, 12_345_678] {
            assert!(bucket_of(v) < BUCKETS);
            let back = value_of(bucket_of(v)) as f64;
            assert!((back - v as f64).abs() / (v as f64) < 0.04);
        }
    }
}
