"""Protected connections from Python and the command line (keys, pinning,
plaintext only when asked), and the bindings' answers to misuse: clear Python
exceptions, never a Rust panic; threads sharing a socket; asyncio streams that
behave as asyncio's own."""

import asyncio
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import fencepost
from test_net import echo_listener

BIN = Path(sys.executable).parent


def test_keys_round_trip_and_bad_keys_are_refused():
    pair = fencepost.keygen()
    assert len(pair.public) == 44 and pair.public.endswith("=")
    assert fencepost.public_key(pair.private) == pair.public
    with pytest.raises(ValueError, match="44 characters"):
        fencepost.public_key("not a key")
    with pytest.raises(fencepost.OptionError, match="peer-key"):
        fencepost.connect(("127.0.0.1", 9), peer_key="short")
    with pytest.raises(fencepost.OptionError, match="peer-key.*--insecure"):
        fencepost.connect(("127.0.0.1", 9), peer_key=pair.public, insecure=True)


def test_a_client_pinning_the_servers_key_connects_and_one_pinning_another_does_not(tmp_path):
    key_file = tmp_path / "server.key"
    pair = fencepost.keygen()
    key_file.write_text(pair.private + "\n")
    listener = echo_listener(key=str(key_file))
    try:
        assert listener.public_key == pair.public
        with fencepost.connect(listener.getsockname(), timeout=10, peer_key=pair.public) as s:
            assert s.protected and s.peer_key == pair.public
            s.sendall(b"pinned")
            assert s.recv(100) == b"pinned"
        # Trust on first use: no key given, the handshake tells the server's.
        with fencepost.connect(listener.getsockname(), timeout=10) as s:
            assert s.peer_key == pair.public
        with pytest.raises(fencepost.Timeout, match="peer-key"):
            fencepost.connect(listener.getsockname(), connect_timeout=1.5, peer_key=fencepost.keygen().public)
        with pytest.raises(fencepost.Timeout, match="plaintext"):
            fencepost.connect(listener.getsockname(), connect_timeout=1.5, insecure=True)
        stats = listener.stats()
        assert stats["forged_handshakes"] >= 1, "the Initial for another key was counted"
        assert stats["wrong_version"] >= 1, "the plaintext Initial was counted"
        assert stats["retries_sent"] >= 2
    finally:
        listener.close()


def test_plaintext_only_when_asked():
    for options, protected in [({}, True), ({"insecure": True}, False), ({"profile": "seed"}, False)]:
        listener = echo_listener(**options)
        try:
            with fencepost.connect(listener.getsockname(), timeout=10, **options) as s:
                assert s.protected == protected, options
                s.sendall(b"x")
                assert s.recv(10) == b"x"
        finally:
            listener.close()


def test_serve_prints_its_key_and_send_pins_it(tmp_path):
    key_file = tmp_path / "k"
    made = subprocess.run([BIN / "fencepost", "keygen", "--out", str(key_file)], capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    public = made.stdout.split("public key: ")[1].strip()
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    again = subprocess.run([BIN / "fencepost", "keygen", "--out", str(key_file)], capture_output=True, text=True, timeout=30)
    assert again.returncode != 0 and "--force" in again.stderr, "an existing key is not overwritten silently"
    server = subprocess.Popen([BIN / "fencepost", "serve", "--listen", "127.0.0.1:0", "--key", str(key_file)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        listening = server.stdout.readline()
        keyline = server.stdout.readline()
        assert public in keyline, keyline
        port = listening.split("127.0.0.1:")[1].split()[0]
        sent = subprocess.run([BIN / "fencepost", "send", f"127.0.0.1:{port}", "--bytes", "2MB", "--peer-key", public],
                              capture_output=True, text=True, timeout=60)
        assert sent.returncode == 0 and "SHA-256 match" in sent.stdout, sent.stdout + sent.stderr
    finally:
        server.terminate()
        server.wait(10)


def test_misuse_raises_clear_python_exceptions():
    listener = echo_listener()
    try:
        with fencepost.connect(listener.getsockname(), timeout=10) as s:
            s.sendall(b"abc")
            # A huge buffer is a request for up to that much, not an allocation.
            assert s.recv(2**62) == b"abc"
            with pytest.raises(OverflowError):
                s.recv(2**64)
            with pytest.raises(ValueError, match="negative"):
                s.recv(-1)
            with pytest.raises(TypeError):
                s.recv("10")
            for bad, exc in [(-1, ValueError), (math.nan, ValueError), (math.inf, OverflowError), (1e300, OverflowError), ("1", TypeError)]:
                with pytest.raises(exc):
                    s.settimeout(bad)
            # Passed straight to the native layer, a bad timeout is an exception too, never a panic.
            for bad, exc in [(math.inf, OverflowError), (-1.0, ValueError), (math.nan, ValueError)]:
                with pytest.raises(exc):
                    s._conn.recv(10, bad)
            s.settimeout(0.2)
            with pytest.raises(fencepost.Timeout):
                s.recv(10)
    finally:
        listener.close()
    with pytest.raises(ValueError, match="connect-timeout"):
        fencepost.net._core.Endpoint.bind("127.0.0.1", 0, False, [], math.inf)


def test_threads_sharing_a_socket_lose_no_wakeup():
    listener = fencepost.listen(("127.0.0.1", 0))
    received = {}

    def sink():
        sock, _ = listener.accept()
        got = bytearray()
        while chunk := sock.recv(1 << 16):
            got += chunk
        received["bytes"] = bytes(got)
        sock.close()

    t = threading.Thread(target=sink)
    t.start()
    try:
        with fencepost.connect(listener.getsockname(), timeout=30) as s:
            # Far more than the send buffer, from four threads at once: each must be woken
            # when room frees up, or a thread waits forever.
            chunks = [bytes([i]) * 6_000_000 for i in range(4)]
            writers = [threading.Thread(target=s.sendall, args=(c,)) for c in chunks]
            for w in writers:
                w.start()
            for w in writers:
                w.join(60)
                assert not w.is_alive(), "a writer was never woken"
            s.shutdown_write()
        t.join(60)
        data = received["bytes"]
        assert len(data) == 24_000_000
        # Each sendall's bytes arrive whole, in one run.
        runs = [data[i] for i in range(0, len(data), 1_000_000)]
        assert sorted(set(runs)) == [0, 1, 2, 3]
        for i in range(4):
            first = data.index(bytes([i]))
            assert data[first:first + 6_000_000] == chunks[i]
    finally:
        listener.close()


def test_asyncio_streams_behave_as_asyncios_own():
    async def main():
        async def echo(reader, writer):
            while data := await reader.read(65536):
                writer.write(data)
            writer.close()
            await writer.wait_closed()

        server = await fencepost.start_server(echo, "127.0.0.1", 0)
        host, port = server.address
        reader, writer = await fencepost.open_connection(host, port)
        # write() sends at once: no drain() before waiting for the answer.
        writer.write(b"ping")
        assert await asyncio.wait_for(reader.readexactly(4), 10) == b"ping"
        # write_eof() after write() sends the data first.
        payload = os.urandom(500_000)
        writer.write(payload)
        writer.write_eof()
        assert await asyncio.wait_for(reader.readexactly(len(payload)), 30) == payload
        assert await asyncio.wait_for(reader.read(), 10) == b""
        with pytest.raises(RuntimeError):
            writer.write(b"late")
        writer.close()
        await writer.wait_closed()
        # drain() is flow control: it returns while little is queued, and waits when much is.
        reader, writer = await fencepost.open_connection(host, port)
        writer.write(b"small")
        await asyncio.wait_for(writer.drain(), 1)
        writer.write(os.urandom(8_000_000))
        await asyncio.wait_for(writer.drain(), 30)
        assert writer._pending_bytes <= writer.HIGH_WATER
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
