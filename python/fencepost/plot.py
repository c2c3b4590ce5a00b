"""Plots of sweeps and of single runs' event logs.

Every function returns a ``matplotlib.figure.Figure`` (shown inline by Jupyter)
with a title, axis labels with units and a legend; ``save`` writes it as PNG
and SVG. No pyplot state is used, so the functions work headless.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from matplotlib.figure import Figure

# How metrics are labelled and scaled on an axis.
METRIC_AXES = {
    "packets_sent": ("packets sent (count)", 1.0),
    "data_packets_sent": ("data packets sent (count)", 1.0),
    "retransmissions": ("retransmissions (count)", 1.0),
    "acks_sent": ("acks sent (count)", 1.0),
    "duration_s": ("time to completion (s)", 1.0),
    "goodput_bps": ("goodput (Mbit/s)", 1e-6),
    "rtt_mean_ms": ("mean RTT (ms)", 1.0),
    "rtt_p95_ms": ("95th-percentile RTT (ms)", 1.0),
    "utilisation": ("link utilisation (%)", 100.0),
    "link_drops": ("packets dropped by the links (count)", 1.0),
}

CONDITION_AXES = {
    "loss": "drop rate, each direction (%)",
    "loss-up": "drop rate, client to server (%)",
    "loss-down": "drop rate, server to client (%)",
    "dup": "duplication (%)",
    "delay": "one-way delay (ms)",
    "jitter": "jitter (ms)",
    "rate": "link rate (Mbit/s)",
    "bytes": "bytes transferred",
    "queue": "queue limit",
}

_UNIT_SCALE = {"%": 1.0, "ms": 1.0, "us": 1e-3, "s": 1e3, "mbit": 1.0, "kbit": 1e-3, "gbit": 1e3, "bit": 1e-6}


def _figure(size=(8, 4)):
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def _finish(ax, title: str, xlabel: str, ylabel: str, legend_at: str = "best", markerscale: float = 1.0) -> None:
    """Every plot gets a title, labelled axes, a light grid and a legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc=legend_at, fontsize="small", markerscale=markerscale)


def condition_value(text: Any) -> float:
    """A condition as a number for the x axis: ``"10%"`` → 10, ``"0.1"`` (loss) → 10 is
    not guessed; ``"20ms"`` → 20, ``"50mbit"`` → 50."""
    if isinstance(text, (int, float)):
        return float(text)
    m = re.fullmatch(r"\s*([-+0-9.eE]+)\s*([a-zA-Z%]*)\s*", str(text))
    if not m:
        raise ValueError(f"{text!r} is not a number with an optional unit")
    number, unit = float(m.group(1)), m.group(2).lower()
    return number * _UNIT_SCALE.get(unit, 1.0)


def metric_vs_condition(
    summary,
    x: str,
    metric: str,
    variant: Optional[str] = None,
    title: Optional[str] = None,
    ylabel: Optional[str] = None,
    xlabel: Optional[str] = None,
    reference: Optional[dict] = None,
) -> Figure:
    """Mean of ``metric`` against condition ``x``, one line per value of
    ``variant``, with 95 % confidence bars. ``summary`` is a sweep summary
    (DataFrame or list of dicts). ``reference`` adds dashed lines of published
    figures: ``{label: {x_value: y}}``."""
    rows = summary.to_dict("records") if hasattr(summary, "to_dict") else list(summary)
    label, scale = METRIC_AXES.get(metric, (metric.replace("_", " "), 1.0))
    fig, ax = _figure((7, 4.2))
    variants = sorted({r[variant] for r in rows}) if variant else [None]
    all_x = [condition_value(r[x]) for r in rows]
    # Nudge the variants apart a little so their confidence bars do not overlap.
    nudge = (max(all_x) - min(all_x) or 1.0) * 0.008
    for i, v in enumerate(variants):
        offset = (i - (len(variants) - 1) / 2) * nudge
        points = sorted(
            (condition_value(r[x]) + offset, r[f"{metric}_mean"] * scale, (r.get(f"{metric}_ci95") or 0.0) * scale)
            for r in rows
            if variant is None or r[variant] == v
        )
        xs, ys, errs = zip(*points)
        errs = [0.0 if e != e else e for e in errs]  # NaN (one trial) draws no bar
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=4, label=f"{variant} = {v}" if variant else metric)
    for ref_label, series in (reference or {}).items():
        pts = sorted((condition_value(k), val * scale) for k, val in series.items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="--", marker=".", alpha=0.7, label=ref_label)
    _finish(ax, title or f"{label} vs {CONDITION_AXES.get(x, x)}", xlabel or CONDITION_AXES.get(x, x), ylabel or label)
    return fig


def _events(events) -> Any:
    if isinstance(events, (str, Path)):
        from .events import read_events

        return read_events(events)
    return events


def _where(df, **equals):
    """Rows where every given column has the given value. ``flow`` is skipped for
    logs written before events named their flow (they have one flow)."""
    if "flow" in equals and "flow" not in df.columns:
        equals.pop("flow")
    mask = None
    for k, v in equals.items():
        m = df[k] == v
        mask = m if mask is None else (mask & m)
    return df[mask] if mask is not None else df


def time_sequence(events, side: str = "client", title: Optional[str] = None, start: float = 0.0, end: Optional[float] = None,
                  flow: int = 1) -> Figure:
    """Sequence number against time for one sender (``side`` of flow ``flow``): first
    transmissions, retransmissions, and the fence each ack reported (everything
    below the fence base held; the fence top is the highest packet held)."""
    df = _window(_events(events), start, end)
    sent = _where(df, side=side, name="transport:packet_sent", flow=flow)
    sent = sent[sent["packet_type"].isin(["data", "close"])]
    first = sent[~sent["is_retransmission"].astype(bool)]
    again = sent[sent["is_retransmission"].astype(bool)]
    acks = _where(df, side=side, name="fencepost:ack_received", flow=flow)
    fig, ax = _figure((8, 4.5))
    ax.scatter(first["time"], first["packet_number"], s=6, marker=".", color="tab:blue", label="first transmission")
    ax.scatter(again["time"], again["packet_number"], s=18, marker="x", color="tab:red", label="retransmission")
    if len(acks):
        # Acks can arrive out of order; the sender keeps the furthest fence it has seen.
        ax.step(acks["time"], acks["fence_base"].cummax(), where="post", color="tab:green", linewidth=1.2, label="fence base (all below held)")
        ax.step(acks["time"], acks["fence_top"].cummax(), where="post", color="tab:olive", linewidth=0.8, alpha=0.8, label="fence top (highest held)")
    _finish(ax, title or f"time-sequence, {side}", "time (s)", "sequence number (packets)", "upper left", 2)
    return fig


def _window(df, start: float, end: Optional[float]):
    if end is None:
        return df[df["time"] >= start]
    return df[(df["time"] >= start) & (df["time"] <= end)]


def congestion_window(events, side: str = "client", title: Optional[str] = None, packet_bytes: Optional[int] = None,
                      start: float = 0.0, end: Optional[float] = None, flow: int = 1) -> Figure:
    """Congestion window and slow-start threshold over time (in packets when
    ``packet_bytes`` is given, else in kilobytes)."""
    df = _window(_where(_events(events), side=side, name="recovery:metrics_updated", flow=flow), start, end)
    scale, unit = (1.0 / packet_bytes, "packets") if packet_bytes else (1e-3, "kB")
    fig, ax = _figure()
    ax.step(df["time"], df["congestion_window"] * scale, where="post", label="congestion window")
    if "ssthresh" in df and df["ssthresh"].notna().any():
        ax.step(df["time"], df["ssthresh"] * scale, where="post", linestyle="--", label="slow-start threshold")
    ax.step(df["time"], df["bytes_in_flight"] * scale, where="post", alpha=0.5, linewidth=0.8, label="in flight")
    _finish(ax, title or f"congestion window, {side}", "time (s)", f"window ({unit})", "upper right")
    return fig


def rtt_over_time(events, side: str = "client", title: Optional[str] = None, start: float = 0.0, end: Optional[float] = None,
                  flow: int = 1) -> Figure:
    """Latest RTT sample and smoothed RTT over time."""
    df = _window(_where(_events(events), side=side, name="recovery:metrics_updated", flow=flow), start, end)
    fig, ax = _figure()
    ax.plot(df["time"], df["latest_rtt"], ".", markersize=2, alpha=0.5, label="latest sample")
    ax.plot(df["time"], df["smoothed_rtt"], linewidth=1.2, label="smoothed (RFC 6298)")
    _finish(ax, title or f"RTT, {side}", "time (s)", "round-trip time (ms)", "upper right", 4)
    return fig


def sequence_received(events, side: str = "server", title: Optional[str] = None, start: float = 0.0, end: Optional[float] = None,
                      flow: int = 1) -> Figure:
    """When each sequence number arrived at the receiver (as in the congestion-control notebook)."""
    df = _window(_where(_events(events), side=side, name="transport:packet_received", flow=flow), start, end)
    df = df[df["packet_type"] == "data"]
    fig, ax = _figure()
    ax.scatter(df["time"], df["packet_number"], s=3, marker=".", label="data packet received")
    _finish(ax, title or f"sequence numbers received, {side}", "time (s)", "sequence number (packets)", "upper left", 4)
    return fig


def goodput_over_time(runs: Mapping[str, Any], interval_s: float, title: Optional[str] = None,
                      ends: Optional[Mapping[str, float]] = None) -> Figure:
    """Each flow's goodput over time, one panel per run. ``runs`` maps a panel title
    to a simulated result recorded with ``series`` = ``interval_s`` (its flows'
    ``goodput_series_bps``); ``ends`` may give a panel's last time (say, when its
    senders stopped writing: after that a repaired hole can release seconds of
    buffered data in one interval)."""
    fig = Figure(figsize=(8, 2.2 * len(runs) + 0.6), layout="constrained")
    axes = fig.subplots(len(runs), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (panel, result) in zip(axes, runs.items()):
        end = (ends or {}).get(panel)
        for flow in result.flows:
            series = list(flow.goodput_series_bps)
            if not series:
                raise ValueError(f"{panel}: flow {flow.flow} has no goodput series (run with series={interval_s:g}s)")
            # Value i covers the interval ending at (i + 1) * interval_s.
            points = [(interval_s * (i + 1), v * 1e-6) for i, v in enumerate(series) if end is None or interval_s * (i + 1) <= end + 1e-9]
            ax.step([t for t, _ in points], [v for _, v in points], where="pre", linewidth=1.1, label=f"flow {flow.flow}: {flow.cc}")
        ax.set_ylim(bottom=0)
        _finish(ax, panel, "time (s)" if ax is axes[-1] else "", "goodput (Mbit/s)", "upper right")
    if title:
        fig.suptitle(title)
    return fig


def latency_cdf(series: Mapping[str, Sequence[float]], title: Optional[str] = None, xlabel: str = "message latency (ms)",
                marks: Optional[Mapping[str, float]] = None) -> Figure:
    """Empirical CDFs of latencies, one line per ``label: values``; ``marks`` draws
    vertical reference lines (say, one RTT) labelled by their key."""
    fig, ax = _figure((7, 4.2))
    for label, values in series.items():
        xs = sorted(values)
        if not xs:
            raise ValueError(f"{label}: no latencies to plot")
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        ax.step(xs, ys, where="post", linewidth=1.3, label=f"{label} (n={len(xs):,})")
    for label, x in (marks or {}).items():
        ax.axvline(x, linestyle="--", color="grey", alpha=0.7)
        ax.text(x, 0.02, f" {label}", rotation=90, va="bottom", fontsize="small", color="grey")
    ax.set_ylim(0, 1.01)
    ax.set_xlim(left=0)
    _finish(ax, title or "Message latency CDF", xlabel, "share of messages", "lower right")
    return fig


def percentile_cdf(series: Mapping[str, Sequence[float]], title: Optional[str] = None, xlabel: str = "round-trip time (ms)",
                   marks: Optional[Mapping[str, float]] = None, ylabel: str = "share of RTT samples") -> Figure:
    """CDFs drawn from percentiles: ``label: [p0, p1, ..., p100]`` (as a run's
    ``rtt_percentiles_ms``: 101 values, the 0th the minimum) gives one line each;
    ``marks`` draws labelled vertical reference lines."""
    fig, ax = _figure((7, 4.2))
    for label, values in series.items():
        xs = list(values)
        if len(xs) < 2:
            raise ValueError(f"{label}: a CDF needs percentiles 0 to 100, got {len(xs)} value(s)")
        ys = [i / (len(xs) - 1) for i in range(len(xs))]
        ax.plot(xs, ys, linewidth=1.3, label=label)
    for label, x in (marks or {}).items():
        ax.axvline(x, linestyle="--", color="grey", alpha=0.7)
        ax.text(x, 0.02, f" {label}", rotation=90, va="bottom", fontsize="small", color="grey")
    ax.set_ylim(0, 1.01)
    _finish(ax, title or "RTT CDF", xlabel, ylabel, "lower right")
    return fig


def _covariance_ellipse(ax, xs: Sequence[float], ys: Sequence[float], color) -> None:
    """One standard deviation of the runs around their mean, as Pantheon draws it
    (the axes of the ellipse are the covariance's eigenvectors); x is on a log axis,
    so the spread is taken in log10(x)."""
    import numpy as np
    from matplotlib.patches import Ellipse

    lx = np.log10(np.asarray(xs, dtype=float))
    y = np.asarray(ys, dtype=float)
    cov = np.cov(np.vstack([lx, y]))
    if not np.all(np.isfinite(cov)):
        return
    values, vectors = np.linalg.eigh(cov)
    values = np.clip(values, 0.0, None)
    angle = float(np.degrees(np.arctan2(vectors[1, 1], vectors[0, 1])))
    # Drawn in (log10 x, y) space, then mapped onto the log axis point by point.
    ellipse = Ellipse((0, 0), 2 * float(np.sqrt(values[1])), 2 * float(np.sqrt(values[0])), angle=angle)
    path = ellipse.get_patch_transform().transform_path(ellipse.get_path())
    verts = path.vertices + np.array([lx.mean(), y.mean()])
    ax.plot(10 ** verts[:, 0], verts[:, 1], color=color, linewidth=0.9, alpha=0.6)


def throughput_delay(rows: Sequence[Mapping[str, Any]], variant: str, panel: Optional[str] = None, delay: str = "rtt_p95_ms",
                     throughput: str = "goodput_bps", title: Optional[str] = None, panels: Optional[Sequence[str]] = None) -> Figure:
    """Pantheon's throughput-delay plot from a sweep's runs: delay on a log axis that
    grows to the left (so up and to the right is better), throughput up, one colour
    per ``variant`` value, each completed run a small dot, the mean of its runs a
    large marker with its name and a one-standard-deviation ellipse. With ``panel``
    (a condition such as ``loss``), one panel per value (in ``panels``' order if
    given). Runs that did not complete are left out and counted in the legend."""
    panels = list(panels) if panels is not None else list(dict.fromkeys(str(r[panel]) for r in rows)) if panel else [None]
    variants = list(dict.fromkeys(str(r[variant]) for r in rows))
    fig = Figure(figsize=(5.2 * len(panels), 4.6), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    colors = [f"C{i % 10}" for i in range(len(variants))]
    metric_label, scale = METRIC_AXES.get(throughput, (throughput, 1.0))
    delay_label = METRIC_AXES.get(delay, (delay, 1.0))[0]
    for ax, value in zip(axes, panels):
        chosen = [r for r in rows if panel is None or str(r[panel]) == value]
        for name, color in zip(variants, colors):
            runs = [r for r in chosen if str(r[variant]) == name]
            done = [r for r in runs if r.get("integrity_ok") and r.get(delay) is not None and r.get(throughput) is not None]
            failed = len(runs) - len(done)
            label = name + (f" ({failed} of {len(runs)} failed)" if failed else "")
            if not done:
                ax.plot([], [], "o", color=color, label=label + " (no completed run)")
                continue
            xs = [float(r[delay]) for r in done]
            ys = [float(r[throughput]) * scale for r in done]
            ax.scatter(xs, ys, s=10, color=color, alpha=0.45)
            mx = 10 ** (sum(_log10(x) for x in xs) / len(xs))
            my = sum(ys) / len(ys)
            ax.scatter([mx], [my], s=70, color=color, edgecolor="black", linewidth=0.6, label=label, zorder=3)
            ax.annotate(name.split(":")[0], (mx, my), textcoords="offset points", xytext=(6, 5), fontsize="small", color=color)
            if len(done) >= 3:
                _covariance_ellipse(ax, xs, ys, color)
        scale_note = _delay_axis(ax, [float(r[delay]) for r in chosen if r.get("integrity_ok") and r.get(delay)])
        ax.set_ylim(bottom=0)
        _finish(ax, f"{panel} = {value}" if panel else (title or "throughput against delay"), f"{delay_label}{scale_note} (better →)",
                metric_label, "lower left")
    if title and panel:
        fig.suptitle(title)
    return fig


def _delay_axis(ax, delays: Sequence[float]) -> str:
    """Pantheon's delay axis: logarithmic and growing to the left. Over less than a
    factor of three a log axis has no readable ticks, so there it stays linear.
    Returns the axis label's note on the scale."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    positive = [d for d in delays if d > 0]
    log = bool(positive) and max(positive) / min(positive) >= 3
    if log:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.invert_xaxis()
    return ", log scale" if log else ""


def _log10(x: float) -> float:
    import math

    return math.log10(x) if x > 0 else float("nan")


def share_matrix(matrices: Mapping[str, Mapping[tuple, tuple]], order: Sequence[str], title: Optional[str] = None) -> Figure:
    """Fairness matrices side by side: cell (row, column) is the row controller's share
    of the two flows' goodput (colour, %) and the run's Jain index, from
    ``{panel: {(row, column): (share, jain)}}``; missing cells stay blank."""
    import numpy as np

    fig = Figure(figsize=(5.2 * len(matrices), 4.8), layout="constrained")
    axes = fig.subplots(1, len(matrices), squeeze=False)[0]
    image = None
    for ax, (panel, cells) in zip(axes, matrices.items()):
        grid = np.full((len(order), len(order)), np.nan)
        for (row, column), (share, jain) in cells.items():
            i, j = order.index(row), order.index(column)
            grid[i, j] = 100 * share
            colour = "white" if abs(share - 0.5) > 0.3 else "black"  # readable on the dark ends of the scale
            ax.text(j, i, f"{100 * share:.0f}%\nJ {jain:.2f}", ha="center", va="center", fontsize=7, color=colour)
        image = ax.imshow(grid, cmap="RdBu", vmin=0, vmax=100)
        ax.set_xticks(range(len(order)), list(order), rotation=35, ha="right", fontsize=8)
        ax.set_yticks(range(len(order)), list(order), fontsize=8)
        ax.set_xlabel("against (flow 2)")
        ax.set_ylabel("controller (flow 1)")
        ax.set_title(panel)
    if image is not None:
        fig.colorbar(image, ax=list(axes), label="row controller's share of goodput (%)", shrink=0.8)
    if title:
        fig.suptitle(title)
    return fig


def emulator_log(path: Union[str, Path], direction: str = "up", interval_s: float = 0.1, capacity_bps: Optional[float] = None,
                 title: Optional[str] = None) -> Figure:
    """The lab emulator's per-packet log (``fencepost lab run --log DIR``) for one
    direction, as mahimahi draws its logs: offered and delivered throughput per
    interval (with the link's capacity, when given), and the queueing delay of
    the packets leaving the bottleneck in each interval."""
    bins = int(round(interval_s * 1e6))
    entered: dict[int, int] = {}
    offered: dict[int, int] = {}
    delivered: dict[int, int] = {}
    delays: dict[int, list] = {}
    drops: dict[int, int] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 5 or parts[1] != direction:
                continue
            t, mark, size, pid = int(parts[0]), parts[2], int(parts[3]), int(parts[4])
            b = t // bins
            if mark == "+":
                entered[pid] = t
                offered[b] = offered.get(b, 0) + size
            elif mark == ">" and pid in entered:
                delays.setdefault(b, []).append((t - entered.pop(pid)) / 1000)
            elif mark == "-":
                delivered[b] = delivered.get(b, 0) + size
            elif mark in "dqb":
                offered[b] = offered.get(b, 0) + size
                drops[b] = drops.get(b, 0) + 1
    last = max([*offered, *delivered, 0])
    xs = [i * interval_s for i in range(last + 1)]
    fig = Figure(figsize=(8, 6), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    to_mbit = 8 / interval_s / 1e6
    top.plot(xs, [offered.get(i, 0) * to_mbit for i in range(last + 1)], label="offered", alpha=0.7)
    top.plot(xs, [delivered.get(i, 0) * to_mbit for i in range(last + 1)], label="delivered")
    if capacity_bps:
        top.axhline(capacity_bps / 1e6, linestyle="--", color="grey", label="capacity")
    top.set_ylabel("throughput (Mbit/s)")
    top.set_title(title or f"Emulated link, {direction} direction, per {interval_s * 1000:g} ms")
    top.legend(loc="best")
    top.grid(alpha=0.3)
    means = [(i * interval_s, sum(v) / len(v)) for i, v in sorted(delays.items()) if v]
    bottom.plot([m[0] for m in means], [m[1] for m in means], label="mean queueing delay")
    bottom.set_ylabel("queueing delay (ms)")
    bottom.set_xlabel("time since the emulator started (s)")
    bottom.grid(alpha=0.3)
    bottom.legend(loc="best")
    return fig


def save(fig: Figure, path: Union[str, Path], dpi: int = 120) -> list[Path]:
    """Writes ``path``.png and ``path``.svg; returns both paths."""
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    written = []
    for ext in (".png", ".svg"):
        target = base.with_suffix(ext)
        fig.savefig(target, dpi=dpi)
        written.append(target)
    return written


__all__ = [
    "condition_value",
    "congestion_window",
    "metric_vs_condition",
    "percentile_cdf",
    "rtt_over_time",
    "save",
    "sequence_received",
    "throughput_delay",
    "time_sequence",
]
