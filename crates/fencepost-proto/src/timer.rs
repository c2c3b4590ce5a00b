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
}

/// An unset timer. A deadline that far (half a million years of microseconds) is taken as
/// one microsecond earlier, so that it stays set.
const NEVER: u64 = u64::MAX;

impl Default for TimerTable {
    fn default() -> Self {
        TimerTable { deadlines: [NEVER; COUNT] }
    }
}

impl TimerTable {
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.deadlines[timer as usize] = at.total_micros().min(NEVER - 1);
    }
    pub fn put(&mut self, timer: Timer, at: Option<Instant>) {
        self.deadlines[timer as usize] = at.map_or(NEVER, |at| at.total_micros().min(NEVER - 1));
    }
    pub fn stop(&mut self, timer: Timer) {
        self.deadlines[timer as usize] = NEVER;
    }
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        let at = self.deadlines[timer as usize];
        (at != NEVER).then(|| Instant::from_micros(at))
    }
    pub fn stop_all(&mut self) {
        self.deadlines = [NEVER; COUNT];
    }
    /// Whether `timer` is set and due at `now`; a due timer is cleared.
    pub fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        let at = self.deadlines[timer as usize];
        if at != NEVER && at <= now.total_micros() {
            self.deadlines[timer as usize] = NEVER;
            true
        } else {
            false
        }
    }
    pub fn next(&self) -> Option<Instant> {
        let earliest = self.deadlines.iter().fold(NEVER, |a, &b| a.min(b));
        (earliest != NEVER).then(|| Instant::from_micros(earliest))
    }
}
