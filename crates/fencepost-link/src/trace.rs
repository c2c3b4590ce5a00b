//! Bandwidth traces in mahimahi's format.
//!
//! One integer per line: a time in milliseconds from the start of the trace.
//! Each line is one chance for the bottleneck to deliver [`OPPORTUNITY_BYTES`];
//! a time on k lines gives k chances in that millisecond. Times never decrease,
//! the last is non-zero, and the trace repeats shifted by its last time.

use rand_core::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use std::fmt;
use std::path::Path;

/// Bytes one delivery opportunity carries (mahimahi's `PACKET_SIZE`).
pub const OPPORTUNITY_BYTES: u64 = 1504;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Opportunity times in milliseconds, non-decreasing, last one non-zero.
    times_ms: Vec<u64>,
}

/// A trace file that is not a trace, with the line at fault (1-based; 0 for the file as a whole).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 { write!(f, "{}", self.message) } else { write!(f, "line {}: {}", self.line, self.message) }
    }
}

impl std::error::Error for TraceError {}

impl Trace {
    /// Parses a trace, rejecting what mahimahi rejects: empty lines, non-numbers,
    /// decreasing times, an empty trace, a trace whose last time is 0.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut times_ms: Vec<u64> = Vec::new();
        let body = text.strip_suffix('\n').unwrap_or(text);
        if body.is_empty() {
            return Err(TraceError { line: 0, message: "no timestamps found".into() });
        }
        for (index, raw) in body.split('\n').enumerate() {
            let line = index + 1;
            let value = raw.strip_suffix('\r').unwrap_or(raw).trim();
            if value.is_empty() {
                return Err(TraceError { line, message: "empty line".into() });
            }
            let ms: u64 = value.parse().map_err(|_| TraceError {
                line,
                message: format!("expected a whole number of milliseconds, found {:?}", truncate(value)),
            })?;
            if let Some(&previous) = times_ms.last() {
                if ms < previous {
                    return Err(TraceError { line, message: format!("time {ms} ms is before the previous line's {previous} ms") });
                }
            }
            times_ms.push(ms);
        }
        if times_ms.last() == Some(&0) {
            return Err(TraceError { line: times_ms.len(), message: "the trace must last a non-zero time (last line is 0)".into() });
        }
        Ok(Trace { times_ms })
    }

    /// Reads a trace file of at most [`Trace::MAX_FILE_BYTES`]: a larger file, or a
    /// device that never ends (`/dev/zero`), is refused instead of read forever.
    pub fn from_file(path: &Path) -> Result<Trace, TraceError> {
        use std::io::Read;
        let fail = |e: std::io::Error| TraceError { line: 0, message: format!("cannot read {}: {e}", path.display()) };
        let file = std::fs::File::open(path).map_err(fail)?;
        let mut bytes = Vec::new();
        file.take(Self::MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(fail)?;
        if bytes.len() as u64 > Self::MAX_FILE_BYTES {
            return Err(TraceError {
                line: 0,
                message: format!("{} is larger than {} MB: not a trace file this tool reads", path.display(), Self::MAX_FILE_BYTES >> 20),
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| TraceError { line: 0, message: format!("{} is not text: {e}", path.display()) })?;
        Trace::parse(&text)
    }

    /// The largest trace file read: mahimahi's longest traces are a few megabytes.
    pub const MAX_FILE_BYTES: u64 = 64 << 20;

    /// A constant rate: the opportunity spacing that gives `bits_per_second`
    /// over one second (rounded to whole opportunities per millisecond).
    pub fn constant(bits_per_second: u64) -> Trace {
        let per_second = (bits_per_second as f64 / (OPPORTUNITY_BYTES as f64 * 8.0)).round().max(1.0) as u64;
        let times_ms = (0..per_second).map(|i| (i * 1000) / per_second + 1).collect();
        Trace { times_ms }
    }

    /// Poisson-spaced opportunities at a mean rate, `duration_ms` long.
    pub fn poisson(bits_per_second: u64, duration_ms: u64, seed: u64) -> Trace {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let per_ms = bits_per_second as f64 / (OPPORTUNITY_BYTES as f64 * 8.0) / 1000.0;
        let mut t = 0.0f64;
        let mut times_ms = Vec::new();
        loop {
            let u = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            t += -u.ln() / per_ms.max(1e-9);
            let ms = t.ceil() as u64;
            if ms > duration_ms.max(1) {
                break;
            }
            times_ms.push(ms);
        }
        if times_ms.last().copied().unwrap_or(0) == 0 {
            times_ms.push(duration_ms.max(1));
        }
        Trace { times_ms }
    }

    /// Opportunities in the first `elapsed_ms` milliseconds of the trace (repetitions included).
    pub fn opportunities_until(&self, elapsed_ms: u64) -> u64 {
        let period = self.period_ms();
        let full = elapsed_ms / period;
        let within = elapsed_ms % period;
        full * self.times_ms.len() as u64 + self.times_ms.partition_point(|&t| t <= within) as u64
    }

    pub fn times_ms(&self) -> &[u64] {
        &self.times_ms
    }

    /// Length of one repetition in milliseconds.
    pub fn period_ms(&self) -> u64 {
        *self.times_ms.last().expect("a parsed trace is never empty")
    }

    /// Long-run capacity in bits per second.
    pub fn mean_rate_bps(&self) -> f64 {
        self.times_ms.len() as f64 * OPPORTUNITY_BYTES as f64 * 8.0 * 1000.0 / self.period_ms() as f64
    }

    /// The trace as text, one time per line (what [`Trace::parse`] reads).
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(self.times_ms.len() * 6);
        for t in &self.times_ms {
            out.push_str(&t.to_string());
            out.push('\n');
        }
        out
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_file_that_never_ends_is_refused() {
        let e = Trace::from_file(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.message.contains("larger than 64 MB"), "{}", e.message);
        assert!(Trace::from_file(std::path::Path::new("/no/such/trace")).unwrap_err().message.contains("cannot read"));
    }

    use super::*;

    #[test]
    fn rejects_bad_files_naming_the_line() {
        assert_eq!(Trace::parse("1\n2\n\n3\n").unwrap_err().line, 3);
        let e = Trace::parse("1\n5\n4\n").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.to_string().contains("before the previous"), "{e}");
        assert_eq!(Trace::parse("1\nfast\n").unwrap_err().line, 2);
        assert_eq!(Trace::parse("0\n0\n").unwrap_err().line, 2);
        assert_eq!(Trace::parse("").unwrap_err().line, 0);
        assert_eq!(Trace::parse("-3\n").unwrap_err().line, 1);
    }

    #[test]
    fn counts_opportunities_across_repetitions() {
        let t = Trace::parse("1\n1\n3\n").unwrap();
        assert_eq!(t.opportunities_until(0), 0);
        assert_eq!(t.opportunities_until(1), 2);
        assert_eq!(t.opportunities_until(2), 2);
        assert_eq!(t.opportunities_until(3), 3);
        assert_eq!(t.opportunities_until(4), 5, "the repetition's first millisecond");
        assert_eq!(t.opportunities_until(30), 30);
    }

    #[test]
    fn reads_mahimahi_files() {
        let t = Trace::parse("1\n").unwrap();
        assert_eq!(t.period_ms(), 1);
        assert!((t.mean_rate_bps() - 12.032e6).abs() < 1.0);
        let t = Trace::parse("0\n0\n2\r\n").unwrap();
        assert_eq!(t.times_ms(), &[0, 0, 2]);
        assert_eq!(Trace::parse(&t.to_text()).unwrap(), t);
    }

    #[test]
    fn generates_constant_and_poisson_traces() {
        let c = Trace::constant(12_032_000);
        assert_eq!(c.times_ms().len(), 1000);
        assert!((c.mean_rate_bps() - 12.032e6).abs() / 12.032e6 < 0.001);
        let p = Trace::poisson(2_640_000, 60_000, 1);
        let rel = (p.mean_rate_bps() - 2.64e6).abs() / 2.64e6;
        assert!(rel < 0.02, "poisson mean rate {} off by {rel}", p.mean_rate_bps());
        assert!(p.times_ms().windows(2).all(|w| w[0] <= w[1]));
    }
}
