"""`--events` writes a qlog file: version 0.3, JSON-SEQ (RFC 7464), checked here
against the main schema's rules for the header and for every event it uses."""

from __future__ import annotations

import json
import re

from fencepost import sim
from fencepost.events import read_events

QUIC_PACKET_TYPES = {"initial", "handshake", "0RTT", "1RTT", "retry", "version_negotiation", "stateless_reset", "unknown"}
VANTAGE_POINTS = {"client", "server", "network", "unknown"}
EVENT_NAME = re.compile(r"^[a-z_]+:[a-z_]+$")


def _records(raw: bytes) -> list[dict]:
    # JSON-SEQ: every record is RS, one JSON text, LF.
    assert raw.startswith(b"\x1e"), "a JSON-SEQ file starts with the record separator"
    chunks = raw.split(b"\x1e")[1:]
    for chunk in chunks:
        assert chunk.endswith(b"\n") and b"\n" not in chunk[:-1], "one record per line, LF-terminated"
    return [json.loads(chunk) for chunk in chunks]


def _check_header(header: dict) -> None:
    assert header["qlog_version"] == "0.3"
    assert header["qlog_format"] == "JSON-SEQ"
    assert isinstance(header.get("title"), str)
    trace = header["trace"]
    assert trace["vantage_point"]["type"] in VANTAGE_POINTS
    common = trace["common_fields"]
    assert common["time_format"] == "relative" and isinstance(common["reference_time"], (int, float))
    assert "events" not in trace, "JSON-SEQ puts events in their own records"


def _check_event(event: dict, previous_time: float) -> float:
    assert set(event) <= {"time", "name", "data", "group_id"}, event
    assert isinstance(event["time"], (int, float)) and event["time"] >= previous_time, "times in ms, in order"
    assert EVENT_NAME.match(event["name"]), event["name"]
    data = event["data"]
    assert isinstance(data, dict)
    name = event["name"]
    if name in ("transport:packet_sent", "transport:packet_received"):
        assert data["header"]["packet_type"] in QUIC_PACKET_TYPES
        if "packet_number" in data["header"]:
            assert isinstance(data["header"]["packet_number"], int) and data["header"]["packet_number"] >= 0
        assert isinstance(data["raw"]["length"], int) and data["raw"]["length"] > 0
    elif name == "recovery:packet_lost":
        # One packet by its number, or (a timeout) `count` packets at once.
        assert isinstance(data["header"].get("packet_number"), int) or data["count"] >= 1, data
        assert isinstance(data["trigger"], str)
    elif name == "recovery:metrics_updated":
        for field in ("congestion_window", "bytes_in_flight", "smoothed_rtt", "latest_rtt"):
            if field in data:
                assert isinstance(data[field], (int, float)) and data[field] >= 0, (field, data)
    else:
        assert name.split(":")[0] in ("fencepost", "link"), f"{name}: not qlog's, so in fencepost's own categories"
    return event["time"]


def test_an_event_log_is_a_qlog_file(tmp_path):
    path = tmp_path / "run.sqlog"
    result = sim.run(events=str(path), bytes="200kB", loss="10%", delay="10ms", rate="10mbit", queue="20pkt", cc="cubic", seed=3)
    assert result.integrity_ok
    header, *events = _records(path.read_bytes())
    _check_header(header)
    assert header["trace"]["configuration"]["fencepost_options"]["loss"] == "10%"
    time = 0.0
    for event in events:
        time = _check_event(event, time)
    names = {e["name"] for e in events}
    assert {"transport:packet_sent", "transport:packet_received", "recovery:packet_lost", "recovery:metrics_updated", "link:packet_dropped"} <= names
    # Times are milliseconds: the last event is near the run's end.
    assert abs(events[-1]["time"] / 1e3 - result.duration_s) < 0.5, (events[-1]["time"], result.duration_s)
    sent = [e for e in events if e["name"] == "transport:packet_sent" and e["group_id"] == "flow1-client"]
    # Every packet the report counts is an event; the log goes on to the simulation's
    # end, past the report's snapshot at completion (a last ack of the close).
    assert result.packets_sent <= len(sent) <= result.packets_sent + 2, (len(sent), result.packets_sent)
    # The reader flattens it back for the plots.
    df = read_events(path)
    assert df.attrs["options"]["seed"] == "3"
    assert set(df[df["name"] == "transport:packet_sent"]["packet_type"]) >= {"handshake", "data"}


def test_losses_after_the_bottleneck_are_logged_in_time_order(tmp_path):
    # Such a loss is drawn as the packet leaves the bottleneck, which the link runs lazily
    # unless it records events: the log must still be in time order.
    path = tmp_path / "after.sqlog"
    result = sim.run(events=str(path), bytes="300kB", loss="5%", loss_position="after", delay="20ms", jitter="5ms", rate="5mbit", seed=4)
    assert result.integrity_ok
    _, *events = _records(path.read_bytes())
    time = 0.0
    for event in events:
        time = _check_event(event, time)
    assert any(e["name"] == "link:packet_dropped" and e["data"]["trigger"] == "random_loss" for e in events)
