//! The redundancy stage of the send path: where duplication and forward error
//! correction plug in. The stage sees every data packet as it is built (the
//! whole plaintext datagram) and returns whole repair packets to send; a
//! duplicate is the trivial repair packet. Repair packets go out through the
//! same packet builder as everything else, so packet protection seals them too.
//!
//! Only `none` is built in so far; [`RedundancyConfig::Custom`] takes a stage
//! from outside the crate.

use crate::time::Instant;
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
    /// A stage from outside this crate.
    Custom(Arc<dyn RedundancyFactory>),
}

impl PartialEq for RedundancyConfig {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (RedundancyConfig::None, RedundancyConfig::None) => true,
            (RedundancyConfig::Custom(a), RedundancyConfig::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl RedundancyConfig {
    pub fn build(&self) -> Box<dyn Redundancy> {
        match self {
            RedundancyConfig::None => Box::new(NoRedundancy),
            RedundancyConfig::Custom(factory) => factory.build(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            RedundancyConfig::None => "none",
            RedundancyConfig::Custom(factory) => factory.name(),
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
