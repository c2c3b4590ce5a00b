"""The ``fencepost`` command."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from . import sim
from ._errors import FencepostError, OptionError

# (flag, metavar, help) for every scenario option `fencepost sim` exposes.
SIM_OPTIONS = [
    ("--workload", "bulk|echo", "bulk: send --bytes and close; echo: the seed's 1000 messages of 200-400 B, 2-20 ms apart, echoed back (default bulk)"),
    ("--bytes", "SIZE", "bytes to send in the bulk workload, e.g. 1000000, 64kB, 100MB (default 1MB)"),
    ("--messages", "N", "messages in the echo workload (default 1000)"),
    ("--delay", "DURATION", "one-way propagation delay, e.g. 10ms (default 10ms)"),
    ("--jitter", "DURATION", "each packet's delay varies uniformly by up to this much (default 0)"),
    ("--keep-order", "BOOL", "jitter never reorders packets: true or false (default false)"),
    ("--loss", "P", "random loss in both directions, 10%% or 0.1 (default 0)"),
    ("--loss-up", "P", "loss client to server (overrides --loss)"),
    ("--loss-down", "P", "loss server to client (overrides --loss)"),
    ("--loss-model", "MODEL", "bernoulli (default) or gilbert:p=P,r=R[,good=G,bad=B] (bursty loss)"),
    ("--rate", "RATE", "bottleneck rate in both directions, e.g. 100mbit (default unlimited)"),
    ("--trace", "FILE", "mahimahi bandwidth trace for both directions (instead of --rate)"),
    ("--queue", "LIMIT", "droptail queue before the bottleneck: 64kB, 100pkt or unlimited (default)"),
    ("--dup", "P", "probability a packet is duplicated (default 0)"),
    ("--arq", "fence|window", "loss recovery: fence (resend only holes, default) or window (cumulative acks only)"),
    ("--cc", "CC", "congestion control: none[:window=N,rate=R,pacing=on|off] or tahoe[:iw=N,ssthresh=N,pacing=on|off] (default: the profile's)"),
    ("--profile", "seed|default", "transport profile (default default)"),
    ("--packet-size", "BYTES", "data payload per packet (default: the profile's; 256 in seed, 1458 in default)"),
    ("--idle-timeout", "DURATION", "end the connection after this long without hearing from the peer (default: the profile's)"),
    ("--seed", "N", "seed for every random choice of the run (default 1)"),
    ("--timeout", "DURATION", "bound on the run's virtual time (default 3600s)"),
]


def _add_sim_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sim",
        help="one simulated run",
        description="Run one transfer over a simulated link in virtual time and print what happened.",
    )
    for flag, metavar, help_text in SIM_OPTIONS:
        p.add_argument(flag, metavar=metavar, help=help_text)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    p.set_defaults(handler=_cmd_sim)


def _given_options(args: argparse.Namespace) -> dict:
    out = {}
    for flag, _, _ in SIM_OPTIONS:
        name = flag[2:].replace("-", "_")
        value = getattr(args, name)
        if value is not None:
            out[name] = value
    return out


def _mbit(bps: float) -> str:
    return f"{bps / 1e6:.3f} Mbit/s" if bps >= 1e5 else f"{bps / 1e3:.1f} kbit/s"


def format_summary(r: sim.SimResult) -> str:
    o = r.options
    loss = f"{o.get('loss-up', o.get('loss'))}/{o.get('loss-down', o.get('loss'))}" if o.get("loss-model") == "bernoulli" else o.get("loss-model")
    bandwidth = o.get("rate") or (f"trace {o['trace']}" if o.get("trace") else "unlimited")
    size = f"{r.bytes_expected:,} B" if r.workload == "bulk" else f"{o.get('messages')} messages, {r.bytes_expected:,} B"
    lines = [
        f"{r.workload} {size} | profile {r.profile}, arq {r.arq}, cc {r.cc}, payload {r.payload_size} B",
        f"link: delay {o.get('delay')} ± {o.get('jitter')}, loss {loss} (up/down), {bandwidth}, queue {o.get('queue')}, dup {o.get('dup')}, seed {r.seed}",
    ]
    verdict = "integrity OK (SHA-256 match)" if r.integrity_ok else f"INCOMPLETE: {r.bytes_delivered:,} of {r.bytes_expected:,} B"
    closing = "closed gracefully" if r.close_ok else "did not close gracefully"
    lines.append(f"result: {r.status} — {verdict}, {closing}" + (f" ({r.error})" if r.error else ""))
    lines.append(f"time to completion {r.duration_s:.3f} s (virtual), goodput {_mbit(r.goodput_bps)}")
    lines.append(
        f"packets sent {r.packets_sent:,}: data {r.data_packets_sent:,} (retransmissions {r.retransmissions:,}), acks {r.acks_sent:,}; peer sent {r.peer_packets_sent:,}"
    )
    if r.rtt_mean_ms is not None:
        lines.append(f"RTT mean {r.rtt_mean_ms:.2f} ms, p95 {r.rtt_p95_ms:.2f} ms ({r.rtt_samples:,} samples)")
    lines.append(
        f"acks received {r.acks_received:,} (duplicate {r.duplicate_acks_received:,}), congestion events {r.congestion_events:,}, timeouts {r.retransmission_timeouts:,}; link drops {r.link_drops:,}"
    )
    return "\n".join(lines)


def _cmd_sim(args: argparse.Namespace) -> int:
    result = sim.run(**_given_options(args))
    if args.json:
        print(json.dumps(result.as_dict() | {"options": dict(result.options)}, sort_keys=False))
    else:
        print(format_summary(result))
    return 0 if result.integrity_ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fencepost",
        description="fencepost: a sliding-fence transport over UDP and a lab for lossy networks.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    _add_sim_parser(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except OptionError as exc:
        print(f"fencepost {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except FencepostError as exc:
        print(f"fencepost {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"fencepost {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
