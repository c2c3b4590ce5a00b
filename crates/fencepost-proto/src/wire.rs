//! The wire format: version 1 (plaintext) and version 2's cleartext parts (its
//! handshake packets and the stateless reset; the bodies of its protected
//! packets are version 1's, sealed by [`crate::crypto::AeadProtection`]).
//!
//! `docs/protocol.md` is the specification; the test vectors at the bottom of this
//! file are the ones printed there. Parsing never panics: any byte string yields a
//! [`Packet`] or a [`DecodeError`], and a parsed packet is always well formed
//! (parse, don't validate).

use std::fmt;

/// The plaintext version; also the layout of a protected packet's opened body.
pub const VERSION: u8 = 1;
/// The protected version: a Noise handshake, then AEAD packets.
pub const VERSION_2: u8 = 2;
/// Version 2 Initials are padded to at least this many bytes, so that nothing a server
/// sends in answer (a Retry, an Accept) is larger than what it received.
pub const MIN_INITIAL_LEN: usize = 256;
/// Version 2 stateless reset: header (6, the connection id field naming the sender's
/// own lost id) + token (16).
pub const STATELESS_RESET_LEN: usize = HEADER_LEN + 16;
/// The handshake phase byte of a version 2 Retry.
pub const PHASE_RETRY: u8 = 3;
/// version (1) + type (1) + destination connection id (4).
pub const HEADER_LEN: usize = 6;
/// Header + sequence number (4) + timestamp (4): the bytes a data packet spends before its payload.
pub const DATA_OVERHEAD: usize = HEADER_LEN + 8;
/// Header + fence base (4) + echo timestamp (4) + ack delay (4) + window (4) + bitmap length (2).
pub const ACK_FIXED_LEN: usize = HEADER_LEN + 18;
pub const HANDSHAKE_LEN: usize = HEADER_LEN + 20;
pub const CLOSE_LEN: usize = HEADER_LEN + 8;
pub const RESET_LEN: usize = HEADER_LEN + 1;
pub const KEEPALIVE_LEN: usize = HEADER_LEN + 4;
/// Header + scheme (1) + first sequence number (4) + span (1) + index (1): before the repair symbol.
pub const REPAIR_OVERHEAD: usize = HEADER_LEN + 7;
/// Header + packets expected (8) + packets missing (8).
pub const FEEDBACK_LEN: usize = HEADER_LEN + 16;
/// Header + sequence number of the request (4) + packets per ack (2).
pub const ACK_FREQUENCY_LEN: usize = HEADER_LEN + 10;
/// A far ack without its bitmap: the header, `fence_base`, `start` and `bitmap_len`.
pub const FAR_ACK_FIXED_LEN: usize = HEADER_LEN + 10;
/// Smallest payload a peer may announce; below it a data packet is mostly header.
pub const MIN_PAYLOAD: u16 = 16;

/// Packet type codes (byte 1 of every packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    Handshake = 1,
    Data = 2,
    Ack = 3,
    Close = 4,
    Reset = 5,
    Keepalive = 6,
    /// Version 2 only: a reset proved by a token instead of a key.
    StatelessReset = 7,
    /// A forward-error-correction repair: a linear combination of source packets.
    Repair = 8,
    /// The receiver's account of what it missed, for a sender that adapts its redundancy.
    Feedback = 9,
    /// A sender's request for how often the peer acks its data.
    AckFrequency = 10,
    /// The fence continued past what one ack's bitmap holds.
    FarAck = 11,
}

impl PacketType {
    pub fn from_u8(code: u8) -> Option<Self> {
        Some(match code {
            1 => PacketType::Handshake,
            2 => PacketType::Data,
            3 => PacketType::Ack,
            4 => PacketType::Close,
            5 => PacketType::Reset,
            6 => PacketType::Keepalive,
            7 => PacketType::StatelessReset,
            8 => PacketType::Repair,
            9 => PacketType::Feedback,
            10 => PacketType::AckFrequency,
            11 => PacketType::FarAck,
            _ => return None,
        })
    }
}

/// Why a byte string is not a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer bytes than the packet type requires.
    Truncated { needed: usize, got: usize },
    /// Byte 0 is not a version this implementation speaks.
    UnsupportedVersion(u8),
    /// Byte 1 is not a known packet type.
    UnknownType(u8),
    /// A field holds a value the specification forbids; names the field.
    InvalidField(&'static str),
    /// Bytes remain after a packet type that has no variable-length tail.
    TrailingBytes(usize),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated { needed, got } => {
                write!(f, "truncated packet: need {needed} bytes, got {got}")
            }
            DecodeError::UnsupportedVersion(v) => write!(f, "unsupported version {v}"),
            DecodeError::UnknownType(t) => write!(f, "unknown packet type {t}"),
            DecodeError::InvalidField(name) => write!(f, "invalid value in field `{name}`"),
            DecodeError::TrailingBytes(n) => write!(f, "{n} unexpected bytes after packet"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Why a packet could not be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The caller's buffer is smaller than [`Packet::encoded_len`].
    BufferTooSmall { needed: usize, got: usize },
    /// A field cannot be represented (an ack bitmap over 65535 bytes).
    FieldTooLarge(&'static str),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::BufferTooSmall { needed, got } => {
                write!(f, "buffer too small: need {needed} bytes, got {got}")
            }
            EncodeError::FieldTooLarge(name) => write!(f, "field `{name}` too large to encode"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// The two steps of the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum HandshakePhase {
    /// Client to server, destination connection id 0.
    Initial = 1,
    /// Server to client, destination = the client's connection id.
    Accept = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handshake {
    pub phase: HandshakePhase,
    /// The connection id the sender chose; the peer puts it in every packet it sends back.
    pub src_cid: u32,
    pub timestamp: u32,
    /// The timestamp of the Initial this Accept answers (0 in an Initial).
    pub echo_timestamp: u32,
    /// Largest data payload the sender of this packet accepts.
    pub max_payload: u16,
    /// Receive window of the sender of this packet, in packets.
    pub window: u32,
    /// The sender's redundancy: what it sends and whether it takes repair packets (see
    /// [`crate::redundancy::Announcement`]); kept as the byte that travelled.
    pub redundancy: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Data<'a> {
    /// Low 32 bits of the packet's 64-bit sequence number (see [`expand_seq`]).
    pub seq: u32,
    pub timestamp: u32,
    pub payload: &'a [u8],
}

/// End of the sender's stream; occupies a sequence number like data and is acknowledged the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Close {
    pub seq: u32,
    pub timestamp: u32,
}

/// The fence: everything below `fence_base` arrived; bit `i` of `bitmap`
/// (byte `i / 8`, bit `i % 8` counting from the least significant) says whether
/// sequence number `fence_base + 1 + i` arrived. `fence_base` itself never has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack<'a> {
    pub fence_base: u32,
    /// Timestamp of the most recent ack-eliciting packet received (0: none yet).
    pub echo_timestamp: u32,
    /// Microseconds between receiving that packet and sending this ack.
    pub ack_delay: u32,
    /// Packets the receiver will accept, counted from `fence_base`.
    pub window: u32,
    pub bitmap: &'a [u8],
    /// A far ack follows: the fence goes on past this bitmap (bit 15 of `bitmap_len`).
    pub far_follows: bool,
}

impl<'a> Ack<'a> {
    /// Offsets `i` (sequence `fence_base + 1 + i`) whose bit is set, in increasing order.
    pub fn received_offsets(&self) -> impl Iterator<Item = u32> + 'a {
        bitmap_offsets(self.bitmap)
    }
}

/// The offsets of a fence bitmap's set bits (byte `i / 8`, bit `i % 8`), in increasing order.
pub fn bitmap_offsets(bitmap: &[u8]) -> impl Iterator<Item = u32> + '_ {
    bitmap.iter().enumerate().flat_map(|(byte_index, &byte)| {
        (0..8u32).filter(move |bit| byte & (1 << bit) != 0).map(move |bit| byte_index as u32 * 8 + bit)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ResetReason {
    /// The application aborted the connection.
    Aborted = 0,
    /// The peer broke the protocol (for example, data beyond the end of its stream).
    ProtocolViolation = 1,
    /// The endpoint has no connection with that id (it restarted, or the connection is long gone).
    UnknownConnection = 2,
}

impl ResetReason {
    fn from_u8(code: u8) -> Option<Self> {
        Some(match code {
            0 => ResetReason::Aborted,
            1 => ResetReason::ProtocolViolation,
            2 => ResetReason::UnknownConnection,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reset {
    pub reason: ResetReason,
}

/// A repair packet: `symbol` is the combination of the source packets `first_seq ..
/// first_seq + span` with the coefficients of `scheme` and `index` (see [`crate::fec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repair<'a> {
    pub scheme: u8,
    /// Low 32 bits of the first source packet's sequence number (expanded as data's are).
    pub first_seq: u32,
    pub span: u8,
    pub index: u8,
    pub symbol: &'a [u8],
}

/// What the receiver of a stream missed, cumulative since the connection began: of
/// `expected` data packets (first transmissions, by sequence number), `missing` had
/// not arrived when a later one did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feedback {
    pub expected: u64,
    pub missing: u64,
}

/// A data sender asks its peer to ack once per `packets` ack-eliciting packets (holes,
/// reordering and the end of the stream are still acked at once), holding an ack at most
/// `max_delay_us` microseconds (`0`: the peer's own maximum ack delay). Requests are
/// numbered so that a late one does not undo a newer one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckFrequency {
    pub sequence: u32,
    pub packets: u16,
    pub max_delay_us: u32,
}

/// The fence beyond an ack's bitmap, sent right after the ack when the receiver holds
/// packets further from `fence_base` than that bitmap reaches: bit `i` of `bitmap` says
/// whether sequence number `start + i` arrived. `fence_base` is the ack's, so that the
/// sender applies it only after the ack it continues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FarAck<'a> {
    pub fence_base: u32,
    /// Low 32 bits of the sequence number bit 0 describes (expanded against `fence_base + 1`).
    pub start: u32,
    pub bitmap: &'a [u8],
    /// Another far ack follows (bit 15 of `bitmap_len`).
    pub far_follows: bool,
}

/// Proves liveness when there is nothing else to send; the peer answers with an ack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    pub timestamp: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    Handshake(Handshake),
    Data(Data<'a>),
    Ack(Ack<'a>),
    Close(Close),
    Reset(Reset),
    Keepalive(Keepalive),
    Repair(Repair<'a>),
    Feedback(Feedback),
    AckFrequency(AckFrequency),
    FarAck(FarAck<'a>),
}

/// One parsed packet. Borrowing from the datagram keeps parsing allocation-free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The connection id the receiver chose (0 only in a handshake Initial).
    pub dst_cid: u32,
    pub body: Body<'a>,
}

/// The fixed header, readable without parsing the rest: what an endpoint needs to
/// route a datagram. The same 6 bytes start every packet of both versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub packet_type: PacketType,
    pub dst_cid: u32,
}

impl Header {
    pub fn peek(bytes: &[u8]) -> Result<Header, DecodeError> {
        let mut r = Reader::new(bytes);
        r.need(HEADER_LEN)?;
        let version = r.u8();
        if version != VERSION && version != VERSION_2 {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let code = r.u8();
        let packet_type = match PacketType::from_u8(code) {
            Some(PacketType::StatelessReset) if version == VERSION => None,
            other => other,
        };
        let packet_type = packet_type.ok_or(DecodeError::UnknownType(code))?;
        Ok(Header { version, packet_type, dst_cid: r.u32() })
    }
}

/// Where a handshake packet goes, read from its header alone (see [`handshake_to`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeTo {
    /// An Initial: it asks for a new connection (the only packet, of either version, that
    /// names connection id 0).
    NewConnection,
    /// A Retry, an Accept or another handshake packet to a connection (its id).
    Connection,
}

/// Whether a datagram is a handshake packet, and where it goes, without opening it: a
/// driver bounds the handshakes it hands over in one pass (see
/// `Endpoint::receive_pass_handshakes`) and tells which may wait. `None`: not a
/// handshake packet, or no packet of ours.
pub fn handshake_to(datagram: &[u8]) -> Option<HandshakeTo> {
    let header = Header::peek(datagram).ok()?;
    match (header.packet_type, header.dst_cid) {
        (PacketType::Handshake, 0) => Some(HandshakeTo::NewConnection),
        (PacketType::Handshake, _) => Some(HandshakeTo::Connection),
        _ => None,
    }
}

impl<'a> Packet<'a> {
    /// A version 1 packet (or a version 2 packet's opened body, laid out as version 1).
    pub fn parse(bytes: &'a [u8]) -> Result<Packet<'a>, DecodeError> {
        let header = Header::peek(bytes)?;
        if header.version != VERSION {
            return Err(DecodeError::UnsupportedVersion(header.version));
        }
        let mut r = Reader::new(&bytes[HEADER_LEN..]);
        let body = match header.packet_type {
            PacketType::Handshake => {
                r.need(HANDSHAKE_LEN - HEADER_LEN)?;
                let phase = match r.u8() {
                    1 => HandshakePhase::Initial,
                    2 => HandshakePhase::Accept,
                    _ => return Err(DecodeError::InvalidField("phase")),
                };
                let hs = Handshake {
                    phase,
                    src_cid: r.u32(),
                    timestamp: r.u32(),
                    echo_timestamp: r.u32(),
                    max_payload: r.u16(),
                    window: r.u32(),
                    redundancy: r.u8(),
                };
                if hs.src_cid == 0 {
                    return Err(DecodeError::InvalidField("src_cid"));
                }
                if (phase == HandshakePhase::Initial) != (header.dst_cid == 0) {
                    return Err(DecodeError::InvalidField("dst_cid"));
                }
                if hs.max_payload < MIN_PAYLOAD {
                    return Err(DecodeError::InvalidField("max_payload"));
                }
                r.finish()?;
                Body::Handshake(hs)
            }
            PacketType::Data => {
                r.need(8)?;
                let seq = r.u32();
                let timestamp = r.u32();
                Body::Data(Data { seq, timestamp, payload: r.rest() })
            }
            PacketType::Ack => {
                r.need(ACK_FIXED_LEN - HEADER_LEN)?;
                let fence_base = r.u32();
                let echo_timestamp = r.u32();
                let ack_delay = r.u32();
                let window = r.u32();
                let (bitmap_len, far_follows) = split_bitmap_len(r.u16());
                r.need(bitmap_len)?;
                let bitmap = r.take(bitmap_len);
                r.finish()?;
                Body::Ack(Ack { fence_base, echo_timestamp, ack_delay, window, bitmap, far_follows })
            }
            PacketType::Close => {
                r.need(CLOSE_LEN - HEADER_LEN)?;
                let close = Close { seq: r.u32(), timestamp: r.u32() };
                r.finish()?;
                Body::Close(close)
            }
            PacketType::Reset => {
                r.need(RESET_LEN - HEADER_LEN)?;
                let reason = ResetReason::from_u8(r.u8()).ok_or(DecodeError::InvalidField("reason"))?;
                r.finish()?;
                Body::Reset(Reset { reason })
            }
            PacketType::Keepalive => {
                r.need(KEEPALIVE_LEN - HEADER_LEN)?;
                let ka = Keepalive { timestamp: r.u32() };
                r.finish()?;
                Body::Keepalive(ka)
            }
            PacketType::Repair => {
                r.need(REPAIR_OVERHEAD - HEADER_LEN)?;
                let repair = Repair { scheme: r.u8(), first_seq: r.u32(), span: r.u8(), index: r.u8(), symbol: r.rest() };
                if repair.span == 0 {
                    return Err(DecodeError::InvalidField("span"));
                }
                Body::Repair(repair)
            }
            PacketType::Feedback => {
                r.need(FEEDBACK_LEN - HEADER_LEN)?;
                let feedback = Feedback { expected: r.u64(), missing: r.u64() };
                r.finish()?;
                if feedback.missing > feedback.expected {
                    return Err(DecodeError::InvalidField("missing"));
                }
                Body::Feedback(feedback)
            }
            PacketType::AckFrequency => {
                r.need(ACK_FREQUENCY_LEN - HEADER_LEN)?;
                let request = AckFrequency { sequence: r.u32(), packets: r.u16(), max_delay_us: r.u32() };
                r.finish()?;
                if request.packets == 0 {
                    return Err(DecodeError::InvalidField("packets"));
                }
                Body::AckFrequency(request)
            }
            PacketType::FarAck => {
                r.need(FAR_ACK_FIXED_LEN - HEADER_LEN)?;
                let fence_base = r.u32();
                let start = r.u32();
                let (bitmap_len, far_follows) = split_bitmap_len(r.u16());
                if bitmap_len == 0 {
                    return Err(DecodeError::InvalidField("bitmap_len"));
                }
                r.need(bitmap_len)?;
                let bitmap = r.take(bitmap_len);
                r.finish()?;
                Body::FarAck(FarAck { fence_base, start, bitmap, far_follows })
            }
            PacketType::StatelessReset => unreachable!("Header::peek refuses type 7 in version 1"),
        };
        if header.dst_cid == 0 && !matches!(body, Body::Handshake(_)) {
            return Err(DecodeError::InvalidField("dst_cid"));
        }
        Ok(Packet { dst_cid: header.dst_cid, body })
    }

    pub fn packet_type(&self) -> PacketType {
        match self.body {
            Body::Handshake(_) => PacketType::Handshake,
            Body::Data(_) => PacketType::Data,
            Body::Ack(_) => PacketType::Ack,
            Body::Close(_) => PacketType::Close,
            Body::Reset(_) => PacketType::Reset,
            Body::Keepalive(_) => PacketType::Keepalive,
            Body::Repair(_) => PacketType::Repair,
            Body::Feedback(_) => PacketType::Feedback,
            Body::AckFrequency(_) => PacketType::AckFrequency,
            Body::FarAck(_) => PacketType::FarAck,
        }
    }

    pub fn encoded_len(&self) -> usize {
        match &self.body {
            Body::Handshake(_) => HANDSHAKE_LEN,
            Body::Data(d) => DATA_OVERHEAD + d.payload.len(),
            Body::Ack(a) => ACK_FIXED_LEN + a.bitmap.len(),
            Body::Close(_) => CLOSE_LEN,
            Body::Reset(_) => RESET_LEN,
            Body::Keepalive(_) => KEEPALIVE_LEN,
            Body::Repair(r) => REPAIR_OVERHEAD + r.symbol.len(),
            Body::Feedback(_) => FEEDBACK_LEN,
            Body::AckFrequency(_) => ACK_FREQUENCY_LEN,
            Body::FarAck(a) => FAR_ACK_FIXED_LEN + a.bitmap.len(),
        }
    }

    /// Writes the packet at the start of `buf` and returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let len = self.encoded_len();
        if buf.len() < len {
            return Err(EncodeError::BufferTooSmall { needed: len, got: buf.len() });
        }
        let mut w = Writer { buf, pos: 0 };
        w.u8(VERSION);
        w.u8(self.packet_type() as u8);
        w.u32(self.dst_cid);
        match &self.body {
            Body::Handshake(h) => {
                w.u8(h.phase as u8);
                w.u32(h.src_cid);
                w.u32(h.timestamp);
                w.u32(h.echo_timestamp);
                w.u16(h.max_payload);
                w.u32(h.window);
                w.u8(h.redundancy);
            }
            Body::Data(d) => {
                w.u32(d.seq);
                w.u32(d.timestamp);
                w.bytes(d.payload);
            }
            Body::Ack(a) => {
                let bitmap_len = join_bitmap_len(a.bitmap.len(), a.far_follows)?;
                w.u32(a.fence_base);
                w.u32(a.echo_timestamp);
                w.u32(a.ack_delay);
                w.u32(a.window);
                w.u16(bitmap_len);
                w.bytes(a.bitmap);
            }
            Body::Close(c) => {
                w.u32(c.seq);
                w.u32(c.timestamp);
            }
            Body::Reset(r) => w.u8(r.reason as u8),
            Body::Keepalive(k) => w.u32(k.timestamp),
            Body::Repair(r) => {
                w.u8(r.scheme);
                w.u32(r.first_seq);
                w.u8(r.span);
                w.u8(r.index);
                w.bytes(r.symbol);
            }
            Body::Feedback(f) => {
                w.u64(f.expected);
                w.u64(f.missing);
            }
            Body::AckFrequency(a) => {
                w.u32(a.sequence);
                w.u16(a.packets);
                w.u32(a.max_delay_us);
            }
            Body::FarAck(a) => {
                let bitmap_len = join_bitmap_len(a.bitmap.len(), a.far_follows)?;
                w.u32(a.fence_base);
                w.u32(a.start);
                w.u16(bitmap_len);
                w.bytes(a.bitmap);
            }
        }
        debug_assert_eq!(w.pos, len);
        Ok(len)
    }
}

/// Bit 15 of an ack's or far ack's `bitmap_len` says a far ack follows; the rest is the length.
const FAR_FOLLOWS: u16 = 0x8000;

fn split_bitmap_len(raw: u16) -> (usize, bool) {
    (usize::from(raw & !FAR_FOLLOWS), raw & FAR_FOLLOWS != 0)
}

fn join_bitmap_len(len: usize, far_follows: bool) -> Result<u16, EncodeError> {
    let len = u16::try_from(len).ok().filter(|&l| l & FAR_FOLLOWS == 0).ok_or(EncodeError::FieldTooLarge("bitmap"))?;
    Ok(if far_follows { len | FAR_FOLLOWS } else { len })
}

/// Writes a data packet's header in place in front of a payload the caller already
/// copied to `buf[DATA_OVERHEAD..DATA_OVERHEAD + payload_len]`, avoiding a second copy
/// on the hot path. Returns the datagram length.
pub fn emit_data_header_in_place(
    buf: &mut [u8],
    dst_cid: u32,
    seq: u32,
    timestamp: u32,
    payload_len: usize,
) -> Result<usize, EncodeError> {
    let len = DATA_OVERHEAD + payload_len;
    if buf.len() < len {
        return Err(EncodeError::BufferTooSmall { needed: len, got: buf.len() });
    }
    let mut w = Writer { buf, pos: 0 };
    w.u8(VERSION);
    w.u8(PacketType::Data as u8);
    w.u32(dst_cid);
    w.u32(seq);
    w.u32(timestamp);
    Ok(len)
}

/// A version 2 handshake packet. The Noise messages are opaque here: the
/// connection's handshake reads and writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecureHandshake<'a> {
    /// Client to server (destination id 0), padded to [`MIN_INITIAL_LEN`]. `token` is
    /// empty until a Retry gave one.
    Initial { src_cid: u32, timestamp: u32, pattern: u8, cipher: u8, token: &'a [u8], noise: &'a [u8] },
    /// Server to client: prove you receive at your address by sending the Initial again with
    /// this token. Echoes the Initial's timestamp, so the client's retransmission timer can
    /// start from the path's round trip instead of a guess.
    Retry { dst_cid: u32, echo_timestamp: u32, token: &'a [u8] },
    /// Server to client: the server's id, the Initial's timestamp echoed, and the second Noise message.
    Accept { dst_cid: u32, src_cid: u32, echo_timestamp: u32, noise: &'a [u8] },
}

impl<'a> SecureHandshake<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<SecureHandshake<'a>, DecodeError> {
        let header = Header::peek(bytes)?;
        if header.version != VERSION_2 {
            return Err(DecodeError::UnsupportedVersion(header.version));
        }
        if header.packet_type != PacketType::Handshake {
            return Err(DecodeError::InvalidField("type"));
        }
        let mut r = Reader::new(&bytes[HEADER_LEN..]);
        r.need(1)?;
        let phase = r.u8();
        if (phase == HandshakePhase::Initial as u8) != (header.dst_cid == 0) {
            return Err(DecodeError::InvalidField("dst_cid"));
        }
        match phase {
            1 => {
                if bytes.len() < MIN_INITIAL_LEN {
                    return Err(DecodeError::Truncated { needed: MIN_INITIAL_LEN, got: bytes.len() });
                }
                r.need(11)?;
                let src_cid = r.u32();
                let timestamp = r.u32();
                let pattern = r.u8();
                let cipher = r.u8();
                let token_len = r.u8() as usize;
                r.need(token_len + 2)?;
                let token = r.take(token_len);
                let noise_len = r.u16() as usize;
                r.need(noise_len)?;
                let noise = r.take(noise_len);
                // The rest is padding; its content carries nothing.
                if src_cid == 0 {
                    return Err(DecodeError::InvalidField("src_cid"));
                }
                Ok(SecureHandshake::Initial { src_cid, timestamp, pattern, cipher, token, noise })
            }
            2 => {
                r.need(10)?;
                let src_cid = r.u32();
                let echo_timestamp = r.u32();
                let noise_len = r.u16() as usize;
                r.need(noise_len)?;
                let noise = r.take(noise_len);
                r.finish()?;
                if src_cid == 0 {
                    return Err(DecodeError::InvalidField("src_cid"));
                }
                Ok(SecureHandshake::Accept { dst_cid: header.dst_cid, src_cid, echo_timestamp, noise })
            }
            PHASE_RETRY => {
                r.need(5)?;
                let echo_timestamp = r.u32();
                let token_len = r.u8() as usize;
                r.need(token_len)?;
                let token = r.take(token_len);
                r.finish()?;
                Ok(SecureHandshake::Retry { dst_cid: header.dst_cid, echo_timestamp, token })
            }
            _ => Err(DecodeError::InvalidField("phase")),
        }
    }

    /// Writes the packet at the start of `buf` (an Initial padded with zeros) and returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let field = |len: usize, name| u16::try_from(len).map_err(|_| EncodeError::FieldTooLarge(name));
        let (len, dst_cid, phase) = match self {
            SecureHandshake::Initial { token, noise, .. } => {
                if token.len() > 255 {
                    return Err(EncodeError::FieldTooLarge("token"));
                }
                field(noise.len(), "noise")?;
                ((HEADER_LEN + 14 + token.len() + noise.len()).max(MIN_INITIAL_LEN), 0, HandshakePhase::Initial as u8)
            }
            SecureHandshake::Retry { dst_cid, token, .. } => {
                if token.len() > 255 {
                    return Err(EncodeError::FieldTooLarge("token"));
                }
                (HEADER_LEN + 6 + token.len(), *dst_cid, PHASE_RETRY)
            }
            SecureHandshake::Accept { dst_cid, noise, .. } => {
                field(noise.len(), "noise")?;
                (HEADER_LEN + 11 + noise.len(), *dst_cid, HandshakePhase::Accept as u8)
            }
        };
        if buf.len() < len {
            return Err(EncodeError::BufferTooSmall { needed: len, got: buf.len() });
        }
        let mut w = Writer { buf, pos: 0 };
        w.u8(VERSION_2);
        w.u8(PacketType::Handshake as u8);
        w.u32(dst_cid);
        w.u8(phase);
        match self {
            SecureHandshake::Initial { src_cid, timestamp, pattern, cipher, token, noise } => {
                w.u32(*src_cid);
                w.u32(*timestamp);
                w.u8(*pattern);
                w.u8(*cipher);
                w.u8(token.len() as u8);
                w.bytes(token);
                w.u16(noise.len() as u16);
                w.bytes(noise);
                let pad = len - w.pos;
                w.bytes(&[0u8; MIN_INITIAL_LEN][..pad]);
            }
            SecureHandshake::Retry { echo_timestamp, token, .. } => {
                w.u32(*echo_timestamp);
                w.u8(token.len() as u8);
                w.bytes(token);
            }
            SecureHandshake::Accept { src_cid, echo_timestamp, noise, .. } => {
                w.u32(*src_cid);
                w.u32(*echo_timestamp);
                w.u16(noise.len() as u16);
                w.bytes(noise);
            }
        }
        debug_assert_eq!(w.pos, len);
        Ok(len)
    }
}

/// Version 2: ends a connection whose peer lost it. `cid` is the sender's own id (the
/// one it no longer knows), `token` what it told the peer in its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatelessReset {
    pub cid: u32,
    pub token: [u8; 16],
}

impl StatelessReset {
    pub fn parse(bytes: &[u8]) -> Result<StatelessReset, DecodeError> {
        let header = Header::peek(bytes)?;
        if header.version != VERSION_2 || header.packet_type != PacketType::StatelessReset {
            return Err(DecodeError::InvalidField("type"));
        }
        if bytes.len() != STATELESS_RESET_LEN {
            return Err(if bytes.len() < STATELESS_RESET_LEN {
                DecodeError::Truncated { needed: STATELESS_RESET_LEN, got: bytes.len() }
            } else {
                DecodeError::TrailingBytes(bytes.len() - STATELESS_RESET_LEN)
            });
        }
        let mut token = [0u8; 16];
        token.copy_from_slice(&bytes[HEADER_LEN..]);
        Ok(StatelessReset { cid: header.dst_cid, token })
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        if buf.len() < STATELESS_RESET_LEN {
            return Err(EncodeError::BufferTooSmall { needed: STATELESS_RESET_LEN, got: buf.len() });
        }
        let mut w = Writer { buf, pos: 0 };
        w.u8(VERSION_2);
        w.u8(PacketType::StatelessReset as u8);
        w.u32(self.cid);
        w.bytes(&self.token);
        Ok(STATELESS_RESET_LEN)
    }
}

/// Recovers a 64-bit sequence number from its low 32 bits: the candidate closest
/// to `expected` (the next sequence number the reader expects). Unambiguous while
/// fewer than 2^31 packets are outstanding, which the window guarantees.
pub fn expand_seq(truncated: u32, expected: u64) -> u64 {
    const SPAN: u64 = 1 << 32;
    const HALF: u64 = 1 << 31;
    let candidate = (expected & !(SPAN - 1)) | truncated as u64;
    if candidate.saturating_add(HALF) <= expected && candidate <= u64::MAX - SPAN {
        candidate + SPAN
    } else if candidate > expected.saturating_add(HALF) && candidate >= SPAN {
        candidate - SPAN
    } else {
        candidate
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

// Every accessor below is called only after `need` proved the bytes are present,
// so the slice indexing cannot go out of bounds. The fixed-width reads are inlined: a
// call each, several per packet, was a quarter of parsing a data packet.
impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }
    fn need(&self, n: usize) -> Result<(), DecodeError> {
        let remaining = self.bytes.len() - self.pos;
        if remaining < n {
            // Report in terms of the whole packet so the message is actionable.
            Err(DecodeError::Truncated { needed: self.pos + n, got: self.bytes.len() })
        } else {
            Ok(())
        }
    }
    #[inline(always)]
    fn u8(&mut self) -> u8 {
        let v = self.bytes[self.pos];
        self.pos += 1;
        v
    }
    #[inline(always)]
    fn u16(&mut self) -> u16 {
        let v = u16::from_be_bytes([self.bytes[self.pos], self.bytes[self.pos + 1]]);
        self.pos += 2;
        v
    }
    #[inline(always)]
    fn u32(&mut self) -> u32 {
        let b = &self.bytes[self.pos..self.pos + 4];
        self.pos += 4;
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    #[inline(always)]
    fn u64(&mut self) -> u64 {
        let hi = self.u32() as u64;
        hi << 32 | self.u32() as u64
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn rest(&mut self) -> &'a [u8] {
        let s = &self.bytes[self.pos..];
        self.pos = self.bytes.len();
        s
    }
    fn finish(&self) -> Result<(), DecodeError> {
        match self.bytes.len() - self.pos {
            0 => Ok(()),
            n => Err(DecodeError::TrailingBytes(n)),
        }
    }
}

// Callers check the total length first, so the writes stay in bounds.
struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.buf[self.pos] = v;
        self.pos += 1;
    }
    fn u16(&mut self, v: u16) {
        self.bytes(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_be_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.buf[self.pos..self.pos + v.len()].copy_from_slice(v);
        self.pos += v.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

    fn roundtrip(packet: Packet<'_>, expected_hex: &str) {
        let mut buf = [0u8; 256];
        let n = packet.emit(&mut buf).unwrap();
        assert_eq!(&buf[..n], &hex(expected_hex)[..], "encoding of {packet:?}");
        assert_eq!(Packet::parse(&buf[..n]).unwrap(), packet);
    }

    // The vectors below are the ones printed in docs/protocol.md, section "Test vectors";
    // `docs_vectors_match` checks that the document still says the same.
    pub(crate) const VECTORS: &[(&str, &str)] = &[
        ("handshake-initial", "01 01 00000000 01 0a0b0c0d 00000064 00000000 05b4 00000400 84"),
        ("handshake-accept", "01 01 0a0b0c0d 02 11223344 000000c8 00000064 05b4 00000200 80"),
        ("data", "01 02 11223344 00000007 000003e8 68656c6c6f"),
        ("ack-seed", "01 03 0a0b0c0d 00000005 000003e8 000000fa 00000020 0004 0d000080"),
        ("ack-empty", "01 03 0a0b0c0d 00000000 00000000 00000000 00000040 0000"),
        ("close", "01 04 11223344 00000008 000007d0"),
        ("reset", "01 05 11223344 00"),
        ("keepalive", "01 06 0a0b0c0d 00002710"),
        ("repair", "01 08 11223344 02 00000007 10 03 a1b2c3"),
        ("feedback", "01 09 0a0b0c0d 0000000000000080 0000000000000009"),
        ("ack-frequency", "01 0a 11223344 00000003 0010 00004e20"),
        ("far-ack", "01 0b 0a0b0c0d 00000005 00002006 0002 0180"),
    ];

    fn vector(name: &str) -> &'static str {
        VECTORS.iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn vectors_roundtrip() {
        roundtrip(
            Packet {
                dst_cid: 0,
                body: Body::Handshake(Handshake {
                    phase: HandshakePhase::Initial,
                    src_cid: 0x0a0b0c0d,
                    timestamp: 100,
                    echo_timestamp: 0,
                    max_payload: 1460,
                    window: 1024,
                    redundancy: 0x84,
                }),
            },
            vector("handshake-initial"),
        );
        roundtrip(
            Packet {
                dst_cid: 0x0a0b0c0d,
                body: Body::Handshake(Handshake {
                    phase: HandshakePhase::Accept,
                    src_cid: 0x11223344,
                    timestamp: 200,
                    echo_timestamp: 100,
                    max_payload: 1460,
                    window: 512,
                    redundancy: 0x80,
                }),
            },
            vector("handshake-accept"),
        );
        roundtrip(
            Packet {
                dst_cid: 0x11223344,
                body: Body::Data(Data { seq: 7, timestamp: 1000, payload: b"hello" }),
            },
            vector("data"),
        );
        let bitmap = [0x0d, 0x00, 0x00, 0x80];
        let ack = Ack { fence_base: 5, echo_timestamp: 1000, ack_delay: 250, window: 32, bitmap: &bitmap, far_follows: false };
        // Bits 0, 2, 3 and 31 are set: sequence numbers 6, 8, 9 and 37 arrived.
        assert_eq!(ack.received_offsets().collect::<Vec<_>>(), vec![0, 2, 3, 31]);
        roundtrip(Packet { dst_cid: 0x0a0b0c0d, body: Body::Ack(ack) }, vector("ack-seed"));
        roundtrip(
            Packet {
                dst_cid: 0x0a0b0c0d,
                body: Body::Ack(Ack { fence_base: 0, echo_timestamp: 0, ack_delay: 0, window: 64, bitmap: &[], far_follows: false }),
            },
            vector("ack-empty"),
        );
        roundtrip(
            Packet { dst_cid: 0x11223344, body: Body::Close(Close { seq: 8, timestamp: 2000 }) },
            vector("close"),
        );
        roundtrip(
            Packet { dst_cid: 0x11223344, body: Body::Reset(Reset { reason: ResetReason::Aborted }) },
            vector("reset"),
        );
        roundtrip(
            Packet { dst_cid: 0x0a0b0c0d, body: Body::Keepalive(Keepalive { timestamp: 10_000 }) },
            vector("keepalive"),
        );
        roundtrip(
            Packet { dst_cid: 0x11223344, body: Body::Repair(Repair { scheme: 2, first_seq: 7, span: 16, index: 3, symbol: &[0xa1, 0xb2, 0xc3] }) },
            vector("repair"),
        );
        roundtrip(Packet { dst_cid: 0x0a0b0c0d, body: Body::Feedback(Feedback { expected: 128, missing: 9 }) }, vector("feedback"));
        assert_eq!(Packet::parse(&hex("01 08 11223344 02 00000007 00 03 a1")), Err(DecodeError::InvalidField("span")));
        assert_eq!(Packet::parse(&hex("01 09 0a0b0c0d 0000000000000001 0000000000000002")), Err(DecodeError::InvalidField("missing")));
        roundtrip(Packet { dst_cid: 0x11223344, body: Body::AckFrequency(AckFrequency { sequence: 3, packets: 16, max_delay_us: 20_000 }) }, vector("ack-frequency"));
        assert_eq!(Packet::parse(&hex("01 0a 11223344 00000003 0000 00000000")), Err(DecodeError::InvalidField("packets")));
        assert!(Packet::parse(&hex("01 0a 11223344 00000003 0010")).is_err(), "truncated (the 12-byte request before max_delay)");
        assert!(Packet::parse(&hex("01 0a 11223344 00000003 0010 00004e20 00")).is_err(), "trailing byte");
        // Fence base 5; bits 0 and 15 from 8198: sequence numbers 8198 and 8213 arrived.
        roundtrip(Packet { dst_cid: 0x0a0b0c0d, body: Body::FarAck(FarAck { fence_base: 5, start: 8198, bitmap: &[0x01, 0x80], far_follows: false }) }, vector("far-ack"));
        // Bit 15 of the length: another far ack follows.
        let far = Packet { dst_cid: 0x0a0b0c0d, body: Body::FarAck(FarAck { fence_base: 5, start: 8198, bitmap: &[0x01, 0x80], far_follows: true }) };
        roundtrip(far, "01 0b 0a0b0c0d 00000005 00002006 8002 0180");
        let ack = Packet { dst_cid: 0x0a0b0c0d, body: Body::Ack(Ack { fence_base: 5, echo_timestamp: 1000, ack_delay: 250, window: 32, bitmap: &bitmap, far_follows: true }) };
        roundtrip(ack, "01 03 0a0b0c0d 00000005 000003e8 000000fa 00000020 8004 0d000080");
        assert_eq!(Packet::parse(&hex("01 0b 0a0b0c0d 00000005 00002006 0000")), Err(DecodeError::InvalidField("bitmap_len")));
        assert!(Packet::parse(&hex("01 0b 0a0b0c0d 00000005 00002006 0002 01")).is_err(), "truncated");
        assert!(Packet::parse(&hex("01 0b 0a0b0c0d 00000005 00002006 0001 01 00")).is_err(), "trailing byte");
    }

    #[test]
    fn docs_vectors_match() {
        let doc = include_str!("../../../docs/protocol.md");
        for (name, bytes) in VECTORS {
            let line = format!("| `{name}` | `{bytes}` |");
            assert!(doc.contains(&line), "docs/protocol.md lacks the vector line: {line}");
        }
    }

    pub(crate) const V2_VECTORS: &[(&str, &str)] = &[
        ("v2-initial", "02 01 00000000 01 0a0b0c0d 00000064 02 01 00 0004 aaaaaaaa"),
        ("v2-retry", "02 01 0a0b0c0d 03 00000064 04 bbbbbbbb"),
        ("v2-accept", "02 01 0a0b0c0d 02 11223344 00000064 0004 cccccccc"),
        ("v2-stateless-reset", "02 07 11223344 dddddddddddddddddddddddddddddddd"),
    ];

    #[test]
    fn a_handshake_packet_and_where_it_goes_are_told_from_its_header_alone() {
        let v1 = |name: &str| hex(VECTORS.iter().find(|(n, _)| *n == name).unwrap().1);
        let v2 = |name: &str| hex(V2_VECTORS.iter().find(|(n, _)| *n == name).unwrap().1);
        assert_eq!(handshake_to(&v1("handshake-initial")), Some(HandshakeTo::NewConnection));
        assert_eq!(handshake_to(&v2("v2-initial")), Some(HandshakeTo::NewConnection));
        assert_eq!(handshake_to(&v1("handshake-accept")), Some(HandshakeTo::Connection));
        assert_eq!(handshake_to(&v2("v2-retry")), Some(HandshakeTo::Connection));
        assert_eq!(handshake_to(&v2("v2-accept")), Some(HandshakeTo::Connection));
        for packet in [v1("data"), v2("v2-stateless-reset"), vec![], vec![1, 1, 0, 0], vec![9; 40]] {
            assert_eq!(handshake_to(&packet), None, "{packet:02x?}");
        }
    }

    #[test]
    fn v2_vectors_roundtrip() {
        let v = |name: &str| hex(V2_VECTORS.iter().find(|(n, _)| *n == name).unwrap().1);
        let mut buf = [0u8; 512];
        let initial = SecureHandshake::Initial { src_cid: 0x0a0b0c0d, timestamp: 100, pattern: 2, cipher: 1, token: &[], noise: &[0xaa; 4] };
        let n = initial.emit(&mut buf).unwrap();
        let mut expected = v("v2-initial");
        expected.resize(MIN_INITIAL_LEN, 0);
        assert_eq!(&buf[..n], &expected[..]);
        assert_eq!(SecureHandshake::parse(&buf[..n]).unwrap(), initial);
        assert!(SecureHandshake::parse(&buf[..n - 1]).is_err(), "an Initial shorter than 256 bytes");
        for (name, packet) in [
            ("v2-retry", SecureHandshake::Retry { dst_cid: 0x0a0b0c0d, echo_timestamp: 100, token: &[0xbb; 4] }),
            ("v2-accept", SecureHandshake::Accept { dst_cid: 0x0a0b0c0d, src_cid: 0x11223344, echo_timestamp: 100, noise: &[0xcc; 4] }),
        ] {
            let n = packet.emit(&mut buf).unwrap();
            assert_eq!(&buf[..n], &v(name)[..], "{name}");
            assert_eq!(SecureHandshake::parse(&buf[..n]).unwrap(), packet);
        }
        let reset = StatelessReset { cid: 0x11223344, token: [0xdd; 16] };
        let n = reset.emit(&mut buf).unwrap();
        assert_eq!(&buf[..n], &v("v2-stateless-reset")[..]);
        assert_eq!(StatelessReset::parse(&buf[..n]).unwrap(), reset);
        let doc = include_str!("../../../docs/protocol.md");
        for (name, bytes) in V2_VECTORS {
            let line = format!("| `{name}` | `{bytes}` |");
            assert!(doc.contains(&line), "docs/protocol.md lacks the vector line: {line}");
        }
        // Version 2's type 7 does not exist in version 1.
        assert_eq!(Packet::parse(&hex("01 07 11223344")), Err(DecodeError::UnknownType(7)));
    }

    #[test]
    fn malformed_packets_are_typed_errors() {
        assert_eq!(Packet::parse(&[]), Err(DecodeError::Truncated { needed: 6, got: 0 }));
        assert_eq!(Packet::parse(&hex("02 02 00000001 00000000 00000000")), Err(DecodeError::UnsupportedVersion(2)));
        assert_eq!(Packet::parse(&hex("01 0c 00000001")), Err(DecodeError::UnknownType(12)));
        // A data packet with the connection id 0 is never valid.
        assert_eq!(
            Packet::parse(&hex("01 02 00000000 00000000 00000000")),
            Err(DecodeError::InvalidField("dst_cid"))
        );
        // An ack whose bitmap length runs past the datagram.
        assert!(matches!(
            Packet::parse(&hex("01 03 00000001 00000000 00000000 00000000 00000000 0008 ff")),
            Err(DecodeError::Truncated { .. })
        ));
        assert_eq!(Packet::parse(&hex("01 06 00000001 00000001 ff")), Err(DecodeError::TrailingBytes(1)));
        assert_eq!(Packet::parse(&hex("01 05 00000001 07")), Err(DecodeError::InvalidField("reason")));
        // An Accept must name the client's connection id.
        assert_eq!(
            Packet::parse(&hex("01 01 00000000 02 11223344 000000c8 00000064 05b4 00000200 80")),
            Err(DecodeError::InvalidField("dst_cid"))
        );
    }

    #[test]
    fn sequence_numbers_expand_across_wraparound() {
        assert_eq!(expand_seq(5, 0), 5);
        assert_eq!(expand_seq(0xffff_fff0, 0x1_0000_0010), 0xffff_fff0);
        assert_eq!(expand_seq(0x10, 0xffff_fff0), 0x1_0000_0010);
        assert_eq!(expand_seq(0x7fff_ffff, 0), 0x7fff_ffff);
        assert_eq!(expand_seq(0xffff_ffff, 0), 0xffff_ffff, "no negative sequence numbers exist");
        for expected in [0u64, 1 << 31, (1 << 32) + 7, u64::MAX - 5] {
            for delta in [-1000i64, -1, 0, 1, 1000] {
                let actual = (expected as i64).wrapping_add(delta) as u64;
                if (delta < 0 && actual > expected) || (delta > 0 && actual < expected) {
                    continue; // past either end of the 64-bit space
                }
                assert_eq!(expand_seq(actual as u32, expected), actual, "expected={expected} delta={delta}");
            }
        }
    }
}
