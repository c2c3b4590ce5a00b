"""Several flows through a buffer far shallower than the path's bandwidth-delay product, simulated.

Each case runs every controller named by --cc (default tolerant, bbr, cubic) on the same dumbbell
for --time (30 s) and prints the flows' aggregate goodput, Jain's index over their goodputs, and
the share of the data packets they sent that were retransmissions (overflow the senders caused).
Failed runs are shown and counted, never averaged in. The cases are the ones docs/congestion.md
quotes for `tolerant`'s shallow-buffer behaviour; a path with no jitter locks drop-tail losses to
the flows' packet phases, so two cases repeat with 0.1 and 0.3 ms of jitter.

    .venv/bin/python bench/shallow_buffers.py [--cc tolerant,bbr] [--time 30s] [--seeds 1,2] [--json out.json]
"""

import sys

import sim_cases

# (label, options): 100 Mbit/s x 20 ms each way is a 500 kB product; 15 kB holds 1.2 ms of it.
CASES = [
    ("2 flows, 100 Mbit/s, 20 kB", {"flows": 2, "rate": "100mbit", "queue": "20kB"}),
    ("4 flows, 100 Mbit/s, 15 kB", {"flows": 4, "rate": "100mbit", "queue": "15kB"}),
    ("8 flows, 100 Mbit/s, 15 kB", {"flows": 8, "rate": "100mbit", "queue": "15kB"}),
    ("8 flows, 100 Mbit/s, 15 kB, 0.1 ms jitter", {"flows": 8, "rate": "100mbit", "queue": "15kB", "jitter": "0.1ms"}),
    ("8 flows, 100 Mbit/s, 15 kB, 0.3 ms jitter", {"flows": 8, "rate": "100mbit", "queue": "15kB", "jitter": "0.3ms"}),
    ("8 flows, 100 Mbit/s, 60 kB", {"flows": 8, "rate": "100mbit", "queue": "60kB"}),
    ("4 flows, 100 Mbit/s, 30 kB, 5 % loss", {"flows": 4, "rate": "100mbit", "queue": "30kB", "loss": "5%"}),
    ("4 flows, 50 Mbit/s, 30 kB", {"flows": 4, "rate": "50mbit", "queue": "30kB"}),
    ("8 flows, 20 Mbit/s, 25 kB", {"flows": 8, "rate": "20mbit", "queue": "25kB"}),
]


def one(job: tuple) -> dict:
    label, options, cc, seed, time = job
    row = {"case": label, "cc": cc, "seed": seed}
    r, failed = sim_cases.checked_run(row, delay="20ms", time=time, cc=cc, seed=seed, **options)
    if failed:
        return failed
    sent = sum(f.data_packets_sent for f in r.flows)
    resent = sum(f.retransmissions for f in r.flows)
    return {
        **row,
        "aggregate_mbps": sum(f.goodput_bps for f in r.flows) / 1e6,
        "jain": r.jain_index if r.jain_index is not None else 1.0,
        "retransmitted_share": resent / sent if sent else 0.0,
        "flows_mbps": [f.goodput_bps / 1e6 for f in r.flows],
    }


def main() -> int:
    args, ccs, seeds = sim_cases.parse(__doc__, time="30s", seeds="1")
    rows = sim_cases.run(one, CASES, ccs, seeds, args)
    print(f"simulated, 20 ms each way, {args.time} per run, seeds {args.seeds}; retransmitted = share of data packets sent again")

    def cells(ok: list) -> list:
        agg = " ".join(f"{r['aggregate_mbps']:.1f}" for r in ok)
        jain = " ".join(f"{r['jain']:.2f}" for r in ok)
        return [agg, jain, " ".join(f"{100 * r['retransmitted_share']:.1f}%" for r in ok)]

    failed = sim_cases.print_table(rows, CASES, ccs, 44, [("aggregate Mbit/s", 17), ("Jain", 6), ("retransmitted", 14)], cells)
    sim_cases.write_json(rows, args.json)
    if args.json:
        print(f"every run: {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
