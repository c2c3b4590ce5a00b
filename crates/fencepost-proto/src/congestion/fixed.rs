//! No congestion control: a fixed window that never shrinks on loss, with an
//! optional pacing rate. The TCP "THERMAL" idea (`shared/seeds/tcp-thermal.txt`):
//! on a lossy link with few competitors, backing off only wastes the link.

use super::{Controller, Pacer};
use crate::time::Instant;

#[derive(Clone, Debug, PartialEq)]
pub struct FixedConfig {
    /// Packets that may be in flight.
    pub window_packets: u64,
    /// Pacing rate in bytes per second; `None` sends as fast as the window allows.
    pub pacing_rate: Option<u64>,
}

impl Default for FixedConfig {
    fn default() -> Self {
        FixedConfig { window_packets: 256, pacing_rate: None }
    }
}

impl FixedConfig {
    pub fn window_packets(mut self, packets: u64) -> Self {
        self.window_packets = packets.max(1);
        self
    }
    pub fn pacing_rate(mut self, bytes_per_second: Option<u64>) -> Self {
        self.pacing_rate = bytes_per_second.filter(|&r| r > 0);
        self
    }
}

#[derive(Debug)]
pub struct Fixed {
    window: u64,
    pacer: Option<Pacer>,
}

impl Fixed {
    pub fn new(config: FixedConfig, mss: u64) -> Self {
        Fixed {
            window: config.window_packets.max(1) * mss,
            pacer: config.pacing_rate.map(|rate| Pacer::new(rate, 4 * mss)),
        }
    }
}

impl Controller for Fixed {
    fn on_sent(&mut self, now: Instant, bytes: u64, _bytes_in_flight: u64) {
        if let Some(p) = &mut self.pacer {
            p.on_sent(now, bytes);
        }
    }

    fn on_congestion_event(&mut self, _now: Instant, _sent: Instant, _lost_bytes: u64) {
        // Deliberately nothing: this controller never backs off.
    }

    fn window(&self) -> u64 {
        self.window
    }

    fn earliest_departure_time(&self) -> Option<Instant> {
        self.pacer.as_ref().and_then(Pacer::earliest_departure_time)
    }

    fn name(&self) -> &'static str {
        "none"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_backs_off() {
        let mut cc = Fixed::new(FixedConfig::default().window_packets(10), 1000);
        assert_eq!(cc.window(), 10_000);
        cc.on_congestion_event(Instant::from_millis(5), Instant::ZERO, 1000);
        cc.on_retransmission_timeout(Instant::from_millis(6));
        assert_eq!(cc.window(), 10_000);
        assert_eq!(cc.earliest_departure_time(), None);
    }
}
