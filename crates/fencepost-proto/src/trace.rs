//! Per-packet trace events, recorded when `TransportConfig::trace` is on.
//! Names follow qlog's transport and recovery events where one exists.

use crate::time::{Duration, Instant};
use crate::wire::PacketType;

/// What made the sender presume a packet lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossTrigger {
    /// Later transmissions were acknowledged (a fence hole).
    ReorderingThreshold,
    /// Too old relative to a later acknowledged transmission.
    TimeThreshold,
    /// Three duplicate acks (the `window` recovery).
    DuplicateAcks,
    /// The retransmission timer expired.
    Timeout,
    /// The seed's send loop resent it.
    Tick,
}

impl LossTrigger {
    pub fn name(self) -> &'static str {
        match self {
            LossTrigger::ReorderingThreshold => "reordering_threshold",
            LossTrigger::TimeThreshold => "time_threshold",
            LossTrigger::DuplicateAcks => "duplicate_acks",
            LossTrigger::Timeout => "pto_expired",
            LossTrigger::Tick => "send_loop",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum TraceEvent {
    /// qlog `transport:packet_sent`.
    PacketSent { time: Instant, packet_type: PacketType, seq: Option<u64>, size: usize, retransmission: bool },
    /// qlog `transport:packet_received`.
    PacketReceived { time: Instant, packet_type: PacketType, seq: Option<u64>, size: usize },
    /// An ack was processed: the fence it carried (everything below `fence_base` held,
    /// `bitmap_received` more up to `fence_top`, the highest held) and how many packets
    /// it newly acknowledged.
    AckReceived { time: Instant, fence_base: u64, fence_top: u64, bitmap_received: u32, newly_acked: u64 },
    /// qlog `recovery:packet_lost`.
    PacketLost { time: Instant, seq: Option<u64>, trigger: LossTrigger, count: u64 },
    /// qlog `recovery:metrics_updated`.
    MetricsUpdated {
        time: Instant,
        congestion_window: u64,
        ssthresh: Option<u64>,
        bytes_in_flight: u64,
        smoothed_rtt: Duration,
        latest_rtt: Duration,
    },
    /// The receive side's contiguous prefix grew: everything below `fence_base` was delivered.
    StreamDelivered { time: Instant, fence_base: u64, bytes: u64 },
}
