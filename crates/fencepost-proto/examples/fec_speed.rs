//! FEC encode and decode throughput for the codes fencepost sends, on 1,438-byte
//! payloads (the default profile's): megabytes of source data per second through the
//! encoder (making the repairs) and through the decoder (taking sources and repairs
//! and rebuilding what a 10 % loss took). `cargo run --release -p fencepost-proto --example fec_speed`.

use fencepost_proto::fec::{source_symbol, Decoder, Encoder, Scheme};
use std::time::Instant;

const PAYLOAD: usize = 1438;
const SOURCES: u64 = 40_000;

fn payload(seq: u64) -> Vec<u8> {
    (0..PAYLOAD).map(|i| (i as u64 * 131 + seq * 7) as u8).collect()
}

/// (encode MB/s, decode MB/s, packets rebuilt of those lost)
fn measure(scheme: Scheme, span: usize, every: u64, repairs_per_turn: u8) -> (f64, f64, u64, u64) {
    let symbols: Vec<Vec<u8>> = (0..SOURCES).map(|s| source_symbol(&payload(s), false)).collect();
    let mut enc = Encoder::new(span);
    let mut repairs = Vec::new();
    let started = Instant::now();
    let mut index = 0u8;
    for (seq, symbol) in symbols.iter().enumerate() {
        enc.add(seq as u64, symbol.clone());
        if (seq as u64 + 1) % every == 0 {
            for i in 0..repairs_per_turn {
                let idx = if scheme == Scheme::Block { i } else { index };
                let (first, sym) = enc.repair(scheme, span, idx).expect("sources held");
                repairs.push((seq as u64, first, idx, sym));
                index = index.wrapping_add(1);
            }
        }
    }
    let encode = SOURCES as f64 * PAYLOAD as f64 / 1e6 / started.elapsed().as_secs_f64();
    // Decode with every tenth source lost (spread, as random loss would be on average).
    let mut dec = Decoder::new(512);
    let mut next_repair = 0;
    let (mut lost, mut rebuilt) = (0, 0);
    let started = Instant::now();
    for (seq, symbol) in symbols.iter().enumerate() {
        let seq = seq as u64;
        if (seq * 7919) % 10 == 3 {
            lost += 1;
        } else {
            rebuilt += dec.add_source(seq, symbol.clone()).len() as u64;
        }
        while next_repair < repairs.len() && repairs[next_repair].0 == seq {
            let (_, first, idx, ref sym) = repairs[next_repair];
            rebuilt += dec.add_repair(scheme, first, span.min(seq as usize + 1), idx, sym).len() as u64;
            next_repair += 1;
        }
        dec.delivered_below(seq.saturating_sub(2 * span as u64));
    }
    let decode = SOURCES as f64 * PAYLOAD as f64 / 1e6 / started.elapsed().as_secs_f64();
    (encode, decode, rebuilt, lost)
}

fn main() {
    println!("FEC throughput, {PAYLOAD}-byte payloads, {SOURCES} source packets; decode with 10 % of sources lost");
    println!("{:<22} {:>10} {:>10} {:>14}", "code", "encode MB/s", "decode MB/s", "rebuilt/lost");
    for (name, scheme, span, every, per) in [
        ("fec:rs:8/12", Scheme::Block, 8, 8, 4u8),
        ("fec:rs:16/20", Scheme::Block, 16, 16, 4),
        ("fec:window:8/2", Scheme::Window, 8, 2, 1),
        ("fec:window:16/4", Scheme::Window, 16, 4, 1),
        ("fec:window:32/4", Scheme::Window, 32, 4, 1),
    ] {
        let (e, d, r, l) = measure(scheme, span, every, per);
        println!("{name:<22} {e:>10.0} {d:>10.0} {:>14}", format!("{r}/{l}"));
    }
}
