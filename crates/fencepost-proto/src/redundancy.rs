//! The redundancy stage of the send path: where duplication and forward error
//! correction plug in. The stage sees every data packet as it is built (the
//! whole plaintext datagram) and returns whole repair packets to send; a
//! duplicate is the trivial repair packet. Repair packets go out through the
//! same packet builder as everything else, so packet protection seals them too.
//!
//! Built in: `none`, and `dup` (a share of data packets sent twice: the copy
//! follows its original at once, sealed as a packet of its own, so each meets
//! loss on its own). [`RedundancyConfig::Custom`] takes a stage from outside the crate.

use crate::time::Instant;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

pub trait Redundancy: fmt::Debug + Send {
    /// A data or FIN packet was built: `packet` is the whole datagram before protection.
    fn on_data_packet(&mut self, now: Instant, seq: u64, retransmission: bool, packet: &[u8]);

    /// Writes the next repair packet, whole and unprotected, at the start of `buf`
    /// and returns its length; `None` when there is nothing to send.
    fn poll_repair(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;

    /// A repair packet is waiting: [`Redundancy::poll_repair`] would return one now.
    fn has_repair(&self) -> bool;

    fn name(&self) -> &str;
}

/// Builds a redundancy stage for each new connection.
pub trait RedundancyFactory: fmt::Debug + Send + Sync {
    fn build(&self) -> Box<dyn Redundancy>;
    fn name(&self) -> &str;
}

#[derive(Clone, Debug, Default)]
pub enum RedundancyConfig {
    /// Every packet is sent once.
    #[default]
    None,
    /// This share (0 to 1) of data packets is sent twice, spread evenly: 0.5 copies every other packet.
    Duplicate { share: f64 },
    /// A stage from outside this crate.
    Custom(Arc<dyn RedundancyFactory>),
}

impl PartialEq for RedundancyConfig {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (RedundancyConfig::None, RedundancyConfig::None) => true,
            (RedundancyConfig::Duplicate { share: a }, RedundancyConfig::Duplicate { share: b }) => a == b,
            (RedundancyConfig::Custom(a), RedundancyConfig::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl RedundancyConfig {
    pub fn build(&self) -> Box<dyn Redundancy> {
        match self {
            RedundancyConfig::None => Box::new(NoRedundancy),
            RedundancyConfig::Duplicate { share } => Box::new(Duplication::new(*share)),
            RedundancyConfig::Custom(factory) => factory.build(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            RedundancyConfig::None => "none",
            RedundancyConfig::Duplicate { .. } => "dup",
            RedundancyConfig::Custom(factory) => factory.name(),
        }
    }

    /// The setting as `--redundancy` reads it back.
    pub fn describe(&self) -> String {
        match self {
            RedundancyConfig::Duplicate { share } => format!("dup:{}%", (share * 1e4).round() / 1e2),
            other => other.name().to_string(),
        }
    }
}

#[derive(Debug)]
pub struct NoRedundancy;

impl Redundancy for NoRedundancy {
    fn on_data_packet(&mut self, _now: Instant, _seq: u64, _retransmission: bool, _packet: &[u8]) {}
    fn poll_repair(&mut self, _now: Instant, _buf: &mut [u8]) -> Option<usize> {
        None
    }
    fn has_repair(&self) -> bool {
        false
    }
    fn name(&self) -> &str {
        "none"
    }
}

/// Sends a share of data packets twice. Which ones is decided by a running credit, not
/// at random: with 50 % every other packet is copied, so a run's redundancy is exactly
/// its setting and draws nothing from the run's random streams.
#[derive(Debug)]
pub struct Duplication {
    share: f64,
    credit: f64,
    pending: VecDeque<Vec<u8>>,
}

impl Duplication {
    /// Copies waiting at most: they leave right after their originals, so a few suffice.
    const MAX_PENDING: usize = 64;

    pub fn new(share: f64) -> Duplication {
        Duplication { share: share.clamp(0.0, 1.0), credit: 0.0, pending: VecDeque::new() }
    }
}

impl Redundancy for Duplication {
    fn on_data_packet(&mut self, _now: Instant, _seq: u64, _retransmission: bool, packet: &[u8]) {
        self.credit += self.share;
        if self.credit >= 1.0 - 1e-9 {
            self.credit -= 1.0;
            if self.pending.len() < Self::MAX_PENDING {
                self.pending.push_back(packet.to_vec());
            }
        }
    }
    fn poll_repair(&mut self, _now: Instant, buf: &mut [u8]) -> Option<usize> {
        let copy = self.pending.pop_front()?;
        if copy.len() > buf.len() {
            return None;
        }
        buf[..copy.len()].copy_from_slice(&copy);
        Some(copy.len())
    }
    fn has_repair(&self) -> bool {
        !self.pending.is_empty()
    }
    fn name(&self) -> &str {
        "dup"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplication_copies_exactly_its_share() {
        for (share, copies) in [(0.0, 0), (0.25, 25), (0.5, 50), (0.75, 75), (1.0, 100)] {
            let mut d = Duplication::new(share);
            let mut buf = [0u8; 16];
            let mut n = 0;
            for i in 0..100u8 {
                d.on_data_packet(Instant::ZERO, i as u64, false, &[i; 4]);
                while let Some(len) = d.poll_repair(Instant::ZERO, &mut buf) {
                    assert_eq!(&buf[..len], &[i; 4], "the copy follows its original");
                    n += 1;
                }
            }
            assert_eq!(n, copies, "share {share}");
        }
        assert_eq!(RedundancyConfig::Duplicate { share: 0.25 }.describe(), "dup:25%");
    }
}
