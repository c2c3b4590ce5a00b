"""Reading per-packet event logs (qlog files, JSON-SEQ, written by
``sim.run(events=...)`` or ``fencepost sim --events FILE``) into pandas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Union

import pandas as pd

RECORD_SEPARATOR = "\x1e"


def read_records(path: Union[str, Path]) -> Iterator[dict]:
    """The file's JSON-SEQ records (RFC 7464) in order, the qlog header first."""
    text = Path(path).read_text(encoding="utf-8")
    for chunk in text.split(RECORD_SEPARATOR):
        if chunk.strip():
            yield json.loads(chunk)


def _flatten(record: dict) -> dict:
    """An event as one flat row: qlog's nested header and raw fields lifted to columns."""
    data = dict(record.get("data", {}))
    row = {"time": record["time"] / 1e3, "name": record["name"], "group_id": record.get("group_id")}
    header = data.pop("header", None) or {}
    raw = data.pop("raw", None) or {}
    if header:
        row["packet_type"] = header.get("fencepost_packet_type", header.get("packet_type"))
        row["packet_number"] = header.get("packet_number")
    if raw:
        row["length"] = raw.get("length")
    row.update(data)
    return row


def read_events(path: Union[str, Path]) -> pd.DataFrame:
    """One row per event: ``time`` (s), ``name`` (qlog's, e.g.
    ``transport:packet_sent``), ``side`` (client, server, link-up, link-down),
    ``flow``, ``packet_type`` (fencepost's: data, ack, handshake...),
    ``packet_number``, ``length`` and the event's own fields. The run's options
    (from the qlog header) are in ``df.attrs["options"]``."""
    records = read_records(path)
    header = next(records, None)
    if header is None or "qlog_version" not in header:
        raise ValueError(f"{path}: not a qlog file (its first record is not a qlog header)")
    df = pd.DataFrame([_flatten(r) for r in records])
    df.attrs["options"] = header.get("trace", {}).get("configuration", {}).get("fencepost_options", {})
    return df


__all__ = ["read_events", "read_records"]
