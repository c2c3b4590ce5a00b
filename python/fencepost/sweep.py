"""Sweeps: a grid of simulated scenarios, each run for several trials on
distinct seeds, in parallel over the machine's cores.

An output folder holds one row per run (``runs.jsonl``, ``runs.csv``), a summary
per condition with mean, standard deviation and 95 % confidence interval
(``summary.csv``, ``summary.json``) and the experiment that was run
(``experiment.toml``). Running the same sweep into the same folder skips the runs
already there, so an interrupted sweep resumes where it stopped. Runs with several
flows also carry each flow's goodput, mean RTT and retransmissions as
``flow<N>_<name>`` columns (N from 1), summarised like the other metrics.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from . import _core
from ._errors import FencepostError, OptionError, option_error_from_native
from ._options import normalize_options
from .sim import METRICS, SimResult

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - older Pythons
    tomllib = None  # type: ignore[assignment]

EXPERIMENT_KEYS = {
    "name": "a short title",
    "description": "free text",
    "trials": "runs per condition, each on its own seed",
    "seed": "the first trial's seed; trial t uses seed + t",
    "workers": "parallel worker processes",
    "grid": "a table of option = [values...]; every combination is a condition",
    "fixed": "a table of option = value, the same for every run",
}


class ExperimentError(FencepostError, ValueError):
    """An experiment definition that cannot be run; says which key and what is accepted."""


@dataclass(frozen=True)
class Experiment:
    """What a sweep runs: every combination of ``grid`` values, with ``fixed``
    options, ``trials`` times each on seeds ``seed``, ``seed + 1``, ..."""

    grid: Mapping[str, Sequence[Any]]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    trials: int = 5
    seed: int = 1
    name: str = "sweep"
    description: str = ""

    def conditions(self) -> list[dict[str, str]]:
        keys = list(self.grid)
        values = [list(self.grid[k]) for k in keys]
        return [dict(zip(keys, combo)) for combo in itertools.product(*values)]

    def to_toml(self) -> str:
        def value(v: Any) -> str:
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(value(x) for x in v) + "]"
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, (int, float)):
                return repr(v)
            return json.dumps(str(v))

        lines = [f"name = {json.dumps(self.name)}"]
        if self.description:
            lines.append(f"description = {json.dumps(self.description)}")
        lines += [f"trials = {self.trials}", f"seed = {self.seed}", "", "[grid]"]
        lines += [f"{k} = [{', '.join(value(v) for v in vs)}]" for k, vs in self.grid.items()]
        lines += ["", "[fixed]"]
        lines += [f"{k} = {value(v)}" for k, v in self.fixed.items()]
        return "\n".join(lines) + "\n"


def _option_name(key: str) -> str:
    return key.replace("_", "-")


def load_experiment(path: Union[str, Path]) -> tuple[Experiment, Optional[int]]:
    """Reads an experiment file (TOML); returns the experiment and its ``workers``
    setting. Unknown keys and impossible values are errors naming the key."""
    if tomllib is None:  # pragma: no cover
        raise ExperimentError("reading experiment files needs Python 3.11 or later (tomllib)")
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ExperimentError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExperimentError(f"{path}: not valid TOML: {exc}") from None
    for key in raw:
        if key not in EXPERIMENT_KEYS:
            accepted = ", ".join(EXPERIMENT_KEYS)
            raise ExperimentError(f"{path}: unknown key {key!r}; accepted: {accepted}")
    grid = raw.get("grid", {})
    fixed = raw.get("fixed", {})
    if not isinstance(grid, dict) or not grid:
        raise ExperimentError(f"{path}: [grid] must be a table of option = [values], with at least one option")
    if not isinstance(fixed, dict):
        raise ExperimentError(f"{path}: [fixed] must be a table of option = value")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ExperimentError(f"{path}: grid.{key} must be a non-empty list of values, like {key} = [\"10%\", \"20%\"]")
    trials = raw.get("trials", 5)
    seed = raw.get("seed", 1)
    workers = raw.get("workers")
    for key, v, low in (("trials", trials, 1), ("seed", seed, 0), ("workers", workers, 1)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < low):
            raise ExperimentError(f"{path}: {key} must be a whole number, at least {low} (got {v!r})")
    experiment = Experiment(
        grid={k: list(v) for k, v in grid.items()},
        fixed=dict(fixed),
        trials=trials,
        seed=seed,
        name=str(raw.get("name", Path(path).stem)),
        description=str(raw.get("description", "")),
    )
    return experiment, workers


def validate(experiment: Experiment, source: str = "sweep") -> None:
    """Checks every condition's options before anything runs."""
    for reserved in ("seed",):
        if reserved in experiment.grid or reserved in experiment.fixed:
            raise ExperimentError(f"{source}: option {reserved!r} is set by the sweep (seed + trial); set the experiment's seed instead")
    overlap = set(map(_option_name, experiment.grid)) & set(map(_option_name, experiment.fixed))
    if overlap:
        raise ExperimentError(f"{source}: {', '.join(sorted(overlap))} given both in grid and fixed")
    for condition in experiment.conditions():
        options = {**experiment.fixed, **condition, "seed": experiment.seed}
        try:
            _core.check_options("sim", normalize_options(options))
        except ValueError as exc:
            error = option_error_from_native(exc)
            where = "grid" if _option_name(error.option) in map(_option_name, experiment.grid) else "fixed"
            raise ExperimentError(f"{source}: {where}.{error.option}: {error.message}") from None


@dataclass(frozen=True)
class Task:
    key: str
    condition: dict
    trial: int
    options: list  # (option, value) pairs


_BUILD_ID: Optional[str] = None


def build_id() -> str:
    """A fingerprint of the native module: results from another build of fencepost
    are not reused, since the transport they measured may have changed."""
    global _BUILD_ID
    if _BUILD_ID is None:
        digest = hashlib.sha256(_core.__version__.encode())
        try:
            with open(_core.__file__, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        except (OSError, AttributeError):
            pass
        _BUILD_ID = digest.hexdigest()[:12]
    return _BUILD_ID


def plan(experiment: Experiment) -> list[Task]:
    """Every run of the experiment. A run's key covers its options, its seed and the
    fencepost build, so a folder's finished runs are reused only for the same run."""
    tasks = []
    build = build_id()
    for condition in experiment.conditions():
        for trial in range(experiment.trials):
            options = {**experiment.fixed, **condition, "seed": experiment.seed + trial}
            # By name, keeping the order of a name's repeated values (one per flow).
            pairs = sorted(normalize_options(options), key=lambda pair: pair[0])
            key = hashlib.sha256(json.dumps([build, pairs]).encode()).hexdigest()[:16]
            tasks.append(Task(key, {_option_name(k): _condition_text(v) for k, v in condition.items()}, trial, pairs))
    return tasks


def _condition_text(value: Any) -> str:
    """A condition's value as its column shows it: per-flow lists joined by ';', as reports join them."""
    if isinstance(value, (list, tuple)):
        return ";".join(str(v) for v in value)
    return str(value)


def _ignore_sigint() -> None:
    # Ctrl-C is the parent's to handle: it stops the pool and keeps finished rows.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_task(task: Task) -> dict:
    text = _core.simulate(task.options, None)
    # The build that ran it: an executor's workers on other machines may run another.
    return {"key": task.key, "condition": task.condition, "trial": task.trial, "build": build_id(), "result": json.loads(text)}


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    try:
        return shell is not None and type(shell.get_ipython()).__name__ == "ZMQInteractiveShell"
    except Exception:  # noqa: BLE001 - any IPython oddity means: not a notebook we can draw in
        return False


class Progress:
    """Progress of a batch of runs: a tqdm bar in a terminal or a notebook (tqdm.auto picks
    the widget there), and where neither (a log, a pipe), a line with runs done, elapsed
    and ETA every 5 s."""

    def __init__(self, total: int, label: str = "runs", stream=None, enabled: bool = True) -> None:
        self.total = max(total, 0)
        self.done = 0
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.monotonic()
        self.last_line = 0.0
        self.bar = None
        if enabled and (self.tty or _in_notebook()):
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=self.total, desc=label, unit="run", file=self.stream if self.tty else None, dynamic_ncols=True)

    @staticmethod
    def _clock(seconds: float) -> str:
        seconds = int(round(seconds))
        return f"{seconds // 60}:{seconds % 60:02d}"

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        fraction = self.done / self.total if self.total else 1.0
        width = 28
        filled = int(width * fraction)
        bar = "#" * filled + "." * (width - filled)
        eta = "?" if self.done == 0 else self._clock(elapsed / self.done * (self.total - self.done))
        return f"[{bar}] {self.done}/{self.total} {self.label} {fraction:4.0%}  elapsed {self._clock(elapsed)}  ETA {eta}"

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            self.stream.write("\r" + self.line())
            self.stream.flush()
        elif self.done == self.total or now - self.last_line >= 5.0:
            self.last_line = now
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            return
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


# Two-sided 95 % Student t quantiles by degrees of freedom.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
        20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t95(df: int) -> float:
    """The 97.5th percentile of Student's t with ``df`` degrees of freedom (conservative between table rows)."""
    if df <= 0:
        return math.nan
    if df > 120:
        return 1.960
    # Between table rows take the row below: fewer degrees of freedom, a wider interval.
    return _T95[max(b for b in _T95 if b <= df)]


# The per-flow figures a many-flow run's row carries as flow<N>_<name> columns.
PER_FLOW = ["goodput_bps", "rtt_mean_ms", "retransmissions"]
_PER_FLOW_COLUMN = re.compile(r"flow[0-9]+_(" + "|".join(PER_FLOW) + ")")


def summarize_values(values: Iterable[float]) -> tuple[float, float, float]:
    """Mean, sample standard deviation and 95 % confidence half-width."""
    xs = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    n = len(xs)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = sum(xs) / n
    if n == 1:
        return (mean, math.nan, math.nan)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return (mean, std, t95(n - 1) * std / math.sqrt(n))


def summarize(rows: Sequence[Mapping[str, Any]], condition_keys: Sequence[str], metrics: Sequence[str] = METRICS) -> list[dict]:
    """One row per condition: n runs, how many completed and how many failed, and
    mean/std/ci95 of every metric over the runs that completed (a failed run's
    figures measure the failure, not the transport; it is counted, not averaged in)."""
    per_flow = [k for k in dict.fromkeys(k for row in rows for k in row) if _PER_FLOW_COLUMN.fullmatch(k)]
    metrics = list(metrics) + [k for k in per_flow if k not in metrics]
    groups: dict[tuple, list] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in condition_keys), []).append(row)
    out = []
    for values, runs in groups.items():
        summary = dict(zip(condition_keys, values))
        completed = [r for r in runs if r.get("integrity_ok")]
        summary["n"] = len(runs)
        summary["completed"] = len(completed)
        summary["failed"] = len(runs) - len(completed)
        for metric in metrics:
            mean, std, ci = summarize_values(r.get(metric) for r in completed)
            summary[f"{metric}_mean"] = mean
            summary[f"{metric}_std"] = std
            summary[f"{metric}_ci95"] = ci
        out.append(summary)
    return out


def numeric_value(name: str, value: Any) -> Optional[float]:
    """A condition's value as a number in the option's base unit (a fraction for a
    probability, bit/s for a rate, seconds for a duration, bytes for a size), or None
    when it has no single number (a controller, a model with parameters)."""
    from ._options import _kinds

    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    kind = _kinds().get(name)
    try:
        if kind == "probability":
            return float(text[:-1]) / 100 if text.endswith("%") else float(text)
        if kind == "rate":
            return float(_core.parse_unit("rate", name, text))
        if kind == "duration":
            return _core.parse_unit("duration", name, text) / 1e6
        if kind == "size":
            return float(_core.parse_unit("size", name, text))
        if kind == "count":
            return float(int(text))
    except (ValueError, TypeError):
        return None
    return None


def with_numeric_conditions(summary: list[dict], condition_keys: Sequence[str]) -> list[dict]:
    """Adds ``<condition>_value`` beside each condition whose every value is a number
    in its unit (``loss`` 10% -> ``loss_value`` 0.1), so tables sort and plot by it."""
    numeric = []
    for key in condition_keys:
        values = [numeric_value(key, row[key]) for row in summary]
        if summary and all(v is not None for v in values):
            numeric.append((key, values))
    out = []
    for i, row in enumerate(summary):
        ordered = {k: row[k] for k in condition_keys}
        for key, values in numeric:
            ordered[f"{key}_value"] = values[i]
        ordered.update((k, v) for k, v in row.items() if k not in ordered)
        out.append(ordered)
    return out


def _flatten(record: dict) -> dict:
    """A run as one flat row: the condition as given, trial, key, then the result's
    fields. Where a result field has a condition's name (``cc``, ``arq``...), the
    condition keeps the column and the result's spelling goes to ``<name>_effective``."""
    row = dict(record["condition"])
    row["trial"] = record["trial"]
    row["key"] = record["key"]
    result = SimResult.from_dict(record["result"])
    for name, value in result.as_dict().items():
        row[f"{name}_effective" if name in record["condition"] else name] = value
    if len(result.flows) > 1:
        # Many-flow runs: each flow's own figures too, so shares can be read from the rows.
        for flow in result.flows:
            for name in PER_FLOW:
                row[f"flow{flow.flow}_{name}"] = getattr(flow, name)
    return row


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    import csv

    columns: list[str] = []
    for row in rows:
        for k in row:
            if k not in columns:
                columns.append(k)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
    os.replace(tmp, path)


@dataclass
class SweepOutcome:
    rows: list  # one dict per run of this experiment
    summary: list  # one dict per condition
    ran: int  # runs executed now
    skipped: int  # runs found already done
    interrupted: bool
    out: Optional[Path]


def run_sweep(
    experiment: Experiment,
    out: Union[str, Path, None] = None,
    workers: Optional[int] = None,
    progress: bool = True,
    on_result: Optional[Callable[[dict], None]] = None,
    label: str = "runs",
    source: str = "sweep",
    executor: Optional[concurrent.futures.Executor] = None,
) -> SweepOutcome:
    """Validates (errors name ``source``, the experiment's origin), then runs every
    task not already in ``out``; see the module doc. With ``executor`` (any
    ``concurrent.futures.Executor``: a process pool, a Dask client's
    ``get_executor()``...), the runs go to it instead of a local pool; its workers
    must run the same build of fencepost, or the sweep stops with an error."""
    validate(experiment, source)
    tasks = plan(experiment)
    wanted = {t.key for t in tasks}
    out_dir = Path(out) if out is not None else None
    done: dict[str, dict] = {}
    runs_path = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        runs_path = out_dir / "runs.jsonl"
        if runs_path.exists():
            with open(runs_path, encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by a kill; that run is simply redone
                    if record.get("key") in wanted:
                        done[record["key"]] = record
        (out_dir / "experiment.toml").write_text(experiment.to_toml(), encoding="utf-8")
    todo = [t for t in tasks if t.key not in done]
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))
    bar = Progress(len(tasks), label=label, enabled=progress)
    bar.done = len(tasks) - len(todo)
    interrupted = False
    ran = 0
    log = open(runs_path, "a", encoding="utf-8") if runs_path is not None else None

    def record(result: dict) -> None:
        nonlocal ran
        done[result["key"]] = result
        ran += 1
        if log is not None:
            log.write(json.dumps(result) + "\n")
            log.flush()
        if on_result is not None:
            on_result(result)
        bar.advance()

    try:
        if todo and executor is not None:
            futures = [executor.submit(_run_task, task) for task in todo]
            try:
                for future in concurrent.futures.as_completed(futures):
                    result = future.result()
                    if result.get("build") != build_id():
                        raise ExperimentError(f"{source}: a worker runs another build of fencepost ({result.get('build')}, "
                                              f"here {build_id()}); install the same one everywhere")
                    record(result)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        elif todo:
            if workers == 1:
                for task in todo:
                    record(_run_task(task))
            else:
                # fork: workers need nothing from __main__, so sweeps also work from
                # `python -` and notebooks; the runs share no threads with the parent.
                method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
                context = multiprocessing.get_context(method)
                pool = context.Pool(workers, initializer=_ignore_sigint)
                try:
                    for result in pool.imap_unordered(_run_task, todo):
                        record(result)
                    pool.close()
                except BaseException:
                    pool.terminate()
                    raise
                finally:
                    pool.join()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
        if log is not None:
            log.close()
    order = {t.key: i for i, t in enumerate(tasks)}
    rows = [_flatten(done[k]) for k in sorted(done, key=order.__getitem__)]
    condition_keys = [_option_name(k) for k in experiment.grid]
    summary = with_numeric_conditions(summarize(rows, condition_keys), condition_keys)
    if out_dir is not None:
        _write_csv(out_dir / "runs.csv", rows)
        _write_csv(out_dir / "summary.csv", summary)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=_json_default) + "\n", encoding="utf-8")
    return SweepOutcome(rows, summary, ran, len(tasks) - len(todo), interrupted, out_dir)


def _json_default(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    raise TypeError(f"cannot serialize {v!r}")


def sweep(
    grid: Mapping[str, Sequence[Any]],
    trials: int = 5,
    fixed: Optional[Mapping[str, Any]] = None,
    seed: int = 1,
    workers: Optional[int] = None,
    out: Union[str, Path, None] = None,
    progress: bool = True,
    executor: Optional[concurrent.futures.Executor] = None,
):
    """Runs a grid of simulated scenarios and returns a pandas DataFrame with one
    row per run (condition columns, ``trial``, then the result's fields). The
    per-condition summary is in ``df.attrs["summary"]`` (also a DataFrame).
    ``progress``: a tqdm bar in a terminal or notebook, a line every 5 s elsewhere
    (``False``: silent).
    ``executor``: run on any ``concurrent.futures`` executor instead of a local
    pool, e.g. a Dask cluster's (``distributed.Client(address).get_executor()``).

    >>> df = sweep({"loss": ["10%", "30%"], "arq": ["window", "fence"]}, trials=3,
    ...            fixed={"workload": "echo", "messages": 50})
    """
    import pandas as pd

    experiment = Experiment(grid=dict(grid), fixed=dict(fixed or {}), trials=trials, seed=seed)
    outcome = run_sweep(experiment, out=out, workers=workers, progress=progress, executor=executor)
    if outcome.interrupted:
        raise KeyboardInterrupt
    df = pd.DataFrame(outcome.rows)
    df.attrs["summary"] = pd.DataFrame(outcome.summary)
    return df


def split_values(text: str) -> list[str]:
    """Splits a comma-separated option list, keeping parameter lists such as
    ``gilbert:p=1%,r=30%`` or ``none:window=64,pacing=on`` in one piece."""
    pieces: list[str] = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        if pieces and "=" in piece and ":" not in piece and ":" in pieces[-1]:
            pieces[-1] += "," + piece
        else:
            pieces.append(piece)
    return pieces


__all__ = [
    "Experiment",
    "ExperimentError",
    "Progress",
    "SweepOutcome",
    "load_experiment",
    "plan",
    "run_sweep",
    "split_values",
    "summarize",
    "summarize_values",
    "sweep",
    "t95",
    "validate",
]
