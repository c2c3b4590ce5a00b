//! Time as integer microseconds, owned by the caller: the core never reads a clock.
//!
//! The simulator builds an [`Instant`] from virtual time, the real runtime from a
//! monotonic clock, Python from a number; all of them agree on the unit.

use std::fmt;
use std::ops::{Add, AddAssign, Sub, SubAssign};

/// A point in time, in microseconds since an arbitrary epoch chosen by the driver.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant {
    micros: u64,
}

impl Instant {
    pub const ZERO: Instant = Instant { micros: 0 };
    /// Later than every instant a driver can reach; used for "never".
    pub const MAX: Instant = Instant { micros: u64::MAX };

    pub const fn from_micros(micros: u64) -> Self {
        Instant { micros }
    }
    pub const fn from_millis(millis: u64) -> Self {
        Instant { micros: millis * 1000 }
    }
    pub const fn total_micros(self) -> u64 {
        self.micros
    }
    pub fn as_secs_f64(self) -> f64 {
        self.micros as f64 / 1e6
    }
    /// Time elapsed since `earlier`, or zero if `earlier` is in the future.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.micros.saturating_sub(earlier.micros))
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.micros / 1_000_000, self.micros % 1_000_000)
    }
}

/// A span of time in microseconds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration {
    micros: u64,
}

impl Duration {
    pub const ZERO: Duration = Duration { micros: 0 };
    pub const MAX: Duration = Duration { micros: u64::MAX };

    pub const fn from_micros(micros: u64) -> Self {
        Duration { micros }
    }
    pub const fn from_millis(millis: u64) -> Self {
        Duration { micros: millis * 1000 }
    }
    pub const fn from_secs(secs: u64) -> Self {
        Duration { micros: secs * 1_000_000 }
    }
    /// Rounds to the nearest microsecond; negative and NaN become zero.
    pub fn from_secs_f64(secs: f64) -> Self {
        if secs.is_nan() || secs <= 0.0 {
            return Duration::ZERO;
        }
        Duration { micros: (secs * 1e6).round().min(u64::MAX as f64) as u64 }
    }
    pub const fn total_micros(self) -> u64 {
        self.micros
    }
    pub fn as_secs_f64(self) -> f64 {
        self.micros as f64 / 1e6
    }
    pub fn as_millis_f64(self) -> f64 {
        self.micros as f64 / 1e3
    }
    pub fn saturating_sub(self, other: Duration) -> Duration {
        Duration { micros: self.micros.saturating_sub(other.micros) }
    }
    pub fn saturating_mul(self, factor: u64) -> Duration {
        Duration { micros: self.micros.saturating_mul(factor) }
    }
    pub fn mul_f64(self, factor: f64) -> Duration {
        Duration::from_secs_f64(self.as_secs_f64() * factor)
    }
}

impl fmt::Debug for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.micros >= 1000 {
            write!(f, "{}ms", self.micros as f64 / 1000.0)
        } else {
            write!(f, "{}us", self.micros)
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at [`Instant::MAX`] so that "now + a huge timeout" means "never".
    fn add(self, rhs: Duration) -> Instant {
        Instant { micros: self.micros.saturating_add(rhs.micros) }
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        Instant { micros: self.micros.saturating_sub(rhs.micros) }
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: an instant minus a later one is zero, never a panic.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, rhs: Duration) -> Duration {
        Duration { micros: self.micros.saturating_add(rhs.micros) }
    }
}

impl AddAssign for Duration {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub for Duration {
    type Output = Duration;
    fn sub(self, rhs: Duration) -> Duration {
        self.saturating_sub(rhs)
    }
}

impl SubAssign for Duration {
    fn sub_assign(&mut self, rhs: Duration) {
        *self = *self - rhs;
    }
}

/// `a * b / c`, rounded down, for `c > 0`, without overflow: in 64 bits where the product
/// fits (one division instruction), else in 128 (a library call: the pacer's two per packet
/// were half a per cent of a loopback transfer's CPU).
#[inline]
pub(crate) fn mul_div(a: u64, b: u64, c: u64) -> u128 {
    match a.checked_mul(b) {
        Some(product) => u128::from(product / c),
        None => u128::from(a) * u128::from(b) / u128::from(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mul_div_agrees_with_128_bit_arithmetic_on_both_sides_of_64_bits() {
        for (a, b, c) in [(0, 5, 3), (1_500, 1_000_000, 12_500_000), (u64::MAX, 1_000_000, 7), (u64::MAX / 1_000_000, 1_000_000, 3), (u64::MAX / 1_000_000 + 1, 1_000_000, 3), (u64::MAX, u64::MAX, 1)] {
            assert_eq!(mul_div(a, b, c), u128::from(a) * u128::from(b) / u128::from(c), "{a} * {b} / {c}");
        }
    }

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        let t = Instant::from_millis(5);
        assert_eq!(t - Instant::from_millis(9), Duration::ZERO);
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!((t + Duration::from_micros(250)).total_micros(), 5250);
        assert_eq!(Duration::from_secs_f64(-1.0), Duration::ZERO);
        assert_eq!(Duration::from_secs_f64(0.0105), Duration::from_micros(10_500));
    }
}
