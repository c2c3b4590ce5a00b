"""Bulk transfers whose acks come back over a far narrower path than the data goes out.

Each case sends its bytes with every controller named by --cc (default tolerant, bbr,
cubic) over each seed and prints the goodput (median, min and max over the seeds), the
acks the receiver sent, the sender's trials of sparser acks and how many it kept, and the
failed runs (shown and counted, never averaged in). With --grid it also runs 30 paths
(20 and 50 Mbit/s out; 64, 96, 128, 256 and 512 kbit/s back; 10, 20 and 40 ms each way)
and prints each controller's goodput over them (one seed). The figures in docs/congestion.md
("Narrower still: sparser acks on trial") come from these cases; runs without loss give
the same bytes on every seed.

    .venv/bin/python bench/narrow_return.py [--cc tolerant,bbr] [--seeds 1,2] [--grid] [--json out.json]

--time bounds the simulated time of each run (a transfer not done by then counts as failed).
"""

import itertools
import math
import statistics
import sys

import sim_cases

# (label, options): 20 Mbit/s out, 20 ms each way, 1 MB queues unless a case says otherwise.
PATH = {"rate_up": "20mbit", "delay": "20ms", "queue": "1MB"}
CASES = [
    ("10 MB, 1 Mbit/s back", {**PATH, "bytes": "10MB", "rate_down": "1mbit"}),
    ("10 MB, 256 kbit/s back", {**PATH, "bytes": "10MB", "rate_down": "256kbit"}),
    ("10 MB, 128 kbit/s back", {**PATH, "bytes": "10MB", "rate_down": "128kbit"}),
    ("10 MB, 64 kbit/s back", {**PATH, "bytes": "10MB", "rate_down": "64kbit"}),
    # Acks of about 100 bytes on the wire: 1 kB back holds ten, and the rest are dropped.
    ("10 MB, 64 kbit/s back, 1 kB queue", {**PATH, "bytes": "10MB", "rate_down": "64kbit", "queue_down": "1kB"}),
    ("10 MB, 128 kbit/s back, 1 % loss", {**PATH, "bytes": "10MB", "rate_down": "128kbit", "loss": "1%"}),
    ("5 MB, 10M out, 64k back, 300 ms", {"bytes": "5MB", "rate_up": "10mbit", "rate_down": "64kbit", "delay": "300ms", "queue": "1MB"}),
]

GRID = [
    (f"{up} out, {down} back, {delay}", {"bytes": "10MB", "rate_up": up, "rate_down": down, "delay": delay, "queue": "1MB"})
    for up, down, delay in itertools.product(["20mbit", "50mbit"], ["64kbit", "96kbit", "128kbit", "256kbit", "512kbit"], ["10ms", "20ms", "40ms"])
]


def one(job: tuple) -> dict:
    label, options, cc, seed, time = job
    row = {"case": label, "cc": cc, "seed": seed}
    r, failed = sim_cases.checked_run(row, timeout=time, cc=cc, seed=seed, **options)
    if failed:
        return failed
    flow = r.flows[0]
    if flow.status != "ok":
        return {**row, "error": f"{flow.status}: {flow.error or ''}"}
    return {
        **row,
        "mbit_per_s": flow.goodput_bps / 1e6,
        "acks": flow.peer_acks_sent,
        "trials": flow.sparser_ack_trials,
        "kept": flow.sparser_ack_trials_kept,
    }


def main() -> int:
    args, ccs, seeds = sim_cases.parse(__doc__, time="600s", seeds="1,2", switches=[("--grid", f"also run {len(GRID)} paths, one seed")])
    rows = sim_cases.run(one, CASES, ccs, seeds, args)
    print(f"simulated, one flow, seeds {args.seeds}, at most {args.time} each; goodput at the receiver")

    def cells(ok: list) -> list:
        acks = statistics.median(r["acks"] for r in ok)
        trials = "/".join(f"{r['trials']}:{r['kept']}" for r in ok)
        return [sim_cases.spread([r["mbit_per_s"] for r in ok], 2), f"{acks:.0f}", trials]

    columns = [("Mbit/s (median, min-max)", 26), ("acks", 7), ("trials/kept", 12)]
    failed = sim_cases.print_table(rows, CASES, ccs, 36, columns, cells, note_partial=True)
    if args.grid:
        grid_rows = sim_cases.run(one, GRID, ccs, seeds[:1], args)
        rows += grid_rows
        print(f"\n{len(GRID)} paths (seed {seeds[0]}): goodput, Mbit/s")
        for cc in ccs:
            done = [r for r in grid_rows if r["cc"] == cc and "error" not in r]
            bad = sum(1 for r in grid_rows if r["cc"] == cc and "error" in r)
            failed += bad
            if done:
                geomean = math.exp(sum(math.log(r["mbit_per_s"]) for r in done) / len(done))
                low = min(done, key=lambda r: r["mbit_per_s"])
                print(f"  {cc:9s} geomean {geomean:.2f}, lowest {low['mbit_per_s']:.2f} ({low['case']}), kept trials in {sum(1 for r in done if r['kept'])} of {len(done)}; failed {bad}")
            else:
                print(f"  {cc:9s} every run failed ({bad})")
    sim_cases.write_json(rows, args.json)
    print(f"failed runs: {failed} of {len(rows)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
