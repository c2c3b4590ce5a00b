"""The ``fencepost`` command."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from typing import Optional, Sequence

from . import sim
from ._errors import FencepostError, OptionError
from ._options import add_arguments, given_options
from .sweep import ExperimentError


def _add_sim_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sim",
        help="one simulated run",
        description=(
            "Run flows over simulated links in virtual time and print what happened. By default one flow over one "
            "link (--topology line); --flows N (or --topology dumbbell:N) puts N flows through one shared bottleneck, "
            "which the link options then describe; --scenario FILE reads any topology from a TOML file."
        ),
    )
    add_arguments(p, "sim")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    p.add_argument("--events", metavar="FILE", help="write the per-packet event log to FILE as qlog (version 0.3, JSON-SEQ; qvis opens it)")
    p.add_argument(
        "--parallel",
        action="store_true",
        help="run on two threads, the flows' clients on one and their servers on the other, where the run allows "
        "(the same report, bit for bit; see docs/simulation.md). Without it the two sides already take turns in "
        "windows on one thread; a second thread gains little on two cores, and nothing in a sweep, which "
        "already keeps every core busy",
    )
    p.set_defaults(handler=_cmd_sim)


def _add_sweep_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="a grid of simulated runs with trials, in parallel",
        description=(
            "Run every combination of the listed option values, each for --trials runs on distinct seeds, "
            "in parallel. Options take comma-separated lists (--loss 10%,20%,30% --arq window,fence); an "
            "option with one value is the same for every run, and with no list at all the sweep is one condition "
            "run --trials times. Or give an experiment file (TOML). Results go to --out: runs.jsonl/runs.csv (one "
            "row per run), summary.csv/summary.json (mean, std, 95% CI per condition, failed runs left out of the "
            "means and counted) and experiment.toml. Re-running into the same folder skips finished runs."
        ),
    )
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT.toml", help="experiment file (keys: name, trials, seed, workers, [grid], [fixed])")
    p.add_argument("--out", metavar="DIR", required=True, help="output folder")
    p.add_argument("--trials", metavar="N", type=_positive_int("--trials"), help="runs per condition (default 5, or the file's)")
    p.add_argument("--workers", metavar="N", type=_positive_int("--workers"), help="parallel workers (default: one per core)")
    p.add_argument("--seed", metavar="N", type=_positive_int("--seed", allow_zero=True), help="first trial's seed (default 1)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="run on a Dask cluster through this scheduler instead of local processes "
                        "(needs dask.distributed: pip install 'fencepost[dask]'; the workers need the same fencepost)")
    add_arguments(p, "sweep", sweep=True)
    p.set_defaults(handler=_cmd_sweep)


def _add_demo_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="the seed experiments, with tables, plots and a report",
        description="Run the seed documents' experiments in simulation (the sliding fence, THERMAL, the congestion-control notebook, "
                    "the duplication paper) and fencepost's congestion-control and redundancy experiments, print their tables "
                    "and write a report folder. With --lab (root), also on real network namespaces.",
    )
    p.add_argument("--out", metavar="DIR", default="fencepost-report", help="report folder (default fencepost-report)")
    p.add_argument("--trials", metavar="N", type=_positive_int("--trials"), default=5, help="trials per condition (default 5)")
    p.add_argument("--workers", metavar="N", type=_positive_int("--workers"), help="parallel workers (default: one per core)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--lab", action="store_true",
                   help="also run THERMAL and the sliding-fence benchmark on real network namespaces, beside the simulated tables "
                        "(needs root; about an hour at 5 trials)")
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


def _cmd_sim(args: argparse.Namespace) -> int:
    result, parallelism = sim.run_with_parallelism(events=args.events, parallel=args.parallel, **given_options(args, "sim"))
    if args.json:
        print(json.dumps(result.to_dict(), sort_keys=False))
    else:
        print(result.summary())
        if parallelism is not None:
            print(_parallelism_line(parallelism, result.end_s))
    return 0 if result.integrity_ok else 1


def _parallelism_line(parallelism: dict, end_s: float) -> str:
    """What `--parallel` did, for the summary: how much ran apart, or why nothing did."""
    if parallelism["one_thread_because"]:
        return f"--parallel: ran on one thread throughout: {parallelism['one_thread_because']}"
    share = parallelism["apart_s"] / end_s if end_s > 0 else 0.0
    return f"--parallel: {share:.0%} of the simulated time ran on two threads (handshakes, the last round trips and failures run on one)"


class _DaskExecutor:
    """A Dask cluster's executor for the length of a sweep; clear errors when Dask is
    missing or the scheduler cannot be reached."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.client = None

    def __enter__(self):
        try:
            from distributed import Client
        except ImportError:
            raise OptionError("scheduler", "needs dask.distributed, which is not installed: pip install 'fencepost[dask]'") from None
        try:
            self.client = Client(self.address, timeout=10)
        except (OSError, TimeoutError) as exc:
            raise OptionError("scheduler", f"cannot reach a Dask scheduler at {self.address}: {exc}; accepted: tcp://HOST:PORT") from None
        except ValueError as exc:
            raise OptionError("scheduler", f"{self.address}: {exc}; accepted: tcp://HOST:PORT") from None
        return self.client.get_executor()

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .sweep import Experiment, load_experiment, run_sweep, split_values

    given = {}
    for key, value in given_options(args, "sweep").items():
        # Given once: a comma-separated list of values to sweep. Given several times:
        # one fixed value per flow (or several link events).
        given[key] = split_values(value) if isinstance(value, str) else [list(value)]
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
        experiment = Experiment(grid=grid, fixed=fixed, trials=args.trials or 5, seed=1 if args.seed is None else args.seed)
    source = args.experiment or "the command line"
    if args.scheduler:
        with _DaskExecutor(args.scheduler) as executor:
            outcome = run_sweep(experiment, out=args.out, progress=not args.quiet, source=source, executor=executor)
    else:
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

    if args.lab:
        from .lab import require_root

        require_root()  # before an hour of simulations, not after
    run_demo(out=args.out, trials=args.trials, workers=args.workers, progress=not args.quiet, lab=args.lab)
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
    from ._lab_cli import add_parsers as add_lab_parsers

    add_parsers(subparsers)
    add_lab_parsers(subparsers)
    return parser


def _attach_negative_values(argv: Sequence[str]) -> list:
    """`--loss -5%` as `--loss=-5%`: argparse takes a word that starts with a dash for an
    option (unless it is a bare number), so a negative value came back as "expected one
    argument" instead of the option's own check naming the accepted range. No option of
    ours is spelled with a dash and a digit."""
    out: list = []
    for word in argv:
        previous = out[-1] if out else ""
        negative = len(word) > 1 and word[0] == "-" and (word[1].isdigit() or word[1] == ".")
        if negative and previous.startswith("--") and "=" not in previous:
            out[-1] = f"{previous}={word}"
        else:
            out.append(word)
    return out


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, as Ctrl-C is: `kill`, `timeout`, systemd and
    `docker stop` then stop a command the way Ctrl-C does (a server prints its counters, a
    lab run takes its namespaces down) instead of ending it where it stands."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(_attach_negative_values(sys.argv[1:] if argv is None else argv))
    # Only where nobody chose otherwise (main() called from a program that handles SIGTERM
    # itself keeps its handler), and only on the main thread, where Python runs handlers.
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return args.handler(args)
    except (OptionError, ExperimentError) as exc:
        print(f"fencepost {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except FencepostError as exc:
        print(f"fencepost {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except Terminated:
        print(f"fencepost {args.command}: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"fencepost {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`fencepost sim ... | head`): not an error of ours. Point
        # stdout at nothing so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
