"""fencepost: a reliable transport over UDP for lossy links, and a lab for
measuring transports under bad networks.

The sliding fence: the receiver acknowledges the highest contiguous packet plus
a bitmap of the packets after it, so the sender resends only the holes.
"""

from __future__ import annotations

from . import sim
from ._core import __version__
from ._errors import ControllerError, FencepostError, OptionError
from .controller import Ack, Controller, Loss
from .sim import FlowResult, LinkResult, LinkStats, SimResult
from .net import ConnectionLost, KeyPair, Refused, Timeout, connect, keygen, listen, open_connection, public_key, start_server
from .sweep import Experiment, ExperimentError, sweep

__all__ = [
    "Ack",
    "Controller",
    "Loss",
    "ConnectionLost",
    "ControllerError",
    "Refused",
    "Timeout",
    "connect",
    "KeyPair",
    "keygen",
    "listen",
    "public_key",
    "open_connection",
    "start_server",
    "Experiment",
    "ExperimentError",
    "FencepostError",
    "FlowResult",
    "LinkResult",
    "LinkStats",
    "OptionError",
    "SimResult",
    "__version__",
    "sim",
    "sweep",
]
