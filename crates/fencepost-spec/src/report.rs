//! The report of a simulated run, in the names the seed documents use: one
//! schema, serialized as JSON, described field by field for the Python package
//! (which builds its result classes from [`schema`]), and printed as text.

use fencepost_link::LinkStats;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What one flow measured. The sending side is the client: the bulk sender, or the
/// echo client whose packets the seed article counted. Counters are taken when the
/// flow's workload completed (or when the run ended, if it did not).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowReport {
    pub flow: usize,
    pub client_host: String,
    pub server_host: String,
    pub start_s: f64,
    pub status: String,
    pub error: Option<String>,
    pub integrity_ok: bool,
    pub close_ok: bool,
    pub workload: String,
    pub profile: String,
    pub arq: String,
    pub cc: String,
    pub bytes_expected: u64,
    pub bytes_delivered: u64,
    pub sha256: String,
    pub payload_size: usize,
    pub duration_s: f64,
    pub goodput_bps: f64,
    pub packets_sent: u64,
    pub data_packets_sent: u64,
    pub retransmissions: u64,
    pub redundancy: String,
    /// Repair packets (copies) the client sent beside its data packets.
    pub redundant_packets_sent: u64,
    pub acks_sent: u64,
    pub keepalives_sent: u64,
    pub tail_probes: u64,
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
    pub sparser_ack_trials: u64,
    pub sparser_ack_trials_kept: u64,
    pub rtt_samples: usize,
    pub rtt_mean_ms: Option<f64>,
    pub rtt_p95_ms: Option<f64>,
    /// The RTT samples' percentiles 0, 1, ..., 100 (nearest rank), for CDFs; empty without samples.
    pub rtt_percentiles_ms: Vec<f64>,
    pub wrong_bytes: u64,
    /// A stream: messages whose last byte the server read, and their latency (due to read).
    pub messages_delivered: u64,
    pub message_latency_p50_ms: Option<f64>,
    pub message_latency_p95_ms: Option<f64>,
    pub message_latency_p99_ms: Option<f64>,
    pub message_latencies_ms: Vec<f64>,
    pub timeout_silence_s: Option<f64>,
    /// Goodput over each `--series` interval from the run's start, bits per second (empty when off).
    pub goodput_series_bps: Vec<f64>,
}

/// One direction of one link.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkReport {
    pub link: String,
    /// `up` (from the link's first host to its second) or `down`.
    pub direction: String,
    pub from_host: String,
    pub to_host: String,
    /// The link model's counters (offered, lost, queue_dropped, ...), at the top level of the JSON.
    #[serde(flatten)]
    pub counters: LinkStats,
    /// Bytes delivered over the bytes the bottleneck could have carried, until the workloads completed.
    pub utilisation: Option<f64>,
    pub queue_delay_p50_ms: Option<f64>,
    pub queue_delay_p95_ms: Option<f64>,
    /// The link events applied to this direction, in order.
    pub events: Vec<String>,
}

/// The whole run. The run's status fields (`status`, `error`, `integrity_ok`,
/// `close_ok`, `wrong_bytes`) cover every flow; the other flow fields at the top
/// level are the first flow's, as a single-flow run always had them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    #[serde(flatten)]
    pub first: FlowReport,
    pub seed: u64,
    pub topology: String,
    /// Packets every link dropped, both directions (random loss, queue overflow, blackouts).
    pub link_drops: u64,
    /// The bottleneck's two directions (on a line: client to server, and back).
    pub link_up: LinkStats,
    pub link_down: LinkStats,
    /// Virtual seconds when the run stopped (after the closes, or at the error).
    pub end_s: f64,
    /// Jain's fairness index over the flows' goodputs (1 = equal shares).
    pub jain_index: Option<f64>,
    pub flows: Vec<FlowReport>,
    pub links: Vec<LinkReport>,
    pub options: BTreeMap<String, String>,
}

/// The first flow's fields read as the run's own (`report.goodput_bps`), as they
/// appear at the top of the JSON.
impl std::ops::Deref for RunReport {
    type Target = FlowReport;
    fn deref(&self) -> &FlowReport {
        &self.first
    }
}

impl RunReport {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report always serializes")
    }

    pub fn from_json(text: &str) -> Result<RunReport, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// Jain's fairness index: (sum x)^2 / (n sum x^2); `None` without flows or with no goodput at all.
pub fn jain_index(values: &[f64]) -> Option<f64> {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    (!values.is_empty() && squares > 0.0).then(|| sum * sum / (values.len() as f64 * squares))
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

/// Percentiles 0, 1, ..., 100 of RTT samples (µs) in milliseconds, nearest rank (the 0th is
/// the minimum): 101 numbers draw a run's RTT CDF without carrying every sample.
pub fn rtt_percentiles(samples: &[u32]) -> Vec<f64> {
    if samples.is_empty() {
        return Vec::new();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    (0..=100).map(|p| sorted[((p * n).div_ceil(100)).clamp(1, n) - 1] as f64 / 1000.0).collect()
}

// ---- the schema, for the Python package ----

/// How a field's value is typed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    Int,
    Float,
    Bool,
    Str,
    OptionalFloat,
    OptionalStr,
    /// `link_up`/`link_down`: a link's counters.
    LinkStats,
    /// A list of flows or links.
    Flows,
    Links,
    Strings,
    /// A list of numbers (a time series).
    Floats,
    Options,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Field {
    pub name: &'static str,
    #[serde(rename = "type")]
    pub kind: FieldType,
    /// Sweeps summarise it per condition (mean, standard deviation, confidence interval).
    pub summarise: bool,
    pub help: &'static str,
}

const fn field(name: &'static str, kind: FieldType, summarise: bool, help: &'static str) -> Field {
    Field { name, kind, summarise, help }
}

use FieldType::*;

/// Every field of a flow, in order.
pub static FLOW_FIELDS: &[Field] = &[
    field("flow", Int, false, "the flow's number, from 1"),
    field("client_host", Str, false, "the host of the flow's client"),
    field("server_host", Str, false, "the host of the flow's server"),
    field("start_s", Float, false, "when the client opened the connection (virtual seconds)"),
    field("status", Str, false, "ok, timeout (idle timeout), reset, deadline (the run's --timeout), cancelled or stalled"),
    field("error", OptionalStr, false, "what went wrong, if anything"),
    field("integrity_ok", Bool, false, "every byte arrived, in order, as it was sent (simulated: each byte compared with the sender's as it was read; in the lab: SHA-256 at both ends)"),
    field("close_ok", Bool, false, "integrity_ok, and both sides then closed gracefully"),
    field("workload", Str, false, "bulk or echo"),
    field("profile", Str, false, "transport profile"),
    field("arq", Str, false, "loss recovery"),
    field("cc", Str, false, "congestion control, as a spec --cc reads back"),
    field("bytes_expected", Int, false, "bytes the workload had to deliver"),
    field("bytes_delivered", Int, true, "bytes the receiving application read"),
    field("sha256", Str, false, "SHA-256 of the bytes sent (empty for a simulated bulk or stream workload: its bytes are checked one by one against their generator)"),
    field("payload_size", Int, false, "payload bytes per data packet after the handshake"),
    field("duration_s", Float, true, "virtual seconds from the flow's start to its workload's completion"),
    field("goodput_bps", Float, true, "payload bits per second the receiving application read (a timed transfer: while the sender wrote)"),
    field("packets_sent", Int, true, "every datagram the client sent (data, retransmissions, acks, handshakes)"),
    field("data_packets_sent", Int, true, "data and FIN packets the client sent, retransmissions included"),
    field("retransmissions", Int, true, "data packets the client sent again"),
    field("redundancy", Str, false, "redundancy, as a spec --redundancy reads back"),
    field("redundant_packets_sent", Int, true, "repair packets (copies or FEC repairs) the client sent beside its data packets"),
    field("acks_sent", Int, true, "acks the client sent"),
    field("keepalives_sent", Int, false, "keepalives the client sent"),
    field("tail_probes", Int, false, "of those, sent as tail probes while packets were in flight (their acks show older packets lost)"),
    field("handshake_packets_sent", Int, false, "handshake packets the client sent"),
    field("acks_received", Int, true, "acks the client received"),
    field("duplicate_acks_received", Int, true, "acks whose fence base did not move while data was outstanding"),
    field("packets_presumed_lost", Int, false, "transmissions the client declared lost"),
    field("spurious_retransmissions", Int, true, "retransmissions whose original had arrived"),
    field("congestion_events", Int, true, "loss episodes the controller reacted to"),
    field("retransmission_timeouts", Int, true, "retransmission timer expiries"),
    field("peer_packets_sent", Int, true, "every datagram the server sent"),
    field("peer_data_packets_sent", Int, false, "data and FIN packets the server sent"),
    field("peer_acks_sent", Int, false, "acks the server sent"),
    field("sparser_ack_trials", Int, false, "times the client asked for sparser acks on trial, the acks' own path seeming to limit the rate"),
    field("sparser_ack_trials_kept", Int, false, "those trials kept: the rate rose or the queue of acks drained"),
    field("rtt_samples", Int, false, "RTT samples the client took"),
    field("rtt_mean_ms", OptionalFloat, true, "mean RTT sample"),
    field("rtt_p95_ms", OptionalFloat, true, "95th percentile RTT sample (nearest rank)"),
    field("rtt_percentiles_ms", Floats, false, "RTT sample percentiles 0, 1, ..., 100 (nearest rank, 0 is the minimum; for CDFs)"),
    field("wrong_bytes", Int, false, "bytes an application read that differ from what was sent, checked as they were read (always 0)"),
    field("messages_delivered", Int, false, "stream: messages whose last byte the server read"),
    field("message_latency_p50_ms", OptionalFloat, true, "stream: median message latency, from when a message was due to be sent to when its last byte was read"),
    field("message_latency_p95_ms", OptionalFloat, true, "stream: 95th percentile message latency (nearest rank)"),
    field("message_latency_p99_ms", OptionalFloat, true, "stream: 99th percentile message latency (nearest rank)"),
    field("timeout_silence_s", OptionalFloat, false, "after an idle timeout: how long the timed-out side had heard nothing"),
    field("message_latencies_ms", Floats, false, "stream: every delivered message's latency, in order (for CDFs)"),
    field("goodput_series_bps", Floats, false, "goodput over each --series interval from the run's start, bits per second (empty unless --series)"),
];

/// The run's own fields, after the first flow's.
pub static RUN_FIELDS: &[Field] = &[
    field("seed", Int, false, "seed of every random choice"),
    field("topology", Str, false, "line, dumbbell:N or the scenario's name"),
    field("link_drops", Int, true, "packets every link dropped, both directions"),
    field("link_up", LinkStats, false, "the bottleneck's counters, first host to second (client to server on a line)"),
    field("link_down", LinkStats, false, "the bottleneck's counters, the other way"),
    field("end_s", Float, false, "virtual seconds when the run stopped"),
    field("jain_index", OptionalFloat, true, "Jain's fairness index over the flows' goodputs"),
    field("flows", Flows, false, "every flow's fields"),
    field("links", Links, false, "every link direction: counters, utilisation, queueing delay, events"),
    field("options", Options, false, "the options of the run, defaults filled in"),
];

/// The counters in `link_up` and `link_down`.
pub static LINK_STATS_FIELDS: &[Field] = &[
    field("offered", Int, false, "packets that entered"),
    field("lost", Int, false, "dropped by random loss"),
    field("queue_dropped", Int, false, "dropped by a full queue"),
    field("blackout_dropped", Int, false, "dropped during a blackout"),
    field("duplicated", Int, false, "copies the link made"),
    field("delivered", Int, false, "packets handed on"),
    field("bytes_delivered", Int, false, "bytes handed on, IP and UDP headers included"),
    field("corrupted", Int, false, "delivered with one bit flipped (the next host's checksums discard them)"),
];

/// The fields of one link direction besides its counters ([`LINK_STATS_FIELDS`], which come after `to_host`).
pub static LINK_FIELDS: &[Field] = &[
    field("link", Str, false, "the link's name"),
    field("direction", Str, false, "up (first host to second) or down"),
    field("from_host", Str, false, "the host packets enter from"),
    field("to_host", Str, false, "the host they leave to"),
    field("utilisation", OptionalFloat, false, "bytes delivered over what the bottleneck could carry until the workloads completed (none when unlimited)"),
    field("queue_delay_p50_ms", OptionalFloat, false, "median time from entering the link to leaving its bottleneck (waiting plus serialization)"),
    field("queue_delay_p95_ms", OptionalFloat, false, "95th percentile of the same"),
    field("events", Strings, false, "the link events applied, in order"),
];

/// Every field, for `_core.report_schema()`: `{"flow": [...], "run": [...], "link": [...], "link_stats": [...]}`
/// (a link direction's fields are its own and then its counters).
pub fn schema() -> serde_json::Value {
    let link: Vec<&Field> = LINK_FIELDS[..4].iter().chain(LINK_STATS_FIELDS).chain(&LINK_FIELDS[4..]).collect();
    serde_json::json!({ "flow": FLOW_FIELDS, "run": RUN_FIELDS, "link": link, "link_stats": LINK_STATS_FIELDS })
}

// ---- text ----

fn rate(bps: f64) -> String {
    if bps >= 1e5 { format!("{:.3} Mbit/s", bps / 1e6) } else { format!("{:.1} kbit/s", bps / 1e3) }
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl RunReport {
    /// The human summary `fencepost sim` prints.
    pub fn to_text(&self) -> String {
        let r = &self.first;
        let o = |k: &str| self.options.get(k).map_or("", String::as_str);
        let mut out = String::new();
        let size = if r.workload == "bulk" {
            format!("{} B", thousands(r.bytes_expected))
        } else if r.workload == "stream" {
            format!("{} B in messages of {} at {}", thousands(r.bytes_expected), o("message-size"), o("message-rate"))
        } else {
            format!("{} messages, {} B", o("messages"), thousands(r.bytes_expected))
        };
        let redundancy = if r.redundancy.is_empty() || r.redundancy == "none" { String::new() } else { format!(", redundancy {}", r.redundancy) };
        let _ = writeln!(out, "{} {size} | profile {}, arq {}, cc {}{redundancy}, payload {} B", r.workload, r.profile, r.arq, r.cc, r.payload_size);
        if self.flows.len() > 1 || self.topology != "line" {
            let _ = writeln!(out, "topology {}: {} flow(s) over {} link(s), seed {}", self.topology, self.flows.len(), self.links.len() / 2, self.seed);
        }
        if !self.options.contains_key("scenario") {
            let either = |k: &str| {
                let up = self.options.get(&format!("{k}-up")).map_or(o(k), String::as_str);
                let down = self.options.get(&format!("{k}-down")).map_or(o(k), String::as_str);
                if up == down { up.to_string() } else { format!("{up}/{down} (up/down)") }
            };
            let loss = if o("loss-model") == "bernoulli" {
                let up = self.options.get("loss-up").map_or(o("loss"), String::as_str);
                let down = self.options.get("loss-down").map_or(o("loss"), String::as_str);
                format!("{up}/{down} (up/down)")
            } else {
                o("loss-model").to_string()
            };
            let bandwidth = match (either("rate"), either("trace")) {
                (r, _) if !r.is_empty() => r,
                (_, t) if !t.is_empty() => format!("trace {t}"),
                _ => "unlimited".into(),
            };
            let _ = writeln!(
                out,
                "link: delay {} ± {}, loss {loss}, {bandwidth}, queue {}, dup {}, seed {}",
                either("delay"),
                either("jitter"),
                either("queue"),
                either("dup"),
                self.seed
            );
        }
        // With several flows the figures at the top are the first flow's (as in the JSON),
        // but the verdict is the run's: it counts every flow, and the first flow's lines
        // say whose they are. Reading "INCOMPLETE: 5,000,000 of 5,000,000 B" for a run
        // whose first flow was whole and four others stalled, or the first flow's time to
        // completion as the run's, misled.
        let many = self.flows.len() > 1;
        let whole = self.flows.iter().filter(|f| f.integrity_ok).count();
        let delivered: u64 = self.flows.iter().map(|f| f.bytes_delivered).sum();
        let expected: u64 = self.flows.iter().map(|f| f.bytes_expected).sum();
        let verdict = if r.integrity_ok {
            "integrity OK (every byte as sent)".to_string()
        } else if many && self.flows.iter().any(|f| f.bytes_expected == 0) {
            format!("INCOMPLETE: {whole} of {} flows delivered every byte ({} B delivered)", self.flows.len(), thousands(delivered))
        } else if many {
            format!("INCOMPLETE: {whole} of {} flows delivered every byte ({} of {} B)", self.flows.len(), thousands(delivered), thousands(expected))
        } else if r.bytes_expected == 0 {
            // A timed flow: how much it was to send is known only once it closes.
            format!("INCOMPLETE: {} B delivered", thousands(r.bytes_delivered))
        } else {
            format!("INCOMPLETE: {} of {} B", thousands(r.bytes_delivered), thousands(r.bytes_expected))
        };
        let closing = if r.close_ok { "closed gracefully" } else { "did not close gracefully" };
        let error = r.error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default();
        let _ = writeln!(out, "result: {} — {verdict}, {closing}{error}", r.status);
        let lead = if many { "  " } else { "" };
        if many {
            let _ = writeln!(out, "flow 1 (every flow's own figures are under flows):");
        }
        let _ = writeln!(out, "{lead}time to completion {:.3} s (virtual), goodput {}", r.duration_s, rate(r.goodput_bps));
        let _ = writeln!(
            out,
            "{lead}packets sent {}: data {} (retransmissions {}){}, acks {}, handshake {}; peer sent {}",
            thousands(r.packets_sent),
            thousands(r.data_packets_sent),
            thousands(r.retransmissions),
            if r.redundant_packets_sent > 0 { format!(", repairs {}", thousands(r.redundant_packets_sent)) } else { String::new() },
            thousands(r.acks_sent),
            thousands(r.handshake_packets_sent),
            thousands(r.peer_packets_sent)
        );
        if let (Some(p50), Some(p95), Some(p99)) = (r.message_latency_p50_ms, r.message_latency_p95_ms, r.message_latency_p99_ms) {
            let _ = writeln!(out, "{lead}messages delivered {}, latency p50 {p50:.2} ms, p95 {p95:.2} ms, p99 {p99:.2} ms", thousands(r.messages_delivered));
        }
        if let (Some(mean), Some(p95)) = (r.rtt_mean_ms, r.rtt_p95_ms) {
            let _ = writeln!(out, "{lead}RTT mean {mean:.2} ms, p95 {p95:.2} ms ({} samples)", thousands(r.rtt_samples as u64));
        }
        let acks = format!(
            "acks received {} (duplicate {}), congestion events {}, timeouts {}",
            thousands(r.acks_received),
            thousands(r.duplicate_acks_received),
            thousands(r.congestion_events),
            thousands(r.retransmission_timeouts)
        );
        // Link drops are every link's, so not under the first flow.
        if many {
            let _ = writeln!(out, "{lead}{acks}");
            let _ = writeln!(out, "link drops {} (every link); the run ended at {:.3} s (virtual)", thousands(self.link_drops), self.end_s);
        } else {
            let _ = writeln!(out, "{acks}; link drops {}", thousands(self.link_drops));
        }
        if many {
            let _ = writeln!(out, "flows:");
            for f in &self.flows {
                let _ = writeln!(
                    out,
                    "  {} {}→{} from {:.3} s, cc {}: {}{}, {} B in {:.3} s, goodput {}, retransmissions {}",
                    f.flow,
                    f.client_host,
                    f.server_host,
                    f.start_s,
                    f.cc,
                    f.status,
                    if f.integrity_ok { " (every byte as sent)" } else { " (INCOMPLETE)" },
                    thousands(f.bytes_delivered),
                    f.duration_s,
                    rate(f.goodput_bps),
                    thousands(f.retransmissions)
                );
            }
            if let Some(j) = self.jain_index {
                let _ = writeln!(out, "Jain's fairness index over goodputs: {j:.3}");
            }
        }
        let notable: Vec<&LinkReport> = self.links.iter().filter(|l| l.utilisation.is_some() || !l.events.is_empty() || l.counters.lost + l.counters.queue_dropped + l.counters.blackout_dropped > 0).collect();
        if !notable.is_empty() {
            let _ = writeln!(out, "links:");
            for l in notable {
                let utilisation = l.utilisation.map(|u| format!("utilisation {:.1} %, ", u * 100.0)).unwrap_or_default();
                let delay = match (l.queue_delay_p50_ms, l.queue_delay_p95_ms) {
                    (Some(p50), Some(p95)) => format!(", queueing delay p50 {p50:.2} ms, p95 {p95:.2} ms"),
                    _ => String::new(),
                };
                let events = if l.events.is_empty() { String::new() } else { format!("; events: {}", l.events.join("; ")) };
                let _ = writeln!(
                    out,
                    "  {} {} ({}→{}): {utilisation}drops {} (loss {}, queue {}, blackout {}){delay}{events}",
                    l.link,
                    l.direction,
                    l.from_host,
                    l.to_host,
                    thousands(l.counters.lost + l.counters.queue_dropped + l.counters.blackout_dropped),
                    thousands(l.counters.lost),
                    thousands(l.counters.queue_dropped),
                    thousands(l.counters.blackout_dropped)
                );
            }
        }
        out.pop();
        out
    }
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

    #[test]
    fn rtt_percentiles_are_nearest_rank_from_the_minimum() {
        let samples: Vec<u32> = (1..=200).rev().map(|ms| ms * 1000).collect();
        let p = rtt_percentiles(&samples);
        assert_eq!(p.len(), 101);
        assert_eq!((p[0], p[1], p[50], p[95], p[100]), (1.0, 2.0, 100.0, 190.0, 200.0));
        assert_eq!(rtt_percentiles(&[7_500]), vec![7.5; 101]);
        assert!(rtt_percentiles(&[]).is_empty());
    }

    #[test]
    fn jain_index_is_one_for_equal_shares() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0]), Some(1.0));
        assert_eq!(jain_index(&[1.0, 0.0]), Some(0.5));
        assert_eq!(jain_index(&[]), None);
        assert_eq!(jain_index(&[0.0, 0.0]), None);
    }

    fn keys(value: &serde_json::Value) -> Vec<String> {
        value.as_object().expect("an object").keys().cloned().collect()
    }

    #[test]
    fn the_schema_lists_exactly_the_serialized_fields_in_order() {
        let report = RunReport { flows: vec![FlowReport::default()], links: vec![LinkReport::default()], ..Default::default() };
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        let mut expected: Vec<&str> = FLOW_FIELDS.iter().map(|f| f.name).collect();
        expected.extend(RUN_FIELDS.iter().map(|f| f.name));
        let mut got = keys(&json);
        let mut want: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
        let sorted = |fields: &[Field]| {
            let mut names: Vec<String> = fields.iter().map(|f| f.name.to_string()).collect();
            names.sort();
            names
        };
        assert_eq!(keys(&json["flows"][0]), sorted(FLOW_FIELDS));
        let link: Vec<Field> = LINK_FIELDS.iter().chain(LINK_STATS_FIELDS).copied().collect();
        assert_eq!(keys(&json["links"][0]), sorted(&link));
        assert_eq!(schema()["link"].as_array().unwrap().len(), link.len());
        assert_eq!(keys(&json["link_up"]), sorted(LINK_STATS_FIELDS));
        assert_eq!(RunReport::from_json(&report.to_json()).unwrap(), report);
    }
}
