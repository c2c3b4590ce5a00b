#!/usr/bin/env python3
"""What a server keeps for connections that moved data and then sit idle.

Starts `fencepost serve --echo`, opens N connections one after another, echoes M bytes
over each (each byte checked), keeps them all open and idle, waits, and prints the
server's resident memory (VmRSS) before and after. Quiet connections give back what
their buffers grew to a second after their last packet (docs/protocol.md, "Buffers").

    .venv/bin/python bench/idle_memory.py [--connections 100] [--bytes 4000000] [--wait 3]
"""
import argparse
import os
import random
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import fencepost  # noqa: E402

FP = os.path.join(HERE, "..", ".venv", "bin", "fencepost")


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=100, help="connections kept open (default 100)")
    ap.add_argument("--bytes", type=int, default=4_000_000, help="bytes echoed over each (default 4000000)")
    ap.add_argument("--wait", type=float, default=3.0, help="seconds idle before measuring (default 3)")
    args = ap.parse_args()
    if not os.path.exists(FP):
        print("run 'make build' first", file=sys.stderr)
        return 2
    port = free_port()
    server = subprocess.Popen([FP, "serve", "--echo", "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        start = rss_mb(server.pid)
        payload = random.Random(1).randbytes(args.bytes)
        conns = []
        for i in range(args.connections):
            s = fencepost.connect(("127.0.0.1", port), timeout=30)
            got = bytearray()

            def read_echo() -> None:
                while len(got) < len(payload):
                    d = s.recv(1 << 20)
                    if not d:
                        break
                    got.extend(d)

            reader = threading.Thread(target=read_echo)
            reader.start()
            s.sendall(payload)
            reader.join()
            if bytes(got) != payload:
                print(f"connection {i}: the echo differs from what was sent", file=sys.stderr)
                return 1
            conns.append(s)
            print(f"\r{i + 1}/{args.connections} connections echoed", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
        busy = rss_mb(server.pid)
        time.sleep(args.wait)
        idle = rss_mb(server.pid)
        print(f"fencepost serve --echo: {args.connections} connections, {args.bytes} bytes echoed over each, then idle")
        print(f"  resident memory: {start} MB at start, {busy} MB after the last echo, {idle} MB after {args.wait:g} s idle")
        print(f"  per idle connection: {(idle - start) * 1024 / args.connections:.0f} kB")
        for s in conns:
            s.close()
        return 0
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
