//! What one simulated run measured, in the names the seed documents use.

use fencepost_link::LinkStats;
use serde::Serialize;
use std::collections::BTreeMap;

/// The result of one run. "Sending side" is the client: the bulk sender, or the
/// echo client whose packets the seed article counted. Counters are taken when
/// the workload completed (or when the run ended, if it did not).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimReport {
    /// `ok`, `timeout` (idle timeout fired), `reset`, `deadline` (the run hit `--timeout`),
    /// `cancelled` (interrupted), or `stalled`.
    pub status: String,
    pub error: Option<String>,
    /// Every byte arrived, in order, and its SHA-256 matches what was sent.
    pub integrity_ok: bool,
    /// Both sides then closed gracefully.
    pub close_ok: bool,
    pub workload: String,
    pub profile: String,
    pub arq: String,
    pub cc: String,
    pub seed: u64,
    pub bytes_expected: u64,
    pub bytes_delivered: u64,
    pub sha256: String,
    pub payload_size: usize,
    /// Virtual seconds from the start to the workload's completion.
    pub duration_s: f64,
    pub goodput_bps: f64,
    pub packets_sent: u64,
    pub data_packets_sent: u64,
    pub retransmissions: u64,
    pub acks_sent: u64,
    pub keepalives_sent: u64,
    pub handshake_packets_sent: u64,
    pub acks_received: u64,
    pub duplicate_acks_received: u64,
    pub packets_presumed_lost: u64,
    pub spurious_retransmissions: u64,
    pub congestion_events: u64,
    pub retransmission_timeouts: u64,
    pub peer_packets_sent: u64,
    pub peer_data_packets_sent: u64,
    pub peer_acks_sent: u64,
    pub rtt_samples: usize,
    pub rtt_mean_ms: Option<f64>,
    pub rtt_p95_ms: Option<f64>,
    /// Packets the links dropped in both directions (random loss plus queue overflow).
    pub link_drops: u64,
    pub link_up: LinkStats,
    pub link_down: LinkStats,
    /// Virtual seconds when the run stopped (after the close, or at the error).
    pub end_s: f64,
    /// Bytes an application read that differ from what was sent, checked as they were read. Always 0.
    pub wrong_bytes: u64,
    /// When the run ended in an idle timeout: how long the timed-out side had received nothing.
    pub timeout_silence_s: Option<f64>,
    pub options: BTreeMap<String, String>,
}

impl SimReport {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report always serializes")
    }
}

/// Mean and 95th percentile (nearest rank) of RTT samples in microseconds, as milliseconds.
pub fn rtt_summary(samples: &[u32]) -> (Option<f64>, Option<f64>) {
    if samples.is_empty() {
        return (None, None);
    }
    let mean = samples.iter().map(|&s| s as f64).sum::<f64>() / samples.len() as f64 / 1000.0;
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((0.95 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    (Some(mean), Some(sorted[rank - 1] as f64 / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtt_summary_uses_nearest_rank() {
        let samples: Vec<u32> = (1..=100).map(|ms| ms * 1000).collect();
        assert_eq!(rtt_summary(&samples), (Some(50.5), Some(95.0)));
        assert_eq!(rtt_summary(&[]), (None, None));
    }
}
