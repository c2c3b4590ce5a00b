"""Simulated runs from Python: ``fencepost.sim.run(loss="30%", delay="10ms")``.

Options are the ``fencepost sim`` options with dashes as underscores; values may
be strings in the CLI's notation (``"10%"``, ``"50mbit"``, ``"64kB"``) or numbers,
which are read as fractions (loss, dup), seconds (durations), bits per second
(rate) and bytes (sizes). A list gives one value per flow (``cc=["tahoe",
"none"]`` with ``flows=2``) or several link events.

The result classes are built from the report schema of the native module, so
they have exactly the fields the simulator reports, with its descriptions.
"""

from __future__ import annotations

import json
from dataclasses import field, fields, make_dataclass
from typing import Any, Mapping, Optional

from . import _core
from ._errors import ControllerError, OptionError, option_error_from_native
from ._options import normalize_options

_SCHEMA = json.loads(_core.report_schema())
_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "optional_float": Optional[float], "optional_str": Optional[str]}


def _fields(schema: list, nested: Mapping[str, Any]) -> list:
    out = []
    for f in schema:
        kind = f["type"]
        if kind in _TYPES:
            typ = _TYPES[kind]
        else:
            typ = nested[kind]
        # Fields that may be absent in reports from older builds get defaults.
        default = field(default=None) if kind.startswith("optional") else field(default_factory=tuple) if kind in ("flows", "links", "strings", "floats") \
            else field(default_factory=dict) if kind == "options" else None
        out.append((f["name"], typ, default) if default is not None else (f["name"], typ))
    return out


def _doc(title: str, schema: list) -> str:
    return title + "\n\n" + "\n".join(f"- ``{f['name']}``: {f['help']}" for f in schema)


LinkStats = make_dataclass("LinkStats", _fields(_SCHEMA["link_stats"], {}), frozen=True, kw_only=True)
LinkStats.__doc__ = _doc("What one direction of the bottleneck did with the packets offered to it.", _SCHEMA["link_stats"])

FlowResult = make_dataclass("FlowResult", _fields(_SCHEMA["flow"], {"floats": tuple}), frozen=True, kw_only=True)
FlowResult.__doc__ = _doc("One flow of a simulated run; the sending side is the flow's client.", _SCHEMA["flow"])

LinkResult = make_dataclass("LinkResult", _fields(_SCHEMA["link"], {"strings": tuple}), frozen=True, kw_only=True)
LinkResult.__doc__ = _doc("One direction of one link of a simulated run.", _SCHEMA["link"])


def _from_json(cls, text: str) -> "SimResult":
    raw = json.loads(text)
    return cls.from_dict(raw)


def _from_dict(cls, raw: Mapping[str, Any]) -> "SimResult":
    known = {f.name for f in fields(cls)}
    values = {k: v for k, v in raw.items() if k in known}
    for name in ("link_up", "link_down"):
        if name in values:
            stats = {f.name for f in fields(LinkStats)}
            values[name] = LinkStats(**{k: values[name].get(k, 0) for k in stats})
    flow_names = {f.name for f in fields(FlowResult)}
    series = [f["name"] for f in _SCHEMA["flow"] if f["type"] == "floats"]
    for name in series:
        if name in values:
            values[name] = tuple(values[name])
    values["flows"] = tuple(
        FlowResult(**{k: (tuple(v) if k in series else v) for k, v in f.items() if k in flow_names}) for f in raw.get("flows", ())
    )
    link_names = {f.name for f in fields(LinkResult)}
    values["links"] = tuple(
        LinkResult(**{k: (tuple(v) if k == "events" else v) for k, v in l.items() if k in link_names}) for l in raw.get("links", ())
    )
    return cls(**values)


def _to_dict(self) -> dict:
    """The report as the simulator wrote it (nested, JSON-ready)."""
    out = {}
    for f in fields(self):
        value = getattr(self, f.name)
        if f.name in ("link_up", "link_down"):
            value = {s.name: getattr(value, s.name) for s in fields(value)}
        elif f.name in ("flows", "links"):
            value = [{s.name: (list(getattr(item, s.name)) if s.name == "events" else getattr(item, s.name)) for s in fields(item)} for item in value]
        elif f.name == "options":
            value = dict(value)
        out[f.name] = value
    return out


def _as_dict(self) -> dict:
    """A flat dict of the scalar fields (link stats prefixed ``link_up_``/``link_down_``;
    the per-flow and per-link lists and the options left out)."""
    out: dict = {}
    for f in fields(self):
        value = getattr(self, f.name)
        if f.name in ("link_up", "link_down"):
            for sub in fields(value):
                out[f"{f.name}_{sub.name}"] = getattr(value, sub.name)
        elif f.name not in ("options", "flows", "links"):
            out[f.name] = value
    return out


def _summary(self) -> str:
    """The human summary ``fencepost sim`` prints."""
    return _core.report_text(json.dumps(self.to_dict()))


SimResult = make_dataclass(
    "SimResult",
    _fields(_SCHEMA["flow"] + _SCHEMA["run"], {"link_stats": LinkStats, "flows": tuple, "links": tuple, "floats": tuple, "options": Mapping[str, str]}),
    frozen=True,
    kw_only=True,
    namespace={
        "from_json": classmethod(_from_json),
        "from_dict": classmethod(_from_dict),
        "to_dict": _to_dict,
        "as_dict": _as_dict,
        "summary": _summary,
    },
)
SimResult.__doc__ = _doc(
    "One simulated run. The status fields (status, error, integrity_ok, close_ok, wrong_bytes) cover every "
    "flow; the other flow fields at the top are the first flow's; ``flows`` has every flow's.",
    _SCHEMA["flow"] + _SCHEMA["run"],
)

for _cls in (LinkStats, FlowResult, LinkResult, SimResult):
    _cls.__module__ = __name__  # pickles and prints as fencepost.sim.X

# The numeric fields a sweep summarises per condition.
METRICS = [f["name"] for f in _SCHEMA["flow"] + _SCHEMA["run"] if f["summarise"]]


def check(**options: Any) -> dict[str, str]:
    """Validates options without running; returns them with defaults filled in."""
    try:
        return dict(_core.check_options("sim", normalize_options(options)))
    except ValueError as exc:
        raise option_error_from_native(exc) from None


def run(events: Optional[str] = None, parallel: bool = False, **options: Any) -> SimResult:
    """Runs one simulated scenario and returns its result. With ``events``, the
    per-packet event log is written to that path as a qlog file (JSON-SEQ; see
    ``fencepost.events``). With ``parallel``, the run uses two threads (the flows'
    clients on one, their servers on the other) wherever it can, with the same
    result bit for bit (``docs/simulation.md``); not with ``events``.

    >>> r = run(bytes="200kB", loss="20%", delay="5ms", seed=1)
    >>> r.integrity_ok
    True
    """
    return run_with_parallelism(events=events, parallel=parallel, **options)[0]


def run_with_parallelism(events: Optional[str] = None, parallel: bool = False, **options: Any) -> tuple[SimResult, Optional[dict]]:
    """As :func:`run`, and with ``parallel`` how the run used two threads:
    ``{"apart_s": simulated seconds run apart, "one_thread_because": why it stayed on
    one thread throughout, or None}`` (None without ``parallel``)."""
    given = normalize_options(options)
    path = None if events is None else str(events)
    try:
        if parallel:
            text, apart_s, one_thread = _core.simulate_parallel(given, path)
            info: Optional[dict] = {"apart_s": apart_s, "one_thread_because": one_thread}
        else:
            text, info = _core.simulate(given, path), None
    except ValueError as exc:
        raise option_error_from_native(exc) from None
    except RuntimeError as exc:
        raise ControllerError(str(exc)) from None
    return SimResult.from_json(text), info


__all__ = ["FlowResult", "LinkResult", "LinkStats", "METRICS", "OptionError", "SimResult", "check", "normalize_options", "run", "run_with_parallelism"]
