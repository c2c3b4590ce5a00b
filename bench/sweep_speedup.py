"""Sweep parallelism: the same 40-run grid on 1 worker and on 2, timed in one run.
Target: 2 workers take at most 0.65 x the time of 1. Run: .venv/bin/python bench/sweep_speedup.py"""

import sys
import tempfile
import time

from fencepost.sweep import Experiment, run_sweep


def main() -> int:
    experiment = Experiment(
        grid={"loss": ["5%", "10%", "20%", "30%"], "arq": ["window", "fence"]},
        fixed={"bytes": "40MB", "delay": "10ms", "rate": "100mbit"},
        trials=5,
    )
    times = {}
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as out:
            started = time.perf_counter()
            outcome = run_sweep(experiment, out=out, workers=workers, progress=False)
            times[workers] = time.perf_counter() - started
            assert outcome.ran == 40 and all(r["integrity_ok"] for r in outcome.rows)
        print(f"{workers} worker{'s' if workers > 1 else ''}: 40 runs in {times[workers]:.2f} s")
    ratio = times[2] / times[1]
    print(f"2 workers / 1 worker = {ratio:.2f} (target <= 0.65)")
    return 0 if ratio <= 0.65 else 1


if __name__ == "__main__":
    sys.exit(main())
