"""Small transfers over slow links, where one full-sized packet takes a second or more to cross.

Each case sends its bytes with every controller named by --cc (default tolerant, bbr, cubic)
over each seed and prints how long the transfer took (median, min and max over the seeds),
the packets sent more than once, the retransmission timeouts, and the failed runs (stalled
or cut off by --time, shown and counted, never averaged in). On such links the round trip
grows to tens of seconds behind the queue; these are the cases for the retransmission
timeout that never cuts below the round trip (docs/protocol.md, "RTT samples").

    .venv/bin/python bench/slow_links.py [--cc tolerant,bbr] [--time 600s] [--seeds 1,2,3] [--json out.json]

--time bounds the simulated time of each run (a transfer not done by then counts as failed).
"""

import sys

import sim_cases

# (label, options): the default unlimited queue, as a modem or radio link's buffer often is.
CASES = [
    ("50 kB, 10 kbit/s x 100 ms", {"bytes": "50kB", "rate": "10kbit", "delay": "50ms"}),
    ("50 kB, 10 kbit/s x 600 ms, 20 %", {"bytes": "50kB", "rate": "10kbit", "delay": "300ms", "loss": "20%"}),
    ("30 kB, 10 kbit/s x 600 ms, 30 %", {"bytes": "30kB", "rate": "10kbit", "delay": "300ms", "loss": "30%"}),
    ("20 kB, 9.6 kbit/s x 500 ms, 5 %", {"bytes": "20kB", "rate": "9600bit", "delay": "250ms", "loss": "5%"}),
    ("100 kB, 32 kbit/s x 600 ms, 10 %", {"bytes": "100kB", "rate": "32kbit", "delay": "300ms", "loss": "10%"}),
    ("20 kB, 20 kbit/s x 2 s", {"bytes": "20kB", "rate": "20kbit", "delay": "1s"}),
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
    return {**row, "seconds": flow.duration_s, "retransmissions": flow.retransmissions, "retransmission_timeouts": flow.retransmission_timeouts}


def main() -> int:
    args, ccs, seeds = sim_cases.parse(__doc__, time="600s", seeds="1,2,3")
    rows = sim_cases.run(one, CASES, ccs, seeds, args)
    print(f"simulated, one flow, seeds {args.seeds}, at most {args.time} each; time to deliver every byte")

    def cells(ok: list) -> list:
        resent = "/".join(str(r["retransmissions"]) for r in ok)
        timeouts = "/".join(str(r["retransmission_timeouts"]) for r in ok)
        return [sim_cases.spread([r["seconds"] for r in ok], 1), resent, timeouts]

    columns = [("seconds (median, min-max)", 27), ("resent", 9), ("timeouts", 9)]
    failed = sim_cases.print_table(rows, CASES, ccs, 34, columns, cells, note_partial=True)
    sim_cases.write_json(rows, args.json)
    print(f"failed runs: {failed} of {len(rows)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
