"""``fencepost demo``: the seed documents' experiments, in simulation.

a. The sliding fence (shared/seeds/sliding-fence.txt, part 3): the echo
   benchmark at 10-60 % drop both ways, window vs fence, 5 trials, in the
   ``seed`` profile beside the article's figures, then in the ``default`` profile.
b. TCP THERMAL (shared/seeds/tcp-thermal.txt): bulk transfer over 10 % loss and
   10 ± 10 ms delay on a fixed-rate link, with and without congestion control.
c. The congestion-control notebook (shared/seeds/congestion-control-notebook.txt):
   Tahoe on the 2.64 Mbit/s Poisson trace, 88 ms delay, 26400-byte droptail queue.
d. Every controller's goodput against random loss, 100 Mbit/s, 40 ms RTT.
e. The notebook's competing senders (two and three flows) on its 2.64 Mbit/s link,
   with each flow's goodput over time.
f. A fairness matrix: each controller against each on one 100 Mbit/s bottleneck,
   at 0 % and 5 % random loss.
g. The Mathis check: Reno and Tahoe against (MSS/RTT)·sqrt(3/(2p)).
h. Redundancy (shared/seeds/packet-duplication.txt): the duplication paper's
   curves, message latency with and without duplication and FEC, and what
   adaptive FEC spends against the loss it meets (``demo_redundancy``).

Each table is printed as soon as its runs finish; everything goes into a
report folder with ``report.html``, the plots (PNG and SVG) and the sweeps' data.
"""

from __future__ import annotations

import html
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from . import _core, _traces, plot
from . import sim as simulation
from .sweep import Experiment, build_id, run_sweep

# The article's table "Mean packets sent (n=5)": drop % -> (window packets, fence packets, window TTC s, fence TTC s).
ARTICLE = {
    10: (3693, 3289, 10.6, 10.7),
    20: (3884, 3691, 10.6, 10.6),
    30: (4543, 4105, 10.7, 10.6),
    40: (5972, 4859, 10.7, 10.7),
    50: (7735, 5981, 10.6, 10.6),
    60: (10561, 7421, 10.6, 10.7),
}

# The notebook's printed results on the 2.64 Mbit/s link (88 ms, 26400-byte queue).
NOTEBOOK = {
    "Tahoe(ssthresh 10, cwnd 1), 240 s": {"acks": 356153, "dup": 3932, "dup_pct": 1.104020, "throughput": 116953.333333, "rtt": 211.311396},
    "FixedWindow(1000), 60 s": {"acks": 23377, "dup": 22419, "dup_pct": 95.901955, "throughput": 1277.333333, "rtt": 973.516416},
}

DROP_RATES = [10, 20, 30, 40, 50, 60]
THERMAL_RATE_BPS = 20_000_000


def _fmt(v: float, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:,.{digits}f}"


def _pm(mean: float, ci: float, digits: int = 0) -> str:
    if ci is None or (isinstance(ci, float) and math.isnan(ci)):
        return _fmt(mean, digits)
    return f"{_fmt(mean, digits)} ± {_fmt(ci, digits)}"


class Table:
    """A small table printed as text and rendered into the HTML report."""

    def __init__(self, title: str, columns: Sequence[str], note: str = "") -> None:
        self.title = title
        self.columns = list(columns)
        self.rows: list[list[str]] = []
        self.note = note

    def add(self, *cells: str) -> None:
        self.rows.append([str(c) for c in cells])

    def text(self) -> str:
        widths = [max(len(c), *(len(r[i]) for r in self.rows)) for i, c in enumerate(self.columns)]
        line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        out = [self.title, line(self.columns), "  ".join("-" * w for w in widths)]
        out += [line(r) for r in self.rows]
        if self.note:
            out.append(self.note)
        return "\n".join(out)

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in self.rows)
        note = f"<p class='note'>{html.escape(self.note)}</p>" if self.note else ""
        return f"<h3>{html.escape(self.title)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}"


class Report:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.sections: list[tuple[str, list[str]]] = []
        self.plots: list[Path] = []
        # One sentence per experiment, computed from its data; shown first.
        self.findings: list[tuple[str, str]] = []
        # Each experiment's data folder (runs, summary, experiment file), for the links.
        self.data: dict[str, Path] = {}
        self.seeds: dict[str, str] = {}

    def finding(self, experiment: str, sentence: str) -> None:
        self.findings.append((experiment, sentence))

    def experiment_data(self, name: str, folder: Path, seeds: str) -> None:
        self.data[name] = folder
        self.seeds[name] = seeds

    def section(self, title: str) -> list[str]:
        parts: list[str] = []
        self.sections.append((title, parts))
        return parts

    def figure(self, parts: list[str], fig, name: str, caption: str) -> None:
        files = plot.save(fig, self.out / "plots" / name)
        self.plots.extend(f for f in files if f.suffix == ".png")
        png = files[0].relative_to(self.out)
        svg = files[1].relative_to(self.out)
        parts.append(
            f"<figure><img src='{png}' alt='{html.escape(caption)}'><figcaption>{html.escape(caption)} "
            f"(<a href='{svg}'>SVG</a>)</figcaption></figure>"
        )

    def _provenance(self, elapsed: float) -> str:
        rows = [
            ("fencepost", f"{_package_version()} (native build {build_id()})"),
            ("source", _source_commit()),
            ("command", _command_line()),
            ("Python", f"{platform.python_version()} on {platform.platform()}"),
            ("written", f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, after {elapsed:.0f} s of wall time"),
        ]
        head = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
        data = "".join(
            f"<tr><td>{html.escape(name)}</td><td>{html.escape(self.seeds.get(name, ''))}</td><td>"
            + " ".join(f"<a href='{html.escape(str((folder / f).relative_to(self.out)))}'>{f}</a>"
                       for f in ("summary.csv", "runs.csv", "experiment.toml") if (folder / f).exists())
            + "</td></tr>"
            for name, folder in self.data.items()
        )
        return (f"<h2>Provenance</h2><table>{head}</table>"
                f"<h3>Data</h3><table><thead><tr><th>experiment</th><th>seeds</th><th>files</th></tr></thead><tbody>{data}</tbody></table>")

    def write(self, elapsed: float) -> Path:
        findings = "".join(f"<li><b>{html.escape(e)}</b>: {html.escape(t)}</li>" for e, t in self.findings)
        findings = f"<h2>Findings</h2><ul>{findings}</ul>" if findings else ""
        body = findings + "".join(f"<h2>{html.escape(t)}</h2>" + "".join(parts) for t, parts in self.sections)
        body += self._provenance(elapsed)
        page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fencepost demo report</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1000px; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; font-variant-numeric: tabular-nums; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
th {{ background: #f3f3f3; }}
figure {{ margin: 1em 0; }} img {{ max-width: 100%; border: 1px solid #eee; }}
.note {{ color: #555; font-size: 0.9em; }}
</style></head><body>
<h1>fencepost demo report</h1>
<p>The seed documents' experiments, run in fencepost's deterministic simulator (virtual time; same seeds give the same numbers).
Generated by <code>fencepost demo</code> in {elapsed:.0f} s of wall time. Means over trials with 95 % confidence intervals (Student t).</p>
{body}
</body></html>
"""
        path = self.out / "report.html"
        path.write_text(page, encoding="utf-8")
        return path


def _say(text: str = "") -> None:
    print(text, flush=True)


def _by(summary: list[dict], **match) -> dict:
    for row in summary:
        if all(str(row[k]) == str(v) for k, v in match.items()):
            return row
    raise KeyError(match)


def _sweep(report: Report, experiment: Experiment, workers: Optional[int], progress: bool, label: str):
    """Runs one experiment into the report's data folder (reusing finished runs); Ctrl-C stops the demo."""
    folder = report.out / "data" / experiment.name
    outcome = run_sweep(experiment, out=folder, workers=workers, progress=progress, label=label)
    if outcome.interrupted:
        raise KeyboardInterrupt
    report.experiment_data(experiment.name, folder, f"{experiment.seed}-{experiment.seed + experiment.trials - 1} (one per trial)")
    return outcome


def _command_line() -> str:
    argv = list(sys.argv)
    if not argv or argv[0] in ("", "-c", "-m"):
        return "run_demo() from Python"
    argv[0] = Path(argv[0]).name  # `fencepost`, not the virtual environment's path
    return " ".join(shlex.quote(a) for a in argv)


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("fencepost")
    except Exception:  # noqa: BLE001 - a source tree without metadata still reports
        return "unknown version"


def _source_commit() -> str:
    """The git commit of the source tree the package runs from, when it runs from one."""
    here = Path(__file__).resolve().parent
    try:
        done = subprocess.run(["git", "-C", str(here), "describe", "--always", "--dirty", "--abbrev=12"],
                              capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return "not a git checkout (an installed package)"
    return f"git {done.stdout.strip()}" if done.returncode == 0 and done.stdout.strip() else "not a git checkout (an installed package)"


def sliding_fence(report: Report, profile: str, trials: int, workers: Optional[int], progress: bool) -> dict:
    experiment = Experiment(
        name=f"sliding-fence-{profile}",
        description="The seed article's echo benchmark: 1000 messages of 200-400 B, 2-20 ms apart, echoed back.",
        grid={"loss": [f"{p}%" for p in DROP_RATES], "arq": ["window", "fence"]},
        # Loss recovery alone: the default profile's adaptive FEC would send this
        # application-limited echo repairs (part h measures FEC).
        fixed={"workload": "echo", "profile": profile, "delay": "100us", **({} if profile == "seed" else {"redundancy": "none"})},
        trials=trials,
        seed=1,
    )
    outcome = _sweep(report, experiment, workers, progress, f"runs ({profile} profile)")
    summary = outcome.summary
    seed_profile = profile == "seed"
    columns = ["drop rate", "window packets", "fence packets", "fence saves", "window TTC (s)", "fence TTC (s)"]
    if seed_profile:
        columns += ["article window", "article fence", "article saves", "article TTC w/f (s)"]
    else:
        columns += ["fence data pkts", "bound 1.1 x need / (1 - p)"]
    table = Table(
        f"(a) sliding window vs sliding fence, {profile} profile: mean packets sent by the client and time to completion (n={trials})",
        columns,
        note=(
            "Packets sent counts every datagram the echo client sent (data, retransmissions, acks), as the article counted; "
            "links drop the given fraction of packets in each direction. ± is the 95 % confidence half-width."
            + (
                ""
                if seed_profile
                else " Redundancy is off (--redundancy none) so that the table compares loss recovery alone: the default "
                "profile's adaptive FEC would add repairs to this application-limited echo (part h measures FEC). "
                "In this profile acks follow the echoed data; at low loss the fence client's acks can outnumber "
                "the data it saves, which is why the totals are close there. The bound column checks data packets "
                "against 1.1 x the packets needed (first transmissions) / (1 - drop rate)."
            )
        ),
    )
    for p in DROP_RATES:
        w = _by(summary, loss=f"{p}%", arq="window")
        f = _by(summary, loss=f"{p}%", arq="fence")
        saves = 1 - f["packets_sent_mean"] / w["packets_sent_mean"]
        row = [
            f"{p}%",
            _pm(w["packets_sent_mean"], w["packets_sent_ci95"]),
            _pm(f["packets_sent_mean"], f["packets_sent_ci95"]),
            f"{saves:.0%}",
            _pm(w["duration_s_mean"], w["duration_s_ci95"], 2),
            _pm(f["duration_s_mean"], f["duration_s_ci95"], 2),
        ]
        if seed_profile:
            aw, af, atw, atf = ARTICLE[p]
            row += [f"{aw:,}", f"{af:,}", f"{1 - af / aw:.0%}", f"{atw} / {atf}"]
        else:
            needed = f["data_packets_sent_mean"] - f["retransmissions_mean"]
            row += [_fmt(f["data_packets_sent_mean"]), _fmt(1.1 * needed / (1 - p / 100))]
        table.add(*row)
    _say()
    _say(table.text())
    worst = DROP_RATES[-1]
    w, f = _by(summary, loss=f"{worst}%", arq="window"), _by(summary, loss=f"{worst}%", arq="fence")
    sentence = f"at {worst} % drop the sliding fence sent {1 - f['packets_sent_mean'] / w['packets_sent_mean']:.0%} fewer packets than the sliding window"
    if seed_profile:
        aw, af = ARTICLE[worst][0], ARTICLE[worst][1]
        sentence += f" (the article measured {1 - af / aw:.0%})"
    else:
        sentence += f" and finished in {f['duration_s_mean']:.2f} s against {w['duration_s_mean']:.2f} s"
    report.finding(f"(a) sliding fence, {profile} profile", sentence + ".")
    parts = report.section(f"(a) The sliding fence, {profile} profile")
    parts.append(table.html())
    reference = None
    if seed_profile:
        reference = {
            "article: window": {f"{p}%": ARTICLE[p][0] for p in DROP_RATES},
            "article: fence": {f"{p}%": ARTICLE[p][1] for p in DROP_RATES},
        }
    fig = plot.metric_vs_condition(summary, "loss", "packets_sent", variant="arq", reference=reference,
                                   title=f"Packets sent by the echo client vs drop rate ({profile} profile, n={trials})")
    report.figure(parts, fig, f"packets-vs-drop-{profile}", f"Packets sent vs drop rate, window vs fence, {profile} profile")
    fig = plot.metric_vs_condition(summary, "loss", "duration_s", variant="arq",
                                   title=f"Time to completion vs drop rate ({profile} profile, n={trials})")
    report.figure(parts, fig, f"ttc-vs-drop-{profile}", f"Time to completion vs drop rate, {profile} profile")
    return {"summary": summary}


def _traced_run(report: Report, name: str, **options) -> Path:
    path = report.out / "data" / "events" / f"{name}.sqlog"
    path.parent.mkdir(parents=True, exist_ok=True)
    simulation.run(events=str(path), **options)
    return path


THERMAL_CC = {
    "none:pacing=on": "none, paced",
    "none:pacing=off": "none, maximum speed",
    "cubic:pacing=on": "CUBIC, paced",
    "cubic:pacing=off": "CUBIC, maximum speed",
    "tahoe": "Tahoe (paced)",
    "tolerant": "tolerant (the default)",
}


def thermal(report: Report, trials: int, workers: Optional[int], progress: bool) -> dict:
    link = {"rate": f"{THERMAL_RATE_BPS // 1_000_000}mbit", "delay": "10ms", "jitter": "10ms", "loss": "10%", "queue": "100pkt"}
    experiment = Experiment(
        name="thermal",
        description="Bulk transfer for 20 s over 10 % loss and 10 +/- 10 ms delay on a 20 Mbit/s link, with and without congestion control.",
        grid={"cc": list(THERMAL_CC)},
        fixed={"workload": "bulk", "time": "20s", **link},
        trials=trials,
        seed=1,
    )
    outcome = _sweep(report, experiment, workers, progress, "runs (THERMAL)")
    table = Table(
        f"(b) TCP THERMAL: link utilisation with and without congestion control (n={trials})",
        ["sender", "cc", "utilisation", "goodput (Mbit/s)", "retransmissions", "mean RTT (ms)"],
        note=(
            "20 Mbit/s link, 10 % random loss each way, one-way delay 10 ± 10 ms (uniform, may reorder), 100-packet queue; "
            "the sender writes for 20 s. Utilisation = payload goodput / link rate. 'none' is no congestion control: a fixed "
            "64-packet window, about one bandwidth-delay product. 'Paced' spreads each window over the RTT; 'maximum speed' "
            "sends whatever the window allows at once, as iperf at full speed did in the article. "
            "The article: THERMAL kept about 60 % of its Wi-Fi link, CUBIC under 10 %."
        ),
    )
    rows = {}
    for cc, label in THERMAL_CC.items():
        r = _by(outcome.summary, cc=cc)
        rows[cc] = r
        utilisation = f"{r['goodput_bps_mean'] / THERMAL_RATE_BPS:.1%} ± {r['goodput_bps_ci95'] / THERMAL_RATE_BPS:.1%}"
        if r.get("failed"):
            utilisation += f" ({r['failed']} failed)"
        table.add(label, cc, utilisation, _pm(r["goodput_bps_mean"] / 1e6, r["goodput_bps_ci95"] / 1e6, 2),
                  _fmt(r["retransmissions_mean"]), _fmt(r["rtt_mean_ms_mean"], 1))
    ratio = rows["none:pacing=on"]["goodput_bps_mean"] / rows["cubic:pacing=on"]["goodput_bps_mean"]
    ratio_tahoe = rows["none:pacing=on"]["goodput_bps_mean"] / rows["tahoe"]["goodput_bps_mean"]
    unpaced = rows["none:pacing=off"]["goodput_bps_mean"] / rows["cubic:pacing=off"]["goodput_bps_mean"]
    table.note += (f" Here no congestion control uses {ratio:.1f}x the link that CUBIC does paced, {unpaced:.1f}x at maximum "
                   f"speed, and {ratio_tahoe:.1f}x what Tahoe does.")
    _say()
    _say(table.text())
    report.finding("(b) THERMAL", f"on a 20 Mbit/s link with 10 % loss, no congestion control delivered {ratio:.1f} times CUBIC's goodput "
                   f"({rows['none:pacing=on']['goodput_bps_mean'] / THERMAL_RATE_BPS:.0%} of the link against "
                   f"{rows['cubic:pacing=on']['goodput_bps_mean'] / THERMAL_RATE_BPS:.0%}; the article: about 60 % against under 10 %).")
    parts = report.section("(b) TCP THERMAL: no congestion control on a lossy link")
    parts.append(table.html())
    # Like the article's trace picture: a short stretch, so single packets show.
    windows = {"none:pacing=off": (1.0, 1.2), "cubic:pacing=off": (0.0, 3.0)}
    for cc, (start, end) in windows.items():
        name = cc.split(":")[0]
        events = _traced_run(report, f"thermal-{name}", workload="bulk", time="3s", cc=cc, seed=1, **link)
        fig = plot.time_sequence(events, start=start, end=end, title=f"THERMAL link, {THERMAL_CC[cc]}: time-sequence, {start:g}-{end:g} s (seed 1)")
        report.figure(parts, fig, f"thermal-time-sequence-{name}", f"Time-sequence plot, {THERMAL_CC[cc]}, {start:g}-{end:g} s: transmissions, retransmissions and the fence")
    return {"ratio": ratio, "summary": outcome.summary}


NOTEBOOK_TAHOE = "tahoe:iw=1,ssthresh=10,pacing=off"
# The notebook's 80-byte datagrams, in plaintext (version 1): 14 bytes of header, 66 of payload.
NOTEBOOK_PAYLOAD = "66"


def _notebook_link(report: Report) -> tuple[dict, str]:
    """The notebook's low-bandwidth link: its Poisson trace, shipped with fencepost."""
    trace = _traces.shipped()["2.64mbps-poisson.trace"]
    # Without FEC, as the notebook ran: packets keep the payload that fills them (1,438 bytes protected).
    return {"trace": str(trace), "delay": "88ms", "queue": "26400", "redundancy": "none"}, f"trace {trace.name} (shipped with fencepost)"


def notebook(report: Report, trials: int, workers: Optional[int], progress: bool) -> dict:
    link, trace_note = _notebook_link(report)
    strategies = {
        NOTEBOOK_TAHOE: "Tahoe(ssthresh 10, cwnd 1), 240 s",
        "tahoe:iw=1,ssthresh=10,pacing=on": None,
        "none:window=1000,pacing=off": "FixedWindow(1000), 60 s",
    }
    experiment = Experiment(
        name="notebook",
        description="Tahoe and a fixed window on the 2.64 Mbit/s Poisson trace, 88 ms delay, 26400-byte droptail queue.",
        grid={"cc": list(strategies)},
        fixed={"workload": "bulk", "time": "60s", **link},
        trials=trials,
        seed=1,
    )
    outcome = _sweep(report, experiment, workers, progress, "runs (notebook)")
    # As the notebook ran it: 80-byte datagrams (66 bytes of payload in plaintext), Tahoe for 240 s.
    as_run = {}
    for cc, seconds in ((NOTEBOOK_TAHOE, 240), ("none:window=1000,pacing=off", 60)):
        name = "notebook-80-byte-" + cc.split(":")[0]
        as_run[cc] = _sweep(report, Experiment(
            name=name, description=f"{cc} on the notebook's link with its 80-byte datagrams, {seconds} s.",
            grid={"cc": [cc]}, fixed={"workload": "bulk", "time": f"{seconds}s", "packet-size": NOTEBOOK_PAYLOAD, "insecure": "true", **link},
            trials=trials, seed=1), workers, progress, f"runs (notebook, 80-byte, {cc.split(':')[0]})").summary[0]
    table = Table(
        f"(c) Congestion-control notebook: one sender for 60 s, {trace_note}, 88 ms, 26400-byte queue (n={trials})",
        ["strategy", "total acks", "duplicate acks", "% duplicate", "throughput (bytes/s)", "average RTT (ms)"],
        note=(
            "'notebook' rows are the notebook's printed results (its packets were 80-byte JSON datagrams, one ack each). "
            "'80-byte' rows run fencepost as the notebook ran: 80-byte plaintext datagrams (66 bytes of payload), Tahoe for "
            "240 s, the fixed window for 60 s; the other rows send 1472-byte datagrams for 60 s. fencepost acks every other "
            "packet, so ack counts differ in kind. "
            "Our throughput is payload bytes delivered per second while the sender wrote. The trace link has no random "
            "loss, so the trials differ only in their data and agree (± 0). The paced Tahoe row is fencepost's own "
            "variant, spreading each window over a round trip."
        ),
    )
    for cc, label in strategies.items():
        r = _by(outcome.summary, cc=cc)
        dup_pct = 100 * r["duplicate_acks_received_mean"] / r["acks_received_mean"] if r["acks_received_mean"] else math.nan
        table.add(
            f"fencepost {cc}",
            _pm(r["acks_received_mean"], r["acks_received_ci95"]),
            _pm(r["duplicate_acks_received_mean"], r["duplicate_acks_received_ci95"]),
            f"{dup_pct:.2f}",
            _pm(r["goodput_bps_mean"] / 8, r["goodput_bps_ci95"] / 8),
            _pm(r["rtt_mean_ms_mean"], r["rtt_mean_ms_ci95"], 1),
        )
        if label is not None:
            r = as_run[cc]
            dup_pct = 100 * r["duplicate_acks_received_mean"] / r["acks_received_mean"] if r["acks_received_mean"] else math.nan
            table.add(f"fencepost {cc}, 80-byte, {label.rsplit(', ', 1)[1]}" + (f" ({r['failed']} failed)" if r.get("failed") else ""),
                      _pm(r["acks_received_mean"], r["acks_received_ci95"]), _pm(r["duplicate_acks_received_mean"], r["duplicate_acks_received_ci95"]),
                      f"{dup_pct:.2f}", _pm(r["goodput_bps_mean"] / 8, r["goodput_bps_ci95"] / 8), _pm(r["rtt_mean_ms_mean"], r["rtt_mean_ms_ci95"], 1))
            n = NOTEBOOK[label]
            table.add(f"notebook {label}", f"{n['acks']:,}", f"{n['dup']:,}", f"{n['dup_pct']:.2f}", _fmt(n["throughput"]), _fmt(n["rtt"], 1))
    _say()
    _say(table.text())
    tahoe = _by(outcome.summary, cc=NOTEBOOK_TAHOE)
    report.finding("(c) the notebook", f"the notebook's Tahoe on its 2.64 Mbit/s Poisson trace delivered {tahoe['goodput_bps_mean'] / 8:,.0f} bytes/s "
                   f"with 1472-byte datagrams and {as_run[NOTEBOOK_TAHOE]['goodput_bps_mean'] / 8:,.0f} with the notebook's 80-byte ones over 240 s "
                   f"(the notebook printed {NOTEBOOK[strategies[NOTEBOOK_TAHOE]]['throughput']:,.0f}).")
    parts = report.section("(c) The congestion-control notebook: Tahoe on a trace-driven link")
    parts.append(table.html())
    events = _traced_run(report, "notebook-tahoe", workload="bulk", time="60s", cc=NOTEBOOK_TAHOE, seed=1, **link)
    # The sender writes for 60 s; what it buffered drains after that, so plot the 60 s.
    fig = plot.congestion_window(events, packet_bytes=1472, end=60.0, title="Tahoe on the 2.64 Mbit/s trace: congestion window and ssthresh")
    report.figure(parts, fig, "notebook-cwnd", "Tahoe's congestion window and slow-start threshold (packets), unpaced as in the notebook")
    fig = plot.sequence_received(events, end=60.0, title="Tahoe on the 2.64 Mbit/s trace: sequence numbers received")
    report.figure(parts, fig, "notebook-sequence", "Sequence numbers received by the server over time")
    fig = plot.rtt_over_time(events, end=60.0, title="Tahoe on the 2.64 Mbit/s trace: RTT")
    report.figure(parts, fig, "notebook-rtt", "RTT samples and smoothed RTT over time")
    return {"summary": outcome.summary}


CONTROLLERS = ["tolerant", "bbr", "cubic", "reno", "tahoe", "none:window=64"]
LOSS_GRID = ["0%", "1%", "5%", "10%", "30%", "50%"]
# The losses at which (d) shows throughput against delay; the RTT CDF is drawn at the last.
DELAY_LOSSES = ["0%", "1%", "5%"]


def loss_per_controller(report: Report, trials: int, workers: Optional[int], progress: bool) -> dict:
    """Issue 8's first experiment: every controller's goodput against random loss on one path."""
    link = {"rate": "100mbit", "delay": "20ms", "queue": "500kB"}
    experiment = Experiment(
        name="loss-per-controller",
        description="Bulk for 20 s on 100 Mbit/s, 40 ms RTT, a 1-BDP (500 kB) queue, random loss both ways, per controller.",
        grid={"cc": CONTROLLERS, "loss": LOSS_GRID},
        fixed={"workload": "bulk", "time": "20s", **link},
        trials=trials,
        seed=1,
    )
    outcome = _sweep(report, experiment, workers, progress, "runs (loss per controller)")
    table = Table(
        f"(d) Goodput (Mbit/s) against random loss, per controller (n={trials})",
        ["loss"] + CONTROLLERS,
        note=(
            "100 Mbit/s, 20 ms each way, 500 kB droptail queue (one BDP), the same loss rate on both directions, "
            "drawn on entry to the link (before the bottleneck, as iptables at a router would). The sender writes for 20 s; "
            "goodput is payload delivered over those 20 s, Startup included. Mean ± 95 % CI over the runs that completed; "
            "failed runs, if any, are counted after the figure: a loss-based controller at 50 % loss cannot deliver what it "
            "buffered during the 20 s (up to the 16 MB send buffer) within the run's one-hour bound, so its runs end unfinished."
        ),
    )
    for loss in LOSS_GRID:
        cells = []
        for cc in CONTROLLERS:
            r = _by(outcome.summary, cc=cc, loss=loss)
            cell = _pm(r["goodput_bps_mean"] / 1e6, r["goodput_bps_ci95"] / 1e6, 1)
            if r.get("failed"):
                cell += f" ({r['failed']} failed)"
            cells.append(cell)
        table.add(loss, *cells)
    _say()
    _say(table.text())
    high = LOSS_GRID[-2]  # the highest loss at which every controller finishes its runs
    by_cc = {cc: _by(outcome.summary, cc=cc, loss=high)["goodput_bps_mean"] for cc in CONTROLLERS}
    best = max(by_cc, key=lambda cc: by_cc[cc] if by_cc[cc] == by_cc[cc] else -1)
    report.finding("(d) controllers under loss", f"at {high} random loss on 100 Mbit/s, 40 ms, {best} kept {by_cc[best] / 1e6:.1f} Mbit/s "
                   f"where CUBIC kept {by_cc['cubic'] / 1e6:.1f} and Reno {by_cc['reno'] / 1e6:.1f}.")
    parts = report.section("(d) Congestion control under random loss")
    parts.append(table.html())
    fig = plot.metric_vs_condition(outcome.summary, "loss", "goodput_bps", variant="cc", title="Goodput against random loss, 100 Mbit/s, 40 ms RTT, per controller")
    report.figure(parts, fig, "loss-per-controller", "Goodput against random loss for every controller (mean and 95 % CI)")
    # What each controller pays in delay for its goodput: Pantheon's plot, and the RTT CDF.
    shown = [l for l in DELAY_LOSSES if l in LOSS_GRID]
    fig = plot.throughput_delay(outcome.rows, "cc", panel="loss", panels=shown,
                                title=f"Goodput against 95th-percentile RTT, 100 Mbit/s, 40 ms RTT, 500 kB queue (each dot a run, n={trials})")
    report.figure(parts, fig, "throughput-delay", "Throughput against delay, as Pantheon draws it: the delay axis grows to the left, so better is up "
                  "and to the right; the large marker is the mean of the runs, the ellipse one standard deviation")
    cdf_loss = shown[-1]
    first = {r["cc"]: r for r in outcome.rows if r["loss"] == cdf_loss and r["trial"] == 0}
    series = {cc: first[cc]["rtt_percentiles_ms"] for cc in CONTROLLERS if first.get(cc) and first[cc].get("rtt_percentiles_ms")}
    fig = plot.percentile_cdf(series, title=f"RTT samples at {cdf_loss} loss, 100 Mbit/s, 40 ms RTT (first seed)",
                              marks={"base RTT": 40.0, "RTT + full queue": 80.0})
    report.figure(parts, fig, "rtt-cdf", f"CDF of every RTT sample the sender took, per controller, at {cdf_loss} random loss (the first trial of each)")
    delays = {cc: _by(outcome.summary, cc=cc, loss=cdf_loss)["rtt_p95_ms_mean"] for cc in CONTROLLERS}
    delays = {cc: d for cc, d in delays.items() if d == d}
    if delays:
        low, high_delay = min(delays, key=delays.get), max(delays, key=delays.get)
        report.finding("(d) delay", f"at {cdf_loss} loss the 95th-percentile RTT ran from {delays[low]:.1f} ms ({low}) to "
                       f"{delays[high_delay]:.1f} ms ({high_delay}) over a 40 ms path with a 40 ms queue.")
    return {"summary": outcome.summary}


# The notebook's competing senders on the 2.64 Mbit/s trace: (label, strategy per flow, seconds,
# its printed (throughput bytes/s, average RTT ms) per sender or None where it ran no such case).
COMPETING = [
    ("two fixed windows of 1000", ["none:window=1000,pacing=off"] * 2, 60, [(394.666667, 1963.733075), (405.333333, 1360.758694)]),
    ("Tahoe against a fixed window of 600", [NOTEBOOK_TAHOE, "none:window=600,pacing=off"], 60, [(6.666667, 1730.737257), (798.666667, 1500.501963)]),
    ("two Tahoe", [NOTEBOOK_TAHOE] * 2, 120, [(60415.666667, 248.982606), (64878.333333, 242.212587)]),
    ("three Tahoe", [NOTEBOOK_TAHOE] * 3, 120, None),
    ("two tolerant (the default)", ["tolerant"] * 2, 120, None),
    ("three tolerant (the default)", ["tolerant"] * 3, 120, None),
]


def competing_senders(report: Report, trials: int, workers: Optional[int], progress: bool) -> dict:
    """The notebook's senders in contention on its 2.64 Mbit/s link, and the same with three flows and with the default."""
    link, trace_note = _notebook_link(report)
    table = Table(
        f"(e) Competing senders on the notebook's link: {trace_note}, 88 ms, 26400-byte queue (n={trials})",
        ["senders", "flow", "strategy", "throughput (bytes/s)", "average RTT (ms)", "notebook bytes/s", "notebook RTT (ms)", "Jain index", "all flows / 2.64 Mbit/s"],
        note=(
            "Each case runs as long as the notebook's did (60 s or 120 s); throughput is payload delivered per second while "
            "the senders wrote. Windows are in packets as the notebook gave them, but fencepost's packets carry 1438 bytes of "
            "payload where the notebook's carried 80, so a window of 1000 is 18 times larger in bytes here: both overrun "
            "the 26,400-byte queue many times over, and that, not the exact figure, is what the notebook's rows show. "
            "Jain's index is over the flows' goodputs (1 = equal shares). The trace link has no random loss, so the trials "
            "differ only in their data and agree (± 0)."
        ),
    )
    summaries = {}
    for label, ccs, seconds, reference in COMPETING:
        experiment = Experiment(
            name=f"competing-{len(ccs)}-" + "-".join(dict.fromkeys(cc.split(":")[0] for cc in ccs)),
            description=f"The notebook's competing senders: {label}, on its 2.64 Mbit/s link for {seconds} s.",
            grid={"cc": [ccs]},
            fixed={"workload": "bulk", "time": f"{seconds}s", "flows": len(ccs), **link},
            trials=trials,
            seed=1,
        )
        outcome = _sweep(report, experiment, workers, progress, f"runs (competing: {label})")
        r = outcome.summary[0]
        summaries[label] = r
        for i, cc in enumerate(ccs, start=1):
            ref = reference[i - 1] if reference else None
            table.add(
                f"{label}, {seconds} s" + (f" ({r['failed']} failed)" if r.get("failed") and i == 1 else ""),
                str(i),
                cc,
                _pm(r[f"flow{i}_goodput_bps_mean"] / 8, r[f"flow{i}_goodput_bps_ci95"] / 8),
                _pm(r[f"flow{i}_rtt_mean_ms_mean"], r[f"flow{i}_rtt_mean_ms_ci95"], 1),
                _fmt(ref[0]) if ref else "",
                _fmt(ref[1], 1) if ref else "",
                f"{r['jain_index_mean']:.3f}" if i == 1 else "",
                f"{sum(r[f'flow{k}_goodput_bps_mean'] for k in range(1, len(ccs) + 1)) / 2.64e6:.0%}" if i == 1 else "",
            )
    fixed = summaries["two fixed windows of 1000"]
    mixed = summaries["Tahoe against a fixed window of 600"]
    tahoe_share = mixed["flow1_goodput_bps_mean"] / (mixed["flow1_goodput_bps_mean"] + mixed["flow2_goodput_bps_mean"])
    table.note += (
        f" Two fixed windows together deliver {(fixed['flow1_goodput_bps_mean'] + fixed['flow2_goodput_bps_mean']) / 8:,.0f} bytes/s "
        f"(the notebook's, 800): fencepost's fixed window resends only the holes the fence reports, so overload wastes most "
        f"of the link without collapsing it. Against a fixed window of 600, Tahoe takes {tahoe_share:.0%} of the pair's "
        f"goodput (the notebook's Tahoe: 1 %)."
    )
    _say()
    _say(table.text())
    report.finding("(e) competing senders", f"against a fixed window of 600 packets, Tahoe took {tahoe_share:.0%} of the pair's goodput "
                   "(the notebook's Tahoe: 1 %).")
    parts = report.section("(e) Competing senders on the notebook's link")
    parts.append(table.html())
    runs, ends = {}, {}
    for label, ccs, seconds, _ in COMPETING:
        panel = f"{label} ({seconds} s)"
        runs[panel] = simulation.run(workload="bulk", time=f"{seconds}s", flows=len(ccs), cc=ccs, series="2s", seed=1, **link)
        ends[panel] = seconds
    fig = plot.goodput_over_time(runs, 2.0, ends=ends, title="Competing senders on the 2.64 Mbit/s trace: each flow's goodput over 2 s intervals (seed 1)")
    report.figure(parts, fig, "competing-senders", "Per-flow goodput over time for each case (2 s intervals of in-order delivery, while the senders wrote)")
    return {"summary": summaries}


FAIRNESS_LOSSES = ["0%", "5%"]


def fairness_matrix(report: Report, trials: int, workers: Optional[int], progress: bool, alone: Optional[list] = None) -> dict:
    """Every controller against every other (and itself) on one bottleneck; ``alone``
    (experiment d's summary) adds each controller's goodput with the path to itself."""
    pairs = [[a, b] for i, a in enumerate(CONTROLLERS) for b in CONTROLLERS[i:]]
    link = {"rate": "100mbit", "delay": "20ms", "queue": "500kB"}
    experiment = Experiment(
        name="fairness-matrix",
        description="Two flows, each controller against each, through one 100 Mbit/s bottleneck, 40 ms RTT, 500 kB queue, 60 s.",
        grid={"cc": pairs, "loss": FAIRNESS_LOSSES},
        fixed={"workload": "bulk", "time": "60s", "flows": 2, **link},
        trials=trials,
        seed=1,
    )
    outcome = _sweep(report, experiment, workers, progress, "runs (fairness matrix)")
    parts = report.section("(f) Fairness: each controller against each")
    matrices = {}
    for loss in FAIRNESS_LOSSES:
        cells = {}
        table = Table(
            f"(f) Fairness matrix at {loss} random loss: the row controller's share of the goodput, and Jain's index (n={trials})",
            ["flow 1 \\ flow 2"] + CONTROLLERS,
            note=(
                "Two flows start together on a 100 Mbit/s bottleneck with 20 ms each way and a 500 kB (one BDP) droptail queue, "
                f"{loss} random loss on both directions before the bottleneck, 60 s. A cell is the row controller's share of the "
                "two flows' goodput (mean over trials) and the mean Jain index; the matrix is read across a row, so a cell and "
                "its mirror add to 100 %. Runs that failed are counted in brackets."
                + (" The last row is each controller's goodput alone on the same path at the same loss, from table (d) "
                   "(20 s runs): where a share is small, compare the flow's goodput with it." if alone else "")
            ),
        )
        for a, b in pairs:
            r = _by(outcome.summary, cc=f"{a};{b}", loss=loss)
            total = r["flow1_goodput_bps_mean"] + r["flow2_goodput_bps_mean"]
            share = r["flow1_goodput_bps_mean"] / total if total else math.nan
            cells[(a, b)] = (share, r["jain_index_mean"], r.get("failed", 0))
            if a != b:  # a controller against itself: the cell is flow 1's share, as the note says
                cells[(b, a)] = (1 - share, r["jain_index_mean"], r.get("failed", 0))
        for a in CONTROLLERS:
            row = []
            for b in CONTROLLERS:
                share, jain, failed = cells[(a, b)]
                row.append(f"{share:.0%} J {jain:.2f}" + (f" ({failed} failed)" if failed else ""))
            table.add(a, *row)
        if alone:
            table.add("alone (d), Mbit/s", *[_fmt(_by(alone, cc=b, loss=loss)["goodput_bps_mean"] / 1e6, 1) for b in CONTROLLERS])
        _say()
        _say(table.text())
        parts.append(table.html())
        matrices[f"{loss} random loss"] = {k: v[:2] for k, v in cells.items()}
        own = cells[("tolerant", "cubic")][0]
        report.finding(f"(f) fairness at {loss} loss", f"fencepost's default (tolerant) took {own:.0%} of the goodput against CUBIC; "
                       f"the lowest Jain index of any pair was {min(v[1] for v in cells.values()):.2f}.")
    fig = plot.share_matrix(matrices, CONTROLLERS, title="Each controller against each: 100 Mbit/s, 40 ms RTT, 1-BDP queue, 60 s")
    report.figure(parts, fig, "fairness-matrix", "Share of the goodput the row controller takes against the column controller (and Jain's index)")
    return {"summary": outcome.summary}


MATHIS_LOSSES = ["0.5%", "1%", "2%", "3%", "5%"]
MATHIS_DELAYS = {"10ms": 0.020, "25ms": 0.050}


def mathis(report: Report, trials: int, workers: Optional[int], progress: bool) -> dict:
    """Reno and Tahoe against the Mathis et al. (1997) formula."""
    experiment = Experiment(
        name="mathis",
        description="Reno and Tahoe for 60 s on an unconstrained path, random loss on the data direction only.",
        grid={"cc": ["reno", "tahoe"], "delay": list(MATHIS_DELAYS), "loss_up": MATHIS_LOSSES},
        fixed={"workload": "bulk", "time": "60s"},
        trials=trials,
        seed=1,
    )
    outcome = _sweep(report, experiment, workers, progress, "runs (Mathis)")
    mss_bits = 8 * outcome.rows[0]["payload_size"]
    table = Table(
        f"(g) The Mathis check: goodput against (MSS/RTT)·sqrt(3/(2p)) (n={trials})",
        ["RTT", "loss", "formula (Mbit/s)", "Reno (Mbit/s)", "Reno / formula", "Tahoe (Mbit/s)", "Tahoe / formula"],
        note=(
            f"MSS = {mss_bits // 8} payload bytes; no rate limit and no queue limit, random loss on the data direction only, "
            "so every loss is the formula's p. Mathis et al. derived the formula for Reno's sawtooth; Tahoe, which restarts "
            "from one packet after every loss, should stay below it. Mean ± 95 % CI."
        ),
    )
    ratios = []
    for delay, rtt in MATHIS_DELAYS.items():
        for loss in MATHIS_LOSSES:
            p = plot.condition_value(loss) / 100
            formula = mss_bits / rtt * math.sqrt(3 / (2 * p))
            reno = _by(outcome.summary, cc="reno", delay=delay, **{"loss-up": loss})
            tahoe = _by(outcome.summary, cc="tahoe", delay=delay, **{"loss-up": loss})
            table.add(f"{rtt * 1000:g} ms", loss, f"{formula / 1e6:.2f}",
                      _pm(reno["goodput_bps_mean"] / 1e6, reno["goodput_bps_ci95"] / 1e6, 2), f"{reno['goodput_bps_mean'] / formula:.2f}",
                      _pm(tahoe["goodput_bps_mean"] / 1e6, tahoe["goodput_bps_ci95"] / 1e6, 2), f"{tahoe['goodput_bps_mean'] / formula:.2f}")
            for cc, r in (("reno", reno), ("tahoe", tahoe)):
                ratios.append({"series": f"{cc}, RTT {rtt * 1000:g} ms", "loss": loss,
                               "goodput_over_formula_mean": r["goodput_bps_mean"] / formula,
                               "goodput_over_formula_ci95": r["goodput_bps_ci95"] / formula})
    _say()
    _say(table.text())
    reno = [r["goodput_over_formula_mean"] for r in ratios if r["series"].startswith("reno")]
    tahoe = [r["goodput_over_formula_mean"] for r in ratios if r["series"].startswith("tahoe")]
    report.finding("(g) the Mathis formula", f"Reno delivered {min(reno):.2f}-{max(reno):.2f} times the formula's prediction and "
                   f"Tahoe {min(tahoe):.2f}-{max(tahoe):.2f} times, over 0.5-5 % loss and 20-50 ms.")
    parts = report.section("(g) The Mathis check")
    parts.append(table.html())
    fig = plot.metric_vs_condition(ratios, "loss", "goodput_over_formula", variant="series", ylabel="goodput / Mathis formula",
                                   title="Reno and Tahoe against the Mathis formula", reference={"formula": {l: 1.0 for l in MATHIS_LOSSES}})
    report.figure(parts, fig, "mathis", "Goodput over the Mathis formula's prediction against the loss rate (1 = the formula)")
    return {"summary": outcome.summary}


def run_demo(out: os.PathLike = "fencepost-report", trials: int = 5, workers: Optional[int] = None, progress: bool = True, lab: bool = False) -> Path:
    """Runs the experiments, prints their tables and writes the report; returns report.html's path.
    With ``lab`` (root), also THERMAL and the sliding fence on real namespaces."""
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    _say(f"fencepost demo: the seed experiments in simulation, {trials} trials each, on {workers or os.cpu_count()} workers")
    _say(f"report folder: {out.resolve()}")
    fence = {profile: sliding_fence(report, profile, trials, workers, progress)["summary"] for profile in ("seed", "default")}
    thermal(report, trials, workers, progress)
    notebook(report, trials, workers, progress)
    by_loss = loss_per_controller(report, trials, workers, progress)
    competing_senders(report, trials, workers, progress)
    fairness_matrix(report, trials, workers, progress, alone=by_loss["summary"])
    mathis(report, trials, workers, progress)
    from .demo_redundancy import run_redundancy

    run_redundancy(report, trials, workers, progress)
    if lab:
        from .demo_lab import run_lab

        run_lab(report, trials, progress, sim=fence)
    path = report.write(time.monotonic() - started)
    _say()
    _say(f"report: {path.resolve()} ({len(report.plots)} plots, PNG and SVG, in {(out / 'plots').resolve()})")
    _say(f"done in {time.monotonic() - started:.0f} s")
    return path


__all__ = ["ARTICLE", "NOTEBOOK", "run_demo"]
