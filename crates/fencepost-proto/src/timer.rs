//! All of a connection's timers in one table; the next deadline is their minimum.

use crate::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// The seed profile's send loop.
    Tick = 0,
    /// A delayed ack is due.
    Ack = 1,
    /// The time threshold of loss detection expires for the oldest candidate.
    LossDetection = 2,
    /// Retransmission timeout: handshake resend, RTO, or a zero-window probe.
    Retransmit = 3,
    /// The pacer lets the next packet leave.
    Pacing = 4,
    /// No packet from the peer for the idle timeout: the connection is dead (or done draining).
    Idle = 5,
    /// Time to prove liveness to the peer.
    Keepalive = 6,
    /// Neither stream advanced for the progress timeout while data was outstanding.
    Progress = 7,
    /// Quiet long enough (nothing unacknowledged, unsent or unread) to give back the
    /// buffers the last burst grew.
    Trim = 8,
}

const COUNT: usize = 9;

/// Deadlines as microseconds, [`NEVER`] where unset: the earliest is then a plain minimum
/// over the array, which the simulator takes several times per simulated event (with
/// `Option<Instant>` entries the branches of skipping the unset ones cost 3-4 % of a run).
#[derive(Clone, Debug)]
pub(crate) struct TimerTable {
    deadlines: [u64; COUNT],
    /// The minimum as last worked out, until a deadline is written: the endpoint asks for
    /// it after every call that may have moved one (twice per packet that sends nothing),
    /// and most such calls moved none.
    earliest: std::cell::Cell<Option<u64>>,
}

/// An unset timer. A deadline that far (half a million years of microseconds) is taken as
/// one microsecond earlier, so that it stays set.
const NEVER: u64 = u64::MAX;

impl Default for TimerTable {
    fn default() -> Self {
        TimerTable { deadlines: [NEVER; COUNT], earliest: std::cell::Cell::new(Some(NEVER)) }
    }
}

impl TimerTable {
    /// Every write goes through here, so that the cached minimum is never stale.
    fn write(&mut self, timer: Timer, at: u64) {
        self.deadlines[timer as usize] = at;
        self.earliest.set(None);
    }
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.write(timer, at.total_micros().min(NEVER - 1));
    }
    pub fn put(&mut self, timer: Timer, at: Option<Instant>) {
        self.write(timer, at.map_or(NEVER, |at| at.total_micros().min(NEVER - 1)));
    }
    pub fn stop(&mut self, timer: Timer) {
        self.write(timer, NEVER);
    }
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        let at = self.deadlines[timer as usize];
        (at != NEVER).then(|| Instant::from_micros(at))
    }
    pub fn stop_all(&mut self) {
        self.deadlines = [NEVER; COUNT];
        self.earliest.set(Some(NEVER));
    }
    /// Whether `timer` is set and due at `now`; a due timer is cleared.
    pub fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        let at = self.deadlines[timer as usize];
        if at != NEVER && at <= now.total_micros() {
            self.write(timer, NEVER);
            true
        } else {
            false
        }
    }
    pub fn next(&self) -> Option<Instant> {
        let earliest = self.earliest.get().unwrap_or_else(|| {
            let earliest = self.deadlines.iter().fold(NEVER, |a, &b| a.min(b));
            self.earliest.set(Some(earliest));
            earliest
        });
        (earliest != NEVER).then(|| Instant::from_micros(earliest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(micros: u64) -> Instant {
        Instant::from_micros(micros)
    }

    /// The minimum is kept between reads; every kind of write must leave it right.
    #[test]
    fn the_earliest_deadline_follows_every_write() {
        let mut timers = TimerTable::default();
        assert_eq!(timers.next(), None);
        timers.set(Timer::Retransmit, at(500));
        timers.set(Timer::Ack, at(200));
        assert_eq!(timers.next(), Some(at(200)));
        // The earliest moved later: the next one takes over.
        timers.set(Timer::Ack, at(900));
        assert_eq!(timers.next(), Some(at(500)));
        timers.put(Timer::Pacing, Some(at(100)));
        assert_eq!(timers.next(), Some(at(100)));
        timers.put(Timer::Pacing, None);
        assert_eq!(timers.next(), Some(at(500)));
        timers.stop(Timer::Retransmit);
        assert_eq!(timers.next(), Some(at(900)));
        assert!(!timers.take_expired(Timer::Ack, at(899)));
        assert!(timers.take_expired(Timer::Ack, at(900)));
        assert_eq!(timers.next(), None);
        timers.set(Timer::Idle, at(50));
        assert_eq!(timers.next(), Some(at(50)));
        timers.stop_all();
        assert_eq!(timers.next(), None);
        // A copy carries the minimum it was made with, and its own writes move only its own.
        timers.set(Timer::Keepalive, at(70));
        let mut copy = timers.clone();
        copy.set(Timer::Keepalive, at(80));
        assert_eq!((timers.next(), copy.next()), (Some(at(70)), Some(at(80))));
    }
}
