"""Bandwidth traces: the mahimahi traces shipped with the package (``traces/``,
origins in its README.md), name resolution for ``--trace``, and a summary of a
trace file for ``fencepost trace info``."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import OptionError

SHIPPED_DIR = Path(__file__).resolve().parent / "traces"
TRACE_OPTIONS = ("trace", "trace-up", "trace-down")
# mahimahi's PACKET_SIZE: each line of a trace is one chance to deliver this many bytes.
OPPORTUNITY_BYTES = 1504
# The same bound the native reader applies: a trace is read whole into memory.
MAX_TRACE_BYTES = 256 * 1024 * 1024


def shipped() -> dict[str, Path]:
    """The traces that ship with fencepost, by file name."""
    return {p.name: p for p in sorted(SHIPPED_DIR.iterdir()) if p.is_file() and p.suffix != ".md"}


def resolve(value: Any, option: str = "trace") -> Any:
    """A ``--trace`` value as a path: a file that exists is itself; a bare name
    (no directory part) that is not a file here names a shipped trace, and one
    that names none is refused with the list."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str) or os.path.exists(text) or os.sep in text or "/" in text:
        return value
    found = shipped().get(text)
    if found is None:
        raise OptionError(option, f"{text}: no such file here, and no shipped trace of that name; shipped: {', '.join(shipped())}")
    return str(found)


@dataclass
class TraceInfo:
    path: str
    opportunities: int
    period_ms: int
    mean_bps: float
    min_bps_100ms: float
    max_bps_100ms: float
    idle_ms: int

    def text(self) -> str:
        rate = lambda bps: f"{bps / 1e6:.3f} Mbit/s"  # noqa: E731
        return "\n".join([
            f"trace {self.path}",
            f"period {self.period_ms / 1000:.3f} s (then it repeats), {self.opportunities:,} delivery chances of {OPPORTUNITY_BYTES} B",
            f"mean capacity {rate(self.mean_bps)}; over 100 ms windows min {rate(self.min_bps_100ms)}, max {rate(self.max_bps_100ms)}",
            f"milliseconds with no chance to deliver: {self.idle_ms:,} of {self.period_ms:,}",
        ])


def info(value: Any) -> TraceInfo:
    """Reads a trace (a path, or a shipped trace's name) and summarises its capacity."""
    path = Path(resolve(value))
    try:
        size = path.stat().st_size
    except OSError as exc:
        names = ", ".join(shipped())
        raise OptionError("trace", f"{value}: {exc.strerror or exc}; a trace is a file path or a shipped trace: {names}") from None
    if size > MAX_TRACE_BYTES:
        raise OptionError("trace", f"{path}: {size:,} bytes is over the {MAX_TRACE_BYTES:,}-byte limit")
    times = []
    previous = 0
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            t = int(line)
        except ValueError:
            raise OptionError("trace", f"{path}, line {number}: {line[:40]!r} is not a whole number of milliseconds") from None
        if t < previous:
            raise OptionError("trace", f"{path}, line {number}: {t} ms comes before {previous} ms; times never decrease")
        times.append(t)
        previous = t
    if not times or times[-1] == 0:
        raise OptionError("trace", f"{path}: no opportunities, or the last time is 0 (a trace needs a non-zero period)")
    period = times[-1]
    bits = OPPORTUNITY_BYTES * 8
    windows = [0] * math.ceil(period / 100)
    busy = set()
    for t in times:
        # A chance at time t (1-based in the period) falls in the window holding t - 1.
        windows[min((t - 1) // 100 if t > 0 else 0, len(windows) - 1)] += 1
        busy.add(t % period)
    per_window = [c * bits / 0.1 for c in windows[:-1] or windows]
    return TraceInfo(
        path=str(path),
        opportunities=len(times),
        period_ms=period,
        mean_bps=len(times) * bits / (period / 1000),
        min_bps_100ms=min(per_window),
        max_bps_100ms=max(per_window),
        idle_ms=period - len(busy),
    )


__all__ = ["OPPORTUNITY_BYTES", "SHIPPED_DIR", "TraceInfo", "info", "resolve", "shipped"]
