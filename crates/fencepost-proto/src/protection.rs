//! Packet protection: the last step of the send path and the first of the
//! receive path. A [`PacketProtection`] seals every packet after the handshake
//! (authenticating the 6-byte header as associated data and transforming the
//! rest) and opens what arrives. Handshake packets are left as they are: they
//! carry what a protection scheme needs to set itself up.
//!
//! Two schemes are built in: none (wire format version 1, plaintext) and Noise
//! (version 2: a Noise handshake, then AEAD packets; see [`crate::crypto`]).
//! [`ProtectionConfig::Custom`] takes a scheme from outside the crate.

use crate::connection::Side;
use crate::crypto::{NoiseConfig, PROTECTION_OVERHEAD};
use std::fmt;
use std::sync::Arc;

/// A packet that does not open: forged, corrupted, or from another key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectionError(pub &'static str);

impl fmt::Display for ProtectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "packet protection: {}", self.0)
    }
}

impl std::error::Error for ProtectionError {}

impl ProtectionError {
    /// The packet authenticated once already: a copy, replayed or duplicated on the way.
    pub const REPLAYED: ProtectionError = ProtectionError("replayed packet");
}

pub trait PacketProtection: fmt::Debug + Send {
    /// Bytes a sealed packet is longer than the plaintext (an authentication tag).
    fn overhead(&self) -> usize;

    /// Seals `packet[..len]` in place: `packet[..HEADER_LEN]` is the header, to be
    /// authenticated but left readable (endpoints route on it). `packet` has room
    /// for [`PacketProtection::overhead`] more bytes. Returns the sealed length.
    fn seal(&mut self, packet: &mut [u8], len: usize) -> Result<usize, ProtectionError>;

    /// Bytes a sealed packet's header is longer than version 1's (at most
    /// [`PacketProtection::overhead`]). A packet written with this many bytes left free after
    /// its version 1 header can be sealed by [`PacketProtection::seal_spaced`] without moving
    /// its body.
    fn header_room(&self) -> usize {
        0
    }

    /// [`PacketProtection::seal`] for a packet laid out with room for the sealed header:
    /// `packet[..HEADER_LEN]` the version 1 header, then [`PacketProtection::header_room`]
    /// free bytes, then the body; `len` is the version 1 length (header and body). A protection
    /// that needs no room seals as `seal` does.
    fn seal_spaced(&mut self, packet: &mut [u8], len: usize) -> Result<usize, ProtectionError> {
        self.seal(packet, len)
    }

    /// Opens a sealed datagram and returns the plaintext packet, header included:
    /// `datagram` itself when nothing changes, or `scratch` filled with the result.
    fn open<'a>(&mut self, datagram: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ProtectionError>;

    /// [`PacketProtection::open`] for a datagram it may overwrite: the plaintext packet
    /// may be returned from within `datagram`, saving a copy. Unless a protection knows
    /// better, it opens as `open` does.
    fn open_in_place<'a>(&mut self, datagram: &'a mut [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ProtectionError> {
        self.open(datagram, scratch)
    }

    /// One more than the highest packet number this protection has opened (0: none yet,
    /// or a protection that numbers nothing). A packet that raises it is the newest of the
    /// peer's that arrived, authenticated and not a replay: an endpoint takes the address
    /// it came from as the peer's own (a NAT that gave the peer a new port). A protection
    /// that cannot tell leaves it at 0, and its connections keep their first address.
    fn opened_up_to(&self) -> u64 {
        0
    }

    fn name(&self) -> &str;
}

/// Builds the protection of each new connection.
pub trait ProtectionFactory: fmt::Debug + Send + Sync {
    fn build(&self, side: Side) -> Box<dyn PacketProtection>;
    /// Bytes every protected packet grows by (the same as the built protection's).
    fn overhead(&self) -> usize;
    fn name(&self) -> &str;
}

#[derive(Clone, Debug, Default)]
pub enum ProtectionConfig {
    /// Plaintext: what wire format version 1 specifies.
    #[default]
    None,
    /// Wire format version 2: a Noise handshake, then every packet sealed with an AEAD.
    Noise(NoiseConfig),
    /// A scheme from outside this crate.
    Custom(Arc<dyn ProtectionFactory>),
}

impl PartialEq for ProtectionConfig {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ProtectionConfig::None, ProtectionConfig::None) => true,
            (ProtectionConfig::Noise(a), ProtectionConfig::Noise(b)) => a == b,
            (ProtectionConfig::Custom(a), ProtectionConfig::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl ProtectionConfig {
    pub fn build(&self, side: Side) -> Box<dyn PacketProtection> {
        match self {
            ProtectionConfig::None => Box::new(NullProtection),
            // The handshake installs the real keys; until then nothing opens or seals.
            ProtectionConfig::Noise(_) => Box::new(AwaitingKeys),
            ProtectionConfig::Custom(factory) => factory.build(side),
        }
    }

    pub fn overhead(&self) -> usize {
        match self {
            ProtectionConfig::None => 0,
            ProtectionConfig::Noise(_) => PROTECTION_OVERHEAD,
            ProtectionConfig::Custom(factory) => factory.overhead(),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ProtectionConfig::None => "none",
            ProtectionConfig::Noise(n) => n.cipher.name(),
            ProtectionConfig::Custom(factory) => factory.name(),
        }
    }

    /// The Noise settings, when this is wire format version 2.
    pub fn noise(&self) -> Option<&NoiseConfig> {
        match self {
            ProtectionConfig::Noise(n) => Some(n),
            _ => None,
        }
    }

    /// The wire-format version a connection with this protection speaks.
    pub fn wire_version(&self) -> u8 {
        if self.noise().is_some() { 2 } else { 1 }
    }
}

/// Leaves packets as they are.
#[derive(Debug)]
pub struct NullProtection;

impl PacketProtection for NullProtection {
    fn overhead(&self) -> usize {
        0
    }
    fn seal(&mut self, _packet: &mut [u8], len: usize) -> Result<usize, ProtectionError> {
        Ok(len)
    }
    fn open<'a>(&mut self, datagram: &'a [u8], _scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ProtectionError> {
        Ok(datagram)
    }
    fn name(&self) -> &str {
        "none"
    }
}

/// Noise protection before its handshake has finished: nothing seals or opens.
#[derive(Debug)]
pub struct AwaitingKeys;

impl PacketProtection for AwaitingKeys {
    fn overhead(&self) -> usize {
        PROTECTION_OVERHEAD
    }
    fn seal(&mut self, _packet: &mut [u8], _len: usize) -> Result<usize, ProtectionError> {
        Err(ProtectionError("no keys before the handshake finishes"))
    }
    fn open<'a>(&mut self, _datagram: &'a [u8], _scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ProtectionError> {
        Err(ProtectionError("no keys before the handshake finishes"))
    }
    fn name(&self) -> &str {
        "awaiting keys"
    }
}
