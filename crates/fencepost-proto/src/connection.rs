//! One side of a connection as a state machine: no I/O, no clock.
//!
//! # Driving a connection
//!
//! A driver (the simulator, the UDP runtime, a test) repeats:
//!
//! 1. feed every datagram that arrived with [`Connection::handle_datagram`];
//! 2. when the clock passes [`Connection::poll_timeout`], call [`Connection::handle_timeout`]
//!    (calling it early or twice is harmless);
//! 3. let the application [`Connection::write`], [`Connection::read`] and [`Connection::close`];
//! 4. call [`Connection::poll_transmit`] until it returns `None`, sending each datagram;
//! 5. drain [`Connection::poll_event`];
//! 6. sleep until [`Connection::poll_timeout`] or the next datagram.

use crate::assembler::{Arrival, Assembler};
use crate::config::{Arq, FenceWidth, SendPolicy, TransportConfig};
use crate::congestion::{AckBatch, Controller, DeliveryRateEstimator, RateSample, SentPacket};
use crate::crypto::{self, AeadProtection, Cipher, ClientHandshake, HandshakeError, Pattern, PublicKey, StaticKey, RESET_TOKEN_LEN};
use crate::disassembler::{Acked, Disassembler, LostBy, SegmentState};
use crate::first_tx::FirstTransmissions;
use crate::protection::{PacketProtection, ProtectionConfig};
use crate::redundancy::{Announcement, NoRedundancy, Redundancy};
use crate::rtt::{RttEstimator, RttHistory};
use crate::stats::ConnectionStats;
use crate::time::{Duration, Instant};
use crate::timer::{Timer, TimerTable};
use crate::send_buffer::ByteSource;
use crate::trace::{LossTrigger, TraceEvent};
use crate::fec;
use crate::ack_thinning::{AckObservation, AckThinning, Sparser};
use crate::wire::{self, Ack, AckFrequency, Body, Close, FarAck, Feedback, Handshake, HandshakePhase, Header, Keepalive, Packet, PacketType, Repair, Reset, ResetReason, SecureHandshake, StatelessReset};
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

/// The floor under what a connection lets the application queue unsent (see
/// `Connection::unsent_limit`) is [`UNSENT_FLOOR_TIME`] of the sending rate, between these:
/// at least one write of a typical application buffer goes in whole while the window is
/// still small ...
const UNSENT_FLOOR_MIN: u64 = 64 * 1024;
/// ... and no more than this (TCP's largest default send buffer, `tcp_wmem`'s third
/// value), which a connection reaches at 670 Mbit/s. So many connections together hold at
/// most [`UNSENT_FLOOR_TIME`] of their joint rate unsent, whatever their number. It was
/// 512 kB, which one connection outgrows anyway (its two windows are more at that rate);
/// a hundred connections sharing 12 Gbit/s over loopback were each held to it, each
/// writer woken every 128 kB, 3-5 thousand wake-ups of the writers' runtime per GB, each
/// interrupting the driver's thread on the same two cores: with 4 MB (and woken at half,
/// [`WRITABLE_SHARE`]) the hundred connections took 0.89x one connection's rate, against
/// 0.79x, in 16 interleaved rounds of 1 GB runs (docs/speed.md).
const UNSENT_FLOOR_MAX: u64 = 4 << 20;
/// On a fast path the writer has this long to come back before the sender runs dry; on a
/// slow one what waits unsent drains in about this long, so a transfer timed to end
/// (`--time`) ends near its time: with a fixed 512 kB floor a 20 s run at 50 kbit/s took
/// 111 s (512 kB drain in 82 s there).
const UNSENT_FLOOR_TIME: Duration = Duration::from_millis(50);

/// A writer that found the send buffer full is woken ([`Event::Writable`]) once this share
/// of what may wait unsent is free again (`Disassembler::unsent_room`), not at the first
/// byte (TCP, too, wakes a writer only once its free space is half of what it has queued,
/// `sk_stream_write_space`). Woken at every ack, each of a hundred bulk writers over
/// loopback came back once per 23 data packets, and each return is a task woken, the
/// endpoint's lock taken and a short write. Half of what may wait unsent (at least a
/// sending window, or 25 ms of the rate) still waits when it is woken, so the sender does
/// not run dry meanwhile; a share of the whole buffer instead would, where what is in
/// flight fills most of it (a window near the buffer's size), keep the writer asleep
/// until the sender had nothing left.
const WRITABLE_SHARE: usize = 2;

/// A connection quiet this long (no packet either way, everything it sent acknowledged,
/// nothing waiting to be sent) gives back what its buffers grew to in the last burst: the
/// send buffer's spare blocks (up to 2 MB), the records' and slots' room, the packets its
/// FEC stage keeps to make repairs from and, if everything received was read, the receive
/// buffer's spares and the packets its FEC decoder keeps to rebuild from. While busy it
/// keeps them, so a bulk transfer or a steady exchange reuses its buffers; after a pause a
/// server holding many connections that each once moved megabytes does not hold that
/// memory too (300 connections idle after echoing 4 MB each: `fencepost serve --echo` at
/// 821 MB without this, 142 MB with it and the driver's `malloc_trim`; 71 MB once the FEC
/// state and the endpoint's shared spares went too; `bench/idle_memory.py`).
const TRIM_AFTER: Duration = Duration::from_secs(1);
/// ... when at least this much would come back: smaller connections (a request and its
/// reply) keep theirs. (Whether it is this much is asked when the timer fires, once a
/// second after the last packet, and after that on each event of the quiet connection.)
const TRIM_FROM_BYTES: usize = 64 * 1024;

/// Copies of the Initial a client's handshake attempt sends at most: one at first, one
/// more for each attempt that went unanswered, up to this.
const MAX_HANDSHAKE_COPIES: u32 = 3;

/// The most probes one retransmission timeout sends past the window.
const MAX_TIMEOUT_PROBES: u64 = 16;
/// The largest packet threshold loss detection grows to on a path that reorders (a large
/// window's worth); reordering deeper than it turns the packet threshold off.
const REORDER_THRESHOLD_MAX: u64 = 1024;
/// Far acks that may follow one ack: with them an ack describes up to this many more
/// bitmaps' worth of sequence numbers past its fence base (see [`FarAck`]).
const MAX_FAR_ACKS: u64 = 3;

/// A far ack to send: it starts at `start`, continues the ack whose fence base was
/// `base`, and it and those after it may number `left`.
#[derive(Clone, Copy, Debug)]
struct FarAckDue {
    start: u64,
    base: u64,
    left: u64,
}

/// The shortest wait for a tail probe (see `update_timers`).
const TAIL_PROBE_FLOOR: Duration = Duration::from_millis(10);

/// Most ack-eliciting packets an ack covers in a request/reply exchange (see `ack_every_now`).
const ALTERNATING_ACK_STRETCH: u32 = 8;

/// How many outstanding packets a retransmission timeout resends as probes: two (RFC 9002's
/// PTO), or on a path that loses a share `p` of packets at random each way as many as make
/// it unlikely (under 5 %) that every probe or the ack it draws is lost, up to
/// [`MAX_TIMEOUT_PROBES`]. At 50 % loss each way a probe comes back one time in four: two
/// probes fail more often than not, the timer doubles, and the last packets of a transfer
/// took seconds (5 MB over 20 Mbit/s, 10 ms: 7.6 s for the last 150 kB, two probes per
/// timeout, the timer backed off to 1 s).
fn timeout_probes(p: f64) -> u64 {
    let round_trip = (1.0 - p.clamp(0.0, 0.95)).powi(2);
    if round_trip >= 1.0 {
        return 2;
    }
    let needed = (0.05f64.ln() / (1.0 - round_trip).ln()).ceil();
    (needed as u64).clamp(2, MAX_TIMEOUT_PROBES)
}

/// Round trips without a loss episode after which a path counts as losing nothing (see
/// `Connection::lost_nothing_lately`).
const QUIET_PATH_ROUNDS: u64 = 16;

/// Probes for a timeout that follows `unanswered` timeouts in a row whose probes drew no
/// ack: RFC 9002's two, doubling with each, as the timer's interval does, up to
/// [`MAX_TIMEOUT_PROBES`]. Every probe of those rounds, or its ack, was lost: the path is
/// losing far more than the random loss a controller models, in a burst. Where a burst is
/// counted in packets (a link layer's error bursts; the Gilbert-Elliott model, which moves
/// between its states per packet) only packets end it, and two per backed-off second
/// took thirty seconds to send a burst of sixty: at 20 Mbit/s with bursts of 20 packets on
/// average (p = 1 %, r = 5 %), three seeds in three reached the idle timeout. Doubling
/// with the timer keeps the probing rate of the first timeout's until the timer's ceiling:
/// after a dead spell measured in time, at most [`MAX_TIMEOUT_PROBES`] per timeout.
fn unanswered_timeout_probes(unanswered: u32) -> u64 {
    2u64.saturating_mul(1 << unanswered.min(8)).min(MAX_TIMEOUT_PROBES)
}

/// Which end opened the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Client: Initial sent, no Accept yet. Server: Accept sent, the client not yet heard from since.
    Handshake,
    /// Data flows; either direction may already be finished.
    Established,
    /// Both directions finished and acknowledged. The connection still answers
    /// the peer's retransmissions until the peer has been silent for the idle timeout.
    Closed,
    /// Closed and quiet: the driver may drop the connection.
    Drained,
    /// Ended by an error (see [`Connection::error`]).
    Lost,
}

/// How long ICMP port unreachable reports must keep coming, with nothing from the peer,
/// before an established client connection ends (see [`Connection::on_unreachable`]):
/// long enough for the peer's packets already on the way to outlast a stale or forged
/// report, far short of the idle timeout a crashed server otherwise held its clients for.
pub const PORT_CLOSED_AFTER: Duration = Duration::from_secs(1);

/// Where an ICMP error says a connection's packets stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unreachable {
    /// The peer's host: nothing listens on that port.
    Port,
    /// A router (its ICMP error) or this host (its refusal to send): no route to the
    /// host, or a filter refused the packets.
    Host,
    /// A router or this host: no route to the network.
    Network,
}

impl Unreachable {
    /// What it means, for the error a connection ends with.
    pub fn reason(self) -> &'static str {
        match self {
            Unreachable::Port => "nothing listens on that port (ICMP port unreachable)",
            Unreachable::Host => "no route to the host, or a filter on the way refused the packets (host unreachable)",
            Unreachable::Network => "the network is unreachable (no route there)",
        }
    }
}

/// Why a connection ended abnormally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionError {
    /// Nothing arrived from the peer for the idle timeout.
    TimedOut { idle: Duration },
    /// The peer reset the connection.
    Reset(ResetReason),
    /// The application reset the connection.
    LocallyReset,
    /// The stream made no progress for this long although data was outstanding: the
    /// peer keeps the connection alive but nothing gets through.
    NoProgress { stalled: Duration },
    /// The handshake could not be set up or finished (a key that does not match, say).
    Handshake(&'static str),
    /// Before the peer answered anything, its host (or a router on the way) said the
    /// packets cannot be delivered there (an ICMP port, host or network unreachable).
    Unreachable(&'static str),
    /// The peer's host said nothing listens on its port any more (ICMP port unreachable,
    /// as a TCP peer's host answers with a reset), and nothing came from the peer for this
    /// long while it kept saying so: the peer's process is gone.
    PortClosed { silent: Duration },
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectionError::TimedOut { idle } => {
                write!(f, "timed out: nothing received from the peer for {:.3} s", idle.as_secs_f64())
            }
            ConnectionError::Reset(reason) => write!(f, "reset by the peer ({reason:?})"),
            ConnectionError::LocallyReset => write!(f, "reset locally"),
            ConnectionError::NoProgress { stalled } => {
                write!(f, "no progress: the stream has not advanced for {:.3} s although data is outstanding", stalled.as_secs_f64())
            }
            ConnectionError::Handshake(why) => write!(f, "handshake failed: {why}"),
            ConnectionError::Unreachable(why) => write!(f, "unreachable: {why}"),
            ConnectionError::PortClosed { silent } => write!(
                f,
                "the peer's port closed: its host says nothing listens there (ICMP port unreachable), and nothing came from the peer for {:.1} s",
                silent.as_secs_f64()
            ),
        }
    }
}

impl std::error::Error for ConnectionError {}

/// Something the application should know about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Connected,
    /// New bytes can be read.
    Readable,
    /// Send-buffer space freed after a `write` took less than it was given.
    Writable,
    /// The peer finished its stream and every byte of it arrived; reads end after the buffered bytes.
    StreamFinished,
    /// Both directions finished gracefully.
    Closed,
    /// The connection ended with an error.
    ConnectionLost(ConnectionError),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// `close` was called: the stream is finished.
    Finished,
    ConnectionLost(ConnectionError),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::Finished => write!(f, "write after close"),
            WriteError::ConnectionLost(e) => write!(f, "connection lost: {e}"),
        }
    }
}

impl std::error::Error for WriteError {}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// Nothing to read yet.
    WouldBlock,
    ConnectionLost(ConnectionError),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::WouldBlock => write!(f, "no data available"),
            ReadError::ConnectionLost(e) => write!(f, "connection lost: {e}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// One datagram written by [`Connection::poll_transmit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub size: usize,
    pub packet_type: PacketType,
}

/// What a connection needs that only its endpoint can give (wire format version 2).
#[derive(Clone)]
pub struct ConnectionSecrets {
    /// Seeds the connection's ephemeral Noise key.
    pub seed: [u8; 32],
    /// This side's stateless-reset token, told to the peer in the handshake.
    pub reset_token: [u8; RESET_TOKEN_LEN],
    /// The endpoint's static key: the server's side of the handshake needs it.
    pub static_key: Option<StaticKey>,
}

impl fmt::Debug for ConnectionSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionSecrets").field("static_key", &self.static_key).finish_non_exhaustive()
    }
}

impl ConnectionSecrets {
    /// Secrets made from a number, for tests and harnesses that drive a connection
    /// without an endpoint. Predictable: never for a connection that needs them secret.
    pub fn from_seed(seed: u64) -> ConnectionSecrets {
        use rand_core::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(seed);
        let mut s = ConnectionSecrets { seed: [0; 32], reset_token: [0; RESET_TOKEN_LEN], static_key: None };
        rng.fill_bytes(&mut s.seed);
        rng.fill_bytes(&mut s.reset_token);
        s.static_key = Some(StaticKey::generate(&mut rng));
        s
    }
}

/// A client's first handshake packet, as its server's endpoint received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    V1(Handshake),
    V2 { src_cid: u32, timestamp: u32, pattern: u8, cipher: u8, noise: Vec<u8>, size: usize },
}

impl Hello {
    /// The client's connection id.
    pub fn src_cid(&self) -> u32 {
        match self {
            Hello::V1(hs) => hs.src_cid,
            Hello::V2 { src_cid, .. } => *src_cid,
        }
    }
}

/// Where a version 2 handshake stands.
enum Secure {
    /// Version 1: plaintext, nothing to do.
    Off,
    /// The client's Initial is out: its Noise message (resent as it is), and the retry token the server gave.
    /// `token_sent_from`: the timestamp of the first Initial that carried `token` (0 until
    /// one has; see the Retry's handling).
    Client { handshake: Box<ClientHandshake>, token: Vec<u8>, retries: u32, sent_timestamps: Vec<u32>, token_sent_from: u32 },
    /// After the Accept: its Noise message, to tell the server's repeats from forgeries.
    ClientDone { accept: Vec<u8> },
    /// The server answered: the Initial's Noise message and the Accept's, resent while the
    /// client repeats its Initial; the secrets, should another Initial replace this one
    /// before the client confirms; how many Initials it answered.
    Server { initial: Vec<u8>, accept: Vec<u8>, secrets: Box<ConnectionSecrets>, answers: u32 },
}

/// Retries a client follows before it stops taking tokens (a server asks once; more are an attacker's).
const MAX_RETRIES: u32 = 4;
/// A client keeps the timestamps of its first this many Initials, and of its latest this
/// many, to recognise the one an answer echoes (see `emit_handshake`).
const SENT_TIMESTAMPS_KEPT: usize = 32;
/// Different Initials a server answers for one connection before the client confirms:
/// a copy with its first message changed can race the real one (pattern NX does not
/// authenticate that message), and the real one must still win; beyond this, the
/// Diffie-Hellman work is not spent again.
const MAX_ANSWERS: u32 = 8;
/// The parameters in a version 2 handshake's Noise payload: (server: its id,) max payload, window, redundancy, reset token.
const CLIENT_PARAMETERS_LEN: usize = 2 + 4 + 1 + RESET_TOKEN_LEN;
const SERVER_PARAMETERS_LEN: usize = 4 + CLIENT_PARAMETERS_LEN;

/// The seed send loop's progress through the fence during one tick.
#[derive(Clone, Copy, Debug, Default)]
struct TickRound {
    cursor: u64,
    limit: u64,
}

pub struct Connection {
    config: Arc<TransportConfig>,
    side: Side,
    state: State,
    local_cid: u32,
    /// 0 until the client learns it from the Accept.
    peer_cid: u32,
    /// Timestamps count microseconds from here.
    epoch: Instant,
    timers: TimerTable,
    events: VecDeque<Event>,
    stats: ConnectionStats,
    error: Option<ConnectionError>,
    trace: Vec<TraceEvent>,
    secure: Secure,
    /// Our stateless-reset token (version 2), told to the peer in the handshake.
    reset_token: [u8; RESET_TOKEN_LEN],
    peer_reset_token: Option<[u8; RESET_TOKEN_LEN]>,
    /// The server's static key, as the handshake proved it (version 2).
    peer_static_key: Option<PublicKey>,

    // ---- send side ----
    disassembler: Disassembler,
    controller: Box<dyn Controller>,
    delivery: DeliveryRateEstimator,
    latest_rate_sample: Option<RateSample>,
    redundancy: Box<dyn Redundancy>,
    /// What the peer's handshake said about its redundancy (none until it arrives).
    peer_redundancy: Announcement,
    protection: Box<dyn PacketProtection>,
    /// Room for a datagram opened by a protection that does not work in place.
    open_scratch: Vec<u8>,
    rtt: RttEstimator,
    rtt_history: RttHistory,
    /// min(our payload size, the peer's).
    payload_size: usize,
    peer_fence_base: u64,
    peer_window: u64,
    /// Sender: the fence base of the latest ack taken, and the first sequence number
    /// neither it nor the far acks taken after it describe; a far ack counts only as
    /// their continuation.
    described_base: u64,
    described_to: u64,
    /// When the packet the latest ack echoes was sent: the far acks that continue it were
    /// written in the same round, on the same receipt, and are judged by it.
    described_echo: Option<Instant>,
    rto_backoff: u32,
    /// Start of the current congestion episode: losses of packets sent before it belong to it.
    recovery_start: Option<Instant>,
    /// `window` recovery: the sequence number that ends NewReno-style recovery.
    window_recovery_point: Option<u64>,
    duplicate_acks: u32,
    /// When an ack last acknowledged something new (RFC 6298 5.3 restarts the timer then).
    last_ack_progress: Instant,
    /// When the retransmission timer last expired (RFC 6298 5.6 restarts it then, backed off).
    last_timeout: Instant,
    /// A keepalive went out as a tail probe since the latest ack progress (see `update_timers`).
    tail_probed: bool,
    /// When the tail probe is due, if one is (see `update_timers`): the keepalive timer is
    /// the earlier of it and the idle keepalive.
    tail_probe_at: Option<Instant>,
    /// The data packet being sent carries new data into a flight already going (see
    /// `poll_transmit`).
    new_into_flight: bool,
    /// Something the timeout is worked out from moved with no `update_timers` since (the
    /// hold allowed for the peer's acks, when an ack frequency request leaves): the next
    /// send works out every timer.
    timers_stale: bool,
    /// Probe packets a retransmission timeout may send past the congestion window (RFC 9002 6.2.4).
    probe_budget: u32,
    /// What this timeout's probes resent, in order: when the tail holds fewer packets than
    /// the probes the loss calls for, the rest of the budget goes to copies of these.
    probes_sent: Vec<u64>,
    probe_copy_cursor: usize,
    /// This timeout's probes carry new data rather than resend (a first timeout on a path
    /// that had lost nothing lately).
    probe_with_new_data: bool,
    /// This timeout's probes end in copies of the packets it resent though the stream goes on
    /// (see `on_retransmission_timeout`, a burst).
    copying_probes_mid_stream: bool,
    /// What the handshake suggests the path loses each way (see `establish`): the loss the
    /// timeouts' probes allow for until the controller or the peer's packets say more.
    handshake_loss: f64,
    /// Loss-detection tolerance for reordering; grows when a retransmission proves spurious.
    reorder_threshold: u64,
    time_threshold: f64,
    /// The path reorders more than [`REORDER_THRESHOLD_MAX`] packets deep: no packet threshold.
    time_only_loss_detection: bool,
    last_ack_eliciting_sent: Instant,
    last_handshake_sent: Instant,
    handshake_due: bool,
    /// Client: further copies of the Initial this attempt sends (see [`MAX_HANDSHAKE_COPIES`]).
    handshake_copies: u32,
    keepalive_due: bool,
    reset_due: Option<ResetReason>,
    tick: TickRound,
    last_sampled_echo: u32,
    write_blocked: bool,
    /// (our lowest unacknowledged packet, the peer's fence base at us) when either last moved.
    progress_position: (u64, u64),
    last_progress: Instant,

    // ---- receive side ----
    assembler: Assembler,
    ack_now: bool,
    /// An ack due by count that waits for our next data packet (see `ack_coalesce`).
    ack_deferred: bool,
    /// We sent a data packet since the peer's latest one arrived.
    data_sent_since_rx: bool,
    /// ... and had when the peer's latest arrived: its packets alternate with ours.
    peer_alternates: bool,
    eliciting_since_ack: u32,
    highest_rx_seq: Option<u64>,
    /// Timestamp of the latest ack-eliciting packet, echoed in acks, and when it arrived.
    last_rx_timestamp: u32,
    last_rx_time: Instant,
    last_rx_any: Instant,
    /// When the first ICMP port unreachable since the peer was last heard from came (see
    /// [`Connection::on_unreachable`]).
    port_refused_since: Option<Instant>,
    /// The last packet either way when the buffers were last given back (see [`TRIM_AFTER`]):
    /// the timer is set again only once there has been a packet since (else, with bytes left
    /// unread, it would fire again at once).
    trimmed_after: Instant,
    /// The last packet as of when the timer was last set without asking how much memory
    /// would come back (see `update_timers`).
    trim_armed_after: Instant,
    /// Bytes given back since [`Connection::take_given_back`] last asked.
    given_back: usize,
    /// `fence_base + window` as last advertised.
    advertised_edge: u64,
    /// The receive window held below the buffer's after this host's socket overflowed
    /// (see [`Connection::on_socket_overflow`]); `None` when nothing holds it.
    socket_cap: Option<SocketCap>,
    bitmap_scratch: Vec<u8>,
    /// Receiver: the far ack due next, if the last ack left packets held beyond its bitmap.
    far_ack_next: Option<FarAckDue>,
    readable_signalled: bool,
    finish_signalled: bool,
    /// Rebuilds lost data from the peer's repair packets; made when the handshake says the
    /// peer sends them (and this side takes them), so it holds every source packet from the first.
    fec_decoder: Option<Box<fec::Decoder>>,
    /// The decoder keeps source packets numbered below this: the first [`FEC_KEEP_AT_START`],
    /// and [`FEC_KEEP_AFTER`] past the latest repair. An adaptive peer sends repairs only
    /// after loss (or at a stream's start), and the default's none to a transfer, so a
    /// receiver copies nothing when none come: copying every packet cost a third of a
    /// loopback receiver's CPU, and at 10 % drop on a fast path a third of its goodput.
    /// The first repairs after a quiet spell cover packets not kept and go unused.
    fec_keep_until: u64,
    /// The highest source packet not kept that the decoder has not been told of yet: it
    /// hears of it only before its next use, so a receiver that keeps nothing does not
    /// reach its decoder per packet (with 100 connections, a cold cache line each time).
    fec_unkept: Option<u64>,
    /// The decoder was given a packet or repair since it last let go of what it held.
    /// The first packet past what is kept then lets go at once (see `on_data`); a flag
    /// here, so the packets after it do not reach the decoder either.
    fec_holds: bool,
    /// Data packets the peer sent for the first time, by sequence number, and how many of
    /// them went missing: what [`Feedback`] reports.
    first_transmissions: FirstTransmissions,
    /// The first transmissions expected when feedback last left; feedback is due every [`FEEDBACK_EVERY`] packets.
    feedback_sent_at: u64,
    /// The first transmissions missing when feedback last left.
    feedback_missing_at: u64,
    /// When our latest ack or data packet was written: feedback due then goes right behind
    /// it, in the same send (see `poll_transmit`).
    last_ride: Option<Instant>,
    /// Losses already told to the redundancy stage.
    losses_reported: u64,
    /// Ack frequency, data sender's side: the packets per ack and the longest hold last
    /// asked of the peer (its own `ack_every` and maximum ack delay until asked; a zero
    /// hold leaves the peer's own), the number of the next request, and a request to send.
    ack_frequency_asked: (u16, Duration),
    ack_frequency_next: u32,
    ack_frequency_due: Option<(u16, Duration)>,
    /// The longest hold the peer may still apply: the larger of the last two asked (a
    /// request may be lost or overtaken). The retransmission timeout allows for it.
    ack_hold_allowed: Duration,
    /// Asks for sparser acks where the acks' own path limits the rate (`ack_thinning`).
    ack_thinning: AckThinning,
    /// Data receiver's side: the peer's latest request (its number, packets per ack, the
    /// longest hold; zero for our own `max_ack_delay`).
    peer_ack_frequency: Option<(u32, u16, Duration)>,
}

/// A receive window held for the socket's sake: the most packets it offers, and when that
/// last moved (see [`Connection::on_socket_overflow`]).
#[derive(Clone, Copy, Debug)]
struct SocketCap {
    packets: u64,
    moved_at: Instant,
}

/// The least a window held for the socket's sake offers: a few GSO batches.
const SOCKET_CAP_MIN: u64 = 16;
/// A held window grows by this share once per round trip, at least
/// [`SOCKET_CAP_GROWTH_SPACING`] apart, while the sender fills it and the socket does not
/// overflow again, and is let go once it reaches the buffer's own: from the least to a
/// 10,000-packet window in about twenty steps.
const SOCKET_CAP_GROWTH_INVERSE: u64 = 4;
/// The least time between two steps of a held window's growth. On loopback a round trip
/// is tens of microseconds, far shorter than the scheduler's stalls of a busy receiver that
/// overflow its socket: grown every millisecond, one connection's window was back above
/// what its 8 MiB socket held within a few, and it overflowed again 69 times in a 1 GB
/// run (3,000 packets resent).
const SOCKET_CAP_GROWTH_SPACING: Duration = Duration::from_millis(10);

/// Data packets between two feedback packets to a peer that sends repairs, while packets go missing.
const FEEDBACK_EVERY: u64 = 32;
/// The same in a clean spell (no repair for a while, nothing missing since the last): the peer
/// learns nothing new from each, and at 32 they were two thirds as many packets as the acks.
const FEEDBACK_EVERY_CLEAN: u64 = 256;
/// Source packets a decoder keeps to rebuild from (the longest repair span the stages send, and some).
const FEC_DECODER_KEEP: usize = 512;
/// Source packets kept from a connection's start for a peer with a fixed code or a stage of
/// its own: repairs from the first packets on, at a rate this side does not know.
const FEC_KEEP_AT_START: u64 = 128;
/// The same for a peer with this crate's adaptive code, which sends repairs at the start only
/// to a stream (one per three packets at the default budget, one per `1 / budget` at lower
/// ones, each over the eight packets before it) and none to a bulk transfer until loss is
/// measured. The first repair that arrives keeps what follows (`FEC_KEEP_AFTER`), so 32
/// is enough while one of the first ten such repairs gets through; each kept packet is a
/// copy in fresh memory, and 128 of them per connection, for transfers no repair ever
/// came to, cost a server 100 concurrent connections a tenth of a 1 GB loopback
/// aggregate (18 MB of page faults at the start, when the server's thread is the bottleneck).
const FEC_KEEP_AT_START_ADAPTIVE: u64 = 32;
/// Source packets kept after the latest repair.
const FEC_KEEP_AFTER: u64 = 1024;

/// What one symbol a decoder holds is charged to the endpoint's buffer budget: the
/// largest a source symbol can be (a payload, its length and the FIN flag), which a
/// repair this side takes cannot exceed either.
fn fec_symbol_bytes(config: &TransportConfig) -> usize {
    config.max_payload as usize + 3
}
/// A fast data sender asks for an ack per this share of the packets in flight: eight acks
/// per flight keep the window moving and the rate sampled.
const ACK_FREQUENCY_SHARE: u64 = 8;
/// The most packets per ack a sender asks for: at 32, tolerant took 4 % longer over a clean
/// simulated 1 Gbit/s, 10 ms path; at 16 it takes as long as with an ack per two packets.
const ACK_FREQUENCY_MAX: u64 = 16;
/// Packets per second (a flight over the RTT) from which a sender asks for fewer acks even
/// when its controller wants every ack: about 600 Mbit/s of full-sized packets, where an
/// ack per two packets is 25,000 a second.
const ACK_FREQUENCY_MIN_RATE: u64 = 50_000;

/// The longest a receiver holds an ack whatever its peer asks: beyond it a sender would
/// wait more than a quarter second to hear of a tail packet.
const MAX_ACK_HOLD: Duration = Duration::from_millis(250);

/// Whether an ack-frequency request numbered `sequence` is newer than the latest taken:
/// requests may arrive out of order, and numbers compare in serial-number order (they wrap).
fn newer_request(latest: Option<u32>, sequence: u32) -> bool {
    latest.is_none_or(|latest| (sequence.wrapping_sub(latest) as i32) > 0)
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("side", &self.side)
            .field("state", &self.state)
            .field("local_cid", &format_args!("{:08x}", self.local_cid))
            .field("peer_cid", &format_args!("{:08x}", self.peer_cid))
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn new(config: Arc<TransportConfig>, side: Side, now: Instant, local_cid: u32, peer_cid: u32, secrets: &ConnectionSecrets) -> Self {
        let continuous = config.send_policy == SendPolicy::Continuous;
        let mss = config.max_datagram() as u64;
        let mut timers = TimerTable::default();
        timers.set(Timer::Idle, now + config.idle_timeout);
        if let SendPolicy::Tick { interval } = config.send_policy {
            timers.set(Timer::Tick, now + interval);
        }
        let mut assembler = Assembler::new(config.recv_buffer, config.max_payload as usize);
        assembler.allow_growth_to(config.recv_buffer_max);
        Connection {
            side,
            state: State::Handshake,
            local_cid,
            peer_cid,
            // One microsecond back so that no timestamp we send is 0, which means "none".
            epoch: now - Duration::from_micros(1),
            timers,
            events: VecDeque::new(),
            stats: ConnectionStats::default(),
            error: None,
            trace: Vec::new(),
            secure: Secure::Off,
            reset_token: secrets.reset_token,
            peer_reset_token: None,
            peer_static_key: None,
            disassembler: Disassembler::new(config.send_buffer, config.packet_per_write, continuous)
                .with_protection_overhead(config.protection.overhead()),
            controller: config.controller.build(mss),
            delivery: DeliveryRateEstimator::default(),
            latest_rate_sample: None,
            redundancy: config.redundancy.build(),
            peer_redundancy: Announcement::from_byte(0),
            protection: config.protection.build(side),
            open_scratch: Vec::new(),
            rtt: RttEstimator::new(config.initial_rtt),
            rtt_history: RttHistory::default(),
            payload_size: config.max_payload as usize,
            peer_fence_base: 0,
            peer_window: 1,
            described_base: 0,
            described_to: 0,
            described_echo: None,
            rto_backoff: 0,
            recovery_start: None,
            window_recovery_point: None,
            duplicate_acks: 0,
            last_ack_progress: now,
            last_timeout: now,
            tail_probed: false,
            tail_probe_at: None,
            new_into_flight: false,
            timers_stale: false,
            probe_budget: 0,
            probes_sent: Vec::new(),
            probe_copy_cursor: 0,
            probe_with_new_data: false,
            copying_probes_mid_stream: false,
            handshake_loss: 0.0,
            reorder_threshold: config.reorder_threshold,
            time_threshold: config.time_threshold,
            time_only_loss_detection: false,
            last_ack_eliciting_sent: now,
            last_handshake_sent: now,
            handshake_due: true,
            handshake_copies: 0,
            keepalive_due: false,
            reset_due: None,
            tick: TickRound::default(),
            last_sampled_echo: 0,
            write_blocked: false,
            progress_position: (0, 0),
            last_progress: now,
            advertised_edge: assembler.window() as u64,
            socket_cap: None,
            assembler,
            ack_now: false,
            ack_deferred: false,
            data_sent_since_rx: false,
            peer_alternates: false,
            eliciting_since_ack: 0,
            highest_rx_seq: None,
            last_rx_timestamp: 0,
            last_rx_time: now,
            last_rx_any: now,
            port_refused_since: None,
            trimmed_after: now,
            trim_armed_after: now,
            given_back: 0,
            bitmap_scratch: Vec::new(),
            far_ack_next: None,
            readable_signalled: false,
            finish_signalled: false,
            fec_decoder: None,
            fec_keep_until: FEC_KEEP_AT_START,
            fec_unkept: None,
            fec_holds: false,
            first_transmissions: FirstTransmissions::default(),
            feedback_sent_at: 0,
            feedback_missing_at: 0,
            last_ride: None,
            losses_reported: 0,
            ack_frequency_asked: (u16::try_from(config.ack_every).unwrap_or(u16::MAX), Duration::ZERO),
            ack_frequency_next: 0,
            ack_frequency_due: None,
            ack_hold_allowed: Duration::ZERO,
            ack_thinning: AckThinning::default(),
            peer_ack_frequency: None,
            config,
        }
    }

    /// Opens a connection: the first `poll_transmit` yields the handshake Initial.
    pub fn client(config: Arc<TransportConfig>, now: Instant, local_cid: u32, secrets: &ConnectionSecrets) -> Self {
        let mut conn = Connection::new(config, Side::Client, now, local_cid, 0, secrets);
        if let Some(noise) = conn.config.protection.noise() {
            let mut parameters = Vec::with_capacity(CLIENT_PARAMETERS_LEN);
            parameters.extend_from_slice(&conn.config.max_payload.to_be_bytes());
            parameters.extend_from_slice(&conn.assembler.window().to_be_bytes());
            parameters.push(conn.our_redundancy().to_byte());
            parameters.extend_from_slice(&conn.reset_token);
            match ClientHandshake::start(noise, local_cid, secrets.seed, &parameters) {
                Ok(handshake) => conn.secure = Secure::Client { handshake: Box::new(handshake), token: Vec::new(), retries: 0, sent_timestamps: Vec::new(), token_sent_from: 0 },
                Err(e) => conn.lose(ConnectionError::Handshake(e.0)),
            }
        }
        conn
    }

    /// Answers a client's Initial: the first `poll_transmit` yields the Accept. A version 2
    /// Initial whose Noise message does not authenticate, or that the configuration does
    /// not speak, creates nothing.
    pub fn server(config: Arc<TransportConfig>, now: Instant, local_cid: u32, hello: &Hello, secrets: &ConnectionSecrets) -> Result<Self, HandshakeError> {
        let mut conn = Connection::new(config, Side::Server, now, local_cid, hello.src_cid(), secrets);
        match hello {
            Hello::V1(initial) => {
                if conn.config.protection.noise().is_some() {
                    return Err(HandshakeError("a plaintext (version 1) Initial to a protected endpoint"));
                }
                conn.take_handshake_parameters(initial.max_payload, initial.window, initial.redundancy);
                conn.last_rx_timestamp = initial.timestamp;
                conn.stats.bytes_received += wire::HANDSHAKE_LEN as u64;
            }
            Hello::V2 { timestamp, pattern, cipher, noise, size, .. } => {
                if conn.config.protection.noise().is_none() {
                    return Err(HandshakeError("a protected (version 2) Initial to a plaintext endpoint"));
                }
                conn.answer_initial(*pattern, *cipher, noise, secrets)?;
                conn.last_rx_timestamp = *timestamp;
                conn.stats.bytes_received += *size as u64;
            }
        }
        conn.last_rx_time = now;
        conn.stats.packets_received += 1;
        Ok(conn)
    }

    /// The server's side of a version 2 handshake: reads the Initial's Noise message and
    /// writes the Accept's, and takes the keys. Until the client's first protected packet
    /// confirms them, a different Initial from the same address and id may replace them
    /// (see `handle_secure_handshake`).
    fn answer_initial(&mut self, pattern: u8, cipher: u8, noise: &[u8], secrets: &ConnectionSecrets) -> Result<(), HandshakeError> {
        let pattern = Pattern::from_u8(pattern).ok_or(HandshakeError("unknown handshake pattern"))?;
        let cipher = Cipher::from_u8(cipher).ok_or(HandshakeError("unknown cipher"))?;
        let key = secrets.static_key.as_ref().ok_or(HandshakeError("the server has no static key"))?;
        let mut parameters = Vec::with_capacity(SERVER_PARAMETERS_LEN);
        parameters.extend_from_slice(&self.local_cid.to_be_bytes());
        parameters.extend_from_slice(&self.config.max_payload.to_be_bytes());
        parameters.extend_from_slice(&self.assembler.window().to_be_bytes());
        parameters.push(self.our_redundancy().to_byte());
        parameters.extend_from_slice(&self.reset_token);
        let (client, accept, keys) = crypto::server_handshake(key, pattern, cipher, self.peer_cid, secrets.seed, noise, |_| parameters)?;
        let (max_payload, window, redundancy, token) = read_parameters(&client).ok_or(HandshakeError("the client's parameters do not parse"))?;
        self.take_handshake_parameters(max_payload, window, redundancy);
        self.peer_reset_token = Some(token);
        self.protection = Box::new(self.packet_protection(cipher, &keys, false));
        let answers = match &self.secure {
            Secure::Server { answers, .. } => answers + 1,
            _ => 1,
        };
        self.secure = Secure::Server { initial: noise.to_vec(), accept, secrets: Box::new(secrets.clone()), answers };
        Ok(())
    }

    // ---- getters ----

    /// See [`crate::PacketProtection::opened_up_to`]: rises when a packet of the peer's
    /// opens that is newer than any before it.
    pub fn opened_up_to(&self) -> u64 {
        self.protection.opened_up_to()
    }

    pub fn side(&self) -> Side {
        self.side
    }
    pub fn state(&self) -> State {
        self.state
    }
    /// The earliest instant a timer of its own could end the connection while it stays
    /// established: the idle timeout, or the progress timeout counted from the last
    /// progress (whether or not that timer is armed now). What happens before then only
    /// postpones it; only a packet from the peer (a reset) ends it sooner. A parallel
    /// simulation runs ahead only where neither end of a flow can end it this way.
    pub fn fatal_deadline(&self) -> Option<Instant> {
        let idle = self.timers.get(Timer::Idle);
        let progress = self.config.progress_timeout.map(|limit| self.last_progress + limit);
        match (idle, progress) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    pub fn local_cid(&self) -> u32 {
        self.local_cid
    }
    pub fn peer_cid(&self) -> u32 {
        self.peer_cid
    }
    pub fn config(&self) -> &TransportConfig {
        &self.config
    }
    /// Lends the receive side `spares` (an endpoint's emptied payload buffers; `room`, the
    /// bytes they and what the endpoint holds may come to) or, with `None`, takes them
    /// back: see [`Assembler::swap_spares`].
    pub(crate) fn swap_receive_spares(&mut self, spares: &mut Vec<Vec<u8>>, room: Option<usize>) {
        self.assembler.swap_spares(spares, room);
    }

    /// Received data this connection holds is charged to `budget` (its endpoint's) from now on.
    pub fn set_buffer_budget(&mut self, budget: std::sync::Arc<crate::assembler::BufferBudget>) {
        if let Some(decoder) = self.fec_decoder.as_mut() {
            decoder.set_budget(budget.clone(), fec_symbol_bytes(&self.config));
        }
        self.assembler.set_budget(budget);
    }
    /// Bytes the FEC decoder's kept packets, pending repairs and spare buffers take (their
    /// capacities; none without a decoder).
    pub fn repair_state_bytes(&self) -> usize {
        self.fec_decoder.as_ref().map_or(0, |d| d.held_bytes())
    }
    /// Received bytes held in memory (readable, and out of order).
    pub fn buffered_bytes(&self) -> usize {
        self.assembler.buffered_bytes()
    }
    /// The packets are protected (wire format version 2).
    pub fn is_protected(&self) -> bool {
        !matches!(self.secure, Secure::Off)
    }
    /// The server's static key, once the handshake proved it (client side, version 2).
    pub fn peer_static_key(&self) -> Option<PublicKey> {
        self.peer_static_key
    }
    pub fn stats(&self) -> &ConnectionStats {
        &self.stats
    }
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }
    /// RTT samples in microseconds, if `record_rtt_samples` is on: all of them, or an
    /// evenly spaced subset once more than [`RttHistory::LIMIT`] arrived.
    pub fn rtt_samples(&self) -> &[u32] {
        self.rtt_history.samples()
    }
    /// Every sample taken, its count and mean (whether kept or not, and whether
    /// `record_rtt_samples` is on or not).
    pub fn rtt_history(&self) -> &RttHistory {
        &self.rtt_history
    }
    pub fn congestion_window(&self) -> u64 {
        self.controller.window()
    }

    /// What may be in flight: the controller's window, plus, where timers fire late (real
    /// sockets), what the pacer releases in one timer granularity. The controller sizes its
    /// window from the path's smallest RTT; a driver that wakes once a millisecond can only
    /// refill the path that often, so at 8 Gbit/s on a 0.1 ms path the window alone would
    /// hold the sender to a tenth of the rate. Zero in the simulator.
    fn sending_window(&self) -> u64 {
        let granularity = self.config.timer_granularity;
        let tick = match self.controller.pacing_rate() {
            Some(rate) if granularity > Duration::ZERO => crate::time::mul_div(rate, granularity.total_micros(), 1_000_000) as u64,
            _ => 0,
        };
        self.controller.window() + tick
    }
    pub fn ssthresh(&self) -> Option<u64> {
        self.controller.ssthresh()
    }
    pub fn bytes_in_flight(&self) -> u64 {
        self.disassembler.bytes_in_flight()
    }
    /// The latest valid delivery-rate sample (draft-cheng-iccrg-delivery-rate-estimation).
    pub fn latest_rate_sample(&self) -> Option<&RateSample> {
        self.latest_rate_sample.as_ref()
    }
    /// Stream bytes the peer acknowledged without a gap: what its application can have read.
    pub fn stream_bytes_acknowledged(&self) -> u64 {
        self.disassembler.acknowledged_bytes()
    }
    /// Bytes the peer has acknowledged so far (wire bytes of data and FIN packets).
    pub fn bytes_delivered(&self) -> u64 {
        self.delivery.delivered()
    }
    /// Payload bytes per data packet after the handshake settled on the smaller of both sides'.
    pub fn payload_size(&self) -> usize {
        self.payload_size
    }
    pub fn error(&self) -> Option<&ConnectionError> {
        self.error.as_ref()
    }
    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }
    /// Closed gracefully (draining or drained).
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed | State::Drained)
    }
    /// Nothing more will happen: the driver may drop the connection.
    pub fn is_drained(&self) -> bool {
        matches!(self.state, State::Drained | State::Lost) && self.reset_due.is_none()
    }
    /// Room in the send buffer.
    pub fn send_capacity(&self) -> usize {
        if self.disassembler.fin_requested() { 0 } else { self.disassembler.free_space() }
    }
    /// How many bytes a `write` would take now: [`Connection::send_capacity`] under the
    /// unsent limit of this moment (a write recomputes it; the stored one dates from the
    /// last write or ack).
    pub fn write_room(&self) -> usize {
        if self.disassembler.fin_requested() { 0 } else { self.disassembler.free_space_under(self.unsent_limit()) }
    }
    pub fn readable_len(&self) -> usize {
        self.assembler.readable_len()
    }
    /// The peer finished its stream (its FIN and everything before it arrived): once what is
    /// readable has been read, a read returns `Ok(0)`.
    pub fn peer_finished(&self) -> bool {
        self.assembler.is_finished()
    }
    /// What [`Connection::poll_transmit`] does before its data path, read without doing
    /// it: `Some(true)` where it would send something there (a reset, a repair, a
    /// handshake, an ack, a request, feedback, a keepalive), `Some(false)` where it would
    /// return `None` at once, `None` where it would go on to the data path. Without `now`,
    /// feedback that is due counts as sent (it rides only behind a packet sent in the same
    /// instant, which `now` tells).
    fn before_data(&self, now: Option<Instant>) -> Option<bool> {
        if self.reset_due.is_some() {
            return Some(true);
        }
        if matches!(self.state, State::Drained | State::Lost) {
            return Some(false);
        }
        if self.redundancy.has_repair() || self.handshake_due {
            return Some(true);
        }
        if self.state == State::Handshake {
            return Some(false);
        }
        if self.ack_now || self.far_ack_next.is_some() || self.ack_frequency_due.is_some() || self.keepalive_due {
            return Some(true);
        }
        let rides = now.is_none_or(|now| self.last_ride == Some(now));
        if rides && self.fec_decoder.is_some() && self.peer_redundancy.adapts() && self.feedback_due() {
            return Some(true);
        }
        None
    }

    /// Whether [`Connection::poll_transmit`] might send something or mark anything, seen
    /// without `now`; `false` only where every branch of it would return `None` and leave
    /// the connection as it is. The endpoint polls a connection touched by a datagram or
    /// a timer only if so: a receiver whose ack is not yet due (nine data packets in ten
    /// at line rate) is then not polled at all (each such poll, with the endpoint's
    /// bookkeeping around it, was about 2 % of a simulated transfer).
    pub(crate) fn may_transmit(&self) -> bool {
        if let Some(sends) = self.before_data(None) {
            return sends;
        }
        // The data path of a side that has sent no data yet: with nothing to send, it only
        // marks the delivery rate app-limited, and the redundancy stage too (which takes
        // no mark before the first data packet).
        !(self.config.send_policy == SendPolicy::Continuous
            && self.stats.data_packets_sent == 0
            && self.probe_budget == 0
            && !self.disassembler.has_retransmissions()
            && !self.disassembler.has_new()
            && self.delivery.app_limited_as(self.disassembler.bytes_in_flight()))
    }

    /// Right after a poll at `now` that sent: whether another poll at `now` might send.
    /// `false` only where the pacer holds back the data it would send and nothing else is
    /// due; the pacing timer is then set here, as that poll would have set it. The pacer
    /// is asked first, the one question most answers end at.
    pub(crate) fn may_send_again(&mut self, now: Instant) -> bool {
        if self.config.send_policy != SendPolicy::Continuous || self.probe_budget > 0 {
            return true;
        }
        let Some(allowed_from) = self.paced_until(now) else { return true };
        if self.before_data(Some(now)).is_some() || !(self.disassembler.has_retransmissions() || self.new_data_allowed()) {
            return true;
        }
        self.timers.set(Timer::Pacing, allowed_from);
        false
    }

    /// Something is due to be sent at once (an ack, a handshake, a probe): a driver
    /// that sleeps between inputs should call `poll_transmit` now.
    pub fn wants_transmit(&self) -> bool {
        self.ack_now
            || self.far_ack_next.is_some()
            || self.handshake_due
            || self.keepalive_due
            || self.reset_due.is_some()
            || self.redundancy.has_repair()
            || self.ack_frequency_due.is_some()
    }

    /// An ack is due at once (one for the peer's FIN among them): the next `poll_transmit`
    /// writes it. An application told that the connection closed may exit; a driver keeps
    /// it waiting until this ack is on the wire, or the peer resends its FIN to nobody.
    pub fn owes_ack(&self) -> bool {
        // A drained or lost connection sends nothing more, whatever it still owed.
        (self.ack_now || self.ack_deferred) && !matches!(self.state, State::Drained | State::Lost)
    }

    /// Whether the peer's data packets alternate with ours: a request/reply exchange, not
    /// a transfer one way.
    pub fn peer_alternates(&self) -> bool {
        self.peer_alternates
    }

    /// Written data (or the FIN) is waiting for its first transmission. While it is, the
    /// connection is held back by its window, pacer or peer, and what releases it (an ack,
    /// a timer) reaches the driver anyway: a write then needs no wake-up of its own.
    pub fn has_unsent_data(&self) -> bool {
        self.disassembler.has_new()
    }

    /// Takes the trace events recorded since the last call.
    pub fn drain_trace(&mut self) -> Vec<TraceEvent> {
        std::mem::take(&mut self.trace)
    }

    // ---- inputs ----

    /// Handles one datagram addressed to this connection. Malformed, foreign and
    /// contradictory packets are counted in [`ConnectionStats`] and dropped.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) {
        if self.handled_unsealed(now, datagram) {
            return;
        }
        let mut scratch = std::mem::take(&mut self.open_scratch);
        let opened = self.protection.open(datagram, &mut scratch);
        self.handle_opened(now, opened);
        self.open_scratch = scratch;
    }

    /// [`Connection::handle_datagram`] for a datagram the caller lets it overwrite: packet
    /// protection opens it where it lies, without a copy.
    pub fn handle_datagram_in_place(&mut self, now: Instant, datagram: &mut [u8]) {
        if self.handled_unsealed(now, datagram) {
            return;
        }
        let mut scratch = std::mem::take(&mut self.open_scratch);
        let opened = self.protection.open_in_place(datagram, &mut scratch);
        self.handle_opened(now, opened);
        self.open_scratch = scratch;
    }

    /// Handles (or drops) a datagram that packet protection does not open: malformed,
    /// of the wrong version, or a handshake or reset, which carry their own proof.
    /// Returns false for a sealed packet, which the caller opens.
    fn handled_unsealed(&mut self, now: Instant, datagram: &[u8]) -> bool {
        let Ok(header) = Header::peek(datagram) else {
            self.stats.malformed_packets += 1;
            return true;
        };
        if header.version != self.config.protection.wire_version() {
            // Plaintext packets never reach a protected connection, nor the reverse.
            self.stats.unauthenticated_packets += 1;
            return true;
        }
        if header.version == wire::VERSION_2 {
            match header.packet_type {
                PacketType::Handshake => self.handle_secure_handshake(now, datagram),
                PacketType::StatelessReset => self.handle_stateless_reset(now, datagram),
                _ => return false,
            }
        } else if header.packet_type == PacketType::Handshake {
            self.handle_plain_datagram(now, datagram);
        } else {
            return false;
        }
        true
    }

    fn handle_opened(&mut self, now: Instant, opened: Result<&[u8], crate::ProtectionError>) {
        match opened {
            Ok(plain) => self.handle_plain_datagram(now, plain),
            Err(e) if e == crate::ProtectionError::REPLAYED => self.stats.replayed_packets += 1,
            Err(_) => self.stats.unauthenticated_packets += 1,
        }
    }

    /// A version 2 handshake packet: a repeated Initial (server), a Retry or the Accept (client).
    fn handle_secure_handshake(&mut self, now: Instant, datagram: &[u8]) {
        let Ok(packet) = SecureHandshake::parse(datagram) else {
            self.stats.malformed_packets += 1;
            return;
        };
        if matches!(self.state, State::Drained | State::Lost) {
            return;
        }
        let addressed_here = match packet {
            SecureHandshake::Initial { src_cid, .. } => self.side == Side::Server && src_cid == self.peer_cid,
            SecureHandshake::Retry { dst_cid, .. } | SecureHandshake::Accept { dst_cid, .. } => self.side == Side::Client && dst_cid == self.local_cid,
        };
        if !addressed_here {
            self.stats.foreign_packets += 1;
            return;
        }
        let genuine = match (packet, &mut self.secure) {
            (SecureHandshake::Initial { timestamp, pattern, cipher, noise, .. }, Secure::Server { initial, secrets, answers, .. }) => {
                if initial.as_slice() != noise {
                    // Another first message for the same id and address. Before the client
                    // confirms, it may be the real one that a tampered copy beat here.
                    if self.state != State::Handshake || *answers >= MAX_ANSWERS {
                        false
                    } else {
                        let secrets = secrets.clone();
                        match self.answer_initial(pattern, cipher, noise, &secrets) {
                            Ok(()) => {
                                self.note_ack_eliciting(now, timestamp);
                                self.handshake_due = true;
                                true
                            }
                            Err(_) => false,
                        }
                    }
                } else if self.state == State::Handshake {
                    // A repeat of the Initial we answered: our Accept was lost.
                    self.note_ack_eliciting(now, timestamp);
                    self.handshake_due = true;
                    true
                } else {
                    // The client is past its handshake: a copy, late or replayed.
                    self.stats.replayed_packets += 1;
                    return;
                }
            }
            (SecureHandshake::Retry { echo_timestamp, token, .. }, Secure::Client { token: ours, retries, sent_timestamps, token_sent_from, .. }) => {
                // A Retry answers one Initial, whose timestamp it echoes. Once we hold a token,
                // the answer to an Initial sent before that token went out is stale: those
                // Initials were sent without it, and the server answers each. On a slow link
                // the repeats sent before the first answer queue up (seconds of them at 2.4
                // kbit/s), and taking each of their Retries as a new token, with a new Initial
                // for it, kept the queue long enough for every token to expire on its way:
                // the handshake never completed.
                let stale = !ours.is_empty() && (*token_sent_from == 0 || (echo_timestamp.wrapping_sub(*token_sent_from) as i32) < 0);
                let echo_is_ours = sent_timestamps.contains(&echo_timestamp);
                if stale && echo_is_ours && self.state == State::Handshake {
                    // Still an answer, and its round trip says whether the Initials queue. One
                    // back about as fast as the quickest (within twice its time) says the path
                    // is not queueing but may be losing: the Initial with the token goes again
                    // at once, as a new token's would (at 60 % loss each way these answers
                    // bring the handshake through sooner). A slower one says our Initials wait
                    // in a queue, which another would only lengthen.
                    self.take_rtt_sample(now, echo_timestamp, 0);
                    if self.rtt.latest() <= self.rtt.min().saturating_mul(2) {
                        self.handshake_due = true;
                    }
                    true
                } else if stale {
                    false
                } else {
                    let take = self.state == State::Handshake && *retries < MAX_RETRIES && !token.is_empty();
                    if take {
                        *ours = token.to_vec();
                        *token_sent_from = 0;
                        *retries += 1;
                        self.stats.retries_received += 1;
                        self.handshake_due = true;
                        // The round trip it shows starts the timer that repeats the Initial (if
                        // the echo is one of ours; the Retry itself is not authenticated).
                        if echo_is_ours {
                            self.take_rtt_sample(now, echo_timestamp, 0);
                        }
                    }
                    take
                }
            }
            (SecureHandshake::Accept { echo_timestamp, noise, .. }, Secure::Client { handshake, sent_timestamps, .. }) => {
                // Only the Noise message is authenticated: the server's id comes from inside it
                // (the one in clear is ignored), and the echoed timestamp counts only if it is
                // one we sent, so a copy with its clear fields changed cannot spoil the handshake.
                let echo_is_ours = sent_timestamps.contains(&echo_timestamp);
                match handshake.finish(noise) {
                    Ok((parameters, server_key, keys)) => match read_server_parameters(&parameters) {
                        Some((src_cid, max_payload, window, redundancy, token)) => {
                            let cipher = handshake.cipher;
                            self.secure = Secure::ClientDone { accept: noise.to_vec() };
                            self.protection = Box::new(self.packet_protection(cipher, &keys, true));
                            self.peer_static_key = Some(server_key);
                            self.peer_reset_token = Some(token);
                            self.peer_cid = src_cid;
                            self.take_handshake_parameters(max_payload, window, redundancy);
                            if echo_is_ours {
                                self.take_rtt_sample(now, echo_timestamp, 0);
                            }
                            self.establish();
                            self.ack_now = true;
                            true
                        }
                        _ => {
                            self.stats.protocol_violations += 1;
                            self.lose(ConnectionError::Handshake("the server's parameters do not parse"));
                            return;
                        }
                    },
                    Err(_) => false,
                }
            }
            (SecureHandshake::Accept { noise, .. }, Secure::ClientDone { accept }) if accept.as_slice() == noise => {
                // A copy of the Accept we took: the server answered a repeat of our Initial
                // (or someone replays it). An ack confirms again; nothing else changes.
                self.stats.replayed_packets += 1;
                self.ack_now = true;
                self.update_timers(now);
                return;
            }
            _ => false,
        };
        if !genuine {
            self.stats.unauthenticated_packets += 1;
            return;
        }
        self.stats.packets_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        self.last_rx_any = now;
        self.timers.set(Timer::Idle, now + self.config.idle_timeout);
        self.trace_received(now, PacketType::Handshake, None, datagram.len());
        self.update_timers(now);
    }

    /// A version 2 stateless reset: the peer lost the connection. Only the token it gave in its handshake proves it.
    fn handle_stateless_reset(&mut self, now: Instant, datagram: &[u8]) {
        let Ok(reset) = StatelessReset::parse(datagram) else {
            self.stats.malformed_packets += 1;
            return;
        };
        let proven = reset.cid == self.peer_cid && self.peer_reset_token.is_some_and(|t| crypto::constant_time_eq(&t, &reset.token));
        if !proven {
            self.stats.unauthenticated_packets += 1;
            return;
        }
        if matches!(self.state, State::Closed | State::Drained | State::Lost) {
            // Already finished: the peer forgot a connection that had nothing left to say.
            return;
        }
        self.stats.packets_received += 1;
        self.trace_received(now, PacketType::StatelessReset, None, datagram.len());
        self.lose(ConnectionError::Reset(ResetReason::UnknownConnection));
    }

    /// A datagram after packet protection opened it.
    fn handle_plain_datagram(&mut self, now: Instant, datagram: &[u8]) {
        let packet = match Packet::parse(datagram) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed_packets += 1;
                return;
            }
        };
        if matches!(self.state, State::Drained | State::Lost) {
            return;
        }
        let is_initial = matches!(packet.body, Body::Handshake(Handshake { phase: HandshakePhase::Initial, .. }));
        let addressed_here = if is_initial {
            self.side == Side::Server && matches!(packet.body, Body::Handshake(h) if h.src_cid == self.peer_cid)
        } else {
            packet.dst_cid == self.local_cid
        };
        if !addressed_here {
            self.stats.foreign_packets += 1;
            return;
        }
        self.stats.packets_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        self.last_rx_any = now;
        self.timers.set(Timer::Idle, now + self.config.idle_timeout);

        match packet.body {
            Body::Handshake(hs) => self.on_handshake(now, &hs),
            Body::Data(d) => {
                self.confirm_server(now);
                let seq = wire::expand_seq(d.seq, self.assembler.fence_base());
                self.trace_received(now, PacketType::Data, Some(seq), datagram.len());
                self.on_data(now, seq, Some(d.timestamp), d.payload, false);
            }
            Body::Close(c) => {
                self.confirm_server(now);
                let seq = wire::expand_seq(c.seq, self.assembler.fence_base());
                self.trace_received(now, PacketType::Close, Some(seq), datagram.len());
                self.on_data(now, seq, Some(c.timestamp), &[], true);
            }
            Body::Repair(r) => {
                self.confirm_server(now);
                self.trace_received(now, PacketType::Repair, None, datagram.len());
                self.on_repair(now, &r);
            }
            Body::Feedback(f) => {
                self.confirm_server(now);
                self.trace_received(now, PacketType::Feedback, None, datagram.len());
                self.redundancy.on_feedback(now, f.expected, f.missing);
            }
            Body::Ack(ack) => {
                self.confirm_server(now);
                self.trace_received(now, PacketType::Ack, None, datagram.len());
                self.on_ack(now, &ack);
                self.plan_ack_frequency();
            }
            Body::FarAck(far) => {
                self.confirm_server(now);
                self.trace_received(now, PacketType::FarAck, None, datagram.len());
                self.on_far_ack(now, &far);
            }
            Body::AckFrequency(request) => {
                self.confirm_server(now);
                self.trace_received(now, PacketType::AckFrequency, None, datagram.len());
                if newer_request(self.peer_ack_frequency.map(|(latest, _, _)| latest), request.sequence) {
                    let hold = Duration::from_micros(u64::from(request.max_delay_us)).min(MAX_ACK_HOLD);
                    self.peer_ack_frequency = Some((request.sequence, request.packets, hold));
                }
            }
            Body::Keepalive(k) => {
                self.confirm_server(now);
                self.trace_received(now, PacketType::Keepalive, None, datagram.len());
                self.note_ack_eliciting(now, k.timestamp);
                self.ack_now = true;
            }
            Body::Reset(r) => {
                self.trace_received(now, PacketType::Reset, None, datagram.len());
                self.lose(ConnectionError::Reset(r.reason));
            }
        }
        self.report_losses_to_redundancy(now);
        self.update_timers(now);
    }

    /// Tells the redundancy stage about losses found since it last heard.
    fn report_losses_to_redundancy(&mut self, now: Instant) {
        let lost = self.stats.packets_lost;
        if lost > self.losses_reported {
            self.redundancy.on_lost(now, lost - self.losses_reported);
            self.losses_reported = lost;
        }
    }

    /// A repair packet: rebuilds what it can of the data still missing.
    fn on_repair(&mut self, now: Instant, r: &Repair<'_>) {
        if self.state == State::Handshake {
            self.stats.protocol_violations += 1;
            return;
        }
        self.stats.repairs_received += 1;
        if !self.config.accept_repairs || !self.peer_redundancy.sends_repairs() {
            // Repairs neither side agreed to in the handshake.
            self.stats.protocol_violations += 1;
            return;
        }
        let Some(scheme) = fec::Scheme::from_u8(r.scheme) else {
            self.stats.protocol_violations += 1;
            return;
        };
        if r.symbol.len() > 3 + self.config.max_payload as usize {
            // Longer than any data packet this side accepts: not a repair of them.
            self.stats.protocol_violations += 1;
            return;
        }
        let first = wire::expand_seq(r.first_seq, self.assembler.fence_base());
        let Some(decoder) = self.fec_decoder.as_mut() else { return };
        if let Some(seq) = self.fec_unkept.take() {
            decoder.not_kept(seq);
        }
        self.fec_holds = true;
        self.fec_keep_until = self.fec_keep_until.max(first + r.span as u64 + FEC_KEEP_AFTER);
        let rebuilt = decoder.add_repair(scheme, first, r.span as usize, r.index, r.symbol);
        self.stats.repair_state_shed = decoder.shed_over_budget;
        self.take_rebuilt(now, rebuilt);
    }

    fn take_rebuilt(&mut self, now: Instant, rebuilt: Vec<(u64, Vec<u8>)>) {
        for (seq, symbol) in rebuilt {
            if let Some((payload, fin)) = fec::parse_symbol(&symbol) {
                self.stats.packets_rebuilt += 1;
                let payload = payload.to_vec();
                self.on_data(now, seq, None, &payload, fin);
            }
        }
    }

    /// Handles whatever timers expired by `now`; harmless when called early or twice.
    pub fn handle_timeout(&mut self, now: Instant) {
        if matches!(self.state, State::Drained | State::Lost) {
            return;
        }
        if self.timers.take_expired(Timer::Progress, now) {
            let stalled = now - self.last_progress;
            self.lose(ConnectionError::NoProgress { stalled });
            return;
        }
        if self.timers.take_expired(Timer::Idle, now) {
            if self.state == State::Closed {
                self.state = State::Drained;
                self.timers.stop_all();
            } else {
                self.lose(ConnectionError::TimedOut { idle: self.config.idle_timeout });
            }
            return;
        }
        // Only the ack or the pacing timer due: neither moves what the others are set from, so
        // they are not worked out again (at line rate the pacer's timer fires for nearly every
        // packet, and the send that follows sets them anyway). Only the progress clock, which
        // reads `now`, is kept.
        let due = |timer| self.timers.get(timer).is_some_and(|at| at <= now);
        let ack_or_pacing_only = (due(Timer::Ack) || due(Timer::Pacing))
            && ![Timer::Tick, Timer::LossDetection, Timer::Retransmit, Timer::Keepalive, Timer::Trim].into_iter().any(due)
            && !self.timers_stale;
        if let Some(deadline) = self.timers.get(Timer::Tick) {
            if deadline <= now {
                let SendPolicy::Tick { interval } = self.config.send_policy else { unreachable!("tick timer only runs in the tick policy") };
                // Keep the loop's phase; if the driver fell far behind, restart from now.
                let next = deadline + interval;
                self.timers.set(Timer::Tick, if next <= now { now + interval } else { next });
                self.on_tick();
            }
        }
        if self.timers.take_expired(Timer::Ack, now) {
            self.ack_now = true;
        }
        if self.timers.take_expired(Timer::LossDetection, now) {
            self.detect_losses(now);
        }
        if self.timers.take_expired(Timer::Retransmit, now) {
            self.on_retransmission_timeout(now);
        }
        if self.timers.take_expired(Timer::Keepalive, now) {
            self.keepalive_due = true;
            // Marked now, not when it leaves: a timer left in the past until a poll sends the
            // keepalive would fire at every look.
            self.tail_probed |= self.disassembler.bytes_in_flight() > 0;
        }
        self.timers.take_expired(Timer::Pacing, now);
        if self.timers.take_expired(Timer::Trim, now) {
            self.give_back_buffers(now);
        }
        self.report_losses_to_redundancy(now);
        if ack_or_pacing_only {
            self.update_progress(now);
        } else {
            self.update_timers(now);
        }
    }

    // ---- commands ----

    /// Queues as much of `data` as the send buffer has room for; returns how much.
    /// Returns `Ok(0)` when the buffer is full ([`Event::Writable`] follows when it drains).
    pub fn write(&mut self, data: &[u8]) -> Result<usize, WriteError> {
        self.write_by(data.len(), |d| d.write(data))
    }

    /// Like [`Connection::write`] for bytes held as [`bytes::Bytes`]: the send buffer keeps
    /// what it takes of them without a copy (a reference to the same memory), so the bytes
    /// are copied once, into their packets. Returns how many bytes from the front it took.
    pub fn write_shared(&mut self, data: &bytes::Bytes) -> Result<usize, WriteError> {
        self.write_by(data.len(), |d| d.write_shared(data))
    }

    /// Like [`Connection::write`] for `len` bytes that `source` makes on demand, from its
    /// offset `from`: they are made straight into each packet that carries them (again for
    /// a resend) and never held, so the sender neither copies nor buffers them. Returns how
    /// many it took, from the front; the next write continues at `from` plus that.
    pub fn write_generated(&mut self, source: &Arc<dyn ByteSource>, from: u64, len: usize) -> Result<usize, WriteError> {
        self.write_by(len, |d| d.write_generated(source, from, len))
    }

    fn write_by(&mut self, offered: usize, write: impl FnOnce(&mut Disassembler) -> usize) -> Result<usize, WriteError> {
        if let Some(e) = &self.error {
            return Err(WriteError::ConnectionLost(e.clone()));
        }
        if self.disassembler.fin_requested() {
            return Err(WriteError::Finished);
        }
        self.disassembler.set_unsent_limit(self.unsent_limit());
        let n = write(&mut self.disassembler);
        self.stats.bytes_written += n as u64;
        if n < offered {
            self.write_blocked = true;
        }
        Ok(n)
    }

    /// Reads buffered bytes in order. `Ok(0)` means the peer finished its stream
    /// and everything was read; [`ReadError::WouldBlock`] means nothing yet.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, ReadError> {
        let n = self.assembler.read(buf);
        self.after_read(n)
    }

    /// Reads up to `max` buffered bytes in order without copying them: `consume` sees them
    /// where they lie, in order, a slice for each buffer they arrived in (about one per
    /// packet), and they are gone after.
    /// Returns like [`Connection::read`].
    pub fn read_with(&mut self, max: usize, consume: impl FnMut(&[u8])) -> Result<usize, ReadError> {
        let n = self.assembler.read_with(max, consume);
        self.after_read(n)
    }

    fn after_read(&mut self, n: usize) -> Result<usize, ReadError> {
        if n > 0 {
            self.stats.bytes_read += n as u64;
            if self.assembler.readable_len() == 0 {
                self.readable_signalled = false;
            }
            // The window reopened by half the buffer: tell a sender that may be waiting on it.
            let edge = self.assembler.fence_base() + self.window_offered() as u64;
            let capacity = (self.assembler.capacity() / self.config.max_payload as usize) as u64;
            if edge >= self.advertised_edge + (capacity / 2).max(1) {
                self.ack_now = true;
            }
            return Ok(n);
        }
        self.readable_signalled = false;
        if self.assembler.is_finished() {
            return Ok(0);
        }
        match &self.error {
            Some(e) => Err(ReadError::ConnectionLost(e.clone())),
            None => Err(ReadError::WouldBlock),
        }
    }

    /// Finishes this side's stream: a FIN follows the data already written. The
    /// connection closes once both FINs are acknowledged ([`Event::Closed`]).
    pub fn close(&mut self, now: Instant) {
        if self.state == State::Lost {
            return;
        }
        self.disassembler.finish();
        self.update_timers(now);
    }

    /// Aborts the connection: the peer is sent a reset, unread and unsent data is discarded.
    pub fn reset(&mut self, now: Instant) {
        if matches!(self.state, State::Lost | State::Drained) {
            return;
        }
        if self.peer_cid != 0 {
            self.reset_due = Some(ResetReason::Aborted);
        }
        self.lose(ConnectionError::LocallyReset);
        self.update_timers(now);
    }

    // ---- outputs ----

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Events are waiting for [`Connection::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Whether the peer's adaptive redundancy is owed a report of what the path loses:
    /// every [`FEEDBACK_EVERY`] packets, or [`FEEDBACK_EVERY_CLEAN`] in a clean spell (no
    /// repair for 1,024 packets and nothing missing since the last report).
    fn feedback_due(&self) -> bool {
        let expected = self.first_transmissions.expected();
        // The count of what is missing only where it decides (FEEDBACK_EVERY < FEEDBACK_EVERY_CLEAN).
        if expected < self.feedback_sent_at + FEEDBACK_EVERY {
            return false;
        }
        let clean = expected >= self.fec_keep_until && self.first_transmissions.missing() <= self.feedback_missing_at;
        !clean || expected >= self.feedback_sent_at + FEEDBACK_EVERY_CLEAN
    }

    /// Writes the next datagram to send into `buf` (which must hold at least
    /// `config().max_datagram()` bytes, and at least 1,500: with tiny payloads a handshake
    /// packet is larger than any data packet). `None` when nothing may be sent now.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(reason) = self.reset_due.take() {
            let packet = Packet { dst_cid: self.peer_cid, body: Body::Reset(Reset { reason }) };
            self.stats.resets_sent += 1;
            return self.emit(now, &packet, buf, None, false);
        }
        if matches!(self.state, State::Drained | State::Lost) {
            return None;
        }
        if self.redundancy.has_repair() {
            let room = buf.len().saturating_sub(self.protection.overhead());
            if let Some(len) = self.redundancy.poll_repair(now, &mut buf[..room]) {
                let Ok(header) = Header::peek(&buf[..len]) else {
                    // A stage that writes garbage is a bug in the stage; never send it.
                    debug_assert!(false, "the redundancy stage wrote an unreadable packet");
                    return None;
                };
                self.stats.redundant_packets_sent += 1;
                return self.finish_datagram(now, buf, len, header.packet_type, None, false, false);
            }
        }
        if self.handshake_due {
            if self.side == Side::Client && self.state == State::Handshake && self.handshake_copies > 0 {
                self.handshake_copies -= 1;
            } else {
                self.handshake_due = false;
            }
            self.last_handshake_sent = now;
            self.last_ack_eliciting_sent = now;
            let transmit = self.emit_handshake(now, buf);
            self.update_timers(now);
            return transmit;
        }
        if self.state == State::Handshake {
            return None;
        }
        if self.ack_now {
            return self.emit_ack(now, buf);
        }
        if let Some(due) = self.far_ack_next {
            if let Some(transmit) = self.emit_far_ack(now, buf, due) {
                return Some(transmit);
            }
        }
        if let Some((packets, hold)) = self.ack_frequency_due.take() {
            self.ack_hold_allowed = hold.max(self.ack_frequency_asked.1);
            self.timers_stale = true;
            self.ack_frequency_asked = (packets, hold);
            let sequence = self.ack_frequency_next;
            self.ack_frequency_next = sequence.wrapping_add(1);
            let max_delay_us = u32::try_from(hold.total_micros()).unwrap_or(u32::MAX);
            let packet = Packet { dst_cid: self.peer_cid, body: Body::AckFrequency(AckFrequency { sequence, packets, max_delay_us }) };
            self.stats.ack_frequency_requests_sent += 1;
            return self.emit(now, &packet, buf, None, false);
        }
        // Feedback rides behind an ack or a data packet written in this same round (the
        // driver's `now` is the round's): sent on its own, as soon as a packet made it due,
        // it woke the peer once more, and in a request/reply exchange it reached the peer
        // ahead of the reply, which then waited for a second wake-up (on loopback one round
        // trip in 256 took 10 µs longer). A receiver acks what it receives, so there is
        // always a ride within `max_ack_delay`.
        if self.last_ride == Some(now) && self.fec_decoder.is_some() && self.peer_redundancy.adapts() && self.feedback_due() {
            // The peer's repairs follow the loss: tell it what the path loses.
            let (expected, missing) = (self.first_transmissions.expected(), self.first_transmissions.missing());
            self.feedback_sent_at = expected;
            self.feedback_missing_at = missing;
            let packet = Packet { dst_cid: self.peer_cid, body: Body::Feedback(Feedback { expected, missing }) };
            self.stats.feedback_sent += 1;
            return self.emit(now, &packet, buf, None, false);
        }
        if self.keepalive_due {
            self.keepalive_due = false;
            self.last_ack_eliciting_sent = now;
            let packet = Packet { dst_cid: self.peer_cid, body: Body::Keepalive(Keepalive { timestamp: self.timestamp(now) }) };
            self.stats.keepalives_sent += 1;
            if self.disassembler.bytes_in_flight() > 0 {
                self.stats.tail_probes += 1;
            }
            let transmit = self.emit(now, &packet, buf, None, false);
            self.update_timers(now);
            return transmit;
        }
        let state_before = self.state;
        let transmit = match self.config.send_policy {
            SendPolicy::Tick { .. } => self.poll_tick_data(now, buf),
            SendPolicy::Continuous => self.poll_continuous_data(now, buf),
        };
        let into_flight = std::mem::take(&mut self.new_into_flight);
        if transmit.is_some() {
            if into_flight && self.state == state_before && !self.timers_stale {
                // New data behind packets already in flight moves only the keepalive: the
                // oldest packet in flight, the timeout, progress and what is outstanding stay
                // (at line rate this is nearly every packet).
                self.timers.put(Timer::Keepalive, self.keepalive_deadline());
            } else {
                self.update_timers(now);
            }
        }
        transmit
    }

    // ---- internals: receiving ----

    /// The protection of packets after the handshake: the AEAD, or its model in a simulation.
    fn packet_protection(&self, cipher: Cipher, keys: &crypto::SessionKeys, client: bool) -> AeadProtection {
        match &self.config.protection {
            ProtectionConfig::Noise(noise) if noise.model_aead => AeadProtection::modelled(cipher, keys, client),
            _ => AeadProtection::new(cipher, keys, client),
        }
    }

    fn take_handshake_parameters(&mut self, max_payload: u16, window: u32, redundancy: u8) {
        self.payload_size = (self.config.max_payload as usize).min(max_payload.max(wire::MIN_PAYLOAD) as usize);
        self.peer_window = window as u64;
        self.fit_send_buffer_to_peer_window();
        self.peer_redundancy = Announcement::from_byte(redundancy);
        if self.our_redundancy().sends_repairs() && !self.peer_redundancy.takes_repairs {
            // The peer would drop every repair: spend nothing on them.
            self.redundancy = Box::new(NoRedundancy);
            self.stats.repairs_refused_by_peer = true;
        }
        if self.peer_redundancy.sends_repairs() && self.config.accept_repairs && self.fec_decoder.is_none() {
            let mut decoder = fec::Decoder::new(FEC_DECODER_KEEP);
            if let Some(budget) = self.assembler.budget() {
                decoder.set_budget(budget.clone(), fec_symbol_bytes(&self.config));
            }
            self.fec_decoder = Some(Box::new(decoder));
            if self.peer_redundancy.sends == Announcement::ADAPTIVE {
                self.fec_keep_until = self.fec_keep_until.min(FEC_KEEP_AT_START_ADAPTIVE);
            }
        }
    }

    /// This end's redundancy as its handshake states it.
    fn our_redundancy(&self) -> Announcement {
        Announcement::of(&self.config.redundancy, self.config.accept_repairs)
    }

    fn on_handshake(&mut self, now: Instant, hs: &Handshake) {
        self.trace_received(now, PacketType::Handshake, None, wire::HANDSHAKE_LEN);
        match (self.side, hs.phase) {
            (Side::Server, HandshakePhase::Initial) => {
                // The client has not seen our Accept yet.
                if self.state == State::Handshake {
                    self.note_ack_eliciting(now, hs.timestamp);
                    self.handshake_due = true;
                }
            }
            (Side::Client, HandshakePhase::Accept) => {
                if self.state == State::Handshake {
                    self.peer_cid = hs.src_cid;
                    self.take_handshake_parameters(hs.max_payload, hs.window, hs.redundancy);
                    self.take_rtt_sample(now, hs.echo_timestamp, 0);
                    self.establish();
                }
                // Confirm (again: the server resends its Accept until it hears from us).
                self.ack_now = true;
            }
            _ => self.stats.protocol_violations += 1,
        }
    }

    /// The server's handshake completes on the first packet that uses its connection id.
    fn confirm_server(&mut self, _now: Instant) {
        if self.side == Side::Server && self.state == State::Handshake {
            if let Secure::Server { secrets, .. } = &mut self.secure {
                // The keys are confirmed: nothing will replace them, so the secrets can go.
                **secrets = ConnectionSecrets { seed: [0; 32], reset_token: [0; RESET_TOKEN_LEN], static_key: None };
            }
            self.establish();
        }
    }

    /// The handshake is over (on either side): nothing of it is due any more, not even a
    /// client's remaining copies of its Initial, and the timer starts afresh.
    fn establish(&mut self) {
        self.state = State::Established;
        // A client that needed several attempts has seen the path lose: with a success
        // chance of about one in `attempts` per attempt, and an Initial and its Accept both
        // to get through, about 1 - 1/sqrt(attempts) each way (an underestimate: later
        // attempts send copies). 0 after one attempt.
        let attempts = f64::from(self.rto_backoff + 1);
        self.handshake_loss = 1.0 - attempts.sqrt().recip();
        self.rto_backoff = 0;
        self.handshake_copies = 0;
        self.handshake_due = false;
        self.events.push_back(Event::Connected);
    }

    fn note_ack_eliciting(&mut self, now: Instant, timestamp: u32) {
        self.last_rx_timestamp = timestamp;
        self.last_rx_time = now;
    }

    /// A data (or FIN) packet: from the wire with its timestamp, or rebuilt from repairs without one.
    fn on_data(&mut self, now: Instant, seq: u64, timestamp: Option<u32>, payload: &[u8], fin: bool) {
        if self.state == State::Handshake {
            // A client cannot get data before the Accept that names the server.
            self.stats.protocol_violations += 1;
            return;
        }
        let previous_timestamp = self.last_rx_timestamp;
        if let Some(timestamp) = timestamp {
            self.stats.data_packets_received += 1;
            self.note_ack_eliciting(now, timestamp);
            self.peer_alternates = std::mem::take(&mut self.data_sent_since_rx);
        }
        let timestamp = timestamp.unwrap_or(0);
        if payload.len() > self.config.max_payload as usize {
            self.stats.protocol_violations += 1;
            return;
        }
        let keep = seq < self.fec_keep_until;
        match self.fec_decoder.as_mut() {
            // Not kept: a repair that covers it cannot be used (and none is expected).
            // Telling the decoder of the highest such packet once is telling it of each.
            Some(decoder) if !keep && self.fec_holds => {
                // The first packet past what is kept: nothing the decoder holds can be used
                // from now on (a repair or a late kept packet would first forget it), so it
                // lets go of its buffers now rather than at the connection's end. Held for
                // a transfer's life, the first 32 packets' copies of each of 100 concurrent
                // connections were 25 MB of fresh memory on a server, touched while they
                // started (page faults 10.5-11.4 k per 1 GB run, 4.0-4.9 k since).
                let unkept = self.fec_unkept.take().map_or(seq, |s| s.max(seq));
                decoder.let_go_through(unkept);
                self.fec_holds = false;
            }
            Some(_) if !keep => self.fec_unkept = Some(self.fec_unkept.map_or(seq, |s| s.max(seq))),
            Some(decoder) => {
                if let Some(unkept) = self.fec_unkept.take() {
                    decoder.not_kept(unkept);
                }
                self.fec_holds = true;
                // Keep it for repairs still to come; it may complete one already here.
                let rebuilt = decoder.add_source_packet(seq, payload, fin);
                self.stats.repair_state_shed = decoder.shed_over_budget;
                if !rebuilt.is_empty() {
                    // Handle this packet first, then what it let rebuild.
                    self.insert_data(now, seq, timestamp, previous_timestamp, payload, fin);
                    self.take_rebuilt(now, rebuilt);
                    return;
                }
            }
            None => {}
        }
        self.insert_data(now, seq, timestamp, previous_timestamp, payload, fin);
    }

    fn insert_data(&mut self, now: Instant, seq: u64, timestamp: u32, previous_timestamp: u32, payload: &[u8], fin: bool) {
        let base_before = self.assembler.fence_base();
        let arrival = self.assembler.insert(seq, payload, fin);
        if timestamp != 0 {
            // What a peer that adapts its redundancy needs: first transmissions missing.
            self.first_transmissions.on_data(seq, timestamp, arrival.is_new());
        }
        // RFC 9000 (13.2.1): ack at once when a packet opens a new gap or arrives below
        // the highest seen (it fills or reorders); otherwise every `ack_every` packets.
        let reordered = self.highest_rx_seq.map_or(seq != 0, |h| seq < h || seq > h + 1);
        if arrival.is_new() {
            self.highest_rx_seq = Some(self.highest_rx_seq.map_or(seq, |h| h.max(seq)));
        }
        let continuous = self.config.send_policy == SendPolicy::Continuous;
        match arrival {
            Arrival::InOrder | Arrival::OutOfOrder => {
                // The wider window counts once the sender hears of it, and that sender is
                // waiting on the window: say so now.
                if matches!(arrival, Arrival::OutOfOrder) && self.assembler.grow_for_holes() {
                    self.ack_now |= continuous;
                }
                self.eliciting_since_ack += 1;
                if continuous {
                    if fin || reordered {
                        self.ack_now = true;
                    } else if self.eliciting_since_ack >= self.ack_every_now() {
                        let wait = self.config.ack_coalesce.min(self.config.max_ack_delay);
                        // A request whose answer the application is about to write: the ack
                        // goes right behind the answer instead of waking the peer on its own.
                        // Not when our data waits for the window (the peer may be waiting
                        // for this ack to send what would let ours go).
                        if wait > Duration::ZERO && self.exchange_alternates() {
                            self.ack_deferred = true;
                            let by = now + wait;
                            if self.timers.get(Timer::Ack).is_none_or(|at| at > by) {
                                self.timers.set(Timer::Ack, by);
                            }
                        } else {
                            self.ack_now = true;
                        }
                    } else if self.timers.get(Timer::Ack).is_none() {
                        self.timers.set(Timer::Ack, now + self.ack_hold());
                    }
                }
            }
            Arrival::Duplicate => {
                self.stats.duplicate_packets_received += 1;
                // The sender resent something we hold: our acks are getting lost. (A copy sent
                // on purpose carries its original's timestamp, the one just received: not that.)
                self.ack_now |= continuous && timestamp != previous_timestamp;
            }
            Arrival::BeyondWindow => {
                self.stats.beyond_window_packets += 1;
                self.ack_now |= continuous;
            }
            Arrival::OverBudget => {
                self.stats.over_budget_packets += 1;
                self.ack_now |= continuous;
            }
            Arrival::Violation => self.stats.protocol_violations += 1,
        }
        if self.config.trace && self.assembler.fence_base() > base_before {
            self.trace.push(TraceEvent::StreamDelivered {
                time: now,
                fence_base: self.assembler.fence_base(),
                bytes: self.stats.bytes_read + self.assembler.readable_len() as u64,
            });
        }
        if self.assembler.readable_len() > 0 && !self.readable_signalled {
            self.readable_signalled = true;
            self.events.push_back(Event::Readable);
        }
        if self.assembler.is_finished() && !self.finish_signalled {
            self.finish_signalled = true;
            self.events.push_back(Event::StreamFinished);
            // Nothing is missing any more, so nothing is left to rebuild: what the decoder
            // kept goes back to the budget now, not when the connection goes.
            self.fec_decoder = None;
        }
        self.check_closed(now);
    }

    fn take_rtt_sample(&mut self, now: Instant, echo: u32, ack_delay: u32) {
        if echo == 0 || echo == self.last_sampled_echo {
            return;
        }
        self.last_sampled_echo = echo;
        let raw = self.timestamp(now).wrapping_sub(echo) as u64;
        // A timestamp from the future (or more than ~35 minutes old) is not a sample.
        if raw >= 1 << 31 {
            return;
        }
        let ack_delay = ack_delay as u64;
        // RFC 9002 (5.3): subtract the peer's ack delay unless that would go below the minimum seen.
        let sample = if raw >= ack_delay + self.rtt.min().total_micros().min(raw) { raw - ack_delay } else { raw };
        let sample = sample.max(1);
        self.rtt.update(Duration::from_micros(sample));
        let sample_us = sample.min(u32::MAX as u64) as u32;
        if self.config.record_rtt_samples {
            self.rtt_history.push(sample_us);
        } else {
            self.rtt_history.count_only(sample_us);
        }
    }

    fn on_ack(&mut self, now: Instant, ack: &Ack<'_>) {
        if self.state == State::Handshake {
            self.stats.protocol_violations += 1;
            return;
        }
        self.stats.acks_received += 1;
        let lowest = self.disassembler.lowest_unacked();
        let fence_base = wire::expand_seq(ack.fence_base, lowest);
        if fence_base > self.disassembler.next_seq() {
            // Acknowledges packets never sent.
            self.stats.protocol_violations += 1;
            return;
        }
        if fence_base >= self.peer_fence_base {
            self.peer_fence_base = fence_base;
            self.peer_window = ack.window as u64;
            self.fit_send_buffer_to_peer_window();
        }
        self.take_rtt_sample(now, ack.echo_timestamp, ack.ack_delay);
        self.described_base = fence_base;
        self.described_to = fence_base + 1 + ack.bitmap.len() as u64 * 8;
        // The ack was written on receipt of the packet this timestamp names; if that
        // packet left before our latest retransmission of something the ack covers,
        // the receiver had the original: the retransmission was spurious (RFC 8985 uses
        // DSACK for the same purpose).
        let echoed_sent = self.instant_of_timestamp(now, ack.echo_timestamp);
        if let Some(sent) = echoed_sent {
            self.disassembler.note_delivered(sent);
        }
        self.described_echo = echoed_sent;
        self.apply_fence(now, lowest, fence_base, fence_base, ack.bitmap, echoed_sent, true, ack.far_follows);
    }

    /// The fence beyond the latest ack's bitmap (see [`FarAck`]). Taken only as the
    /// continuation of what that ack and the far acks after it described: one whose ack
    /// was lost, or that came out of order, would leave a stretch described by nothing,
    /// and the packets in it would read as lost. It carries no timestamp and no window;
    /// written on the same receipt as its ack, it is judged by the timestamp that ack
    /// echoed (`described_echo`): a retransmission it acknowledges moves loss detection
    /// on, and one it shows needless is counted. Without it, a sender held at its window
    /// with the holes past the ack's bitmap never saw a retransmission there credited,
    /// and the packets sent before it waited for timeouts (1 Gbit/s × 100 ms, 20 % loss:
    /// 83 timeouts in 10 s, 52.6 Mbit/s; now none, 455.5). No RTT sample.
    fn on_far_ack(&mut self, now: Instant, far: &FarAck<'_>) {
        if self.state == State::Handshake {
            self.stats.protocol_violations += 1;
            return;
        }
        let lowest = self.disassembler.lowest_unacked();
        let fence_base = wire::expand_seq(far.fence_base, lowest);
        let start = wire::expand_seq(far.start, fence_base + 1);
        if fence_base > self.disassembler.next_seq() || start <= fence_base || start > self.disassembler.next_seq() {
            // Describes packets never sent, or the fence base itself.
            self.stats.protocol_violations += 1;
            return;
        }
        if fence_base != self.described_base || start != self.described_to || self.config.arq != Arq::Fence {
            return;
        }
        self.described_to = start + far.bitmap.len() as u64 * 8;
        self.apply_fence(now, lowest, fence_base, start - 1, far.bitmap, self.described_echo, false, far.far_follows);
    }

    /// What an ack (`is_ack`) or a far ack says, applied: everything below `fence_base`
    /// and each packet `bitmap_base + 1 + i` whose bit `i` is set arrived; then loss
    /// detection, the controller's batch and the writer's room. `lowest` is the lowest
    /// unacknowledged packet before it. While a far ack is to follow (`far_follows`),
    /// loss detection waits for it: packets beyond this bitmap may have arrived before
    /// packets it acknowledges (a hole's retransmission, sent after them), and only the
    /// far ack says so; judged now, they read as lost.
    #[allow(clippy::too_many_arguments)]
    fn apply_fence(&mut self, now: Instant, lowest: u64, fence_base: u64, bitmap_base: u64, bitmap: &[u8], echoed_sent: Option<Instant>, is_ack: bool, far_follows: bool) {
        let mut newly_acked = 0u64;
        let mut spurious = 0u64;
        // The longest a transmission proved only late took to be acknowledged (none proved:
        // the path reorders no more than allowed for).
        let mut late_by: Option<Duration> = None;
        let mut overtaken_needlessly = false;
        let mut newly_acked_bytes = 0u64;
        {
            let Connection { disassembler, controller, rtt, delivery, .. } = self;
            let mut on_acked = |a: Acked| {
                newly_acked += 1;
                // Acknowledged sooner after its latest transmission than any round trip has
                // taken: what arrived was an earlier one (RFC 8985's test).
                let too_soon = a.transmissions > 1 && now < a.sent + rtt.min();
                delivery.on_acked(now, &a.packet);
                if a.was_in_flight {
                    newly_acked_bytes += a.bytes;
                    // What the controller knows of a packet is what it knew when the latest
                    // transmission left. For a retransmission acked too soon that is the
                    // wrong one, and the earlier one's is not kept: the controller gets the
                    // packet without a send time or a delivered count. With the copy's, BBR's
                    // round ended a few milliseconds after it left (2 ms of jitter on 200 ms;
                    // a round of 11 packets with the one overtaken among them then looked like
                    // 9 % loss and ended Startup at 8 Mbit/s of a 100 Mbit/s path).
                    if too_soon {
                        let earlier = SentPacket { delivered: 0, sent: Instant::ZERO, ..a.packet };
                        controller.on_ack(now, &earlier, rtt);
                    } else {
                        controller.on_ack(now, &a.packet, rtt);
                    }
                }
                if a.transmissions > 1 && echoed_sent.is_some_and(|e| e < a.sent) {
                    spurious += 1;
                    controller.on_spurious_loss(now, &a.packet);
                    // Proof that a threshold itself is too small, that what arrived was the
                    // transmission a threshold declared lost: the ack came back sooner after
                    // the retransmission than any round trip has taken (RFC 8985's test), or
                    // it was written on the arrival of the lost transmission itself (or an
                    // older one), which came after packets sent later. An echo older than the
                    // retransmission alone is no proof: a packet sent just before the
                    // retransmission and held behind it by jitter reads the same when the
                    // retransmission is what arrived, and at 50 % loss with 0.1 ms of jitter
                    // such readings widened the thresholds to their largest, lost packets
                    // then filled the window for two round trips before they were declared,
                    // and the rate sank to a sixth. Not from a far ack: a far-acked packet
                    // resent for nothing was most likely described only by a far ack that
                    // was lost (the far acks of a round are several datagrams, each lost
                    // alike), which says nothing of reordering.
                    let proved = a.resent_after.threshold_lost_sent().filter(|&lost_sent| is_ack && (too_soon || echoed_sent.is_some_and(|e| e <= lost_sent)));
                    if let Some(lost_sent) = proved {
                        let late = now.saturating_duration_since(lost_sent);
                        late_by = Some(late_by.map_or(late, |l| l.max(late)));
                        overtaken_needlessly |= matches!(a.resent_after, LostBy::PacketThreshold { .. });
                    }
                }
            };
            disassembler.ack_below(fence_base, echoed_sent, &mut on_acked);
            if self.config.arq == Arq::Fence {
                disassembler.ack_bitmap(bitmap_base, bitmap, echoed_sent, &mut on_acked);
            }
        }
        if self.config.trace {
            let offsets = || wire::bitmap_offsets(bitmap);
            let bitmap_received = offsets().count() as u32;
            let fence_top = offsets().last().map_or(fence_base.saturating_sub(1), |i| bitmap_base + 1 + i as u64);
            self.trace.push(TraceEvent::AckReceived { time: now, fence_base, fence_top, bitmap_received, newly_acked });
        }
        if newly_acked > 0 {
            self.rto_backoff = 0;
            // A tail probe not yet sent has nothing left to ask.
            if std::mem::take(&mut self.tail_probed) {
                self.keepalive_due = false;
            }
            self.last_ack_progress = now;
            self.stats.packets_acknowledged += newly_acked;
        }
        self.stats.spurious_retransmissions += spurious;
        if let Some(late_by) = late_by {
            // A hole we resent had only been overtaken: the path reorders more than we
            // allowed for. Widen both thresholds (as Linux raises tcp_reordering), up to
            // a large window's worth and a couple of round trips. (A spurious timeout
            // says the RTT jumped, not that packets reorder, so it does not count here.)
            // A packet overtaken by the largest threshold's worth of later ones that still
            // arrived: reordering deeper than any packet threshold, and losses are declared by
            // time alone from now on (as RACK does once it has seen reordering). The reordering
            // a path's jitter makes grows with the packet rate, and on a fast path with a few
            // milliseconds of it every packet overtaken 1,024 deep was resent and the copies
            // overtaken in turn: 10 ms of jitter and no loss, 30 MB resent up to 27 times over.
            self.time_only_loss_detection |= overtaken_needlessly && self.reorder_threshold >= REORDER_THRESHOLD_MAX;
            self.reorder_threshold = (self.reorder_threshold * 2).min(REORDER_THRESHOLD_MAX);
            // The time threshold grows to half again what the late transmission took to be
            // acknowledged, not by half at each proof up to two round trips: a threshold past
            // the path's reordering keeps lost packets counted in flight that much longer, and
            // at 50 % loss with 3 ms of jitter on 20 ms, two round trips of them filled the
            // window and the rate sank.
            let round_trip = self.rtt.get().max(self.rtt.latest()).as_secs_f64();
            let needed = 1.5 * late_by.as_secs_f64() / round_trip.max(1e-6);
            self.time_threshold = self.time_threshold.max(needed).min(2.0);
        }

        let advanced = fence_base > lowest;
        let duplicate = is_ack && !advanced && fence_base == lowest && self.disassembler.has_outstanding();
        if duplicate {
            self.stats.duplicate_acks_received += 1;
            self.controller.on_duplicate_ack(now);
        }
        let lost_before = self.delivery.lost();
        if self.config.send_policy == SendPolicy::Continuous {
            match self.config.arq {
                Arq::Fence if far_follows => {}
                Arq::Fence => self.detect_losses(now),
                Arq::Window => self.window_recovery(now, advanced, duplicate),
            }
        }
        let sample = self.delivery.take_sample(self.rtt.min());
        if sample.is_some() {
            self.latest_rate_sample = sample;
        }
        let batch = AckBatch {
            newly_acked: newly_acked_bytes,
            newly_lost: self.delivery.lost() - lost_before,
            bytes_in_flight: self.disassembler.bytes_in_flight(),
            delivered: self.delivery.delivered(),
            rate_sample: sample,
            app_limited: self.delivery.is_app_limited(),
        };
        self.controller.on_ack_batch(now, &batch, &self.rtt);
        if self.config.send_policy == SendPolicy::Continuous && self.state == State::Established {
            let sparser = self.ack_thinning.on_ack(&AckObservation {
                now,
                smoothed_rtt: self.rtt.get(),
                min_rtt: self.rtt.min(),
                rtt_variation: self.rtt.var(),
                rtt_sample: sample.map(|s| s.rtt),
                delivery_rate: sample.map(|s| (s.delivery_rate, s.is_app_limited)),
                lost: batch.newly_lost > 0,
                eligible: self.controller.rate_model_settled(),
            });
            match sparser {
                Some(Sparser::Tried) => self.stats.sparser_ack_trials += 1,
                Some(Sparser::Kept) => {
                    self.stats.sparser_ack_trials_kept += 1;
                    self.controller.on_sparser_acks(now);
                }
                None => {}
            }
        }
        if newly_acked > 0 {
            self.trace_metrics(now);
        }
        self.disassembler.set_unsent_limit(self.unsent_limit());
        if self.write_blocked && self.send_capacity() >= (self.disassembler.unsent_room() / WRITABLE_SHARE).max(1) {
            self.write_blocked = false;
            self.events.push_back(Event::Writable);
        }
        self.check_closed(now);
    }

    /// Sizes the send buffer to the peer's window once that outgrows `send_buffer`: what
    /// the peer lets us have beyond its fence, plus a quarter of `send_buffer` for what
    /// waits unsent, at most `send_buffer_max`. Every packet sent stays buffered until
    /// acknowledged, so a buffer smaller than the peer's window (which grows on a long
    /// lossy path, see `Assembler::grow_for_holes`) would stop the sender short of it.
    /// A window that fits leaves `send_buffer` as set.
    fn fit_send_buffer_to_peer_window(&mut self) {
        let window_bytes = usize::try_from(self.peer_window).unwrap_or(usize::MAX).saturating_mul(self.payload_size);
        let send_buffer = self.config.send_buffer;
        let capacity = if window_bytes > send_buffer { window_bytes.saturating_add(send_buffer / 4).min(self.config.send_buffer_max.max(send_buffer)) } else { send_buffer };
        self.disassembler.set_capacity(capacity);
    }

    /// How many written bytes may wait unsent, beyond what is in flight: two sending windows,
    /// and at least [`UNSENT_FLOOR_TIME`] of the sending rate, within [`UNSENT_FLOOR_MIN`]
    /// and [`UNSENT_FLOOR_MAX`]. What the path cannot take within a round trip or two gains
    /// nothing by being buffered here; a writer that fills a 16 MB buffer per connection
    /// would make a hundred bulk connections touch 1.6 GB (TCP's notsent_lowat, in effect).
    /// Acks, which come at least once per window, reopen it. The seed's send loop keeps
    /// the whole buffer, as the article's protocol did.
    fn unsent_limit(&self) -> usize {
        match self.config.send_policy {
            SendPolicy::Continuous => {
                let window = self.sending_window();
                // The controller's pacing rate, or for one that does not pace, its window per RTT.
                let rate = self.controller.pacing_rate().unwrap_or_else(|| crate::congestion::pacing_rate(window, &self.rtt));
                let floor = (rate as u128 * UNSENT_FLOOR_TIME.total_micros() as u128 / 1_000_000).clamp(UNSENT_FLOOR_MIN as u128, UNSENT_FLOOR_MAX as u128) as u64;
                let limit = (2 * window).max(floor);
                usize::try_from(limit).unwrap_or(usize::MAX)
            }
            SendPolicy::Tick { .. } => usize::MAX,
        }
    }

    /// `window` recovery knows only the cumulative ack: three duplicates resend the
    /// first missing packet; each partial ack during recovery resends the next (RFC 6582).
    fn window_recovery(&mut self, now: Instant, advanced: bool, duplicate: bool) {
        let lowest = self.disassembler.lowest_unacked();
        if advanced {
            self.duplicate_acks = 0;
            if let Some(point) = self.window_recovery_point {
                if lowest < point {
                    self.resend_first_hole(now, LossTrigger::DuplicateAcks);
                } else {
                    self.window_recovery_point = None;
                }
            }
        } else if duplicate {
            self.duplicate_acks += 1;
            if self.duplicate_acks as u64 == self.reorder_threshold
                && self.window_recovery_point.is_none()
                && self.resend_first_hole(now, LossTrigger::DuplicateAcks)
            {
                self.window_recovery_point = Some(self.disassembler.next_seq());
            }
        }
    }

    fn resend_first_hole(&mut self, now: Instant, trigger: LossTrigger) -> bool {
        let seq = self.disassembler.lowest_unacked();
        let Some(sent) = self.disassembler.last_sent(seq) else { return false };
        if !self.disassembler.mark_lost(seq) {
            return false;
        }
        self.report_losses(now);
        let bytes = self.config.max_datagram() as u64;
        self.stats.packets_lost += 1;
        self.trace_loss(now, Some(seq), trigger, 1);
        self.congestion_event(now, sent, bytes);
        true
    }

    fn detect_losses(&mut self, now: Instant) {
        if self.config.arq != Arq::Fence || self.config.send_policy != SendPolicy::Continuous {
            return;
        }
        let rtt = self.rtt.get().max(self.rtt.latest());
        let loss_delay = rtt.mul_f64(self.time_threshold).max(Duration::from_millis(1));
        // With repairs on the way, a hole may be rebuilt before the packets that show it are acked.
        let threshold = match self.time_only_loss_detection {
            true => u64::MAX,
            false => self.reorder_threshold.max(self.redundancy.repair_allowance()),
        };
        let losses = self.disassembler.detect_losses(now, threshold, loss_delay);
        self.report_losses(now);
        self.timers.put(Timer::LossDetection, losses.next_check);
        if losses.packets > 0 {
            self.stats.packets_lost += losses.packets;
            self.trace_loss(now, None, LossTrigger::ReorderingThreshold, losses.packets);
            let sent = losses.earliest_sent.unwrap_or(now);
            self.congestion_event(now, sent, losses.bytes);
        }
    }

    /// Hands the transmissions loss detection just gave up on to the delivery-rate
    /// estimator and the controller.
    fn report_losses(&mut self, now: Instant) {
        let Connection { disassembler, controller, delivery, .. } = self;
        for packet in disassembler.drain_lost() {
            delivery.on_lost(packet.bytes);
            controller.on_packet_lost(now, &packet);
        }
    }

    /// One call per episode: losses of packets sent before the episode began belong to it.
    fn congestion_event(&mut self, now: Instant, sent: Instant, lost_bytes: u64) {
        if self.recovery_start.is_some_and(|start| sent <= start) {
            return;
        }
        self.recovery_start = Some(now);
        self.stats.congestion_events += 1;
        self.controller.on_congestion_event(now, sent, lost_bytes);
        self.trace_metrics(now);
    }

    fn on_retransmission_timeout(&mut self, now: Instant) {
        match self.state {
            State::Handshake => {
                self.handshake_due = true;
                self.rto_backoff += 1;
                // An attempt that went unanswered is the first sign of a lossy path: the next
                // ones go out in more copies (the Initial is small, and the server answers a
                // repeat with its Accept again). At 30 % loss each way one Initial comes back
                // half the time; three copies, seven times in eight.
                self.handshake_copies = self.rto_backoff.min(MAX_HANDSHAKE_COPIES - 1);
            }
            State::Established | State::Closed => {
                // Holes already found wait for the window to let them out; if it does not
                // (what is in flight never drains), the probes must carry them, lowest
                // first, rather than declare more packets lost behind them.
                let waiting = self.config.arq == Arq::Fence && self.disassembler.has_retransmissions();
                // The stream's end is in flight: what is left is a tail only more probes
                // (and copies of it) get through quickly. Mid-stream, the application's
                // next write brings acks and fast retransmits; more probes would only add
                // packets (the seed's echo at 50 % loss: 5-10 % more than needed).
                let closing = self.disassembler.fin_sent();
                self.probe_with_new_data = false;
                self.copying_probes_mid_stream = false;
                if self.config.arq == Arq::Fence && !waiting && !closing && self.rto_backoff == 0 && self.lost_nothing_lately(now) && self.new_data_allowed() {
                    // A first timeout on a path that had lost nothing lately is more likely a
                    // late ack than a loss: a peer (or this end) descheduled for a few tens
                    // of milliseconds, or a queue that grew faster than the RTT estimate. As
                    // RFC 9002 (6.2.4) has it, the probes then carry new data and nothing is
                    // declared lost: the ack they draw shows any holes, and loss detection
                    // resends those. A late ack then costs two packets past the window
                    // instead of resent ones and a collapsed window. (100 connections on
                    // loopback, both processes on two busy cores: drivers descheduled for
                    // 15-30 ms at a time, acks 50-65 ms apart against a smoothed RTT of 6-22
                    // ms, and up to a hundred spurious resends in one run of three.) If the
                    // probes draw nothing either, the next, backed-off timeout resends.
                    self.probe_with_new_data = true;
                    self.probe_budget = timeout_probes(0.0) as u32;
                    self.probes_sent.clear();
                    self.stats.retransmission_timeouts += 1;
                    self.stats.timeouts_probed_with_new_data += 1;
                    // The controller hears of it only if the next timeout comes (a CUBIC window
                    // collapsed here stayed collapsed: nothing declared lost, nothing to undo).
                    self.last_timeout = now;
                    self.rto_backoff += 1;
                    return;
                }
                let modelled = timeout_probes(if closing { self.probe_loss_estimate() } else { self.early_loss_floor(self.controller.random_loss()) });
                let probes = modelled.max(unanswered_timeout_probes(self.rto_backoff));
                let lost = match self.config.arq {
                    _ if waiting => 0,
                    Arq::Fence => self.disassembler.on_probe_timeout(probes),
                    Arq::Window => self.disassembler.on_retransmission_timeout(),
                };
                self.report_losses(now);
                self.probes_sent.clear();
                self.probe_copy_cursor = 0;
                // The end of the stream, shorter than the probes the loss calls for, gets them
                // all: copies of its packets make up the rest. At 60 % loss each way a lone
                // FIN and its ack both got through one time in six, and closing a connection
                // took many backed-off timeouts (10 MB over 100 Mbit/s, 20 ms: delivered in
                // 4 s, closed after 20).
                let tail = closing && lost > 0;
                // Mid-stream, a timeout whose predecessor's probes drew nothing is in a burst
                // the random-loss model does not see, and a burst counted in packets ends
                // only as packets are sent into it. With fewer packets to resend than the
                // probes call for, copies of them make up the rest, whatever the window says.
                // Capped at what was lost, CUBIC's probes were one packet per backed-off
                // second (its window a packet after the first timeout), and with bursts of
                // 20 packets on average (p = 1 %, r = 5 %) two seeds in five reached the idle
                // timeout, one hole resent alone into the burst 30 times, and two more ran
                // past 120 s for 5 MB over 20 Mbit/s. (New data as the rest of the probes
                // pushed more into buffers that flows sharing them kept full: 10 flows
                // through 60 kB, Jain 0.88 against 0.9 and more.)
                let burst = self.rto_backoff > 0 && lost > 0 && !closing;
                self.copying_probes_mid_stream = burst;
                self.probe_budget = if waiting || tail || burst { probes as u32 } else { lost.min(probes) as u32 };
                if waiting || lost > 0 {
                    if lost > 0 {
                        self.stats.packets_lost += lost;
                        self.trace_loss(now, None, LossTrigger::Timeout, lost);
                    }
                    self.stats.retransmission_timeouts += 1;
                    self.controller.on_retransmission_timeout(now);
                    self.recovery_start = Some(now);
                    self.window_recovery_point = None;
                    self.duplicate_acks = 0;
                    self.trace_metrics(now);
                } else {
                    // Nothing in flight but data waits on the peer's window: probe it.
                    self.keepalive_due = true;
                    self.stats.window_probes += 1;
                }
                self.last_timeout = now;
                self.rto_backoff += 1;
            }
            State::Drained | State::Lost => {}
        }
    }

    fn on_tick(&mut self) {
        match self.state {
            State::Handshake if self.side == Side::Client => self.handshake_due = true,
            State::Handshake => {}
            State::Established | State::Closed => {
                self.ack_now = true;
                let lowest = self.disassembler.lowest_unacked();
                let mss = self.config.max_datagram() as u64;
                let fence = self.config.fence_width.max_bits() as u64;
                let cwnd_packets = (self.controller.window() / mss).max(1);
                let flow_limit = self.peer_fence_base + self.peer_window;
                self.tick = TickRound { cursor: lowest, limit: (lowest + fence.min(cwnd_packets)).min(flow_limit) };
                if self.tick.limit <= lowest && self.disassembler.has_new() {
                    // The peer's window is closed; the tick ack from it will reopen it.
                    self.keepalive_due = true;
                    self.stats.window_probes += 1;
                }
            }
            State::Drained | State::Lost => {}
        }
    }

    fn check_closed(&mut self, now: Instant) {
        if self.state == State::Established && self.disassembler.fin_acked() && self.assembler.is_finished() {
            self.state = State::Closed;
            self.events.push_back(Event::Closed);
            // It lingers for an idle timeout (below) with nothing left to send or reassemble:
            // a server closing many bulk connections should not keep their grown buffers.
            self.disassembler.shrink_to_fit();
            self.assembler.shrink_to_fit();
            // Linger until the peer has been quiet for the idle timeout, answering its retransmissions.
            self.timers.set(Timer::Idle, self.last_rx_any.max(now) + self.config.idle_timeout);
        }
    }

    /// An ICMP error said the packets this connection sends cannot be delivered
    /// (`what`: where they stop). Only a client acts on one:
    /// - in a handshake that has had no answer at all, it gives up at once, as a TCP
    ///   connect is refused: waiting out the connect timeout could only end the same way;
    /// - once its peer has answered, only a port unreachable counts (the peer's host says
    ///   nothing listens there, as a TCP peer's host answers with a reset once its process
    ///   is gone), and only after such reports have kept coming for [`PORT_CLOSED_AFTER`]
    ///   with nothing from the peer meanwhile: a report about an older packet, or a forged
    ///   one, is outlasted by the peer's own packets. Otherwise a crashed server held its
    ///   client for the idle timeout (30 s by default).
    ///
    /// Host and network unreachable after the handshake may be a route changing, and are
    /// left to the idle timeout. A server takes no ICMP error as its client's word: a NAT
    /// in front of the client that forgot its mapping answers the server with them, while
    /// the client may come back from a new port (see `Endpoint::handle_datagram`).
    /// Returns whether the connection ended.
    pub fn on_unreachable(&mut self, now: Instant, what: Unreachable) -> bool {
        if self.side != Side::Client {
            return false;
        }
        match self.state {
            State::Handshake if self.stats.packets_received == 0 => {
                self.lose(ConnectionError::Unreachable(what.reason()));
                true
            }
            State::Established | State::Closed if what == Unreachable::Port => match self.port_refused_since {
                // Still nothing from the peer since the first report.
                Some(since) if self.last_rx_any <= since => {
                    if now.saturating_duration_since(since) < PORT_CLOSED_AFTER {
                        return false;
                    }
                    self.lose(ConnectionError::PortClosed { silent: now.saturating_duration_since(self.last_rx_any) });
                    true
                }
                _ => {
                    self.port_refused_since = Some(now);
                    false
                }
            },
            _ => false,
        }
    }

    fn lose(&mut self, error: ConnectionError) {
        if self.error.is_none() {
            self.error = Some(error.clone());
            self.events.push_back(Event::ConnectionLost(error));
        }
        self.state = State::Lost;
        self.timers.stop_all();
    }

    // ---- internals: sending ----

    /// When we sent the packet carrying `timestamp` (our own clock, echoed back): the
    /// latest instant not after `now` whose timestamp has those 32 bits. `None` for 0.
    fn instant_of_timestamp(&self, now: Instant, timestamp: u32) -> Option<Instant> {
        if timestamp == 0 {
            return None;
        }
        let elapsed = self.timestamp(now).wrapping_sub(timestamp) as u64;
        Some(now - Duration::from_micros(elapsed))
    }

    fn timestamp(&self, now: Instant) -> u32 {
        let t = (now - self.epoch).total_micros() as u32;
        if t == 0 { 1 } else { t }
    }

    /// Writes a packet into `buf` and sends it through [`Connection::finish_datagram`].
    fn emit(&mut self, now: Instant, packet: &Packet<'_>, buf: &mut [u8], seq: Option<u64>, retransmission: bool) -> Option<Transmit> {
        let room = buf.len().saturating_sub(self.protection.overhead());
        let len = packet.emit(&mut buf[..room]).ok()?;
        self.finish_datagram(now, buf, len, packet.packet_type(), seq, retransmission, false)
    }

    /// The one way out: every datagram this connection sends, of every type, is
    /// written in `buf[..len]` and finished here, where packet protection seals it
    /// (handshakes excepted) and the counters and the trace see it. (Every sender calls it
    /// with what it knows of its packet; a struct for them would be built once per call.)
    #[allow(clippy::too_many_arguments)]
    fn finish_datagram(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        len: usize,
        packet_type: PacketType,
        seq: Option<u64>,
        retransmission: bool,
        spaced: bool,
    ) -> Option<Transmit> {
        let size = if packet_type == PacketType::Handshake {
            len
        } else if spaced {
            self.protection.seal_spaced(buf, len).ok()?
        } else {
            self.protection.seal(buf, len).ok()?
        };
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += size as u64;
        if self.config.trace {
            self.trace.push(TraceEvent::PacketSent { time: now, packet_type, seq, size, retransmission });
        }
        Some(Transmit { size, packet_type })
    }

    fn emit_handshake(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let timestamp = self.timestamp(now);
        if let Secure::Client { sent_timestamps, token, token_sent_from, .. } = &mut self.secure {
            if !token.is_empty() && *token_sent_from == 0 {
                *token_sent_from = timestamp;
            }
            // The Accept's echo must be one of these: the first Initials' and the latest
            // ones'. Keeping only the last eight lost the answered one whenever the answer
            // took longer than a few repeats (three copies every 305 ms before any answer):
            // on a path with a 2 s round trip the Accept gave no RTT sample, the first data
            // went out on the initial 100 ms RTT, and four timeouts resent all ten packets of
            // the first flight four times over (20 kB at 20 kbit/s, 40 retransmissions).
            if sent_timestamps.len() == 2 * SENT_TIMESTAMPS_KEPT {
                sent_timestamps.remove(SENT_TIMESTAMPS_KEPT);
            }
            sent_timestamps.push(timestamp);
        }
        let secure = match &self.secure {
            Secure::Off => None,
            Secure::Client { handshake, token, .. } => Some(SecureHandshake::Initial {
                src_cid: self.local_cid,
                timestamp,
                pattern: handshake.pattern as u8,
                cipher: handshake.cipher as u8,
                token,
                noise: &handshake.message,
            }),
            Secure::Server { accept, .. } => {
                Some(SecureHandshake::Accept { dst_cid: self.peer_cid, src_cid: self.local_cid, echo_timestamp: self.last_rx_timestamp, noise: accept })
            }
            // Nothing more to say in a handshake.
            Secure::ClientDone { .. } => return None,
        };
        if let Some(packet) = secure {
            let len = packet.emit(buf).ok()?;
            self.stats.handshakes_sent += 1;
            return self.finish_datagram(now, buf, len, PacketType::Handshake, None, false, false);
        }
        let (phase, dst_cid) = match self.side {
            Side::Client => (HandshakePhase::Initial, 0),
            Side::Server => (HandshakePhase::Accept, self.peer_cid),
        };
        let echo_timestamp = if self.side == Side::Server { self.last_rx_timestamp } else { 0 };
        let hs = Handshake {
            phase,
            src_cid: self.local_cid,
            timestamp,
            echo_timestamp,
            max_payload: self.config.max_payload,
            window: self.assembler.window(),
            redundancy: self.our_redundancy().to_byte(),
        };
        self.stats.handshakes_sent += 1;
        self.emit(now, &Packet { dst_cid, body: Body::Handshake(hs) }, buf, None, false)
    }

    /// Bits of bitmap that fit in `buf` (at most one datagram) after `fixed_len` bytes.
    fn bitmap_room_bits(&self, buf: &[u8], fixed_len: usize) -> u32 {
        (buf.len().min(self.config.max_datagram()).saturating_sub(fixed_len) * 8) as u32
    }

    fn emit_ack(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let room_bits = self.bitmap_room_bits(buf, wire::ACK_FIXED_LEN);
        let (exact, max_bits) = match self.config.fence_width {
            FenceWidth::Exact(bits) => (Some(bits.min(room_bits)), bits),
            FenceWidth::UpTo(bits) => (None, bits.min(room_bits)),
        };
        let mut bitmap = std::mem::take(&mut self.bitmap_scratch);
        self.assembler.fence_bitmap(exact, max_bits, &mut bitmap);
        let ack_delay = if self.last_rx_timestamp == 0 {
            0
        } else {
            (now - self.last_rx_time).total_micros().min(u32::MAX as u64) as u32
        };
        self.grow_socket_cap(now);
        let window = self.window_offered();
        let fence_base = self.assembler.fence_base();
        // Packets held beyond what the bitmap reaches: far acks follow, in this same round.
        let described_to = fence_base + 1 + bitmap.len() as u64 * 8;
        let far = matches!(self.config.fence_width, FenceWidth::UpTo(_)) && self.assembler.highest_held().is_some_and(|h| h >= described_to);
        self.far_ack_next = far.then_some(FarAckDue { start: described_to, base: fence_base, left: MAX_FAR_ACKS });
        let packet = Packet {
            dst_cid: self.peer_cid,
            body: Body::Ack(Ack { fence_base: fence_base as u32, echo_timestamp: self.last_rx_timestamp, ack_delay, window, bitmap: &bitmap, far_follows: far }),
        };
        let transmit = self.emit(now, &packet, buf, None, false);
        self.bitmap_scratch = bitmap;
        self.stats.acks_sent += 1;
        self.last_ride = Some(now);
        self.ack_now = false;
        self.ack_deferred = false;
        self.eliciting_since_ack = 0;
        self.timers.stop(Timer::Ack);
        self.advertised_edge = fence_base + window as u64;
        transmit
    }

    /// The fence from `due.start` on, continuing the ack just sent, as wide as a datagram
    /// holds; queues the next one while packets are held beyond it, up to [`MAX_FAR_ACKS`]
    /// after one ack.
    fn emit_far_ack(&mut self, now: Instant, buf: &mut [u8], due: FarAckDue) -> Option<Transmit> {
        self.far_ack_next = None;
        let FarAckDue { start, base, left } = due;
        let max_bits = match self.config.fence_width {
            FenceWidth::UpTo(bits) => bits.min(self.bitmap_room_bits(buf, wire::FAR_ACK_FIXED_LEN)),
            FenceWidth::Exact(_) => return None,
        };
        let mut bitmap = std::mem::take(&mut self.bitmap_scratch);
        self.assembler.far_bitmap(start, max_bits, &mut bitmap);
        if bitmap.is_empty() || self.assembler.fence_base() != base {
            // The fence moved since the ack (or nothing is held there now): the next ack says it all.
            self.bitmap_scratch = bitmap;
            return None;
        }
        let next = start + bitmap.len() as u64 * 8;
        if left > 1 && self.assembler.highest_held().is_some_and(|h| h >= next) {
            self.far_ack_next = Some(FarAckDue { start: next, base, left: left - 1 });
        }
        let far_follows = self.far_ack_next.is_some();
        let packet = Packet { dst_cid: self.peer_cid, body: Body::FarAck(FarAck { fence_base: base as u32, start: start as u32, bitmap: &bitmap, far_follows }) };
        let transmit = self.emit(now, &packet, buf, None, false);
        self.bitmap_scratch = bitmap;
        self.stats.far_acks_sent += u64::from(transmit.is_some());
        transmit
    }

    /// Builds data (or FIN) packet `seq` in `buf`, payload copied in place, records the
    /// transmission for loss recovery and the controller, shows the plaintext to the
    /// redundancy stage, and sends it the one way out.
    fn emit_segment(&mut self, now: Instant, seq: u64, buf: &mut [u8]) -> Option<Transmit> {
        self.emit_segment_stamped(now, seq, buf, 0)
    }

    /// Data sender's side of ack frequency, after each ack. Asks the peer for an ack per
    /// [`ACK_FREQUENCY_SHARE`] of the packets in flight (at least `ack_every`, at most
    /// [`ACK_FREQUENCY_MAX`]) once the controller can do without every ack (out of slow
    /// start or Startup, see `Controller::wants_every_ack`), or earlier where packets
    /// leave fast enough for acks to cost real CPU (a flight of at least
    /// [`ACK_FREQUENCY_MIN_RATE`] packets per second of RTT); else `ack_every` (asking
    /// from the first round, Startup included, cost tolerant 4.5 % at 1 Gbit/s x 100 ms
    /// with 5 % loss, mean of 8 seeds). The acks' own path may be the narrow one: an ack
    /// per two data packets at 100 Mbit/s takes 2.4 Mbit/s back, and with less the acks
    /// set the rate (100 Mbit/s out, 512 kbit/s back: 20 Mbit/s with an ack per two, 76
    /// asking). Asks again only when the figure doubles or halves, so a request goes out
    /// a few times a connection, not per ack. Holes, reordering and the FIN are acked at
    /// once whatever was asked.
    fn plan_ack_frequency(&mut self) {
        if self.config.send_policy != SendPolicy::Continuous || self.state != State::Established || !self.rtt.has_sample() {
            return;
        }
        let in_flight = self.disassembler.bytes_in_flight() / self.config.max_datagram().max(1) as u64;
        let floor = u64::from(self.config.ack_every.max(1));
        let fast = in_flight * 1_000_000 >= ACK_FREQUENCY_MIN_RATE * self.rtt.get().total_micros().max(1);
        let fewer = fast || !self.controller.wants_every_ack();
        let mut want = if fewer { (in_flight / ACK_FREQUENCY_SHARE).clamp(floor, ACK_FREQUENCY_MAX.max(floor)) } else { floor };
        let mut hold = Duration::ZERO;
        let level = self.ack_thinning.level();
        if level > 0 {
            // The acks' path is the narrow one: 2^level times sparser, still two per flight,
            // and held long enough to gather that many (at the peer's default 5 ms, packets
            // arriving further apart were acked one by one whatever was asked). A flight too
            // small to thin is not held either: a window of four packets whose acks waited
            // half an RTT sent half as much.
            want = (want << level).min((in_flight / 2).max(floor));
            if want > floor {
                hold = (self.rtt.get() / 2).max(self.config.max_ack_delay).min(MAX_ACK_HOLD);
            }
        }
        let want = want.min(u64::from(u16::MAX)) as u16;
        let (asked, asked_hold) = self.ack_frequency_due.unwrap_or(self.ack_frequency_asked);
        // A hold asked again when it appears, goes, or has doubled or halved.
        let hold_moved = if hold == Duration::ZERO || asked_hold == Duration::ZERO {
            hold != asked_hold
        } else {
            hold.total_micros() >= asked_hold.total_micros().saturating_mul(2) || hold.total_micros() <= asked_hold.total_micros() / 2
        };
        if want >= asked.saturating_mul(2) || want <= asked / 2 || hold_moved {
            self.ack_frequency_due = Some((want, hold));
        }
    }

    /// This host's socket overflowed while this connection was receiving: the kernel
    /// dropped datagrams it had no room for, and a sender sees those drops as loss that a
    /// loss-tolerant controller keeps sending through. The window this side offers is held
    /// to `share` packets (this connection's part of what the socket holds, at least
    /// [`SOCKET_CAP_MIN`]), and set back to it when the socket overflows again a round
    /// trip or more later; it grows back by a quarter each round trip (`grow_socket_cap`).
    /// What is in flight to a receiver then fits the socket whatever the receiver's thread
    /// is doing, as TCP's window fits its receive buffer. Halving the held window at each
    /// further overflow instead did no better: one connection over loopback with a 416 kB
    /// socket 6.8-8.8 Gbit/s in six runs against 8.5-8.7 in three held at the share (and
    /// 12-15 not held at all, with a fifth of its packets resent).
    pub(crate) fn on_socket_overflow(&mut self, now: Instant, share: u64) {
        if self.state != State::Established {
            return;
        }
        let spacing = self.round_trip_at_least(Duration::from_millis(1));
        if self.socket_cap.is_some_and(|cap| now < cap.moved_at + spacing) {
            return;
        }
        let packets = share.max(SOCKET_CAP_MIN);
        self.socket_cap = Some(SocketCap { packets, moved_at: now });
        self.stats.socket_overflow_cuts += 1;
        // The sender learns of the smaller window from the next ack: make that now.
        self.ack_now = true;
    }

    /// The smoothed round trip, at least `least` (just `least` before any sample: a
    /// receiver that only acks may have none beyond its handshake's, or not even that).
    fn round_trip_at_least(&self, least: Duration) -> Duration {
        if self.rtt.has_sample() { self.rtt.get().max(least) } else { least }
    }

    /// Whether an ack-eliciting packet arrived at or after `since` (a receiving connection).
    pub(crate) fn received_since(&self, since: Instant) -> bool {
        self.state == State::Established && self.last_rx_time >= since
    }

    /// A held window grows by a [`SOCKET_CAP_GROWTH_INVERSE`]th once per round trip (at
    /// least [`SOCKET_CAP_GROWTH_SPACING`]) after it last moved, if the sender has filled
    /// it (a packet at its edge arrived), and is let go once it reaches the receive
    /// buffer's own window when empty (not its window of the moment, which unread data
    /// narrows: a reader falling behind would let the hold go).
    fn grow_socket_cap(&mut self, now: Instant) {
        let Some(mut cap) = self.socket_cap else { return };
        let filled = self.highest_rx_seq.is_some_and(|h| h + 1 >= self.advertised_edge);
        if filled && now >= cap.moved_at + self.round_trip_at_least(SOCKET_CAP_GROWTH_SPACING) {
            cap.packets += (cap.packets / SOCKET_CAP_GROWTH_INVERSE).max(1);
            cap.moved_at = now;
        }
        let whole = (self.assembler.capacity() / (usize::from(self.config.max_payload) + crate::assembler::SLOT_COST)) as u64;
        self.socket_cap = (cap.packets < whole).then_some(cap);
    }

    /// The window this side offers: the receive buffer's, held to the socket's share after
    /// an overflow. A held window may end short of an edge offered before: the sender then
    /// sends nothing new until the fence passes it, and what it sent already beyond still
    /// fits the receive buffer, which is what the assembler takes packets by.
    fn window_offered(&self) -> u32 {
        let window = self.assembler.window();
        match self.socket_cap {
            Some(cap) => window.min(u32::try_from(cap.packets).unwrap_or(u32::MAX)),
            None => window,
        }
    }

    /// How long a receiver holds an ack that is not yet due by count: what the peer asked
    /// (see `plan_ack_frequency`), else its own `max_ack_delay`.
    fn ack_hold(&self) -> Duration {
        match self.peer_ack_frequency {
            Some((_, _, hold)) if hold > Duration::ZERO => hold,
            _ => self.config.max_ack_delay,
        }
    }

    /// The peer's packets alternate with ours and nothing of ours waits to be sent: a
    /// request/reply exchange, where an ack can ride behind our next data packet.
    fn exchange_alternates(&self) -> bool {
        self.peer_alternates && !self.has_unsent_data()
    }

    /// Ack-eliciting packets an ack is due after. In a request/reply exchange where acks
    /// ride behind replies (`ack_coalesce`), one every `ack_every` packets still costs each
    /// side a datagram to seal, send, open and process every other exchange (on loopback
    /// about two microseconds of a 25 µs round trip). Such an ack frees a packet or two and
    /// gives an RTT sample, nothing a sender with one request in flight is waiting for, so
    /// there it is due after as many exchanges as fit in `max_ack_delay` at the smoothed
    /// RTT (the peer's retransmission timer allows for that delay), at most
    /// [`ALTERNATING_ACK_STRETCH`]; until then the ack timer (`max_ack_delay`) bounds it as
    /// it bounds any ack. On a path whose RTT exceeds `max_ack_delay`, `ack_every`.
    fn ack_every_now(&self) -> u32 {
        // What the peer asked for, if it did (see `plan_ack_frequency`); else our own setting.
        let mut every = self.peer_ack_frequency.map_or(self.config.ack_every, |(_, packets, _)| u32::from(packets));
        if let Some(cap) = self.socket_cap {
            // A sender held to a small window waits for the acks that open it.
            every = every.min((cap.packets / 4).max(1) as u32);
        }
        if self.config.ack_coalesce == Duration::ZERO || !self.exchange_alternates() || !self.rtt.has_sample() {
            return every;
        }
        let fit = self.config.max_ack_delay.total_micros() / self.rtt.get().total_micros().max(1);
        (fit.min(ALTERNATING_ACK_STRETCH as u64) as u32).max(every)
    }

    /// As [`Connection::emit_segment`], the timestamp set `stamped_back` microseconds before
    /// now: copies sent together then differ, and the receiver, which takes a packet arriving
    /// again with the timestamp it just saw for an intended duplicate (and does not ack it),
    /// acks each copy that gets through (each raising the odds that one ack comes back).
    /// Stamped earlier, never later: an echo of it can only make an RTT sample longer.
    fn emit_segment_stamped(&mut self, now: Instant, seq: u64, buf: &mut [u8], stamped_back: u32) -> Option<Transmit> {
        let overhead = self.protection.overhead();
        let room = buf.len().checked_sub(wire::DATA_OVERHEAD + overhead)?;
        // The plaintext packet is written `gap` bytes in, where sealing will leave its body,
        // so the bytes of every data packet are copied once (send buffer to datagram).
        let gap = self.protection.header_room().min(overhead);
        let plain = &mut buf[gap..];
        let (len, fin) = self.disassembler.copy_payload(seq, &mut plain[wire::DATA_OVERHEAD..][..room.min(u16::MAX as usize)]);
        let timestamp = self.timestamp(now).saturating_sub(stamped_back).max(1);
        let plain_len = if fin {
            Packet { dst_cid: self.peer_cid, body: Body::Close(Close { seq: seq as u32, timestamp }) }.emit(plain).ok()?
        } else {
            wire::emit_data_header_in_place(plain, self.peer_cid, seq as u32, timestamp, len).ok()?
        };
        let in_flight_before = self.disassembler.bytes_in_flight();
        // Sent, as far as its ack can tell, at the instant its timestamp names: an ack that
        // echoes a probe stamped back must not read as one for an earlier transmission
        // (which would call the probe spurious and widen the reordering thresholds).
        let retransmission = self.disassembler.on_transmit(seq, now - Duration::from_micros(u64::from(stamped_back)));
        let in_flight = self.disassembler.bytes_in_flight();
        // Completed where `on_transmit` just wrote it: a copy out and back read the record
        // whole, across fields still on their way to the cache, and stalled the sender
        // (4 % of a simulated transfer's time on that one load).
        if !retransmission && !self.disassembler.has_new() && self.window_lets_more_leave(in_flight) {
            // This packet takes the last of what the application gave, and the window
            // would let more leave: the application limits the flight from this packet on,
            // as the next poll would say. Said before the packet is stamped, so a short
            // write sent alone (a 49-byte session header) gives an application-limited
            // rate sample rather than a measure of the path of a few kB/s.
            self.delivery.on_app_limited(in_flight_before);
        }
        if let Some(record) = self.disassembler.sent_packet_mut(seq) {
            self.delivery.on_sent(now, in_flight_before, record);
            record.bytes_in_flight = in_flight;
            record.controller_state = self.controller.on_sent(now, record, in_flight);
        }
        self.stats.data_packets_sent += 1;
        if retransmission {
            self.stats.retransmissions += 1;
        }
        self.last_ack_eliciting_sent = now;
        self.last_ride = Some(now);
        self.data_sent_since_rx = true;
        // The deferred ack leaves next, in the same send as this packet (a shorter datagram
        // may close a GSO batch, so it goes after the data, not before).
        if std::mem::take(&mut self.ack_deferred) {
            self.ack_now = true;
        }
        let packet_type = if fin { PacketType::Close } else { PacketType::Data };
        self.redundancy.on_data_packet(now, seq, retransmission, &buf[gap..gap + plain_len]);
        // Only the header moves to the front; the body stays where the sealed packet has it.
        buf.copy_within(gap..gap + wire::HEADER_LEN, 0);
        self.finish_datagram(now, buf, plain_len, packet_type, Some(seq), retransmission, gap > 0)
    }

    fn flow_control_allows_new(&self) -> bool {
        self.disassembler.next_seq() < self.peer_fence_base + self.peer_window.min(self.ack_span())
    }

    /// Packets from the peer's fence base on that its acks can describe: the base and
    /// one bit each for what fits in its ack datagram (small packets mean small acks),
    /// and as much again in each of the far acks that may follow an ack. Sending past it
    /// leaves packets that no ack can confirm or show missing.
    fn ack_span(&self) -> u64 {
        match self.config.fence_width {
            FenceWidth::UpTo(bits) => {
                // The peer's datagrams are at least as large as the payload both agreed on.
                let datagram = wire::DATA_OVERHEAD + self.payload_size + self.config.protection.overhead();
                let room = (datagram.saturating_sub(wire::ACK_FIXED_LEN) * 8) as u64;
                1 + room.min(bits as u64) * (1 + MAX_FAR_ACKS)
            }
            // The seed profile's fixed fence bounds each send round itself.
            FenceWidth::Exact(_) => u64::MAX,
        }
    }

    /// When the pacer lets the next packet go, if later than `now`. Up to one timer
    /// granularity early: the pacer's clock keeps the average rate, and a driver that
    /// cannot wake sooner than that would fall behind.
    fn paced_until(&self, now: Instant) -> Option<Instant> {
        let departure = self.controller.earliest_departure_time()?;
        Some(departure - self.config.timer_granularity).filter(|&allowed_from| allowed_from > now)
    }

    /// With `in_flight` bytes out, the sending window has room for another full packet:
    /// having nothing to send then is the application's doing, not the path's.
    fn window_lets_more_leave(&self, in_flight: u64) -> bool {
        in_flight + (self.config.max_datagram() as u64) <= self.sending_window()
    }

    /// New data waits to be sent and the peer's window lets it go.
    fn new_data_allowed(&self) -> bool {
        self.disassembler.has_new() && self.flow_control_allows_new()
    }

    fn poll_continuous_data(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let has_retransmission = self.disassembler.has_retransmissions();
        let has_new = self.new_data_allowed();
        let copy = if self.probe_budget > 0 && !has_retransmission { self.next_probe_copy() } else { None };
        if !has_retransmission && !has_new && copy.is_none() {
            if !self.disassembler.has_new() {
                // The window would let more leave, but the application gave nothing:
                // rate samples from here on measure the application, not the path.
                let in_flight = self.disassembler.bytes_in_flight();
                if self.window_lets_more_leave(in_flight) {
                    self.delivery.on_app_limited(in_flight);
                    self.redundancy.on_app_limited(now);
                }
            }
            return None;
        }
        // Probes after a timeout go out whatever the window and pacer say: they are
        // how the sender learns what happened (RFC 9002 6.2.4).
        let probing = self.probe_budget > 0 && (has_retransmission || copy.is_some() || (self.probe_with_new_data && has_new));
        if !probing {
            if let Some(allowed_from) = self.paced_until(now) {
                self.timers.set(Timer::Pacing, allowed_from);
                return None;
            }
            let in_flight = self.disassembler.bytes_in_flight();
            if in_flight > 0 && in_flight + self.config.max_datagram() as u64 > self.sending_window() {
                return None;
            }
        }
        let payload = self.payload_size.min(buf.len().saturating_sub(wire::DATA_OVERHEAD));
        if let Some(seq) = copy {
            self.probe_budget -= 1;
            // Each probe and copy of a round is stamped as many microseconds back as there are
            // still to come: no two share a timestamp, and later ones carry later timestamps.
            // (Stamped the other way, an ack of the last one echoed a timestamp older than the
            // first one's and read as proof the first had arrived before: spurious.)
            return self.emit_segment_stamped(now, seq, buf, self.probe_budget);
        }
        let seq = match self.disassembler.pop_retransmission() {
            Some(seq) if probing => {
                // Kept for the round's copies at the stream's end and in a burst (see
                // `on_retransmission_timeout`). Kept always, a timeout resending holes that had
                // waited for the window, with the application done writing, filled its budget
                // with copies of them: a fade of one packet per 250 ms then carried copies
                // instead of the flush, which stalled for 2 s
                // (`a_timed_send_whose_flush_keeps_moving_is_let_finish`, 2 runs in 6 with the
                // tests in parallel).
                if self.disassembler.fin_sent() || self.copying_probes_mid_stream {
                    self.probes_sent.push(seq);
                }
                // Every probe is stamped apart, like the copies. Mid-stream probes sent in one
                // round once shared a timestamp, and a receiver that already held them (its
                // acks were lost) took each repeat after the first for a copy sent on purpose
                // and acked only the first: at 60 % loss each way that one ack was lost more
                // often than not, and the timeouts backed off to a second, again and again
                // (1 MB over 10 ms took 7-9 s on two seeds in ten, 0.8-1.9 s on the rest).
                self.probe_budget = self.probe_budget.saturating_sub(1);
                return self.emit_segment_stamped(now, seq, buf, self.probe_budget);
            }
            Some(seq) => {
                self.probe_budget = self.probe_budget.saturating_sub(1);
                seq
            }
            None if has_new => {
                if probing {
                    // The queue held only packets acked since the timeout (it was spurious):
                    // this probe carries new data. Returning nothing here left the connection
                    // with data to send, nothing in flight and no timer but the keepalive's.
                    self.probe_budget = self.probe_budget.saturating_sub(1);
                }
                self.new_into_flight = !probing && self.disassembler.oldest_in_flight().is_some();
                self.disassembler.new_segment(payload)?
            }
            None => {
                self.probe_budget = 0;
                return None;
            }
        };
        self.emit_segment(now, seq, buf)
    }

    /// Whether this side's packets have gone without a loss episode for a while: none yet,
    /// or the last began more than [`QUIET_PATH_ROUNDS`] smoothed round trips (and a
    /// second) ago, and neither the controller nor the handshake reports random loss.
    fn lost_nothing_lately(&self, now: Instant) -> bool {
        let span = self.rtt.get().saturating_mul(QUIET_PATH_ROUNDS).max(Duration::from_millis(1000));
        self.recovery_start.is_none_or(|start| now - start >= span) && self.early_loss_floor(self.controller.random_loss()) == 0.0
    }

    /// The random loss the probes of a closing stream must get through: the controller's
    /// model of it, or, where the controller has none (a side that has sent little, such as
    /// a receiver closing its half), the loss of the peer's first transmissions to us, once
    /// there are enough of them to say (the other way is likely no better).
    fn probe_loss_estimate(&self) -> f64 {
        let (expected, missing) = (self.first_transmissions.expected(), self.first_transmissions.missing());
        let measured = if expected >= 32 { missing as f64 / expected as f64 } else { 0.0 };
        self.early_loss_floor(self.controller.random_loss().max(measured))
    }

    /// `estimate`, or what the handshake suggested if more while the path has said little
    /// (fewer than 32 acks in): at 60 % loss each way the first timeouts sent RFC 9002's two
    /// probes, both or their acks were lost two times in three, and the timer backed off
    /// to a second before the controller had measured anything (1 MB over 10 ms: 4.8 s
    /// instead of under 2 on one seed in ten).
    fn early_loss_floor(&self, estimate: f64) -> f64 {
        if self.stats.acks_received < 32 { estimate.max(self.handshake_loss) } else { estimate }
    }

    /// The next packet this timeout's probes resent that is still unacknowledged, taken in
    /// turn, when the budget outlasts the stream's tail or, in a burst, what was lost. `None`
    /// ends the round's copies.
    fn next_probe_copy(&mut self) -> Option<u64> {
        if self.disassembler.has_new() && !self.copying_probes_mid_stream {
            return None;
        }
        for _ in 0..self.probes_sent.len() {
            let seq = self.probes_sent[self.probe_copy_cursor % self.probes_sent.len()];
            self.probe_copy_cursor += 1;
            if self.disassembler.state(seq) == Some(SegmentState::InFlight) {
                return Some(seq);
            }
        }
        self.probes_sent.clear();
        None
    }

    fn poll_tick_data(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let payload = self.payload_size.min(buf.len().saturating_sub(wire::DATA_OVERHEAD));
        while self.tick.cursor < self.tick.limit {
            let seq = self.tick.cursor;
            self.tick.cursor += 1;
            match self.disassembler.state(seq) {
                Some(SegmentState::Acked) => continue,
                Some(_) => {
                    if let Some(packet) = self.disassembler.sent_packet(seq) {
                        let sent = packet.sent;
                        // The send loop resends whatever the fence still shows missing.
                        self.delivery.on_lost(packet.bytes);
                        self.controller.on_packet_lost(now, &packet);
                        self.stats.packets_lost += 1;
                        self.trace_loss(now, Some(seq), LossTrigger::Tick, 1);
                        self.congestion_event(now, sent, self.config.max_datagram() as u64);
                    }
                    return self.emit_segment(now, seq, buf);
                }
                None => match self.disassembler.new_segment(payload) {
                    Some(new_seq) => {
                        debug_assert_eq!(new_seq, seq);
                        return self.emit_segment(now, new_seq, buf);
                    }
                    None => {
                        self.tick.cursor = self.tick.limit;
                        return None;
                    }
                },
            }
        }
        None
    }

    /// How long a client's handshake attempt waits for its answer before the next attempt:
    /// the RTO until an RTT sample (305 ms with the default profile's 100 ms initial RTT),
    /// then a quarter more than the smoothed RTT (at least `min_rto`). The server answers an
    /// Initial at once (a Retry, or an Accept it keeps for repeats), so an answer that has
    /// not come a quarter past the round trip was lost; the RTO after the one sample a
    /// Retry gives is three round trips (the variance starts at half the sample), most of
    /// it waiting for nothing on a lossy path. A wait cut short by jitter costs at most
    /// three 256-byte copies, each answered by one smaller packet. (1 kB over 300 ms each
    /// way at 60 % loss each way, 30 seeds: median 5.9 s and worst 18 s with the RTO.)
    fn handshake_wait(&self, rto: Duration) -> Duration {
        if !self.rtt.has_sample() {
            return rto;
        }
        let srtt = self.rtt.get();
        (srtt + srtt / 4).max(self.config.min_rto).min(rto)
    }

    /// Recomputes the deadlines that depend on the send state.
    fn update_timers(&mut self, now: Instant) {
        match self.state {
            State::Drained | State::Lost => {
                self.timers.stop_all();
                return;
            }
            _ => {}
        }
        self.timers_stale = false;
        let continuous = self.config.send_policy == SendPolicy::Continuous;
        // How long the peer may hold an ack: the timeout and the tail probe both wait for it.
        let held = || self.config.max_ack_delay.max(self.ack_hold_allowed);
        let rto = || self.rtt.rto(held(), self.config.min_rto, self.config.max_rto);
        // Worked out only where a timer needs it: a receiver with nothing in flight (every
        // packet it receives comes here) needs none.
        let backed_off = || {
            let rto = rto();
            let doublings = self.rto_backoff.min(self.controller.max_timeout_doublings()).min(16);
            // Backing off is bounded by the profile, and so that about thirty probes fit in one
            // idle timeout: on a path that loses half the packets each way, a probe and its
            // answer both get through one time in four, and fewer tries would let the idle
            // timeout declare a live path dead.
            let ceiling = self.config.max_rto.min(self.config.idle_timeout / 30).max(rto);
            rto.saturating_mul(1 << doublings).min(ceiling)
        };
        self.tail_probe_at = None;
        let retransmit = match self.state {
            // Handshake packets are tiny and nothing works until one gets through: an attempt
            // that went unanswered is followed one RTO later by another in more copies (see
            // `on_retransmission_timeout`), not by a longer wait. Backing off (doubling up to a
            // second) left a 200 KB transfer at 20 % loss each way 1 s from done one time in
            // ten, and at 60 % loss most of its time went to the handshake. At most three
            // 256-byte copies per RTO is little on any path; only the client repeats its
            // handshake on a timer: the server answers each Initial once, so it never sends
            // more than it receives to an address it has not heard twice from.
            State::Handshake if continuous && self.side == Side::Client => Some(self.last_handshake_sent + self.handshake_wait(rto())),
            State::Established | State::Closed if continuous => {
                if let Some(oldest) = self.disassembler.oldest_in_flight() {
                    // Restarted by new acks and by its own expiry: without the latter, once the
                    // oldest packets are resent as probes the next-oldest is already overdue and
                    // the timer fires again at once, resending the whole flight two by two.
                    let since = oldest.max(self.last_ack_progress).max(self.last_timeout);
                    let backed_off = backed_off();
                    // A tail probe (RFC 8985, section 7), as a keepalive: when acks stop for two
                    // round trips with packets in flight and the timeout is further off (its
                    // variation still carries a queue that is gone), one keepalive asks for an
                    // ack, and the ack's echo of it shows lost, by the time threshold, whatever
                    // was sent before it and is still unacknowledged (see
                    // `Disassembler::detect_losses`). Nothing is resent and the controller hears
                    // nothing until that ack. After a relay's 3.5 s fade (smoothed RTT 469 ms,
                    // variation 807 ms) the probe is due 0.94 s after the fade, the timeout 3.7 s.
                    if self.rto_backoff == 0 && !self.tail_probed && self.config.arq == Arq::Fence && self.config.keepalive_interval.is_some() {
                        // At least 10 ms, as Linux's: a probe per scheduling hiccup is waste.
                        let wait = (self.rtt.get().saturating_mul(2) + held()).max(TAIL_PROBE_FLOOR);
                        self.tail_probe_at = (wait < backed_off).then(|| since + wait);
                    }
                    Some(since + backed_off)
                } else if self.disassembler.has_new() && !self.flow_control_allows_new() {
                    let backed_off = backed_off();
                    Some(self.last_ack_eliciting_sent.max(now - backed_off) + backed_off)
                } else {
                    None
                }
            }
            _ => None,
        };
        self.timers.put(Timer::Retransmit, retransmit);
        self.timers.put(Timer::Keepalive, self.keepalive_deadline());
        self.update_progress(now);
        if self.disassembler.bytes_in_flight() == 0 || self.config.arq != Arq::Fence {
            self.timers.stop(Timer::LossDetection);
        }
        // Set once, not moved by each packet (this runs after every event, the simulator's
        // included): when it fires after more packets, it is set again a second after the
        // last of them (see `give_back_buffers`). While packets come, it is set without
        // asking what would come back: a receive-only connection is send-quiet throughout,
        // and summing its buffers' spare room after each of its packets (cold in the caches
        // when a hundred connections take turns) was about 1 % of a loopback server's samples
        // at 100 connections. Once quiet, the timer has fired for the last packet, and only
        // the events that follow (reads that hand buffers back, rare then) ask.
        if self.timers.get(Timer::Trim).is_none() && self.state == State::Established && self.send_quiet() {
            let last_packet = self.last_packet();
            if last_packet > self.trimmed_after && (last_packet > self.trim_armed_after || self.retained_bytes() >= TRIM_FROM_BYTES) {
                self.trim_armed_after = last_packet;
                self.timers.set(Timer::Trim, last_packet + TRIM_AFTER);
            }
        }
    }

    /// The idle keepalive's deadline, or the tail probe's if that is earlier.
    fn keepalive_deadline(&self) -> Option<Instant> {
        let idle = match (self.state, self.config.keepalive_interval) {
            (State::Established, Some(interval)) if self.config.send_policy == SendPolicy::Continuous => Some(self.last_ack_eliciting_sent + interval),
            _ => None,
        };
        idle.into_iter().chain(self.tail_probe_at).min()
    }

    /// Progress: valid packets keep restarting the idle timer, so only this ends a
    /// connection whose peer answers but lets nothing through.
    fn update_progress(&mut self, now: Instant) {
        let position = (self.disassembler.lowest_unacked(), self.assembler.fence_base());
        if position != self.progress_position {
            self.progress_position = position;
            self.last_progress = now;
        }
        // Sent and not yet acknowledged (in flight, or lost and waiting to be resent), or held behind a hole.
        let outstanding = self.disassembler.lowest_unacked() < self.disassembler.next_seq() || self.assembler.has_holes();
        match self.config.progress_timeout {
            Some(limit) if outstanding && matches!(self.state, State::Established | State::Closed) => {
                self.timers.set(Timer::Progress, self.last_progress + limit)
            }
            _ => {
                self.last_progress = now;
                self.timers.stop(Timer::Progress);
            }
        }
    }

    /// The last packet either way (acks we send follow packets we received).
    fn last_packet(&self) -> Instant {
        self.last_rx_any.max(self.last_ack_eliciting_sent)
    }

    /// Everything sent is acknowledged and nothing waits to be sent.
    fn send_quiet(&self) -> bool {
        !self.disassembler.has_outstanding() && !self.disassembler.has_new()
    }

    /// See [`TRIM_AFTER`]. Busy since the timer was set, it gives nothing back (and
    /// `update_timers` sets the timer again); the receive side only when nothing received
    /// waits to be read.
    fn give_back_buffers(&mut self, now: Instant) {
        let last_packet = self.last_packet();
        if self.state != State::Established || !self.send_quiet() || now < last_packet + TRIM_AFTER {
            return;
        }
        // Too little to be worth it (see TRIM_FROM_BYTES): the timer was set on the packets'
        // account, not on this; reads that return buffers later may still make it worth it.
        let kept = self.retained_bytes();
        if kept < TRIM_FROM_BYTES {
            return;
        }
        self.trimmed_after = last_packet;
        self.disassembler.shrink_to_fit();
        self.redundancy.forget_history();
        if self.assembler.buffered_bytes() == 0 {
            self.assembler.shrink_to_fit();
            // Nothing is missing: the packets kept to rebuild lost ones from repairs have
            // nothing left to rebuild.
            if let Some(decoder) = self.fec_decoder.as_mut() {
                decoder.forget();
            }
        }
        self.given_back += kept.saturating_sub(self.retained_bytes());
    }

    /// Bytes of buffer memory given back (see [`TRIM_AFTER`]) since the last call: the
    /// allocator keeps freed memory for the process's next allocations, and a driver that
    /// sees much of it go may ask it to return that to the system.
    pub fn take_given_back(&mut self) -> usize {
        std::mem::take(&mut self.given_back)
    }

    /// Memory the connection's send and receive buffers keep allocated beyond the bytes
    /// they hold (spare blocks and buffers, room their queues grew to), and what its FEC
    /// stage and decoder keep for repairs. A connection quiet for [`TRIM_AFTER`] gives it back.
    pub fn retained_bytes(&self) -> usize {
        let repair_state = self.fec_decoder.as_ref().map_or(0, |d| d.held_symbols() * fec_symbol_bytes(&self.config));
        self.disassembler.retained_bytes() + self.assembler.retained_bytes() + self.redundancy.history_bytes() + repair_state
    }

    // ---- internals: tracing ----

    fn trace_received(&mut self, now: Instant, packet_type: PacketType, seq: Option<u64>, size: usize) {
        if self.config.trace {
            self.trace.push(TraceEvent::PacketReceived { time: now, packet_type, seq, size });
        }
    }

    fn trace_loss(&mut self, now: Instant, seq: Option<u64>, trigger: LossTrigger, count: u64) {
        if self.config.trace {
            self.trace.push(TraceEvent::PacketLost { time: now, seq, trigger, count });
        }
    }

    fn trace_metrics(&mut self, now: Instant) {
        if self.config.trace {
            self.trace.push(TraceEvent::MetricsUpdated {
                time: now,
                congestion_window: self.controller.window(),
                ssthresh: self.controller.ssthresh(),
                bytes_in_flight: self.disassembler.bytes_in_flight(),
                smoothed_rtt: self.rtt.get(),
                latest_rtt: self.rtt.latest(),
            });
        }
    }
}

/// A client's handshake parameters: max payload, window, redundancy, stateless-reset token.
fn read_parameters(p: &[u8]) -> Option<(u16, u32, u8, [u8; RESET_TOKEN_LEN])> {
    if p.len() != CLIENT_PARAMETERS_LEN {
        return None;
    }
    let max_payload = u16::from_be_bytes([p[0], p[1]]);
    let window = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
    let redundancy = p[6];
    let token = p[7..].try_into().ok()?;
    (max_payload >= wire::MIN_PAYLOAD).then_some((max_payload, window, redundancy, token))
}

/// A server's: its connection id, then the client's fields.
fn read_server_parameters(p: &[u8]) -> Option<(u32, u16, u32, u8, [u8; RESET_TOKEN_LEN])> {
    if p.len() != SERVER_PARAMETERS_LEN {
        return None;
    }
    let cid = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
    let (max_payload, window, redundancy, token) = read_parameters(&p[4..])?;
    (cid != 0).then_some((cid, max_payload, window, redundancy, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_newer_ack_frequency_request_counts_even_across_the_wrap() {
        assert!(newer_request(None, 0), "the first request");
        assert!(newer_request(Some(3), 4) && !newer_request(Some(4), 3), "a late request is ignored");
        assert!(!newer_request(Some(4), 4), "a copy is ignored");
        assert!(newer_request(Some(u32::MAX), 0) && !newer_request(Some(0), u32::MAX), "numbers wrap");
    }

    #[test]
    fn timeout_probes_grow_with_the_random_loss_the_controller_models() {
        // No model of random loss, or little of it: RFC 9002's two.
        for p in [0.0, 0.01, 0.1] {
            assert_eq!(timeout_probes(p), 2, "{p}");
        }
        // 30 % each way: a probe and its ack both arrive half the time; five probes all
        // fail 3 % of the time. 50 %: one in four, eleven probes. 60 % and more: the cap.
        assert_eq!(timeout_probes(0.3), 5);
        assert_eq!(timeout_probes(0.5), 11);
        assert_eq!(timeout_probes(0.6), MAX_TIMEOUT_PROBES);
        assert_eq!(timeout_probes(1.0), MAX_TIMEOUT_PROBES);
        // After unanswered timeouts, two doubling with each, to the same cap.
        let doubling: Vec<u64> = (0..6).map(unanswered_timeout_probes).collect();
        assert_eq!(doubling, [2, 4, 8, 16, 16, 16]);
        assert_eq!(unanswered_timeout_probes(u32::MAX), MAX_TIMEOUT_PROBES);
        let mut last = 0;
        for step in 0..=100 {
            let n = timeout_probes(step as f64 / 100.0);
            assert!(n >= last, "not monotonic at {step} %");
            last = n;
        }
    }
}

