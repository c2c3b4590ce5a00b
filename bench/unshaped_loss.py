#!/usr/bin/env python3
"""Goodput kept under random loss on an unshaped namespace path.

Two network namespaces joined by a veth pair with no shaper (the lab's `--impair
iptables`: statistic-match drop, here with no rate), fencepost sending for --time,
at 0 % and at --loss random drop each way, --trials runs each. Prints the median
goodput at the receiver for each loss and the share of the loss-free figure kept;
failed runs are shown and counted, not averaged in. Needs root.

    python3 bench/unshaped_loss.py [--loss 10%] [--time 5s] [--trials 3] [--transport fencepost]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP = os.path.join(ROOT, ".venv", "bin", "fencepost")


def runs(loss: str, args) -> list:
    cmd = [FP, "lab", "run", "--impair", "iptables", "--loss", loss, "--time", args.time,
           "--transport", args.transport, "--trials", str(args.trials), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        sys.exit(f"lab run failed ({' '.join(cmd)}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loss", default="10%")
    ap.add_argument("--time", default="5s")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--transport", default="fencepost", help="as `fencepost lab run --transport` (one)")
    args = ap.parse_args()
    if not os.path.exists(FP):
        sys.exit("run 'make build' first")
    medians = {}
    for loss in ("0%", args.loss):
        rows = runs(loss, args)
        ok = [r for r in rows if r["status"] == "ok" and r["integrity_ok"]]
        rates = [r["goodput_bps"] / 1e6 for r in ok]
        medians[loss] = statistics.median(rates) if rates else None
        shown = ", ".join(f"{x:.0f}" for x in rates)
        # How many data packets each packet from the receiver (its acks) answered: large
        # stretches starve the sender of news when acks are lost.
        stretch = ", ".join(f"{r['data_packets_sent'] / r['peer_packets_sent']:.0f}" for r in ok if r.get("peer_packets_sent"))
        print(f"{args.transport} at {loss:>4} drop: median {medians[loss] or float('nan'):8.1f} Mbit/s  (runs: {shown}; failed {len(rows) - len(ok)} of {len(rows)}; data packets per receiver packet: {stretch})")
        for r in rows:
            if r not in ok:
                print(f"  failed run: {r['status']} {r.get('error')}")
    if medians["0%"] and medians[args.loss]:
        print(f"kept at {args.loss} drop: {medians[args.loss] / medians['0%']:.0%} of the loss-free goodput (target >= 70%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
