"""`fencepost send`/`serve` speak iperf3's language: the short flags, reverse, parallel
streams, a target rate, and JSON that the code reading iperf3's JSON reads too."""

import json
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def free_port(kind=socket.SOCK_DGRAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_iperf_json(doc: dict) -> dict:
    """What a script reading iperf3 -J output takes from it: the sums and every stream's
    sender and receiver figures. Written against iperf3's layout, used on both."""
    end = doc["end"]
    return {
        "sent": end["sum_sent"]["bytes"],
        "sent_bps": end["sum_sent"]["bits_per_second"],
        "received": end["sum_received"]["bytes"],
        "received_bps": end["sum_received"]["bits_per_second"],
        "streams": [(s["sender"]["bytes"], s["receiver"]["bytes"]) for s in end["streams"]],
        "reverse": bool(doc["start"]["test_start"].get("reverse", 0)),
        "intervals": [(i["sum"]["start"], i["sum"]["end"], i["sum"]["bytes"]) for i in doc["intervals"]],
    }


@pytest.fixture(scope="module")
def fencepost_server():
    port = free_port()
    proc = subprocess.Popen([str(BIN / "fencepost"), "serve", "-s", "-p", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert f":{port} " in first, first + proc.stderr.read()
    yield port
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=10)


def send(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "fencepost"), "send", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed (`make test` installs it as root)")
def test_the_code_that_reads_iperf3_json_reads_fencepost_json(fencepost_server):
    port = free_port(socket.SOCK_STREAM)
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):
            if subprocess.run(["ss", "-tln"], capture_output=True, text=True).stdout.count(f":{port} "):
                break
            subprocess.run(["sleep", "0.1"])
        tcp = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "1", "-J"], capture_output=True, text=True, timeout=60)
        assert tcp.returncode == 0, tcp.stdout[-500:] + tcp.stderr[-500:]
    finally:
        server.kill()
        server.wait()
    fp = send("-c", "127.0.0.1", "-p", str(fencepost_server), "-t", "1", "-i", "0.25", "-J")
    assert fp.returncode == 0, fp.stderr
    for doc in (json.loads(tcp.stdout), json.loads(fp.stdout)):
        r = read_iperf_json(doc)
        assert r["sent"] > 0 and r["received"] > 0 and r["received_bps"] > 0
        assert len(r["streams"]) == 1 and r["streams"][0][1] == r["received"]
        assert not r["reverse"] and len(r["intervals"]) >= 1
    r = read_iperf_json(json.loads(fp.stdout))
    # fencepost's receiver is the sink's own count, and a reliable stream delivers all of it.
    assert r["received"] == r["sent"]
    # Intervals are the sink's measurements: 0.25 s apart, adding up to no more than arrived.
    assert len(r["intervals"]) >= 3 and sum(b for _, _, b in r["intervals"]) <= r["received"]
    assert all(abs((end - start) - 0.25) < 0.1 for start, end, _ in r["intervals"])


def test_reverse_parallel_and_bitrate(fencepost_server):
    port = str(fencepost_server)
    rev = send("-c", "127.0.0.1", "-p", port, "-n", "8M", "-R", "-J")
    assert rev.returncode == 0, rev.stderr
    doc = json.loads(rev.stdout)
    r = read_iperf_json(doc)
    assert r["reverse"] and r["received"] == 8 * 1024 * 1024 == r["sent"]
    assert doc["end"]["fencepost"]["hashes_match"] is True, "the client checks the server's bytes against the pattern"

    par = send("-c", "127.0.0.1", "-p", port, "-n", "8M", "-P", "4", "-J")
    assert par.returncode == 0, par.stderr
    doc = json.loads(par.stdout)
    r = read_iperf_json(doc)
    assert len(r["streams"]) == 4 and len(doc["start"]["connected"]) == 4
    assert r["received"] == 8 * 1024 * 1024 and all(sent == got > 0 for sent, got in r["streams"])
    assert doc["end"]["fencepost"]["complete"] is True

    both = send("-c", "127.0.0.1", "-p", port, "-t", "1", "-R", "-P", "2", "-i", "0.5")
    assert both.returncode == 0, both.stderr
    assert both.stdout.count("[SUM]") >= 3 and "all streams complete" in both.stdout

    paced = send("-c", "127.0.0.1", "-p", port, "-t", "2", "-b", "20M", "-J")
    assert paced.returncode == 0, paced.stderr
    r = read_iperf_json(json.loads(paced.stdout))
    assert 17e6 <= r["sent_bps"] <= 23e6, f"-b 20M sent at {r['sent_bps'] / 1e6:.1f} Mbit/s"


def test_iperf_flags_are_checked_and_named(fencepost_server):
    port = str(fencepost_server)
    both = send(f"127.0.0.1:{port}", "-c", "127.0.0.1", "-n", "1M")
    assert both.returncode != 0 and "--client" in both.stderr
    none = send("-n", "1M")
    assert none.returncode != 0 and "HOST:PORT or -c HOST" in none.stderr
    zero = send("-c", "127.0.0.1", "-p", port, "-n", "1M", "-P", "0")
    assert zero.returncode != 0 and "--parallel" in zero.stderr
    rate = send("-c", "127.0.0.1", "-p", port, "-n", "1M", "-b", "fast")
    assert rate.returncode != 0 and "--bitrate" in rate.stderr


def test_both_ends_with_the_driver_on_the_tools_runtime():
    """`--driver task` on either end: the transfer arrives whole, and a value that is not
    one of the two is refused by name."""
    port = free_port()
    proc = subprocess.Popen([str(BIN / "fencepost"), "serve", "-p", str(port), "--driver", "task"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert f":{port} " in first, first + proc.stderr.read()
        done = send("-c", "127.0.0.1", "-p", str(port), "-n", "20M", "--driver", "task", "-J")
        assert done.returncode == 0, done.stdout[-500:] + done.stderr[-500:]
        doc = json.loads(done.stdout)
        assert read_iperf_json(doc)["received"] == 20 * 1024 * 1024
        assert doc["end"]["fencepost"]["hashes_match"] is True, doc["end"]["fencepost"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=10)
    bad = send("-c", "127.0.0.1", "-p", str(port), "-n", "1M", "--driver", "fiber")
    assert bad.returncode != 0 and "--driver" in bad.stderr and "thread, task" in bad.stderr, bad.stderr


def test_serve_takes_its_address_as_send_does_and_stops_on_sigterm():
    """`fencepost serve HOST:PORT` (the form `send` takes), and SIGTERM (`kill`, systemd,
    `docker stop`) stops it as Ctrl-C does: the endpoint's counters, with the garbage sent
    to it counted as malformed, and exit status 0. The address given twice is refused."""
    port = free_port()
    proc = subprocess.Popen([str(BIN / "fencepost"), "serve", f"127.0.0.1:{port}", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert f":{port} " in first, first + proc.stderr.read()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as junk:
            for i in range(1, 41):
                junk.sendto(bytes([i]) * i, ("127.0.0.1", port))
        done = send(f"127.0.0.1:{port}", "--bytes", "2MB", "-J")
        assert done.returncode == 0, done.stdout[-500:] + done.stderr[-500:]
        assert json.loads(done.stdout)["end"]["fencepost"]["hashes_match"] is True
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "stopped" in err, err
    counters = [json.loads(line)["endpoint"] for line in out.splitlines() if line.startswith('{"endpoint"')]
    assert len(counters) == 1, out
    # Forty datagrams of 1-40 bytes, each shorter than any header: all malformed.
    assert counters[0]["malformed"] >= 40, counters[0]
    twice = subprocess.run([str(BIN / "fencepost"), "serve", f"127.0.0.1:{port}", "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30)
    assert twice.returncode == 2 and "--listen" in twice.stderr, twice.stderr
