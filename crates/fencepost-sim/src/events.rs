//! Per-packet event logs as qlog files (draft-ietf-quic-qlog-main-schema, version
//! 0.3, the `JSON-SEQ` serialisation of RFC 7464: every record starts with the
//! record separator 0x1E and ends with a line feed), so that qlog tools such as
//! qvis open them. The first record is qlog's header, one trace from the
//! simulator's vantage point (`network`), with the run's options; then one record
//! per event: `time` in milliseconds of virtual time, `name`, `group_id` (which
//! end or link: `flow1-client`, `flow1-server`, `path-up`...) and `data`. qlog's
//! events keep qlog's fields (`transport:packet_sent` has `header.packet_type`,
//! `header.packet_number`, `raw.length`; `recovery:metrics_updated` its RTTs in
//! ms); every event's `data` also says `flow` and `side`, and fencepost's own
//! events use the `fencepost:` and `link:` prefixes.

use crate::world::{Role, TraceSink};
use fencepost_link::{LinkEvent, LinkEventKind};
use fencepost_proto::TraceEvent;
use fencepost_spec::Direction;
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub struct JsonlWriter {
    out: BufWriter<File>,
    /// The first write error; later events are dropped and the error reported at the end.
    error: Option<std::io::Error>,
}

/// RFC 7464's record separator, which starts every JSON-SEQ record.
const RECORD_SEPARATOR: u8 = 0x1e;

impl JsonlWriter {
    /// Starts a qlog file: its header, holding `title` and the run's `options`.
    pub fn create(path: &Path, title: &str, options: Value) -> std::io::Result<JsonlWriter> {
        let mut writer = JsonlWriter { out: BufWriter::new(File::create(path)?), error: None };
        let header = json!({
            "qlog_version": "0.3",
            "qlog_format": "JSON-SEQ",
            "title": title,
            "description": "fencepost's deterministic simulator: every connection and link of one run",
            "trace": {
                "title": title,
                "vantage_point": {"type": "network", "name": "fencepost simulator"},
                "common_fields": {"time_format": "relative", "reference_time": 0.0, "protocol_type": ["FENCEPOST"]},
                "configuration": {"fencepost_options": options},
            },
        });
        writer.write(&header);
        Ok(writer)
    }

    fn write(&mut self, value: &Value) {
        if self.error.is_some() {
            return;
        }
        let result = self
            .out
            .write_all(&[RECORD_SEPARATOR])
            .and_then(|_| serde_json::to_writer(&mut self.out, value).map_err(std::io::Error::from))
            .and_then(|_| self.out.write_all(b"\n"));
        if let Err(e) = result {
            self.error = Some(e);
        }
    }

    /// Flushes; returns the first error met while writing, if any.
    pub fn finish(mut self) -> std::io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()
    }
}

fn side(role: Role) -> &'static str {
    match role {
        Role::Client => "client",
        Role::Server => "server",
    }
}

/// qlog's packet header: its packet types are QUIC's, so the handshake is an
/// `initial` and everything after it `1RTT`; fencepost's own type goes beside.
fn header(t: fencepost_proto::wire::PacketType, seq: Option<u64>) -> Value {
    use fencepost_proto::wire::PacketType;
    let qlog_type = match t {
        PacketType::Handshake => "initial",
        PacketType::StatelessReset => "stateless_reset",
        _ => "1RTT",
    };
    let mut header = json!({"packet_type": qlog_type, "fencepost_packet_type": format!("{t:?}").to_lowercase()});
    if let Some(seq) = seq {
        header["packet_number"] = json!(seq);
    }
    header
}

fn ms(time: fencepost_proto::Instant) -> f64 {
    time.total_micros() as f64 / 1e3
}

/// One trace event of flow `flow` as a qlog event record.
pub fn event_json(flow: usize, role: Role, event: &TraceEvent) -> Value {
    let (time, name, mut data) = event_fields(event);
    data["flow"] = json!(flow);
    data["side"] = json!(side(role));
    json!({"time": time, "name": name, "group_id": format!("flow{flow}-{}", side(role)), "data": data})
}

fn event_fields(event: &TraceEvent) -> (f64, &'static str, Value) {
    match event {
        TraceEvent::PacketSent { time, packet_type: t, seq, size, retransmission } => (
            ms(*time),
            "transport:packet_sent",
            json!({"header": header(*t, *seq), "raw": {"length": size}, "is_retransmission": retransmission}),
        ),
        TraceEvent::PacketReceived { time, packet_type: t, seq, size } => {
            (ms(*time), "transport:packet_received", json!({"header": header(*t, *seq), "raw": {"length": size}}))
        }
        TraceEvent::AckReceived { time, fence_base, fence_top, bitmap_received, newly_acked } => (
            ms(*time),
            "fencepost:ack_received",
            json!({"fence_base": fence_base, "fence_top": fence_top, "bitmap_received": bitmap_received, "newly_acked": newly_acked}),
        ),
        TraceEvent::PacketLost { time, seq, trigger, count } => (
            ms(*time),
            "recovery:packet_lost",
            // Without a number: `count` packets lost at once (a timeout declares the whole flight).
            json!({"header": header(fencepost_proto::wire::PacketType::Data, *seq), "trigger": trigger.name(), "count": count}),
        ),
        TraceEvent::MetricsUpdated { time, congestion_window, ssthresh, bytes_in_flight, smoothed_rtt, latest_rtt } => (
            ms(*time),
            "recovery:metrics_updated",
            json!({
                "congestion_window": congestion_window, "ssthresh": ssthresh, "bytes_in_flight": bytes_in_flight,
                "smoothed_rtt": smoothed_rtt.as_millis_f64(), "latest_rtt": latest_rtt.as_millis_f64(),
            }),
        ),
        TraceEvent::StreamDelivered { time, fence_base, bytes } => {
            (ms(*time), "fencepost:stream_delivered", json!({"fence_base": fence_base, "bytes": bytes}))
        }
    }
}

impl TraceSink for JsonlWriter {
    fn record(&mut self, flow: usize, role: Role, event: &TraceEvent) {
        let value = event_json(flow, role, event);
        self.write(&value);
    }

    fn record_link(&mut self, link: &str, direction: Direction, event: &LinkEvent) {
        let trigger = match event.kind {
            LinkEventKind::Lost => "random_loss",
            LinkEventKind::QueueDropped => "queue_overflow",
            LinkEventKind::BlackoutDropped => "blackout",
            LinkEventKind::Duplicated => "duplicated",
            _ => return,
        };
        let name = if event.kind == LinkEventKind::Duplicated { "link:packet_duplicated" } else { "link:packet_dropped" };
        let side = match direction {
            Direction::Up => "link-up",
            Direction::Down => "link-down",
        };
        let value = json!({
            "time": event.time as f64 / 1e3, "name": name, "group_id": format!("{link}-{}", &side[5..]),
            "data": {"side": side, "link": link, "trigger": trigger, "raw": {"length": event.size}},
        });
        self.write(&value);
    }

    fn finish(self: Box<Self>) -> std::io::Result<()> {
        JsonlWriter::finish(*self)
    }
}
