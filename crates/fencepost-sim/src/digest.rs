//! SHA-256 of the sent and the received byte streams. Hashing 2 x 100 MB costs
//! as much as simulating the transfer, so it runs on a helper thread and
//! overlaps the simulation; the result is the same as hashing inline.

use sha2::{Digest, Sha256};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::thread::JoinHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// What the sending application wrote.
    Sent = 0,
    /// What the receiving application read.
    Received = 1,
}

/// Bytes gathered before a batch goes to the hashing thread.
const BATCH: usize = 1 << 20;

pub struct StreamDigests {
    pending: [Vec<u8>; 2],
    worker: Option<(SyncSender<(Stream, Vec<u8>)>, JoinHandle<[[u8; 32]; 2]>)>,
    /// Used when no thread could be started.
    inline: [Sha256; 2],
}

impl StreamDigests {
    pub fn new() -> Self {
        let (tx, rx) = sync_channel::<(Stream, Vec<u8>)>(4);
        let worker = std::thread::Builder::new()
            .name("fencepost-sha256".into())
            .spawn(move || {
                let mut hashes = [Sha256::new(), Sha256::new()];
                for (stream, bytes) in rx {
                    hashes[stream as usize].update(&bytes);
                }
                let [a, b] = hashes;
                [a.finalize().into(), b.finalize().into()]
            })
            .ok()
            .map(|handle| (tx, handle));
        StreamDigests { pending: [Vec::new(), Vec::new()], worker, inline: [Sha256::new(), Sha256::new()] }
    }

    /// Hashes on the caller's thread.
    pub fn inline() -> Self {
        StreamDigests { pending: [Vec::new(), Vec::new()], worker: None, inline: [Sha256::new(), Sha256::new()] }
    }

    pub fn update(&mut self, stream: Stream, bytes: &[u8]) {
        if self.worker.is_none() {
            self.inline[stream as usize].update(bytes);
            return;
        }
        let pending = &mut self.pending[stream as usize];
        pending.extend_from_slice(bytes);
        if pending.len() >= BATCH {
            let batch = std::mem::replace(pending, Vec::with_capacity(BATCH + 65_536));
            self.send(stream, batch);
        }
    }

    fn send(&mut self, stream: Stream, batch: Vec<u8>) {
        if let Some((tx, _)) = &self.worker {
            if let Err(failed) = tx.send((stream, batch)) {
                // The thread is gone (it cannot panic on hashing, but stay correct): hash here.
                let (stream, batch) = failed.0;
                self.inline[stream as usize].update(&batch);
            }
        }
    }

    /// The two digests: [sent, received].
    pub fn finish(mut self) -> [[u8; 32]; 2] {
        for stream in [Stream::Sent, Stream::Received] {
            let rest = std::mem::take(&mut self.pending[stream as usize]);
            if !rest.is_empty() {
                self.send(stream, rest);
            }
        }
        match self.worker.take() {
            Some((tx, handle)) => {
                drop(tx);
                handle.join().expect("the hashing thread does not panic")
            }
            None => {
                let [a, b] = self.inline.clone();
                [a.finalize().into(), b.finalize().into()]
            }
        }
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_inline_hashing() {
        let mut d = StreamDigests::new();
        assert!(d.worker.is_some());
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        for chunk in data.chunks(70_001) {
            d.update(Stream::Sent, chunk);
        }
        d.update(Stream::Received, b"abc");
        let [sent, received] = d.finish();
        let expected: [u8; 32] = Sha256::digest(&data).into();
        assert_eq!(sent, expected);
        let abc: [u8; 32] = Sha256::digest(b"abc").into();
        assert_eq!(received, abc);
    }
}
