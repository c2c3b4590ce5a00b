//! fencepost-proto: the sliding-fence transport as a sans-IO state machine.
//! It performs no I/O and reads no clock: every entry point takes `now`.
//!
//! The receiver acknowledges the highest contiguous packet plus a bitmap of the
//! packets after it (the *fence*), so the sender resends only the holes.
//! [`Connection`] is one side of a connection; [`Endpoint`] routes datagrams
//! for many. The wire format is specified in `docs/protocol.md`.

mod ack_thinning;
pub mod assembler;
pub mod config;
pub mod congestion;
pub mod connection;
pub mod crypto;
pub mod disassembler;
pub mod endpoint;
pub mod fec;
mod first_tx;
pub mod protection;
pub mod redundancy;
pub mod rtt;
pub mod send_buffer;
pub mod stats;
pub mod time;
mod timer;
pub mod trace;
pub mod wire;

pub use assembler::Assembler;
pub use config::{Arq, FenceWidth, Profile, Route, SendPolicy, TransportConfig};
pub use congestion::{AckBatch, Controller, ControllerConfig, ControllerFactory, CubicConfig, FixedConfig, RateSample, RenoConfig, SentPacket, TahoeConfig};
pub use connection::{Connection, ConnectionError, ConnectionSecrets, Event, Hello, ReadError, Side, State, Transmit, Unreachable, WriteError, PORT_CLOSED_AFTER};
pub use crypto::{Cipher, NoiseConfig, PublicKey, StaticKey};
pub use disassembler::Disassembler;
pub use endpoint::{AcceptError, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, EndpointStats, Incoming, OpenedConnect, PendingConnect, TRANSMIT_BURST};
pub use protection::{PacketProtection, ProtectionConfig, ProtectionError, ProtectionFactory};
pub use redundancy::{Redundancy, RedundancyConfig, RedundancyFactory};
pub use send_buffer::ByteSource;
pub use rtt::RttEstimator;
pub use stats::ConnectionStats;
pub use time::{Duration, Instant};
pub use trace::{LossTrigger, TraceEvent};

/// Bytes a queue keeps allocated for `T`s beyond the `len` it holds: what its
/// `shrink_to_fit` would give back (see `Connection::retained_bytes`).
pub(crate) fn unused_room<T>(capacity: usize, len: usize) -> usize {
    (capacity - len) * std::mem::size_of::<T>()
}
