"""A flood of spoofed handshakes at a real `fencepost serve`: 100,000 Initials from
random source addresses at 10,000 a second (through a raw socket, so needs root).
The server keeps no state for them (while only the flood runs, memory grows by at
most 200 bytes an Initial: 20 MB for all of them), sends back no more bytes than it
received (a Retry is smaller than an Initial), a real client connects within a second
during the flood, and a transfer running through it keeps at least half its rate."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import fencepost

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="spoofing source addresses needs a raw socket (root)")

INITIALS = 100_000
RATE = 10_000


def initial(rng: random.Random) -> bytes:
    """A well-formed version 2 Initial (docs/protocol.md) with no token and a random Noise message."""
    noise = rng.randbytes(54)
    body = bytes([2, 1, 0, 0, 0, 0, 1]) + struct.pack(">II", rng.getrandbits(32) | 1, rng.getrandbits(32)) + bytes([2, 1, 0])
    body += struct.pack(">H", len(noise)) + noise
    return body + bytes(256 - len(body))


def spoofed(payload: bytes, src: str, sport: int, dst: str, dport: int) -> bytes:
    """An IPv4 + UDP datagram from `src`; the kernel fills the IP checksum and length, UDP's checksum is optional."""
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 0, 0, 0, 64, socket.IPPROTO_UDP, 0, socket.inet_aton(src), socket.inet_aton(dst))
    udp = struct.pack(">HHHH", sport, dport, 8 + len(payload), 0)
    return ip + udp + payload


def flood(port: int, sent: list, stop: threading.Event) -> None:
    rng = random.Random(7)
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    start = time.monotonic()
    for i in range(INITIALS):
        if stop.is_set():
            break
        # 10,000 a second, in batches of 100.
        if i % 100 == 0:
            delay = start + i / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        src = f"127.{rng.randrange(1, 255)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        packet = initial(rng)
        raw.sendto(spoofed(packet, src, rng.randrange(1024, 65536), "127.0.0.1", port), ("127.0.0.1", 0))
        sent[0] += 1
        sent[1] += len(packet)
    sent.append(time.monotonic() - start)
    raw.close()


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def send(port: int, seconds: int) -> float:
    out = subprocess.run([BIN / "fencepost", "send", f"127.0.0.1:{port}", "--time", f"{seconds}s", "--json"],
                         capture_output=True, text=True, timeout=seconds + 60)
    assert out.returncode == 0, out.stdout[-500:] + out.stderr[-500:]
    return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]


def test_a_flood_of_spoofed_initials_leaves_no_state_and_no_amplification():
    server = subprocess.Popen([BIN / "fencepost", "serve", "--listen", "127.0.0.1:0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()
    try:
        port = int(server.stdout.readline().split("127.0.0.1:")[1].split()[0])
        calm = send(port, 3)
        before = rss_kb(server.pid)
        sent = [0, 0]
        flooder = threading.Thread(target=flood, args=(port, sent, stop))
        flooder.start()
        time.sleep(1.0)
        # A real client during the flood.
        started = time.monotonic()
        with fencepost.connect(("127.0.0.1", port), timeout=10, connect_timeout=5) as s:
            connect_s = time.monotonic() - started
            s.sendall(b"x" * 1000)
        # Memory is measured over the spans where only the flood runs: a transfer's
        # receive buffer (16 MB) is the transfer's, and the allocator need not reuse the
        # memory of the calm transfer's for it (another thread's arena), so RSS across
        # the transfer says nothing about state the flood left.
        transfer_from, initials_before = rss_kb(server.pid), sent[0]
        flooded = send(port, 4)
        transfer_to, initials_after = rss_kb(server.pid), sent[0]
        flooder.join(60)
        assert not flooder.is_alive()
        after = rss_kb(server.pid)
    finally:
        stop.set()
        server.send_signal(signal.SIGINT)
        try:
            stdout, stderr = server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            stdout, stderr = server.communicate()
    stats = json.loads(stdout.strip().splitlines()[-1])["endpoint"]
    print(f"flood: {sent[0]:,} Initials ({sent[1]:,} bytes) in {sent[2]:.1f} s; connect {connect_s * 1000:.0f} ms; "
          f"transfer {calm / 1e9:.2f} -> {flooded / 1e9:.2f} Gbit/s; RSS {before / 1024:.1f} -> {transfer_from / 1024:.1f} (transfer) "
          f"{transfer_to / 1024:.1f} -> {after / 1024:.1f} MB; {stderr.strip()}")
    assert sent[0] == INITIALS and sent[2] < INITIALS / RATE * 1.5, "the flood ran at its rate"
    assert connect_s < 1.0, f"a real client took {connect_s:.2f} s to connect during the flood"
    assert flooded >= 0.5 * calm, f"the transfer kept {flooded / calm:.0%} of its rate"
    flood_only = initials_before + (sent[0] - initials_after)
    assert flood_only >= 0.3 * INITIALS, f"only {flood_only:,} Initials arrived outside the transfer: too few to measure"
    growth_kb = (transfer_from - before) + (after - transfer_to)
    assert growth_kb * 1024 <= 200 * flood_only, f"memory grew {growth_kb / 1024:.1f} MB over {flood_only:,} Initials"
    # The transfer itself holds at most its receive buffer and the calm transfer's share again.
    assert (transfer_to - transfer_from) / 1024 <= 20 + 16, f"memory grew {(transfer_to - transfer_from) / 1024:.1f} MB during the transfer"
    assert stats["retries_sent"] >= 0.95 * INITIALS, stats
    # Everything sent to addresses that never completed a handshake: the Retries (plus the
    # real clients' own), against what the spoofed Initials alone brought in.
    assert stats["stateless_bytes_sent"] <= sent[1], f"{stats['stateless_bytes_sent']:,} bytes sent back for {sent[1]:,} received"
