"""What a congestion controller written in Python costs the simulator: the same
runs with the built-in Tahoe and with examples/controllers.py's Tahoe (the same
algorithm, called from Rust once per ack), 3 repetitions each, min/median/max
wall time and the ratio. Run: .venv/bin/python bench/python_controller.py"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import fencepost  # noqa: E402
from controllers import Tahoe  # noqa: E402

SCENARIO = dict(rate="100mbit", delay="20ms", loss="0.1%", queue="1MB", time="30s", seed=1)


def timed(cc) -> tuple[list[float], "fencepost.SimResult"]:
    walls, result = [], None
    for _ in range(3):
        started = time.perf_counter()
        result = fencepost.sim.run(cc=cc, **SCENARIO)
        walls.append(time.perf_counter() - started)
    return walls, result


def main() -> None:
    print("scenario:", ", ".join(f"{k} {v}" for k, v in SCENARIO.items()))
    rows = {}
    for label, cc in [("built-in tahoe (Rust)", "tahoe:pacing=off"), ("examples/controllers.py Tahoe", Tahoe)]:
        walls, r = timed(cc)
        rows[label] = statistics.median(walls)
        acks = r.acks_received
        print(f"{label:32} wall min/median/max {min(walls):.3f}/{statistics.median(walls):.3f}/{max(walls):.3f} s, "
              f"{r.end_s / statistics.median(walls):6.1f}x real time, {acks:,} acks, goodput {r.goodput_bps / 1e6:.2f} Mbit/s")
    built_in, python = rows.values()
    print(f"Python / Rust wall time: {python / built_in:.1f}x")


if __name__ == "__main__":
    main()
