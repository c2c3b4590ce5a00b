"""What the simulated case benchmarks (shallow_buffers.py, long_paths.py) share: their
command line, running every case x controller x seed in parallel, and grouping the runs
by case and controller with the failed ones counted apart."""

import argparse
import json
import statistics
from concurrent.futures import ProcessPoolExecutor

from fencepost import sim


def parse(doc: str, time: str, seeds: str, switches: tuple = ()) -> tuple:
    """The common options (--cc, --time, --seeds, --workers, --json) with these defaults,
    and a bench's own on/off `switches` as (flag, help) pairs; returns (args, controllers,
    seeds). Bad values end with an error naming the option."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for flag, help in switches:
        ap.add_argument(flag, action="store_true", help=help)
    ap.add_argument("--cc", default="tolerant,bbr,cubic", help="controllers, comma-separated (default tolerant,bbr,cubic)")
    ap.add_argument("--time", default=time, help=f"simulated time per run (default {time})")
    ap.add_argument("--seeds", default=seeds, help=f"seeds, comma-separated (default {seeds})")
    ap.add_argument("--workers", type=int, default=2, help="runs in parallel (default 2)")
    ap.add_argument("--json", help="also write every run to this file")
    args = ap.parse_args()
    try:
        seed_list = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error("--seeds: expected whole numbers separated by commas, e.g. 1,2,3")
    ccs = [c for c in args.cc.split(",") if c]
    if not ccs:
        ap.error("--cc: expected controllers separated by commas, e.g. tolerant,bbr")
    return args, ccs, seed_list


def checked_run(row: dict, **options) -> tuple:
    """`sim.run(**options)`: (the report, None), or (None, `row` with the error) when the run
    could not finish or a flow's bytes did not check. A failed run is reported, never
    averaged in."""
    try:
        report = sim.run(**options)
    except Exception as exc:
        return None, {**row, "error": str(exc)}
    if not all(f.integrity_ok for f in report.flows):
        return None, {**row, "error": report.error or "a flow's bytes did not check"}
    return report, None


def run(one, cases: list, ccs: list, seeds: list, args) -> list:
    """`one((label, options, cc, seed, time))` for every case, controller and seed, on
    `args.workers` processes; the rows in that order."""
    jobs = [(label, options, cc, seed, args.time) for label, options in cases for cc in ccs for seed in seeds]
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        return list(pool.map(one, jobs))


def grouped(rows: list, cases: list, ccs: list):
    """(label, cc, runs that completed, how many failed, the first failure's error) per case
    and controller, in table order."""
    for label, _ in cases:
        for cc in ccs:
            runs = [r for r in rows if r["case"] == label and r["cc"] == cc]
            ok = [r for r in runs if "error" not in r]
            error = next((r["error"] for r in runs if "error" in r), "")
            yield label, cc, ok, len(runs) - len(ok), error


def print_table(rows: list, cases: list, ccs: list, case_width: int, columns: list, cells, note_partial: bool = False) -> int:
    """One line per case and controller: the header, then `cells(ok)` (one string per column of
    `columns`, (title, width) pairs) for the runs that completed, or dashes and the first error
    when none did, and the count of failed runs last (with that error too if `note_partial`).
    Returns how many runs failed."""
    heads = " ".join(f"{title:>{width}s}" for title, width in columns)
    print(f"{'case':{case_width}s} {'cc':9s} {heads}  failed")
    failed = 0
    for label, cc, ok, bad, error in grouped(rows, cases, ccs):
        failed += bad
        if not ok:
            dashes = " ".join(f"{'-':>{width}s}" for _, width in columns)
            print(f"{label:{case_width}s} {cc:9s} {dashes}  {bad} ({error[:60]})")
            continue
        values = " ".join(f"{value:>{width}s}" for value, (_, width) in zip(cells(ok), columns))
        note = f" ({error[:60]})" if note_partial and bad else ""
        print(f"{label:{case_width}s} {cc:9s} {values}  {bad}{note}")
    return failed


def spread(values: list, digits: int) -> str:
    """The median with the range beside it: "median (min-max)", to `digits` decimals."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def write_json(rows: list, path) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
