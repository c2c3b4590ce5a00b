//! SHA-256 of the two streams of a workload whose bytes are not generated from a
//! seed by the simulator's pattern (echo): the run compares them, and reports the
//! sent one.
//!
//! A bulk or stream workload is not hashed at all: its receiving application
//! compares every byte it reads with the regenerated pattern (`apps::Verifier`),
//! which is exact and costs a fraction of hashing the stream twice (2 x 100 MB of
//! SHA-256 took longer than simulating the transfer).

use sha2::{Digest, Sha256};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// What the sending application wrote.
    Sent = 0,
    /// What the receiving application read.
    Received = 1,
}

pub struct StreamDigests {
    hashes: Option<[Sha256; 2]>,
}

impl StreamDigests {
    /// Hashes both streams.
    pub fn hashing() -> Self {
        StreamDigests { hashes: Some([Sha256::new(), Sha256::new()]) }
    }

    /// Hashes nothing: the workload's bytes are checked another way.
    pub fn none() -> Self {
        StreamDigests { hashes: None }
    }

    pub fn update(&mut self, stream: Stream, bytes: &[u8]) {
        if let Some(hashes) = &mut self.hashes {
            hashes[stream as usize].update(bytes);
        }
    }

    /// The two digests, [sent, received], if the streams were hashed.
    pub fn finish(self) -> Option<[[u8; 32]; 2]> {
        self.hashes.map(|[sent, received]| [sent.finalize().into(), received.finalize().into()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_each_stream_as_a_whole() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut d = StreamDigests::hashing();
        for chunk in data.chunks(70_001) {
            d.update(Stream::Received, chunk);
        }
        d.update(Stream::Sent, &data[..12_345]);
        let [sent, received] = d.finish().expect("hashed");
        assert_eq!(received, <[u8; 32]>::from(Sha256::digest(&data)));
        assert_eq!(sent, <[u8; 32]>::from(Sha256::digest(&data[..12_345])));
        let mut none = StreamDigests::none();
        none.update(Stream::Sent, &data);
        assert!(none.finish().is_none());
    }
}
