"""One flow over a long lossy path, where a hole's round trip, not the link, can set the rate.

Each case runs every controller named by --cc (default tolerant, bbr, cubic) for --time (20 s)
over each seed and prints the goodput (median, min and max over the seeds), the retransmission
timeouts and the failed runs (shown and counted, never averaged in). These are the paths the
README quotes for the receive window that grows with the holes in it (docs/protocol.md,
"Receive window"): with the buffers fixed at 16 MB the window, not the path, held them.

    .venv/bin/python bench/long_paths.py [--cc tolerant,bbr] [--time 20s] [--seeds 1,2] [--json out.json]
"""

import sys

import sim_cases

# (label, options): the queue holds more than any product here, so loss is the path's alone.
CASES = [
    ("1 Gbit/s x 100 ms, 1 % loss", {"rate": "1gbit", "delay": "50ms", "loss": "1%"}),
    ("1 Gbit/s x 100 ms, 5 % loss", {"rate": "1gbit", "delay": "50ms", "loss": "5%"}),
    ("1 Gbit/s x 100 ms, 20 % loss", {"rate": "1gbit", "delay": "50ms", "loss": "20%"}),
    ("500 Mbit/s x 200 ms, 2 % loss", {"rate": "500mbit", "delay": "100ms", "loss": "2%"}),
    ("200 Mbit/s x 300 ms, 10 % loss", {"rate": "200mbit", "delay": "150ms", "loss": "10%"}),
    ("100 Mbit/s x 600 ms, 5 % loss", {"rate": "100mbit", "delay": "300ms", "loss": "5%"}),
]


def one(job: tuple) -> dict:
    label, options, cc, seed, time = job
    row = {"case": label, "cc": cc, "seed": seed}
    r, failed = sim_cases.checked_run(row, queue="20MB", time=time, cc=cc, seed=seed, **options)
    if failed:
        return failed
    flow = r.flows[0]
    return {**row, "goodput_mbps": flow.goodput_bps / 1e6, "retransmission_timeouts": flow.retransmission_timeouts}


def main() -> int:
    args, ccs, seeds = sim_cases.parse(__doc__, time="20s", seeds="1,2")
    rows = sim_cases.run(one, CASES, ccs, seeds, args)
    print(f"simulated, one flow, {args.time} per run, seeds {args.seeds}, a 20 MB queue; goodput at the receiver")

    def cells(ok: list) -> list:
        timeouts = "/".join(str(r["retransmission_timeouts"]) for r in ok)
        return [sim_cases.spread([r["goodput_mbps"] for r in ok], 1), timeouts]

    failed = sim_cases.print_table(rows, CASES, ccs, 32, [("goodput Mbit/s (median, min-max)", 34), ("timeouts", 9)], cells)
    sim_cases.write_json(rows, args.json)
    print(f"failed runs: {failed} of {len(rows)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
