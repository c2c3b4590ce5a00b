"""`fencepost lab run|sweep|clean`: the simulator's scenarios on real namespaces."""

from __future__ import annotations

import argparse
import json
import math
import signal

from ._errors import OptionError
from ._options import add_arguments, given_options

_SKIP = ("scenario", "event", "series", "timeout", "workload")


def _sigterm_is_interrupt() -> None:
    # A lab killed politely cleans up like one stopped with Ctrl-C.
    def stop(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def _transports(values) -> list[str]:
    from .sweep import split_values

    out = []
    for v in values or ["fencepost"]:
        out.extend(split_values(v))
    return out


def _topology(options: dict) -> str:
    topology = options.pop("topology", None)
    flows = options.pop("flows", None)
    if flows is not None:
        n = str(flows)
        if topology is not None and topology != f"dumbbell:{n}":
            raise OptionError("flows", f"{n} flows, but --topology {topology}")
        topology = f"dumbbell:{n}"
    return topology or "line"


def _mbit(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v / 1e6:8.2f}"


def _print_rows(rows: list) -> None:
    print(f"{'transport':<28} {'trial':>5} {'status':<7} {'Mbit/s':>8} {'sent':>8} {'retx':>7} {'rtt ms':>7} {'loss up':>8}  error")
    for r in rows:
        offered, lost = r.get("link_up_offered"), r.get("link_up_lost")
        loss = f"{lost / offered * 100:7.2f}%" if offered else "      -"
        rtt = r.get("rtt_mean_ms")
        print(f"{r['transport']:<28} {r['trial']:>5} {r['status']:<7} {_mbit(r.get('goodput_bps'))} {r.get('packets_sent') or 0:>8} "
              f"{r.get('retransmissions') or 0:>7} {('%7.2f' % rtt) if rtt is not None else '      -'} {loss}  {r.get('error') or ''}")
        if r.get("jain_index") is not None:
            # The row's figures are the first flow's; with several, each flow and the share follow.
            k = 1
            while f"flow{k}_goodput_bps" in r:
                flow_rtt = r.get(f"flow{k}_rtt_mean_ms")
                print(f"    flow {k}: {_mbit(r[f'flow{k}_goodput_bps']).strip()} Mbit/s, {r.get(f'flow{k}_retransmissions') or 0} retransmissions, "
                      f"RTT {('%.2f ms' % flow_rtt) if flow_rtt is not None else '-'}")
                k += 1
            print(f"    Jain's fairness index over the {k - 1} flows' goodputs: {r['jain_index']:.3f}")
        if r.get("warning"):
            print(f"    warning: {r['warning']}")


def _timeout(args: argparse.Namespace):
    if args.timeout is None:
        return None
    from .lab import _seconds

    seconds = _seconds(args.timeout, "timeout")
    if seconds <= 0:
        raise OptionError("timeout", f"{args.timeout!r} is not a positive duration (e.g. 120s, 10min)")
    return seconds


def _cmd_run(args: argparse.Namespace) -> int:
    from .lab import lab_sweep

    _sigterm_is_interrupt()
    options = given_options(args, "sim")
    seed = int(options.pop("seed", 1))
    topology = _topology(options)
    rows, summary = lab_sweep({}, options, _transports(args.transport), trials=args.trials, seed=seed, topology=topology,
                              impair=args.impair, out=args.out, progress=not args.quiet and not args.json, log_dir=args.log,
                              timeout=_timeout(args))
    if args.json:
        print(json.dumps(rows))
    else:
        _print_rows(rows)
    return 0 if all(r.get("integrity_ok") for r in rows) else 1


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .lab import lab_sweep
    from .sweep import split_values

    _sigterm_is_interrupt()
    grid, fixed = {}, {}
    for key, value in given_options(args, "sweep").items():
        values = split_values(value) if isinstance(value, str) else [list(value)]
        (grid.__setitem__(key, values) if len(values) > 1 else fixed.__setitem__(key, values[0]))
    seed = int(fixed.pop("seed", 1))
    topology = _topology(fixed)
    if "topology" in grid or "flows" in grid:
        raise OptionError("topology", "a lab sweep runs on one topology; run one sweep per topology")
    rows, summary = lab_sweep(grid, fixed, _transports(args.transport), trials=args.trials, seed=seed, topology=topology,
                              impair=args.impair, out=args.out, progress=not args.quiet, log_dir=args.log, timeout=_timeout(args))
    failed = sum(1 for r in rows if not r.get("integrity_ok"))
    print(f"{len(rows)} lab runs ({failed} failed) in {args.out}; {len(summary)} conditions summarised in {args.out}/summary.csv")
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    from .lab import clean

    removed = clean(all_labs=args.all)
    print(f"removed {len(removed)} namespaces" + (f": {', '.join(removed)}" if removed else ""))
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transport", action="append", metavar="T[,T...]",
                   help="what crosses the link, one row each: fencepost[+OPTION=VALUE...] (OPTION: profile, arq, cc, packet-size, "
                        "idle-timeout), echo[+...] (the seed article's echo benchmark), tcp:CC (kernel TCP: tcp:cubic, tcp:bbr, "
                        "tcp:reno); on a dumbbell, one per flow joined by & (tcp:cubic&fencepost). Default: fencepost")
    p.add_argument("--impair", choices=("emulator", "iptables"), default="emulator",
                   help="emulator: fencepost's real-time link emulator at the router (every link option); iptables: the seed "
                        "article's method, statistic-match drop and tbf rate at a forwarding router (loss and rate only)")
    p.add_argument("--trials", metavar="N", type=int, default=1, help="runs per transport and condition (trial t uses seed + t)")
    p.add_argument("--log", metavar="DIR", help="write the emulator's per-packet log of each run to DIR/<key>.log")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--timeout", metavar="DURATION",
                   help="wall-clock bound on each run: flows not done by then are stopped and the run is a failed row that "
                        "says so (default: 600s for --bytes, the --time plus 120s); kernel TCP at 30 %% loss can need far longer")


def add_parsers(subparsers) -> None:
    lab = subparsers.add_parser("lab", help="the simulator's scenarios on real network namespaces (root)",
                                description="Build the simulator's topologies (line, dumbbell:N) in Linux network namespaces, put "
                                            "fencepost's real-time link emulator (or iptables) in the middle, and run fencepost, "
                                            "kernel TCP or the echo benchmark across it. Needs root. Namespaces are named fpl<id>-<host> "
                                            "and removed on exit; `fencepost lab clean` removes what a crashed lab left.")
    sub = lab.add_subparsers(dest="lab_command", metavar="run|sweep|clean")
    sub.required = True
    p = sub.add_parser("run", help="one condition, each transport for --trials runs; prints a row per run",
                       description="Run each --transport across one emulated link (the simulator's link, workload and topology options).")
    add_arguments(p, "sim", skip=_SKIP)
    _common(p)
    p.add_argument("--json", action="store_true", help="print the rows as JSON (with every flow, the TCP_INFO samples and the emulator's account)")
    p.add_argument("--out", metavar="DIR", help="also write runs.jsonl, runs.csv and summary.csv to DIR")
    p.set_defaults(handler=_cmd_run)
    p = sub.add_parser("sweep", help="`fencepost sweep` on namespaces: every combination of comma-separated values",
                       description="Like `fencepost sweep`, on the lab, one run at a time: rows and summary in the sweep's schema.")
    add_arguments(p, "sweep", sweep=True, skip=_SKIP)
    _common(p)
    p.add_argument("--out", metavar="DIR", required=True, help="output folder (runs.jsonl, runs.csv, summary.csv); re-running resumes")
    p.set_defaults(handler=_cmd_sweep, trials=5)
    p = sub.add_parser("clean", help="remove what crashed labs left behind (namespaces, their interfaces and processes)")
    p.add_argument("--all", action="store_true", help="also remove the namespaces of labs still running")
    p.set_defaults(handler=_cmd_clean)
