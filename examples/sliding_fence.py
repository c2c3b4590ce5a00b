"""The sliding-fence experiment from Python, in a few lines: sweep drop rates
for window and fence, print the summary, save a plot, and look at one run's
packets. Run: .venv/bin/python examples/sliding_fence.py [OUT_DIR]"""

import sys
from pathlib import Path

import fencepost
from fencepost import plot, sim
from fencepost.events import read_events


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "sliding-fence-example")
    df = fencepost.sweep(
        {"loss": ["10%", "30%", "50%"], "arq": ["window", "fence"]},
        trials=3,
        fixed={"workload": "echo", "profile": "seed", "delay": "100us"},
        out=out / "sweep",
    )
    summary = df.attrs["summary"]
    print(summary[["loss", "arq", "n", "packets_sent_mean", "packets_sent_ci95", "duration_s_mean"]].to_string(index=False))
    plot.save(plot.metric_vs_condition(summary, "loss", "packets_sent", variant="arq"), out / "packets-vs-loss")

    # One run with its per-packet event log, drawn as a time-sequence plot.
    result = sim.run(events=str(out / "fence-30.jsonl"), workload="echo", messages=100, loss="30%", delay="20ms", seed=1)
    print(f"one run: {result.packets_sent} packets sent, {result.retransmissions} retransmissions, integrity {result.integrity_ok}")
    plot.save(plot.time_sequence(read_events(out / "fence-30.jsonl")), out / "time-sequence")
    print(f"plots and data in {out.resolve()}")


if __name__ == "__main__":  # the sweep's worker processes import this file
    main()
