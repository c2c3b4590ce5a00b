#!/usr/bin/env python3
"""fencepost, quinn, kernel TCP and plain UDP on loopback, measured in one run.

Bulk: one connection moves BYTES (default 1 GB) from a client process to a server
process; the rate is bytes over the time from the connection being up to the sink's
byte count coming back, and the CPU is both processes' user + system time per GB.
Connections: fencepost's aggregate over 1 and over --connections (100) concurrent
connections from one client to one server, with the retransmissions (none are
needed: loopback loses nothing unless a socket buffer overflows) and both ends' CPU
per GB; kernel TCP over the same counts (a thread per connection on each side),
interleaved with them, as a peer for the ratio. Every count, one included, is timed
alike here: from the first connect to the last connection's end, handshakes and
closes included.
Ping-pong: 64-byte messages, one in flight, ROUND_TRIPS times; p50 and p99.
Every case runs --reps times (default 3), interleaved, and prints min / median / max;
a failed run is shown and counted, never averaged in. --json FILE writes every figure.

    python3 bench/peers.py [--bytes 1000000000] [--reps 3] [--round-trips 10000] [--json out.json]

The peers are one Rust program (bench/peers, built here on demand) so every transport
runs under the same harness; fencepost's side is the library `fencepost serve`/`send` use.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
PEERS = os.path.join(TARGET, "release", "fencepost-peers")

# (label, proto, extra flags for both ends)
BULK = [
    ("fencepost", "fencepost", []),
    ("fencepost --no-verify", "fencepost", ["--no-verify"]),
    ("fencepost --no-verify --insecure", "fencepost", ["--no-verify", "--insecure"]),
    ("quinn", "quinn", []),
    ("kernel TCP", "tcp", []),
    ("plain UDP", "udp", []),
]
PINGPONG = [
    ("fencepost", "fencepost", []),
    # The driver as a task on the application's runtime (DriverPlacement::Task): one
    # thread wake-up per received packet instead of two.
    ("fencepost --driver task", "fencepost", ["--driver", "task"]),
    # Both on one thread: the application's, the kernel wakes only it (TCP's and plain UDP's
    # peers are blocking threads, which is the same shape).
    ("fencepost --driver task, current-thread runtime", "fencepost", ["--driver", "task", "--runtime", "current"]),
    # The blocking endpoint (fencepost_net::blocking): no driver, the read that waits
    # sleeps on an io_uring receive (one system call per wake-up) and does the driver's
    # work when it wakes ...
    ("fencepost --driver inline (blocking endpoint)", "fencepost", ["--driver", "inline"]),
    # ... or in epoll_pwait2, then a receive (two calls), as where io_uring is missing.
    ("fencepost --driver inline --wait epoll", "fencepost", ["--driver", "inline", "--wait", "epoll"]),
    # ... busy polling for up to 50 us before sleeping: no sleep and no wake-up per reply,
    # but a core kept busy on each side while it waits (not what the TCP peer does).
    ("fencepost --driver inline --busy-poll-us 50 (spins)", "fencepost", ["--driver", "inline", "--busy-poll-us", "50"]),
    ("quinn", "quinn", []),
    ("quinn, current-thread runtime", "quinn", ["--runtime", "current"]),
    ("kernel TCP (TCP_NODELAY)", "tcp", []),
    ("plain UDP", "udp", []),
]


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_bound(port: int, proto: str, server: subprocess.Popen, deadline: float) -> bool:
    """Waits until a socket of this host holds `port` (a listening one for TCP), as the
    kernel lists them in /proc/net; False if the server exits or the deadline passes."""
    tables = ["/proc/net/tcp", "/proc/net/tcp6"] if proto == "tcp" else ["/proc/net/udp", "/proc/net/udp6"]
    wanted = f":{port:04X}"
    while time.time() < deadline and server.poll() is None:
        for table in tables:
            try:
                with open(table) as f:
                    rows = [line.split() for line in f.readlines()[1:]]
            except OSError:
                continue
            # Columns: sl, local_address, rem_address, st (0A: TCP's LISTEN), ...
            if any(r[1].endswith(wanted) and (proto != "tcp" or r[3] == "0A") for r in rows if len(r) > 3):
                return True
        time.sleep(0.01)
    return False


def one_run(proto: str, flags: list, client_args: list, timeout: float) -> dict:
    """Server and client for one case; returns both JSON reports or {'error': ...}."""
    port = free_port(socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM)
    addr = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        cert = ["--cert", os.path.join(tmp, "cert.der")] if proto == "quinn" else []
        server = subprocess.Popen([PEERS, "server", proto, addr] + flags + cert + (["--echo"] if "--pingpong" in client_args else []),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 5
            while proto == "quinn" and not os.path.exists(cert[1]) and time.time() < deadline:
                time.sleep(0.02)
            # The server binds before the client's first packet: a fencepost client is
            # refused at once where nothing listens yet, as a TCP one is.
            if not wait_bound(port, proto, server, deadline=time.time() + 10):
                server.kill()
                _, err = server.communicate()
                return {"error": f"the server never bound {addr}: {err.strip()[-300:]}"}
            client = subprocess.run([PEERS, "client", proto, addr] + flags + cert + client_args,
                                    capture_output=True, text=True, timeout=timeout)
            out, err = server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
            return {"error": f"timed out after {timeout:.0f} s"}
        finally:
            if server.poll() is None:
                server.kill()
                server.communicate()
    if client.returncode != 0 or server.returncode != 0:
        return {"error": (client.stderr.strip() or err.strip() or f"exit {client.returncode}/{server.returncode}")[-300:]}
    return {"client": json.loads(client.stdout.strip().splitlines()[-1]), "server": json.loads(out.strip().splitlines()[-1])}


def spread(values: list) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)} if values else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bytes", type=int, default=1_000_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--round-trips", type=int, default=10_000)
    ap.add_argument("--connections", type=int, default=100, help="concurrent connections in the many-connection case")
    ap.add_argument("--only", choices=["bulk", "connections", "pingpong"], help="run one part")
    ap.add_argument("--json", metavar="FILE", help="write every figure here")
    args = ap.parse_args()
    print("building bench/peers (quinn, rustls; first time takes a minute) ...", file=sys.stderr, flush=True)
    subprocess.run(["cargo", "build", "--release", "--quiet", "--manifest-path", os.path.join(ROOT, "bench", "peers", "Cargo.toml")],
                   check=True, env={**os.environ, "CARGO_TARGET_DIR": TARGET})
    results = {"bytes": args.bytes, "reps": args.reps, "round_trips": args.round_trips, "bulk": {}, "connections": {}, "pingpong": {}}
    if args.only in (None, "bulk"):
        runs = {label: [] for label, _, _ in BULK}
        for rep in range(args.reps):
            for label, proto, flags in BULK:
                r = one_run(proto, flags, ["--bytes", str(args.bytes)], timeout=120)
                runs[label].append(r)
                what = r.get("error") or f"{r['server']['gbit_per_s'] if proto == 'udp' else r['client']['gbit_per_s']:.2f} Gbit/s"
                print(f"  bulk rep {rep + 1} {label}: {what}", file=sys.stderr, flush=True)
        print(f"\nloopback bulk, one connection, {args.bytes / 1e9:g} GB, {args.reps} repetitions (min / median / max)")
        print(f"  {'':34s} {'Gbit/s':>22s}   {'CPU s/GB (both ends)':>22s}  failed")
        for label, proto, _ in BULK:
            ok = [r for r in runs[label] if "error" not in r]
            # UDP's sender only offers; what the sink received is its rate.
            rate = [(r["server"] if proto == "udp" else r["client"])["gbit_per_s"] for r in ok]
            cpu = [(r["client"]["cpu_s"] + r["server"]["cpu_s"]) / (r["server"]["bytes"] / 1e9) for r in ok]
            results["bulk"][label] = {"gbit_per_s": spread(rate), "cpu_s_per_gb": spread(cpu), "failed": len(runs[label]) - len(ok),
                                      "errors": [r["error"] for r in runs[label] if "error" in r], "runs": runs[label]}
            fmt = lambda s: f"{s['min']:6.2f} {s['median']:6.2f} {s['max']:6.2f}" if s else "     -      -      -"
            print(f"  {label:34s} {fmt(spread(rate)):>22s}   {fmt(spread(cpu)):>22s}  {len(runs[label]) - len(ok)}")
        med = {label: results["bulk"][label]["gbit_per_s"].get("median") for label, _, _ in BULK}
        for label in ("fencepost", "fencepost --no-verify"):
            if med[label] and med["quinn"] and med["kernel TCP"]:
                print(f"  {label}: {med[label] / med['quinn']:.2f}x quinn, {med[label] / med['kernel TCP']:.2f}x kernel TCP (medians)")
    if args.only in (None, "connections"):
        # fencepost: one server, one client socket, the same bytes over 1 and over N connections.
        runs = {k: [] for k in (1, args.connections)}
        # Kernel TCP over the same counts (a thread per connection on each side), interleaved
        # with fencepost's runs: a peer for the ratio, measured on the same host at the same time.
        tcp_runs = {k: [] for k in runs}
        for rep in range(args.reps):
            # One count first in one repetition, the other in the next: a run that follows
            # another (its memory, its threads) is not always the same count's.
            for k in (list(runs) if rep % 2 == 0 else list(runs)[::-1]):
                r = one_run("fencepost", ["--no-verify", "--connections", str(k)], ["--bytes", str(args.bytes)], timeout=180)
                runs[k].append(r)
                print(f"  connections rep {rep + 1} x{k}: {r.get('error') or '%.2f Gbit/s, %d retransmissions' % (r['client']['gbit_per_s'], r['client']['retransmissions'])}",
                      file=sys.stderr, flush=True)
                r = one_run("tcp", ["--connections", str(k)], ["--bytes", str(args.bytes)], timeout=180)
                tcp_runs[k].append(r)
                print(f"  connections rep {rep + 1} x{k} kernel TCP: {r.get('error') or '%.2f Gbit/s' % r['client']['gbit_per_s']}", file=sys.stderr, flush=True)
        print(f"\nfencepost --no-verify, {args.bytes / 1e9:g} GB over 1 and over {args.connections} concurrent connections to one server, loopback (no loss)")
        for k, rs in runs.items():
            ok = [r for r in rs if "error" not in r]
            rate = spread([r["client"]["gbit_per_s"] for r in ok])
            retx = [r["client"]["retransmissions"] for r in ok]
            timeouts = [r["client"]["retransmission_timeouts"] for r in ok]
            # Timeouts on a path that had lost nothing lately probe with new data: no resend.
            new_data_probes = [r["client"].get("timeouts_probed_with_new_data", 0) for r in ok]
            spurious = [r["client"]["spurious_retransmissions"] for r in ok]
            # Each connection acks for itself, so many connections make more acks per byte.
            per_ack = [round(r["client"]["data_packets_sent"] / r["client"]["acks_received"], 1) for r in ok if r["client"].get("acks_received")]
            # Both processes' CPU per GB: on this shared host it varies less from run to run
            # than the rate does, so it shows what many connections cost with fewer runs.
            cpu = spread([(r["client"]["cpu_s"] + r["server"]["cpu_s"]) / (r["client"]["bytes"] / 1e9) for r in ok if r["client"].get("bytes")])
            results["connections"][k] = {"gbit_per_s": rate, "cpu_s_per_gb": cpu, "retransmissions": retx, "retransmission_timeouts": timeouts,
                                         "timeouts_probed_with_new_data": new_data_probes,
                                         "spurious_retransmissions": spurious, "data_packets_per_ack": per_ack, "failed": len(rs) - len(ok), "runs": rs}
            print(f"  {k:4d} connection(s): aggregate {rate.get('min', float('nan')):6.2f} {rate.get('median', float('nan')):6.2f} {rate.get('max', float('nan')):6.2f} Gbit/s"
                  f"  CPU s/GB (both ends) {cpu.get('min', float('nan')):.2f} {cpu.get('median', float('nan')):.2f} {cpu.get('max', float('nan')):.2f}"
                  f"  retransmissions {retx} (timeouts {timeouts}, of them probed with new data {new_data_probes}; found spurious {spurious})  data packets per ack {per_ack}  failed {len(rs) - len(ok)}")
            if k > 1 and ok:
                # Timed from the first connect (handshakes and the last connection's finish
                # included): when the first, the median and the last connection finished.
                done = [(r["client"].get("first_done_s", 0), r["client"].get("median_done_s", 0), r["client"]["seconds"]) for r in ok]
                print("        connections finished (first / median / last, s): " + ", ".join(f"{a:.2f} / {b:.2f} / {c:.2f}" for a, b, c in done))
                # And how long starting them all took: the last handshake's end.
                print("        last connection up (s): " + ", ".join(f"{r['client'].get('last_connected_s', 0):.3f}" for r in ok))
        one, many = results["connections"][1]["gbit_per_s"], results["connections"][args.connections]["gbit_per_s"]
        if one and many:
            print(f"  aggregate over {args.connections} / one connection = {many['median'] / one['median']:.2f} (medians)")
            # Each repetition ran both counts within seconds of each other, so the spread of
            # its own ratios shows how far this host's drift alone moves the figure.
            paired = [m["client"]["gbit_per_s"] / o["client"]["gbit_per_s"] for o, m in zip(runs[1], runs[args.connections]) if "error" not in o and "error" not in m]
            results["connections"]["paired_ratios"] = paired
            print("  the same, per repetition: " + ", ".join(f"{r:.2f}" for r in paired))
            cpu_one, cpu_many = results["connections"][1]["cpu_s_per_gb"], results["connections"][args.connections]["cpu_s_per_gb"]
            if cpu_one and cpu_many:
                print(f"  CPU per GB over {args.connections} / one connection = {cpu_many['median'] / cpu_one['median']:.2f} (medians)")
        print(f"kernel TCP, the same bytes over 1 and over {args.connections} connections (a thread per connection each side)")
        results["connections"]["kernel TCP"] = {}
        for k, rs in tcp_runs.items():
            ok = [r for r in rs if "error" not in r]
            rate = spread([r["client"]["gbit_per_s"] for r in ok])
            cpu = spread([(r["client"]["cpu_s"] + r["server"]["cpu_s"]) / (r["client"]["bytes"] / 1e9) for r in ok if r["client"].get("bytes")])
            results["connections"]["kernel TCP"][k] = {"gbit_per_s": rate, "cpu_s_per_gb": cpu, "failed": len(rs) - len(ok), "runs": rs}
            print(f"  {k:4d} connection(s): aggregate {rate.get('min', float('nan')):6.2f} {rate.get('median', float('nan')):6.2f} {rate.get('max', float('nan')):6.2f} Gbit/s"
                  f"  CPU s/GB (both ends) {cpu.get('min', float('nan')):.2f} {cpu.get('median', float('nan')):.2f} {cpu.get('max', float('nan')):.2f}  failed {len(rs) - len(ok)}")
        tcp_one, tcp_many = results["connections"]["kernel TCP"][1]["gbit_per_s"], results["connections"]["kernel TCP"][args.connections]["gbit_per_s"]
        if tcp_one and tcp_many:
            print(f"  aggregate over {args.connections} / one connection = {tcp_many['median'] / tcp_one['median']:.2f} (medians)")
    if args.only in (None, "pingpong"):
        runs = {label: [] for label, _, _ in PINGPONG}
        for rep in range(args.reps):
            for label, proto, flags in PINGPONG:
                r = one_run(proto, flags, ["--pingpong", str(args.round_trips)], timeout=120)
                runs[label].append(r)
                print(f"  ping-pong rep {rep + 1} {label}: {r.get('error') or '%.1f / %.1f us' % (r['client']['p50_us'], r['client']['p99_us'])}", file=sys.stderr, flush=True)
        print(f"\nloopback ping-pong, 64-byte messages, {args.round_trips} round trips, {args.reps} repetitions (median of the runs' p50 and p99)")
        for label, _, _ in PINGPONG:
            ok = [r for r in runs[label] if "error" not in r]
            p50 = spread([r["client"]["p50_us"] for r in ok])
            p99 = spread([r["client"]["p99_us"] for r in ok])
            results["pingpong"][label] = {"p50_us": p50, "p99_us": p99, "failed": len(runs[label]) - len(ok), "runs": runs[label]}
            print(f"  {label:48s} p50 {p50.get('median', float('nan')):8.1f} us   p99 {p99.get('median', float('nan')):8.1f} us   failed {len(runs[label]) - len(ok)}")
        tcp = results["pingpong"]["kernel TCP (TCP_NODELAY)"]
        for label in (l for l, proto, _ in PINGPONG if proto == "fencepost"):
            fp = results["pingpong"][label]
            if fp["p50_us"] and tcp["p50_us"]:
                print(f"  {label} / TCP: p50 {fp['p50_us']['median'] / tcp['p50_us']['median']:.2f}x, p99 {fp['p99_us']['median'] / tcp['p99_us']['median']:.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
        print(f"\nevery run: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
