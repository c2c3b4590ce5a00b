"""The option registry, read from the native module: every command's flags and
the Python API's keyword arguments come from it, and every value is checked
by its one unit parser (``fencepost-spec``). Nothing here knows an option by name."""

from __future__ import annotations

import argparse
import json
from functools import lru_cache
from typing import Any, Iterable, Mapping, Optional

from . import _core
from ._traces import TRACE_OPTIONS
from ._traces import resolve as resolve_trace


@lru_cache(maxsize=None)
def specs() -> tuple:
    """Every option: dicts with name, scope, kind, metavar, default, help, choices,
    commands, per_flow, per_direction, repeatable, aliases."""
    return tuple(json.loads(_core.option_specs()))


def for_command(command: str) -> list:
    return [s for s in specs() if command in s["commands"]]


@lru_cache(maxsize=None)
def _kinds() -> dict:
    kinds = {}
    for s in specs():
        kinds[s["name"]] = s["kind"]
        for alias in s["aliases"]:
            kinds[alias] = s["kind"]
        if s["per_direction"]:
            kinds[s["name"] + "-up"] = s["kind"]
            kinds[s["name"] + "-down"] = s["kind"]
    return kinds


def option_value(name: str, value: Any) -> str:
    """A value in the commands' notation: strings as they are; numbers in the
    option's unit (seconds for durations, bit/s for rates, bytes for sizes,
    fractions for probabilities); booleans as true/false; a
    :class:`fencepost.Controller` class or instance as the ``cc`` it registers."""
    if name == "cc":
        from .controller import controller_name

        registered = controller_name(value)
        if registered is not None:
            return registered
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        kind = _kinds().get(name)
        text = repr(value) if isinstance(value, float) else str(value)
        if kind == "duration":
            return f"{text}s"
        if kind == "rate":
            return f"{text}bit"
        return text
    return str(value)


def normalize_options(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(option, value) pairs in the commands' notation, names with dashes; ``None``
    values are left out; a list or tuple gives the option once per element (one
    value per flow, or several link events), in order; a trace given by the name
    of a shipped trace becomes its path."""
    pairs = []
    for key, value in options.items():
        if value is None:
            continue
        name = key.replace("_", "-")
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if name in TRACE_OPTIONS:
            # A shipped trace may be named without its path.
            values = [resolve_trace(v, name) for v in values]
        pairs.extend((name, option_value(name, v)) for v in values)
    return pairs


def _help(spec: dict, command: str, suffix: str = "") -> str:
    text = spec["help"] + suffix
    # `send` takes --bytes or --time explicitly; the workload defaults are the simulator's.
    if spec["default"] and not (command == "send" and spec["scope"] == "workload"):
        text += f" (default: {spec['default']})"
    return text.replace("%", "%%")  # argparse formats help with %


def add_arguments(parser: argparse.ArgumentParser, command: str, sweep: bool = False, skip: Iterable[str] = ()) -> None:
    """Adds every option of ``command`` as a flag. Options given once per flow, and
    repeatable ones, may be given several times. In a sweep every flag also takes a
    comma-separated list of values to sweep."""
    skip = set(skip)
    for spec in for_command(command):
        if spec["name"] in skip:
            continue
        metavar = spec["metavar"] + ("[,...]" if sweep else "")
        many = spec["repeatable"] or (spec["per_flow"] and command in ("sim", "sweep"))
        extra = {"action": "append"} if many else {}
        if spec["kind"] == "switch":
            # A switch given alone means on: `--insecure` as well as `--insecure true`.
            extra.update(nargs="?", const="true")
        suffix = ""
        if spec["per_flow"] and many:
            suffix = "; once per flow for different values"
        if spec["repeatable"]:
            suffix = ""
        parser.add_argument("--" + spec["name"], *("--" + a for a in spec["aliases"]), dest=_dest(spec["name"]), metavar=metavar, help=_help(spec, command, suffix), **extra)
        if spec["per_direction"]:
            for direction, which in (("up", "client to server (the link's first host to its second)"), ("down", "the other way")):
                parser.add_argument(f"--{spec['name']}-{direction}", dest=_dest(f"{spec['name']}-{direction}"), metavar=metavar,
                                    help=f"as --{spec['name']}, {which} only".replace("%", "%%"))


def _dest(name: str) -> str:
    return "opt_" + name.replace("-", "_")


def given_options(args: argparse.Namespace, command: str) -> dict:
    """The options given on the command line, by canonical name (a list where given several times)."""
    out: dict = {}
    for spec in for_command(command):
        names = [spec["name"]]
        if spec["per_direction"]:
            names += [spec["name"] + "-up", spec["name"] + "-down"]
        for name in names:
            value = getattr(args, _dest(name), None)
            if value is None:
                continue
            if isinstance(value, list) and len(value) == 1:
                value = value[0]
            out[name] = value
    return out


def check(command: str, options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Checks options for ``command`` (raises ValueError((option, message)) from the native module)."""
    return _core.check_options(command, normalize_options(options))


__all__ = ["add_arguments", "check", "for_command", "given_options", "normalize_options", "option_value", "specs"]
