//! The redundancy stage of the send path: where duplication and forward error
//! correction plug in. Only `none` exists today; the connection already sends
//! whatever extra copies a stage asks for.

use crate::time::Instant;
use std::fmt;

pub trait Redundancy: fmt::Debug + Send {
    /// How many extra copies of the data packet just built to send right after it.
    fn extra_copies(&mut self, now: Instant, seq: u64, retransmission: bool) -> u32;
    fn name(&self) -> &'static str;
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum RedundancyConfig {
    /// Every packet is sent once.
    #[default]
    None,
}

impl RedundancyConfig {
    pub fn build(&self) -> Box<dyn Redundancy> {
        match self {
            RedundancyConfig::None => Box::new(NoRedundancy),
        }
    }
}

#[derive(Debug)]
pub struct NoRedundancy;

impl Redundancy for NoRedundancy {
    fn extra_copies(&mut self, _now: Instant, _seq: u64, _retransmission: bool) -> u32 {
        0
    }
    fn name(&self) -> &'static str {
        "none"
    }
}
