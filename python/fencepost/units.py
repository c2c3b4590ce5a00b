"""Parsing of sizes and durations typed on the command line, with errors naming the option."""

from __future__ import annotations

import re

from ._errors import OptionError

_SIZE = {"": 1, "b": 1, "kb": 1e3, "k": 1e3, "mb": 1e6, "m": 1e6, "gb": 1e9, "g": 1e9, "kib": 1024, "mib": 1024**2, "gib": 1024**3}
_TIME = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_bytes(text: str, option: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE:
        raise OptionError(option, f"{text!r} is not a size; expected bytes like 1000000, 64kB, 100MB or 1GB")
    value = int(round(float(m.group(1)) * _SIZE[m.group(2).lower()]))
    if value <= 0:
        raise OptionError(option, f"{text!r} must be at least 1 byte")
    return value


def parse_duration(text: str, option: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _TIME:
        raise OptionError(option, f"{text!r} is not a duration; expected a number with a unit, like 10s, 500ms or 2m")
    value = float(m.group(1)) * _TIME[m.group(2).lower()]
    if value <= 0:
        raise OptionError(option, f"{text!r} must be more than 0")
    return value
