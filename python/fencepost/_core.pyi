"""Type stubs for the native module fencepost._core."""

from typing import Awaitable

__version__: str

def simulate(options: list[tuple[str, str]], events: str | None = None, parallel: bool = False) -> str:
    """Runs one scenario; returns the report as JSON; with `events`, writes the
    per-packet event log there (JSON lines); with `parallel`, runs on two threads where
    the run allows (the same report). Raises ValueError((option, message)).
    Ctrl-C stops the run and raises KeyboardInterrupt."""
def simulate_parallel(options: list[tuple[str, str]], events: str | None = None) -> tuple[str, float, str | None]:
    """As `simulate` with `parallel`; returns the report as JSON, the simulated seconds
    run on two threads, and why the run stayed on one throughout (None when it split)."""

def check_options(command_name: str, options: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Validates options for a command (sim, sweep, send, serve, echo-bench); for sim and sweep returns
    the run's options with defaults, for the others the options given. Raises ValueError((option, message))."""

def option_specs() -> str:
    """Every option of every command as JSON (name, scope, kind, metavar, default, help, choices,
    commands, per_flow, per_direction, repeatable, aliases)."""

def report_schema() -> str:
    """The report's fields as JSON: {"flow": [...], "run": [...], "link": [...], "link_stats": [...]}."""

def report_text(report: str) -> str:
    """The human summary of a report given as JSON."""

def decode_packet(data: bytes) -> str:
    """The packet type of one datagram; ValueError saying what is wrong otherwise."""

def parse_unit(kind: str, option: str, text: str) -> int:
    """A value through its unit parser: rate in bit/s, duration in microseconds, size in bytes."""
    ...

def generate_trace(kind: str, bits_per_second: int, duration_ms: int = 60000, seed: int = 1) -> str:
    """A mahimahi trace as text: kind "constant" or "poisson"."""

def register_python_controller(make: object, label: str) -> str:
    """Makes `make()` (returning a controller object) usable as `--cc NAME`; returns NAME."""

class Ack:
    """What one ack brought (see fencepost.Controller)."""
    time: float
    bytes: int
    new_bytes: int
    packets: int
    lost_bytes: int
    in_flight: int
    rtt: float
    smoothed_rtt: float
    min_rtt: float
    delivery_rate: float | None
    rate_app_limited: bool
    app_limited: bool
    mss: int

class Loss:
    """A loss episode or a timeout (see fencepost.Controller)."""
    time: float
    sent_time: float
    lost_bytes: int
    in_flight: int
    mss: int

def echo_bench(host: str, port: int, options: list[tuple[str, str]] = ...) -> str:
    """The seed article's echo benchmark against a `serve --echo`; the result as JSON."""

class Endpoint:
    """One UDP socket serving fencepost connections."""
    @staticmethod
    def bind(host: str, port: int, server: bool, options: list[tuple[str, str]] = ..., connect_timeout: float | None = None) -> "Endpoint": ...
    def local_addr(self) -> tuple[str, int]: ...
    def connect(self, host: str, port: int) -> "Connection": ...
    def accept(self, timeout: float | None = None) -> "Connection | None": ...
    def connect_async(self, host: str, port: int) -> Awaitable["Connection"]: ...
    def accept_async(self) -> Awaitable["Connection | None"]: ...
    def shutdown(self) -> None: ...
    def stats(self) -> tuple[int, int, int, int, int]: ...
    def connection_count(self) -> int: ...
    def endpoint_stats(self) -> dict[str, int | None]: ...
    def receive_buffer_warning(self) -> str | None: ...

class Connection:
    """One connection, a byte stream."""
    def remote_addr(self) -> tuple[str, int]: ...
    def send(self, data: bytes, timeout: float | None = None) -> int: ...
    def sendall(self, data: bytes, timeout: float | None = None) -> None: ...
    def recv(self, size: int, timeout: float | None = None) -> bytes: ...
    def recv_async(self, size: int) -> Awaitable[bytes]: ...
    def sendall_async(self, data: bytes) -> Awaitable[None]: ...
    def close_async(self) -> Awaitable[None]: ...
    def finish(self) -> None: ...
    def close(self, timeout: float | None = None) -> None: ...
    def abort(self) -> None: ...
    def stats(self) -> tuple[int, int, int, int, int, int]: ...

class Server:
    """A running `fencepost serve`."""
    @staticmethod
    def start(host: str, port: int, echo: bool, options: list[tuple[str, str]] = ...) -> "Server": ...
    def local_addr(self) -> tuple[str, int]: ...
    def poll(self, timeout: float = 0.2) -> list[str]: ...
    def stats(self) -> tuple[int, int, int, int, int]: ...
    def endpoint_stats(self) -> dict[str, int | None]: ...
    def receive_buffer_warning(self) -> str | None: ...
    def shutdown(self) -> None: ...

class Sender:
    """A running `fencepost send`."""
    @staticmethod
    def start(host: str, port: int, options: list[tuple[str, str]] = ...) -> "Sender": ...
    def amount(self) -> tuple[int | None, float | None]: ...
    def poll(self, timeout: float = 0.2) -> tuple[list[str], str | None]: ...
    def cancel(self) -> None: ...
    def receive_buffer_warning(self) -> str | None: ...

# ---- the lab (crates/fencepost-py/src/lab.rs); each call runs inside a network namespace ----
def lab_emulate(up_in: str, down_in: str, options: list[tuple[str, str]], seed: int, log: str | None = None) -> str:
    """Emulates the link `options` describe between two interfaces until SIGTERM/SIGINT; returns its account as JSON."""
def lab_link(options: list[tuple[str, str]]) -> str:
    """Both directions of the link the options describe, parsed, as JSON."""
def parse_quantity(option: str, kind: str, text: str) -> float:
    """A value by the one unit parser: duration (s), bytes, rate (bit/s) or probability."""
def lab_offloads_off(netns: str, iface: str) -> None:
    """Turns segmentation, aggregation and checksum offloads off on an interface in a namespace."""
def lab_tcp_send(host: str, port: int, cc: str, bytes: int | None, seconds: float, sample_ms: float = 10.0,
                 connect_timeout_s: float = 10.0, drain_timeout_s: float = 30.0) -> str:
    """Kernel TCP bulk sender with TCP_INFO samples; returns its report as JSON."""
def lab_tcp_sink(host: str, port: int) -> None:
    """Kernel TCP sink until stopped; prints one JSON line per connection."""
