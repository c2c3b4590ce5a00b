"""fencepost over awkward routes between network namespaces: routes narrower than a
1500-byte IPv4 packet (a link with a small MTU at either end, as a tunnel or a 1280-byte
IPv6 link has, and one further on, between two routers, over IPv4 and IPv6), where each
transfer was 0 bytes before packets were fitted to the route (docs/protocol.md, "Packet
size and the path"); and a NAT that gives the client a new port after a pause, which
left the connection dropping every packet as from the wrong address (docs/protocol.md,
"Connection ids"). Needs root, iproute2 and iptables (`make lab-deps`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

BIN = Path(sys.executable).parent


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


class Path_:
    """Namespaces joined by veth pairs into a line: client, the routers, server. Links are
    (MTU) in order; with one link the ends are joined directly."""

    def __init__(self, mtus: list[int]):
        tag = f"fpm{os.getpid() % 100000}"
        self.names = [f"{tag}c"] + [f"{tag}r{i}" for i in range(len(mtus) - 1)] + [f"{tag}s"]
        self.mtus = mtus

    def __enter__(self):
        try:
            self._build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _build(self):
        for n in self.names:
            ip("netns", "add", n)
            ip("-n", n, "link", "set", "lo", "up")
        # Link i joins names[i] (address .1) and names[i+1] (.2), on 10.77.i.0/24 and fd77:i::/64.
        for i, mtu in enumerate(self.mtus):
            left, right = self.names[i], self.names[i + 1]
            ip("link", "add", f"l{i}a", "netns", left, "type", "veth", "peer", "name", f"l{i}b", "netns", right)
            for ns, dev, host in ((left, f"l{i}a", 1), (right, f"l{i}b", 2)):
                ip("-n", ns, "addr", "add", f"10.77.{i}.{host}/24", "dev", dev)
                ip("-n", ns, "-6", "addr", "add", f"fd77:{i}::{host}/64", "dev", dev, "nodad")
                ip("-n", ns, "link", "set", dev, "mtu", str(mtu), "up")
        last = len(self.mtus) - 1
        for k, ns in enumerate(self.names):
            if 0 < k < len(self.names) - 1:
                subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"],
                               check=True, timeout=20)
            # Every other subnet lies left or right of this namespace: route it that way.
            for i in range(len(self.mtus)):
                if i < k - 1:
                    via4, via6 = f"10.77.{k - 1}.1", f"fd77:{k - 1}::1"
                elif i > k:
                    via4, via6 = f"10.77.{k}.2", f"fd77:{k}::2"
                else:
                    continue
                ip("-n", ns, "route", "add", f"10.77.{i}.0/24", "via", via4)
                ip("-n", ns, "-6", "route", "add", f"fd77:{i}::/64", "via", via6)
        self.server4, self.server6 = f"10.77.{last}.2", f"fd77:{last}::2"

    def __exit__(self, *exc):
        for n in self.names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=20)

    def run(self, ns: str, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", ns, str(BIN / "fencepost"), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, **kw)

    @contextlib.contextmanager
    def serving(self, *args: str):
        """`fencepost serve ARGS` in the server's namespace, up before the body runs and
        stopped (SIGTERM) after it; its output is left in `.output` as (stdout, stderr)."""
        server = self.run(self.names[-1], "serve", *args)
        try:
            first = server.stdout.readline()
            assert "listening" in first, first + server.stderr.read()
            yield server
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.output = server.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.output = server.communicate()

    def send(self, target: str, size: str) -> tuple[int | None, str, str]:
        """`fencepost send TARGET --bytes SIZE` from the client's namespace, for at most
        60 s: its return code (None if it did not finish) and output."""
        sender = self.run(self.names[0], "send", target, "--bytes", size)
        try:
            out, err = sender.communicate(timeout=60)
            return sender.returncode, out, err
        except subprocess.TimeoutExpired:
            sender.kill()
            out, err = sender.communicate()
            return None, out, err


@pytest.mark.parametrize("family", ["4", "6"])
@pytest.mark.parametrize("mtus", [[1280], [1500, 1280, 1500]], ids=["narrow link between the ends", "narrow link between two routers"])
def test_a_transfer_crosses_a_route_narrower_than_ethernet(family, mtus):
    assert shutil.which("ip"), "iproute2 missing (run `make lab-deps` as root)"
    with Path_(mtus) as path:
        server = f"[{path.server6}]:5201" if family == "6" else f"{path.server4}:5201"
        with path.serving(server):
            # 5 MB: a few thousand full-sized packets, every one longer than the narrow link
            # carries unless it was fitted to it.
            code, out, err = path.send(server, "5MB")
            if code is None:
                pytest.fail(f"the transfer did not finish in 60 s:\n{out[-1500:]}{err[-500:]}")
            assert code == 0, out[-1500:] + err
            assert "SHA-256 match" in out, out[-1500:]


NAT_CLIENT = r"""
import sys, time, fencepost
host, port, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with fencepost.connect((host, port), timeout=5) as s:
    for round in range(3):
        message = bytes([round]) * 100_000
        s.sendall(message)
        got = b""
        while len(got) < len(message):
            chunk = s.recv(65536)
            assert chunk, "the echo closed"
            got += chunk
        assert got == message
        print(f"round {round} echoed", flush=True)
        time.sleep(pause)
"""


def test_a_connection_follows_its_client_through_a_nat_that_gives_it_a_new_port():
    assert shutil.which("iptables"), "iptables missing (run `make lab-deps` as root)"
    with Path_([1500, 1500]) as path:
        router = path.names[1]
        # The router masquerades the client behind its own address, a random port for each
        # new mapping, and forgets a mapping after a second without packets: each pause
        # below, longer than that and shorter than the keepalive, ends with a new port.
        subprocess.run(["ip", "netns", "exec", router, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "l1a", "-j", "MASQUERADE", "--random"],
                       check=True, timeout=20)
        subprocess.run(["ip", "netns", "exec", router, "sysctl", "-qw", "net.netfilter.nf_conntrack_udp_timeout=1",
                        "net.netfilter.nf_conntrack_udp_timeout_stream=1"], check=True, timeout=20)
        with path.serving("--echo", "--json", f"{path.server4}:5201") as echo:
            client = subprocess.run(["ip", "netns", "exec", path.names[0], sys.executable, "-c", NAT_CLIENT, path.server4, "5201", "2.5"],
                                    capture_output=True, text=True, timeout=60)
        out, err = echo.output
        assert client.returncode == 0, client.stdout + client.stderr[-1500:]
        assert client.stdout.count("echoed") == 3
        stats = [json.loads(line)["endpoint"] for line in out.splitlines() if line.startswith('{"endpoint"')]
        assert stats, out[-1000:] + err[-1000:]
        # Three pauses, three new ports (the last one before the close).
        assert stats[-1]["peer_address_changes"] >= 2, stats[-1]


@pytest.mark.parametrize("family", ["4", "6"])
def test_a_client_reaches_a_wildcard_server_through_its_second_address(family):
    """A server bound to 0.0.0.0 (or [::]) answers from the address its route prefers; a
    client that connected to the host's second address heard its answers from the first,
    dropped them as from the wrong address, and timed out."""
    with Path_([1500]) as path:
        server_ns, dev = path.names[-1], "l0b"
        second, wildcard, client_ip = ("fd77:0::3", "[::]:5201", "fd77:0::1") if family == "6" else ("10.77.0.3", "0.0.0.0:5201", "10.77.0.1")
        ip("-n", server_ns, "addr", "add", f"{second}/{64 if family == '6' else 24}", "dev", dev, *(["nodad"] if family == "6" else []))
        route = subprocess.run(["ip", "-n", server_ns, "route", "get", client_ip], capture_output=True, text=True, check=True).stdout
        assert f"src {second} " not in route, f"the answers would come from the address connected to, which tests nothing: {route}"
        target = f"[{second}]:5201" if family == "6" else f"{second}:5201"
        with path.serving(wildcard):
            code, out, err = path.send(target, "2MB")
            assert code == 0 and "SHA-256 match" in out, out[-1500:] + err[-1500:]


def test_a_connect_that_cannot_arrive_fails_with_the_reason_at_once():
    """Where the packets cannot go, a connect says so at once instead of waiting out its
    10 s timeout: no route on the client's host (its own refusal), none on a router
    (its ICMP network unreachable), nothing listening on the server's host (ICMP port
    unreachable)."""
    with Path_([1500, 1500]) as p:
        # The client sends 10.88.0.0/24 to the router, which has no route for it.
        ip("-n", p.names[0], "route", "add", "10.88.0.0/24", "via", "10.77.0.2")
        for target, reason in [("10.99.0.1:5201", "network is unreachable"), ("10.88.0.1:5201", "network is unreachable"),
                               (f"{p.server4}:5999", "nothing listens on that port")]:
            started = time.monotonic()
            code, _, err = p.send(target, "1kB")
            took = time.monotonic() - started
            assert code == 1 and reason in err and target in err, (target, code, err)
            assert took < 5.0, f"{target}: the error came after {took:.1f} s"
