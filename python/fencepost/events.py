"""Reading per-packet event logs (JSON lines written by ``sim.run(events=...)``
or ``fencepost sim --events FILE``) into pandas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Union

import pandas as pd


def read_events(path: Union[str, Path]) -> pd.DataFrame:
    """One row per event: ``time`` (s), ``side`` (client, server, link-up,
    link-down), ``name`` (qlog-style, e.g. ``transport:packet_sent``) and the
    event's own fields. The header line (``fencepost:run_started``) is kept in
    ``df.attrs["options"]``."""
    rows = []
    options = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if record.get("name") == "fencepost:run_started":
                options = record.get("options", {})
                continue
            rows.append(record)
    df = pd.DataFrame(rows)
    df.attrs["options"] = options
    return df


__all__ = ["read_events"]
