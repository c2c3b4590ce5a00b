"""fencepost over real UDP on loopback: the blocking and asyncio APIs, the
examples, and `fencepost serve` / `send` / `echo-bench`."""

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import fencepost

BIN = Path(sys.executable).parent
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def echo_listener(**options):
    listener = fencepost.listen(("127.0.0.1", 0), **options)

    def run():
        while True:
            try:
                sock, _ = listener.accept()
            except fencepost.FencepostError:
                return

            def serve(s=sock):
                try:
                    while data := s.recv(65536):
                        s.sendall(data)
                    s.close()
                except fencepost.FencepostError:
                    pass  # the test closed the listener under it

            threading.Thread(target=serve, daemon=True).start()

    threading.Thread(target=run, daemon=True).start()
    return listener


def test_blocking_api_round_trip():
    listener = echo_listener()
    try:
        with fencepost.connect(listener.getsockname(), timeout=10) as s:
            payload = os.urandom(300_000)
            s.sendall(payload)
            s.shutdown_write()
            got = bytearray()
            while chunk := s.recv(65536):
                got += chunk
            assert bytes(got) == payload
            # At least the data packets: 300 kB in datagrams of at most 8 kB (the peer is this
            # host, so packets fill 8 kB, not an Ethernet frame's 1.5).
            assert s.stats()["packets_sent"] >= 300_000 // 8_192
            assert s.getpeername()[1] == listener.getsockname()[1]
    finally:
        listener.close()


def test_timeouts_and_errors_are_clear():
    listener = fencepost.listen(("127.0.0.1", 0))
    try:
        listener.settimeout(0.2)
        with pytest.raises(fencepost.Timeout):
            listener.accept()
        port = listener.getsockname()[1]
        with pytest.raises(fencepost.FencepostError, match="already in use"):
            fencepost.listen(("127.0.0.1", port))
        s = fencepost.connect(listener.getsockname())
        s.settimeout(0.3)
        with pytest.raises(fencepost.Timeout):
            s.recv(10)  # the listener never accepted, so nothing will come
        s.close(timeout=0.5)
    finally:
        listener.close()
    # A port held by a socket that never answers: the connect times out. One nobody holds
    # (held here, so no other test takes it, but connected elsewhere, so the kernel answers
    # each Initial with ICMP port unreachable): refused at once, a ConnectionRefusedError.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as closed:
        silent.bind(("127.0.0.1", 0))
        closed.bind(("127.0.0.1", 0))
        closed.connect(silent.getsockname())
        addr = silent.getsockname()
        with pytest.raises(fencepost.Timeout, match=f"{addr[0]}:{addr[1]}"):
            fencepost.connect(addr, connect_timeout=0.5)
        addr = closed.getsockname()
        started = time.monotonic()
        with pytest.raises(fencepost.Refused, match=f"{addr[0]}:{addr[1]} failed: nothing listens on that port") as refused:
            fencepost.connect(addr)
        assert isinstance(refused.value, ConnectionRefusedError)
        assert time.monotonic() - started < 3.0, "refused within the handshake's first tries, not the 10 s timeout"
    with pytest.raises(fencepost.OptionError, match="--arq"):
        fencepost.connect(addr, arq="sack")


def test_asyncio_streams():
    async def main():
        async def handle(reader, writer):
            data = await reader.read()
            writer.write(hashlib.sha256(data).digest())
            await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await fencepost.start_server(handle, "127.0.0.1", 0)
        host, port = server.address
        reader, writer = await fencepost.open_connection(host, port)
        payload = os.urandom(200_000)
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        digest = await reader.readexactly(32)
        assert digest == hashlib.sha256(payload).digest()
        assert await reader.read() == b""
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_examples_echo_pair():
    server = subprocess.Popen([sys.executable, str(EXAMPLES / "echo_server.py"), "127.0.0.1", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        port = int(line.rsplit(",", 1)[1].strip(" )\n"))
        client = subprocess.run([sys.executable, str(EXAMPLES / "echo_client.py"), "127.0.0.1", str(port), "200"],
                                capture_output=True, text=True, timeout=120)
        assert client.returncode == 0, client.stderr
        assert "hashes match" in client.stdout and "packets sent" in client.stdout
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=10)


def start_serve(*args):
    proc = subprocess.Popen([str(BIN / "fencepost"), "serve", "--listen", "127.0.0.1:0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    assert "listening on" in first, first + proc.stderr.read()
    port = int(first.split("listening on ")[1].split(" ")[0].rsplit(":", 1)[1])
    return proc, port


def test_serve_and_send_check_hashes_and_emit_iperf_json():
    server, port = start_serve()
    try:
        out = subprocess.run([str(BIN / "fencepost"), "send", f"127.0.0.1:{port}", "--bytes", "50MB", "--json"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert set(report) == {"start", "intervals", "end"}
        assert report["end"]["sum_received"]["bytes"] == 50_000_000
        assert report["end"]["fencepost"]["hashes_match"] is True
        # The mean of every RTT sample (what the simulator reports and the lab's rows carry)
        # beside the smoothed RTT at the end, which says only how the transfer finished.
        fp = report["end"]["fencepost"]
        assert fp["rtt_mean_ms"] is not None and 0 < fp["rtt_mean_ms"] < 1000, fp["rtt_mean_ms"]
        assert fp["streams"][0]["rtt_mean_ms"] == fp["rtt_mean_ms"]
        # Each stream's recovery counters, the tail probes among them.
        assert all(isinstance(fp["streams"][0][k], int) for k in ("retransmission_timeouts", "tail_probes")), fp["streams"][0]
        human = subprocess.run([str(BIN / "fencepost"), "send", f"127.0.0.1:{port}", "--time", "1s", "--interval", "0.25s"],
                               capture_output=True, text=True, timeout=120)
        assert human.returncode == 0, human.stderr
        assert human.stdout.count("[  1]") >= 5 and "SHA-256 match" in human.stdout
        assert "RTT mean " in human.stdout and "smoothed at the end" in human.stdout, human.stdout
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=10)
    assert server.returncode == 0 and "stopped" in err


def test_no_verify_checks_the_count_at_either_end_and_says_so():
    # A sink that does not hash answers with a zero hash: the sender checks the count and
    # says the stream was not hashed, whichever side skipped it.
    plain, plain_port = start_serve()
    quick, quick_port = start_serve("--no-verify")
    try:
        for port, flags, who in ((quick_port, ["--no-verify"], "this side"), (quick_port, [], "the sink"), (plain_port, ["--no-verify"], "this side")):
            out = subprocess.run([str(BIN / "fencepost"), "send", f"127.0.0.1:{port}", "--bytes", "5MB", "--json", *flags],
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            end = json.loads(out.stdout)["end"]
            assert end["sum_received"]["bytes"] == 5_000_000
            assert end["fencepost"]["complete"] is True
            assert end["fencepost"]["verified"] is False and end["fencepost"]["hashes_match"] is False
            human = subprocess.run([str(BIN / "fencepost"), "send", f"127.0.0.1:{port}", "--bytes", "1MB", *flags],
                                   capture_output=True, text=True, timeout=120)
            assert human.returncode == 0 and f"byte count match (not hashed: --no-verify on {who})" in human.stdout, human.stdout
        bad = subprocess.run([str(BIN / "fencepost"), "send", f"127.0.0.1:{quick_port}", "--bytes", "1MB", "--no-verify", "maybe"],
                             capture_output=True, text=True, timeout=60)
        assert bad.returncode != 0 and "--no-verify" in bad.stderr
    finally:
        for server in (plain, quick):
            server.send_signal(signal.SIGINT)
            server.communicate(timeout=10)


def test_send_to_a_frozen_server_ends_with_a_clear_error_within_the_idle_timeout():
    server, port = start_serve("--idle-timeout", "3s")
    sender = subprocess.Popen([str(BIN / "fencepost"), "send", f"127.0.0.1:{port}", "--time", "60s", "--idle-timeout", "3s"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        server.send_signal(signal.SIGSTOP)  # its socket stays open and answers nothing: a vanished peer
        stopped = time.monotonic()
        _, err = sender.communicate(timeout=30)
        took = time.monotonic() - stopped
    finally:
        server.send_signal(signal.SIGCONT)
        server.kill()
        server.wait()
    assert sender.returncode == 1, err
    assert "timed out" in err and "127.0.0.1" in err, err
    assert took < 3.0 + 2.0, f"the error came {took:.1f} s after the server froze"


def test_send_to_a_killed_server_ends_when_its_host_says_the_port_closed():
    # The default idle timeout (30 s): the host's ICMP port unreachable ends it long before.
    server, port = start_serve()
    sender = subprocess.Popen([str(BIN / "fencepost"), "send", f"127.0.0.1:{port}", "--time", "60s"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    server.kill()  # SIGKILL: no FIN, no reset; its port closes with it
    server.wait()
    killed = time.monotonic()
    _, err = sender.communicate(timeout=60)
    took = time.monotonic() - killed
    assert sender.returncode == 1, err
    assert "the peer's port closed" in err and "127.0.0.1" in err, err
    assert took < 5.0, f"the error came {took:.1f} s after the server died"


def test_bad_arguments_name_the_option():
    for args, needle in [(["send", "nowhere", "--bytes", "1MB"], "--target"),
                         (["send", "127.0.0.1:1", "--bytes", "lots"], "--bytes"),
                         (["send", "127.0.0.1:1"], "--bytes"),
                         (["serve", "--listen", "127.0.0.1"], "--listen")]:
        out = subprocess.run([str(BIN / "fencepost"), *args], capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and needle in out.stderr, (args, out.stderr)


def test_echo_bench_appends_results_by_condition(tmp_path):
    server, port = start_serve("--echo")
    results = tmp_path / "results.json"
    try:
        for _ in range(2):
            out = subprocess.run([str(BIN / "fencepost"), "echo-bench", f"127.0.0.1:{port}", "--condition", "loopback",
                                  "--messages", "100", "--results", str(results)], capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            assert "echo verified by SHA-256" in out.stdout
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=10)
    data = json.loads(results.read_text())
    assert list(data) == ["loopback"] and len(data["loopback"]) == 2
    packets, seconds = data["loopback"][0]
    assert packets >= 100 and seconds > 0.2


def test_blocking_recv_is_interruptible_by_ctrl_c():
    listener = fencepost.listen(("127.0.0.1", 0))
    try:
        s = fencepost.connect(listener.getsockname())
        timer = threading.Timer(0.5, signal.raise_signal, args=(signal.SIGINT,))
        timer.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            s.recv(10)  # nothing will ever arrive
        assert time.monotonic() - started < 3
        s.close(timeout=0.5)
    finally:
        listener.close()


async def echo_round_trip(host, port, payload):
    """One asyncio client: send `payload`, finish, read everything back."""
    reader, writer = await fencepost.open_connection(host, port)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    got = await reader.read()
    writer.close()
    await writer.wait_closed()
    return got == payload


def test_asyncio_serves_many_connections_at_once():
    async def main():
        async def echo(reader, writer):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()
            await writer.wait_closed()

        server = await fencepost.start_server(echo, "127.0.0.1", 0)
        host, port = server.address

        results = await asyncio.gather(*(echo_round_trip(host, port, bytes([i % 251]) * (2000 + 17 * i)) for i in range(100)))
        server.close()
        await server.wait_closed()
        return results

    assert all(asyncio.run(asyncio.wait_for(main(), 120)))


def test_two_hundred_concurrent_connections_to_one_serve_echo():
    server, port = start_serve("--echo")
    # The server reports each connection once its close is done, which can come a little
    # after the client has its echo (on a loaded host, after all 200 clients finished): the
    # reports are read as they come, and the server stopped once all are in (or after 30 s).
    lines, errors = [], []
    readers = [threading.Thread(target=lambda: lines.extend(l for l in server.stdout if "echo:" in l), daemon=True),
               threading.Thread(target=lambda: errors.extend(server.stderr), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        async def main():
            return await asyncio.gather(*(echo_round_trip("127.0.0.1", port, os.urandom(1000 + 13 * i)) for i in range(200)))

        results = asyncio.run(asyncio.wait_for(main(), 120))
        assert sum(results) == 200
        deadline = time.monotonic() + 30
        while len(lines) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=20)
        for reader in readers:
            reader.join(timeout=5)
    assert len(lines) == 200 and all(l.rstrip().endswith("; ok") for l in lines), "".join(lines[-10:] + errors[-20:])
