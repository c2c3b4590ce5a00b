//! SHA-256 of the sent and the received byte streams. Hashing 2 x 100 MB costs
//! as much as simulating the transfer, so it runs on a helper thread and
//! overlaps the simulation; the result is the same as hashing inline.
//!
//! Two shortcuts keep copies off the simulation's thread: a bulk sender's bytes
//! are the deterministic [`BulkPattern`], so the helper regenerates and hashes
//! them from a byte count; and the receiving application reads straight into the
//! buffer that goes to the helper.

use crate::pattern::BulkPattern;
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
/// Room kept free at the end of a batch for one read.
const READ_ROOM: usize = 64 * 1024;

enum Job {
    Bytes(Stream, Vec<u8>),
    /// The next `n` bytes of the sent pattern.
    Pattern(u64),
}

/// Hashes one stream, or the pattern's prefix.
struct Hashers {
    hashes: [Sha256; 2],
    pattern: Option<BulkPattern>,
    pattern_offset: u64,
    scratch: Vec<u8>,
}

impl Hashers {
    fn new(pattern: Option<BulkPattern>) -> Self {
        Hashers { hashes: [Sha256::new(), Sha256::new()], pattern, pattern_offset: 0, scratch: vec![0; 64 * 1024] }
    }

    fn run(&mut self, job: Job) {
        match job {
            Job::Bytes(stream, bytes) => self.hashes[stream as usize].update(&bytes),
            Job::Pattern(mut n) => {
                let Some(pattern) = &self.pattern else { return };
                while n > 0 {
                    // Chunks stay 8-byte aligned in the stream, as the pattern needs.
                    let len = n.min(self.scratch.len() as u64) as usize;
                    pattern.fill(self.pattern_offset, &mut self.scratch[..len]);
                    self.hashes[Stream::Sent as usize].update(&self.scratch[..len]);
                    self.pattern_offset += len as u64;
                    n -= len as u64;
                }
            }
        }
    }

    fn finish(self) -> [[u8; 32]; 2] {
        let [a, b] = self.hashes;
        [a.finalize().into(), b.finalize().into()]
    }
}

/// The helper thread: where jobs go, and what it returns (the two digests).
type Worker = (SyncSender<Job>, JoinHandle<[[u8; 32]; 2]>);

pub struct StreamDigests {
    pending: [Vec<u8>; 2],
    /// The receive batch: a buffer kept at full length (zeroed once) and how much of it holds data.
    receive: Vec<u8>,
    received: usize,
    /// Sent pattern bytes not yet handed to the hasher.
    pending_pattern: u64,
    worker: Option<Worker>,
    /// Used when there is no helper thread.
    inline: Option<Hashers>,
}

impl StreamDigests {
    /// Hashes on a helper thread (falling back to inline if none can start).
    /// `pattern` is the bulk sender's stream, if the sent side is one.
    pub fn new(pattern: Option<BulkPattern>) -> Self {
        let (tx, rx) = sync_channel::<Job>(4);
        let hashers = Hashers::new(pattern.clone());
        let worker = std::thread::Builder::new()
            .name("fencepost-sha256".into())
            .spawn(move || {
                let mut hashers = hashers;
                for job in rx {
                    hashers.run(job);
                }
                hashers.finish()
            })
            .ok()
            .map(|handle| (tx, handle));
        let inline = if worker.is_none() { Some(Hashers::new(pattern)) } else { None };
        StreamDigests { pending: [Vec::new(), Vec::new()], receive: Vec::new(), received: 0, pending_pattern: 0, worker, inline }
    }

    /// Hashes on the caller's thread.
    pub fn inline(pattern: Option<BulkPattern>) -> Self {
        StreamDigests {
            pending: [Vec::new(), Vec::new()],
            receive: Vec::new(),
            received: 0,
            pending_pattern: 0,
            worker: None,
            inline: Some(Hashers::new(pattern)),
        }
    }

    fn submit(&mut self, job: Job) {
        if let Some(hashers) = &mut self.inline {
            hashers.run(job);
            return;
        }
        if let Some((tx, _)) = &self.worker {
            if let Err(failed) = tx.send(job) {
                // The thread is gone (it cannot panic on hashing, but stay correct): hash here.
                let mut hashers = Hashers::new(None);
                hashers.run(failed.0);
                self.inline = Some(hashers);
            }
        }
    }

    pub fn update(&mut self, stream: Stream, bytes: &[u8]) {
        if let Some(hashers) = &mut self.inline {
            hashers.hashes[stream as usize].update(bytes);
            return;
        }
        let pending = &mut self.pending[stream as usize];
        pending.extend_from_slice(bytes);
        if pending.len() >= BATCH {
            let batch = std::mem::replace(pending, Vec::with_capacity(BATCH + READ_ROOM));
            self.submit(Job::Bytes(stream, batch));
        }
    }

    /// The sender wrote the next `n` bytes of its pattern.
    pub fn update_sent_pattern(&mut self, n: u64) {
        self.pending_pattern += n;
        if self.pending_pattern >= BATCH as u64 {
            let n = std::mem::take(&mut self.pending_pattern);
            self.submit(Job::Pattern(n));
        }
    }

    /// Room to read received bytes into; [`StreamDigests::commit_received`] then takes them.
    pub fn receive_buffer(&mut self) -> &mut [u8] {
        if self.receive.is_empty() {
            self.receive = vec![0; BATCH + READ_ROOM];
        }
        &mut self.receive[self.received..self.received + READ_ROOM]
    }

    /// The first `n` bytes of the last [`StreamDigests::receive_buffer`] were read.
    pub fn commit_received(&mut self, n: usize) {
        self.received += n.min(READ_ROOM);
        if self.received >= BATCH {
            self.flush_received();
        }
    }

    fn flush_received(&mut self) {
        if self.received == 0 {
            return;
        }
        if let Some(hashers) = &mut self.inline {
            hashers.hashes[Stream::Received as usize].update(&self.receive[..self.received]);
        } else {
            let mut batch = std::mem::take(&mut self.receive);
            batch.truncate(self.received);
            self.submit(Job::Bytes(Stream::Received, batch));
        }
        self.received = 0;
    }

    /// The two digests: [sent, received].
    pub fn finish(mut self) -> [[u8; 32]; 2] {
        // Bytes read through receive_buffer come before any given to `update` (a run uses one or the other).
        self.flush_received();
        for stream in [Stream::Sent, Stream::Received] {
            let rest = std::mem::take(&mut self.pending[stream as usize]);
            if !rest.is_empty() {
                self.submit(Job::Bytes(stream, rest));
            }
        }
        let n = std::mem::take(&mut self.pending_pattern);
        if n > 0 {
            self.submit(Job::Pattern(n));
        }
        if let Some(hashers) = self.inline.take() {
            if self.worker.is_none() {
                return hashers.finish();
            }
        }
        match self.worker.take() {
            Some((tx, handle)) => {
                drop(tx);
                handle.join().expect("the hashing thread does not panic")
            }
            None => Hashers::new(None).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(data: &[u8]) -> [u8; 32] {
        Sha256::digest(data).into()
    }

    #[test]
    fn threaded_and_inline_agree_with_plain_hashing() {
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let pattern = BulkPattern::new(3);
        let mut expected_sent = vec![0u8; 2_500_000];
        pattern.fill(0, &mut expected_sent);
        for mut d in [StreamDigests::new(Some(pattern.clone())), StreamDigests::inline(Some(pattern.clone()))] {
            for chunk in data.chunks(70_001) {
                let room = d.receive_buffer();
                let n = chunk.len().min(room.len());
                room[..n].copy_from_slice(&chunk[..n]);
                d.commit_received(n);
            }
            for n in [100_003u64, 1_399_997, 1_000_000] {
                d.update_sent_pattern(n);
            }
            let [sent, received] = d.finish();
            assert_eq!(sent, sha(&expected_sent));
            // Reads are capped at READ_ROOM per call: rebuild what was committed.
            let committed: Vec<u8> = data.chunks(70_001).flat_map(|c| c[..c.len().min(READ_ROOM)].to_vec()).collect();
            assert_eq!(received, sha(&committed));
        }
    }
}
