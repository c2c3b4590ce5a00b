"""Congestion controllers written in Python.

Subclass :class:`Controller`, set ``window`` (packets that may be in flight)
and optionally ``pacing_rate`` (bytes per second), and react to acks, losses
and timeouts (``on_ack(ack)``, ``on_loss(loss)``, ``on_timeout(loss)``). Pass the class (or an instance, copied for each connection) as
``cc=`` to :func:`fencepost.sim.run`, :func:`fencepost.sweep` or the socket
API, or name it on the command line as ``--cc python:FILE:CLASS``::

    class Aimd(fencepost.Controller):
        window = 10
        def on_ack(self, ack):
            self.window += ack.new_bytes / ack.mss / self.window   # one packet per window
        def on_loss(self, loss):
            self.window = max(2, self.window / 2)

    fencepost.sim.run(cc=Aimd, loss="1%", delay="20ms")

The simulator calls Python once per ack, which costs speed: see
``bench/python_controller.py``. If a method raises, the run fails with that
error (the simulator) or the connection keeps the last window (real network).
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path
from typing import Any, Optional

from . import _core

Ack = _core.Ack
Loss = _core.Loss


class Controller:
    """Base class of congestion controllers written in Python.

    ``window`` is read after every call: packets (of ``mss`` bytes, the
    connection's datagram size, set on the instance before the first call) that
    may be in flight. ``pacing_rate`` in bytes per second spaces packets out;
    ``None`` sends each window as a burst.

    ``on_ack(ack)``: once per ack. ``ack.bytes`` newly acknowledged (datagram bytes),
    ``ack.new_bytes`` of them from packets sent after the latest loss or timeout
    (what Reno-style growth counts), ``ack.packets``, ``ack.lost_bytes``,
    ``ack.in_flight``, ``ack.rtt`` / ``ack.smoothed_rtt`` / ``ack.min_rtt`` (seconds),
    ``ack.delivery_rate`` (bytes per second, or ``None``), ``ack.app_limited``,
    ``ack.mss``, ``ack.time``.

    ``on_loss(loss)``: once per loss episode (a round trip of losses):
    ``loss.time``, ``loss.sent_time`` of the first lost packet, ``loss.lost_bytes``,
    ``loss.in_flight`` (the flight when the loss was found), ``loss.mss``.

    ``on_timeout(loss)``: the retransmission timer expired; ``loss`` as for
    ``on_loss``, with ``lost_bytes`` 0 and ``sent_time`` the expiry.

    ``wants_every_ack``, also read after every call: while true (the default)
    the peer acks every other packet, as a window that moves only as acks free
    it needs; set it false once the controller has found the path's rate (out
    of its slow start) and the connection asks for an ack per eighth of the
    flight (at most 16), as it does for the built-in controllers out of slow
    start or Startup. Fewer acks matter where the return path is narrow.
    """

    window: float = 10.0
    pacing_rate: Optional[float] = None
    wants_every_ack: bool = True
    mss: int = 1472

    def on_ack(self, ack: "Ack") -> None:
        pass

    def on_loss(self, loss: "Loss") -> None:
        pass

    def on_timeout(self, loss: "Loss") -> None:
        pass


_registered: dict[int, tuple[Any, str]] = {}


def controller_name(value: Any) -> Optional[str]:
    """The ``--cc`` name of a Controller subclass or instance (registering it once); None for anything else."""
    is_class = isinstance(value, type) and issubclass(value, Controller)
    if not is_class and not isinstance(value, Controller):
        return None
    known = _registered.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    if is_class:
        make, label = value, f"python:{value.__module__}.{value.__qualname__}"
    else:
        make, label = (lambda: copy.deepcopy(value)), f"python:{type(value).__module__}.{type(value).__qualname__}"
    name = _core.register_python_controller(make, label)
    _registered[id(value)] = (value, name)
    return name


def load_class(file: str, class_name: str):
    """The class ``class_name`` from the Python file ``file`` (for ``--cc python:FILE:CLASS``)."""
    path = Path(file)
    if not path.is_file():
        raise ValueError(f"{file}: no such file")
    module_name = f"fencepost_controller_{abs(hash(str(path.resolve())))}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"{file}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise ValueError(f"{file}: {type(exc).__name__}: {exc}") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Controller)):
        found = sorted(n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, Controller) and v is not Controller)
        raise ValueError(f"{file} has no Controller subclass named {class_name!r}; it has: {', '.join(found) or 'none'}")
    return cls


__all__ = ["Ack", "Controller", "Loss", "controller_name", "load_class"]
