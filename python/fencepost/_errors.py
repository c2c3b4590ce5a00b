"""The exceptions fencepost raises: one hierarchy rooted in FencepostError."""

from __future__ import annotations


class FencepostError(Exception):
    """Base class of every error fencepost raises on purpose."""


class OptionError(FencepostError, ValueError):
    """An option has a value fencepost cannot use; names the option and the accepted form."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"--{option}: {message}")
        self.option = option
        self.message = message


def option_error_from_native(exc: ValueError) -> OptionError:
    """The native module raises ValueError((option, message)); give it our type."""
    if isinstance(exc, OptionError):
        return exc
    args = exc.args
    if len(args) == 2 and all(isinstance(a, str) for a in args):
        return OptionError(args[0], args[1])
    if len(args) == 1 and isinstance(args[0], tuple) and len(args[0]) == 2:
        return OptionError(*args[0])
    return OptionError("?", str(exc))


class ControllerError(FencepostError, RuntimeError):
    """A congestion controller written in Python raised; the message has its traceback."""
