#!/usr/bin/env python3
"""Random simulated runs, each checked: every byte delivered intact, or a clear failure.

Draws --runs configurations from one --seed (rates from 64 kbit/s to 1 Gbit/s, delays to
600 ms, random and bursty loss, jitter, duplication, corruption, small and large queues,
link events, 1-10 flows, every workload, the controllers, redundancy and packet sizes),
runs each through `fencepost sim --json` with a simulated-time bound, and prints every run
that did not deliver everything, with the command that repeats it, then the count of each
outcome. A run that the simulator refuses (exit 2) is a bug of this script's and counted
apart; one that exits otherwise, or that takes longer than --wall seconds of real time, is
reported as such. Loss-based controllers (cubic, reno) are drawn only up to 10 % loss:
beyond it they collapse, as loss-based controllers do (docs/congestion.md).

    .venv/bin/python bench/random_runs.py [--runs 200] [--seed 1] [--workers 2] [--json FILE]
"""
import argparse
import json
import os
import random
import shlex
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP = os.path.join(ROOT, ".venv", "bin", "fencepost")
TRACES = os.path.join(ROOT, "..", "shared", "traces")


def draw(r: random.Random) -> list:
    """One configuration as `fencepost sim` arguments."""
    o = {}
    cc = r.choice(["tolerant", "tolerant", "tolerant", "bbr", "cubic", "reno"])
    o["cc"] = cc
    heavy = cc in ("tolerant", "bbr")
    rate = r.choice([None, "64kbit", "500kbit", "2mbit", "10mbit", "50mbit", "200mbit", "1gbit"])
    trace = r.random() < 0.1 and os.path.isdir(TRACES)
    if trace:
        o["trace-up"] = os.path.join(TRACES, "TMobile-UMTS-driving.up")
        o["trace-down"] = os.path.join(TRACES, "TMobile-UMTS-driving.down")
    elif rate:
        o["rate"] = rate
    o["delay"] = r.choice(["0ms", "1ms", "5ms", "20ms", "80ms", "250ms", "600ms"])
    if r.random() < 0.15:
        o["loss-model"] = "gilbert:p=0.02,r=0.3,good=0.001,bad=0.5"
    elif r.random() < 0.7:
        o["loss"] = f"{r.choice([0.5, 1, 5, 10, 20, 30, 45, 60] if heavy else [0.5, 1, 2, 5, 10])}%"
    if r.random() < 0.3:
        o["jitter"] = r.choice(["1ms", "5ms", "30ms"])
        o["jitter-dist"] = r.choice(["uniform", "normal"])
    if r.random() < 0.15:
        o["dup"] = r.choice(["5%", "30%"])
    if r.random() < 0.15:
        o["corrupt"] = r.choice(["1%", "10%"])
    if r.random() < 0.3:
        o["queue"] = r.choice(["3kB", "15kB", "60kB", "500kB", "20pkt"])
    if r.random() < 0.15:
        o["event"] = r.choice(["1s:delay:100ms", "0.5s:loss:40%", "1s:blackout:2s", "2s:rate:1mbit"])
    if r.random() < 0.25:
        o["redundancy"] = r.choice(["none", "dup:0.5", "fec:rs:8/10", "fec:window:16/4", "fec:adaptive"])
    if r.random() < 0.2:
        o["packet-size"] = r.choice(["64", "200", "600", "8000"])
    if r.random() < 0.1:
        o["arq"] = "window"
    if r.random() < 0.2:
        o["flows"] = str(r.choice([2, 3, 5, 10]))
    workload = r.choice(["bulk"] * 6 + ["echo", "stream"])
    if workload == "bulk":
        o["bytes"] = r.choice(["20kB", "200kB", "1MB", "3MB"])
    elif workload == "echo":
        o["workload"], o["messages"] = "echo", "100"
    else:
        o["workload"], o["time"] = "stream", "5s"
    if r.random() < 0.1:
        o["insecure"] = None
    elif r.random() < 0.1:
        o["real-cipher"] = None
        o["cipher"] = r.choice(["aes-256-gcm", "chacha20-poly1305"])
    o["seed"] = str(r.randrange(1, 10**6))
    o["timeout"] = "900s"
    args = []
    for k, v in o.items():
        args += [f"--{k}"] + ([] if v is None else [v])
    return args


def one(job: tuple) -> dict:
    index, args, wall = job
    cmd = [FP, "sim"] + args + ["--json"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=wall)
    except subprocess.TimeoutExpired:
        return {"run": index, "args": args, "outcome": f"took over {wall:.0f} s of real time"}
    if out.returncode == 2:
        return {"run": index, "args": args, "outcome": "refused", "error": out.stderr.strip()[-300:]}
    try:
        report = json.loads(out.stdout)
    except ValueError:
        return {"run": index, "args": args, "outcome": f"exit {out.returncode}", "error": out.stderr.strip()[-300:]}
    bad = [f for f in report["flows"] if f["status"] != "ok" or not f["integrity_ok"]]
    if not bad:
        return {"run": index, "args": args, "outcome": "ok"}
    worst = bad[0]
    outcome = "wrong bytes" if any(not f["integrity_ok"] and f["bytes_delivered"] == f["bytes_expected"] for f in bad) else worst["status"]
    return {"run": index, "args": args, "outcome": outcome, "flows_failed": len(bad), "flows": len(report["flows"]), "error": worst.get("error") or ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="configurations to draw (default 200)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the draw (default 1)")
    ap.add_argument("--workers", type=int, default=2, help="runs in parallel (default 2)")
    ap.add_argument("--wall", type=float, default=300.0, help="real seconds a run may take (default 300)")
    ap.add_argument("--json", help="also write every run to this file")
    args = ap.parse_args()
    if args.runs < 1 or args.workers < 1 or args.wall <= 0:
        ap.error("--runs and --workers: whole numbers from 1; --wall: seconds above 0")
    if not os.path.exists(FP):
        sys.exit(f"{FP} is missing: run `make build` first")
    r = random.Random(args.seed)
    jobs = [(i, draw(r), args.wall) for i in range(args.runs)]
    rows = []
    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        for row in pool.map(one, jobs):
            rows.append(row)
            if row["outcome"] != "ok":
                flows = f" ({row['flows_failed']} of {row['flows']} flows)" if "flows" in row else ""
                print(f"run {row['run']}: {row['outcome']}{flows}: {row.get('error', '')[:160]}\n  fencepost sim {shlex.join(row['args'])}", flush=True)
            elif (row["run"] + 1) % 50 == 0:
                print(f"... {row['run'] + 1} of {args.runs}", file=sys.stderr, flush=True)
    counts = Counter(row["outcome"] for row in rows)
    print(f"\n{args.runs} random runs (seed {args.seed}): " + ", ".join(f"{n} {outcome}" for outcome, n in counts.most_common()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
        print(f"every run: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
