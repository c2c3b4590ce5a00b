"""fencepost over real UDP: a socket-like blocking API and asyncio streams.

    import fencepost
    with fencepost.connect(("127.0.0.1", 5201)) as s:
        s.sendall(b"hello")
        print(s.recv(1024))

Blocking calls release the GIL and stay interruptible by Ctrl-C. Transport
options (``profile``, ``arq``, ``cc``, ``packet_size``, ``idle_timeout``,
``insecure``, ``cipher``) are the ``fencepost sim`` ones; a listener takes
``key`` (a key file from ``fencepost keygen``) and a client ``peer_key`` (the
server's public key: connect only to it). Without ``insecure`` every packet is
encrypted and authenticated. The asyncio API awaits the native futures
directly (they run on fencepost's tokio runtime and resolve in the caller's
event loop).

One socket may be used from several threads at once: concurrent ``sendall``
calls each queue their bytes whole (they never interleave), in whichever order
the threads got there; each blocked call is woken when room frees up.
"""

from __future__ import annotations

import asyncio
import collections
import math
from typing import Any, Awaitable, Callable, NamedTuple, Optional, Tuple

from . import _core
from ._errors import FencepostError, OptionError, option_error_from_native
from ._options import normalize_options

Address = Tuple[str, int]


class ConnectionLost(FencepostError, ConnectionError):
    """The connection ended abnormally: the peer vanished (idle timeout), reset it, or its
    host said its port closed."""


class Refused(FencepostError, ConnectionRefusedError):
    """The peer's host (or a router on the way) said the handshake cannot reach it: nothing
    listens on that port, or no route. Raised by a connect before the peer answered."""


class Timeout(FencepostError, TimeoutError):
    """An operation's timeout passed, or the peer never answered the handshake."""


def _options(options: dict) -> list:
    return normalize_options(options)


def _translate(exc: BaseException) -> BaseException:
    if isinstance(exc, FencepostError):
        return exc
    if isinstance(exc, TimeoutError):
        return Timeout(str(exc))
    if isinstance(exc, ConnectionRefusedError):
        return Refused(str(exc))
    if isinstance(exc, ConnectionError):
        return ConnectionLost(str(exc))
    if isinstance(exc, ValueError) and exc.args and isinstance(exc.args[0], tuple):
        return option_error_from_native(exc)
    if isinstance(exc, ValueError) and len(exc.args) == 2:
        return option_error_from_native(exc)
    if isinstance(exc, OSError):
        return FencepostError(str(exc))
    return exc


def _call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except (OSError, ValueError) as exc:
        raise _translate(exc) from None


def _check_timeout(timeout: Any) -> Optional[float]:
    """None, or a number of seconds as ``socket.settimeout`` takes it."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be None or a number of seconds, not {type(timeout).__name__}")
    timeout = float(timeout)
    if math.isnan(timeout):
        raise ValueError("timeout must be a number of seconds, not NaN")
    if timeout < 0:
        raise ValueError("timeout must be None or a non-negative number of seconds")
    if timeout > 1e9:  # about 32 years; beyond it the clock overflows
        raise OverflowError(f"timeout {timeout} s is too large; give None to wait without limit")
    return timeout


def _check_size(size: Any, what: str) -> int:
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"{what} must be an int, not {type(size).__name__}")
    if size < 0:
        raise ValueError(f"negative {what} ({size})")
    if size >= 1 << 63:
        raise OverflowError(f"{what} {size} is too large")
    return size


class KeyPair(NamedTuple):
    """A static key pair, base64: ``private`` goes in the server's key file, ``public`` to its clients."""

    private: str
    public: str


def keygen() -> KeyPair:
    """A new key pair from the OS's random source."""
    return KeyPair(*_core.keygen())


def public_key(private: str) -> str:
    """The public key of a private key (both base64); ``ValueError`` if it is not a key."""
    return _core.public_key(private)


def _check_address(address: Any, what: str) -> Address:
    if not (isinstance(address, tuple) and len(address) == 2 and isinstance(address[0], str) and isinstance(address[1], int)):
        raise OptionError(what, f"{address!r} is not a (host, port) tuple")
    if not 0 <= address[1] <= 65535:
        raise OptionError(what, f"port {address[1]} is outside 0-65535")
    return address


class Socket:
    """A connected fencepost stream with the shape of a ``socket.socket``."""

    def __init__(self, native: "_core.Connection", endpoint: Optional["_core.Endpoint"] = None) -> None:
        self._conn = native
        self._endpoint = endpoint  # a client socket owns its endpoint
        self._timeout: Optional[float] = None
        self._closed = False

    # -- socket-like --
    def settimeout(self, timeout: Optional[float]) -> None:
        self._timeout = _check_timeout(timeout)

    def gettimeout(self) -> Optional[float]:
        return self._timeout

    def getpeername(self) -> Address:
        return self._conn.remote_addr()

    @property
    def peer_key(self) -> Optional[str]:
        """The server's public key as the handshake proved it (a client socket), or None."""
        return self._conn.peer_key()

    @property
    def protected(self) -> bool:
        """Every packet is encrypted and authenticated (not ``insecure``, not the seed profile)."""
        return self._conn.is_protected()

    def send(self, data: bytes) -> int:
        """Queues what fits of ``data``; returns how many bytes were taken."""
        self._check_open()
        return _call(self._conn.send, bytes(data), self._timeout)

    def sendall(self, data: bytes) -> None:
        self._check_open()
        _call(self._conn.sendall, bytes(data), self._timeout)

    def recv(self, bufsize: int) -> bytes:
        """Up to ``bufsize`` bytes; ``b""`` once the peer finished its stream."""
        self._check_open()
        if _check_size(bufsize, "bufsize") == 0:
            return b""
        return _call(self._conn.recv, bufsize, self._timeout)

    def shutdown_write(self) -> None:
        """Finishes this side's stream (like ``shutdown(SHUT_WR)``); reading goes on."""
        self._conn.finish()

    def close(self, timeout: Optional[float] = 10.0) -> None:
        """Finishes the stream and waits (up to ``timeout``) for the peer to finish too."""
        if self._closed:
            return
        self._closed = True
        try:
            _call(self._conn.close, timeout)
        except Timeout:
            pass  # the close goes on in the background
        finally:
            if self._endpoint is not None:
                self._endpoint.shutdown()

    def stats(self) -> dict:
        names = ["packets_sent", "data_packets_sent", "retransmissions", "packets_received", "bytes_sent", "bytes_received"]
        return dict(zip(names, self._conn.stats()))

    def _check_open(self) -> None:
        if self._closed:
            raise FencepostError("the socket is closed")

    def __enter__(self) -> "Socket":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect(address: Address, timeout: Optional[float] = None, connect_timeout: float = 10.0, **options: Any) -> Socket:
    """Opens a fencepost connection to ``(host, port)``. ``connect_timeout``
    bounds the handshake; ``timeout`` becomes the socket's timeout."""
    host, port = _check_address(address, "address")
    bind_host = "::" if ":" in host else "0.0.0.0"
    endpoint = _call(_core.Endpoint.bind, bind_host, 0, False, _options(options), connect_timeout)
    try:
        native = _call(endpoint.connect, host, port)
    except BaseException:
        endpoint.shutdown()
        raise
    sock = Socket(native, endpoint)
    sock.settimeout(timeout)
    return sock


class Listener:
    """Accepts fencepost connections on one UDP port."""

    def __init__(self, address: Address, **options: Any) -> None:
        host, port = _check_address(address, "address")
        self._endpoint = _call(_core.Endpoint.bind, host, port, True, _options(options))
        self._timeout: Optional[float] = None
        self._closed = False

    def getsockname(self) -> Address:
        return self._endpoint.local_addr()

    def settimeout(self, timeout: Optional[float]) -> None:
        self._timeout = _check_timeout(timeout)

    @property
    def public_key(self) -> Optional[str]:
        """The server's static public key (base64): what clients pass as ``peer_key``."""
        return self._endpoint.public_key()

    def accept(self) -> Tuple[Socket, Address]:
        """The next connection and its peer's address; ``Timeout`` after the timeout."""
        if self._closed:
            raise FencepostError("the listener is closed")
        native = _call(self._endpoint.accept, self._timeout)
        if native is None:
            if self._closed:
                raise FencepostError("the listener is closed")
            raise Timeout(f"no connection within {self._timeout} s")
        return Socket(native), native.remote_addr()

    def close(self) -> None:
        """Stops listening; open connections end with it."""
        self._closed = True
        self._endpoint.shutdown()

    def stats(self) -> dict:
        """The endpoint's counters: datagrams received and dropped by cause, retries, stateless resets."""
        return self._endpoint.endpoint_stats()

    def __enter__(self) -> "Listener":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def listen(address: Address, **options: Any) -> Listener:
    """Listens for fencepost connections on ``(host, port)`` (port 0 picks one)."""
    return Listener(address, **options)


# ---- asyncio ----


async def _await(awaitable: Awaitable) -> Any:
    """Awaits a native awaitable (run on fencepost's tokio runtime), with fencepost's exceptions."""
    try:
        return await awaitable
    except (OSError, ValueError) as exc:
        raise _translate(exc) from None


class StreamReader:
    """Reads from a fencepost connection, like ``asyncio.StreamReader``."""

    def __init__(self, sock: Socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._eof = False

    async def _fill(self, n: int) -> None:
        data = await _await(self._sock._conn.recv_async(max(n, 65536)))
        if data:
            self._buffer += data
        else:
            self._eof = True

    async def read(self, n: int = -1) -> bytes:
        if n == 0:
            return b""
        if n < 0:
            while not self._eof:
                await self._fill(65536)
            data, self._buffer = bytes(self._buffer), bytearray()
            return data
        if not self._buffer and not self._eof:
            await self._fill(n)
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    async def readexactly(self, n: int) -> bytes:
        while len(self._buffer) < n and not self._eof:
            await self._fill(n - len(self._buffer))
        if len(self._buffer) < n:
            partial = bytes(self._buffer)
            self._buffer.clear()
            raise asyncio.IncompleteReadError(partial, n)
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def at_eof(self) -> bool:
        return self._eof and not self._buffer


class StreamWriter:
    """Writes to a fencepost connection, like ``asyncio.StreamWriter``: ``write``
    starts sending at once, ``drain`` waits only while more than the high-water mark
    is queued (flow control), and ``write_eof``/``close`` send what was written first."""

    #: ``drain`` returns once no more than this many bytes wait to be handed to the transport.
    HIGH_WATER = 64 * 1024

    def __init__(self, sock: Socket) -> None:
        self._sock = sock
        self._pending: collections.deque = collections.deque()
        self._pending_bytes = 0
        self._flusher: Optional[asyncio.Task] = None
        self._eof_requested = False
        self._error: Optional[BaseException] = None
        self._drained = asyncio.Event()
        self._drained.set()
        self._closed: Optional[asyncio.Future] = None

    def write(self, data: bytes) -> None:
        if self._eof_requested:
            raise RuntimeError("write after write_eof() or close()")
        data = bytes(data)
        if not data:
            return
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes > self.HIGH_WATER:
            self._drained.clear()
        self._kick()

    def writelines(self, data) -> None:
        for chunk in data:
            self.write(chunk)

    def _kick(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self._pending:
                chunk = self._pending[0]
                await _await(self._sock._conn.sendall_async(chunk))
                self._pending.popleft()
                self._pending_bytes -= len(chunk)
                if self._pending_bytes <= self.HIGH_WATER:
                    self._drained.set()
            if self._eof_requested:
                self._sock.shutdown_write()
        except BaseException as exc:  # noqa: BLE001 - handed to the next drain()
            self._error = exc
            self._pending.clear()
            self._pending_bytes = 0
            self._drained.set()
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def drain(self) -> None:
        """Waits until the queue is below the high-water mark; raises the send's error if one failed."""
        await self._drained.wait()
        if self._error is not None:
            raise self._error

    async def _flushed(self) -> None:
        while self._flusher is not None and not self._flusher.done():
            await asyncio.shield(self._flusher)
        if self._error is not None:
            raise self._error

    def write_eof(self) -> None:
        """Finishes the stream after everything written so far."""
        if self._eof_requested:
            return
        self._eof_requested = True
        if self._pending:
            self._kick()
        else:
            self._sock.shutdown_write()

    def can_write_eof(self) -> bool:
        return True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self._sock.getpeername()
        if name == "socket":
            return self._sock
        return default

    def close(self) -> None:
        if self._closed is None:
            self._closed = asyncio.get_running_loop().create_task(self._finish())

    async def _finish(self, timeout: float = 10.0) -> None:
        self._eof_requested = True
        try:
            await self._flushed()
            await asyncio.wait_for(_await(self._sock._conn.close_async()), timeout)
        except asyncio.TimeoutError:
            pass  # the close goes on in the background
        finally:
            self._sock._closed = True
            if self._sock._endpoint is not None:
                self._sock._endpoint.shutdown()

    def is_closing(self) -> bool:
        return self._closed is not None

    async def wait_closed(self) -> None:
        if self._closed is not None:
            await self._closed


async def open_connection(host: str, port: int, connect_timeout: float = 10.0, **options: Any) -> Tuple[StreamReader, StreamWriter]:
    """Connects and returns ``(reader, writer)`` like ``asyncio.open_connection``."""
    _check_address((host, port), "address")
    bind_host = "::" if ":" in host else "0.0.0.0"
    endpoint = _call(_core.Endpoint.bind, bind_host, 0, False, _options(options), connect_timeout)
    try:
        native = await _await(endpoint.connect_async(host, port))
    except BaseException:
        endpoint.shutdown()
        raise
    sock = Socket(native, endpoint)
    return StreamReader(sock), StreamWriter(sock)


class Server:
    """What ``start_server`` returns: serves until closed."""

    def __init__(self, listener: Listener, callback: Callable[[StreamReader, StreamWriter], Awaitable[None]], loop) -> None:
        self._listener = listener
        self._callback = callback
        self._loop = loop
        self._tasks: set = set()
        self._accepting = loop.create_task(self._accept_loop())

    @property
    def address(self) -> Address:
        return self._listener.getsockname()

    async def _accept_loop(self) -> None:
        while True:
            native = await _await(self._listener._endpoint.accept_async())
            if native is None:  # the listener was closed
                return
            sock = Socket(native)
            task = self._loop.create_task(self._callback(StreamReader(sock), StreamWriter(sock)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        self._listener.close()

    async def wait_closed(self) -> None:
        await self._accepting

    async def serve_forever(self) -> None:
        await self._accepting

    async def __aenter__(self) -> "Server":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
        await self.wait_closed()


async def start_server(client_connected_cb: Callable[[StreamReader, StreamWriter], Awaitable[None]], host: str, port: int, **options: Any) -> Server:
    """Serves fencepost connections, calling ``client_connected_cb(reader, writer)``
    for each, like ``asyncio.start_server``."""
    listener = listen((host, port), **options)
    return Server(listener, client_connected_cb, asyncio.get_running_loop())


__all__ = [
    "ConnectionLost",
    "KeyPair",
    "Listener",
    "Refused",
    "Server",
    "Socket",
    "StreamReader",
    "StreamWriter",
    "Timeout",
    "connect",
    "keygen",
    "public_key",
    "listen",
    "open_connection",
    "start_server",
]
