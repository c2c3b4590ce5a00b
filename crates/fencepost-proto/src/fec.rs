//! Forward error correction over GF(2^8): repair packets are linear combinations
//! of source packets, so a receiver that misses some source packets but holds
//! enough repair packets rebuilds them without waiting for a retransmission.
//!
//! One engine serves both codes fencepost sends:
//!
//! - **block** (`fec:rs:K/N`): source packets are taken K at a time; after each
//!   block, N − K repair packets whose coefficients come from a Cauchy matrix, so
//!   any K of the N packets rebuild the block (a Reed–Solomon code, MDS);
//! - **sliding window** (`fec:window:W/R`, in the manner of RFC 8681): after every R
//!   source packets, one repair packet over the last W, its coefficients drawn
//!   from a generator seeded by the repair's first sequence number and index, so
//!   recovery needs no block boundary and a loss is repaired by the next repair
//!   that covers it.
//!
//! A *source symbol* is what a repair protects of a data packet: a flags byte
//! (bit 0: the packet is the FIN), its payload length (2 bytes) and its payload,
//! zero-padded to the longest symbol combined. `docs/protocol.md` specifies the
//! repair packet.

use crate::assembler::BufferBudget;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d) and generator 2.
struct Field {
    exp: [u8; 512],
    log: [u8; 256],
}

const fn field() -> Field {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= 0x11d;
        }
        i += 1;
    }
    while i < 512 {
        exp[i] = exp[i - 255];
        i += 1;
    }
    Field { exp, log }
}

static GF: Field = field();

fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        GF.exp[GF.log[a as usize] as usize + GF.log[b as usize] as usize]
    }
}

fn inv(a: u8) -> u8 {
    debug_assert!(a != 0);
    GF.exp[255 - GF.log[a as usize] as usize]
}

/// `dst ^= c * src`, byte by byte (the inner loop of encoding and decoding).
fn mul_add(dst: &mut [u8], c: u8, src: &[u8]) {
    if c == 0 {
        return;
    }
    if c == 1 {
        for (d, s) in dst.iter_mut().zip(src) {
            *d ^= s;
        }
        return;
    }
    // One row of the multiplication table for c: a lookup per byte.
    let lc = GF.log[c as usize] as usize;
    let mut row = [0u8; 256];
    for (x, r) in row.iter_mut().enumerate().skip(1) {
        *r = GF.exp[lc + GF.log[x] as usize];
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= row[*s as usize];
    }
}

fn scale(buf: &mut [u8], c: u8) {
    if c == 1 {
        return;
    }
    for b in buf.iter_mut() {
        *b = mul(*b, c);
    }
}

/// Which code a repair packet belongs to (its coefficients depend on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Scheme {
    Block = 1,
    Window = 2,
}

impl Scheme {
    pub fn from_u8(code: u8) -> Option<Scheme> {
        match code {
            1 => Some(Scheme::Block),
            2 => Some(Scheme::Window),
            _ => None,
        }
    }
}

/// The most source packets one repair covers.
pub const MAX_SPAN: usize = 255;
/// Repairs a decoder holds while they still involve missing sources (the oldest go first).
const MAX_PENDING: usize = 64;

/// The coefficient of the `j`-th source packet (0-based from `first`) in repair `index`.
/// Block: row `index` of the Cauchy matrix 1 / (x_index + y_j) with x_i = i + K, y_j = j
/// (distinct, so every square submatrix is invertible: any K of N packets rebuild the block).
/// Window: a nonzero pseudo-random byte from (first, index, j).
pub fn coefficient(scheme: Scheme, first: u64, span: usize, index: u8, j: usize) -> u8 {
    match scheme {
        Scheme::Block => {
            // Callers keep index + span <= 255 (repairs past it are refused), so x != j.
            let x = (index as usize + span).min(255) as u8;
            let d = x ^ j as u8;
            if d == 0 { 0 } else { inv(d) }
        }
        Scheme::Window => {
            let mut z = first.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((index as u64) << 32) ^ j as u64;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z % 255) as u8 + 1
        }
    }
}

/// A data packet as a repair protects it.
pub fn source_symbol(payload: &[u8], fin: bool) -> Vec<u8> {
    let mut s = Vec::with_capacity(3 + payload.len());
    write_symbol(&mut s, payload, fin);
    s
}

fn write_symbol(s: &mut Vec<u8>, payload: &[u8], fin: bool) {
    s.clear();
    // One allocation for a fresh buffer, not a growth per push.
    s.reserve(3 + payload.len());
    s.push(fin as u8);
    s.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    s.extend_from_slice(payload);
}

/// Symbol buffers a decoder keeps for reuse: enough for a burst of kept sources.
const SPARE_SYMBOLS: usize = 64;

/// Reads a rebuilt symbol back into (payload, fin); `None` if it is not one.
pub fn parse_symbol(symbol: &[u8]) -> Option<(&[u8], bool)> {
    if symbol.len() < 3 || symbol[0] > 1 {
        return None;
    }
    let len = u16::from_be_bytes([symbol[1], symbol[2]]) as usize;
    let payload = symbol.get(3..3 + len)?;
    // The padding must be zero: anything else is not a symbol this code made.
    symbol[3 + len..].iter().all(|&b| b == 0).then_some((payload, symbol[0] == 1))
}

/// A decoder's floor once it forgets the sources it knows: those up to the highest count
/// as delivered from then on.
fn floor_past(floor: u64, known: &BTreeMap<u64, Vec<u8>>) -> u64 {
    known.last_key_value().map_or(floor, |(&highest, _)| floor.max(highest + 1))
}

/// The sender's side: keeps the last source symbols and combines them into repairs.
#[derive(Debug, Default)]
pub struct Encoder {
    /// (sequence number, symbol), oldest first, consecutive sequence numbers.
    sources: VecDeque<(u64, Vec<u8>)>,
    keep: usize,
    /// The capacities of the symbols held, kept up to date so that asking costs nothing.
    held: usize,
}

impl Encoder {
    pub fn new(keep: usize) -> Encoder {
        Encoder { sources: VecDeque::new(), keep: keep.clamp(1, MAX_SPAN), held: 0 }
    }

    /// Bytes the source symbols held take (their buffers' capacities).
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// Lets go of every source held, and the room their queue grew to. Repairs made after
    /// it cover only what is sent from then on: the same as after a gap in sequence numbers.
    pub fn forget(&mut self) {
        self.sources = VecDeque::new();
        self.held = 0;
    }

    fn drop_oldest(&mut self) {
        if let Some((_, symbol)) = self.sources.pop_front() {
            self.held -= symbol.capacity();
        }
    }

    /// Notes a source packet. A retransmission of one already held changes nothing;
    /// a gap in sequence numbers restarts the history.
    pub fn add(&mut self, seq: u64, symbol: Vec<u8>) {
        if let Some(&(last, _)) = self.sources.back() {
            if seq <= last && seq >= self.sources.front().map_or(seq, |f| f.0) {
                return;
            }
            if seq != last + 1 {
                self.sources.clear();
                self.held = 0;
            }
        }
        self.held += symbol.capacity();
        self.sources.push_back((seq, symbol));
        while self.sources.len() > self.keep {
            self.drop_oldest();
        }
    }

    /// Holds at most `keep` source packets from now on.
    pub fn set_keep(&mut self, keep: usize) {
        self.keep = keep.clamp(1, MAX_SPAN);
        while self.sources.len() > self.keep {
            self.drop_oldest();
        }
    }

    /// The highest sequence number held.
    pub fn last(&self) -> Option<u64> {
        self.sources.back().map(|s| s.0)
    }

    /// Repair `index` over the `span` source packets ending with the latest: (first sequence number, symbol).
    pub fn repair(&self, scheme: Scheme, span: usize, index: u8) -> Option<(u64, Vec<u8>)> {
        let span = span.min(self.sources.len());
        if span == 0 {
            return None;
        }
        let window: Vec<&(u64, Vec<u8>)> = self.sources.iter().skip(self.sources.len() - span).collect();
        let first = window[0].0;
        let len = window.iter().map(|(_, s)| s.len()).max().unwrap_or(0);
        let mut out = vec![0u8; len];
        for (j, (_, symbol)) in window.iter().enumerate() {
            mul_add(&mut out[..symbol.len()], coefficient(scheme, first, span, index, j), symbol);
        }
        Some((first, out))
    }
}

/// One repair equation: the coefficients of the still-unknown sources it covers and
/// its symbol, with the known sources already taken out.
#[derive(Debug, Clone)]
struct Equation {
    coefficients: BTreeMap<u64, u8>,
    symbol: Vec<u8>,
}

/// The receiver's side: source symbols received recently, and repair equations that
/// still involve missing ones. Rebuilds what it can as soon as it can.
#[derive(Debug)]
pub struct Decoder {
    known: BTreeMap<u64, Vec<u8>>,
    pending: Vec<Equation>,
    /// Sources below this are delivered and forgotten: a repair covering them is trimmed.
    floor: u64,
    keep: usize,
    /// Buffers of forgotten sources, reused for the next ones kept: on a receiver that
    /// keeps every source for a while, allocating and freeing each was a tenth of its work.
    spare: Vec<Vec<u8>>,
    /// The endpoint's buffer budget, and what one held symbol is charged (the largest a
    /// source or repair symbol can be): the sources, pending equations and spares this
    /// decoder holds count against the same limit as the received data the connections
    /// hold. Uncharged, a peer that sends repairs made each connection keep about 1 MB of
    /// them (512 sources, 64 equations, 64 spares), outside the budget.
    budget: Option<(Arc<BufferBudget>, usize)>,
    /// Bytes taken from the budget for what is held now.
    charged: usize,
    pub rebuilt: u64,
    pub repairs_received: u64,
    pub repairs_useless: u64,
    /// Times this decoder forgot everything it held because the budget was spent.
    pub shed_over_budget: u64,
}

impl Drop for Decoder {
    fn drop(&mut self) {
        if let Some((budget, _)) = &self.budget {
            budget.give(self.charged);
        }
    }
}

impl Decoder {
    /// Holds up to `keep` known sources and as many pending equations.
    pub fn new(keep: usize) -> Decoder {
        Decoder {
            known: BTreeMap::new(),
            pending: Vec::new(),
            floor: 0,
            keep: keep.max(8),
            spare: Vec::new(),
            budget: None,
            charged: 0,
            rebuilt: 0,
            repairs_received: 0,
            repairs_useless: 0,
            shed_over_budget: 0,
        }
    }

    /// Charges what this decoder holds to `budget`, `symbol_bytes` per symbol.
    pub fn set_budget(&mut self, budget: Arc<BufferBudget>, symbol_bytes: usize) {
        if let Some((old, _)) = self.budget.take() {
            old.give(self.charged);
        }
        self.charged = 0;
        self.budget = Some((budget, symbol_bytes.max(1)));
        self.settle();
    }

    /// Bytes the symbols held now take (their buffers' capacities): what the budget's
    /// charge stands for.
    pub fn held_bytes(&self) -> usize {
        self.known.values().map(Vec::capacity).sum::<usize>() + self.pending.iter().map(|e| e.symbol.capacity()).sum::<usize>() + self.spare.iter().map(Vec::capacity).sum::<usize>()
    }

    /// Brings the budget's charge to what is held now; when the budget cannot take more,
    /// forgets everything held (a repair over what was forgotten is then useless, and the
    /// sender's retransmissions recover what it would have rebuilt).
    fn settle(&mut self) {
        let Some((budget, per_symbol)) = &self.budget else { return };
        let held = self.held_symbols() * per_symbol;
        if held < self.charged {
            budget.give(self.charged - held);
            self.charged = held;
        } else if held > self.charged {
            if budget.try_take(held - self.charged) {
                self.charged = held;
            } else {
                self.shed_over_budget += 1;
                self.floor = floor_past(self.floor, &self.known);
                self.known.clear();
                self.pending.clear();
                self.spare.clear();
                budget.give(self.charged);
                self.charged = 0;
            }
        }
    }

    /// Symbols held (known sources, pending equations, spare buffers), counted without
    /// walking them.
    pub fn held_symbols(&self) -> usize {
        self.known.len() + self.pending.len() + self.spare.len()
    }

    /// Forgets every source, equation and spare buffer held and lets go of the room they
    /// took, as when the budget is spent: for a receiver that is missing nothing and has
    /// been quiet, whose peer's next repairs cover what it sends next. A repair that still
    /// covers a forgotten source is useless, and retransmission recovers what it would have.
    pub fn forget(&mut self) {
        self.floor = floor_past(self.floor, &self.known);
        self.known = BTreeMap::new();
        self.pending = Vec::new();
        self.spare = Vec::new();
        self.settle();
    }

    fn recycle(&mut self, symbol: Vec<u8>) {
        if self.spare.len() < SPARE_SYMBOLS {
            self.spare.push(symbol);
        }
    }

    /// [`Decoder::add_source`] for a data packet's payload, made into a symbol in a
    /// reused buffer (and not at all when it is not needed).
    pub fn add_source_packet(&mut self, seq: u64, payload: &[u8], fin: bool) -> Vec<(u64, Vec<u8>)> {
        if seq < self.floor || self.known.contains_key(&seq) {
            return Vec::new();
        }
        let mut symbol = self.spare.pop().unwrap_or_default();
        write_symbol(&mut symbol, payload, fin);
        self.insert_source(seq, symbol)
    }

    /// A source packet arrived (or was rebuilt). Returns sources rebuilt because of it.
    pub fn add_source(&mut self, seq: u64, symbol: Vec<u8>) -> Vec<(u64, Vec<u8>)> {
        if seq < self.floor || self.known.contains_key(&seq) {
            return Vec::new();
        }
        self.insert_source(seq, symbol)
    }

    /// Keeps a source the caller found new and not below the floor.
    fn insert_source(&mut self, seq: u64, symbol: Vec<u8>) -> Vec<(u64, Vec<u8>)> {
        self.known.insert(seq, symbol);
        while self.known.len() > self.keep {
            let (oldest, symbol) = self.known.pop_first().expect("not empty");
            self.recycle(symbol);
            self.floor = self.floor.max(oldest + 1);
        }
        // Equations naming sources forgotten without being known can never be used.
        let floor = self.floor;
        self.pending.retain(|e| e.coefficients.keys().all(|&s| s >= floor));
        let rebuilt = self.solve();
        self.settle();
        rebuilt
    }

    /// Source `seq` arrived but is not kept: repairs covering it or anything before it
    /// are useless from now on (counted as such when they come).
    pub fn not_kept(&mut self, seq: u64) {
        if self.floor > seq {
            return;
        }
        self.floor = seq + 1;
        while let Some((_, symbol)) = self.known.pop_first() {
            self.recycle(symbol);
        }
        self.pending.retain(|e| e.coefficients.keys().all(|&s| s > seq));
        self.settle();
    }

    /// [`Decoder::not_kept`], and the spare buffers go too: for a receiver that keeps
    /// nothing more until a repair comes, whose buffers other connections can use meanwhile.
    pub fn let_go_through(&mut self, seq: u64) {
        self.not_kept(seq);
        self.spare = Vec::new();
        self.settle();
    }

    /// Everything before `seq` is delivered in order: forget it.
    pub fn delivered_below(&mut self, seq: u64) {
        let keep_from = seq.saturating_sub(self.keep as u64);
        while let Some(entry) = self.known.first_entry().filter(|e| *e.key() < keep_from) {
            let symbol = entry.remove();
            self.recycle(symbol);
        }
        self.floor = self.floor.max(keep_from);
        self.pending.retain(|e| e.coefficients.keys().any(|&s| s >= seq) && e.coefficients.keys().all(|&s| s >= keep_from));
        self.settle();
    }

    /// A repair over sources `first .. first + span`. Returns the sources it let rebuild.
    pub fn add_repair(&mut self, scheme: Scheme, first: u64, span: usize, index: u8, symbol: &[u8]) -> Vec<(u64, Vec<u8>)> {
        self.repairs_received += 1;
        // A block repair's Cauchy row is (index + span); past 255 it would wrap onto a column.
        let block_overflows = scheme == Scheme::Block && index as usize + span > 255;
        if span == 0 || span > MAX_SPAN || block_overflows {
            self.repairs_useless += 1;
            return Vec::new();
        }
        // Every source it covers is known or forgotten: it can rebuild nothing, whatever
        // the arithmetic below would make of it. A clean path's repairs (a stream's first
        // ones) all end here, without a copy of the symbol and a pass over it per source.
        if !(first..first + span as u64).any(|seq| seq >= self.floor && !self.known.contains_key(&seq)) {
            self.repairs_useless += 1;
            return Vec::new();
        }
        let mut equation = Equation { coefficients: BTreeMap::new(), symbol: symbol.to_vec() };
        for j in 0..span {
            let seq = first + j as u64;
            let c = coefficient(scheme, first, span, index, j);
            match self.known.get(&seq) {
                Some(s) => {
                    if s.len() > equation.symbol.len() {
                        // A known source longer than the repair: not from this code.
                        self.repairs_useless += 1;
                        return Vec::new();
                    }
                    mul_add(&mut equation.symbol[..s.len()], c, s);
                }
                None if seq < self.floor => {
                    // Forgotten but delivered: its contribution cannot be removed.
                    self.repairs_useless += 1;
                    return Vec::new();
                }
                None => {
                    equation.coefficients.insert(seq, c);
                }
            }
        }
        if equation.coefficients.is_empty() {
            self.repairs_useless += 1;
            return Vec::new();
        }
        self.pending.push(equation);
        if self.pending.len() > MAX_PENDING {
            self.pending.remove(0);
        }
        let rebuilt = self.solve();
        self.settle();
        rebuilt
    }

    /// Rebuilds what the pending equations pin down: known sources are substituted,
    /// then each group of equations that share unknowns and are at least as many as
    /// their unknowns is eliminated (Gaussian elimination over GF(2^8)). Groups with too
    /// few equations wait for more repairs or sources, at no cost.
    fn solve(&mut self) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        loop {
            for e in self.pending.iter_mut() {
                let known: Vec<u64> = e.coefficients.keys().copied().filter(|s| self.known.contains_key(s)).collect();
                for s in known {
                    let c = e.coefficients.remove(&s).expect("listed");
                    let sym = &self.known[&s];
                    if sym.len() <= e.symbol.len() {
                        mul_add(&mut e.symbol[..sym.len()], c, sym);
                    }
                }
            }
            self.pending.retain(|e| !e.coefficients.is_empty());
            let mut solved = Vec::new();
            for group in self.groups() {
                let unknowns: Vec<u64> = {
                    let mut u: Vec<u64> = group.iter().flat_map(|&i| self.pending[i].coefficients.keys().copied()).collect();
                    u.sort_unstable();
                    u.dedup();
                    u
                };
                if group.len() >= unknowns.len() {
                    solved.extend(eliminate(group.iter().map(|&i| self.pending[i].clone()).collect(), &unknowns));
                }
            }
            let mut progress = false;
            for (seq, symbol) in solved {
                if self.known.contains_key(&seq) {
                    continue;
                }
                // Only what parses as a symbol is taken: a repair that does not belong
                // (or that a peer made up) rebuilds nothing.
                if parse_symbol(&symbol).is_none() {
                    continue;
                }
                let symbol = trim(symbol);
                self.known.insert(seq, symbol.clone());
                self.rebuilt += 1;
                out.push((seq, symbol));
                progress = true;
            }
            if !progress {
                return out;
            }
        }
    }

    /// The pending equations in groups that share unknowns (indices into `pending`).
    fn groups(&self) -> Vec<Vec<usize>> {
        let mut parent: Vec<usize> = (0..self.pending.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        let mut owner: BTreeMap<u64, usize> = BTreeMap::new();
        for (i, e) in self.pending.iter().enumerate() {
            for &s in e.coefficients.keys() {
                match owner.get(&s) {
                    Some(&j) => {
                        let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                        parent[a] = b;
                    }
                    None => {
                        owner.insert(s, i);
                    }
                }
            }
        }
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for i in 0..self.pending.len() {
            let r = root(&mut parent, i);
            groups.entry(r).or_default().push(i);
        }
        groups.into_values().collect()
    }
}

/// Gaussian elimination of `rows` over `unknowns`; returns the unknowns pinned down.
fn eliminate(mut rows: Vec<Equation>, unknowns: &[u64]) -> Vec<(u64, Vec<u8>)> {
    let mut pivot_row = 0;
    for &u in unknowns {
        let Some(r) = (pivot_row..rows.len()).find(|&r| rows[r].coefficients.get(&u).is_some_and(|&c| c != 0)) else { continue };
        rows.swap(pivot_row, r);
        let inverse = inv(rows[pivot_row].coefficients[&u]);
        for v in rows[pivot_row].coefficients.values_mut() {
            *v = mul(*v, inverse);
        }
        scale(&mut rows[pivot_row].symbol, inverse);
        let pivot = rows[pivot_row].clone();
        for (i, row) in rows.iter_mut().enumerate() {
            let Some(&f) = row.coefficients.get(&u) else { continue };
            if i == pivot_row || f == 0 {
                continue;
            }
            for (&s, &pc) in &pivot.coefficients {
                *row.coefficients.entry(s).or_insert(0) ^= mul(f, pc);
            }
            row.coefficients.retain(|_, v| *v != 0);
            if row.symbol.len() < pivot.symbol.len() {
                row.symbol.resize(pivot.symbol.len(), 0);
            }
            mul_add(&mut row.symbol[..pivot.symbol.len()], f, &pivot.symbol);
        }
        pivot_row += 1;
    }
    rows.into_iter()
        .filter(|row| row.coefficients.len() == 1 && row.coefficients.values().all(|&c| c == 1))
        .map(|row| (*row.coefficients.keys().next().expect("one"), row.symbol))
        .collect()
}

/// A rebuilt symbol without the padding it carried.
fn trim(mut symbol: Vec<u8>) -> Vec<u8> {
    if symbol.len() >= 3 {
        let len = u16::from_be_bytes([symbol[1], symbol[2]]) as usize;
        symbol.truncate(3 + len);
    }
    symbol
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_is_a_field() {
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1, "{a}");
            assert_eq!(mul(a, 1), a);
        }
        assert_eq!(mul(0x53, 0xca), mul(0xca, 0x53));
        // Distributive over xor.
        for (a, b, c) in [(3u8, 7u8, 250u8), (91, 200, 17)] {
            assert_eq!(mul(a, b ^ c), mul(a, b) ^ mul(a, c));
        }
    }

    fn payload(seq: u64) -> Vec<u8> {
        (0..(100 + seq as usize % 50)).map(|i| (i as u64 * 31 + seq * 7) as u8).collect()
    }

    #[test]
    fn a_repair_over_sources_all_known_or_forgotten_is_useless_and_kept_nowhere() {
        let mut enc = Encoder::new(16);
        let mut dec = Decoder::new(64);
        for seq in 0..8u64 {
            enc.add(seq, source_symbol(&payload(seq), false));
        }
        // 0-1 delivered and forgotten, 2-7 known: a repair over 0-7 has nothing to rebuild.
        dec.not_kept(1);
        for seq in 2..8u64 {
            assert!(dec.add_source(seq, source_symbol(&payload(seq), false)).is_empty());
        }
        let (first, symbol) = enc.repair(Scheme::Window, 8, 0).unwrap();
        assert_eq!(first, 0);
        assert!(dec.add_repair(Scheme::Window, first, 8, 0, &symbol).is_empty());
        assert_eq!((dec.repairs_received, dec.repairs_useless), (1, 1));
        assert_eq!(dec.held_symbols(), 6, "the six known sources, and no equation waiting");
        // With one of them unknown it waits for a second equation, or for that source.
        let mut dec = Decoder::new(64);
        for seq in (0..8u64).filter(|&s| s != 5) {
            dec.add_source(seq, source_symbol(&payload(seq), false));
        }
        let rebuilt = dec.add_repair(Scheme::Window, first, 8, 0, &symbol);
        assert_eq!(rebuilt.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), vec![5]);
        assert_eq!(dec.repairs_useless, 0);
    }

    #[test]
    fn a_source_not_kept_makes_repairs_over_it_useless_and_later_ones_work() {
        let mut enc = Encoder::new(16);
        let mut dec = Decoder::new(64);
        for seq in 0..20u64 {
            enc.add(seq, source_symbol(&payload(seq), false));
        }
        // 0-11 arrive but are not kept (a clean spell); 12-19 are kept, except 14, lost.
        for seq in 0..12u64 {
            dec.not_kept(seq);
        }
        for seq in (12..20u64).filter(|&s| s != 14) {
            assert!(dec.add_source(seq, source_symbol(&payload(seq), false)).is_empty());
        }
        // A repair over 8-19 names sources that were not kept: it cannot be used, and says so.
        let (first, wide) = enc.repair(Scheme::Window, 12, 0).unwrap();
        assert_eq!(first, 8);
        assert!(dec.add_repair(Scheme::Window, first, 12, 0, &wide).is_empty());
        assert_eq!(dec.repairs_useless, 1);
        // One over 12-19 (the sender's history restarted after its own quiet spell) rebuilds 14.
        let mut fresh = Encoder::new(16);
        for seq in 12..20u64 {
            fresh.add(seq, source_symbol(&payload(seq), false));
        }
        let (first, narrow) = fresh.repair(Scheme::Window, 8, 1).unwrap();
        let rebuilt = dec.add_repair(Scheme::Window, first, 8, 1, &narrow);
        assert_eq!(rebuilt, vec![(14, source_symbol(&payload(14), false))]);
    }

    #[test]
    fn forgetting_both_ends_frees_their_symbols_and_later_repairs_still_rebuild() {
        let mut enc = Encoder::new(16);
        let mut dec = Decoder::new(64);
        for seq in 0..20u64 {
            enc.add(seq, source_symbol(&payload(seq), false));
            assert!(dec.add_source(seq, source_symbol(&payload(seq), false)).is_empty());
        }
        let held: usize = enc.sources.iter().map(|(_, s)| s.capacity()).sum();
        assert_eq!(enc.held_bytes(), held, "counted as they come and go");
        assert!(held > 0 && dec.held_symbols() > 0);
        // A quiet spell: both ends forget.
        enc.forget();
        dec.forget();
        assert_eq!((enc.held_bytes(), enc.last(), enc.repair(Scheme::Window, 8, 0)), (0, None, None));
        assert_eq!((dec.held_symbols(), dec.held_bytes()), (0, 0));
        // A repair made before the sender forgot, over 12-19: all delivered and forgotten here.
        let mut before = Encoder::new(16);
        for seq in 4..20u64 {
            before.add(seq, source_symbol(&payload(seq), false));
        }
        let (first, old) = before.repair(Scheme::Window, 8, 0).unwrap();
        assert!(dec.add_repair(Scheme::Window, first, 8, 0, &old).is_empty());
        // After it: 20-27 sent, 23 lost; the sender's repair covers only these and rebuilds 23.
        for seq in 20..28u64 {
            enc.add(seq, source_symbol(&payload(seq), false));
            if seq != 23 {
                assert!(dec.add_source(seq, source_symbol(&payload(seq), false)).is_empty());
            }
        }
        assert_eq!(enc.held_bytes(), enc.sources.iter().map(|(_, s)| s.capacity()).sum::<usize>());
        let (first, fresh) = enc.repair(Scheme::Window, 16, 1).unwrap();
        assert_eq!(first, 20, "the history restarted at the forgetting");
        assert_eq!(dec.add_repair(Scheme::Window, first, 8, 1, &fresh), vec![(23, source_symbol(&payload(23), false))]);
    }

    #[test]
    fn a_block_code_rebuilds_any_missing_k_from_any_k_received() {
        let (k, n) = (8usize, 12usize);
        let mut enc = Encoder::new(k);
        for seq in 0..k as u64 {
            enc.add(seq, source_symbol(&payload(seq), seq == 7));
        }
        let repairs: Vec<_> = (0..(n - k) as u8).map(|i| enc.repair(Scheme::Block, k, i).unwrap()).collect();
        // Lose every set of 4 sources (70 of them): the 4 repairs rebuild each.
        let mut sets = 0;
        for a in 0..k {
            for b in a + 1..k {
                for c in b + 1..k {
                    for d in c + 1..k {
                        let lost = [a, b, c, d];
                        let mut dec = Decoder::new(64);
                        for seq in 0..k {
                            if !lost.contains(&seq) {
                                dec.add_source(seq as u64, source_symbol(&payload(seq as u64), seq == 7));
                            }
                        }
                        let mut rebuilt = Vec::new();
                        for (i, (first, symbol)) in repairs.iter().enumerate() {
                            rebuilt.extend(dec.add_repair(Scheme::Block, *first, k, i as u8, symbol));
                        }
                        rebuilt.sort();
                        assert_eq!(rebuilt.len(), 4, "lost {lost:?}");
                        for (seq, symbol) in rebuilt {
                            let (p, fin) = parse_symbol(&symbol).unwrap();
                            assert_eq!(p, &payload(seq)[..]);
                            assert_eq!(fin, seq == 7);
                        }
                        sets += 1;
                    }
                }
            }
        }
        assert_eq!(sets, 70);
    }

    #[test]
    fn a_sliding_window_repairs_losses_as_they_come() {
        // A repair over the last 16 after every 4 sources; 10 % of sources lost.
        let mut enc = Encoder::new(16);
        let mut dec = Decoder::new(256);
        let mut lost = 0;
        let mut rebuilt = 0;
        let mut got = BTreeMap::new();
        let mut x = 12345u64;
        for seq in 0..2000u64 {
            enc.add(seq, source_symbol(&payload(seq), false));
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            if (x >> 33) % 10 == 0 {
                lost += 1;
            } else {
                got.insert(seq, payload(seq));
                for (s, sym) in dec.add_source(seq, source_symbol(&payload(seq), false)) {
                    got.insert(s, parse_symbol(&sym).unwrap().0.to_vec());
                    rebuilt += 1;
                }
            }
            if seq % 4 == 3 {
                let (first, symbol) = enc.repair(Scheme::Window, 16, (seq / 4) as u8).unwrap();
                for (s, sym) in dec.add_repair(Scheme::Window, first, 16.min(seq as usize + 1), (seq / 4) as u8, &symbol) {
                    got.insert(s, parse_symbol(&sym).unwrap().0.to_vec());
                    rebuilt += 1;
                }
            }
        }
        for (seq, p) in &got {
            assert_eq!(p, &payload(*seq), "seq {seq} rebuilt wrong");
        }
        assert!(rebuilt as f64 >= 0.9 * lost as f64, "rebuilt {rebuilt} of {lost} lost");
    }

    #[test]
    fn repairs_that_do_not_belong_rebuild_nothing() {
        let mut dec = Decoder::new(64);
        for seq in [0u64, 1, 3] {
            dec.add_source(seq, source_symbol(&payload(seq), false));
        }
        // Garbage over 0..4: one unknown (2), solvable, but it does not parse as a symbol.
        let garbage = vec![0xa5u8; 160];
        assert!(dec.add_repair(Scheme::Window, 0, 4, 9, &garbage).is_empty());
        assert_eq!(dec.rebuilt, 0);
        // Spans out of range and repairs shorter than a known source are useless.
        assert!(dec.add_repair(Scheme::Block, 0, 0, 0, &garbage).is_empty());
        assert!(dec.add_repair(Scheme::Block, 0, 4, 0, &[1, 2]).is_empty());
        assert!(dec.repairs_useless >= 2);
    }
}

#[cfg(test)]
mod crafted {
    use super::*;

    /// Crafted sources and repairs (the fuzz target `fec_decoder`'s property, seeded):
    /// never a panic, and only well-formed symbols come out.
    #[test]
    fn crafted_input_never_panics_and_rebuilds_only_symbols() {
        let mut x = 0x5eed_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut rebuilt = 0;
        for _ in 0..2_000 {
            let mut d = Decoder::new(16 + (next() % 64) as usize);
            for _ in 0..40 {
                let seq = next() % 48;
                let len = (next() % 40) as usize;
                let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let out = match next() % 3 {
                    0 => d.add_source(seq, source_symbol(&body[..len.min(30)], next() % 5 == 0)),
                    1 => d.add_source(seq, body),
                    _ => {
                        let scheme = if next() % 2 == 0 { Scheme::Block } else { Scheme::Window };
                        d.add_repair(scheme, seq, (next() % 300) as usize, next() as u8, &body)
                    }
                };
                for (_, symbol) in out {
                    assert!(parse_symbol(&symbol).is_some());
                    rebuilt += 1;
                }
                if next() % 10 == 0 {
                    d.delivered_below(next() % 48);
                }
                if next() % 12 == 0 {
                    // A source that arrived but was not kept (a receiver between repairs).
                    d.not_kept(next() % 48);
                }
            }
        }
        // Some of the random repairs happen to pin down a well-formed symbol; most do not.
        assert!(rebuilt < 2_000 * 40);
    }
}
