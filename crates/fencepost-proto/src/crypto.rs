//! Wire format version 2's cryptography: static keys, the Noise handshake, the
//! AEAD that protects every packet after it, the replay window, and the MACs
//! behind retry tokens and stateless-reset tokens. `docs/protocol.md` specifies
//! how each appears on the wire.
//!
//! Nothing here reads a clock or the OS's random source: randomness comes in as
//! seeds (from the OS in the UDP runtime, from a run's seed in the simulator).

use crate::protection::{PacketProtection, ProtectionError};
use crate::time::Duration;
use aws_lc_rs::agreement;
use rand_chacha::ChaCha20Rng;
use rand_core::{Rng, SeedableRng};
use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::hmac;
use snow::params::{CipherChoice, DHChoice, HashChoice};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher as NoiseCipher, Dh, Hash as NoiseHash, Random};
use std::fmt;
use std::sync::Arc;

/// Bytes of a Curve25519 key, private or public.
pub const KEY_LEN: usize = 32;
/// Bytes of an AEAD tag.
pub const TAG_LEN: usize = 16;
/// Bytes of the packet number on the wire.
pub const PN_LEN: usize = 4;
/// A protected packet's cleartext header: version, type, destination id, packet number.
pub const PROTECTED_HEADER_LEN: usize = 10;
/// Bytes a protected packet is longer than its plaintext.
pub const PROTECTION_OVERHEAD: usize = PN_LEN + TAG_LEN;
/// Bytes of a stateless-reset token.
pub const RESET_TOKEN_LEN: usize = 16;
/// Bytes of a retry token: when it was issued (8) and a MAC over that, the address and the client's id (16).
pub const RETRY_TOKEN_LEN: usize = 24;
/// Packet numbers older than this many below the highest opened are refused as replays.
pub const REPLAY_WINDOW: u64 = 4096;

/// The AEAD that protects packets after the handshake (the Noise handshake itself always uses ChaChaPoly).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Cipher {
    Aes256Gcm = 1,
    ChaCha20Poly1305 = 2,
}

impl Cipher {
    pub fn from_u8(code: u8) -> Option<Cipher> {
        match code {
            1 => Some(Cipher::Aes256Gcm),
            2 => Some(Cipher::ChaCha20Poly1305),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Cipher::Aes256Gcm => "aes-256-gcm",
            Cipher::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }
    pub fn parse(name: &str) -> Option<Cipher> {
        match name {
            "aes-256-gcm" | "aes" => Some(Cipher::Aes256Gcm),
            "chacha20-poly1305" | "chacha" => Some(Cipher::ChaCha20Poly1305),
            _ => None,
        }
    }
    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Cipher::Aes256Gcm => &aead::AES_256_GCM,
            Cipher::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
        }
    }
}

/// The Noise handshake pattern: `NK` when the client knows the server's static key
/// (the server is authenticated), `NX` when it learns it in the handshake (trust on first use).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Pattern {
    NK = 1,
    NX = 2,
}

impl Pattern {
    pub fn from_u8(code: u8) -> Option<Pattern> {
        match code {
            1 => Some(Pattern::NK),
            2 => Some(Pattern::NX),
            _ => None,
        }
    }
    fn noise_name(self) -> &'static str {
        match self {
            Pattern::NK => "Noise_NK_25519_ChaChaPoly_BLAKE2s",
            Pattern::NX => "Noise_NX_25519_ChaChaPoly_BLAKE2s",
        }
    }
}

/// A key that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyError(pub String);

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyError {}

/// A Curve25519 public key, written as 44 characters of standard base64 (as WireGuard writes keys).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; KEY_LEN]);

impl PublicKey {
    pub fn parse(text: &str) -> Result<PublicKey, KeyError> {
        Ok(PublicKey(decode_key(text)?))
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&base64_encode(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// A static Curve25519 key pair. Its `Debug` shows only the public half.
#[derive(Clone)]
pub struct StaticKey {
    private: [u8; KEY_LEN],
    public: PublicKey,
    /// The private key as AWS-LC holds it, made once: parsing it computes the public key
    /// (a fixed-base multiplication, about 7 us), which a server otherwise did again for
    /// every handshake it answered.
    prepared: Option<Arc<agreement::PrivateKey>>,
}

impl PartialEq for StaticKey {
    fn eq(&self, other: &StaticKey) -> bool {
        self.private == other.private
    }
}

impl Eq for StaticKey {}

impl StaticKey {
    /// A new key from 32 random bytes.
    pub fn from_seed(seed: [u8; KEY_LEN]) -> StaticKey {
        StaticKey::from_private(seed)
    }

    pub fn generate(rng: &mut impl Rng) -> StaticKey {
        let mut seed = [0u8; KEY_LEN];
        rng.fill_bytes(&mut seed);
        StaticKey::from_private(seed)
    }

    pub fn from_private(private: [u8; KEY_LEN]) -> StaticKey {
        let mut dh = AwsLcX25519::default();
        dh.set(&private);
        // The bytes as given (the scalar is clamped where it is used), so the key
        // round-trips through text unchanged.
        StaticKey { private, public: PublicKey(dh.public), prepared: dh.key }
    }

    /// Reads a private key written by [`StaticKey::private_text`] (base64, surrounding whitespace allowed).
    pub fn parse(text: &str) -> Result<StaticKey, KeyError> {
        Ok(StaticKey::from_private(decode_key(text)?))
    }

    pub fn public(&self) -> PublicKey {
        self.public
    }

    pub fn private_bytes(&self) -> &[u8; KEY_LEN] {
        &self.private
    }

    /// The private key as base64 text, for a key file.
    pub fn private_text(&self) -> String {
        base64_encode(&self.private)
    }
}

impl fmt::Debug for StaticKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StaticKey(public {})", self.public)
    }
}

/// An X25519 key pair for snow, which knows `local` (this endpoint's static key) and
/// takes it as prepared when snow sets it.
fn x25519(local: Option<&StaticKey>) -> Box<dyn Dh> {
    Box::new(AwsLcX25519 { local: local.cloned(), ..AwsLcX25519::default() })
}

/// Noise's X25519 through AWS-LC. snow's own (curve25519-dalek's portable code) took 54 us
/// per variable-base multiplication on this project's host and 16 per public key; an NX
/// handshake makes two of the first and one of the second on each side, which was half a
/// handshake's CPU and set how many handshakes a second a server's driver could answer.
/// AWS-LC's take 24-26 and 7.5. The results are the same function's (RFC 7748, the scalar
/// clamped as it is used, the private key kept as given), so keys and transcripts are
/// unchanged; one difference: a peer's key of small order, which gives an all-zero shared
/// secret, fails the handshake here, where snow's went on with that secret.
#[derive(Default)]
struct AwsLcX25519 {
    private: [u8; KEY_LEN],
    public: [u8; KEY_LEN],
    key: Option<Arc<agreement::PrivateKey>>,
    local: Option<StaticKey>,
}

impl Dh for AwsLcX25519 {
    fn name(&self) -> &'static str {
        "25519"
    }
    fn pub_len(&self) -> usize {
        KEY_LEN
    }
    fn priv_len(&self) -> usize {
        KEY_LEN
    }
    fn set(&mut self, privkey: &[u8]) {
        // snow hands over exactly `priv_len` bytes; a key AWS-LC refuses leaves none, and
        // every `dh` with it fails.
        self.private = [0; KEY_LEN];
        let n = privkey.len().min(KEY_LEN);
        self.private[..n].copy_from_slice(&privkey[..n]);
        if let Some(local) = self.local.as_ref().filter(|local| local.private == self.private && local.prepared.is_some()) {
            self.public = local.public.0;
            self.key = local.prepared.clone();
            return;
        }
        self.key = agreement::PrivateKey::from_private_key(&agreement::X25519, &self.private).ok().map(Arc::new);
        self.public = [0; KEY_LEN];
        if let Some(public) = self.key.as_ref().and_then(|key| key.compute_public_key().ok()) {
            self.public.copy_from_slice(public.as_ref());
        }
    }
    fn generate(&mut self, rng: &mut dyn Random) -> Result<(), snow::Error> {
        // From the resolver's random source, not AWS-LC's: a simulated run's handshakes
        // stay as reproducible as the rest of it.
        let mut private = [0u8; KEY_LEN];
        rng.try_fill_bytes(&mut private)?;
        self.set(&private);
        Ok(())
    }
    fn pubkey(&self) -> &[u8] {
        &self.public
    }
    fn privkey(&self) -> &[u8] {
        &self.private
    }
    fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
        let key = self.key.as_ref().ok_or(snow::Error::Dh)?;
        let peer = agreement::UnparsedPublicKey::new(&agreement::X25519, pubkey.get(..KEY_LEN).ok_or(snow::Error::Dh)?);
        agreement::agree(key.as_ref(), peer, snow::Error::Dh, |shared| {
            out.get_mut(..shared.len()).ok_or(snow::Error::Dh)?.copy_from_slice(shared);
            Ok(())
        })
    }
}

fn decode_key(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let text = text.trim();
    let bytes = base64_decode(text).ok_or_else(|| KeyError(format!("{text:?} is not a key: expected 44 characters of base64 (from `fencepost keygen`)")))?;
    <[u8; KEY_LEN]>::try_from(bytes.as_slice())
        .map_err(|_| KeyError(format!("{text:?} is not a key: it decodes to {} bytes, a key is {KEY_LEN}", bytes.len())))
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if text.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for (i, chunk) in text.chunks(4).enumerate() {
        let last = i == text.len() / 4 - 1;
        let mut n = 0u32;
        let mut pad = 0;
        for (j, &c) in chunk.iter().enumerate() {
            let v = match c {
                b'=' if last && j >= 2 => {
                    pad += 1;
                    0
                }
                _ if pad > 0 => return None,
                _ => BASE64.iter().position(|&x| x == c)? as u32,
            };
            n = n << 6 | v;
        }
        // Canonical only: the bits below the last whole byte must be zero, so every key has one spelling.
        if pad > 0 && n & ((1 << (8 * pad)) - 1) != 0 {
            return None;
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// Equality that takes the same time wherever the slices differ (tokens, MACs).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// ---- Noise ----

/// What wire format v2 needs from the Noise handshake: settings shared by both sides.
#[derive(Clone, Debug, PartialEq)]
pub struct NoiseConfig {
    /// This side's static key. A server needs one; an endpoint whose configuration has
    /// none makes one at random when it starts (and tells it: `Endpoint::public_key`).
    pub local: Option<StaticKey>,
    /// The server's public key as the client knows it (pattern NK: the server is
    /// authenticated). Without it the client learns the key in the handshake (NX) and
    /// trusts it; the connection is still encrypted and its packets authenticated.
    pub peer: Option<PublicKey>,
    /// The AEAD for packets after the handshake (the client proposes, the server follows).
    pub cipher: Cipher,
    /// A server answers an Initial without a valid retry token with a Retry, keeping no
    /// state until the client proves it receives packets at its address.
    pub validate_addresses: bool,
    /// How long a retry token stays valid.
    pub retry_token_lifetime: Duration,
    /// Simulation only: after the handshake (which runs as usual), packets keep the AEAD's
    /// layout — packet number, replay window, 16-byte tag — but their bodies are neither
    /// encrypted nor authenticated, the tag being a constant of the session and direction.
    /// A simulator, which models the network and not an attacker and does not time the
    /// CPU, gets the same packets of the same sizes at the same times for a fraction of the
    /// work. Both ends must agree (a modelled packet does not open as a sealed one, nor the
    /// reverse). Never set on a real network: it protects nothing.
    pub model_aead: bool,
}

impl Default for NoiseConfig {
    fn default() -> Self {
        NoiseConfig {
            local: None,
            peer: None,
            cipher: Cipher::Aes256Gcm,
            validate_addresses: true,
            retry_token_lifetime: Duration::from_secs(10),
            model_aead: false,
        }
    }
}

/// snow's primitives, with the random source replaced by a seeded CSPRNG so a
/// handshake's ephemeral key is as reproducible as the rest of a simulated run, and
/// X25519 from AWS-LC (see [`AwsLcX25519`]).
struct SeededResolver {
    seed: [u8; 32],
    local: Option<StaticKey>,
}

struct SeededRandom(ChaCha20Rng);

impl Random for SeededRandom {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeededRandom(ChaCha20Rng::from_seed(self.seed))))
    }
    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        match choice {
            DHChoice::Curve25519 => Some(x25519(self.local.as_ref())),
            _ => None,
        }
    }
    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn NoiseHash>> {
        DefaultResolver.resolve_hash(choice)
    }
    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn NoiseCipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

/// The Noise prologue binds what travels outside the Noise messages: the version,
/// pattern, packet cipher and the client's connection id.
fn prologue(pattern: Pattern, cipher: Cipher, client_cid: u32) -> [u8; 19] {
    let mut p = [0u8; 19];
    p[..12].copy_from_slice(b"fencepost v2");
    p[12] = 2;
    p[13] = pattern as u8;
    p[14] = cipher as u8;
    p[15..].copy_from_slice(&client_cid.to_be_bytes());
    p
}

/// A handshake's builder; `local`, the static key it will be given, if any.
fn builder(pattern: Pattern, seed: [u8; 32], local: Option<&StaticKey>) -> snow::Builder<'static> {
    let params = pattern.noise_name().parse().expect("the pattern names are valid Noise parameters");
    snow::Builder::with_resolver(params, Box::new(SeededResolver { seed, local: local.cloned() }))
}

/// Why a handshake message was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeError(pub &'static str);

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "handshake refused: {}", self.0)
    }
}

impl std::error::Error for HandshakeError {}

/// The two packet keys a finished handshake gives, named by direction.
pub struct SessionKeys {
    pub client_to_server: [u8; 32],
    pub server_to_client: [u8; 32],
}

/// The client's half of a handshake in progress.
pub struct ClientHandshake {
    state: snow::HandshakeState,
    pub pattern: Pattern,
    pub cipher: Cipher,
    /// The Noise message of the Initial, resent unchanged until an Accept arrives.
    pub message: Vec<u8>,
    pinned: Option<PublicKey>,
}

impl fmt::Debug for ClientHandshake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientHandshake").field("pattern", &self.pattern).field("cipher", &self.cipher).finish_non_exhaustive()
    }
}

impl ClientHandshake {
    /// Writes the Initial's Noise message carrying `payload` (the client's parameters).
    pub fn start(config: &NoiseConfig, client_cid: u32, seed: [u8; 32], payload: &[u8]) -> Result<ClientHandshake, HandshakeError> {
        let pattern = if config.peer.is_some() { Pattern::NK } else { Pattern::NX };
        let prologue = prologue(pattern, config.cipher, client_cid);
        let mut b = builder(pattern, seed, None).prologue(&prologue).map_err(|_| HandshakeError("prologue"))?;
        if let Some(peer) = &config.peer {
            b = b.remote_public_key(&peer.0).map_err(|_| HandshakeError("server key"))?;
        }
        let mut state = b.build_initiator().map_err(|_| HandshakeError("building the initiator"))?;
        let mut message = vec![0u8; 64 + payload.len() + TAG_LEN];
        let n = state.write_message(payload, &mut message).map_err(|_| HandshakeError("writing the first message"))?;
        message.truncate(n);
        Ok(ClientHandshake { state, pattern, cipher: config.cipher, message, pinned: config.peer })
    }

    /// Reads the Accept's Noise message: its payload, the server's static key and
    /// the session keys. A forged message leaves the handshake as it was, so the real one can still complete it.
    pub fn finish(&mut self, message: &[u8]) -> Result<(Vec<u8>, PublicKey, SessionKeys), HandshakeError> {
        let mut payload = vec![0u8; message.len()];
        let n = self.state.read_message(message, &mut payload).map_err(|_| HandshakeError("the Accept does not authenticate"))?;
        payload.truncate(n);
        let server = match self.state.get_remote_static() {
            Some(key) => PublicKey(key.try_into().map_err(|_| HandshakeError("server key length"))?),
            None => return Err(HandshakeError("no server key")),
        };
        if self.pinned.is_some_and(|p| p != server) {
            return Err(HandshakeError("the server's key is not the one given"));
        }
        let (client_to_server, server_to_client) = self.state.dangerously_get_raw_split();
        Ok((payload, server, SessionKeys { client_to_server, server_to_client }))
    }
}

/// The server's side of a handshake, done in one step: reads the Initial's message,
/// writes the Accept's. Returns the client's payload, the Accept's message and the keys.
pub fn server_handshake(
    local: &StaticKey,
    pattern: Pattern,
    cipher: Cipher,
    client_cid: u32,
    seed: [u8; 32],
    initial: &[u8],
    accept_payload: impl FnOnce(&[u8]) -> Vec<u8>,
) -> Result<(Vec<u8>, Vec<u8>, SessionKeys), HandshakeError> {
    let prologue = prologue(pattern, cipher, client_cid);
    let mut state = builder(pattern, seed, Some(local))
        .prologue(&prologue)
        .and_then(|b| b.local_private_key(local.private_bytes()))
        .and_then(|b| b.build_responder())
        .map_err(|_| HandshakeError("building the responder"))?;
    let mut client_payload = vec![0u8; initial.len()];
    let n = state.read_message(initial, &mut client_payload).map_err(|_| HandshakeError("the Initial does not authenticate"))?;
    client_payload.truncate(n);
    let payload = accept_payload(&client_payload);
    let mut message = vec![0u8; 128 + payload.len() + 2 * TAG_LEN];
    let n = state.write_message(&payload, &mut message).map_err(|_| HandshakeError("writing the Accept"))?;
    message.truncate(n);
    let (client_to_server, server_to_client) = state.dangerously_get_raw_split();
    Ok((client_payload, message, SessionKeys { client_to_server, server_to_client }))
}

// ---- packets ----

/// Which packet numbers have been opened: the highest, and a bitmap of the
/// [`REPLAY_WINDOW`] below it. Older numbers are refused.
#[derive(Clone, Debug)]
pub struct ReplayWindow {
    /// One more than the highest packet number opened (0: none yet).
    next: u64,
    bits: Vec<u64>,
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow { next: 0, bits: vec![0; (REPLAY_WINDOW / 64) as usize] }
    }
}

impl ReplayWindow {
    /// The packet number the next packet most likely carries (to expand truncated numbers around).
    pub fn expected(&self) -> u64 {
        self.next
    }

    fn slot(pn: u64) -> (usize, u64) {
        let i = pn % REPLAY_WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// `pn` may still be opened: new, and not too old.
    pub fn is_fresh(&self, pn: u64) -> bool {
        if pn >= self.next {
            return true;
        }
        if pn + REPLAY_WINDOW < self.next {
            return false;
        }
        let (word, bit) = Self::slot(pn);
        self.bits[word] & bit == 0
    }

    /// Records `pn` as opened (after it authenticated).
    pub fn mark(&mut self, pn: u64) {
        if pn >= self.next {
            // Clear the slots the window slides past.
            let advance = pn + 1 - self.next;
            if advance >= REPLAY_WINDOW {
                self.bits.iter_mut().for_each(|w| *w = 0);
            } else {
                for old in self.next..=pn {
                    let (word, bit) = Self::slot(old);
                    self.bits[word] &= !bit;
                }
            }
            self.next = pn + 1;
        }
        let (word, bit) = Self::slot(pn);
        self.bits[word] |= bit;
    }
}

/// A packet's nonce: four zero bytes, then its packet number (both libraries take 12 bytes).
fn nonce_bytes(pn: u64) -> [u8; aead::NONCE_LEN] {
    let mut n = [0u8; aead::NONCE_LEN];
    n[4..].copy_from_slice(&pn.to_be_bytes());
    n
}

fn nonce(pn: u64) -> Nonce {
    Nonce::assume_unique_for_key(nonce_bytes(pn))
}

fn aead_key(cipher: Cipher, key: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(cipher.algorithm(), key).expect("both ciphers take 32-byte keys"))
}

fn ring_nonce(pn: u64) -> ring::aead::Nonce {
    ring::aead::Nonce::assume_unique_for_key(nonce_bytes(pn))
}

fn ring_aes_key(key: &[u8; 32]) -> ring::aead::LessSafeKey {
    ring::aead::LessSafeKey::new(ring::aead::UnboundKey::new(&ring::aead::AES_256_GCM, key).expect("AES-256 takes a 32-byte key"))
}

/// Which library's AES-256-GCM seals and opens packets (the bytes on the wire are the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AesImplementation {
    /// AWS-LC's, which has AVX-512 code: the faster where the CPU has AVX-512.
    AwsLc,
    /// ring's: the faster on a CPU with VAES and no AVX-512 (the only kind measured).
    Ring,
}

impl AesImplementation {
    /// The faster of the two on this CPU, unless `FENCEPOST_AES` (`aws-lc` or `ring`) names
    /// one, for measuring them side by side. `bash bench/aead_speed.sh` (1,400-byte bodies):
    /// on a host with AVX-512 AWS-LC sealed in 201-252 ns against ring's 265-316 (2026-12-02);
    /// on one with VAES but no AVX-512 in 540-632 ns against ring's 346-479, and opened in
    /// 557-606 against 340-394 (2026-12-04), about 0.9 against 0.5 CPU s per GB both ends.
    pub fn for_this_cpu() -> AesImplementation {
        static CHOSEN: std::sync::OnceLock<AesImplementation> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| match std::env::var("FENCEPOST_AES").as_deref() {
            Ok("ring") => AesImplementation::Ring,
            Ok("aws-lc") => AesImplementation::AwsLc,
            _ => Self::by_features(),
        })
    }

    fn by_features() -> AesImplementation {
        #[cfg(target_arch = "x86_64")]
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return AesImplementation::Ring;
        }
        AesImplementation::AwsLc
    }
}

/// How bodies are sealed and opened. The keys stay inline: boxed, every packet sealed or
/// opened would follow one more pointer, to save a few hundred bytes per connection.
#[allow(clippy::large_enum_variant)]
enum Sealing {
    Aead { seal_key: LessSafeKey, open_key: LessSafeKey },
    /// AES-256-GCM through ring (see [`AesImplementation`]).
    RingAes { seal_key: ring::aead::LessSafeKey, open_key: ring::aead::LessSafeKey },
    /// [`NoiseConfig::model_aead`]: the body as it is, and a constant tag per direction.
    Modelled { seal_tag: [u8; TAG_LEN], open_tag: [u8; TAG_LEN] },
}

/// Packet protection after a v2 handshake: every packet is sealed with the AEAD,
/// its 10-byte header as associated data and its packet number as the nonce.
pub struct AeadProtection {
    sealing: Sealing,
    cipher: Cipher,
    next_pn: u64,
    replay: ReplayWindow,
}

impl fmt::Debug for AeadProtection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let modelled = matches!(self.sealing, Sealing::Modelled { .. });
        f.debug_struct("AeadProtection").field("cipher", &self.cipher).field("modelled", &modelled).field("next_pn", &self.next_pn).finish_non_exhaustive()
    }
}

impl AeadProtection {
    pub fn new(cipher: Cipher, keys: &SessionKeys, client: bool) -> AeadProtection {
        Self::with_aes(cipher, keys, client, AesImplementation::for_this_cpu())
    }

    /// As [`AeadProtection::new`], with AES-256-GCM from the library named (ChaCha20-Poly1305
    /// is always AWS-LC's).
    pub fn with_aes(cipher: Cipher, keys: &SessionKeys, client: bool, aes: AesImplementation) -> AeadProtection {
        let (seal, open) = Self::directions(keys, client);
        let sealing = match (cipher, aes) {
            (Cipher::Aes256Gcm, AesImplementation::Ring) => Sealing::RingAes { seal_key: ring_aes_key(seal), open_key: ring_aes_key(open) },
            _ => Sealing::Aead { seal_key: aead_key(cipher, seal), open_key: aead_key(cipher, open) },
        };
        AeadProtection { sealing, cipher, next_pn: 0, replay: ReplayWindow::default() }
    }

    /// The AEAD's layout without its work ([`NoiseConfig::model_aead`]): for simulations only.
    pub fn modelled(cipher: Cipher, keys: &SessionKeys, client: bool) -> AeadProtection {
        let (seal, open) = Self::directions(keys, client);
        let tag = |key: &[u8; 32]| -> [u8; TAG_LEN] { key[..TAG_LEN].try_into().expect("a key is longer than a tag") };
        AeadProtection { sealing: Sealing::Modelled { seal_tag: tag(seal), open_tag: tag(open) }, cipher, next_pn: 0, replay: ReplayWindow::default() }
    }

    /// This side's (sealing, opening) keys.
    fn directions(keys: &SessionKeys, client: bool) -> (&[u8; 32], &[u8; 32]) {
        if client {
            (&keys.client_to_server, &keys.server_to_client)
        } else {
            (&keys.server_to_client, &keys.client_to_server)
        }
    }

    /// Opens `body` (ciphertext then tag) in place; returns the plaintext's length.
    fn open_body(&self, pn: u64, header: &[u8], body: &mut [u8]) -> Result<usize, ProtectionError> {
        const FAILED: ProtectionError = ProtectionError("the packet does not authenticate");
        match &self.sealing {
            Sealing::Aead { open_key, .. } => Ok(open_key.open_in_place(nonce(pn), Aad::from(header), body).map_err(|_| FAILED)?.len()),
            Sealing::RingAes { open_key, .. } => Ok(open_key.open_in_place(ring_nonce(pn), ring::aead::Aad::from(header), body).map_err(|_| FAILED)?.len()),
            Sealing::Modelled { open_tag, .. } => {
                let plain = body.len().checked_sub(TAG_LEN).ok_or(FAILED)?;
                if constant_time_eq(&body[plain..], open_tag) {
                    Ok(plain)
                } else {
                    Err(FAILED)
                }
            }
        }
    }
}

/// Version 1's header (version, type, connection id), which a protected packet's begins with.
const V1_HEADER_LEN: usize = crate::wire::HEADER_LEN;

/// A version 1 packet of `len` bytes fits `packet` once sealed.
fn check_room(packet: &[u8], len: usize) -> Result<(), ProtectionError> {
    if len < V1_HEADER_LEN || packet.len() < len + PROTECTION_OVERHEAD {
        return Err(ProtectionError("no room to seal the packet"));
    }
    Ok(())
}

impl AeadProtection {
    /// The packet number of a datagram that may be a protected packet, unless it is
    /// too short, of another version, or one already opened.
    fn fresh_packet_number(&self, datagram: &[u8]) -> Result<u64, ProtectionError> {
        if datagram.len() < PROTECTED_HEADER_LEN + TAG_LEN {
            return Err(ProtectionError("too short to be a protected packet"));
        }
        if datagram[0] != 2 {
            return Err(ProtectionError("not a protected packet"));
        }
        let truncated = u32::from_be_bytes(datagram[V1_HEADER_LEN..PROTECTED_HEADER_LEN].try_into().expect("the length was checked above"));
        let pn = crate::wire::expand_seq(truncated, self.replay.expected());
        if !self.replay.is_fresh(pn) {
            return Err(ProtectionError::REPLAYED);
        }
        Ok(pn)
    }

    /// Seals `packet[..len]`, laid out with room for the packet number after version 1's
    /// header, once [`check_room`] has passed.
    fn seal_checked(&mut self, packet: &mut [u8], len: usize) -> Result<usize, ProtectionError> {
        let sealed = len + PROTECTION_OVERHEAD;
        let pn = self.next_pn;
        self.next_pn += 1;
        packet[0] = 2;
        packet[V1_HEADER_LEN..PROTECTED_HEADER_LEN].copy_from_slice(&(pn as u32).to_be_bytes());
        let (header, rest) = packet.split_at_mut(PROTECTED_HEADER_LEN);
        let body_len = len - V1_HEADER_LEN;
        match &self.sealing {
            Sealing::Aead { seal_key, .. } => {
                let tag = seal_key
                    .seal_in_place_separate_tag(nonce(pn), Aad::from(&header[..]), &mut rest[..body_len])
                    .map_err(|_| ProtectionError("sealing failed"))?;
                rest[body_len..body_len + TAG_LEN].copy_from_slice(tag.as_ref());
            }
            Sealing::RingAes { seal_key, .. } => {
                let tag = seal_key
                    .seal_in_place_separate_tag(ring_nonce(pn), ring::aead::Aad::from(&header[..]), &mut rest[..body_len])
                    .map_err(|_| ProtectionError("sealing failed"))?;
                rest[body_len..body_len + TAG_LEN].copy_from_slice(tag.as_ref());
            }
            Sealing::Modelled { seal_tag, .. } => rest[body_len..body_len + TAG_LEN].copy_from_slice(seal_tag),
        }
        Ok(sealed)
    }
}

impl PacketProtection for AeadProtection {
    fn opened_up_to(&self) -> u64 {
        self.replay.expected()
    }

    fn overhead(&self) -> usize {
        PROTECTION_OVERHEAD
    }

    /// `packet[..len]` is the packet as version 1 lays it out (6-byte header, then the
    /// body). The body moves 4 bytes on to make room for the packet number, and is sealed.
    fn seal(&mut self, packet: &mut [u8], len: usize) -> Result<usize, ProtectionError> {
        check_room(packet, len)?;
        packet.copy_within(V1_HEADER_LEN..len, PROTECTED_HEADER_LEN);
        self.seal_checked(packet, len)
    }

    /// The packet number goes in the room between the header and the body.
    fn header_room(&self) -> usize {
        PROTECTED_HEADER_LEN - V1_HEADER_LEN
    }

    fn seal_spaced(&mut self, packet: &mut [u8], len: usize) -> Result<usize, ProtectionError> {
        check_room(packet, len)?;
        self.seal_checked(packet, len)
    }

    /// Opens into `scratch`, laid out as version 1 (header, then the plaintext body).
    fn open<'a>(&mut self, datagram: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ProtectionError> {
        let pn = self.fresh_packet_number(datagram)?;
        scratch.clear();
        scratch.extend_from_slice(&datagram[..V1_HEADER_LEN]);
        scratch[0] = 1;
        scratch.extend_from_slice(&datagram[PROTECTED_HEADER_LEN..]);
        let plain = self.open_body(pn, &datagram[..PROTECTED_HEADER_LEN], &mut scratch[V1_HEADER_LEN..])?;
        scratch.truncate(V1_HEADER_LEN + plain);
        self.replay.mark(pn);
        Ok(&scratch[..])
    }

    /// Opens the body where it lies and writes version 1's header over the end of the
    /// protected one (once it has been authenticated), so the plaintext packet is one
    /// slice of `datagram`.
    fn open_in_place<'a>(&mut self, datagram: &'a mut [u8], _scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ProtectionError> {
        let pn = self.fresh_packet_number(datagram)?;
        let (header, body) = datagram.split_at_mut(PROTECTED_HEADER_LEN);
        let plain = self.open_body(pn, header, body)?;
        let mut v1_header = [0u8; V1_HEADER_LEN];
        v1_header.copy_from_slice(&header[..V1_HEADER_LEN]);
        v1_header[0] = 1;
        header[PROTECTED_HEADER_LEN - V1_HEADER_LEN..].copy_from_slice(&v1_header);
        self.replay.mark(pn);
        Ok(&datagram[PROTECTED_HEADER_LEN - V1_HEADER_LEN..PROTECTED_HEADER_LEN + plain])
    }

    fn name(&self) -> &str {
        self.cipher.name()
    }
}

/// An endpoint's secrets, made when it starts: the keys of its retry tokens and of
/// its stateless-reset tokens. Neither outlives the endpoint, so a restarted endpoint's
/// old tokens are refused and its resets match the ids it handed out.
pub struct EndpointSecrets {
    retry: hmac::Key,
    reset: hmac::Key,
}

impl fmt::Debug for EndpointSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EndpointSecrets")
    }
}

/// Feeds a `Hash` value (an address) into a MAC: the generic endpoint cannot name its address type's bytes.
struct MacHasher<'a>(&'a mut hmac::Context);

impl std::hash::Hasher for MacHasher<'_> {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

impl EndpointSecrets {
    /// The reset key comes from the static key when there is one, so a server restarted
    /// with its key file still resets the connections it lost; otherwise from `rng`.
    pub fn new(rng: &mut impl Rng, static_key: Option<&StaticKey>) -> EndpointSecrets {
        let mut retry = [0u8; 32];
        rng.fill_bytes(&mut retry);
        let reset = match static_key {
            Some(key) => {
                let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key.private_bytes()), b"fencepost v2 stateless reset");
                let mut k = [0u8; 32];
                k.copy_from_slice(tag.as_ref());
                k
            }
            None => {
                let mut k = [0u8; 32];
                rng.fill_bytes(&mut k);
                k
            }
        };
        EndpointSecrets { retry: hmac::Key::new(hmac::HMAC_SHA256, &retry), reset: hmac::Key::new(hmac::HMAC_SHA256, &reset) }
    }

    fn retry_mac(&self, issued_ms: u64, client_cid: u32, address: &impl std::hash::Hash) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.retry);
        ctx.update(&issued_ms.to_be_bytes());
        ctx.update(&client_cid.to_be_bytes());
        address.hash(&mut MacHasher(&mut ctx));
        ctx.sign()
    }

    /// A retry token for a client at `address` with id `client_cid`, issued at `now_ms`.
    pub fn retry_token(&self, now_ms: u64, client_cid: u32, address: &impl std::hash::Hash) -> [u8; RETRY_TOKEN_LEN] {
        let mut token = [0u8; RETRY_TOKEN_LEN];
        token[..8].copy_from_slice(&now_ms.to_be_bytes());
        token[8..].copy_from_slice(&self.retry_mac(now_ms, client_cid, address).as_ref()[..16]);
        token
    }

    /// The token was issued by this endpoint, to this address and client id, no more than `lifetime` ago.
    pub fn check_retry_token(&self, token: &[u8], now_ms: u64, lifetime_ms: u64, client_cid: u32, address: &impl std::hash::Hash) -> bool {
        let Ok(token) = <&[u8; RETRY_TOKEN_LEN]>::try_from(token) else { return false };
        let issued = u64::from_be_bytes(token[..8].try_into().expect("8 bytes"));
        if issued > now_ms || now_ms - issued > lifetime_ms {
            return false;
        }
        constant_time_eq(&token[8..], &self.retry_mac(issued, client_cid, address).as_ref()[..16])
    }

    /// The stateless-reset token of our connection id `cid`: a peer learns it in the
    /// handshake, and only this endpoint can make it again after losing the connection.
    pub fn reset_token(&self, cid: u32) -> [u8; RESET_TOKEN_LEN] {
        let tag = hmac::sign(&self.reset, &cid.to_be_bytes());
        let mut token = [0u8; RESET_TOKEN_LEN];
        token.copy_from_slice(&tag.as_ref()[..RESET_TOKEN_LEN]);
        token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_refuses_garbage() {
        for n in 0..40 {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(base64_decode(&base64_encode(&bytes)).unwrap(), bytes);
        }
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert!(base64_decode("aGVsbG8").is_none());
        assert!(base64_decode("aG=sbG8=").is_none());
        assert!(base64_decode("aGVs*G8=").is_none());
        assert!(base64_decode("aGVsbG9=").is_none(), "a spelling with stray bits below the last byte");
        let key = StaticKey::from_seed([4; 32]).public().to_string();
        let mut other = key.clone().into_bytes();
        other[42] = if other[42] == b'A' { b'B' } else { b'A' };
        assert!(PublicKey::parse(std::str::from_utf8(&other).unwrap()).is_err() || PublicKey::parse(std::str::from_utf8(&other).unwrap()).unwrap() != PublicKey::parse(&key).unwrap());
        assert!(StaticKey::parse("short").unwrap_err().0.contains("44 characters"));
    }

    #[test]
    fn keys_round_trip_through_text() {
        let key = StaticKey::from_seed([7; 32]);
        let again = StaticKey::parse(&format!("  {}\n", key.private_text())).unwrap();
        assert_eq!(again, key);
        assert_eq!(PublicKey::parse(&key.public().to_string()).unwrap(), key.public());
        assert!(!format!("{key:?}").contains(&key.private_text()), "Debug never shows the private key");
    }

    #[test]
    fn x25519_gives_rfc_7748s_results_and_refuses_a_small_order_key() {
        // RFC 7748, section 6.1: Alice's and Bob's keys and their shared secret.
        let alice = StaticKey::from_private(hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a").try_into().unwrap());
        let bob = StaticKey::from_private(hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb").try_into().unwrap());
        assert_eq!(alice.public().0.to_vec(), hex("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"));
        assert_eq!(bob.public().0.to_vec(), hex("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f"));
        let shared = hex("4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742");
        // Set as any key is, and as the endpoint's own static key (prepared once, not parsed again).
        for (ours, theirs) in [(&alice, &bob), (&bob, &alice)] {
            for known in [None, Some(ours)] {
                let mut dh = x25519(known);
                dh.set(ours.private_bytes());
                assert_eq!(dh.pubkey(), ours.public().0);
                let mut out = [0u8; KEY_LEN];
                dh.dh(&theirs.public().0, &mut out).unwrap();
                assert_eq!(out.to_vec(), shared);
            }
        }
        // A key other than the known one is parsed afresh, not mistaken for it.
        let mut dh = x25519(Some(&bob));
        dh.set(alice.private_bytes());
        assert_eq!(dh.pubkey(), alice.public().0);
        // Zero and one are points of small order: every private key gives the all-zero secret.
        let mut dh = x25519(None);
        dh.set(alice.private_bytes());
        let mut one = [0u8; KEY_LEN];
        one[0] = 1;
        for small in [[0u8; KEY_LEN], one] {
            assert!(dh.dh(&small, &mut [0u8; KEY_LEN]).is_err());
        }
        // So an Initial whose ephemeral key is one fails the handshake, without a panic.
        let server = StaticKey::from_seed([9; 32]);
        let config = NoiseConfig::default();
        let client = ClientHandshake::start(&config, 5, [1; 32], b"").unwrap();
        let mut forged = client.message.clone();
        forged[..KEY_LEN].fill(0);
        assert!(server_handshake(&server, client.pattern, config.cipher, 5, [2; 32], &forged, |_| vec![]).is_err());
        assert!(server_handshake(&server, client.pattern, config.cipher, 5, [2; 32], &client.message, |_| vec![]).is_ok());
    }

    #[test]
    fn the_replay_window_takes_each_number_once_and_nothing_too_old() {
        let mut w = ReplayWindow::default();
        for pn in [0u64, 2, 1, 5000, 4999, 906] {
            assert!(w.is_fresh(pn), "{pn}");
            w.mark(pn);
            assert!(!w.is_fresh(pn), "{pn} again");
        }
        // The window holds 5001 - 4096 = 905 up to 5000.
        assert!(!w.is_fresh(904), "older than the window");
        assert!(w.is_fresh(905) && w.is_fresh(907));
        w.mark(100_000);
        assert!(!w.is_fresh(5000));
        assert!(w.is_fresh(99_999));
    }

    fn handshake(config: &NoiseConfig, server: &StaticKey) -> (AeadProtection, AeadProtection) {
        let mut client = ClientHandshake::start(config, 0x0a0b0c0d, [1; 32], b"client").unwrap();
        let (got, accept, server_keys) =
            server_handshake(server, client.pattern, config.cipher, 0x0a0b0c0d, [2; 32], &client.message, |p| [p, b"+server"].concat()).unwrap();
        assert_eq!(got, b"client");
        let (payload, key, client_keys) = client.finish(&accept).unwrap();
        assert_eq!(payload, b"client+server");
        assert_eq!(key, server.public());
        (AeadProtection::new(config.cipher, &client_keys, true), AeadProtection::new(config.cipher, &server_keys, false))
    }

    #[test]
    fn both_patterns_and_ciphers_carry_packets_and_refuse_forgeries_and_replays() {
        let server = StaticKey::from_seed([9; 32]);
        for peer in [None, Some(server.public())] {
            for cipher in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305] {
                let config = NoiseConfig { peer, cipher, ..NoiseConfig::default() };
                let (mut c, mut s) = handshake(&config, &server);
                let plain = [1u8, 2, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 9, b'h', b'i'];
                let mut buf = [0u8; 64];
                buf[..plain.len()].copy_from_slice(&plain);
                let n = c.seal(&mut buf, plain.len()).unwrap();
                assert_eq!(n, plain.len() + PROTECTION_OVERHEAD);
                assert_eq!(buf[0], 2);
                let mut scratch = Vec::new();
                assert_eq!(s.open(&buf[..n], &mut scratch).unwrap(), &plain);
                assert_eq!(s.open(&buf[..n], &mut scratch).unwrap_err(), ProtectionError::REPLAYED);
                for i in 0..n {
                    let mut forged = buf;
                    forged[i] ^= 0x20;
                    assert!(s.open(&forged[..n], &mut scratch).is_err(), "byte {i} flipped");
                }
                // The other direction, opened in place: the same plaintext, the same refusals.
                buf[..plain.len()].copy_from_slice(&plain);
                let n = s.seal(&mut buf, plain.len()).unwrap();
                for i in 0..n {
                    let mut forged = buf;
                    forged[i] ^= 0x20;
                    assert!(c.open_in_place(&mut forged[..n], &mut scratch).is_err(), "byte {i} flipped");
                }
                let mut copy = buf;
                scratch.clear();
                assert_eq!(c.open_in_place(&mut copy[..n], &mut scratch).unwrap(), &plain);
                assert!(scratch.is_empty(), "opened where it lay, not copied");
                let mut again = buf;
                assert_eq!(c.open_in_place(&mut again[..n], &mut scratch).unwrap_err(), ProtectionError::REPLAYED);
            }
        }
        let impostor = StaticKey::from_seed([10; 32]);
        let config = NoiseConfig { peer: Some(server.public()), ..NoiseConfig::default() };
        let mut client = ClientHandshake::start(&config, 1, [1; 32], b"").unwrap();
        assert!(server_handshake(&impostor, client.pattern, config.cipher, 1, [2; 32], &client.message, |_| vec![]).is_err());
        // A forged Accept leaves the client able to finish with the real one.
        let mut forged = vec![0u8; 80];
        forged[..32].copy_from_slice(&impostor.public().0);
        assert!(client.finish(&forged).is_err());
        let (_, accept, _) = server_handshake(&server, client.pattern, config.cipher, 1, [2; 32], &client.message, |_| vec![]).unwrap();
        assert!(client.finish(&accept).is_ok());
        // The prologue binds the client's id: a server reading it under another id refuses.
        let client = ClientHandshake::start(&config, 1, [1; 32], b"").unwrap();
        assert!(server_handshake(&server, client.pattern, config.cipher, 2, [2; 32], &client.message, |_| vec![]).is_err());
    }

    #[test]
    fn a_modelled_aead_keeps_the_layout_and_opens_only_its_own_packets() {
        let server = StaticKey::from_seed([9; 32]);
        let config = NoiseConfig::default();
        let mut client = ClientHandshake::start(&config, 7, [1; 32], b"").unwrap();
        let (_, accept, server_keys) = server_handshake(&server, client.pattern, config.cipher, 7, [2; 32], &client.message, |_| vec![]).unwrap();
        let (_, _, client_keys) = client.finish(&accept).unwrap();
        let plain = [1u8, 2, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0, 9, b'h', b'i'];
        let seal = |p: &mut AeadProtection| {
            let mut buf = [0u8; 64];
            buf[..plain.len()].copy_from_slice(&plain);
            let n = p.seal(&mut buf, plain.len()).unwrap();
            buf[..n].to_vec()
        };
        let mut modelled = AeadProtection::modelled(config.cipher, &client_keys, true);
        let mut real = AeadProtection::new(config.cipher, &client_keys, true);
        let (m, r) = (seal(&mut modelled), seal(&mut real));
        // The same size and header (packet number 0 both), the body left as it was.
        assert_eq!(m.len(), r.len());
        assert_eq!(m[..PROTECTED_HEADER_LEN], r[..PROTECTED_HEADER_LEN]);
        assert_eq!(&m[PROTECTED_HEADER_LEN..m.len() - TAG_LEN], &plain[V1_HEADER_LEN..]);
        let mut scratch = Vec::new();
        let mut open = AeadProtection::modelled(config.cipher, &server_keys, false);
        assert_eq!(open.open(&m, &mut scratch).unwrap(), &plain);
        assert_eq!(open.open(&m, &mut scratch).unwrap_err(), ProtectionError::REPLAYED);
        // Neither kind opens the other's packets, nor a packet sealed for the other direction.
        let mut other = seal(&mut modelled);
        assert!(AeadProtection::new(config.cipher, &server_keys, false).open(&other, &mut scratch).is_err());
        assert!(AeadProtection::modelled(config.cipher, &server_keys, false).open(&r, &mut scratch).is_err());
        assert!(AeadProtection::modelled(config.cipher, &client_keys, true).open_in_place(&mut other, &mut scratch).is_err());
        // A wrong tag or a packet too short is refused; in place, the plaintext lies in the datagram.
        let mut tampered = other.clone();
        *tampered.last_mut().unwrap() ^= 1;
        let mut fresh = AeadProtection::modelled(config.cipher, &server_keys, false);
        assert!(fresh.open_in_place(&mut tampered, &mut scratch).is_err());
        assert!(fresh.open(&other[..PROTECTED_HEADER_LEN + TAG_LEN - 1], &mut scratch).is_err());
        scratch.clear();
        assert_eq!(fresh.open_in_place(&mut other, &mut scratch).unwrap(), &plain);
        assert!(scratch.is_empty());
        assert!(format!("{modelled:?}").contains("modelled: true"));
    }

    /// The sealed-packet vectors printed in docs/protocol.md: the `data` vector of
    /// version 1, sealed as packet number 7 by a client whose key is 32 bytes of 0x11.
    pub(crate) const SEALED_VECTORS: &[(&str, Cipher, &str)] = &[
        ("v2-data-aes-256-gcm", Cipher::Aes256Gcm, "02 02 11223344 00000007 f1896d6750661d1c5295974f71 c28918512820d7d4b8d82c725966eba3"),
        ("v2-data-chacha20-poly1305", Cipher::ChaCha20Poly1305, "02 02 11223344 00000007 9945a25b55d97d607db684d0c5 fbacd298b12a0966159be1b0955b92e0"),
    ];

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
        digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
    }

    #[test]
    fn sealed_vectors_match_the_document() {
        let doc = include_str!("../../../docs/protocol.md");
        let keys = SessionKeys { client_to_server: [0x11; 32], server_to_client: [0x22; 32] };
        let plain = hex("01 02 11223344 00000007 000003e8 68656c6c6f");
        // Either library's AES-256-GCM (see `AesImplementation`) seals to the document's bytes,
        // and the other opens them.
        for (aes, other) in [(AesImplementation::AwsLc, AesImplementation::Ring), (AesImplementation::Ring, AesImplementation::AwsLc)] {
            for (name, cipher, sealed) in SEALED_VECTORS {
                let mut client = AeadProtection::with_aes(*cipher, &keys, true, aes);
                client.next_pn = 7;
                let mut buf = [0u8; 64];
                buf[..plain.len()].copy_from_slice(&plain);
                let n = client.seal(&mut buf, plain.len()).unwrap();
                assert_eq!(&buf[..n], &hex(sealed)[..], "{name}, {aes:?}");
                // Laid out with room for the packet number, the same packet seals to the same bytes.
                let mut spaced_client = AeadProtection::with_aes(*cipher, &keys, true, aes);
                spaced_client.next_pn = 7;
                let room = spaced_client.header_room();
                let mut spaced = [0u8; 64];
                spaced[..crate::wire::HEADER_LEN].copy_from_slice(&plain[..crate::wire::HEADER_LEN]);
                spaced[crate::wire::HEADER_LEN + room..plain.len() + room].copy_from_slice(&plain[crate::wire::HEADER_LEN..]);
                assert_eq!(spaced_client.seal_spaced(&mut spaced, plain.len()).unwrap(), n);
                assert_eq!(&spaced[..n], &buf[..n], "{name}, {aes:?}, sealed in its place");
                let mut scratch = Vec::new();
                for opener in [aes, other] {
                    let mut server = AeadProtection::with_aes(*cipher, &keys, false, opener);
                    assert_eq!(server.open(&buf[..n], &mut scratch).unwrap(), &plain[..], "{name}, sealed by {aes:?}, opened by {opener:?}");
                    let mut forged = buf;
                    forged[n - 1] ^= 1;
                    let mut fresh = AeadProtection::with_aes(*cipher, &keys, false, opener);
                    assert!(fresh.open(&forged[..n], &mut scratch).is_err(), "{name}, a flipped tag bit opened by {opener:?}");
                }
                let line = format!("| `{name}` | `{sealed}` |");
                assert!(doc.contains(&line), "docs/protocol.md lacks the vector line: {line}");
            }
        }
    }

    #[test]
    fn retry_tokens_are_bound_to_address_id_and_time() {
        let mut rng = ChaCha20Rng::from_seed([3; 32]);
        let secrets = EndpointSecrets::new(&mut rng, None);
        let token = secrets.retry_token(1_000, 42, &"10.0.0.1:5000");
        assert!(secrets.check_retry_token(&token, 1_500, 10_000, 42, &"10.0.0.1:5000"));
        assert!(!secrets.check_retry_token(&token, 1_500, 10_000, 43, &"10.0.0.1:5000"));
        assert!(!secrets.check_retry_token(&token, 1_500, 10_000, 42, &"10.0.0.2:5000"));
        assert!(!secrets.check_retry_token(&token, 20_000, 10_000, 42, &"10.0.0.1:5000"));
        assert!(!secrets.check_retry_token(&token[..20], 1_500, 10_000, 42, &"10.0.0.1:5000"));
        let other = EndpointSecrets::new(&mut rng, None);
        assert!(!other.check_retry_token(&token, 1_500, 10_000, 42, &"10.0.0.1:5000"));
        assert_ne!(secrets.reset_token(1), secrets.reset_token(2));
        assert_ne!(secrets.reset_token(1), other.reset_token(1));
        // With a static key, a restart makes the same reset tokens.
        let key = StaticKey::from_seed([5; 32]);
        let before = EndpointSecrets::new(&mut rng, Some(&key));
        let after = EndpointSecrets::new(&mut rng, Some(&key));
        assert_eq!(before.reset_token(7), after.reset_token(7));
    }
}
