#![no_main]
//! The FEC decoder fed crafted sources and repair packets (any scheme, span, index,
//! first sequence number and symbol): never a panic, and whatever it rebuilds is a
//! well-formed source symbol.

use fencepost_proto::fec::{parse_symbol, Decoder, Scheme};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut decoder = Decoder::new(64);
    let mut rest = data;
    while rest.len() >= 6 {
        let (head, tail) = rest.split_at(6);
        let len = (head[5] as usize).min(tail.len());
        let (body, tail) = tail.split_at(len);
        let seq = u16::from_be_bytes([head[1], head[2]]) as u64;
        let rebuilt = if head[0] & 1 == 0 {
            decoder.add_source(seq, body.to_vec())
        } else {
            let scheme = if head[0] & 2 == 0 { Scheme::Block } else { Scheme::Window };
            decoder.add_repair(scheme, seq, head[3] as usize, head[4], body)
        };
        for (_, symbol) in rebuilt {
            assert!(parse_symbol(&symbol).is_some(), "rebuilt a symbol that does not parse");
        }
        if head[0] & 4 != 0 {
            decoder.delivered_below(seq);
        }
        if head[0] & 8 != 0 {
            // A source that arrived but was not kept (a receiver between repairs).
            decoder.not_kept(seq);
        }
        rest = tail;
    }
});
