"""The ``fencepost`` command."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from . import sim
from ._errors import FencepostError, OptionError
from .sweep import ExperimentError

# (flag, metavar, help) for every scenario option `fencepost sim` exposes.
SIM_OPTIONS = [
    ("--workload", "bulk|echo", "bulk: send --bytes and close; echo: the seed's 1000 messages of 200-400 B, 2-20 ms apart, echoed back (default bulk)"),
    ("--bytes", "SIZE", "bytes to send in the bulk workload, e.g. 1000000, 64kB, 100MB (default 1MB)"),
    ("--messages", "N", "messages in the echo workload (default 1000)"),
    ("--delay", "DURATION", "one-way propagation delay, e.g. 10ms (default 10ms)"),
    ("--jitter", "DURATION", "each packet's delay varies uniformly by up to this much (default 0)"),
    ("--keep-order", "BOOL", "jitter never reorders packets: true or false (default false)"),
    ("--loss", "P", "random loss in both directions, 10%% or 0.1 (default 0)"),
    ("--loss-up", "P", "loss client to server (overrides --loss)"),
    ("--loss-down", "P", "loss server to client (overrides --loss)"),
    ("--loss-model", "MODEL", "bernoulli (default) or gilbert:p=P,r=R[,good=G,bad=B] (bursty loss)"),
    ("--rate", "RATE", "bottleneck rate in both directions, e.g. 100mbit (default unlimited)"),
    ("--trace", "FILE", "mahimahi bandwidth trace for both directions (instead of --rate)"),
    ("--queue", "LIMIT", "droptail queue before the bottleneck: 64kB, 100pkt or unlimited (default)"),
    ("--dup", "P", "probability a packet is duplicated (default 0)"),
    ("--arq", "fence|window", "loss recovery: fence (resend only holes, default) or window (cumulative acks only)"),
    ("--cc", "CC", "congestion control: none[:window=N,rate=R,pacing=on|off] or tahoe[:iw=N,ssthresh=N,pacing=on|off] (default: the profile's)"),
    ("--profile", "seed|default", "transport profile (default default)"),
    ("--packet-size", "BYTES", "data payload per packet (default: the profile's; 256 in seed, 1458 in default)"),
    ("--idle-timeout", "DURATION", "end the connection after this long without hearing from the peer (default: the profile's)"),
    ("--seed", "N", "seed for every random choice of the run (default 1)"),
    ("--timeout", "DURATION", "bound on the run's virtual time (default 3600s)"),
]


def _add_sim_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sim",
        help="one simulated run",
        description="Run one transfer over a simulated link in virtual time and print what happened.",
    )
    for flag, metavar, help_text in SIM_OPTIONS:
        p.add_argument(flag, metavar=metavar, help=help_text)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    p.add_argument("--events", metavar="FILE", help="write the per-packet event log to FILE (JSON lines, qlog-style names)")
    p.set_defaults(handler=_cmd_sim)


def _add_sweep_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="a grid of simulated runs with trials, in parallel",
        description=(
            "Run every combination of the listed option values, each for --trials runs on distinct seeds, "
            "in parallel. Options take comma-separated lists (--loss 10%%,20%%,30%% --arq window,fence); an "
            "option with one value is the same for every run. Or give an experiment file (TOML). Results go to "
            "--out: runs.jsonl/runs.csv (one row per run), summary.csv/summary.json (mean, std, 95%% CI per "
            "condition) and experiment.toml. Re-running into the same folder skips finished runs."
        ),
    )
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT.toml", help="experiment file (keys: name, trials, seed, workers, [grid], [fixed])")
    p.add_argument("--out", metavar="DIR", required=True, help="output folder")
    p.add_argument("--trials", metavar="N", type=_positive_int("--trials"), help="runs per condition (default 5, or the file's)")
    p.add_argument("--workers", metavar="N", type=_positive_int("--workers"), help="parallel workers (default: one per core)")
    p.add_argument("--seed", metavar="N", type=_positive_int("--seed", allow_zero=True), help="first trial's seed (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    for flag, metavar, help_text in SIM_OPTIONS:
        if flag == "--seed":
            continue
        p.add_argument(flag, metavar=metavar + "[,...]", help=help_text)
    p.set_defaults(handler=_cmd_sweep)


def _add_demo_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="the seed experiments, with tables, plots and a report",
        description="Run the seed documents' experiments in simulation (sliding fence, THERMAL, the congestion-control notebook), print their tables and write a report folder.",
    )
    p.add_argument("--out", metavar="DIR", default="fencepost-report", help="report folder (default fencepost-report)")
    p.add_argument("--trials", metavar="N", type=_positive_int("--trials"), default=5, help="trials per condition (default 5)")
    p.add_argument("--workers", metavar="N", type=_positive_int("--workers"), help="parallel workers (default: one per core)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(handler=_cmd_demo)


def _positive_int(flag: str, allow_zero: bool = False):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < (0 if allow_zero else 1):
            raise argparse.ArgumentTypeError(f"{value} is too small; {flag} is at least {0 if allow_zero else 1}")
        return value

    return parse


def _given_options(args: argparse.Namespace) -> dict:
    out = {}
    for flag, _, _ in SIM_OPTIONS:
        name = flag[2:].replace("-", "_")
        value = getattr(args, name)
        if value is not None:
            out[name] = value
    return out


def _mbit(bps: float) -> str:
    return f"{bps / 1e6:.3f} Mbit/s" if bps >= 1e5 else f"{bps / 1e3:.1f} kbit/s"


def format_summary(r: sim.SimResult) -> str:
    o = r.options
    loss = f"{o.get('loss-up', o.get('loss'))}/{o.get('loss-down', o.get('loss'))}" if o.get("loss-model") == "bernoulli" else o.get("loss-model")
    bandwidth = o.get("rate") or (f"trace {o['trace']}" if o.get("trace") else "unlimited")
    size = f"{r.bytes_expected:,} B" if r.workload == "bulk" else f"{o.get('messages')} messages, {r.bytes_expected:,} B"
    lines = [
        f"{r.workload} {size} | profile {r.profile}, arq {r.arq}, cc {r.cc}, payload {r.payload_size} B",
        f"link: delay {o.get('delay')} ± {o.get('jitter')}, loss {loss} (up/down), {bandwidth}, queue {o.get('queue')}, dup {o.get('dup')}, seed {r.seed}",
    ]
    verdict = "integrity OK (SHA-256 match)" if r.integrity_ok else f"INCOMPLETE: {r.bytes_delivered:,} of {r.bytes_expected:,} B"
    closing = "closed gracefully" if r.close_ok else "did not close gracefully"
    lines.append(f"result: {r.status} — {verdict}, {closing}" + (f" ({r.error})" if r.error else ""))
    lines.append(f"time to completion {r.duration_s:.3f} s (virtual), goodput {_mbit(r.goodput_bps)}")
    lines.append(
        f"packets sent {r.packets_sent:,}: data {r.data_packets_sent:,} (retransmissions {r.retransmissions:,}), acks {r.acks_sent:,}; peer sent {r.peer_packets_sent:,}"
    )
    if r.rtt_mean_ms is not None:
        lines.append(f"RTT mean {r.rtt_mean_ms:.2f} ms, p95 {r.rtt_p95_ms:.2f} ms ({r.rtt_samples:,} samples)")
    lines.append(
        f"acks received {r.acks_received:,} (duplicate {r.duplicate_acks_received:,}), congestion events {r.congestion_events:,}, timeouts {r.retransmission_timeouts:,}; link drops {r.link_drops:,}"
    )
    return "\n".join(lines)


def _cmd_sim(args: argparse.Namespace) -> int:
    result = sim.run(events=args.events, **_given_options(args))
    if args.json:
        print(json.dumps(result.as_dict() | {"options": dict(result.options)}, sort_keys=False))
    else:
        print(format_summary(result))
    return 0 if result.integrity_ok else 1


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep import Experiment, load_experiment, run_sweep, split_values

    given = {k: split_values(v) for k, v in _given_options(args).items()}
    workers = args.workers
    if args.experiment:
        experiment, file_workers = load_experiment(args.experiment)
        workers = workers or file_workers
        grid, fixed = dict(experiment.grid), dict(experiment.fixed)
        for key, values in given.items():
            # Command-line options override the file's.
            grid.pop(key, None)
            fixed.pop(key, None)
            (grid.__setitem__(key, values) if len(values) > 1 else fixed.__setitem__(key, values[0]))
        experiment = Experiment(grid=grid, fixed=fixed, trials=args.trials or experiment.trials,
                                seed=experiment.seed if args.seed is None else args.seed,
                                name=experiment.name, description=experiment.description)
    else:
        grid = {k: v for k, v in given.items() if len(v) > 1}
        fixed = {k: v[0] for k, v in given.items() if len(v) == 1}
        if not grid:
            raise OptionError("sweep", "nothing to sweep: give an experiment file or an option with several values, like --loss 10%,20%")
        experiment = Experiment(grid=grid, fixed=fixed, trials=args.trials or 5, seed=1 if args.seed is None else args.seed)
    source = args.experiment or "fencepost sweep"
    outcome = run_sweep(experiment, out=args.out, workers=workers, progress=not args.quiet, source=source)
    print(f"{outcome.ran} runs done now, {outcome.skipped} already in {args.out}; {len(outcome.summary)} conditions summarised in {args.out}/summary.csv")
    if outcome.interrupted:
        print(f"interrupted: finished runs are kept; run the same command again to do the rest", file=sys.stderr)
        return 130
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from .demo import run_demo

    run_demo(out=args.out, trials=args.trials, workers=args.workers, progress=not args.quiet)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fencepost",
        description="fencepost: a sliding-fence transport over UDP and a lab for lossy networks.",
    )
    from . import _core

    parser.add_argument("--version", action="version", version=f"fencepost {_core.__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    _add_sim_parser(subparsers)
    _add_sweep_parser(subparsers)
    _add_demo_parser(subparsers)
    from ._tools_cli import add_parsers

    add_parsers(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except (OptionError, ExperimentError) as exc:
        print(f"fencepost {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except FencepostError as exc:
        print(f"fencepost {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"fencepost {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
