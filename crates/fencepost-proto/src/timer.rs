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
}

const COUNT: usize = 8;

#[derive(Clone, Debug, Default)]
pub(crate) struct TimerTable {
    deadlines: [Option<Instant>; COUNT],
}

impl TimerTable {
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.deadlines[timer as usize] = Some(at);
    }
    pub fn put(&mut self, timer: Timer, at: Option<Instant>) {
        self.deadlines[timer as usize] = at;
    }
    pub fn stop(&mut self, timer: Timer) {
        self.deadlines[timer as usize] = None;
    }
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.deadlines[timer as usize]
    }
    pub fn stop_all(&mut self) {
        self.deadlines = [None; COUNT];
    }
    /// Whether `timer` is set and due at `now`; a due timer is cleared.
    pub fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        match self.deadlines[timer as usize] {
            Some(t) if t <= now => {
                self.deadlines[timer as usize] = None;
                true
            }
            _ => false,
        }
    }
    pub fn next(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }
}
