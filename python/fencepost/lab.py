"""The lab: the simulator's scenarios on real Linux network namespaces.

A lab is a topology of namespaces: ``line`` is client — router — server, and
``dumbbell:N`` is N senders and N receivers on either side of the router. The
router does not forward in its kernel. Either fencepost's emulator runs there
(``impair="emulator"``, the default): the same link model as the simulator,
driven in real time, moving frames between the router's two sides through
packet sockets, so kernel TCP and fencepost cross the same emulated link; or
the seed article's method (``impair="iptables"``): the router forwards, an
iptables statistic match drops packets and ``tbf`` limits the rate (no delay:
this kernel has no netem).

Every namespace is named ``fpl<id>-<host>``; a lab removes its namespaces and
processes when it closes, on Ctrl-C and on SIGTERM. After a crash (or SIGKILL),
``fencepost lab clean`` (:func:`clean`) removes what is left. Needs root.

A run (:func:`run`) gives one row per transport in the schema of simulated
sweep rows (``goodput_bps``, ``packets_sent``, ``retransmissions``,
``rtt_mean_ms``, ``link_up_*``, ``flow<N>_*`` ...), so lab and simulated rows
summarise and plot together.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from . import _core
from ._errors import FencepostError, OptionError, option_error_from_native
from ._options import normalize_options

PREFIX = "fpl"
STATE_DIR = Path("/run/fencepost-lab")
READY = "fencepost-lab: ready"
SERIES_INTERVAL_S = 0.1
SERVER_PORT = 5201
# Link options the emulator understands; everything the simulator calls a link option but events.
LINK_OPTIONS = ("delay", "jitter", "jitter-dist", "jitter-corr", "keep-order", "loss", "loss-model", "loss-position", "rate", "trace",
                "queue", "dup", "corrupt")
FENCEPOST_OPTIONS = ("profile", "arq", "cc", "packet-size", "idle-timeout")
IMPAIRMENTS = ("emulator", "iptables")


class LabError(FencepostError, RuntimeError):
    """The lab cannot be built or a run cannot be carried out; says why."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("fencepost lab needs root: it creates network namespaces and opens packet sockets (run it with sudo)")
    if shutil.which("ip") is None:
        raise LabError("fencepost lab needs the `ip` command (Debian package iproute2)")


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


def namespaces() -> list[str]:
    """Every network namespace name (``ip netns list``)."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(lab_id: str) -> Optional[int]:
    try:
        return int(json.loads((STATE_DIR / f"{lab_id}.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def _remove_namespace(name: str) -> None:
    # Processes keep a namespace alive after its name is gone: end them first.
    for pid in _run(["ip", "netns", "pids", name], check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _run(["ip", "netns", "del", name], check=False)


def clean(all_labs: bool = False) -> list[str]:
    """Removes the namespaces (and the processes in them) of labs whose process is
    gone, or of every lab with ``all_labs``; returns the namespaces removed."""
    require_root()
    removed = []
    for name in namespaces():
        if not name.startswith(PREFIX) or "-" not in name:
            continue
        lab_id = name.split("-", 1)[0]
        owner = _owner(lab_id)
        if not all_labs and owner is not None and owner != os.getpid() and _alive(owner):
            continue
        _remove_namespace(name)
        removed.append(name)
    if STATE_DIR.exists():
        for state in STATE_DIR.glob(f"{PREFIX}*.json"):
            owner = _owner(state.stem)
            if all_labs or owner is None or not _alive(owner):
                state.unlink(missing_ok=True)
    return removed


def _die_with_parent() -> None:
    # A lab process must not outlive the lab (PR_SET_PDEATHSIG survives the exec of `ip netns exec`).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)
    os.setpgrp()  # Ctrl-C at the terminal is the lab's to handle, not each process's.


class Process:
    """A process in a namespace, its output collected line by line as it comes."""

    def __init__(self, label: str, argv: Sequence[str]) -> None:
        self.label = label
        self.argv = list(argv)
        self.popen = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                      text=True, preexec_fn=_die_with_parent)
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._changed = threading.Condition()
        self._threads = [threading.Thread(target=self._pump, args=(self.popen.stdout, self.stdout), daemon=True),
                         threading.Thread(target=self._pump, args=(self.popen.stderr, self.stderr), daemon=True)]
        for t in self._threads:
            t.start()

    def _pump(self, stream, lines: list) -> None:
        for line in stream:
            with self._changed:
                lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        """Waits until ``predicate(self)`` holds; a process that exits first, or a timeout, is an error."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                if self.popen.poll() is not None and all(not t.is_alive() for t in self._threads):
                    raise LabError(f"{self.label} exited (status {self.popen.returncode}) before {what}: {self.errors()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LabError(f"{self.label}: no sign of {what} after {timeout:.0f} s: {self.errors()}")
                self._changed.wait(min(left, 0.2))

    def wait_ready(self, timeout: float = 20.0) -> None:
        self.wait_for(lambda p: READY in p.stderr, timeout, "being ready")

    def finish(self, timeout: float) -> int:
        """Waits for the process to end on its own and its output to be read."""
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise LabError(f"{self.label} did not finish within {timeout:.0f} s: {self.errors()}") from None
        for t in self._threads:
            t.join(timeout=5)
        return self.popen.returncode

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM (the lab's processes report and exit), then SIGKILL."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        for t in self._threads:
            t.join(timeout=5)

    def errors(self) -> str:
        text = " | ".join(line for line in self.stderr if line and READY not in line)
        return text[-2000:] or "(nothing on stderr)"

    def json_lines(self) -> list[dict]:
        out = []
        for line in self.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def json_document(self) -> Optional[dict]:
        """The one JSON document a process printed across several lines (``send --json``)."""
        for i, line in enumerate(self.stdout):
            if line == "{":
                try:
                    return json.loads("\n".join(self.stdout[i:]))
                except json.JSONDecodeError:
                    return None
        return None


@dataclass
class Host:
    name: str
    side: str  # "left" (clients) or "right" (servers)
    index: int

    @property
    def address(self) -> str:
        return f"10.0.{1 if self.side == 'left' else 2}.{self.index}"

    @property
    def mac(self) -> str:
        return f"02:66:70:0{1 if self.side == 'left' else 2}:00:{self.index:02x}"


def parse_topology(text: str) -> tuple[str, list[tuple[Host, Host]]]:
    """``line`` or ``dumbbell:N`` (N from 1 to 64) as (client, server) host pairs."""
    if text == "line":
        return "line", [(Host("client", "left", 1), Host("server", "right", 1))]
    kind, _, n = text.partition(":")
    if kind == "dumbbell" and n.isdigit() and 1 <= int(n) <= 64:
        return text, [(Host(f"s{i}", "left", i), Host(f"r{i}", "right", i)) for i in range(1, int(n) + 1)]
    raise OptionError("topology", f"{text!r} is not a lab topology; accepted: line, dumbbell:N (N from 1 to 64)")


class Lab:
    """A topology of namespaces with an impaired middle; a context manager that
    removes everything it made when it exits, however it exits."""

    _counter = itertools.count()

    def __init__(self, topology: str = "line", impair: str = "emulator") -> None:
        require_root()
        if impair not in IMPAIRMENTS:
            raise OptionError("impair", f"{impair!r} is not an impairment method; accepted: {', '.join(IMPAIRMENTS)}")
        if impair == "iptables" and shutil.which("iptables") is None:
            raise LabError("--impair iptables needs the iptables command (Debian package iptables; `make lab-deps` installs it)")
        self.topology, self.pairs = parse_topology(topology)
        self.impair = impair
        self.id = f"{PREFIX}{os.getpid():x}{next(self._counter)}"
        self.processes: list[Process] = []
        self.built: list[str] = []
        self.closed = False

    # ---- names ----
    def ns(self, host: str) -> str:
        return f"{self.id}-{host}"

    @property
    def hosts(self) -> list[Host]:
        return [h for pair in self.pairs for h in pair]

    @property
    def dumbbell(self) -> bool:
        return self.topology != "line"

    def emulator_interfaces(self) -> tuple[str, str]:
        """The router's interfaces facing the clients' side and the servers' side."""
        return ("ul", "ur") if self.dumbbell else ("client", "server")

    # ---- building ----
    def __enter__(self) -> "Lab":
        try:
            self.build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _netns(self, host: str, *argv: str) -> None:
        _run(["ip", "netns", "exec", self.ns(host), *argv])

    def _add_namespace(self, host: str) -> None:
        _run(["ip", "netns", "add", self.ns(host)])
        self.built.append(self.ns(host))
        _run(["ip", "-n", self.ns(host), "link", "set", "lo", "up"])
        # Only the packets of the run cross the link: no IPv6 chatter; and every
        # connection starts from scratch, not from metrics the last run cached.
        for key, value in (("net.ipv6.conf.all.disable_ipv6", "1"), ("net.ipv6.conf.default.disable_ipv6", "1"),
                           ("net.ipv4.tcp_no_metrics_save", "1")):
            self._netns(host, "sysctl", "-qw", f"{key}={value}")

    def _veth(self, host_ns: str, host_if: str, other_ns: str, other_if: str, mac: Optional[str] = None) -> None:
        argv = ["ip", "link", "add", host_if, "netns", self.ns(host_ns)]
        if mac:
            argv += ["address", mac]
        _run(argv + ["type", "veth", "peer", "name", other_if, "netns", self.ns(other_ns)])
        for ns, iface in ((host_ns, host_if), (other_ns, other_if)):
            _core.lab_offloads_off(self.ns(ns), iface)
            _run(["ip", "-n", self.ns(ns), "link", "set", iface, "up"])

    def build(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        (STATE_DIR / f"{self.id}.json").write_text(json.dumps({"pid": os.getpid(), "topology": self.topology, "impair": self.impair}))
        clean()  # what crashed labs left behind
        self._add_namespace("router")
        for host in self.hosts:
            self._add_namespace(host.name)
        r = "router"
        routed = self.impair == "iptables"
        for host in self.hosts:
            self._veth(host.name, "eth0", r, host.name, host.mac)
            prefix = 24 if routed else 16
            _run(["ip", "-n", self.ns(host.name), "addr", "add", f"{host.address}/{prefix}", "dev", "eth0"])
            if routed:
                _run(["ip", "-n", self.ns(host.name), "route", "add", "default", "via", f"10.0.{1 if host.side == 'left' else 2}.254"])
        if self.dumbbell:
            for side in ("left", "right"):
                _run(["ip", "-n", self.ns(r), "link", "add", side, "type", "bridge", "forward_delay", "0", "stp_state", "0"])
                _run(["ip", "-n", self.ns(r), "link", "set", side, "up"])
            for host in self.hosts:
                _run(["ip", "-n", self.ns(r), "link", "set", host.name, "master", host.side])
            if not routed:
                # The emulator sits between the two bridges on a veth pair each.
                for side, port, emu in (("left", "el", "ul"), ("right", "er", "ur")):
                    _run(["ip", "-n", self.ns(r), "link", "add", port, "type", "veth", "peer", "name", emu])
                    for iface in (port, emu):
                        _core.lab_offloads_off(self.ns(r), iface)
                        _run(["ip", "-n", self.ns(r), "link", "set", iface, "up"])
                    _run(["ip", "-n", self.ns(r), "link", "set", port, "master", side])
        if routed:
            left_if, right_if = ("left", "right") if self.dumbbell else ("client", "server")
            _run(["ip", "-n", self.ns(r), "addr", "add", "10.0.1.254/24", "dev", left_if])
            _run(["ip", "-n", self.ns(r), "addr", "add", "10.0.2.254/24", "dev", right_if])
            self._netns(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        else:
            # Nothing but the run's packets crosses the emulator: neighbours are known in advance.
            for a in self.hosts:
                for b in self.hosts:
                    if a.side != b.side:
                        _run(["ip", "-n", self.ns(a.name), "neigh", "replace", b.address, "lladdr", b.mac, "dev", "eth0", "nud", "permanent"])

    def udp_receive_drops(self) -> int:
        """Datagrams the hosts' kernels dropped because a socket's buffer was full (Udp
        RcvbufErrors, summed over hosts): loss that is not the link's, counted so a run shows it."""
        total = 0
        for host in self.hosts:
            text = _run(["ip", "netns", "exec", self.ns(host.name), "cat", "/proc/net/snmp"], check=False).stdout
            udp = [line.split() for line in text.splitlines() if line.startswith("Udp:")]
            if len(udp) == 2:
                total += int(dict(zip(udp[0], udp[1])).get("RcvbufErrors", 0))
        return total

    def spawn(self, host: str, argv: Sequence[str], label: Optional[str] = None) -> Process:
        if self.closed:
            raise LabError("the lab is closed")
        p = Process(label or f"{host}: {' '.join(argv[:4])}", ["ip", "netns", "exec", self.ns(host), *argv])
        self.processes.append(p)
        return p

    def close(self) -> None:
        """Stops every process and removes every namespace (their interfaces go with them)."""
        if self.closed:
            return
        self.closed = True
        for p in self.processes:
            try:
                p.stop(grace=2.0)
            except Exception:  # noqa: BLE001 - cleanup goes on whatever one process does
                pass
        for name in reversed(self.built):
            _remove_namespace(name)
        (STATE_DIR / f"{self.id}.json").unlink(missing_ok=True)

    # ---- impairment ----
    def impair_link(self, link_pairs: Sequence[tuple[str, str]], seed: int = 1, log: Optional[str] = None) -> Optional[Process]:
        """Puts the link the options describe between the two sides: starts the emulator
        (returned; stop it to get its account as JSON on stdout) or sets iptables and tbf."""
        link = describe_link(link_pairs)
        if self.impair == "iptables":
            check_iptables_link(link)
            self.impair_iptables(link)
            return None
        up_in, down_in = self.emulator_interfaces()
        emulator = self.spawn("router", [sys.executable, "-m", "fencepost._lab_agent", "emulate", "--up-in", up_in, "--down-in", down_in,
                                         "--seed", str(seed), "--options", json.dumps(list(link_pairs))] + (["--log", log] if log else []),
                              label="emulator")
        emulator.wait_ready()
        return emulator

    def impair_iptables(self, link: Mapping[str, Any]) -> None:
        """The seed article's method at the router: statistic-match drop, tbf rate.
        ``link`` is :func:`describe_link`'s view of the link options."""
        up, down = link["up"], link["down"]
        r = self.ns("router")
        left_if, right_if = ("left", "right") if self.dumbbell else ("client", "server")
        _run(["ip", "netns", "exec", r, "iptables", "-F", "FORWARD"])
        for direction, inbound, outbound in ((up, left_if, right_if), (down, right_if, left_if)):
            p = float(direction["loss"]["mean"])
            if p > 0:
                _run(["ip", "netns", "exec", r, "iptables", "-A", "FORWARD", "-i", inbound, "-m", "statistic", "--mode", "random",
                      "--probability", f"{p:.6f}", "-j", "DROP"])
            _run(["ip", "netns", "exec", r, "tc", "qdisc", "del", "dev", outbound, "root"], check=False)
            bps = direction["rate_bps"]
            if bps:
                burst = max(3028, bps // 8 // 1000)  # a millisecond's worth, at least two frames
                # tbf needs a limit: the queue given, or a megabyte (the simulator's default queue is unlimited).
                limit = direction["queue_bytes"] or (direction["queue_packets"] or 0) * 1514 or 1 << 20
                _run(["ip", "netns", "exec", r, "tc", "qdisc", "add", "dev", outbound, "root", "tbf", "rate", f"{bps}bit",
                      "burst", str(burst), "limit", str(limit)])




def describe_link(pairs: Sequence[tuple[str, str]]) -> dict:
    """The link the simulator's link options describe (both directions), parsed by its own parser."""
    try:
        return json.loads(_core.lab_link(list(pairs)))
    except ValueError as exc:
        raise option_error_from_native(exc) from None


def check_iptables_link(link: Mapping[str, Any]) -> None:
    """The iptables method drops at random and limits the rate; nothing else."""
    found: dict[str, list[str]] = {}
    for name in ("up", "down"):
        d = link[name]
        checks = [
            (d["delay_us"] or d["jitter_us"], "delay/jitter (this kernel has no netem)"),
            (d["loss"]["model"] == "gilbert", "Gilbert-Elliott loss"),
            (d["trace_mean_bps"] is not None, "a trace"),
            (d["dup"], "duplication"),
            (d["corrupt"], "corruption"),
            (d["loss_after_bottleneck"] and d["loss"]["mean"], "loss after the bottleneck (iptables drops before tbf)"),
        ]
        for present, what in checks:
            if present:
                found.setdefault(what, []).append(name)
    if found:
        parts = [f"{what} ({'both directions' if len(dirs) == 2 else dirs[0] + ' direction'})" for what, dirs in found.items()]
        raise OptionError("impair", f"iptables cannot emulate {', '.join(parts)}; use --impair emulator")


# ---- transports ----

@dataclass(frozen=True)
class FlowTransport:
    """One flow's transport: ``fencepost`` with options, ``tcp`` with a kernel controller, or ``echo``."""

    kind: str
    options: tuple = ()  # (option, value) pairs for fencepost and echo
    cc: str = ""  # the kernel's controller, for tcp

    def label(self) -> str:
        if self.kind == "tcp":
            return f"tcp:{self.cc}"
        return self.kind + "".join(f"+{k}={v}" for k, v in self.options)


def parse_transport(text: str, flows: int = 1) -> list[FlowTransport]:
    """``ITEM[&ITEM...]``: one item for every flow, or one per flow; an ITEM is
    ``fencepost[+OPTION=VALUE...]``, ``echo[+OPTION=VALUE...]`` (the seed article's
    echo benchmark over fencepost) or ``tcp:CC`` (kernel TCP with controller CC)."""
    items = [t.strip() for t in text.split("&")]
    if len(items) not in (1, flows):
        raise OptionError("transport", f"{text!r} names {len(items)} transports for {flows} flows; give one, or one per flow joined by &")
    out = []
    for item in items:
        head, *rest = item.split("+")
        if head.startswith("tcp:") and not rest:
            cc = head[4:]
            if not cc:
                raise OptionError("transport", "tcp needs a kernel congestion control, like tcp:cubic, tcp:bbr or tcp:reno")
            out.append(FlowTransport("tcp", cc=cc))
            continue
        if head not in ("fencepost", "echo"):
            raise OptionError("transport", f"{item!r} is not a transport; accepted: fencepost[+OPTION=VALUE...], echo[+OPTION=VALUE...], tcp:CC (like tcp:cubic)")
        opts = []
        for kv in rest:
            key, sep, value = kv.partition("=")
            if not sep or key not in FENCEPOST_OPTIONS:
                raise OptionError("transport", f"{kv!r} in {item!r}: expected OPTION=VALUE with OPTION one of {', '.join(FENCEPOST_OPTIONS)}")
            opts.append((key, value))
        try:
            _core.check_options("send", opts + [("time", "1s")])
        except ValueError as exc:
            raise OptionError("transport", f"{item!r}: {option_error_from_native(exc)}") from None
        out.append(FlowTransport(head, tuple(opts)))
    return out * flows if len(out) == 1 else out


# ---- runs ----

@dataclass
class Workload:
    """What every flow does: a bulk transfer of ``bytes`` or for ``seconds``; echo flows send ``messages``."""

    bytes: Optional[int] = None
    seconds: Optional[float] = None
    messages: int = 1000


def _flow_argv(kind: str, t: FlowTransport, host: Host, w: Workload) -> list[str]:
    py = [sys.executable]
    target = f"{host.address}:{SERVER_PORT}"
    opts = [a for k, v in t.options for a in (f"--{k}", v)]
    if kind == "server":
        if t.kind == "tcp":
            return py + ["-m", "fencepost._lab_agent", "tcp-sink", "--host", host.address, "--port", str(SERVER_PORT)]
        return py + ["-m", "fencepost.cli", "serve", "--json", "--listen", target] + (["--echo"] if t.kind == "echo" else []) + opts
    if t.kind == "tcp":
        amount = ["--bytes", str(w.bytes)] if w.bytes else []
        return py + ["-m", "fencepost._lab_agent", "tcp-send", "--host", host.address, "--port", str(SERVER_PORT), "--cc", t.cc,
                     "--seconds", str(w.seconds or 0)] + amount
    if t.kind == "echo":
        pairs = list(t.options) + [("messages", str(w.messages))]
        return py + ["-m", "fencepost._lab_agent", "echo", "--host", host.address, "--port", str(SERVER_PORT), "--options", json.dumps(pairs)]
    amount = ["--bytes", str(w.bytes)] if w.bytes else ["--time", f"{w.seconds}s"]
    return py + ["-m", "fencepost.cli", "send", "--json", target, "--interval", "0.5s"] + amount + opts


def _goodput(bytes_: int, series: Sequence[int], last_byte_s: float, w: Workload) -> float:
    """At the receiver: for a timed run, what arrived while the sender was writing, over
    that time (as the simulator measures it); otherwise the bytes over the time from the
    client's first attempt to connect to the last byte."""
    if w.seconds:
        at = int(round(w.seconds / SERIES_INTERVAL_S))
        got = series[at - 1] if 0 < at <= len(series) else bytes_
        return got * 8 / w.seconds
    return bytes_ * 8 / last_byte_s if last_byte_s > 0 else 0.0


def _series_bps(series: Sequence[int]) -> list[float]:
    return [(b - a) * 8 / SERIES_INTERVAL_S for a, b in zip([0, *series[:-1]], series)]


def _flow_result(index: int, t: FlowTransport, client: Process, server: Process, w: Workload, client_rc: Optional[int],
                 overdue: Optional[str] = None) -> dict:
    """One flow's figures in the simulator's names, from what its two ends reported."""
    f: dict = {"flow": index + 1, "transport": t.label(), "status": "ok", "error": None}
    document = client.json_document() if t.kind == "fencepost" else None
    sent = [document] if document else client.json_lines()
    # A connection's account, not the endpoint's counters that `serve --json` prints when stopped.
    received = [line for line in server.json_lines() if "endpoint" not in line]
    if overdue is not None:
        got = f"; the server had read {received[-1]['bytes']:,} bytes" if received and "bytes" in received[-1] else ""
        f.update(status="failed", error=f"client: {overdue}{got}", integrity_ok=False)
        return f
    if client_rc is None or not sent:
        f.update(status="failed", error=f"client: {client.errors()}", integrity_ok=False)
        return f
    s = sent[-1]
    if t.kind == "echo":
        f.update(integrity_ok=bool(s["hashes_match"]), bytes_delivered=s["bytes"], duration_s=s["time_to_completion_s"],
                 goodput_bps=s["bytes"] * 8 / s["time_to_completion_s"] if s["time_to_completion_s"] else 0.0,
                 packets_sent=s["packets_sent"], retransmissions=s["retransmissions"], messages=s["messages"])
        return f
    if not received:
        # A sender that gave up (its flush stalled or outlasted its bound) left the server still waiting
        # for the rest when it was stopped, so it has no account to give: the sender's reason
        # is the one to report.
        fp = s.get("end", {}).get("fencepost", {}) if t.kind == "fencepost" else {}
        if fp.get("complete") is False:
            f.update(status="failed", error=f"incomplete: {fp.get('incomplete_reason')} (the server had not finished the connection when it was stopped)", integrity_ok=False)
        else:
            f.update(status="failed", error=f"server reported no connection: {server.errors()}", integrity_ok=False)
        return f
    r = received[-1]
    series = r.get("delivered_series", [])
    if t.kind == "tcp":
        last_byte = r["duration_s"]
        ok = s.get("error") is None and s.get("receiver_bytes") == s["bytes_sent"] == r["bytes"]
        f.update(bytes_delivered=r["bytes"], duration_s=last_byte, packets_sent=s["segments_sent"], data_packets_sent=s["data_segments_sent"],
                 retransmissions=s["retransmissions"], rtt_mean_ms=s["rtt_mean_ms"], min_rtt_ms=s["min_rtt_ms"],
                 peer_packets_sent=r["segments_sent"], tcp_samples=s["samples"])
        if s.get("error"):
            f.update(status="failed", error=f"client: {s['error']}")
    else:
        end = s["end"]
        fp = end["fencepost"]
        last_byte = r["last_byte_s"]
        ok = bool(fp["hashes_match"])
        f.update(bytes_delivered=r["bytes"], duration_s=last_byte, packets_sent=fp["packets_sent"], data_packets_sent=fp["data_packets_sent"],
                 # The mean of the flow's RTT samples, as the simulator's row has it (the smoothed RTT at the
                 # end is the path after other flows finished: 40 ms for a flow that had seen 60 for 30 s).
                 retransmissions=end["sum_sent"]["retransmits"], rtt_mean_ms=fp.get("rtt_mean_ms"), peer_packets_sent=r["packets_sent"])
        if not fp["complete"]:
            f.update(status="failed", error=f"incomplete: {fp['incomplete_reason']}")
    f["integrity_ok"] = ok
    # On one host both ends share a clock: measured from the client's first connection attempt, as the
    # simulator measures a flow from its start (a handshake that needed retries counts).
    started = (s["end"]["fencepost"] if t.kind == "fencepost" else s).get("connect_started_unix")
    if started and r.get("accepted_unix"):
        f["duration_s"] = last_byte = r["accepted_unix"] + last_byte - started
        f["started_unix"] = started
    f["goodput_bps"] = _goodput(r["bytes"], series, last_byte, w)
    f["goodput_series_bps"] = _series_bps(series)
    return f


def _jain(values: Sequence[float]) -> float:
    total = sum(values)
    squares = sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares > 0 else math.nan


def run_once(lab: Lab, transports: Sequence[FlowTransport], link_pairs: Sequence[tuple[str, str]], workload: Workload,
             seed: int = 1, starts: Sequence[float] = (), log: Optional[str] = None, timeout: Optional[float] = None) -> dict:
    """One run on a built lab: impair the middle, start the servers, start each client at
    its start time, wait for every client, and return the run as a row (flow 1's figures at
    the top, every flow's in ``flows``, the emulator's account under ``link_up``/``link_down``)."""
    host_drops_before = lab.udp_receive_drops()
    cpu_before = cpu_times()
    emulator = lab.impair_link(link_pairs, seed, log)
    servers, clients = [], []
    try:
        for (client_host, server_host), t in zip(lab.pairs, transports):
            server = lab.spawn(server_host.name, _flow_argv("server", t, server_host, workload), label=f"{server_host.name} ({t.label()} server)")
            if t.kind == "tcp":
                server.wait_ready()
            else:
                server.wait_for(lambda p: any("listening on" in line for line in p.stdout), 20.0, "listening")
            servers.append(server)
        began = time.monotonic()
        order = sorted(range(len(lab.pairs)), key=lambda i: starts[i] if i < len(starts) else 0.0)
        by_flow: dict[int, Process] = {}
        for i in order:
            delay = (starts[i] if i < len(starts) else 0.0) - (time.monotonic() - began)
            if delay > 0:
                time.sleep(delay)
            client_host, server_host = lab.pairs[i]
            by_flow[i] = lab.spawn(client_host.name, _flow_argv("client", transports[i], server_host, workload),
                                   label=f"{client_host.name} ({transports[i].label()} client)")
        clients = [by_flow[i] for i in range(len(lab.pairs))]
        limit = timeout or ((workload.seconds or 0) + 120 if workload.seconds else 600)
        deadline = time.monotonic() + limit
        codes = []
        overdue: dict[int, str] = {}
        for i, c in enumerate(clients):
            try:
                codes.append(c.finish(max(1.0, deadline - time.monotonic())))
            except LabError:
                # Kernel TCP at 30 % loss can take far longer than the run's limit: say so,
                # rather than report a client that was stopped as one that failed mutely.
                codes.append(None)
                overdue[i] = f"not finished within the run's limit of {limit:.0f} s (--timeout), so stopped"
        # Servers write a connection's account once it has closed: give them a moment.
        for i, (server, t) in enumerate(zip(servers, transports)):
            # A stopped client's connection does not close in time to be accounted for.
            if t.kind != "echo" and i not in overdue:
                try:
                    server.wait_for(lambda p: any("endpoint" not in line for line in p.json_lines()), 15.0, "its account of the connection")
                except LabError:
                    pass
    finally:
        for server in servers:
            server.stop()
        if emulator is not None:
            emulator.stop(grace=10.0)
    flows = [_flow_result(i, t, clients[i], servers[i], workload, codes[i], overdue.get(i)) for i, t in enumerate(transports)]
    row: dict = {"mode": "lab", "impair": lab.impair, "topology": lab.topology, "seed": seed}
    first = flows[0]
    row.update({k: v for k, v in first.items() if k not in ("flow", "tcp_samples", "goodput_series_bps")})
    row["status"] = "ok" if all(f["status"] == "ok" for f in flows) else "failed"
    row["integrity_ok"] = all(f.get("integrity_ok") for f in flows)
    row["error"] = "; ".join(f"flow {f['flow']}: {f['error']}" for f in flows if f.get("error")) or None
    if len(flows) > 1:
        row["jain_index"] = _jain([f.get("goodput_bps", 0.0) for f in flows])
        for f in flows:
            for name in ("goodput_bps", "rtt_mean_ms", "retransmissions"):
                row[f"flow{f['flow']}_{name}"] = f.get(name)
    stolen = stolen_share(cpu_before, cpu_times())
    if stolen is not None:
        row["host_cpu_stolen_share"] = round(stolen, 3)
    if emulator is not None:
        reports = emulator.json_lines()
        if not reports:
            raise LabError(f"the emulator gave no account: {emulator.errors()}")
        e = reports[-1]
        for direction in ("up", "down"):
            d = e[direction]
            for k, v in d["stats"].items():
                row[f"link_{direction}_{k}"] = v
            for k in ("queue_delay_p95_ms", "lateness_p99_us", "kernel_drops", "send_errors"):
                row[f"link_{direction}_{k}"] = d[k]
        row["link_drops"] = sum(e[d]["stats"]["lost"] + e[d]["stats"]["queue_dropped"] for d in ("up", "down"))
        row["emulator"] = e
        warning = emulator_warning(e, stolen)
        if warning:
            row["warning"] = warning
    row["host_udp_receive_drops"] = lab.udp_receive_drops() - host_drops_before
    row["flows"] = flows
    return row


# Lateness (99th percentile, either direction) beyond which a run's row carries a warning:
# a tenth of the default 10 ms delay. On time the emulator leaves frames tens of
# microseconds late (bench/lab_fidelity.py); milliseconds mean it was kept from running.
EMULATOR_LATE_US = 1000


# A share of the CPU time taken by the hypervisor worth naming beside a late emulator.
STOLEN_NOTABLE = 0.05


def emulator_warning(report: Mapping[str, Any], stolen: Optional[float] = None) -> Optional[str]:
    """What a run's row should say about its emulator's account: that it ran late (and, on a
    virtual machine, how much CPU time the hypervisor took meanwhile), or nothing."""
    late_us = max(report[d].get("lateness_p99_us") or 0 for d in ("up", "down"))
    if late_us <= EMULATOR_LATE_US:
        return None
    warning = (f"the emulator left frames {late_us / 1000:.1f} ms late (99th percentile): the host was too busy "
               "to run the link on time, so these figures are not the emulated link's")
    if stolen is not None and stolen >= STOLEN_NOTABLE:
        warning += f" (the hypervisor took {stolen:.0%} of this machine's CPU time during the run)"
    return warning


def cpu_times(stat: str = "/proc/stat") -> Optional[tuple[int, int]]:
    """This machine's CPU time so far, all CPUs, in clock ticks: (all of it, the part its
    hypervisor ran something else in, "steal"); None where /proc/stat says no such thing."""
    try:
        with open(stat) as f:
            fields = f.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal (guest time is inside user).
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:9]]
    return sum(ticks), ticks[7]


def stolen_share(before: Optional[tuple[int, int]], after: Optional[tuple[int, int]]) -> Optional[float]:
    """The share of the CPU time between two `cpu_times` readings that the hypervisor took."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


# ---- sweeps of lab runs ----

WORKLOAD_OPTIONS = ("bytes", "time", "messages", "start")
NOT_IN_LAB = {"scenario": "a scenario file (the lab builds line and dumbbell:N)", "event": "link events",
              "series": "--series (lab runs always record goodput every 0.1 s)", "timeout": "--timeout among the link and workload options (lab_sweep takes it as timeout=, in wall-clock seconds)",
              "workload": "--workload (choose --transport echo for the echo benchmark)"}


def _is_link_option(name: str) -> bool:
    base = name[:-3] if name.endswith("-up") else name[:-5] if name.endswith("-down") else name
    return base in LINK_OPTIONS


def split_options(options: Mapping[str, Any], impair: str) -> tuple[list, Workload, list, list]:
    """Run options as (link pairs, workload, fencepost option pairs, per-flow start times)."""
    for name in options:
        if name in NOT_IN_LAB:
            raise OptionError(name, f"the lab does not take {NOT_IN_LAB[name]}")
    link = {k: v for k, v in options.items() if _is_link_option(k)}
    if impair == "iptables" and not any(k in link for k in ("delay", "delay-up", "delay-down")):
        link["delay"] = "0"  # the simulator's default delay cannot be had without an emulator
    link_pairs = normalize_options(link)
    describe_link(link_pairs)  # errors name the option
    given = {k: v for k, v in options.items() if k in WORKLOAD_OPTIONS}
    if "bytes" in given and "time" in given:
        raise OptionError("time", "give either --bytes or --time, not both")
    w = Workload()
    pairs = dict(normalize_options(given))
    try:
        checked = dict(_core.check_options("sim", list(pairs.items())))
    except ValueError as exc:
        raise option_error_from_native(exc) from None
    if "time" in pairs:
        w.seconds = _seconds(pairs["time"], "time")
    else:
        w.bytes = _bytes(checked["bytes"])
    w.messages = int(checked["messages"])
    starts_raw = options.get("start", [])
    starts = [_seconds(str(s), "start") for s in (starts_raw if isinstance(starts_raw, (list, tuple)) else [starts_raw])]
    for k in FENCEPOST_OPTIONS:
        if isinstance(options.get(k), (list, tuple)):
            raise OptionError(k, "the lab applies --{k} to every fencepost flow; for one value per flow, join transports with & (fencepost+cc=bbr&fencepost+cc=tolerant)".replace("{k}", k))
    fencepost = normalize_options({k: v for k, v in options.items() if k in FENCEPOST_OPTIONS})
    return link_pairs, w, fencepost, starts


def _seconds(text: str, option: str) -> float:
    try:
        return _core.parse_quantity(option, "duration", text)
    except ValueError as exc:
        raise option_error_from_native(exc) from None


def _bytes(text: str) -> int:
    try:
        return int(_core.parse_quantity("bytes", "bytes", text))
    except ValueError as exc:
        raise option_error_from_native(exc) from None


def _flatten(row: Mapping[str, Any]) -> dict:
    return {k: v for k, v in row.items() if not isinstance(v, (list, dict))}


def lab_sweep(grid: Mapping[str, Sequence[Any]], fixed: Mapping[str, Any], transports: Sequence[str], trials: int = 5, seed: int = 1,
              topology: str = "line", impair: str = "emulator", out: Optional[str] = None, progress: bool = True,
              log_dir: Optional[str] = None, timeout: Optional[float] = None) -> tuple[list, list]:
    """Every transport × every combination of ``grid`` values × ``trials``, one after
    another on one lab (runs in parallel would share the cores and skew each other).
    Returns (rows, summary) shaped like a simulated sweep's; with ``out``, writes
    runs.jsonl (full records), runs.csv and summary.csv there, and resumes from runs.jsonl.
    ``timeout``: seconds of wall-clock time each run may take before its unfinished flows
    are stopped and the run is a failed row (default: 600 for a transfer of ``bytes``, the
    writing time plus 120 for ``time``)."""
    from .sweep import Progress, _condition_text, _write_csv, summarize, with_numeric_conditions

    _, pairs = parse_topology(topology)
    keys = list(grid)
    conditions = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))] or [{}]
    plans = []
    for transport in transports:
        flows = parse_transport(transport, len(pairs))
        for condition in conditions:
            options = {**fixed, **condition}
            link_pairs, w, fp_opts, starts = split_options(options, impair)
            for trial in range(trials):
                key_src = json.dumps([topology, impair, transport, sorted((k, str(v)) for k, v in options.items()), seed + trial])
                key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
                merged = [FlowTransport(f.kind, tuple(fp_opts) + f.options, f.cc) if f.kind != "tcp" else f for f in flows]
                plans.append((key, transport, condition, trial, merged, link_pairs, w, starts))
    done: dict[str, dict] = {}
    if log_dir is not None:
        # Made here as --out's is: a directory that was not there made the emulator fail
        # at its first run, reported as a failed row rather than as the option's fault.
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    out_dir = Path(out) if out else None
    runs_path = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        runs_path = out_dir / "runs.jsonl"
        if runs_path.exists():
            for line in runs_path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                done[record.get("key")] = record
    todo = [p for p in plans if p[0] not in done]
    bar = Progress(len(plans), label="lab runs", enabled=progress)
    bar.done = len(plans) - len(todo)
    try:
        if todo:
            with Lab(topology, impair) as lab:
                for key, transport, condition, trial, flows, link_pairs, w, starts in todo:
                    log = str(Path(log_dir) / f"{key}.log") if log_dir else None
                    try:
                        row = run_once(lab, flows, link_pairs, w, seed=seed + trial, starts=starts, log=log, timeout=timeout)
                    except LabError as exc:
                        # A run that could not be carried out is a failed row, shown and counted.
                        row = {"mode": "lab", "impair": impair, "topology": topology, "status": "failed", "integrity_ok": False, "error": str(exc)}
                    record = {**row, "transport": transport, **{k: _condition_text(v) for k, v in condition.items()}, "trial": trial, "key": key}
                    if row.get("warning") and progress:
                        print(f"\nwarning: {transport} trial {trial}: {row['warning']}", file=sys.stderr, flush=True)
                    done[key] = record
                    if runs_path is not None:
                        with open(runs_path, "a", encoding="utf-8") as f:
                            f.write(json.dumps(record) + "\n")
                    bar.advance()
    finally:
        bar.close()
    rows = [done[p[0]] for p in plans if p[0] in done]
    flat = [_flatten(r) for r in rows]
    summary = with_numeric_conditions(summarize(flat, ["transport", *keys]), ["transport", *keys])
    if out_dir is not None:
        _write_csv(out_dir / "runs.csv", flat)
        _write_csv(out_dir / "summary.csv", summary)
    return rows, summary
