"""The lab emulator's fidelity, measured from outside it (as root):

- delay: ping RTT through a 10 ms link, against 2 x delay (target: p99 within 0.2 ms);
- loss: 100,000 UDP datagrams at 10 % Bernoulli loss, counted by iperf3's receiver (target: within 1 point);
- capacity: a trace link flooded with UDP, bytes at the receiver against the trace (target: within 2 %);
- speed: iperf3 TCP through the unimpaired emulator, beside the same namespaces with the
  router's kernel forwarding (iptables method, nothing set) in the same run (target: >= 1 Gbit/s).

Usage: python bench/lab_fidelity.py [--trace FILE] [--seconds N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from fencepost import _core, lab


def iperf(L: lab.Lab, args: list[str], seconds: float) -> dict:
    server = L.spawn("server", ["iperf3", "-s", "-1", "-J", "-B", "10.0.2.1"], label="iperf3 server")
    time.sleep(0.3)
    client = subprocess.run(["ip", "netns", "exec", L.ns("client"), "iperf3", "-c", "10.0.2.1", "-J", *args],
                            capture_output=True, text=True, timeout=seconds + 60)
    server.finish(30)
    if client.returncode != 0:
        raise SystemExit(f"iperf3 failed: {client.stdout[-500:]} {client.stderr[-500:]}")
    return json.loads("\n".join(server.stdout))


def stop(p: lab.Process) -> dict:
    p.stop(grace=10)
    return p.json_lines()[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", help="a mahimahi trace for the capacity check (default: a generated 20 Mbit/s Poisson trace, 1 s period)")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of the speed runs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: dict = {}

    with lab.Lab("line") as L:
        # Delay.
        emu = L.impair_link([("delay", "10ms")], seed=1)
        ping = subprocess.run(["ip", "netns", "exec", L.ns("client"), "ping", "-n", "-c", "1000", "-i", "0.005", "10.0.2.1"],
                              capture_output=True, text=True, timeout=120)
        report = stop(emu)
        rtts = sorted(float(t.split("=")[1]) for line in ping.stdout.splitlines() for t in line.split() if t.startswith("time="))
        q = lambda p: rtts[min(len(rtts) - 1, int(p * len(rtts)))]  # noqa: E731
        out["ping"] = {"target_ms": 20.0, "n": len(rtts), "min": rtts[0], "p50": q(0.5), "p99": q(0.99), "max": rtts[-1],
                       "emulator_lateness_p99_us": [report["up"]["lateness_p99_us"], report["down"]["lateness_p99_us"]],
                       "emulator_read_delay_p99_us": [report["up"]["read_delay_p99_us"], report["down"]["read_delay_p99_us"]],
                       "ok": abs(q(0.99) - 20.0) <= 0.2 and abs(rtts[0] - 20.0) <= 0.2}

        # Loss.
        emu = L.impair_link([("delay", "1ms"), ("loss-up", "10%"), ("loss-down", "0")], seed=2)
        # A 4 MB socket buffer at the receiver: a busy machine must not add drops of its own there.
        got = iperf(L, ["-u", "-b", "40M", "-l", "172", "-k", "100000", "-w", "4M"], 10)["end"]["sum"]
        report = stop(emu)
        measured = got["lost_packets"] / got["packets"]
        snmp = subprocess.run(["ip", "netns", "exec", L.ns("server"), "cat", "/proc/net/snmp"], capture_output=True, text=True).stdout
        udp = [line.split() for line in snmp.splitlines() if line.startswith("Udp:")]
        rcvbuf_errors = int(dict(zip(udp[0], udp[1]))["RcvbufErrors"]) if len(udp) == 2 else None
        out["loss"] = {"setting": 0.10, "packets": got["packets"], "measured_at_receiver": measured,
                       "emulator_count": report["up"]["stats"]["lost"] / report["up"]["stats"]["offered"],
                       "emulator_kernel_drops": report["up"]["kernel_drops"], "emulator_send_errors": report["up"]["send_errors"],
                       "receiver_rcvbuf_errors": rcvbuf_errors, "ok": abs(measured - 0.10) <= 0.01}

        # Capacity.
        if args.trace:
            path = args.trace
            text = open(path).read()
        else:
            text = _core.generate_trace("poisson", 20_000_000, 1000, 7)
            generated = tempfile.NamedTemporaryFile("w", prefix=f"{L.id}-", suffix=".trace", delete=False)
            with generated:
                generated.write(text)
            path = generated.name
        times = [int(t) for t in text.split()]
        period_ms = times[-1]
        window_s = max(1, 5000 // period_ms) * period_ms / 1000 if period_ms <= 5000 else period_ms / 1000
        capacity = len(times) * 1504 * (window_s * 1000 / period_ms)
        mean_bps = len(times) * 1504 * 8 / (period_ms / 1000)
        emu = L.impair_link([("delay", "1ms"), ("trace-up", path), ("queue-up", "300pkt")], seed=3)
        flood = f"{int(mean_bps * 1.5)}"
        intervals = iperf(L, ["-u", "-b", flood, "-l", "1472", "-t", str(int(window_s) + 4)], window_s + 4)["intervals"]
        stop(emu)
        if not args.trace:
            os.unlink(path)
        window = [i["sum"] for i in intervals[2:2 + int(window_s)]]
        ip_bytes = sum(s["bytes"] + s["packets"] * 28 for s in window)
        out["capacity"] = {"trace_mean_mbit": mean_bps / 1e6, "window_s": window_s, "receiver_ip_bytes": ip_bytes, "trace_bytes": capacity,
                           "ratio": ip_bytes / capacity, "ok": abs(ip_bytes / capacity - 1) <= 0.02}

        # Speed through the emulator.
        emu = L.impair_link([("delay", "0")], seed=4)
        through = iperf(L, ["-t", str(int(args.seconds))], args.seconds)["end"]["sum_received"]["bits_per_second"]
        report = stop(emu)
        out["speed"] = {"emulator_gbit": through / 1e9, "kernel_drops": report["up"]["kernel_drops"] + report["down"]["kernel_drops"]}
    with lab.Lab("line", "iptables") as L:
        L.impair_link([("delay", "0")])
        forwarded = iperf(L, ["-t", str(int(args.seconds))], args.seconds)["end"]["sum_received"]["bits_per_second"]
    out["speed"].update(kernel_forwarding_gbit=forwarded / 1e9, ratio=through / forwarded, ok=through >= 1e9)

    if args.json:
        print(json.dumps(out, indent=1))
    else:
        p = out["ping"]
        print(f"delay    ping RTT through 2 x 10 ms: min {p['min']:.3f}  p50 {p['p50']:.3f}  p99 {p['p99']:.3f}  max {p['max']:.3f} ms "
              f"(n={p['n']}; emulator lateness p99 {p['emulator_lateness_p99_us']} us, read delay p99 {p['emulator_read_delay_p99_us']} us)  {'OK' if p['ok'] else 'OFF'} (p99 within 0.2 ms)")
        l = out["loss"]
        print(f"loss     10 % setting: receiver saw {l['measured_at_receiver'] * 100:.3f} % of {l['packets']:,} datagrams "
              f"(emulator counted {l['emulator_count'] * 100:.3f} %; frames the emulator's socket missed {l['emulator_kernel_drops']}, "
              f"send errors {l['emulator_send_errors']}, receiver buffer overflows {l['receiver_rcvbuf_errors']})  {'OK' if l['ok'] else 'OFF'} (within 1 point)")
        c = out["capacity"]
        print(f"capacity trace {c['trace_mean_mbit']:.2f} Mbit/s over {c['window_s']:.0f} s: receiver {c['receiver_ip_bytes']:,} B, "
              f"trace {c['trace_bytes']:,.0f} B, ratio {c['ratio']:.4f}  {'OK' if c['ok'] else 'OFF'} (within 2 %)")
        s = out["speed"]
        print(f"speed    iperf3 TCP through the emulator {s['emulator_gbit']:.2f} Gbit/s; kernel forwarding in the same run "
              f"{s['kernel_forwarding_gbit']:.2f} Gbit/s (ratio {s['ratio']:.2f}); kernel drops {s['kernel_drops']}  {'OK' if s['ok'] else 'OFF'} (>= 1 Gbit/s)")
    return 0 if all(v["ok"] for v in out.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
