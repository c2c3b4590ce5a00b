"""Simulated runs from Python: ``fencepost.sim.run(loss="30%", delay="10ms")``.

Options are the ``fencepost sim`` options with dashes as underscores; values may
be strings in the CLI's notation (``"10%"``, ``"50mbit"``, ``"64kB"``) or numbers,
which are read as fractions (loss, dup), seconds (durations), bits per second
(rate) and bytes (bytes, queue).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Optional

from . import _core
from ._errors import OptionError, option_error_from_native

_DURATIONS = {"delay", "jitter", "timeout", "idle-timeout"}
_PROBABILITIES = {"loss", "loss-up", "loss-down", "dup"}


@dataclass(frozen=True)
class LinkStats:
    """What one direction of the link did with the packets offered to it."""

    offered: int
    lost: int
    queue_dropped: int
    duplicated: int
    delivered: int
    bytes_delivered: int


@dataclass(frozen=True)
class SimResult:
    """One simulated run. The sending side is the client (the bulk sender, or the
    echo client whose packets the seed article counted); counters are taken when
    the workload completed."""

    status: str
    error: Optional[str]
    integrity_ok: bool
    close_ok: bool
    workload: str
    profile: str
    arq: str
    cc: str
    seed: int
    bytes_expected: int
    bytes_delivered: int
    sha256: str
    payload_size: int
    duration_s: float
    goodput_bps: float
    packets_sent: int
    data_packets_sent: int
    retransmissions: int
    acks_sent: int
    keepalives_sent: int
    handshake_packets_sent: int
    acks_received: int
    duplicate_acks_received: int
    packets_presumed_lost: int
    spurious_retransmissions: int
    congestion_events: int
    retransmission_timeouts: int
    peer_packets_sent: int
    peer_data_packets_sent: int
    peer_acks_sent: int
    rtt_samples: int
    rtt_mean_ms: Optional[float]
    rtt_p95_ms: Optional[float]
    link_drops: int
    link_up: LinkStats
    link_down: LinkStats
    end_s: float
    wrong_bytes: int = 0
    timeout_silence_s: Optional[float] = None
    options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str) -> "SimResult":
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        values["link_up"] = LinkStats(**raw["link_up"])
        values["link_down"] = LinkStats(**raw["link_down"])
        return cls(**values)

    def as_dict(self) -> dict:
        """A flat dict of the scalar fields (link stats prefixed ``link_up_``/``link_down_``)."""
        out: dict = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, LinkStats):
                for sub in fields(value):
                    out[f"{f.name}_{sub.name}"] = getattr(value, sub.name)
            elif f.name != "options":
                out[f.name] = value
        return out


def _option_value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if key in _DURATIONS:
            return f"{value}s"
        if key == "rate":
            return f"{value}bit"
        return repr(value) if isinstance(value, float) else str(value)
    return str(value)


def normalize_options(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(option, value) pairs in the CLI's notation; ``None`` values are left out."""
    pairs = []
    for key, value in options.items():
        if value is None:
            continue
        name = key.replace("_", "-")
        pairs.append((name, _option_value(name, value)))
    return pairs


def check(**options: Any) -> dict[str, str]:
    """Validates options without running; returns them with defaults filled in."""
    try:
        return dict(_core.check_options(normalize_options(options)))
    except ValueError as exc:
        raise option_error_from_native(exc) from None


def run(events: Optional[str] = None, **options: Any) -> SimResult:
    """Runs one simulated scenario and returns its result. With ``events``, the
    per-packet event log is written to that path as JSON lines (see
    ``fencepost.events``).

    >>> r = run(bytes="200kB", loss="20%", delay="5ms", seed=1)
    >>> r.integrity_ok
    True
    """
    try:
        text = _core.simulate(normalize_options(options), None if events is None else str(events))
    except ValueError as exc:
        raise option_error_from_native(exc) from None
    return SimResult.from_json(text)


__all__ = ["LinkStats", "OptionError", "SimResult", "check", "normalize_options", "run"]
