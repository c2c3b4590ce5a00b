//! Transport settings, bundled as profiles: `seed` reproduces the seed article's
//! protocol, `default` is the modern design. Individual settings can still be
//! changed on top of a profile.

use crate::congestion::{BbrConfig, ControllerConfig, FixedConfig};
use crate::crypto::NoiseConfig;
use crate::protection::ProtectionConfig;
use crate::redundancy::RedundancyConfig;
use crate::time::Duration;
use crate::wire::DATA_OVERHEAD;

/// How the sender decides an outstanding packet no longer needs sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arq {
    /// Every packet the fence bitmap reports as received is done; only holes are resent.
    Fence,
    /// Only the cumulative part of the ack counts (classic sliding window, go-back-N on timeout).
    Window,
}

impl Arq {
    pub fn name(self) -> &'static str {
        match self {
            Arq::Fence => "fence",
            Arq::Window => "window",
        }
    }
}

/// When data leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendPolicy {
    /// The seed's send loop: every `interval`, send an ack and (re)send every
    /// unacknowledged packet in the fence. No RTT-driven timers.
    Tick { interval: Duration },
    /// Send as soon as the congestion window, the pacer and the peer's receive
    /// window allow; retransmit on fast-retransmit or RTT-derived timeouts.
    Continuous,
}

/// How wide the fence bitmap in an ack is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceWidth {
    /// Always exactly this many bits (the seed: 32).
    Exact(u32),
    /// As wide as the highest received packet needs, up to this many bits and
    /// never more than fits in one datagram.
    UpTo(u32),
}

impl FenceWidth {
    pub fn max_bits(self) -> u32 {
        match self {
            FenceWidth::Exact(b) | FenceWidth::UpTo(b) => b,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Profile {
    Seed,
    Default,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Seed => "seed",
            Profile::Default => "default",
        }
    }
}

/// Everything that shapes one side of a connection.
#[derive(Clone, Debug)]
pub struct TransportConfig {
    pub profile: Profile,
    /// Largest data payload per packet, in bytes.
    pub max_payload: u16,
    pub arq: Arq,
    pub fence_width: FenceWidth,
    pub send_policy: SendPolicy,
    /// `Tick` sends an ack every tick; `Continuous` acks after this many ack-eliciting packets,
    pub ack_every: u32,
    /// or after this long, or at once when a hole or a duplicate shows up.
    pub max_ack_delay: Duration,
    /// An ack due by count waits up to this long (never past `max_ack_delay`) for our next
    /// data packet, and leaves right behind it in the same send, when the exchange is one of
    /// requests and replies: a data packet of ours came between the peer's last two, and
    /// nothing of ours waits to be sent (the application is about to answer). Sent on its
    /// own, the ack wakes the peer a second time for each exchange. Zero: acks never wait.
    pub ack_coalesce: Duration,
    /// A hole is lost once a packet sent this many transmissions after it is acknowledged.
    pub reorder_threshold: u64,
    /// ... or once it is older than this fraction of an RTT beyond the latest acknowledged packet (RFC 9002: 9/8).
    pub time_threshold: f64,
    pub initial_rtt: Duration,
    pub min_rto: Duration,
    /// Bounds what the RTT variance adds to the retransmission timeout; never the round
    /// trip itself (see `RttEstimator::rto`).
    pub max_rto: Duration,
    /// No packet from the peer for this long ends the connection with a timeout error.
    pub idle_timeout: Duration,
    /// End the connection when neither stream has advanced for this long although data is
    /// outstanding (in flight, or held behind a hole): a peer that keeps the connection
    /// alive without letting anything through. `None`: never.
    pub progress_timeout: Option<Duration>,
    /// Send a keepalive when nothing that elicits an ack was sent for this long (`None`: never).
    pub keepalive_interval: Option<Duration>,
    /// Bytes the application may have written and not yet had acknowledged: at first, and
    /// as long as the peer's window fits in it (see `send_buffer_max`).
    pub send_buffer: usize,
    /// The most the send buffer grows to, following the peer's window once that outgrows
    /// `send_buffer` (plus a quarter of `send_buffer` for what waits unsent): what the
    /// peer has let us send stays buffered until acknowledged.
    pub send_buffer_max: usize,
    /// Bytes of received data buffered, readable or out of order, at first.
    pub recv_buffer: usize,
    /// The most the receive buffer grows to. It doubles while packets held behind holes
    /// take more than half of it and the application keeps up with reading: the sender
    /// is then held by the window, not the path (see `Assembler::grow_for_holes`). Equal
    /// to `recv_buffer`: a fixed buffer.
    pub recv_buffer_max: usize,
    /// Each `write` starts a new packet (the seed flushes every message) instead of coalescing the stream.
    pub packet_per_write: bool,
    pub controller: ControllerConfig,
    pub redundancy: RedundancyConfig,
    /// Take the peer's repair packets (rebuild lost packets from them); when false the
    /// handshake says so and a peer's FEC sends nothing.
    pub accept_repairs: bool,
    /// How packets after the handshake are sealed and opened.
    pub protection: ProtectionConfig,
    /// Keep every RTT sample (for reports); off for long-lived connections.
    pub record_rtt_samples: bool,
    /// Record per-packet trace events (see [`crate::TraceEvent`]).
    pub trace: bool,
    /// How late the driver's timers may fire. The pacer lets packets leave up to this long
    /// before their paced departure, so a driver woken a millisecond late (tokio's timer
    /// wheel) still keeps the rate: at 8 Gbit/s a 64 kB burst lasts 64 us, far less than
    /// one tick. Zero in the simulator, whose timers are exact; the socket runtime raises it.
    pub timer_granularity: Duration,
}

impl TransportConfig {
    /// The seed article's protocol: 256-byte payloads, a 32-packet fence, a 10 ms
    /// send loop that resends every unacknowledged packet in the fence and sends
    /// an ack each tick, and a 100 ms idle timeout.
    pub fn seed() -> Self {
        TransportConfig {
            profile: Profile::Seed,
            max_payload: 256,
            arq: Arq::Fence,
            fence_width: FenceWidth::Exact(32),
            send_policy: SendPolicy::Tick { interval: Duration::from_millis(10) },
            ack_every: 1,
            max_ack_delay: Duration::from_millis(10),
            ack_coalesce: Duration::ZERO,
            reorder_threshold: 3,
            time_threshold: 9.0 / 8.0,
            initial_rtt: Duration::from_millis(10),
            min_rto: Duration::from_millis(10),
            max_rto: Duration::from_millis(10),
            idle_timeout: Duration::from_millis(100),
            progress_timeout: None,
            keepalive_interval: None,
            send_buffer: 4 << 20,
            send_buffer_max: 4 << 20,
            recv_buffer: 4 << 20,
            recv_buffer_max: 4 << 20,
            packet_per_write: true,
            controller: ControllerConfig::Fixed(FixedConfig::default().window_packets(32)),
            redundancy: RedundancyConfig::None,
            accept_repairs: true,
            protection: ProtectionConfig::None,
            record_rtt_samples: true,
            trace: false,
            timer_granularity: Duration::ZERO,
        }
    }

    /// The modern design: MTU-sized payloads (1500-byte IP packets), RTT-driven
    /// retransmission, fast retransmit of fence holes, pacing, wide fences, and
    /// every packet authenticated and encrypted (wire format version 2).
    pub fn default_profile() -> Self {
        let protection = ProtectionConfig::Noise(NoiseConfig::default());
        TransportConfig {
            profile: Profile::Default,
            max_payload: mtu_payload_with(protection.overhead(), &RedundancyConfig::WHERE_IT_PAYS),
            arq: Arq::Fence,
            fence_width: FenceWidth::UpTo(8192),
            send_policy: SendPolicy::Continuous,
            ack_every: 2,
            max_ack_delay: Duration::from_millis(5),
            ack_coalesce: Duration::from_millis(1),
            reorder_threshold: 3,
            time_threshold: 9.0 / 8.0,
            initial_rtt: Duration::from_millis(100),
            min_rto: Duration::from_millis(50),
            max_rto: Duration::from_secs(4),
            idle_timeout: Duration::from_secs(30),
            progress_timeout: Some(Duration::from_secs(90)),
            keepalive_interval: Some(Duration::from_secs(5)),
            // Sent data stays buffered until acknowledged: at 50 % loss a packet takes up to
            // several round trips to get through, so the buffers hold several BDPs of a
            // 100 Mbit/s, 40 ms path (they grow only as far as they are used).
            send_buffer: 16 << 20,
            recv_buffer: 16 << 20,
            // Grown as the path needs: in a lossy path's window a hole stands for a round
            // trip or more while the packets behind it wait, so the span held from the first
            // hole is one to several products; at 1 Gbit/s over 100 ms (a 12.5 MB product)
            // with 1 % loss, 16 MB held the transfer to 478 Mbit/s. Beyond 64 MB the acks
            // could not describe the span anyway (four fences of 8192 packets).
            send_buffer_max: 64 << 20,
            recv_buffer_max: 64 << 20,
            packet_per_write: false,
            // The loss-tolerant model-based controller: it fills the path whatever the
            // random loss, and yields to queues and to loss that comes with them.
            controller: ControllerConfig::Bbr(BbrConfig::tolerant()),
            // FEC only where it pays: for what the application limits, at the rate the
            // measured loss needs (none on a clean path); a transfer filling the path gets
            // none (docs/redundancy.md, "The default profile").
            redundancy: RedundancyConfig::WHERE_IT_PAYS,
            accept_repairs: true,
            protection,
            record_rtt_samples: true,
            trace: false,
            timer_granularity: Duration::ZERO,
        }
    }

    pub fn for_profile(profile: Profile) -> Self {
        match profile {
            Profile::Seed => Self::seed(),
            Profile::Default => Self::default_profile(),
        }
    }

    /// Changes how packets are protected. A payload sized to fill a 1500-byte IP packet is
    /// resized so the datagram still fills it; a payload chosen otherwise stays as it is.
    pub fn set_protection(&mut self, protection: ProtectionConfig) {
        if self.max_payload == self.mtu_sized_payload() {
            self.max_payload = mtu_payload_with(protection.overhead(), &self.redundancy);
        }
        self.protection = protection;
    }

    /// Changes the redundancy. A payload sized to fill a 1500-byte IP packet is resized so
    /// that FEC's repairs (a few bytes longer than their data) still fit one.
    pub fn set_redundancy(&mut self, redundancy: RedundancyConfig) {
        if self.max_payload == self.mtu_sized_payload() {
            self.max_payload = mtu_payload_with(self.protection.overhead(), &redundancy);
        }
        self.redundancy = redundancy;
    }

    /// The payload that fills a 1500-byte IP packet with this protection and redundancy.
    pub fn mtu_sized_payload(&self) -> u16 {
        mtu_payload_with(self.protection.overhead(), &self.redundancy)
    }

    /// Plaintext packets (wire format version 1), as `--insecure` asks.
    pub fn insecure(mut self) -> Self {
        self.set_protection(ProtectionConfig::None);
        self
    }

    /// The payload lowered, if need be, so that no data packet or repair is a datagram of
    /// more than `datagram` bytes: what the route to a peer carries whole (its MTU less
    /// the IP and UDP headers). A payload already that small stays as it is.
    pub fn fit_datagram(&mut self, datagram: usize) {
        self.max_payload = self.max_payload.min(payload_fitting(datagram, self.protection.overhead(), &self.redundancy));
    }

    /// The payload for packets over `route`: lowered to what it carries whole, as
    /// [`TransportConfig::fit_datagram`]; and where the peer is this host and the payload
    /// is still the one that fills a 1500-byte packet (not chosen by the user), sized to
    /// fill datagrams of [`SAME_HOST_DATAGRAM`] bytes, or what the route carries if less.
    pub fn payload_for(&self, route: Route) -> u16 {
        let fitting = |datagram| payload_fitting(datagram, self.protection.overhead(), &self.redundancy);
        if route.same_host && self.max_payload == self.mtu_sized_payload() {
            fitting(route.datagram.min(SAME_HOST_DATAGRAM))
        } else {
            self.max_payload.min(fitting(route.datagram))
        }
    }

    /// Sets the payload to [`TransportConfig::payload_for`] the route.
    pub fn fit_route(&mut self, route: Route) {
        self.max_payload = self.payload_for(route);
    }

    /// Largest datagram this side sends with its own payload size (protection's tag included).
    pub fn max_datagram(&self) -> usize {
        DATA_OVERHEAD + self.max_payload as usize + self.protection.overhead()
    }

    /// Longest datagram of any kind this side sends: a data packet, or a repair of one
    /// (its symbol carries the payload's length and flags), if the redundancy sends repairs.
    pub fn longest_datagram(&self) -> usize {
        self.max_datagram() + repairs_longer_by(&self.redundancy)
    }
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self::default_profile()
    }
}

/// The UDP payload of a 1500-byte IPv4 packet: 1500 - 20 (IP) - 8 (UDP).
pub const ETHERNET_DATAGRAM: usize = 1472;

/// The datagram packets fill when the peer is this host (loopback, or one of the host's
/// own addresses: the kernel routes both over the loopback interface, 64 kB wide, and no
/// narrower link can lie beyond it). Most of the transport's cost is per packet (sealing
/// and opening, the header, the record of each sent packet, acks, the kernel's work per
/// datagram), so larger packets cost less per byte: one loopback connection, 1 GB,
/// `--no-verify`, four interleaved runs of each: 1.19-1.35 CPU s per GB both ends with
/// Ethernet's 1,472-byte datagrams, 0.70-0.85 with 8 kB payloads, 0.72-0.87 with 16 kB
/// (`docs/speed.md`, "Packets as wide as the route"). Kept at 8 kB, seven to a 64 kB
/// GSO batch, so the batches still carry several and a buffer per packet stays small.
pub const SAME_HOST_DATAGRAM: usize = 8192;

/// What a driver knows of the route to a peer, for [`TransportConfig::fit_route`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The largest datagram (UDP payload) the route carries whole: its MTU less the IP and UDP headers.
    pub datagram: usize,
    /// The peer is this host: nothing lies between, so packets may be as wide as the route.
    pub same_host: bool,
}

/// The payload that fills a 1500-byte IPv4 packet: 1500 - 20 (IP) - 8 (UDP) - our data
/// header - what packet protection adds.
pub fn mtu_payload(protection_overhead: usize) -> u16 {
    (ETHERNET_DATAGRAM - DATA_OVERHEAD - protection_overhead) as u16
}

/// The same with `redundancy`: a repair carries its symbol (the payload with 2 bytes of
/// length and 1 of flags) behind a header 1 byte shorter than data's, so with FEC the
/// payload is 2 bytes less and repairs still fit the packet.
pub fn mtu_payload_with(protection_overhead: usize, redundancy: &RedundancyConfig) -> u16 {
    payload_fitting(ETHERNET_DATAGRAM, protection_overhead, redundancy)
}

/// How much longer than its data packets a side's repairs are: a repair carries its
/// symbol (the payload with 2 bytes of length and 1 of flags) behind a shorter header.
fn repairs_longer_by(redundancy: &RedundancyConfig) -> usize {
    if redundancy.sends_repairs() {
        crate::wire::REPAIR_OVERHEAD + 3 - DATA_OVERHEAD
    } else {
        0
    }
}

/// The largest payload whose data packets, and repairs of them, are datagrams of at most
/// `datagram` bytes (UDP's payload), with this protection and redundancy; never below
/// the wire format's least ([`crate::wire::MIN_PAYLOAD`]).
pub fn payload_fitting(datagram: usize, protection_overhead: usize, redundancy: &RedundancyConfig) -> u16 {
    let payload = datagram.saturating_sub(DATA_OVERHEAD + protection_overhead + repairs_longer_by(redundancy));
    payload.clamp(usize::from(crate::wire::MIN_PAYLOAD), usize::from(u16::MAX)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A default payload widens to the same host's datagram, never past what its route
    /// carries; a route off the host only lowers it, and a payload the user chose is never raised.
    #[test]
    fn a_payload_widens_only_for_the_same_host_and_only_as_far_as_its_route() {
        let config = TransportConfig::default();
        // The longest datagram the side sends (a repair is 2 bytes longer than data).
        let datagram_of = |c: &TransportConfig, route: Route| {
            let mut fit = c.clone();
            fit.fit_route(route);
            fit.longest_datagram()
        };
        let loopback = Route { datagram: 65_536 - 28, same_host: true };
        assert_eq!(datagram_of(&config, loopback), SAME_HOST_DATAGRAM);
        // A loopback interface set narrower than an Ethernet frame: what it carries.
        assert_eq!(datagram_of(&config, Route { datagram: 1_000, same_host: true }), 1_000);
        // Off the host: an Ethernet route leaves the payload as it was, a jumbo one too.
        assert_eq!(datagram_of(&config, Route { datagram: 8_972, same_host: false }), ETHERNET_DATAGRAM);
        assert_eq!(datagram_of(&config, Route { datagram: 1_232, same_host: false }), 1_232);
        let chosen = TransportConfig { max_payload: 600, ..config.clone() };
        assert_eq!(chosen.payload_for(loopback), 600);
        let insecure = TransportConfig::default().insecure();
        assert_eq!(datagram_of(&insecure, loopback), SAME_HOST_DATAGRAM);
    }
}
