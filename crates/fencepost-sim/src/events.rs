//! Per-packet event logs as JSON lines, one object per event, flat, with field
//! names taken from qlog (draft-ietf-quic-qlog-main-schema) where qlog has one:
//! `transport:packet_sent`, `transport:packet_received`, `recovery:packet_lost`,
//! `recovery:metrics_updated`; fencepost's own events use the `fencepost:` and
//! `link:` prefixes. Times are seconds of virtual time. Connection events name
//! their flow (`flow`, from 1) and end (`side`: client or server); link events
//! their link (`link`) and direction (`side`: link-up or link-down).

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

impl JsonlWriter {
    pub fn create(path: &Path, header: Value) -> std::io::Result<JsonlWriter> {
        let mut writer = JsonlWriter { out: BufWriter::new(File::create(path)?), error: None };
        writer.write(&header);
        Ok(writer)
    }

    fn write(&mut self, value: &Value) {
        if self.error.is_some() {
            return;
        }
        let result = serde_json::to_writer(&mut self.out, value).map_err(std::io::Error::from).and_then(|_| self.out.write_all(b"\n"));
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

fn packet_type(t: fencepost_proto::wire::PacketType) -> String {
    format!("{t:?}").to_lowercase()
}

/// One trace event of flow `flow` as a flat JSON object.
pub fn event_json(flow: usize, role: Role, event: &TraceEvent) -> Value {
    let mut value = event_fields(role, event);
    value["flow"] = json!(flow);
    value
}

fn event_fields(role: Role, event: &TraceEvent) -> Value {
    match event {
        TraceEvent::PacketSent { time, packet_type: t, seq, size, retransmission } => json!({
            "time": time.as_secs_f64(), "side": side(role), "name": "transport:packet_sent",
            "packet_type": packet_type(*t), "packet_number": seq, "length": size, "is_retransmission": retransmission,
        }),
        TraceEvent::PacketReceived { time, packet_type: t, seq, size } => json!({
            "time": time.as_secs_f64(), "side": side(role), "name": "transport:packet_received",
            "packet_type": packet_type(*t), "packet_number": seq, "length": size,
        }),
        TraceEvent::AckReceived { time, fence_base, fence_top, bitmap_received, newly_acked } => json!({
            "time": time.as_secs_f64(), "side": side(role), "name": "fencepost:ack_received",
            "fence_base": fence_base, "fence_top": fence_top, "bitmap_received": bitmap_received, "newly_acked": newly_acked,
        }),
        TraceEvent::PacketLost { time, seq, trigger, count } => json!({
            "time": time.as_secs_f64(), "side": side(role), "name": "recovery:packet_lost",
            "packet_number": seq, "trigger": trigger.name(), "count": count,
        }),
        TraceEvent::MetricsUpdated { time, congestion_window, ssthresh, bytes_in_flight, smoothed_rtt, latest_rtt } => json!({
            "time": time.as_secs_f64(), "side": side(role), "name": "recovery:metrics_updated",
            "congestion_window": congestion_window, "ssthresh": ssthresh, "bytes_in_flight": bytes_in_flight,
            "smoothed_rtt": smoothed_rtt.as_millis_f64(), "latest_rtt": latest_rtt.as_millis_f64(),
        }),
        TraceEvent::StreamDelivered { time, fence_base, bytes } => json!({
            "time": time.as_secs_f64(), "side": side(role), "name": "fencepost:stream_delivered",
            "fence_base": fence_base, "bytes": bytes,
        }),
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
            "time": event.time as f64 / 1e6, "side": side, "link": link, "name": name, "trigger": trigger, "length": event.size,
        });
        self.write(&value);
    }

    fn finish(self: Box<Self>) -> std::io::Result<()> {
        JsonlWriter::finish(*self)
    }
}
